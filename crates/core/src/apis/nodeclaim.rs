//! `NodeClaim` (karpenter.sh/v1, cluster-scoped): a request for one node, and what became of it.
//! Field-for-field compatible with upstream Karpenter v1. The spec is immutable once created.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::apis::common::{NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceList, Taint};
use crate::apis::conditions::Condition;
use crate::apis::nodepool::DEFAULT_EXPIRE_AFTER;
use crate::apis::validation::{self, DURATION_OR_NEVER_PATTERN, DURATION_PATTERN};

fn default_expire_after() -> String {
    DEFAULT_EXPIRE_AFTER.to_string()
}

/// The desired state of a NodeClaim.
// Each `printcolumn(...)` is its own column; clippy mistakes the repeated keys for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    status = "NodeClaimStatus",
    shortname = "nc",
    shortname = "ncs",
    category = "karpenter",
    derive = "PartialEq",
    doc = "NodeClaim is the Schema for the NodeClaims API: a request for one node and its lifecycle",
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".metadata.labels.node\\.kubernetes\\.io/instance-type"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = ".metadata.labels.karpenter\\.sh/capacity-type"
    ),
    printcolumn(
        name = "Zone",
        type_ = "string",
        json_path = ".metadata.labels.topology\\.kubernetes\\.io/zone"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeName"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "ImageID", type_ = "string", json_path = ".status.imageID", priority = 1),
    printcolumn(name = "ID", type_ = "string", json_path = ".status.providerID", priority = 1),
    printcolumn(
        name = "NodePool",
        type_ = "string",
        json_path = ".metadata.labels.karpenter\\.sh/nodepool",
        priority = 1
    ),
    printcolumn(name = "NodeClass", type_ = "string", json_path = ".spec.nodeClassRef.name", priority = 1),
    // In the wide output, as upstream's Drifted column: the default list is already seven wide.
    printcolumn(
        name = "Drifted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Drifted\")].status",
        priority = 1
    ),
    printcolumn(
        name = "Disruption",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"DisruptionReason\")].reason",
        priority = 1
    )
)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self == oldSelf", "message": "spec is immutable; delete the NodeClaim and let a new one be created instead"}
]))]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimSpec {
    /// Constraints the node's labels must meet; the instance-type requirement lists the options.
    #[serde(default)]
    #[schemars(length(max = 100), transform = validation::nodeclaim_requirements)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The resources the node must offer beyond DaemonSet overhead.
    #[serde(default)]
    pub resources: ResourceRequirements,
    /// The AKSNodeClass that configures the Azure side of the node.
    pub node_class_ref: NodeClassReference,
    /// Taints the node carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints the node starts with and that a daemon removes once ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// How long the node lives before it is replaced, or Never.
    #[serde(default = "default_expire_after")]
    #[schemars(pattern(DURATION_OR_NEVER_PATTERN))]
    pub expire_after: String,
    /// The longest the node may take to drain once its deletion starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub termination_grace_period: Option<String>,
}

/// Resource requests of a NodeClaim.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct ResourceRequirements {
    /// The sum of the pods' requests the node was launched for.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub requests: ResourceList,
}

/// The observed state of a NodeClaim.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// The name of the Node that registered for this claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The cloud provider's ID of the VM, `azure:///subscriptions/.../virtualMachines/<name>`.
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The ID of the OS image the VM runs.
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The node's total resources.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub capacity: ResourceList,
    /// The node's resources available to pods.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub allocatable: ResourceList,
    /// Launched, Registered, Initialized, Ready, Drifted, Consolidatable, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// When a pod was last added to or removed from the node; consolidateAfter counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}
