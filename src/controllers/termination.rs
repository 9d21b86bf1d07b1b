//! Termination (upstream core `node/termination` and `terminator`): a NodeClaim's Node is drained before
//! its VM is deleted.
//!
//! Called from the NodeClaim finalizer in [`super::lifecycle`] (a Node deleted by someone else gets its
//! claim deleted there, so both paths come through here). Each call is one non-blocking pass:
//!
//! 1. taint the Node `karpenter.sh/disrupted:NoSchedule` (and exclude it from external load balancers);
//! 2. list its pods and decide, with [`plan`] (pure, `now` passed in), which to evict and which to delete;
//! 3. evict through the Eviction API with a UID precondition (404/409 = already gone); a 429 (a
//!    PodDisruptionBudget refuses) or 500 (several budgets) is retried on a later pass with backoff;
//! 4. report drained, or the delay after which the caller should requeue.
//!
//! Skipped: DaemonSet and mirror pods, terminal pods, pods tolerating the disrupted taint, pods stuck
//! terminating for over a minute. Pods annotated `karpenter.sh/do-not-disrupt: "true"` are never evicted;
//! the drain waits for them. With a `spec.terminationGracePeriod`, the drain ends by
//! `deletionTimestamp + terminationGracePeriod`: each remaining pod is deleted directly (bypassing PDBs and
//! do-not-disrupt) at `deadline − its terminationGracePeriodSeconds`, its grace clamped to the time left,
//! and once the deadline has passed nothing is waited for.
//!
//! Evictions go through their own client built with `default_retry = false`: kube's default retry layer
//! retries a PDB's 429 for minutes inside one call, which would stall the reconcile.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::{events, ControllerError, Shared};
use crate::apis::duration;
use crate::apis::labels::{ANNOTATION_DO_NOT_DISRUPT, TAINT_DISRUPTED};
use crate::apis::NodeClaim;
use crate::cloud::{CloudError, CloudProvider};
use crate::operator::metrics::{controller, in_controller};
use crate::state::records::ANNOTATION_MIRROR_POD;

/// Upstream excludes a draining node from external load balancers.
pub const LABEL_EXCLUDE_FROM_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// A pod terminating this long past its deletionTimestamp no longer holds up the drain (upstream).
const STUCK_TERMINATING: SignedDuration = SignedDuration::from_secs(60);
/// The API default for `terminationGracePeriodSeconds`.
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;
/// How often a drain in progress is looked at again.
const DRAIN_POLL: Duration = Duration::from_secs(1);
/// Backoff for passes where a PodDisruptionBudget refused an eviction (upstream: 100 ms – 10 s).
const BLOCKED_MIN: Duration = Duration::from_secs(1);
const BLOCKED_MAX: Duration = Duration::from_secs(10);
/// Evictions in flight at once for one node.
const EVICTION_CONCURRENCY: usize = 16;

/// The termination controller's own state: the eviction client and the per-claim backoff.
pub struct Termination {
    evictions: Client,
    blocked: Mutex<BTreeMap<String, u32>>,
}

impl Termination {
    /// `evictions` must be built with `default_retry = false` (see [`eviction_client`]).
    pub fn new(evictions: Client) -> Self {
        Self { evictions, blocked: Mutex::new(BTreeMap::new()) }
    }

    fn blocked(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u32>> {
        self.blocked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one more blocked pass for `claim` and returns the delay before the next.
    fn back_off(&self, claim: &str) -> Duration {
        let mut blocked = self.blocked();
        let n = blocked.entry(claim.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        BLOCKED_MIN.saturating_mul(1u32 << (*n - 1).min(4)).min(BLOCKED_MAX)
    }

    fn reset(&self, claim: &str) {
        self.blocked().remove(claim);
    }
}

/// A client like the one `config` gives, but without kube's retry layer, for evictions.
pub fn eviction_client(mut config: kube::Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    Client::try_from(config)
}

// --- Decisions (pure) ----------------------------------------------------------------------------

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

// --- I/O -----------------------------------------------------------------------------------------

/// One drain pass over the claim's Nodes. `None` when they are drained (or gone) and the VM may be
/// deleted; otherwise the delay after which to look again.
pub async fn drain<C: CloudProvider + 'static>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    node_names: &[String],
) -> Result<Option<Duration>, ControllerError> {
    let claim_name = claim.name_any();
    let deadline = match termination_deadline(claim) {
        Ok(deadline) => deadline,
        Err(error) => {
            tracing::warn!(nodeclaim = %claim_name, %error, "ignoring an unreadable terminationGracePeriod");
            None
        }
    };
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let mut waiting = false;
    let mut blocked = 0usize;
    for node_name in node_names {
        let Some(node) = nodes.get_opt(node_name).await? else { continue };
        if instance_gone(claim, shared, &node).await {
            tracing::info!(nodeclaim = %claim_name, node = %node_name, "node not ready and its VM is gone; not draining");
            continue;
        }
        if taint(&nodes, &node).await? {
            shared.events.on_claim(claim, events::terminating(std::slice::from_ref(node_name))).await;
        }
        let now = Timestamp::now();
        let list = Api::<Pod>::all(shared.client.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
            .await?;
        let pods: Vec<DrainPod> = list.items.iter().map(DrainPod::from_pod).collect();
        let plan = plan(&pods, deadline, now);
        if plan.drained() {
            continue;
        }
        waiting = true;
        let (evicted, refused) = execute(&shared.termination.evictions, &pods, &plan).await?;
        blocked += refused;
        if refused > 0 {
            shared.events.on_claim(claim, events::eviction_blocked(node_name, refused)).await;
        }
        tracing::info!(
            nodeclaim = %claim_name,
            node = %node_name,
            waiting = plan.waiting,
            evicted,
            blocked_by_pdb = refused,
            deleted = plan.delete.len(),
            do_not_disrupt = plan.do_not_disrupt,
            "draining node"
        );
    }
    if !waiting {
        if !node_names.is_empty() {
            shared.events.on_claim(claim, events::drained()).await;
        }
        shared.termination.reset(&claim_name);
        return Ok(None);
    }
    let mut delay = if blocked > 0 { shared.termination.back_off(&claim_name) } else { DRAIN_POLL };
    if let Some(deadline) = deadline {
        // Wake up in time to enforce the terminationGracePeriod.
        let left = Duration::try_from(deadline.duration_since(Timestamp::now())).unwrap_or_default();
        delay = delay.min(left.max(DRAIN_POLL));
    }
    Ok(Some(delay))
}

/// Upstream: a NotReady Node whose instance the cloud no longer has is not drained (nothing runs there).
async fn instance_gone<C: CloudProvider + 'static>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    node: &Node,
) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if ready {
        return false;
    }
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .or_else(|| claim.status.as_ref().and_then(|s| s.provider_id.clone()));
    match provider_id {
        Some(id) if !id.is_empty() => {
            // Upstream's node termination controller asks this; its calls carry that controller's name.
            let found = in_controller(controller::NODE_TERMINATION, shared.cloud.get(&id)).await;
            matches!(found, Err(CloudError::NotFound(_)))
        }
        _ => false,
    }
}

/// Adds `karpenter.sh/disrupted:NoSchedule` (and the load-balancer exclusion label) unless present;
/// true when it did.
async fn taint(nodes: &Api<Node>, node: &Node) -> Result<bool, ControllerError> {
    let mut taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let tainted = taints.iter().any(|t| t.key == TAINT_DISRUPTED && t.effect == "NoSchedule");
    let labelled = node.labels().get(LABEL_EXCLUDE_FROM_LB).is_some_and(|v| v == "true");
    if tainted && labelled {
        return Ok(false);
    }
    if !tainted {
        taints.push(k8s_openapi::api::core::v1::Taint {
            key: TAINT_DISRUPTED.to_string(),
            effect: "NoSchedule".to_string(),
            ..Default::default()
        });
    }
    let patch = json!({
        "metadata": {
            "resourceVersion": node.resource_version(),
            "labels": { LABEL_EXCLUDE_FROM_LB: "true" },
        },
        "spec": { "taints": taints },
    });
    nodes.patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await?;
    tracing::info!(node = %node.name_any(), taint = TAINT_DISRUPTED, "tainted node for termination");
    Ok(true)
}

/// One eviction with a UID precondition, so a replacement pod of the same name is never evicted.
async fn evict(client: &Client, pod: &DrainPod) -> Result<EvictionOutcome, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            preconditions: Some(Preconditions { uid: pod.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    };
    let outcome = eviction_outcome(api.evict(&pod.name, &params).await);
    if matches!(outcome, Ok(EvictionOutcome::Blocked)) {
        tracing::debug!(pod = %format!("{}/{}", pod.namespace, pod.name), "eviction refused by a PodDisruptionBudget");
    }
    outcome
}

/// Issues the plan's deletes and evictions; returns (evictions accepted, evictions refused).
async fn execute(
    client: &Client,
    pods: &[DrainPod],
    plan: &DrainPlan,
) -> Result<(usize, usize), ControllerError> {
    for &(i, grace) in &plan.delete {
        let pod = &pods[i];
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(u32::try_from(grace).unwrap_or(u32::MAX)),
            preconditions: Some(Preconditions { uid: pod.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), grace_s = grace, "terminationGracePeriod: deleting pod");
        match api.delete(&pod.name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut outcomes = Vec::with_capacity(plan.evict.len());
    for chunk in plan.evict.chunks(EVICTION_CONCURRENCY) {
        outcomes.extend(futures::future::join_all(chunk.iter().map(|&i| evict(client, &pods[i]))).await);
    }
    let (mut done, mut blocked) = (0, 0);
    for outcome in outcomes {
        match outcome? {
            EvictionOutcome::Done => done += 1,
            EvictionOutcome::Blocked => blocked += 1,
        }
    }
    Ok((done, blocked))
}

#[cfg(test)]
mod tests {
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
