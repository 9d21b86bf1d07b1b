//! The disruption controller's metrics, with upstream's names and labels (Karpenter core
//! `pkg/controllers/disruption/metrics.go`, `pkg/metrics/metrics.go`), plus ours: the managed
//! capacity's $/hour and the lower bound of a from-scratch repack, so a dashboard shows how far the
//! cluster is from optimal. Registered in the one registry of [`super::metrics::Metrics`].

use prometheus::{Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

use super::metrics::DURATION_BUCKETS;

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
    /// `karpenter_voluntary_disruption_eligible_nodes{reason}`.
    pub eligible_nodes: GaugeVec,
    /// `karpenter_voluntary_disruption_failed_validations_total{consolidation_type}`.
    pub failed_validations: IntCounterVec,
    /// `karpenter_voluntary_disruption_queue_failures_total{decision, reason, consolidation_type}`.
    pub queue_failures: IntCounterVec,
    /// `karpenter_nodepools_allowed_disruptions{nodepool, reason}`.
    pub allowed_disruptions: GaugeVec,
    /// `karpenter_pods_disruption_initiated_total{reason, nodepool, capacity_type, consolidation_policy,
    /// termination_mode}`.
    pub pods_disruption_initiated: IntCounterVec,
    /// `karpenter_azure_cluster_price_dollars_per_hour`: ours.
    pub cluster_price: Gauge,
    /// `karpenter_azure_cluster_repack_lower_bound_dollars_per_hour`: ours.
    pub repack_lower_bound: Gauge,
}

impl DisruptionMetrics {
    pub fn register(registry: &Registry) -> DisruptionMetrics {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let metric =
                IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric definition");
            registry.register(Box::new(metric.clone())).expect("metric names are unique");
            metric
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let metric = GaugeVec::new(Opts::new(name, help), labels).expect("a valid metric definition");
            registry.register(Box::new(metric.clone())).expect("metric names are unique");
            metric
        };
        let scalar = |name: &str, help: &str| {
            let metric = Gauge::new(name, help).expect("a valid metric definition");
            registry.register(Box::new(metric.clone())).expect("metric names are unique");
            metric
        };
        let evaluation_duration = HistogramVec::new(
            HistogramOpts::new(
                "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
                "Duration of the disruption decision evaluation process in seconds. Labeled by method and consolidation type.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["reason", "consolidation_type"],
        )
        .expect("a valid metric definition");
        registry.register(Box::new(evaluation_duration.clone())).expect("metric names are unique");
        DisruptionMetrics {
            evaluation_duration,
            decisions: counter(
                "karpenter_voluntary_disruption_decisions_total",
                "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
                &["decision", "reason", "consolidation_type"],
            ),
            eligible_nodes: gauge(
                "karpenter_voluntary_disruption_eligible_nodes",
                "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
                &["reason"],
            ),
            failed_validations: counter(
                "karpenter_voluntary_disruption_failed_validations_total",
                "Number of candidates that were selected for disruption but failed validation. Labeled by consolidation type.",
                &["consolidation_type"],
            ),
            queue_failures: counter(
                "karpenter_voluntary_disruption_queue_failures_total",
                "Number of times that an enqueued disruption decision failed. Labeled by disruption decision, reason, and consolidation type.",
                &["decision", "reason", "consolidation_type"],
            ),
            allowed_disruptions: gauge(
                "karpenter_nodepools_allowed_disruptions",
                "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time. Labeled by NodePool and reason.",
                &["nodepool", "reason"],
            ),
            pods_disruption_initiated: counter(
                "karpenter_pods_disruption_initiated_total",
                "Number of pods whose node disruption was initiated. Labeled by the disruption reason, nodepool, capacity type, consolidation policy and termination mode.",
                &["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
            ),
            cluster_price: scalar(
                "karpenter_azure_cluster_price_dollars_per_hour",
                "The $/hour of every node Karpenter manages, as the latest disruption pass priced them.",
            ),
            repack_lower_bound: scalar(
                "karpenter_azure_cluster_repack_lower_bound_dollars_per_hour",
                "A proven lower bound on the $/hour of any placement of the running and pending pods on fresh managed capacity, from the latest disruption pass. Compare with karpenter_azure_cluster_price_dollars_per_hour.",
            ),
        }
    }
}
