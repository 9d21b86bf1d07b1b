//! `NodePool` (karpenter.sh/v1, cluster-scoped): what nodes may be launched, for which pods, and
//! how they may be disrupted. Field-for-field compatible with upstream Karpenter v1.

use std::collections::BTreeMap;

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::apis::common::{NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceList, Taint};
use crate::apis::conditions::Condition;
use crate::apis::hash::{self, hash_value, HashError};
use crate::apis::validation::{
    self, BUDGET_DURATION_PATTERN, BUDGET_NODES_PATTERN, CRON_PATTERN, DURATION_OR_NEVER_PATTERN,
    DURATION_PATTERN,
};

/// Default lifetime of a node before it is replaced (upstream core `nodepool_default.go`).
pub const DEFAULT_EXPIRE_AFTER: &str = "720h";
/// Default share of a pool's nodes that may be disrupted at once (upstream core).
pub const DEFAULT_BUDGET_NODES: &str = "10%";

/// The desired state of a NodePool.
// Each `printcolumn(...)` is its own column; clippy mistakes the repeated keys for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    status = "NodePoolStatus",
    shortname = "np",
    shortname = "nps",
    category = "karpenter",
    derive = "PartialEq",
    doc = "NodePool is the Schema for the NodePools API: which nodes may be launched, for which pods, and how they are disrupted",
    printcolumn(name = "NodeClass", type_ = "string", json_path = ".spec.template.spec.nodeClassRef.name"),
    printcolumn(name = "Nodes", type_ = "string", json_path = ".status.resources.nodes"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Weight", type_ = "integer", json_path = ".spec.weight", priority = 1),
    printcolumn(name = "CPU", type_ = "string", json_path = ".status.resources.cpu", priority = 1),
    printcolumn(name = "Memory", type_ = "string", json_path = ".status.resources.memory", priority = 1),
    scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.nodes")
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.replicas) == has(oldSelf.replicas)",
        "message": "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"
    },
    {
        "rule": "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))",
        "message": "only 'limits.nodes' is supported on static NodePools"
    },
    {
        "rule": "!has(self.replicas) || !has(self.weight)",
        "message": "'weight' is not supported on static NodePools"
    }
]))]
pub struct NodePoolSpec {
    /// The template of the NodeClaims this pool creates.
    pub template: NodeClaimTemplate,
    /// How nodes of this pool may be disrupted.
    #[serde(default)]
    pub disruption: Disruption,
    /// Upper bounds on the total resources (cpu, memory, nodes, nvidia.com/gpu, ...) of the pool's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
    /// Priority among NodePools: pools with a higher weight are tried first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// A static NodePool: keep exactly this many nodes, whatever the pods ask (upstream core v1.14,
    /// alpha). Consolidation leaves such a pool alone; drift and expiry still replace its nodes. Only
    /// `limits.nodes` applies, and `weight` is not allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

/// The template of a NodeClaim: labels and annotations for the node, and the claim's spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: NodeClaimTemplateSpec,
}

/// Labels and annotations put on every node of the pool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct TemplateMetadata {
    /// Labels for the node; keys in restricted domains (kubernetes.io, karpenter.sh, ...) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = validation::template_labels)]
    pub labels: BTreeMap<String, String>,
    /// Annotations for the node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

fn default_expire_after() -> String {
    DEFAULT_EXPIRE_AFTER.to_string()
}

/// The spec part of a NodePool's NodeClaim template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Constraints on the nodes' labels (instance type, zone, capacity type, arch, ...).
    #[serde(default)]
    #[schemars(length(max = 100), transform = validation::nodepool_requirements)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The AKSNodeClass that configures the Azure side of the nodes.
    pub node_class_ref: NodeClassReference,
    /// Taints every node of the pool carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints a node starts with and that a daemon removes once the node is ready for work.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// How long a node lives before it is replaced, such as 720h, or Never.
    #[serde(default = "default_expire_after")]
    #[schemars(pattern(DURATION_OR_NEVER_PATTERN))]
    pub expire_after: String,
    /// The longest a node may take to drain once its deletion starts, such as 1h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub termination_grace_period: Option<String>,
}

/// Whether consolidation may replace or remove nodes that still run pods.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ConsolidationPolicy {
    /// Only nodes without workload pods are removed.
    WhenEmpty,
    /// Empty nodes are removed and under-used nodes are replaced by cheaper capacity, for any saving.
    #[default]
    WhenEmptyOrUnderutilized,
    /// As WhenEmptyOrUnderutilized, but a consolidation must save a share of the pool's price at least
    /// half the share of the pool's disruption it causes (upstream v1.14 `Balanced`, k = 2).
    Balanced,
}

/// Why a node is being disrupted; budgets may apply to some reasons only.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
}

fn default_consolidate_after() -> String {
    "0s".to_string()
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget { nodes: DEFAULT_BUDGET_NODES.to_string(), schedule: None, duration: None, reasons: vec![] }]
}

/// How the nodes of a pool may be disrupted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// WhenEmpty or WhenEmptyOrUnderutilized.
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    /// How long a node must have seen no pod added or removed before it is consolidated, or Never.
    #[serde(default = "default_consolidate_after")]
    #[schemars(pattern(DURATION_OR_NEVER_PATTERN))]
    pub consolidate_after: String,
    /// Limits on how many nodes may be disrupted at once, optionally during a schedule.
    #[serde(default = "default_budgets")]
    #[schemars(length(max = 50), transform = validation::budgets)]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Self {
            consolidation_policy: ConsolidationPolicy::default(),
            consolidate_after: default_consolidate_after(),
            budgets: default_budgets(),
        }
    }
}

fn default_budget_nodes() -> String {
    DEFAULT_BUDGET_NODES.to_string()
}

/// A limit on concurrent disruptions.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct Budget {
    /// How many nodes may be disrupted at once: a number such as 5, or a percentage such as 10%.
    #[serde(default = "default_budget_nodes")]
    #[schemars(pattern(BUDGET_NODES_PATTERN))]
    pub nodes: String,
    /// When the budget is active, as a cron expression in UTC (with `duration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(CRON_PATTERN))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each `schedule` time, such as 8h or 30m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(BUDGET_DURATION_PATTERN))]
    pub duration: Option<String>,
    /// The disruption reasons this budget applies to; all reasons when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<DisruptionReason>,
}

/// The observed state of a NodePool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct NodePoolStatus {
    /// Resources in use by the pool's nodes, including a `nodes` count.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: ResourceList,
    /// The number of nodes of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    /// Ready, NodeClassReady, ValidationSucceeded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The format of `karpenter.sh/nodepool-hash`. Upstream is at "v3" (core `pkg/apis/v1/nodepool.go`),
/// but our hash is computed differently (FNV-1a over canonical JSON, not Go's hashstructure), so a
/// claim stamped by upstream Karpenter must not be compared with ours: a different version makes the
/// comparison skip it and the controller re-stamp it, which is what upstream's version bumps are for.
/// Reusing "v3" would mark every node of a cluster migrated from upstream as drifted at once.
pub const NODEPOOL_HASH_VERSION: &str = "karpenter-azure-v1";

impl NodePool {
    /// Whether the pool keeps a fixed node count (`spec.replicas` set).
    pub fn is_static(&self) -> bool {
        self.spec.replicas.is_some()
    }

    /// The NodePool's hash: `spec.template` without its requirements (judged on labels instead) and
    /// resources. Labels, annotations, taints, startup taints, nodeClassRef, expireAfter and
    /// terminationGracePeriod count; budgets, limits, weight and the disruption block are outside the
    /// template, so they never drift nodes (upstream `NodePool.Hash`, fields tagged `hash:"ignore"`).
    pub fn hash(&self) -> Result<String, HashError> {
        let object = format!("NodePool {}", self.metadata.name.as_deref().unwrap_or_default());
        let mut template = hash::to_value(&self.spec.template, &object)?;
        if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("requirements");
            spec.remove("resources");
        }
        Ok(hash_value(&template))
    }
}
