//! Termination (upstream core `node/termination` and `terminator`): a NodeClaim's Node is drained, and
//! its volumes detached, before its VM is deleted.
//!
//! Called from the NodeClaim finalizer in [`crate::controllers::nodeclaim::lifecycle`] (a Node deleted by someone else gets its
//! claim deleted there, so both paths come through here). Each call is one non-blocking pass:
//!
//! 1. taint the Node `karpenter.sh/disrupted:NoSchedule` (and exclude it from external load balancers);
//! 2. list its pods and decide, with [`crate::controllers::node::drain`] (pure, `now` passed in), which to evict and which
//!    to delete: one tier at a time (non-critical pods, non-critical DaemonSet pods, critical pods,
//!    critical DaemonSet pods), pods under an active `karpenter.sh/do-not-disrupt` waited for but never
//!    evicted;
//! 3. evict through the Eviction API with a UID precondition (404/409 = already gone); a 429 (a
//!    PodDisruptionBudget refuses) or 500 (several budgets) is retried on a later pass with backoff;
//! 4. once no pod is waited for, wait until the Node's VolumeAttachments are gone (upstream
//!    `awaitVolumeDetachment`: the attach-detach controller removes them once the pods are gone, and
//!    deleting the VM first would leave the disks attached to a deleted machine), except those of
//!    volumes that pods staying on the Node use;
//! 5. report done, or the delay after which the caller should requeue.
//!
//! With a termination deadline (`deletionTimestamp + spec.terminationGracePeriod`, or the
//! `karpenter.sh/nodeclaim-termination-timestamp` node repair sets), the drain ends by it: each remaining
//! pod is deleted directly (bypassing tiers, PDBs and do-not-disrupt) at `deadline − its
//! terminationGracePeriodSeconds`, its grace clamped to the time left; once the deadline has passed
//! neither pods nor VolumeAttachments are waited for.
//!
//! Evictions go through their own client built with `default_retry = false`: kube's default retry layer
//! retries a PDB's 429 for minutes inside one call, which would stall the reconcile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, EvictParams, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::apis::NodeClaim;
use crate::cloud::{CloudError, CloudProvider};
use crate::controllers::node::drain::{
    eviction_outcome, pending_attachments, plan, termination_deadline, Attachment, DrainPlan, DrainPod,
    EvictionOutcome,
};
use crate::controllers::writes::{self, Guard};
use crate::controllers::{events, ControllerError, Shared};
use crate::model::labels::{LABEL_NODEPOOL, TAINT_DISRUPTED};
use crate::operator::metrics::{self, controller, in_controller};

/// Upstream excludes a draining node from external load balancers.
pub const LABEL_EXCLUDE_FROM_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
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
    /// Claims whose Nodes were counted drained (`karpenter_nodes_drained_total` once per claim).
    drained: Mutex<BTreeSet<String>>,
}

impl Termination {
    /// `evictions` must be built with `default_retry = false` (see [`eviction_client`]).
    pub fn new(evictions: Client) -> Self {
        Self { evictions, blocked: Mutex::new(BTreeMap::new()), drained: Mutex::new(BTreeSet::new()) }
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

    /// Whether `claim`'s drain is seen complete for the first time; claims `live` no longer holds are
    /// forgotten.
    fn first_drained(&self, claim: &str, live: impl Fn(&str) -> bool) -> bool {
        let mut drained = self.drained.lock().unwrap_or_else(|p| p.into_inner());
        drained.retain(|c| live(c));
        drained.insert(claim.to_string())
    }
}

/// A client like the one `config` gives, but without kube's retry layer, for evictions.
pub fn eviction_client(mut config: kube::Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    Client::try_from(config)
}

/// One drain pass over the claim's Nodes. `None` when they are drained (or gone) and their volumes
/// detached, so the VM may be deleted; otherwise the delay after which to look again.
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
    // Nodes whose pods are gone, with the volumes of the pods that stay: their attachments are next.
    let mut detaching: Vec<(String, BTreeSet<String>)> = Vec::new();
    for node_name in node_names {
        let Some(node) = nodes.get_opt(node_name).await? else { continue };
        if instance_gone(claim, shared, &node).await {
            tracing::info!(nodeclaim = %claim_name, node = %node_name, "node not ready and its VM is gone; not draining");
            continue;
        }
        match taint(&nodes, &node).await? {
            Some(true) => {
                shared.events.on_claim(claim, events::terminating(std::slice::from_ref(node_name))).await
            }
            Some(false) => {}
            // The Node changed since it was read: taint the one as it is now, on the next pass.
            None => return Ok(Some(DRAIN_POLL)),
        }
        let now = Timestamp::now();
        let list = Api::<Pod>::all(shared.client.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
            .await?;
        let pods: Vec<DrainPod> = list.items.iter().map(DrainPod::from_pod).collect();
        let plan = plan(&pods, deadline, now);
        if plan.drained() && plan.delete.is_empty() {
            if deadline.is_none_or(|d| now < d) {
                detaching.push((node_name.clone(), kept_volumes(shared, &pods, now)));
            }
            continue;
        }
        // Past the deadline nothing is waited for, but the pods still get their (clamped) deletes.
        waiting |= !plan.drained();
        let reason = drain_reason(claim);
        let (evicted, refused) = execute(&shared.termination.evictions, &pods, &plan, &reason).await?;
        blocked += refused;
        if refused > 0 {
            shared.events.on_claim(claim, events::eviction_blocked(node_name, refused)).await;
        }
        tracing::info!(
            nodeclaim = %claim_name,
            node = %node_name,
            tier = plan.tier.map_or("", |t| t.as_str()),
            waiting = plan.waiting,
            evicted,
            blocked_by_pdb = refused,
            deleted = plan.delete.len(),
            do_not_disrupt = plan.do_not_disrupt,
            "draining node"
        );
    }
    if !waiting && !detaching.is_empty() {
        let attachments = list_attachments(shared).await?;
        for (node_name, kept) in &detaching {
            let pending = pending_attachments(&attachments, node_name, kept);
            if pending.is_empty() {
                continue;
            }
            waiting = true;
            tracing::info!(nodeclaim = %claim_name, node = %node_name, volume_attachments = ?pending, "waiting for volumes to detach");
            shared.events.on_claim(claim, events::awaiting_volume_detachment(node_name, &pending)).await;
        }
    }
    if !waiting {
        if !node_names.is_empty() {
            shared.events.on_claim(claim, events::drained()).await;
            if shared.termination.first_drained(&claim_name, |c| shared.cluster().nodeclaim(c).is_some()) {
                let pool = claim.labels().get(LABEL_NODEPOOL).map_or("", String::as_str);
                metrics::get().node_drained(pool);
            }
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

/// The PersistentVolumes used by the pods the drain leaves on the Node (upstream: not drainable), whose
/// attachments therefore do not hold the VM; read through the index's claims.
fn kept_volumes<C>(shared: &Shared<C>, pods: &[DrainPod], now: Timestamp) -> BTreeSet<String> {
    let cluster = shared.cluster();
    pods.iter()
        .filter(|p| !p.drainable(now))
        .flat_map(|p| p.claims.iter().filter_map(|c| cluster.claim_volume(&p.namespace, c)))
        .map(str::to_string)
        .collect()
}

/// Every VolumeAttachment: the API offers no field selector on `spec.nodeName`, so they are listed
/// and filtered here.
async fn list_attachments<C>(shared: &Shared<C>) -> Result<Vec<Attachment>, ControllerError> {
    let list = Api::<VolumeAttachment>::all(shared.client.clone()).list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .map(|va| Attachment {
            name: va.name_any(),
            node: va.spec.node_name,
            volume: va.spec.source.persistent_volume_name.filter(|v| !v.is_empty()),
        })
        .collect())
}

/// Upstream: a NotReady Node whose instance the cloud no longer has is not drained (nothing runs there).
async fn instance_gone<C: CloudProvider + 'static>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    node: &Node,
) -> bool {
    if crate::state::records::is_ready(node) {
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
/// Taints the Node `karpenter.sh/disrupted:NoSchedule` and takes it out of load balancers: whether it
/// did so now (false: it already was), or None when the Node changed since it was read.
async fn taint(nodes: &Api<Node>, node: &Node) -> Result<Option<bool>, ControllerError> {
    let mut taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let tainted = taints.iter().any(|t| t.key == TAINT_DISRUPTED && t.effect == "NoSchedule");
    let labelled = node.labels().get(LABEL_EXCLUDE_FROM_LB).is_some_and(|v| v == "true");
    if tainted && labelled {
        return Ok(Some(false));
    }
    if !tainted {
        taints.push(k8s_openapi::api::core::v1::Taint {
            key: TAINT_DISRUPTED.to_string(),
            effect: "NoSchedule".to_string(),
            ..Default::default()
        });
    }
    let patch = json!({
        "metadata": { "labels": { LABEL_EXCLUDE_FROM_LB: "true" } },
        "spec": { "taints": taints },
    });
    if writes::patch(nodes, node, patch).await?.is_none() {
        return Ok(None);
    }
    tracing::info!(node = %node.name_any(), taint = TAINT_DISRUPTED, "tainted node for termination");
    Ok(Some(true))
}

/// The `reason` of `karpenter_pods_drained_total`: the claim's DisruptionReason, else upstream's
/// `Forceful Termination` (core `terminator/eviction.go` `evictionReason`).
fn drain_reason(claim: &NodeClaim) -> String {
    let conditions = claim.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    crate::apis::conditions::get(conditions, crate::apis::conditions::DISRUPTION_REASON)
        .filter(|c| c.status == crate::apis::conditions::ConditionStatus::True)
        .map_or_else(|| "Forceful Termination".to_string(), |c| c.reason.clone())
}

/// One eviction with a UID precondition, so a replacement pod of the same name is never evicted;
/// counted by HTTP status, and a pod evicted counted as drained for `reason`.
async fn evict(client: &Client, pod: &DrainPod, reason: &str) -> Result<EvictionOutcome, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            preconditions: Some(Guard::uid(pod.uid.clone()).preconditions()),
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    };
    let result = api.evict(&pod.name, &params).await;
    let m = metrics::get();
    match &result {
        Ok(_) => {
            m.eviction_requested(200);
            m.pod_drained(reason);
        }
        Err(kube::Error::Api(e)) => m.eviction_requested(e.code),
        Err(_) => {}
    }
    let outcome = eviction_outcome(result);
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
    reason: &str,
) -> Result<(usize, usize), ControllerError> {
    for &(i, grace) in &plan.delete {
        let pod = &pods[i];
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
        let grace = u32::try_from(grace).unwrap_or(u32::MAX);
        tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), grace_s = grace, "terminationGracePeriod: deleting pod");
        // A replacement pod of the same name is another pod: only this uid is deleted.
        writes::delete_named(&api, &pod.name, &Guard::uid(pod.uid.clone()), Some(grace)).await?;
    }
    let mut outcomes = Vec::with_capacity(plan.evict.len());
    for chunk in plan.evict.chunks(EVICTION_CONCURRENCY) {
        outcomes
            .extend(futures::future::join_all(chunk.iter().map(|&i| evict(client, &pods[i], reason))).await);
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
