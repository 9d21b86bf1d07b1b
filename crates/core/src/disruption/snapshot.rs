//! The cluster as disruption sees it, as plain data: managed nodes with their NodeClaim, offering,
//! price, lifecycle times, conditions and pods; unmanaged nodes; pending pods; PDBs with their current
//! allowance; NodePools with their disruption policy and their solver pool (which carries the catalog,
//! the unavailable offerings and the remaining limits). The controller builds it from its index and the
//! simulator from manifests; nothing here reads the clock, `now` is passed to every decision.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::apis::duration::{parse_nillable, NillableDuration};
use crate::apis::nodepool::ConsolidationPolicy;
use crate::apis::NodePool;
use crate::model::requirements::Requirements;
use crate::model::resources::Resources;
use crate::model::CapacityType;
use crate::scheduling::{ExistingNode, NodePoolInput, Pod, SolveOptions};

use super::budgets::Budget;

/// Everything one disruption pass looks at.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Nodes Karpenter manages (a NodeClaim and a `karpenter.sh/nodepool` label), including
    /// NodeClaims still in flight (`node.in_flight`).
    pub nodes: Vec<ManagedNode>,
    /// Nodes Karpenter does not manage: destinations for moved pods, never candidates.
    pub unmanaged: Vec<UnmanagedNode>,
    /// Pods waiting for a node: a command must not take the room they need.
    pub pending: Vec<Arc<Pod>>,
    pub pdbs: Vec<Pdb>,
    pub nodepools: Vec<PoolPolicy>,
    /// DaemonSet pod templates: each replacement pays for those that would land on it.
    pub daemonsets: Vec<Pod>,
    /// Passed to every solve (instance-type truncation, region).
    pub solve_options: SolveOptions,
}

/// A node Karpenter manages, with the NodeClaim behind it.
#[derive(Clone, Debug)]
pub struct ManagedNode {
    /// The node as the solver sees it (name, labels, taints, allocatable, pool, in flight).
    pub node: Arc<ExistingNode>,
    pub nodeclaim: String,
    pub nodepool: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    /// $/hour of the node's offering.
    pub price_per_hour: f64,
    /// The NodeClaim's creation time (expiration counts from it).
    pub created: Timestamp,
    /// When the NodeClaim became Initialized; `None` while it is not.
    pub initialized: Option<Timestamp>,
    /// The last time a pod was bound to or removed from the node (upstream's `lastPodEventTime`).
    pub last_pod_event: Option<Timestamp>,
    /// `Drifted=True` on the NodeClaim, computed by the controller.
    pub drifted: Option<Drifted>,
    /// The node or its NodeClaim carries `karpenter.sh/do-not-disrupt: "true"`.
    pub do_not_disrupt: bool,
    /// The provisioner nominated the node for pending pods moments ago.
    pub nominated: bool,
    /// Already being disrupted or deleted: it counts against budgets and is never a candidate.
    pub marked_for_deletion: bool,
    /// The node or its NodeClaim is being deleted (a part of `marked_for_deletion`; the rest are
    /// nodes a disruption command is replacing).
    pub deleting: bool,
    /// The node's Ready condition; NotReady nodes count against budgets as upstream counts them.
    pub ready: bool,
    pub pods: Vec<NodePod>,
}

/// Why and since when a NodeClaim is drifted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drifted {
    /// upstream's reason: NodePoolDrifted, RequirementsDrifted, InstanceTypeNotFound, NodeClassDrift,
    /// K8sVersionDrift, ImageDrift (`drift::DriftReason`)
    pub reason: String,
    pub since: Timestamp,
}

/// A pod bound to a managed node, with what disruption needs beyond the solver's view.
#[derive(Clone, Debug)]
pub struct NodePod {
    pub pod: Arc<Pod>,
    pub priority: i32,
    /// `controller.kubernetes.io/pod-deletion-cost`.
    pub deletion_cost: i32,
    pub do_not_disrupt: DoNotDisrupt,
    /// `status.startTime`, from which a do-not-disrupt duration counts.
    pub started: Option<Timestamp>,
    pub kind: PodKind,
}

/// Whether a pod moves with a disruption or stays with its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodKind {
    /// Owned by a workload controller (or bare): evicted and rescheduled elsewhere.
    Workload,
    /// A DaemonSet pod: it goes away with the node and each replacement gets its own.
    DaemonSet,
    /// A static (mirror) pod: it belongs to the node.
    Mirror,
}

impl NodePod {
    /// Whether the pod must find a new place when its node goes (upstream `IsReschedulable`).
    pub fn reschedulable(&self) -> bool {
        self.kind == PodKind::Workload
    }
}

/// The `karpenter.sh/do-not-disrupt` annotation of a pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DoNotDisrupt {
    #[default]
    No,
    /// `"true"`: never voluntarily disrupted.
    Always,
    /// A duration such as `4h`: protected until that long after the pod started (upstream v1.12).
    For(Duration),
}

/// A do-not-disrupt annotation that is neither `"true"` nor a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "annotation karpenter.sh/do-not-disrupt={value:?} is neither \"true\" nor a duration; write \"true\" or a duration such as 30m or 4h"
)]
pub struct DoNotDisruptError {
    pub value: String,
}

impl DoNotDisrupt {
    /// Reads the annotation's value; `None` (no annotation) and `"false"` mean no protection.
    pub fn from_annotation(value: Option<&str>) -> Result<Self, DoNotDisruptError> {
        match value {
            None | Some("false") => Ok(DoNotDisrupt::No),
            Some("true") => Ok(DoNotDisrupt::Always),
            Some(v) => crate::apis::duration::parse(v)
                .map(DoNotDisrupt::For)
                .map_err(|_| DoNotDisruptError { value: v.to_string() }),
        }
    }

    /// `Some(None)` when protection has no end, `Some(Some(left))` while a duration runs, `None` when
    /// the pod is not protected (any more). A duration counts from the pod's start; a pod that has not
    /// started yet is protected for the whole duration.
    pub fn active(&self, started: Option<Timestamp>, now: Timestamp) -> Option<Option<Duration>> {
        match *self {
            DoNotDisrupt::No => None,
            DoNotDisrupt::Always => Some(None),
            DoNotDisrupt::For(d) => {
                let Some(start) = started else { return Some(Some(d)) };
                let elapsed =
                    Duration::from_secs(now.as_second().saturating_sub(start.as_second()).max(0) as u64);
                d.checked_sub(elapsed).filter(|left| !left.is_zero()).map(Some)
            }
        }
    }
}

/// A node Karpenter does not manage and the pods on it.
#[derive(Clone, Debug)]
pub struct UnmanagedNode {
    pub node: Arc<ExistingNode>,
    pub pods: Vec<Arc<Pod>>,
}

/// A PodDisruptionBudget with its current allowance.
#[derive(Clone, Debug)]
pub struct Pdb {
    pub namespace: String,
    pub name: String,
    /// `None` selects no pod (Kubernetes: a null selector matches nothing).
    pub selector: Option<Requirements>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
}

impl Pdb {
    pub fn selects(&self, pod: &Pod) -> bool {
        pod.namespace == self.namespace && self.selector.as_ref().is_some_and(|s| s.matches(&pod.labels))
    }

    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A NodePool's disruption policy, and the pool as the solver sees it (its catalog, unavailable
/// offerings and remaining limits) for replacements.
#[derive(Clone, Debug)]
pub struct PoolPolicy {
    pub name: String,
    pub consolidation_policy: ConsolidationPolicy,
    pub consolidate_after: NillableDuration,
    pub expire_after: NillableDuration,
    /// Parsed budgets; with none, nothing limits disruptions (as upstream treats an empty list).
    pub budgets: Vec<Budget>,
    /// `spec.limits`, for reports; the solver pool's `remaining` carries the headroom.
    pub limits: Option<Resources>,
    /// `None` when the pool cannot launch (not Ready, or its class is missing): its nodes may still be
    /// removed when their pods fit elsewhere, but never replaced from this pool.
    pub solver: Option<NodePoolInput>,
    /// `spec.replicas` of a static pool ([`super::static_pools`]).
    pub replicas: Option<i64>,
}

/// A NodePool whose disruption settings cannot be read; `field` is the path in the NodePool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NodePool {pool}: {field}: {message}")]
pub struct PolicyError {
    pub pool: String,
    pub field: String,
    pub message: String,
}

impl PoolPolicy {
    /// The policy of `pool`, with `solver` as built for provisioning (`None` when it cannot launch).
    pub fn from_nodepool(pool: &NodePool, solver: Option<NodePoolInput>) -> Result<PoolPolicy, PolicyError> {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let err =
            |field: &str, message: String| PolicyError { pool: name.clone(), field: field.into(), message };
        let disruption = &pool.spec.disruption;
        let consolidate_after = parse_nillable(&disruption.consolidate_after)
            .map_err(|e| err("spec.disruption.consolidateAfter", e.to_string()))?;
        let expire_after = parse_nillable(&pool.spec.template.spec.expire_after)
            .map_err(|e| err("spec.template.spec.expireAfter", e.to_string()))?;
        let budgets = Budget::parse_all(&disruption.budgets).map_err(|e| err(&e.field, e.message))?;
        let limits = match &pool.spec.limits {
            None => None,
            Some(list) => {
                let text: BTreeMap<String, String> =
                    list.iter().map(|(k, v)| (k.clone(), v.as_str().to_string())).collect();
                Some(Resources::parse(&text).map_err(|e| err("spec.limits", e.to_string()))?)
            }
        };
        Ok(PoolPolicy {
            name,
            consolidation_policy: disruption.consolidation_policy,
            consolidate_after,
            expire_after,
            budgets,
            limits,
            solver,
            replicas: pool.spec.replicas,
        })
    }

    /// The pool as a place for new NodeClaims in a simulation: `None` when it cannot launch or is
    /// static (its NodeClaims come from its replica count, never from where pods fit).
    pub fn launchable(&self) -> Option<&NodePoolInput> {
        self.solver.as_ref().filter(|_| self.replicas.is_none())
    }
}

/// $/hour of `instance_type` in `zone` as `capacity_type` in `pool`'s catalog; the type's price for
/// the capacity type elsewhere when that offering is gone; `None` when the pool or type is unknown.
pub fn offering_price(
    pools: &[PoolPolicy],
    pool: &str,
    instance_type: &str,
    zone: &str,
    capacity_type: CapacityType,
) -> Option<f64> {
    let types = &pools.iter().find(|p| p.name == pool)?.solver.as_ref()?.instance_types;
    let it = types.iter().find(|t| t.name == instance_type)?;
    it.offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == capacity_type)
        .map(|o| o.price)
        .or_else(|| it.price(capacity_type))
}
