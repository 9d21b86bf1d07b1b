//! The disruption controller's metrics, with upstream's names and labels (Karpenter core
//! `pkg/controllers/disruption/metrics.go`, `pkg/metrics/metrics.go`), plus ours: the managed
//! capacity's $/hour and the lower bound of a from-scratch repack, so a dashboard shows how far the
//! cluster is from optimal. Registered in the one registry of [`super::metrics::Metrics`]. The gauges
//! are the leader's: a standby serves none.

use prometheus::{GaugeVec, HistogramVec, IntCounterVec};

use super::metrics::DURATION_BUCKETS;
use super::metrics_registry::{Origin, Registrar};

const DISRUPTION: Origin = Origin::Core("pkg/controllers/disruption/metrics.go");

/// Upstream `ConsolidationScoreHistogram` buckets.
pub const SCORE_BUCKETS: &[f64] = &[0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0];

/// `consolidation_type` label values, as upstream's methods report them.
pub mod consolidation_type {
    pub const EMPTY: &str = "empty";
    pub const SINGLE: &str = "single";
    pub const MULTI: &str = "multi";
    /// Drift is not consolidation; upstream leaves the label empty.
    pub const NONE: &str = "";
}

/// `decision` label values.
pub mod decision {
    pub const DELETE: &str = "delete";
    pub const REPLACE: &str = "replace";
}

pub struct DisruptionMetrics {
    /// `karpenter_voluntary_disruption_decision_evaluation_duration_seconds{reason, consolidation_type}`.
    pub evaluation_duration: HistogramVec,
    /// `karpenter_voluntary_disruption_decisions_total{decision, reason, consolidation_type}`.
    pub decisions: IntCounterVec,
    /// `karpenter_voluntary_disruption_decisions_by_nodepool_total{nodepool, decision, reason,
    /// consolidation_type}`.
    pub decisions_by_nodepool: IntCounterVec,
    /// `karpenter_voluntary_disruption_eligible_nodes{reason}`.
    pub eligible_nodes: GaugeVec,
    /// `karpenter_voluntary_disruption_consolidation_timeouts_total{consolidation_type}`.
    pub consolidation_timeouts: IntCounterVec,
    /// `karpenter_voluntary_disruption_failed_validations_total{consolidation_type}`.
    pub failed_validations: IntCounterVec,
    /// `karpenter_voluntary_disruption_queue_failures_total{decision, reason, consolidation_type}`.
    pub queue_failures: IntCounterVec,
    /// `karpenter_nodepools_allowed_disruptions{nodepool, reason}`.
    pub allowed_disruptions: GaugeVec,
    /// `karpenter_nodepools_nodes_consuming_budgets{nodepool, reason}`.
    pub nodes_consuming_budgets: GaugeVec,
    /// `karpenter_consolidation_score{decision, nodepool, policy}`.
    pub consolidation_score: HistogramVec,
    /// `karpenter_consolidation_moves_total{decision, nodepool, policy}`.
    pub consolidation_moves: IntCounterVec,
    /// `karpenter_pods_disruption_initiated_total{reason, nodepool, capacity_type, consolidation_policy,
    /// termination_mode}`.
    pub pods_disruption_initiated: IntCounterVec,
    /// `karpenter_azure_cluster_price_dollars_per_hour`: ours.
    pub cluster_price: GaugeVec,
    /// `karpenter_azure_cluster_repack_lower_bound_dollars_per_hour`: ours.
    pub repack_lower_bound: GaugeVec,
}

impl DisruptionMetrics {
    pub fn register(r: &Registrar) -> DisruptionMetrics {
        let kind = &["decision", "reason", "consolidation_type"];
        let move_labels = &["decision", "nodepool", "policy"];
        let pass = "disruption, per pass";
        let m = DisruptionMetrics {
            evaluation_duration: r
                .def(
                    "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
                    "Duration of the disruption decision evaluation process in seconds. Labeled by method and consolidation type.",
                    &["reason", "consolidation_type"],
                )
                .origin(DISRUPTION)
                .recorded(pass, &["decisions"])
                .histogram(DURATION_BUCKETS),
            decisions: r
                .def(
                    "karpenter_voluntary_disruption_decisions_total",
                    "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
                    kind,
                )
                .origin(DISRUPTION)
                .recorded("disruption, per command started", &["command_started"])
                .counter(),
            decisions_by_nodepool: r
                .def(
                    "karpenter_voluntary_disruption_decisions_by_nodepool_total",
                    "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption decision, reason, and consolidation type.",
                    &["nodepool", "decision", "reason", "consolidation_type"],
                )
                .origin(DISRUPTION)
                .recorded("disruption, per command started and NodePool of its candidates", &["command_started"])
                .counter(),
            eligible_nodes: r
                .def(
                    "karpenter_voluntary_disruption_eligible_nodes",
                    "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
                    &["reason"],
                )
                .origin(DISRUPTION)
                .recorded(pass, &["decisions"])
                .leader_only()
                .gauge(),
            consolidation_timeouts: r
                .def(
                    "karpenter_voluntary_disruption_consolidation_timeouts_total",
                    "Number of times the Consolidation algorithm has reached a timeout. Labeled by consolidation type.",
                    &["consolidation_type"],
                )
                .origin(DISRUPTION)
                .recorded(
                    "disruption, when a pass is cancelled before its consolidation search ends (0 for multi and single from the start, as upstream)",
                    &["consolidation_timed_out"],
                )
                .counter(),
            failed_validations: r
                .def(
                    "karpenter_voluntary_disruption_failed_validations_total",
                    "Number of candidates that were selected for disruption but failed validation. Labeled by consolidation type.",
                    &["consolidation_type"],
                )
                .origin(DISRUPTION)
                .recorded("disruption, per command its validation refused", &["failed_validation"])
                .counter(),
            queue_failures: r
                .def(
                    "karpenter_voluntary_disruption_queue_failures_total",
                    "The number of times that an enqueued disruption decision failed. Labeled by disruption method.",
                    kind,
                )
                .origin(DISRUPTION)
                .recorded("disruption, per command that failed while executing", &["queue_failure"])
                .counter(),
            allowed_disruptions: r
                .def(
                    "karpenter_nodepools_allowed_disruptions",
                    "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time. Labeled by NodePool. Note that allowed disruptions can change very rapidly, as new nodes may be created and others may be deleted at any point.",
                    &["nodepool", "reason"],
                )
                .origin(DISRUPTION)
                .recorded(pass, &["decisions"])
                .leader_only()
                .gauge(),
            nodes_consuming_budgets: r
                .def(
                    "karpenter_nodepools_nodes_consuming_budgets",
                    "The number of nodes consuming the budget of a nodepool at a point in time. Labeled by NodePool.",
                    &["nodepool", "reason"],
                )
                .origin(DISRUPTION)
                .recorded(pass, &["decisions"])
                .leader_only()
                .gauge(),
            consolidation_score: r
                .def(
                    "karpenter_consolidation_score",
                    "Score of balanced consolidation moves. Labeled by decision, NodePool, and policy.",
                    move_labels,
                )
                .origin(DISRUPTION)
                .recorded(
                    "disruption, per consolidation move in a Balanced NodePool: savings share over disruption share",
                    &["consolidation_moves"],
                )
                .histogram(SCORE_BUCKETS),
            consolidation_moves: r
                .def(
                    "karpenter_consolidation_moves_total",
                    "Number of balanced consolidation moves. Labeled by decision, NodePool, and policy.",
                    move_labels,
                )
                .origin(DISRUPTION)
                .recorded(
                    "disruption, per consolidation move approved (a command) or rejected (not worth its disruption)",
                    &["consolidation_moves"],
                )
                .counter(),
            pods_disruption_initiated: r
                .def(
                    "karpenter_pods_disruption_initiated_total",
                    "Number of pod disruptions initiated in total by Karpenter, incremented by the reschedulable pod count whenever the underlying nodeclaim is disrupted. Labeled by reason the nodeclaim was disrupted, the owning nodepool, the capacity type, the consolidation policy, and the termination mode. Pods owned by DaemonSets and mirror pods are excluded.",
                    &["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
                )
                .origin(Origin::Core("pkg/metrics/metrics.go"))
                .recorded("disruption, per candidate deleted: its reschedulable pods", &["disrupted_by_policy"])
                .counter(),
            cluster_price: r
                .def(
                    "karpenter_azure_cluster_price_dollars_per_hour",
                    "The $/hour of every node Karpenter manages, as the latest disruption pass priced them.",
                    &[],
                )
                .recorded("disruption, per pass: every managed node, priced as the pass saw it", &["decisions"])
                .leader_only()
                .gauge(),
            repack_lower_bound: r
                .def(
                    "karpenter_azure_cluster_repack_lower_bound_dollars_per_hour",
                    "A proven lower bound on the $/hour of any placement of the running and pending pods on fresh managed capacity, from the latest disruption pass. Compare with karpenter_azure_cluster_price_dollars_per_hour.",
                    &[],
                )
                .recorded(
                    "disruption, per pass: no placement of the running and pending pods on fresh managed capacity can cost less",
                    &["decisions"],
                )
                .leader_only()
                .gauge(),
        };
        // Upstream initialises the timeouts of both consolidation searches to 0.
        for kind in [consolidation_type::MULTI, consolidation_type::SINGLE] {
            m.consolidation_timeouts.with_label_values(&[kind]);
        }
        m
    }
}

impl super::metrics::Metrics {
    /// A consolidation move of `nodepool` was `decision` (`approved` or `rejected`); `score` in
    /// `Balanced` pools.
    pub fn consolidation_moves(&self, decision: &str, nodepool: &str, policy: &str, score: Option<f64>) {
        let labels = [decision, nodepool, policy];
        self.disruption.consolidation_moves.with_label_values(&labels).inc();
        if let Some(score) = score {
            self.disruption.consolidation_score.with_label_values(&labels).observe(score);
        }
    }

    /// A consolidation search of `kind` stopped before it had looked at every candidate.
    pub fn consolidation_timed_out(&self, kind: &str) {
        self.disruption.consolidation_timeouts.with_label_values(&[kind]).inc();
    }
}
