//! What a disruption costs the workloads, in upstream's units (`pkg/utils/disruption/disruption.go`
//! `EvictionCost`, and v1.14's `RescheduleDisruptionCost` in `pkg/controllers/disruption/types.go`):
//! each evicted pod costs about 1, more with a higher `pod-deletion-cost` or priority, and each node
//! costs 1 on its own (cordon, drain, replacement latency), so an empty node still costs something.

use super::snapshot::{ManagedNode, NodePod};

/// `clamp(1 + deletionCost / 2^27 + priority / 2^25, -10, 10)`.
pub fn eviction_cost(pod: &NodePod) -> f64 {
    let cost = 1.0 + f64::from(pod.deletion_cost) / 2f64.powi(27) + f64::from(pod.priority) / 2f64.powi(25);
    cost.clamp(-10.0, 10.0)
}

/// `1 + Σ max(0, eviction cost)` over the pods that must be rescheduled.
pub fn node_disruption_cost(node: &ManagedNode) -> f64 {
    1.0 + node.pods.iter().filter(|p| p.reschedulable()).map(|p| eviction_cost(p).max(0.0)).sum::<f64>()
}

/// Whether the node has no pod that would need a new place (DaemonSet and mirror pods go with it).
pub fn is_empty(node: &ManagedNode) -> bool {
    !node.pods.iter().any(NodePod::reschedulable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::snapshot::{DoNotDisrupt, PodKind};
    use crate::scheduling::Pod;

    fn pod(deletion_cost: i32, priority: i32) -> NodePod {
        NodePod {
            pod: Pod::default().into(),
            priority,
            deletion_cost,
            do_not_disrupt: DoNotDisrupt::No,
            started: None,
            kind: PodKind::Workload,
        }
    }

    #[test]
    fn eviction_cost_follows_deletion_cost_and_priority_within_bounds() {
        assert_eq!(eviction_cost(&pod(0, 0)), 1.0);
        assert_eq!(eviction_cost(&pod(1 << 27, 0)), 2.0);
        assert_eq!(eviction_cost(&pod(0, 1 << 25)), 2.0);
        assert_eq!(eviction_cost(&pod(i32::MAX, 0)), 10.0, "2^31/2^27 = 16, clamped");
        assert_eq!(eviction_cost(&pod(i32::MIN, 0)), -10.0);
        assert_eq!(eviction_cost(&pod(0, 2_000_000_000)), 10.0, "system-critical priority");
    }
}
