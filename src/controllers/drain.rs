//! The drain's decisions (pure, `now` passed in): which pods of a terminating Node to evict, which to
//! delete at the termination deadline, which to leave (DaemonSet, mirror, terminal, tolerating the
//! disrupted taint, stuck terminating), and what an Eviction API answer means. [`super::termination`]
//! does the calls.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::apis::duration;
use crate::apis::NodeClaim;
use crate::model::labels::{ANNOTATION_DO_NOT_DISRUPT, TAINT_DISRUPTED};
use crate::state::records::ANNOTATION_MIRROR_POD;

/// A pod terminating this long past its deletionTimestamp no longer holds up the drain (upstream).
const STUCK_TERMINATING: SignedDuration = SignedDuration::from_secs(60);
/// The API default for `terminationGracePeriodSeconds`.
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

/// What the drain decides on, per pod.
#[derive(Clone, Debug, PartialEq)]
pub struct DrainPod {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub daemonset: bool,
    pub mirror: bool,
    /// Succeeded or Failed.
    pub terminal: bool,
    pub deletion: Option<Timestamp>,
    /// Annotated `karpenter.sh/do-not-disrupt: "true"`.
    pub do_not_disrupt: bool,
    /// Tolerates `karpenter.sh/disrupted:NoSchedule`, so it would be scheduled straight back.
    pub tolerates_disrupted: bool,
    /// `spec.terminationGracePeriodSeconds`.
    pub grace_seconds: i64,
}

impl DrainPod {
    pub fn from_pod(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        let annotations = pod.metadata.annotations.as_ref();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let tolerates_disrupted = spec.and_then(|s| s.tolerations.as_ref()).into_iter().flatten().any(|t| {
            let effect_ok = matches!(t.effect.as_deref(), None | Some("") | Some("NoSchedule"));
            let key_ok = match t.key.as_deref() {
                None | Some("") => t.operator.as_deref() == Some("Exists"),
                Some(key) => key == TAINT_DISRUPTED,
            };
            effect_ok && key_ok
        });
        Self {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
            uid: pod.uid(),
            daemonset: pod
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.kind == "DaemonSet"),
            mirror: annotations.is_some_and(|a| a.contains_key(ANNOTATION_MIRROR_POD)),
            terminal: matches!(phase, Some("Succeeded") | Some("Failed")),
            deletion: pod.metadata.deletion_timestamp.as_ref().map(|t| t.0),
            do_not_disrupt: annotations
                .and_then(|a| a.get(ANNOTATION_DO_NOT_DISRUPT))
                .is_some_and(|v| v == "true"),
            tolerates_disrupted,
            grace_seconds: spec
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
                .max(0),
        }
    }
}

/// One pass of the drain: what to do now, and whether anything is still waited for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainPlan {
    /// Indexes of the pods to evict through the Eviction API.
    pub evict: Vec<usize>,
    /// Indexes of the pods to delete directly (terminationGracePeriod), with the grace to give them.
    pub delete: Vec<(usize, i64)>,
    /// Pods the drain still waits for (including the ones acted on in this pass).
    pub waiting: usize,
    /// Of those, pods held by `karpenter.sh/do-not-disrupt`.
    pub do_not_disrupt: usize,
}

impl DrainPlan {
    pub fn drained(&self) -> bool {
        self.waiting == 0
    }
}

/// When the drain must be over: `deletionTimestamp + spec.terminationGracePeriod`, if both are set.
pub fn termination_deadline(claim: &NodeClaim) -> Result<Option<Timestamp>, duration::DurationError> {
    let (Some(deleted), Some(tgp)) =
        (claim.metadata.deletion_timestamp.as_ref(), claim.spec.termination_grace_period.as_deref())
    else {
        return Ok(None);
    };
    let tgp = duration::parse(tgp)?;
    let tgp = SignedDuration::try_from(tgp).unwrap_or(SignedDuration::MAX);
    Ok(Some(deleted.0.checked_add(tgp).unwrap_or(Timestamp::MAX)))
}

/// Which pods to evict or delete at `now`, given the termination deadline (if any).
pub fn plan(pods: &[DrainPod], deadline: Option<Timestamp>, now: Timestamp) -> DrainPlan {
    let mut plan = DrainPlan::default();
    let past_deadline = deadline.is_some_and(|d| now >= d);
    for (i, pod) in pods.iter().enumerate() {
        if pod.daemonset || pod.mirror || pod.terminal || pod.tolerates_disrupted {
            continue;
        }
        if let Some(deleted) = pod.deletion {
            let stuck = now.duration_since(deleted) > STUCK_TERMINATING;
            if !stuck && !past_deadline {
                plan.waiting += 1;
            }
            continue;
        }
        if let Some(deadline) = deadline {
            let left = deadline.duration_since(now).as_secs().max(0);
            if left <= pod.grace_seconds {
                // Deleted now so its grace period ends by the deadline (upstream: at least 1 s).
                plan.delete.push((i, pod.grace_seconds.min(left.max(1))));
                if !past_deadline {
                    plan.waiting += 1;
                }
                continue;
            }
        }
        plan.waiting += 1;
        if pod.do_not_disrupt {
            plan.do_not_disrupt += 1;
        } else {
            plan.evict.push(i);
        }
    }
    plan
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
mod tests {
    use serde_json::json;

    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn pod(name: &str) -> DrainPod {
        DrainPod {
            namespace: "ns".into(),
            name: name.into(),
            uid: Some(format!("uid-{name}")),
            daemonset: false,
            mirror: false,
            terminal: false,
            deletion: None,
            do_not_disrupt: false,
            tolerates_disrupted: false,
            grace_seconds: 30,
        }
    }

    #[test]
    fn evicts_ordinary_pods_and_skips_daemonset_mirror_terminal_and_tolerating_pods() {
        let pods = vec![
            pod("web"),
            DrainPod { daemonset: true, ..pod("ds") },
            DrainPod { mirror: true, ..pod("static") },
            DrainPod { terminal: true, ..pod("done") },
            DrainPod { tolerates_disrupted: true, ..pod("tolerant") },
            pod("api"),
        ];
        let plan = plan(&pods, None, t(0));
        assert_eq!(plan.evict, vec![0, 5]);
        assert!(plan.delete.is_empty());
        assert_eq!(plan.waiting, 2);
        assert!(!plan.drained());
    }

    #[test]
    fn nothing_to_wait_for_is_drained() {
        let pods = vec![DrainPod { daemonset: true, ..pod("ds") }];
        assert!(plan(&pods, None, t(0)).drained());
        assert!(plan(&[], None, t(0)).drained());
    }

    #[test]
    fn terminating_pods_are_waited_for_until_stuck() {
        let pods = vec![DrainPod { deletion: Some(t(0)), ..pod("going") }];
        let p = plan(&pods, None, t(30));
        assert!(p.evict.is_empty());
        assert_eq!(p.waiting, 1);
        assert!(plan(&pods, None, t(61)).drained(), "stuck more than a minute past its deletionTimestamp");
    }

    #[test]
    fn do_not_disrupt_pods_are_not_evicted_and_hold_the_drain_without_a_deadline() {
        let pods = vec![DrainPod { do_not_disrupt: true, ..pod("precious") }, pod("web")];
        let p = plan(&pods, None, t(1_000_000));
        assert_eq!(p.evict, vec![1]);
        assert_eq!((p.waiting, p.do_not_disrupt), (2, 1));
        assert!(p.delete.is_empty());
    }

    #[test]
    fn the_grace_period_forces_deletion_so_pods_end_by_the_deadline() {
        let deadline = Some(t(100));
        let pods = vec![
            DrainPod { do_not_disrupt: true, grace_seconds: 30, ..pod("precious") },
            DrainPod { grace_seconds: 10, ..pod("quick") },
            DrainPod { grace_seconds: 0, ..pod("instant") },
        ];
        // 50 s left: nobody's grace reaches the deadline yet; only the ordinary pods are evicted.
        let p = plan(&pods, deadline, t(50));
        assert_eq!(p.evict, vec![1, 2]);
        assert!(p.delete.is_empty());
        // 30 s left: the do-not-disrupt pod is deleted with its full grace.
        let p = plan(&pods, deadline, t(70));
        assert_eq!(p.delete, vec![(0, 30)]);
        assert_eq!(p.evict, vec![1, 2]);
        assert_eq!(p.waiting, 3);
        // 5 s left: grace clamped to the time left.
        let p = plan(&pods, deadline, t(95));
        assert_eq!(p.delete, vec![(0, 5), (1, 5)]);
        assert_eq!(p.evict, vec![2]);
    }

    #[test]
    fn past_the_deadline_everything_is_deleted_and_nothing_is_waited_for() {
        let deadline = Some(t(100));
        let pods = vec![
            DrainPod { do_not_disrupt: true, ..pod("precious") },
            pod("web"),
            DrainPod { deletion: Some(t(99)), ..pod("going") },
        ];
        let p = plan(&pods, deadline, t(100));
        assert_eq!(p.delete, vec![(0, 1), (1, 1)]);
        assert!(p.evict.is_empty());
        assert!(p.drained());
    }

    #[test]
    fn eviction_answers() {
        let api = |code: u16| {
            Err::<(), _>(kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..kube::core::Status::default()
            })))
        };
        assert_eq!(eviction_outcome(Ok::<(), kube::Error>(())).unwrap(), EvictionOutcome::Done);
        assert_eq!(eviction_outcome(api(404)).unwrap(), EvictionOutcome::Done);
        assert_eq!(eviction_outcome(api(409)).unwrap(), EvictionOutcome::Done);
        assert_eq!(eviction_outcome(api(429)).unwrap(), EvictionOutcome::Blocked);
        assert_eq!(eviction_outcome(api(500)).unwrap(), EvictionOutcome::Blocked);
        assert!(eviction_outcome(api(403)).is_err());
    }

    fn claim(deleted: Option<Timestamp>, tgp: Option<&str>) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
            "spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "d"},
                     "requirements": []}
        }))
        .unwrap();
        claim.metadata.deletion_timestamp = deleted.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time);
        claim.spec.termination_grace_period = tgp.map(String::from);
        claim
    }

    #[test]
    fn the_deadline_is_deletion_plus_the_grace_period() {
        assert_eq!(termination_deadline(&claim(Some(t(0)), Some("1h30s"))).unwrap(), Some(t(3630)));
        assert_eq!(termination_deadline(&claim(Some(t(0)), None)).unwrap(), None);
        assert_eq!(termination_deadline(&claim(None, Some("1h"))).unwrap(), None);
        assert!(termination_deadline(&claim(Some(t(0)), Some("soon"))).is_err());
    }
}
