//! The drain's decisions (pure, `now` passed in): which pods of a terminating Node to evict, in which
//! order, which to delete at the termination deadline, which to leave, which VolumeAttachments still
//! hold the VM, and what an Eviction API answer means. [`crate::controllers::node::termination`] does the calls.
//!
//! As upstream `pkg/controllers/node/termination/terminator/terminator.go`:
//! - the drain waits for every non-terminal pod except mirror pods, pods tolerating
//!   `karpenter.sh/disrupted:NoSchedule` (they would be scheduled straight back) and pods stuck
//!   terminating for over a minute;
//! - those pods go in four tiers, one at a time: non-critical pods, non-critical DaemonSet pods,
//!   critical pods (priority class `system-cluster-critical` / `system-node-critical`), critical
//!   DaemonSet pods; a tier is evicted only once every pod of the tiers before it is gone, so the
//!   node's daemons (logging, networking) outlive the workloads they serve;
//! - pods under an active `karpenter.sh/do-not-disrupt` (`"true"`, or a duration counted from
//!   `status.startTime`) are never evicted, but the drain waits for them;
//! - with a termination deadline (terminationGracePeriod, or the repair controller's forced
//!   termination), each pod is deleted directly at `deadline − its terminationGracePeriodSeconds`,
//!   whatever its tier, PDB or do-not-disrupt, with its grace clamped to the time left (at least 1 s).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::apis::duration;
use crate::apis::NodeClaim;
use crate::disruption::DoNotDisrupt;
use crate::model::labels::{ANNOTATION_DO_NOT_DISRUPT, TAINT_DISRUPTED};
use crate::scheduling::from_k8s::pod_claims;
use crate::state::records::ANNOTATION_MIRROR_POD;

/// Upstream `v1.NodeClaimTerminationTimestampAnnotationKey`: when the claim's Node must be gone. Node
/// repair sets it to the moment it deletes an unhealthy claim, so the drain forces everything at once.
pub const ANNOTATION_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
/// A pod terminating this long past its deletionTimestamp no longer holds up the drain (upstream).
const STUCK_TERMINATING: SignedDuration = SignedDuration::from_secs(60);
/// The API default for `terminationGracePeriodSeconds`.
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;
/// Priority classes upstream drains last (`groupPodsByPriority`).
const CRITICAL_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// The drain order; lower tiers go first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    Workload,
    DaemonSet,
    CriticalWorkload,
    CriticalDaemonSet,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Workload => "non-critical",
            Tier::DaemonSet => "non-critical-daemonset",
            Tier::CriticalWorkload => "critical",
            Tier::CriticalDaemonSet => "critical-daemonset",
        }
    }
}

/// What the drain decides on, per pod.
#[derive(Clone, Debug, PartialEq)]
pub struct DrainPod {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub daemonset: bool,
    /// Priority class `system-cluster-critical` or `system-node-critical`.
    pub critical: bool,
    /// A static pod's API copy (annotated by the kubelet, or owned by the Node): the API cannot remove it.
    pub mirror: bool,
    /// Succeeded or Failed.
    pub terminal: bool,
    pub deletion: Option<Timestamp>,
    /// The `karpenter.sh/do-not-disrupt` annotation; an unreadable value protects nothing (upstream).
    pub do_not_disrupt: DoNotDisrupt,
    /// `status.startTime`, from which a do-not-disrupt duration counts.
    pub started: Option<Timestamp>,
    /// Tolerates `karpenter.sh/disrupted:NoSchedule`, so it would be scheduled straight back.
    pub tolerates_disrupted: bool,
    /// `spec.terminationGracePeriodSeconds`.
    pub grace_seconds: i64,
    /// The PersistentVolumeClaims its volumes name (their attachments stay with a pod that stays).
    pub claims: Vec<String>,
}

impl DrainPod {
    pub fn from_pod(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        let annotations = pod.metadata.annotations.as_ref();
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref());
        let tolerates_disrupted = spec.and_then(|s| s.tolerations.as_ref()).into_iter().flatten().any(|t| {
            let effect_ok = matches!(t.effect.as_deref(), None | Some("") | Some("NoSchedule"));
            let exists = t.operator.as_deref() == Some("Exists");
            let key_ok = match t.key.as_deref() {
                None | Some("") => exists,
                // The taint has no value: Equal matches only an empty one.
                Some(key) => {
                    key == TAINT_DISRUPTED && (exists || t.value.as_deref().unwrap_or("").is_empty())
                }
            };
            effect_ok && key_ok
        });
        let owned_by = |kind: &str| pod.owner_references().iter().any(|o| o.kind == kind);
        let priority_class = spec.and_then(|s| s.priority_class_name.as_deref()).unwrap_or_default();
        let do_not_disrupt = annotations.and_then(|a| a.get(ANNOTATION_DO_NOT_DISRUPT)).map(String::as_str);
        Self {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
            uid: pod.uid(),
            daemonset: pod
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.kind == "DaemonSet"),
            critical: CRITICAL_PRIORITY_CLASSES.contains(&priority_class),
            mirror: annotations.is_some_and(|a| a.contains_key(ANNOTATION_MIRROR_POD)) || owned_by("Node"),
            terminal: matches!(phase, Some("Succeeded") | Some("Failed")),
            deletion: pod.metadata.deletion_timestamp.as_ref().map(|t| t.0),
            do_not_disrupt: DoNotDisrupt::from_annotation(do_not_disrupt).unwrap_or_default(),
            started: status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
            tolerates_disrupted,
            grace_seconds: spec
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
                .max(0),
            claims: spec.map(|s| pod_claims(&pod.name_any(), s)).unwrap_or_default(),
        }
    }

    pub fn tier(&self) -> Tier {
        match (self.critical, self.daemonset) {
            (false, false) => Tier::Workload,
            (false, true) => Tier::DaemonSet,
            (true, false) => Tier::CriticalWorkload,
            (true, true) => Tier::CriticalDaemonSet,
        }
    }

    /// Upstream `IsDrainable`: the drain may remove it and waits for it (unless it is terminal).
    pub fn drainable(&self, now: Timestamp) -> bool {
        let stuck = self.deletion.is_some_and(|deleted| now.duration_since(deleted) > STUCK_TERMINATING);
        !self.tolerates_disrupted && !self.mirror && !stuck
    }

    /// Upstream `IsWaitingEviction`.
    fn waited_for(&self, now: Timestamp) -> bool {
        !self.terminal && self.drainable(now)
    }

    fn protected(&self, now: Timestamp) -> bool {
        self.do_not_disrupt.active(self.started, now).is_some()
    }
}

/// One pass of the drain: what to do now, and whether anything is still waited for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainPlan {
    /// Indexes of the pods to evict through the Eviction API (all of one tier).
    pub evict: Vec<usize>,
    /// Indexes of the pods to delete directly (termination deadline), with the grace to give them.
    pub delete: Vec<(usize, i64)>,
    /// Pods the drain still waits for, in every tier (including the ones acted on in this pass).
    pub waiting: usize,
    /// Of those, pods held by `karpenter.sh/do-not-disrupt`.
    pub do_not_disrupt: usize,
    /// The tier being evicted; `None` when nothing is waited for.
    pub tier: Option<Tier>,
}

impl DrainPlan {
    pub fn drained(&self) -> bool {
        self.waiting == 0
    }
}

/// When the drain must be over: the earlier of `deletionTimestamp + spec.terminationGracePeriod` and
/// the claim's `karpenter.sh/nodeclaim-termination-timestamp`, if either is set.
pub fn termination_deadline(claim: &NodeClaim) -> Result<Option<Timestamp>, duration::DurationError> {
    let annotated =
        claim.annotations().get(ANNOTATION_TERMINATION_TIMESTAMP).and_then(|t| t.parse::<Timestamp>().ok());
    let from_grace =
        match (claim.metadata.deletion_timestamp.as_ref(), claim.spec.termination_grace_period.as_deref()) {
            (Some(deleted), Some(tgp)) => {
                let tgp = SignedDuration::try_from(duration::parse(tgp)?).unwrap_or(SignedDuration::MAX);
                Some(deleted.0.checked_add(tgp).unwrap_or(Timestamp::MAX))
            }
            _ => None,
        };
    Ok(annotated.into_iter().chain(from_grace).min())
}

/// Which pods to evict or delete at `now`, given the termination deadline (if any).
pub fn plan(pods: &[DrainPod], deadline: Option<Timestamp>, now: Timestamp) -> DrainPlan {
    let mut plan = DrainPlan::default();
    let past_deadline = deadline.is_some_and(|d| now >= d);
    let waiting: Vec<usize> = (0..pods.len()).filter(|&i| pods[i].waited_for(now)).collect();
    if let Some(deadline) = deadline {
        // Upstream DeleteExpiringPods: across tiers, so every pod gets as much of its grace as is left.
        let left = deadline.duration_since(now).as_secs();
        for &i in &waiting {
            let pod = &pods[i];
            let due = left <= pod.grace_seconds;
            // A pod already terminating is deleted again when its grace would outlast the deadline.
            let outlasts = pod.deletion.is_none_or(|ends| ends > deadline);
            if due && outlasts {
                plan.delete.push((i, left.max(1)));
            }
        }
    }
    if past_deadline {
        return plan;
    }
    plan.waiting = waiting.len();
    plan.do_not_disrupt = waiting.iter().filter(|&&i| pods[i].protected(now)).count();
    plan.tier = waiting.iter().map(|&i| pods[i].tier()).min();
    let deleting: BTreeSet<usize> = plan.delete.iter().map(|&(i, _)| i).collect();
    plan.evict = waiting
        .into_iter()
        .filter(|&i| Some(pods[i].tier()) == plan.tier)
        .filter(|&i| pods[i].deletion.is_none() && !pods[i].protected(now) && !deleting.contains(&i))
        .collect();
    plan
}

/// A VolumeAttachment (storage.k8s.io/v1), as the drain reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    pub name: String,
    /// `spec.nodeName`.
    pub node: String,
    /// `spec.source.persistentVolumeName`; `None` for an inline volume, which never holds the VM.
    pub volume: Option<String>,
}

/// Upstream `awaitVolumeDetachment` / `filterVolumeAttachments`: the attachments of `node` the VM must
/// outlive, that is all of its persistent-volume attachments except those of volumes `kept` by pods the
/// drain leaves on the node. Their names, sorted.
pub fn pending_attachments(attachments: &[Attachment], node: &str, kept: &BTreeSet<String>) -> Vec<String> {
    let mut names: Vec<String> = attachments
        .iter()
        .filter(|a| a.node == node)
        .filter(|a| a.volume.as_ref().is_some_and(|v| !kept.contains(v)))
        .map(|a| a.name.clone())
        .collect();
    names.sort();
    names
}

/// What an eviction call came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionOutcome {
    /// Accepted, or the pod is already gone / replaced (404, 409).
    Done,
    /// A PodDisruptionBudget refused it (429), or several budgets select the pod (500): retry later.
    Blocked,
}

/// Maps an Eviction API answer; other errors are returned.
pub fn eviction_outcome<T>(result: Result<T, kube::Error>) -> Result<EvictionOutcome, kube::Error> {
    match result {
        Ok(_) => Ok(EvictionOutcome::Done),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(EvictionOutcome::Done),
        Err(kube::Error::Api(e)) if e.code == 429 || e.code == 500 => Ok(EvictionOutcome::Blocked),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
#[path = "drain_tests.rs"]
mod tests;
