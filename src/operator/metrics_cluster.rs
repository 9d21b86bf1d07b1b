//! The metrics that describe the cluster (upstream core `pkg/controllers/metrics/node`, `.../nodepool`,
//! `.../pod`, `pkg/controllers/state/metrics.go`, `pkg/state/cost/cost.go`): per Node, per NodePool and
//! per pod, labelled with the object's name as upstream. They are recomputed from the index on the
//! leader (`controllers::metrics`); a standby serves none of them.

use prometheus::{GaugeVec, HistogramVec, IntCounterVec};

use super::metrics::DURATION_BUCKETS;
use super::metrics_rebuilt::RebuiltGauge;
use super::metrics_registry::{Origin, Registrar};
use super::metrics_summary::{SummaryVec, OBJECTIVES};
use crate::model::labels::{LABEL_AKS_CLUSTER, WELL_KNOWN_LABELS};

const NODE: Origin = Origin::Core("pkg/controllers/metrics/node/controller.go");
const NODEPOOL: Origin = Origin::Core("pkg/controllers/metrics/nodepool/controller.go");
const POD: Origin = Origin::Core("pkg/controllers/metrics/pod/controller.go");
const STATE: Origin = Origin::Core("pkg/controllers/state/metrics.go");

/// The labels of `karpenter_pods_state`, upstream's, in upstream's order.
pub const POD_LABELS: [&str; 13] = [
    "name",
    "namespace",
    "owner",
    "node",
    "scheduled",
    "nodepool",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
    "ready",
    "managed",
];

/// The well-known label keys the node metrics carry, and the metric label of each: as upstream, the
/// part after the `/`, lower-cased, `-` as `_`; a name two keys share is taken from the first.
/// Upstream's provider adds `kubernetes.azure.com/cluster` to the well-known labels.
pub fn node_label_keys() -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    for key in WELL_KNOWN_LABELS.iter().copied().chain([LABEL_AKS_CLUSTER]) {
        let Some((_, name)) = key.split_once('/') else { continue };
        let name = name.to_ascii_lowercase().replace(['-', '.'], "_");
        if !out.iter().any(|(_, n)| *n == name) {
            out.push((key, name));
        }
    }
    out
}

/// The labels of the per-node gauges: [`node_label_keys`], then `node_name`, `phase` and `managed`.
pub fn node_labels() -> Vec<String> {
    let mut labels: Vec<String> = node_label_keys().into_iter().map(|(_, name)| name).collect();
    labels.extend(["node_name", "phase", "managed"].map(String::from));
    labels
}

pub struct ClusterMetrics {
    /// `karpenter_nodes_allocatable{<node labels>, resource_type}`, and the other per-node resource
    /// gauges below: one series per Node and resource, each with some thirty labels, kept compact
    /// ([`RebuiltGauge`]).
    pub allocatable: RebuiltGauge,
    pub total_pod_requests: RebuiltGauge,
    pub total_pod_limits: RebuiltGauge,
    pub total_daemon_requests: RebuiltGauge,
    pub total_daemon_limits: RebuiltGauge,
    pub system_overhead: RebuiltGauge,
    /// `karpenter_nodes_current_lifetime_seconds{<node labels>}`.
    pub current_lifetime: RebuiltGauge,
    /// `karpenter_cluster_utilization_percent{resource_type}`.
    pub utilization: GaugeVec,
    /// `karpenter_nodepools_usage{resource_type, nodepool}`.
    pub nodepools_usage: GaugeVec,
    /// `karpenter_nodepools_limit{resource_type, nodepool}`.
    pub nodepools_limit: GaugeVec,
    /// `karpenter_nodepools_cost_total{nodepool}`.
    pub nodepools_cost: GaugeVec,
    /// `karpenter_nodepools_cost_tracker_errors_total{nodepool}`.
    pub cost_tracker_errors: IntCounterVec,
    /// `karpenter_pods_state{name, namespace, owner, node, ...}`: 1 per pod, kept compact
    /// ([`RebuiltGauge`]) as the pod timings below.
    pub pods_state: RebuiltGauge,
    /// `karpenter_pods_{unstarted,unbound,provisioning_unstarted,provisioning_unbound,
    /// provisioning_scheduling_undecided}_time_seconds{name, namespace}`.
    pub unstarted: RebuiltGauge,
    pub unbound: RebuiltGauge,
    pub provisioning_unstarted: RebuiltGauge,
    pub provisioning_unbound: RebuiltGauge,
    pub scheduling_undecided: RebuiltGauge,
    /// `karpenter_pods_startup_duration_seconds` (a summary, as upstream).
    pub startup_duration: SummaryVec,
    pub bound_duration: HistogramVec,
    pub provisioning_bound_duration: HistogramVec,
    pub provisioning_startup_duration: HistogramVec,
    /// `karpenter_cluster_state_node_count`, `_synced`, `_unsynced_time_seconds`.
    pub node_count: GaugeVec,
    pub synced: GaugeVec,
    pub unsynced_time: GaugeVec,
    /// `karpenter_azure_unreadable_objects{kind}`: ours.
    pub unreadable_objects: GaugeVec,
}

impl ClusterMetrics {
    pub fn register(r: &Registrar) -> ClusterMetrics {
        let node = node_labels();
        let node: Vec<&str> = node.iter().map(String::as_str).collect();
        let mut node_resource = node.clone();
        node_resource.push("resource_type");
        let per_node = |name: &str, help: &str| {
            r.def(name, help, &node_resource)
                .origin(NODE)
                .recorded("from the index, on the leader: one series per Node and resource", &["refresh"])
                .leader_only()
                .rebuilt_gauge()
        };
        let pod_time = |name: &str, help: &str, when: &str| {
            r.def(name, help, &["name", "namespace"])
                .origin(POD)
                .recorded(when, &["refresh"])
                .leader_only()
                .rebuilt_gauge()
        };
        let pod_duration = |name: &str, help: &str, when: &str| {
            r.def(name, help, &[]).origin(POD).recorded(when, &["pod_observed"]).histogram(DURATION_BUCKETS)
        };
        let state = |name: &str, help: &str, when: &str| {
            r.def(name, help, &[]).origin(STATE).recorded(when, &["refresh"]).leader_only().gauge()
        };
        let pool_resource = &["resource_type", "nodepool"];
        ClusterMetrics {
            allocatable: per_node(
                "karpenter_nodes_allocatable",
                "Node allocatable are the resources allocatable by nodes.",
            ),
            total_pod_requests: per_node(
                "karpenter_nodes_total_pod_requests",
                "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.",
            ),
            total_pod_limits: per_node(
                "karpenter_nodes_total_pod_limits",
                "Node total pod limits are the resources specified by pod limits, including the DaemonSet pods.",
            ),
            total_daemon_requests: per_node(
                "karpenter_nodes_total_daemon_requests",
                "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.",
            ),
            total_daemon_limits: per_node(
                "karpenter_nodes_total_daemon_limits",
                "Node total daemon limits are the resources specified by DaemonSet pod limits.",
            ),
            system_overhead: per_node(
                "karpenter_nodes_system_overhead",
                "Node system daemon overhead are the resources reserved for system overhead, the difference between the node's capacity and allocatable values are reported by the status.",
            ),
            current_lifetime: r
                .def("karpenter_nodes_current_lifetime_seconds", "Node age in seconds", &node)
                .origin(NODE)
                .recorded("from the index, on the leader: one series per Node", &["refresh"])
                .leader_only()
                .rebuilt_gauge(),
            utilization: r
                .def(
                    "karpenter_cluster_utilization_percent",
                    "Utilization of allocatable resources by pod requests",
                    &["resource_type"],
                )
                .origin(NODE)
                .recorded("from the index, on the leader: pod requests over allocatable, all Nodes", &["refresh"])
                .leader_only()
                .gauge(),
            nodepools_usage: r
                .def(
                    "karpenter_nodepools_usage",
                    "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and resource type.",
                    pool_resource,
                )
                .origin(NODEPOOL)
                .recorded("from the index, on the leader", &["refresh"])
                .leader_only()
                .gauge(),
            nodepools_limit: r
                .def(
                    "karpenter_nodepools_limit",
                    "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool name and resource type.",
                    pool_resource,
                )
                .origin(NODEPOOL)
                .recorded("from the index, on the leader", &["refresh"])
                .leader_only()
                .gauge(),
            nodepools_cost: r
                .def(
                    "karpenter_nodepools_cost_total",
                    "Total cost of the nodepool from Karpenter's perspective. Units are determined by the cloud provider. Not an authoritative source for billing. Includes modifications due to NodeOverlays",
                    &["nodepool"],
                )
                .origin(NODEPOOL)
                .recorded(
                    "from the index, on the leader: the $/hour of the pool's NodeClaims at the catalog's price of their size, zone and capacity type (NodeOverlays applied)",
                    &["refresh"],
                )
                .leader_only()
                .gauge(),
            cost_tracker_errors: r
                .def(
                    "karpenter_nodepools_cost_tracker_errors_total",
                    "Number of errors encountered during cost tracking operations. Labeled by nodepool and nodeclaim.",
                    &["nodepool"],
                )
                .origin(Origin::Core("pkg/state/cost/cost.go"))
                .recorded(
                    "on the leader, once per NodeClaim whose NodePool is unknown or whose offering has no price",
                    &["cost_tracker_error"],
                )
                .counter(),
            pods_state: r
                .def(
                    "karpenter_pods_state",
                    "Pod state is the current state of pods. This metric can be used several ways as it is labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, capacity type, instance type, pod phase, and pod readiness.",
                    &POD_LABELS,
                )
                .origin(POD)
                .recorded("from the index, on the leader: 1 per pod", &["refresh"])
                .leader_only()
                .rebuilt_gauge(),
            unstarted: pod_time(
                "karpenter_pods_unstarted_time_seconds",
                "The time from pod creation until the pod is running.",
                "on the leader, per pod seen Pending and not yet Ready: seconds since its creation",
            ),
            unbound: pod_time(
                "karpenter_pods_unbound_time_seconds",
                "The time from pod creation until the pod is bound.",
                "on the leader, per Pending pod not yet scheduled: seconds since its creation",
            ),
            provisioning_unstarted: pod_time(
                "karpenter_pods_provisioning_unstarted_time_seconds",
                "The time from when Karpenter first thinks the pod can schedule until the pod is running. Note: this calculated from a point in memory, not by the pod creation timestamp.",
                "on the leader, as unstarted, from the first plan that placed the pod",
            ),
            provisioning_unbound: pod_time(
                "karpenter_pods_provisioning_unbound_time_seconds",
                "The time from when Karpenter first thinks the pod can schedule until it binds. Note: this calculated from a point in memory, not by the pod creation timestamp.",
                "on the leader, as unbound, from the first plan that placed the pod",
            ),
            scheduling_undecided: pod_time(
                "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
                "The time from when Karpenter has seen a pod without making a scheduling decision for the pod. Note: this calculated from a point in memory, not by the pod creation timestamp.",
                "on the leader, per provisionable pod no plan has decided yet: seconds since the pod watch saw it",
            ),
            startup_duration: r
                .def("karpenter_pods_startup_duration_seconds", "The time from pod creation until the pod is running.", &[])
                .origin(POD)
                .recorded(
                    "on the leader, per pod seen Pending when it becomes Ready: Ready's transition time minus its creation",
                    &["pod_observed"],
                )
                .summary(OBJECTIVES),
            bound_duration: pod_duration(
                "karpenter_pods_bound_duration_seconds",
                "The time from pod creation until the pod is bound.",
                "on the leader, per pod seen Pending when it is scheduled: PodScheduled's transition time minus its creation",
            ),
            provisioning_bound_duration: pod_duration(
                "karpenter_pods_provisioning_bound_duration_seconds",
                "The time from when Karpenter first thinks the pod can schedule until it binds. Note: this calculated from a point in memory, not by the pod creation timestamp.",
                "on the leader, as bound_duration, from the first plan that placed the pod",
            ),
            provisioning_startup_duration: pod_duration(
                "karpenter_pods_provisioning_startup_duration_seconds",
                "The time from when Karpenter first thinks the pod can schedule until the pod is running. Note: this calculated from a point in memory, not by the pod creation timestamp.",
                "on the leader, as startup_duration, from the first plan that placed the pod",
            ),
            node_count: state(
                "karpenter_cluster_state_node_count",
                "Current count of nodes in cluster state",
                "from the index, on the leader",
            ),
            synced: state(
                "karpenter_cluster_state_synced",
                "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and nodes that are stored in the APIServer have the same representation as Karpenter's cluster state",
                "from the index, on the leader",
            ),
            unsynced_time: state(
                "karpenter_cluster_state_unsynced_time_seconds",
                "The time for which cluster state is not synced",
                "from the index, on the leader: seconds since it last stopped being synced, 0 while synced",
            ),
            unreadable_objects: r
                .def(
                    "karpenter_azure_unreadable_objects",
                    "Objects the controller cannot read or convert (for example a NodeClaim written by another version with an operator this one does not know), by kind; they are left out of every decision, and a NodeClaim among them keeps its VM.",
                    &["kind"],
                )
                .recorded(
                    "from the index, on the leader: objects left out of every decision because they cannot be read (a NodeClaim stored by another version) or converted; each is logged and evented (`Unreadable`) once per version, and a NodeClaim among them keeps its VM",
                    &["refresh"],
                )
                .leader_only()
                .gauge(),
        }
    }
}
