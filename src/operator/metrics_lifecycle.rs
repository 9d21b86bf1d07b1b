//! The lifecycle's metrics: NodeClaims and Nodes created, disrupted and terminated, how long
//! terminations take, and the drain's evictions (upstream core `pkg/metrics/metrics.go`,
//! `pkg/controllers/nodeclaim/lifecycle/metrics.go`, `pkg/controllers/node/termination/metrics.go`,
//! `pkg/controllers/node/termination/terminator/metrics.go`, `pkg/controllers/node/health/metrics.go`),
//! with their recorders.

use std::time::Duration;

use prometheus::{HistogramVec, IntCounterVec};

use super::metrics::{Metrics, REASON_PROVISIONED};
use super::metrics_registry::{exponential_buckets, Origin, Registrar};
use super::metrics_summary::{SummaryVec, OBJECTIVES};

const METRICS_GO: Origin = Origin::Core("pkg/metrics/metrics.go");
const LIFECYCLE: Origin = Origin::Core("pkg/controllers/nodeclaim/lifecycle/metrics.go");
const TERMINATION: Origin = Origin::Core("pkg/controllers/node/termination/metrics.go");
const TERMINATOR: Origin = Origin::Core("pkg/controllers/node/termination/terminator/metrics.go");

/// Upstream `NodeLifetimeDurationSeconds` buckets: 15 minutes to 30 days.
pub const LIFETIME_BUCKETS: &[f64] = &[
    900.0, 1800.0, 2700.0, 3600.0, 7200.0, 14400.0, 21600.0, 28800.0, 36000.0, 43200.0, 57600.0, 72000.0,
    86400.0, 172800.0, 259200.0, 432000.0, 864000.0, 1296000.0, 1728000.0, 2160000.0, 2592000.0,
];

pub struct LifecycleMetrics {
    /// `karpenter_nodeclaims_created_total{reason, nodepool, min_values_relaxed}`.
    pub nodeclaims_created: IntCounterVec,
    /// `karpenter_nodeclaims_terminated_total{nodepool, capacity_type, zone}`.
    pub nodeclaims_terminated: IntCounterVec,
    /// `karpenter_nodeclaims_disrupted_total{reason, nodepool, capacity_type, consolidation_policy,
    /// termination_mode}`.
    pub nodeclaims_disrupted: IntCounterVec,
    /// `karpenter_nodeclaims_unhealthy_disrupted_total{condition, nodepool, capacity_type, image_id}`.
    pub nodeclaims_unhealthy_disrupted: IntCounterVec,
    /// `karpenter_nodes_created_total{nodepool, zone}`.
    pub nodes_created: IntCounterVec,
    /// `karpenter_nodes_terminated_total{nodepool, zone}`.
    pub nodes_terminated: IntCounterVec,
    /// `karpenter_nodeclaims_instance_termination_duration_seconds{nodepool}`.
    pub instance_termination: HistogramVec,
    /// `karpenter_nodeclaims_termination_duration_seconds{nodepool}`.
    pub nodeclaim_termination: HistogramVec,
    /// `karpenter_nodes_termination_duration_seconds{nodepool}` (a summary, as upstream).
    pub node_termination: SummaryVec,
    /// `karpenter_nodes_drained_total{nodepool}`.
    pub nodes_drained: IntCounterVec,
    /// `karpenter_nodes_lifetime_duration_seconds{nodepool}`.
    pub node_lifetime: HistogramVec,
    /// `karpenter_pods_eviction_requests_total{code}`.
    pub eviction_requests: IntCounterVec,
    /// `karpenter_pods_drained_total{reason}`.
    pub pods_drained: IntCounterVec,
}

impl LifecycleMetrics {
    pub fn register(r: &Registrar) -> LifecycleMetrics {
        let pool = &["nodepool"];
        LifecycleMetrics {
            nodeclaims_created: r
                .def(
                    "karpenter_nodeclaims_created_total",
                    "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created, the owning nodepool, and if min values was relaxed for this nodeclaim.",
                    &["reason", "nodepool", "min_values_relaxed"],
                )
                .origin(METRICS_GO)
                .recorded(
                    "provisioning and static NodePools (`provisioned`), disruption replacements (the disruption reason), per NodeClaim created",
                    &["nodeclaim_provisioned", "nodeclaim_created", "nodeclaim_created_for"],
                )
                .counter(),
            nodeclaims_terminated: r
                .def(
                    "karpenter_nodeclaims_terminated_total",
                    "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool, capacity type, and zone.",
                    &["nodepool", "capacity_type", "zone"],
                )
                .origin(METRICS_GO)
                .recorded("lifecycle, when the claim's finalizer comes off", &["nodeclaim_terminated"])
                .counter(),
            nodeclaims_disrupted: r
                .def(
                    "karpenter_nodeclaims_disrupted_total",
                    "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was disrupted, the owning nodepool, the capacity type, the consolidation policy, and the termination mode.",
                    &["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
                )
                .origin(METRICS_GO)
                .recorded(
                    "lifecycle (insufficient_capacity, nodeclass_not_ready, launch_timeout, registration_timeout), GC (garbage_collected), repair (unhealthy), disruption (empty, underutilized, drifted, expired)",
                    &["nodeclaim_disrupted", "disrupted_by_policy"],
                )
                .counter(),
            nodeclaims_unhealthy_disrupted: r
                .def(
                    "karpenter_nodeclaims_unhealthy_disrupted_total",
                    "Number of unhealthy nodeclaims disrupted in total by Karpenter. Labeled by condition on the node was disrupted, the owning nodepool, and the image ID.",
                    &["condition", "nodepool", "capacity_type", "image_id"],
                )
                .origin(Origin::Core("pkg/controllers/node/health/metrics.go"))
                .recorded("node repair, per NodeClaim it deletes", &["nodeclaim_unhealthy_disrupted"])
                .counter(),
            nodes_created: r
                .def(
                    "karpenter_nodes_created_total",
                    "Number of nodes created in total by Karpenter. Labeled by owning nodepool and zone.",
                    &["nodepool", "zone"],
                )
                .origin(METRICS_GO)
                .recorded("lifecycle, when the claim's Node registers", &["node_created"])
                .counter(),
            nodes_terminated: r
                .def(
                    "karpenter_nodes_terminated_total",
                    "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and zone.",
                    &["nodepool", "zone"],
                )
                .origin(METRICS_GO)
                .recorded("lifecycle, when the Node's finalizer comes off", &["node_terminated"])
                .counter(),
            instance_termination: r
                .def(
                    "karpenter_nodeclaims_instance_termination_duration_seconds",
                    "Duration of CloudProvider Instance termination in seconds.",
                    pool,
                )
                .origin(LIFECYCLE)
                .recorded(
                    "lifecycle, when the VM is gone: from the claim's InstanceTerminating condition (its deletion when there is none)",
                    &["instance_terminated"],
                )
                .histogram(&exponential_buckets(1.0, 2.0, 11)),
            nodeclaim_termination: r
                .def(
                    "karpenter_nodeclaims_termination_duration_seconds",
                    "Duration of NodeClaim termination in seconds.",
                    pool,
                )
                .origin(LIFECYCLE)
                .recorded(
                    "lifecycle, from the claim's deletionTimestamp to its finalizer coming off",
                    &["nodeclaim_terminated"],
                )
                .histogram(&exponential_buckets(1.0, 2.0, 12)),
            node_termination: r
                .def(
                    "karpenter_nodes_termination_duration_seconds",
                    "The time taken between a node's deletion request and the removal of its finalizer",
                    pool,
                )
                .origin(TERMINATION)
                .recorded(
                    "lifecycle, from the Node's deletion (its NodeClaim's: the Node is drained before it is deleted) to its finalizer coming off",
                    &["node_terminated"],
                )
                .summary(OBJECTIVES),
            nodes_drained: r
                .def("karpenter_nodes_drained_total", "The total number of nodes drained by Karpenter", pool)
                .origin(TERMINATION)
                .recorded("termination, once per Node when its drain completes", &["node_drained"])
                .counter(),
            node_lifetime: r
                .def(
                    "karpenter_nodes_lifetime_duration_seconds",
                    "The lifetime duration of the nodes since creation.",
                    pool,
                )
                .origin(TERMINATION)
                .recorded(
                    "lifecycle, from the Node's creation to its finalizer coming off",
                    &["node_terminated"],
                )
                .histogram(LIFETIME_BUCKETS),
            eviction_requests: r
                .def(
                    "karpenter_pods_eviction_requests_total",
                    "The total number of pod eviction requests made by Karpenter, labeled by response code",
                    &["code"],
                )
                .origin(TERMINATOR)
                .recorded("drain, per Eviction API call, by HTTP status (200 on success)", &["eviction_requested"])
                .counter(),
            pods_drained: r
                .def(
                    "karpenter_pods_drained_total",
                    "The total number of pods drained during node termination by Karpenter, labeled by reason",
                    &["reason"],
                )
                .origin(TERMINATOR)
                .recorded(
                    "drain, per pod evicted, with the claim's DisruptionReason (`Forceful Termination` without one)",
                    &["pod_drained"],
                )
                .counter(),
        }
    }
}

impl Metrics {
    pub fn nodeclaim_created(&self, nodepool: &str) {
        self.nodeclaim_provisioned(nodepool, false);
    }

    /// A claim provisioning created; `min_values_relaxed` as its `karpenter.sh/nodeclaim-min-values-relaxed`
    /// annotation says (upstream provisioner.go labels the counter from it).
    pub fn nodeclaim_provisioned(&self, nodepool: &str, min_values_relaxed: bool) {
        let relaxed = if min_values_relaxed { "true" } else { "false" };
        self.lifecycle.nodeclaims_created.with_label_values(&[REASON_PROVISIONED, nodepool, relaxed]).inc();
    }

    /// `reason` is [`REASON_PROVISIONED`] or, for a disruption's replacement, the lower-case
    /// disruption reason (upstream `CreateNodeClaims` with `WithReason`).
    pub fn nodeclaim_created_for(&self, reason: &str, nodepool: &str) {
        // A replacement is labelled as not relaxed, whatever its minValues.
        self.lifecycle.nodeclaims_created.with_label_values(&[reason, nodepool, "false"]).inc();
    }

    /// The claim's finalizer came off, `took` after its deletion.
    pub fn nodeclaim_terminated(
        &self,
        nodepool: &str,
        capacity_type: &str,
        zone: &str,
        took: Option<Duration>,
    ) {
        self.lifecycle.nodeclaims_terminated.with_label_values(&[nodepool, capacity_type, zone]).inc();
        if let Some(took) = took {
            self.lifecycle.nodeclaim_termination.with_label_values(&[nodepool]).observe(took.as_secs_f64());
        }
    }

    /// The claim's VM is gone, `took` after its termination began.
    pub fn instance_terminated(&self, nodepool: &str, took: Duration) {
        self.lifecycle.instance_termination.with_label_values(&[nodepool]).observe(took.as_secs_f64());
    }

    /// `reason` is upstream's (`insufficient_capacity`, `launch_timeout`, `garbage_collected`, ...);
    /// `consolidation_policy` stays empty as upstream leaves it outside consolidation.
    pub fn nodeclaim_disrupted(
        &self,
        reason: &'static str,
        nodepool: &str,
        capacity_type: &str,
        termination_mode: &'static str,
    ) {
        let labels = [reason, nodepool, capacity_type, "", termination_mode];
        self.lifecycle.nodeclaims_disrupted.with_label_values(&labels).inc();
    }

    /// A voluntary disruption (or an expiration) of one NodeClaim and its `pods` reschedulable pods:
    /// `karpenter_nodeclaims_disrupted_total` and `karpenter_pods_disruption_initiated_total` with the
    /// pool's consolidation policy.
    pub fn disrupted_by_policy(&self, labels: [&str; 5], pods: usize) {
        self.lifecycle.nodeclaims_disrupted.with_label_values(&labels).inc();
        self.disruption.pods_disruption_initiated.with_label_values(&labels).inc_by(pods as u64);
    }

    /// Node repair deleted a claim whose Node had `condition` (snake-cased, as upstream: `ready`).
    pub fn nodeclaim_unhealthy_disrupted(
        &self,
        condition: &str,
        nodepool: &str,
        capacity_type: &str,
        image_id: &str,
    ) {
        let labels = [condition, nodepool, capacity_type, image_id];
        self.lifecycle.nodeclaims_unhealthy_disrupted.with_label_values(&labels).inc();
    }

    pub fn node_created(&self, nodepool: &str, zone: &str) {
        self.lifecycle.nodes_created.with_label_values(&[nodepool, zone]).inc();
    }

    /// The Node's finalizer came off: `deleted_for` since its deletionTimestamp, `lived` since its
    /// creation.
    pub fn node_terminated(
        &self,
        nodepool: &str,
        zone: &str,
        deleted_for: Option<Duration>,
        lived: Option<Duration>,
    ) {
        self.lifecycle.nodes_terminated.with_label_values(&[nodepool, zone]).inc();
        if let Some(took) = deleted_for {
            self.lifecycle.node_termination.observe(&[nodepool], took.as_secs_f64());
        }
        if let Some(lived) = lived {
            self.lifecycle.node_lifetime.with_label_values(&[nodepool]).observe(lived.as_secs_f64());
        }
    }

    /// The drain of a Node of `nodepool` completed.
    pub fn node_drained(&self, nodepool: &str) {
        self.lifecycle.nodes_drained.with_label_values(&[nodepool]).inc();
    }

    /// One Eviction API call answered with HTTP `code`.
    pub fn eviction_requested(&self, code: u16) {
        self.lifecycle.eviction_requests.with_label_values(&[&code.to_string()]).inc();
    }

    /// A pod was evicted by the drain for `reason`.
    pub fn pod_drained(&self, reason: &str) {
        self.lifecycle.pods_drained.with_label_values(&[reason]).inc();
    }
}
