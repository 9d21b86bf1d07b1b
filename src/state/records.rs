//! Compact records of the watched objects: the solver's view of each (converted once, on arrival, by
//! the same [`from_k8s`] functions the simulator uses) plus the few status fields provisioning and
//! disruption read. Whole objects are dropped after conversion.

use crate::disruption::repair::NodeCondition;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::apis::conditions::{self, Condition, ConditionStatus};
use crate::apis::{NodeClaim, Taint};
use crate::disruption::Drifted;
use crate::model::labels::{
    ANNOTATION_DO_NOT_DISRUPT, ANNOTATION_POD_DELETION_COST, LABEL_INITIALIZED, LABEL_NODEPOOL,
    TAINT_UNREGISTERED,
};
use crate::model::requirements::Requirements;
use crate::model::resources::{Resources, NODES};
use crate::model::{node_labels, LabelLookup, NodeLabels};
use crate::scheduling::from_k8s::{self, FromK8sError, PodContext};
use crate::scheduling::{ExistingNode, Pod};

/// Set by the kubelet on the API copy of a static pod.
pub const ANNOTATION_MIRROR_POD: &str = "kubernetes.io/config.mirror";

/// Taints a node carries only while it comes up; an uninitialized managed node is judged without them
/// (upstream core `pkg/scheduling/taints.go` KnownEphemeralTaints, plus the `readiness.k8s.io/` prefix).
const EPHEMERAL_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    TAINT_UNREGISTERED,
];
const EPHEMERAL_TAINT_PREFIX: &str = "readiness.k8s.io/";

/// Whether a taint only marks a node that is still coming up.
pub fn is_ephemeral_taint(taint: &Taint) -> bool {
    EPHEMERAL_TAINTS.contains(&taint.key.as_str()) || taint.key.starts_with(EPHEMERAL_TAINT_PREFIX)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    pub fn parse(phase: Option<&str>) -> Self {
        match phase {
            Some("Running") => Self::Running,
            Some("Succeeded") => Self::Succeeded,
            Some("Failed") => Self::Failed,
            Some("Unknown") => Self::Unknown,
            _ => Self::Pending,
        }
    }

    /// Succeeded and Failed pods hold no resources and never run again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

/// A pod: the solver's view plus what decides whether it is provisionable or blocks disruption.
#[derive(Clone, Debug, PartialEq)]
pub struct PodRecord {
    /// `pod.node_name` is `spec.nodeName`; `pod.owner` is `Kind/name` of the controller.
    pub pod: Arc<Pod>,
    pub phase: PodPhase,
    /// kube-scheduler found no node for it: `PodScheduled=False`, reason `Unschedulable`.
    pub unschedulable: bool,
    /// `status.nominatedNodeName`: the scheduler preempted for it and will bind it there.
    pub nominated_node: Option<String>,
    /// A static pod's API copy; the kubelet, not a controller, runs it.
    pub mirror: bool,
    pub deleting: bool,
    /// The raw `karpenter.sh/do-not-disrupt` value (`true` or, since upstream v1.12, a duration).
    pub do_not_disrupt: Option<String>,
    /// `spec.priority`, which weighs the pod's eviction cost.
    pub priority: i32,
    /// `controller.kubernetes.io/pod-deletion-cost` (0 when absent or not a 32-bit integer, as the
    /// ReplicaSet controller reads it).
    pub deletion_cost: i32,
    /// `status.startTime`, from which a do-not-disrupt duration counts.
    pub started: Option<Timestamp>,
    /// `metadata.uid`, so events about the pod show in `kubectl describe pod`.
    pub uid: Option<String>,
    /// The PersistentVolumeClaims its volumes name; their zones are looked up at snapshot time.
    pub volume_claims: Vec<String>,
    /// `metadata.creationTimestamp`, for the pod metrics.
    pub created: Option<Timestamp>,
    /// `Ready=True`.
    pub ready: bool,
    /// `PodScheduled=True`.
    pub scheduled: bool,
    /// Upstream's `owner` label of `karpenter_pods_state`: the self link of the first owner reference,
    /// `/apis/<apiVersion>/namespaces/<namespace>/<kind>s/<name>`; empty without one. Shared by the
    /// pods of one owner.
    pub owner_link: Arc<str>,
    /// The pod's effective limits (k8s `resourcehelper.PodLimits`), for the node metrics.
    pub limits: Resources,
    /// The Pod itself, kept only when its affinity selects namespaces by label, to convert it again
    /// when the namespaces change.
    pub source: Option<Arc<core::Pod>>,
}

/// Whether the pod's condition `type_` is True.
pub fn condition_true(p: &core::Pod, type_: &str) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == type_ && c.status == "True")
}

/// Upstream `pkg/controllers/metrics/pod/controller.go` `makeLabels`: the self link of the first owner.
fn owner_link(p: &core::Pod) -> Arc<str> {
    let owners = p.metadata.owner_references.as_deref().unwrap_or_default();
    owners.first().map_or_else(Arc::default, |o| {
        let namespace = p.metadata.namespace.as_deref().unwrap_or_default();
        let kind = o.kind.to_ascii_lowercase();
        format!("/apis/{}/namespaces/{namespace}/{kind}s/{}", o.api_version, o.name).into()
    })
}

/// Whether any pod (anti-)affinity term of the pod has a `namespaceSelector`.
fn selects_namespaces(p: &core::Pod) -> bool {
    let Some(affinity) = p.spec.as_ref().and_then(|s| s.affinity.as_ref()) else { return false };
    let required = |terms: Option<&Vec<core::PodAffinityTerm>>| {
        terms.into_iter().flatten().any(|t| t.namespace_selector.is_some())
    };
    let preferred = |terms: Option<&Vec<core::WeightedPodAffinityTerm>>| {
        terms.into_iter().flatten().any(|t| t.pod_affinity_term.namespace_selector.is_some())
    };
    let a = affinity.pod_affinity.as_ref();
    let anti = affinity.pod_anti_affinity.as_ref();
    required(a.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()))
        || preferred(a.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()))
        || required(anti.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()))
        || preferred(anti.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()))
}

impl PodRecord {
    pub fn from_k8s(p: &core::Pod, ctx: &PodContext) -> Result<Self, FromK8sError> {
        let status = p.status.as_ref();
        let annotations = p.metadata.annotations.as_ref();
        let unschedulable = status.and_then(|s| s.conditions.as_ref()).into_iter().flatten().any(|c| {
            c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
        });
        Ok(Self {
            pod: Arc::new(from_k8s::from_pod(p, ctx)?),
            phase: PodPhase::parse(status.and_then(|s| s.phase.as_deref())),
            unschedulable,
            nominated_node: status.and_then(|s| s.nominated_node_name.clone()).filter(|n| !n.is_empty()),
            mirror: annotations.is_some_and(|a| a.contains_key(ANNOTATION_MIRROR_POD)),
            deleting: p.metadata.deletion_timestamp.is_some(),
            do_not_disrupt: annotations.and_then(|a| a.get(ANNOTATION_DO_NOT_DISRUPT).cloned()),
            priority: p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
            deletion_cost: annotations
                .and_then(|a| a.get(ANNOTATION_POD_DELETION_COST))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            started: status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
            uid: p.metadata.uid.clone(),
            volume_claims: p
                .spec
                .as_ref()
                .map(|s| from_k8s::pod_claims(p.metadata.name.as_deref().unwrap_or_default(), s))
                .unwrap_or_default(),
            source: selects_namespaces(p).then(|| Arc::new(p.clone())),
            created: p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            ready: condition_true(p, "Ready"),
            scheduled: condition_true(p, "PodScheduled"),
            owner_link: owner_link(p),
            limits: p.spec.as_ref().map(from_k8s::pod_limits).unwrap_or_default(),
        })
    }

    /// The kind of the owning controller (`ReplicaSet`, `DaemonSet`, ...), if any.
    pub fn owner_kind(&self) -> Option<&str> {
        self.pod.owner.as_deref().and_then(|o| o.split('/').next())
    }

    /// DaemonSet pods are placed by their controller, and every new node already pays for them.
    pub fn is_daemonset_pod(&self) -> bool {
        self.owner_kind() == Some("DaemonSet")
    }

    /// Upstream `IsProvisionable`: marked Unschedulable by kube-scheduler, not bound, not nominated
    /// (preemption will place it), not a DaemonSet or mirror pod; and, as upstream filters them out
    /// before, not terminal and not being deleted.
    pub fn is_provisionable(&self) -> bool {
        self.unschedulable
            && self.pod.node_name.is_none()
            && self.nominated_node.is_none()
            && !self.is_daemonset_pod()
            && !self.mirror
            && !self.phase.is_terminal()
            && !self.deleting
    }
}

/// A Node: the solver's view plus the state the lifecycle and disruption read.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRecord {
    /// Labels, taints (a cordoned node carries the unschedulable taint), allocatable, NodePool label.
    pub node: Arc<ExistingNode>,
    pub provider_id: Option<String>,
    /// `metadata.uid`: deletes decided on the record are guarded by it.
    pub uid: Option<String>,
    /// What the node counts against its NodePool's limits, with `nodes: 1`.
    pub capacity: Resources,
    /// `Ready=True`.
    pub ready: bool,
    /// The `lastTransitionTime` of the Ready condition, whatever its status (node repair times how long
    /// a node has been unhealthy from it); `None` without one.
    pub ready_since: Option<k8s_openapi::jiff::Timestamp>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// Labelled `karpenter.sh/initialized=true` by the NodeClaim lifecycle.
    pub initialized: bool,
    pub deleting: bool,
    /// Annotated `karpenter.sh/do-not-disrupt: "true"`: never voluntarily disrupted.
    pub do_not_disrupt: bool,
    /// `status.nodeInfo.kubeletVersion` (`v1.34.4`), for Kubernetes-version drift.
    pub kubelet_version: Option<String>,
    /// Every condition the Node reports, for node repair's policies and the status metrics.
    pub conditions: Vec<NodeCondition>,
    /// `metadata.creationTimestamp`, for the node metrics.
    pub created: Option<Timestamp>,
    /// `metadata.deletionTimestamp`.
    pub deleted_at: Option<Timestamp>,
    /// `status.phase` (empty on current kubelets), a label of the node metrics.
    pub phase: String,
}

/// Whether the Node's `Ready` condition is True.
pub fn is_ready(node: &core::Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

impl NodeRecord {
    pub fn from_k8s(n: &core::Node) -> Result<Self, FromK8sError> {
        Self::from_k8s_sharing_labels(n, |s: &str| Arc::from(s))
    }

    /// [`Self::from_k8s`], with each label key and value made by `share` (the index's held copy).
    pub fn from_k8s_sharing_labels(
        n: &core::Node,
        share: impl FnMut(&str) -> Arc<str>,
    ) -> Result<Self, FromK8sError> {
        let node = from_k8s::node_sharing_labels(n, share)?;
        let ready = is_ready(n);
        Ok(Self {
            initialized: node.labels.label(LABEL_INITIALIZED) == Some("true"),
            node: Arc::new(node),
            provider_id: n.spec.as_ref().and_then(|s| s.provider_id.clone()).filter(|p| !p.is_empty()),
            uid: n.metadata.uid.clone(),
            capacity: from_k8s::node_capacity(n)?,
            ready,
            ready_since: n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0),
            unschedulable: n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
            deleting: n.metadata.deletion_timestamp.is_some(),
            created: n.metadata.creation_timestamp.as_ref().map(|t| t.0),
            deleted_at: n.metadata.deletion_timestamp.as_ref().map(|t| t.0),
            phase: n.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default(),
            do_not_disrupt: n
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_DO_NOT_DISRUPT))
                .is_some_and(|v| v == "true"),
            kubelet_version: n
                .status
                .as_ref()
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.kubelet_version.clone())
                .filter(|v| !v.is_empty()),
            conditions: n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .map(|c| NodeCondition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    since: c.last_transition_time.as_ref().map(|t| t.0),
                    reason: c.reason.clone().unwrap_or_default(),
                })
                .collect(),
        })
    }

    pub fn name(&self) -> &str {
        &self.node.name
    }
}

/// A NodeClaim: what was asked for, what the cloud returned, and how far its lifecycle got.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeClaimRecord {
    pub name: String,
    /// The `karpenter.sh/nodepool` label.
    pub nodepool: Option<String>,
    /// `spec.nodeClassRef.name`.
    pub node_class: String,
    /// Set when the VM was created (`Launched`); the Node registers with the same ID.
    pub provider_id: Option<String>,
    pub node_name: Option<String>,
    pub launched: bool,
    pub registered: bool,
    pub initialized: bool,
    /// `Initialized`'s lastTransitionTime while it is True: consolidateAfter counts from here when
    /// no pod event came later.
    pub initialized_at: Option<Timestamp>,
    /// `Drifted=True`: its reason, and since when (its lastTransitionTime).
    pub drifted: Option<Drifted>,
    /// `Consolidatable=True`: consolidateAfter has passed since the last pod event.
    pub consolidatable: bool,
    /// `DisruptionReason=True`: the reason the disruption loop is taking the claim away.
    pub disruption_reason: Option<String>,
    /// `status.lastPodEventTime`: when a pod was last bound to or removed from its node.
    pub last_pod_event: Option<Timestamp>,
    /// `status.imageID`, for image drift.
    pub image_id: Option<String>,
    /// The claim's annotations, among them the hashes it was stamped with at creation. Shared: the
    /// index keeps one copy of each distinct map (`state::shared`).
    pub annotations: Arc<BTreeMap<String, String>>,
    /// `status.conditions` as read, and the resourceVersion they were read at: a merge patch replaces
    /// the whole list, so a writer patches the list it read, guarded by that version.
    pub conditions: Vec<Condition>,
    pub resource_version: Option<String>,
    /// `metadata.uid`: deletes decided on the record are guarded by it.
    pub uid: Option<String>,
    pub deleting: bool,
    /// The claim's labels: the template's, then the chosen size, zone and capacity type after launch.
    /// Claims of one NodePool, size, zone and capacity type carry the same labels, and the index keeps
    /// one copy of each distinct map (`state::shared`).
    pub labels: Arc<BTreeMap<String, String>>,
    /// The `key = value` pairs the claim's single-valued `In` requirements pin, which its node will
    /// carry as labels. The rest of the requirements, among them up to 60 sizes to launch from, is
    /// read by the launch alone, from the NodeClaim.
    pub pinned: Vec<(String, String)>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// `spec.resources.requests`: what the pods it was launched for asked.
    pub requests: Resources,
    pub capacity: Resources,
    pub allocatable: Resources,
    pub created: Option<Time>,
    /// `metadata.deletionTimestamp`.
    pub deleted_at: Option<Timestamp>,
}

impl NodeClaimRecord {
    pub fn from_k8s(c: &NodeClaim) -> Result<Self, FromK8sError> {
        let status = c.status.clone().unwrap_or_default();
        let labels = c.metadata.labels.clone().unwrap_or_default();
        let is_true = |t: &str| conditions::is_true(&status.conditions, t);
        let true_condition =
            |t: &str| conditions::get(&status.conditions, t).filter(|c| c.status == ConditionStatus::True);
        let true_since = |t: &str| true_condition(t).map(|c| c.last_transition_time.0);
        let to_text = |list: &crate::apis::common::ResourceList| {
            list.iter().map(|(k, v)| (k.clone(), v.as_str().to_string())).collect::<BTreeMap<_, _>>()
        };
        let resources = |field: &str, list: &crate::apis::common::ResourceList| {
            Resources::parse(&to_text(list))
                .map_err(|source| FromK8sError::Quantity { field: field.to_string(), source })
        };
        let requirements = crate::apis::requirements::from_api(&c.spec.requirements)
            .map_err(|source| FromK8sError::Requirement { field: "spec.requirements".into(), source })?;
        let pinned = requirements
            .iter()
            .filter_map(|r| r.single_value().map(|v| (r.key().to_string(), v.to_string())))
            .collect();
        Ok(Self {
            name: c.metadata.name.clone().unwrap_or_default(),
            nodepool: labels.get(LABEL_NODEPOOL).cloned(),
            node_class: c.spec.node_class_ref.name.clone(),
            provider_id: status.provider_id.clone().filter(|p| !p.is_empty()),
            node_name: status.node_name.clone().filter(|n| !n.is_empty()),
            launched: is_true(conditions::LAUNCHED),
            registered: is_true(conditions::REGISTERED),
            initialized: is_true(conditions::INITIALIZED),
            initialized_at: true_since(conditions::INITIALIZED),
            drifted: true_condition(conditions::DRIFTED)
                .map(|c| Drifted { reason: c.reason.clone(), since: c.last_transition_time.0 }),
            consolidatable: is_true(conditions::CONSOLIDATABLE),
            disruption_reason: true_condition(conditions::DISRUPTION_REASON).map(|c| c.reason.clone()),
            last_pod_event: status.last_pod_event_time.as_ref().map(|t| t.0),
            image_id: status.image_id.clone().filter(|i| !i.is_empty()),
            annotations: Arc::new(c.metadata.annotations.clone().unwrap_or_default()),
            conditions: status.conditions.clone(),
            resource_version: c.metadata.resource_version.clone(),
            uid: c.metadata.uid.clone(),
            deleting: c.metadata.deletion_timestamp.is_some(),
            labels: Arc::new(labels),
            pinned,
            taints: c.spec.taints.clone(),
            startup_taints: c.spec.startup_taints.clone(),
            requests: resources("spec.resources.requests", &c.spec.resources.requests)?,
            capacity: resources("status.capacity", &status.capacity)?,
            allocatable: resources("status.allocatable", &status.allocatable)?,
            created: c.metadata.creation_timestamp.clone(),
            deleted_at: c.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        })
    }

    /// What the claim counts against its NodePool's limits before its Node exists: the capacity the
    /// cloud reported (empty before launch), with `nodes: 1`.
    pub fn limit_usage(&self) -> Resources {
        self.capacity.clone().with(NODES, 1)
    }

    /// The claim as capacity that is on its way: the node it will become, with the claim's labels
    /// (single-valued requirements filled in where the labels are silent, as the node will carry
    /// them), its taints and startup taints (ignored, since a daemon removes them), and the
    /// allocatable the cloud reported.
    pub fn in_flight_node(&self) -> ExistingNode {
        let mut labels: NodeLabels = node_labels(self.pinned.iter().map(|(key, value)| (key, value)));
        labels.extend(node_labels(self.labels.iter()));
        let mut taints = self.taints.clone();
        taints.extend(self.startup_taints.iter().cloned());
        ExistingNode {
            name: self.name.clone(),
            labels,
            taints,
            allocatable: self.allocatable.clone(),
            nodepool: self.nodepool.clone(),
            in_flight: true,
            startup_taints: self.startup_taints.clone(),
        }
    }
}

/// A PodDisruptionBudget, as the disruption code reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct PdbRecord {
    pub namespace: String,
    pub name: String,
    /// `None` (no selector) selects no pod in policy/v1; an empty selector selects every pod of the
    /// namespace.
    pub selector: Option<Requirements>,
    /// `status.disruptionsAllowed`: evictions the budget admits now.
    pub disruptions_allowed: i32,
}

impl PdbRecord {
    pub fn from_k8s(pdb: &PodDisruptionBudget) -> Result<Self, FromK8sError> {
        let selector = match pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) {
            Some(s) => Some(from_k8s::label_selector("spec.selector", s)?),
            None => None,
        };
        Ok(Self {
            namespace: pdb.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            name: pdb.metadata.name.clone().unwrap_or_default(),
            selector,
            disruptions_allowed: pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed),
        })
    }

    /// Whether the budget covers `pod`.
    pub fn selects(&self, pod: &Pod) -> bool {
        pod.namespace == self.namespace && self.selector.as_ref().is_some_and(|s| s.matches(&pod.labels))
    }
}
