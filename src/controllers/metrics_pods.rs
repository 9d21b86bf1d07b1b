//! The per-pod metrics (upstream core `pkg/controllers/metrics/pod/controller.go`):
//!
//! - `karpenter_pods_state`, 1 per pod with upstream's labels (name, namespace, owner, node, ...), and
//!   the pod timing gauges (`unstarted`, `unbound`, their `provisioning_` forms and
//!   `provisioning_scheduling_undecided`), rebuilt from the index at each refresh;
//! - the durations, observed when the pod watch delivers a change ([`pod_observed`]), as upstream's pod
//!   controller does at each reconcile: a pod seen Pending that becomes Ready gives its startup duration
//!   (Ready's transition time − creation), one seen Pending that is scheduled its bound duration; their
//!   `provisioning_` forms count from when a plan first placed the pod.
//!
//! [`PodTracker`] keeps upstream's in-memory points: the pods seen Pending and unscheduled, and when
//! provisioning first saw a pod (ack), first decided it, and first placed it (schedulable).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::model::labels::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE,
};
use crate::model::LabelLookup;
use crate::operator::metrics::Metrics;
use crate::state::{self, Cluster, PodPhase, PodRecord};

/// Upstream's in-memory view of each pod's way to a node.
#[derive(Debug, Default)]
pub struct PodTracker {
    /// Pods seen Pending that have not started yet (upstream `pendingPods`).
    pending: BTreeSet<String>,
    /// Pods seen Pending that have not been bound yet (upstream `unscheduledPods`).
    unscheduled: BTreeSet<String>,
    /// When provisioning first saw each pod waiting for capacity (upstream `PodAckTime`).
    ack: BTreeMap<String, Timestamp>,
    /// When a plan first decided each pod, placed or not (`PodSchedulingDecisionTime`).
    decided: BTreeMap<String, Timestamp>,
    /// When a plan first placed each pod (`PodSchedulingSuccessTime`).
    schedulable: BTreeMap<String, Timestamp>,
}

impl PodTracker {
    /// Provisioning saw `pod` waiting for capacity at `at`.
    pub fn ack(&mut self, pod: &str, at: Timestamp) {
        self.ack.entry(pod.to_string()).or_insert(at);
    }

    /// A plan decided `pod` at `at`; `placed` when it gave the pod a node.
    pub fn decided(&mut self, pod: &str, at: Timestamp, placed: bool) {
        self.decided.entry(pod.to_string()).or_insert(at);
        if placed {
            self.schedulable.entry(pod.to_string()).or_insert(at);
        }
    }

    /// Upstream `ClearPodSchedulingMappings`: the pod started or ended.
    fn clear_mappings(&mut self, pod: &str) {
        self.ack.remove(pod);
        self.decided.remove(pod);
        self.schedulable.remove(pod);
    }

    /// Forgets the pods the index no longer holds.
    pub fn retain(&mut self, cluster: &Cluster) {
        let live = |key: &String| cluster.pod(key).is_some();
        self.pending.retain(live);
        self.unscheduled.retain(live);
        self.ack.retain(|k, _| live(k));
        self.decided.retain(|k, _| live(k));
        self.schedulable.retain(|k, _| live(k));
    }
}

/// The `lastTransitionTime` of the pod's condition `type_` when it is True.
fn true_since(pod: &core::Pod, type_: &str) -> Option<Timestamp> {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    let condition = conditions.into_iter().flatten().find(|c| c.type_ == type_ && c.status == "True")?;
    condition.last_transition_time.as_ref().map(|t| t.0)
}

fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64()
}

/// One pod as the watch delivered it: upstream's `recordPodStartupMetric` and `recordPodBoundMetric`.
/// The durations are observed only when `observe` (this replica leads); the tracker follows the pod
/// either way, so a new leader knows which pods it saw pending.
pub fn pod_observed(m: &Metrics, tracker: &mut PodTracker, pod: &core::Pod, observe: bool) {
    let key = state::key(Some(pod.metadata.namespace.as_deref().unwrap_or("default")), &pod.name_any());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default();
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let schedulable = tracker.schedulable.get(&key).copied();
    let c = &m.cluster;
    if phase == "Pending" {
        tracker.pending.insert(key.clone());
        tracker.unscheduled.insert(key);
        return;
    }
    if tracker.pending.contains(&key) {
        if let Some(ready) = true_since(pod, "Ready") {
            if observe {
                if let Some(created) = created {
                    c.startup_duration.observe(&[], seconds(created, ready));
                }
                if let Some(at) = schedulable {
                    c.provisioning_startup_duration
                        .with_label_values(&[] as &[&str])
                        .observe(seconds(at, ready));
                }
            }
            tracker.pending.remove(&key);
            tracker.clear_mappings(&key);
        } else if PodPhase::parse(Some(phase)).is_terminal() {
            tracker.pending.remove(&key);
            tracker.clear_mappings(&key);
        }
    }
    if tracker.unscheduled.contains(&key) {
        if let Some(bound) = true_since(pod, "PodScheduled") {
            if observe {
                if let Some(created) = created {
                    c.bound_duration.with_label_values(&[] as &[&str]).observe(seconds(created, bound));
                }
                if let Some(at) = schedulable {
                    c.provisioning_bound_duration
                        .with_label_values(&[] as &[&str])
                        .observe(seconds(at, bound));
                }
            }
            tracker.unscheduled.remove(&key);
        }
    }
}

fn phase_label(phase: PodPhase) -> &'static str {
    match phase {
        PodPhase::Pending => "Pending",
        PodPhase::Running => "Running",
        PodPhase::Succeeded => "Succeeded",
        PodPhase::Failed => "Failed",
        PodPhase::Unknown => "Unknown",
    }
}

/// `karpenter_pods_state`'s values for `pod`, in [`crate::operator::metrics::POD_LABELS`]' order.
fn state_values(cluster: &Cluster, pod: &PodRecord) -> [String; 13] {
    let node_name = pod.pod.node_name.clone().unwrap_or_default();
    let node = pod.pod.node_name.as_deref().and_then(|name| cluster.node(name));
    let label = |key: &str| node.and_then(|n| n.node.labels.label(key)).unwrap_or_default().to_string();
    let pool = label(LABEL_NODEPOOL);
    [
        pod.pod.name.clone(),
        pod.pod.namespace.clone(),
        pod.owner_link.to_string(),
        node_name.clone(),
        (!node_name.is_empty()).to_string(),
        pool.clone(),
        label(LABEL_ZONE),
        label(LABEL_ARCH),
        label(LABEL_CAPACITY_TYPE),
        label(LABEL_INSTANCE_TYPE),
        phase_label(pod.phase).to_string(),
        pod.ready.to_string(),
        (!pool.is_empty()).to_string(),
    ]
}

/// `karpenter_pods_state` and the pod timing gauges, rebuilt at `now`.
pub fn pods(m: &Metrics, cluster: &Cluster, tracker: &mut PodTracker, now: Timestamp) {
    tracker.retain(cluster);
    let c = &m.cluster;
    let mut pods_state = c.pods_state.rebuild();
    let mut unstarted = c.unstarted.rebuild();
    let mut unbound = c.unbound.rebuild();
    let mut provisioning_unstarted = c.provisioning_unstarted.rebuild();
    let mut provisioning_unbound = c.provisioning_unbound.rebuild();
    let mut scheduling_undecided = c.scheduling_undecided.rebuild();
    for pod in cluster.pods() {
        let state = state_values(cluster, pod);
        pods_state.set(&state.each_ref().map(String::as_str), 1.0);
        let key = pod.pod.id();
        let id = [pod.pod.name.as_str(), pod.pod.namespace.as_str()];
        let since = |at: Timestamp| seconds(at, now).max(0.0);
        let pending = pod.phase == PodPhase::Pending;
        let schedulable = tracker.schedulable.get(&key).copied();
        let not_started =
            pending || (tracker.pending.contains(&key) && !pod.ready && !pod.phase.is_terminal());
        if not_started {
            if let Some(created) = pod.created {
                unstarted.set(&id, since(created));
            }
            if let Some(at) = schedulable {
                provisioning_unstarted.set(&id, since(at));
            }
        }
        if pending && !pod.scheduled {
            if let Some(created) = pod.created {
                unbound.set(&id, since(created));
            }
            if let Some(at) = schedulable {
                provisioning_unbound.set(&id, since(at));
            }
        }
        let undecided = !tracker.decided.contains_key(&key)
            && !pod.scheduled
            && pod.pod.node_name.is_none()
            && !pod.phase.is_terminal();
        if let Some(ack) = tracker.ack.get(&key).filter(|_| undecided) {
            scheduling_undecided.set(&id, since(*ack));
        }
    }
    for rebuilt in
        [pods_state, unstarted, unbound, provisioning_unstarted, provisioning_unbound, scheduling_undecided]
    {
        rebuilt.finish();
    }
}
