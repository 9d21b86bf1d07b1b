//! The solver's input, as plain data: pending pods, running pods, existing nodes, NodePools with
//! their instance types, and DaemonSets. Built by the controller from its cluster index and by the
//! simulator from manifests ([`crate::scheduling::from_k8s`]); the solver never sees Kubernetes objects.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::apis::{Taint, TaintEffect};
use crate::model::requirements::Requirements;
use crate::model::resources::Resources;
use crate::model::{InstanceType, NodeLabels};

/// `namespace/name`, the identity of a pod in plans and messages.
pub type PodId = String;

/// A pod as the solver sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    /// Shared: the pods of one template carry the same labels, so the cluster index keeps one copy.
    pub labels: Arc<BTreeMap<String, String>>,
    /// Effective requests: max(sum of containers, largest init container) plus pod overhead, with
    /// `pods: 1` included.
    pub requests: Resources,
    /// Required node affinity: the pod fits a node matching any one term. Each term already includes
    /// the nodeSelector. Empty means no constraint.
    pub required_terms: Vec<Requirements>,
    /// Preferred node-affinity terms, honoured when possible, heaviest first.
    pub preferred_terms: Vec<Weighted<Requirements>>,
    /// Shared, as the labels are.
    pub tolerations: Arc<[Toleration]>,
    pub topology_spread: Vec<TopologySpread>,
    pub affinity: Vec<PodAffinityTerm>,
    pub anti_affinity: Vec<PodAffinityTerm>,
    pub preferred_affinity: Vec<Weighted<PodAffinityTerm>>,
    pub preferred_anti_affinity: Vec<Weighted<PodAffinityTerm>>,
    pub host_ports: Vec<HostPort>,
    /// Zones the pod's bound volumes live in; `None` when its volumes do not pin a zone.
    pub volume_zones: Option<Vec<String>>,
    /// The node a running pod is bound to; `None` for pending pods.
    pub node_name: Option<String>,
    /// `Kind/name` of the controller that owns the pod, for reports; shared by its pods in the index.
    pub owner: Option<Arc<str>>,
}

impl Pod {
    pub fn id(&self) -> PodId {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A preference with its weight (1..100).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Weighted<T> {
    pub weight: i32,
    pub term: T,
}

/// A toleration, as `corev1.Toleration`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Empty with operator Exists tolerates every taint.
    pub key: Option<String>,
    pub operator: TolerationOperator,
    pub value: Option<String>,
    /// `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

impl Toleration {
    /// Whether this toleration tolerates `taint` (Kubernetes `ToleratesTaint`).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        match (&self.key, self.operator) {
            (None, TolerationOperator::Exists) => true,
            (None, TolerationOperator::Equal) => false,
            (Some(k), _) if *k != taint.key => false,
            (Some(_), TolerationOperator::Exists) => true,
            (Some(_), TolerationOperator::Equal) => {
                self.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
            }
        }
    }
}

/// Whether `tolerations` tolerate every NoSchedule and NoExecute taint in `taints`
/// (PreferNoSchedule never blocks). Takes the taints as an iterator, so a caller whose taints are
/// spread over several places passes them chained, with nothing collected.
pub fn tolerates_all<'a>(tolerations: &[Toleration], taints: impl IntoIterator<Item = &'a Taint>) -> bool {
    taints
        .into_iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .all(|t| tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// A topology spread constraint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TopologySpread {
    pub topology_key: String,
    pub max_skew: u32,
    pub min_domains: Option<u32>,
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// Which pods are counted (labels; `matchLabelKeys` already folded in). Only pods in the same
    /// namespace count.
    pub selector: Requirements,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    DoNotSchedule,
    ScheduleAnyway,
}

/// A pod (anti-)affinity term: pods matching `selector` in `namespaces`, per `topology_key` domain.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    pub selector: Requirements,
    /// The namespaces whose pods are considered; the pod's own namespace when the source left it empty.
    pub namespaces: Vec<String>,
    pub topology_key: String,
}

impl PodAffinityTerm {
    /// Whether `pod` is one of the pods this term selects.
    pub fn selects(&self, pod: &Pod) -> bool {
        self.namespaces.contains(&pod.namespace) && self.selector.matches(&pod.labels)
    }
}

/// A host port a container binds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostPort {
    pub port: u16,
    pub protocol: String,
    /// `0.0.0.0` (or empty) binds every address.
    pub host_ip: String,
}

impl HostPort {
    /// Whether two bindings cannot share a node.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        self.port == other.port
            && self.protocol == other.protocol
            && (wildcard(&self.host_ip) || wildcard(&other.host_ip) || self.host_ip == other.host_ip)
    }
}

/// A node that exists (or a NodeClaim in flight, with its expected labels and allocatable).
#[derive(Clone, Debug, PartialEq)]
pub struct ExistingNode {
    pub name: String,
    pub labels: NodeLabels,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    /// The NodePool that owns it, if any.
    pub nodepool: Option<String>,
    /// A NodeClaim whose node has not registered yet.
    pub in_flight: bool,
    /// Uninitialized managed nodes ignore their startup taints (they will be removed).
    pub startup_taints: Vec<Taint>,
}

/// A NodePool, ready for the solver.
#[derive(Clone, Debug)]
pub struct NodePoolInput {
    pub name: String,
    pub weight: i32,
    /// Template requirements, including `karpenter.sh/nodepool In [name]` and template labels.
    pub requirements: Requirements,
    /// Labels every node of the pool gets.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Resources the pool may still add (limits minus what its nodes already have); `None` = unlimited.
    pub remaining: Option<Resources>,
    /// The instance types of the pool's node class (the catalog for its region and settings).
    pub instance_types: Arc<Vec<InstanceType>>,
    /// `spec.replicas` of a static pool: it keeps that many nodes and the solver never opens one in it.
    pub replicas: Option<i64>,
}

/// Everything one solve needs. Pods and nodes are shared (`Arc`) with the cluster's index and
/// between the solves of one disruption pass, so building an input copies none of them.
#[derive(Clone, Debug, Default)]
pub struct SolveInput {
    /// Pods to place. Their `node_name` is not read: a pod of a node being removed keeps its own.
    pub pods: Vec<Arc<Pod>>,
    /// Pods already bound to nodes: they use capacity and count for topology.
    pub running: Vec<Arc<Pod>>,
    pub nodes: Vec<Arc<ExistingNode>>,
    pub nodepools: Vec<NodePoolInput>,
    /// DaemonSet pod templates: each new node pays for those that would land on it.
    pub daemonsets: Vec<Pod>,
    pub options: SolveOptions,
}

/// Knobs of the solver.
#[derive(Clone, Debug)]
pub struct SolveOptions {
    /// How many instance-type options a new NodeClaim lists (upstream's provider truncates to 60).
    pub max_instance_type_options: usize,
    /// Region name, for messages.
    pub region: String,
    /// What a new node whose NodePool's minValues its fitting sizes cannot meet gets.
    pub min_values_policy: MinValuesPolicy,
    /// Whether pods' preferences are honoured while they can be, or not at all.
    pub preference_policy: PreferencePolicy,
    /// Names new NodeClaims must not take besides the input's nodes: every Node and NodeClaim the
    /// caller knows, including those a disruption decision leaves out of its input.
    pub reserved_names: std::sync::Arc<std::collections::BTreeSet<String>>,
}

impl Default for SolveOptions {
    fn default() -> Self {
        Self {
            max_instance_type_options: 60,
            region: String::new(),
            min_values_policy: MinValuesPolicy::Strict,
            preference_policy: PreferencePolicy::Respect,
            reserved_names: Default::default(),
        }
    }
}

/// Upstream core's PreferencePolicy (PREFERENCE_POLICY, pkg/operator/options/options.go).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreferencePolicy {
    /// Preferred affinities, anti-affinities and ScheduleAnyway spreads are honoured while they can be,
    /// and given up one at a time when they cannot.
    #[default]
    Respect,
    /// They are given up from the start (upstream's scheduler strips them, scheduler.go).
    Ignore,
}

/// Upstream core's MinValuesPolicy (MIN_VALUES_POLICY, pkg/operator/options/options.go).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MinValuesPolicy {
    /// The pods of a new node whose fitting sizes cannot meet the minValues stay pending.
    #[default]
    Strict,
    /// The new node's minValues are lowered to what its fitting sizes meet.
    BestEffort,
}
