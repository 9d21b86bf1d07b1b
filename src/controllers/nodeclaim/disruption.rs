//! The detection half of disruption (upstream core `pkg/controllers/nodeclaim/disruption` and
//! `pkg/controllers/nodeclaim/podevents`, with the provider's drift checks): a leader-only sweep every
//! [`SWEEP_INTERVAL`] over the synced index that, for each NodeClaim not being deleted,
//! - sets the `Drifted` condition (True with the reason of [`drift::drift_reason`]) on a launched claim
//!   that no longer matches its NodePool or AKSNodeClass, and removes it once it matches again (or
//!   was never launched), with a `Drifted` event the first time;
//! - re-stamps the hash annotations of a claim whose hash version is not the current one
//!   ([`drift::restamp`]);
//! - writes `status.lastPodEventTime` when the set of pods bound to its node changed since the last
//!   sweep, at most once per [`POD_EVENT_DEDUPE`];
//! - sets `Consolidatable` once the NodePool's consolidateAfter has passed since then
//!   ([`drift::consolidatable`]) and removes it otherwise.
//!
//! The decision per claim is [`decide`], pure over index records and `now`; the sweep only reads the
//! index and writes. Status writes are merge patches on `nodeclaims/status` carrying the
//! resourceVersion the index read the conditions at, because a merge patch replaces the whole list:
//! a conflict waits for the next sweep rather than dropping another controller's condition (upstream
//! patches with an optimistic lock for the same reason). Nothing is written when nothing changed, and
//! nothing is read from the API server: the index has it all.

use crate::model::labels::LABEL_KUBELET_IDENTITY;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::apis::conditions::{self, Condition, ConditionStatus};
use crate::apis::duration::{parse_nillable, NillableDuration};
use crate::apis::{AKSNodeClass, NodeClaim, NodePool};
use crate::cloud::CloudProvider;
use crate::controllers::{events, writes, ControllerError, Shared};
use crate::disruption::drift::{self, ClaimFacts, ClassDrift, DriftReason, NodeFacts, PoolDrift};
use crate::model::InstanceType;
use crate::model::LabelLookup;
use crate::operator::metrics::in_controller;
use crate::state::{Cluster, NodeClaimRecord, NodeRecord};

/// Upstream's controller name, the `controller` label of what the sweep does.
const CONTROLLER: &str = "nodeclaim.disruption";
/// How often the sweep runs. It writes only on change, so a short period costs little and keeps
/// drift and consolidatability fresh for the disruption loop (upstream reacts to watch events).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(5);
/// At most one `lastPodEventTime` write per claim in this time (upstream podevents' dedupe timeout,
/// below the 15 s consolidation validation so a command decided meanwhile is still invalidated). A
/// change inside the window is written when it ends rather than dropped, so no pod event is lost.
pub const POD_EVENT_DEDUPE: Duration = Duration::from_secs(10);

/// What the sweep reads about one claim.
#[derive(Clone, Debug)]
pub struct ClaimInput<'a> {
    pub claim: &'a NodeClaimRecord,
    pub node: Option<&'a NodeRecord>,
    /// The pods bound to its node now that count as pod events: not DaemonSet pods (upstream
    /// podevents ignores them), not terminal, not being deleted; `namespace/name/uid`.
    pub pods: BTreeSet<String>,
    pub pool: &'a PoolDrift,
    /// `spec.disruption.consolidateAfter`; `None` when it cannot be read (the condition is left as is).
    pub consolidate_after: Option<NillableDuration>,
    pub class: Option<&'a ClassDrift>,
    pub instance_types: Option<&'a [InstanceType]>,
}

/// What to write on one claim; the default writes nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Update {
    /// `Some(Some(reason))`: set `Drifted=True` with it; `Some(None)`: remove the condition.
    pub drifted: Option<Option<DriftReason>>,
    /// `Some(true)`: set `Consolidatable=True`; `Some(false)`: remove it.
    pub consolidatable: Option<bool>,
    pub last_pod_event: Option<Timestamp>,
    /// Hash annotations to merge into `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
}

impl Update {
    pub fn touches_status(&self) -> bool {
        self.drifted.is_some() || self.consolidatable.is_some() || self.last_pod_event.is_some()
    }

    pub fn is_empty(&self) -> bool {
        !self.touches_status() && self.annotations.is_empty()
    }
}

/// The decision for one claim, and the pod set to remember for the next sweep (`previous_pods` is
/// what was remembered; `None` the first time the claim is seen).
pub fn decide(
    input: &ClaimInput<'_>,
    previous_pods: Option<&BTreeSet<String>>,
    now: Timestamp,
) -> (Update, BTreeSet<String>) {
    let claim = input.claim;
    let mut update = Update::default();

    let reason = if claim.launched {
        let facts = ClaimFacts {
            annotations: &claim.annotations,
            labels: &claim.labels,
            created: claim.created.as_ref().map(|t| t.0),
            image_id: claim.image_id.as_deref(),
        };
        let node = input.node.map(|n| NodeFacts {
            kubelet_version: n.kubelet_version.as_deref(),
            kubelet_identity: n.node.labels.label(LABEL_KUBELET_IDENTITY),
            ready: n.ready,
            deleting: n.deleting,
        });
        drift::drift_reason(&facts, input.pool, input.class, node.as_ref(), input.instance_types, now)
    } else {
        None
    };
    let current = claim.drifted.as_ref().map(|d| d.reason.as_str());
    if current != reason.map(DriftReason::as_str) {
        update.drifted = Some(reason);
    }
    let drifted = reason.is_some() || claim.drifted.is_some();
    update.annotations =
        drift::restamp(&claim.annotations, &input.pool.hash, input.class.map(|c| c.hash.as_str()), drifted);

    let mut remember = input.pods.clone();
    let mut last_pod_event = claim.last_pod_event;
    // Pods found on a claim seen for the first time (a new claim whose pods bound before this sweep,
    // or every claim after a restart) count as bound now, as upstream's podevents sees every bound pod
    // again when it starts.
    let changed = previous_pods.map_or(!input.pods.is_empty(), |p| *p != input.pods);
    if changed {
        let recent = claim.last_pod_event.is_some_and(|t| {
            let ago = now.as_millisecond().saturating_sub(t.as_millisecond());
            ago >= 0 && (ago as u128) < POD_EVENT_DEDUPE.as_millis()
        });
        if recent {
            // Still pending: the next sweep after the window sees the change again.
            remember = previous_pods.cloned().unwrap_or_default();
        } else {
            update.last_pod_event = Some(now);
            last_pod_event = Some(now);
        }
    }
    if let Some(after) = input.consolidate_after {
        let want = drift::consolidatable(claim.initialized_at, last_pod_event, after, now);
        if want != claim.consolidatable {
            update.consolidatable = Some(want);
        }
    }
    (update, remember)
}

/// Applies `update` to a claim's conditions and lastPodEventTime as read; whether it changed them.
/// A condition is set with `now` as its transition time only when its status changes. The spec is
/// immutable, so the generation the other conditions observed is the one ours observe too.
pub fn apply_status(
    list: &mut Vec<Condition>,
    last_pod_event: &mut Option<Time>,
    update: &Update,
    now: Timestamp,
) -> bool {
    let (before, before_event) = (list.clone(), last_pod_event.clone());
    let generation = list.iter().find_map(|c| c.observed_generation);
    let at = Time(now);
    match update.drifted {
        Some(Some(r)) => {
            let (type_, status) = (conditions::DRIFTED, ConditionStatus::True);
            conditions::set(list, type_, status, r.as_str(), r.message(), generation, &at);
        }
        Some(None) => list.retain(|c| c.type_ != conditions::DRIFTED),
        None => {}
    }
    match update.consolidatable {
        Some(true) => {
            let type_ = conditions::CONSOLIDATABLE;
            conditions::set(list, type_, ConditionStatus::True, type_, "", generation, &at);
        }
        Some(false) => list.retain(|c| c.type_ != conditions::CONSOLIDATABLE),
        None => {}
    }
    if let Some(t) = update.last_pod_event {
        *last_pod_event = Some(Time(t));
    }
    *list != before || *last_pod_event != before_event
}

/// Runs the sweep every [`SWEEP_INTERVAL`] until the task is stopped.
pub async fn run<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    in_controller(CONTROLLER, sweep_forever(shared)).await;
}

/// What the sweep keeps between passes.
#[derive(Default)]
struct Memory {
    /// The pods bound to each claim's node at the last sweep.
    pods: BTreeMap<String, BTreeSet<String>>,
    /// The last error reported per NodePool or AKSNodeClass, so a bad object is logged once.
    errors: BTreeMap<String, String>,
}

async fn sweep_forever<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    while !shared.cluster().synced() {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut ticker = tokio::time::interval(SWEEP_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut memory = Memory::default();
    loop {
        ticker.tick().await;
        let _in_flight = shared.begin_work(crate::operator::metrics::controller::NODECLAIM_DISRUPTION).await;
        let now = Timestamp::now();
        let updates = plan(&shared, &mut memory, now);
        for (claim, update, previous_pods) in updates {
            let written = write(&shared, &claim, &update, now).await.unwrap_or_else(|error| {
                tracing::warn!(nodeclaim = %claim.name, category = error.category(), %error, "updating nodeclaim disruption status failed");
                false
            });
            // A pod event not written is looked for again next sweep, against what was seen before.
            if !written && update.last_pod_event.is_some() {
                match previous_pods {
                    Some(pods) => memory.pods.insert(claim.name.clone(), pods),
                    None => memory.pods.remove(&claim.name),
                };
            }
        }
    }
}

/// One claim's update, with the pods remembered for it before this sweep.
type Planned = (Written, Update, Option<BTreeSet<String>>);

/// What the writer of an update reads of the claim as the index held it: a sweep can mark every claim
/// of a large cluster at once, so it takes these, not a copy of each record.
struct Written {
    name: String,
    conditions: Vec<Condition>,
    last_pod_event: Option<Timestamp>,
    resource_version: Option<String>,
}

impl Written {
    fn of(claim: &NodeClaimRecord) -> Written {
        Written {
            name: claim.name.clone(),
            conditions: claim.conditions.clone(),
            last_pod_event: claim.last_pod_event,
            resource_version: claim.resource_version.clone(),
        }
    }
}

/// The updates of one sweep, decided on the index under its lock.
fn plan<C: CloudProvider>(shared: &Shared<C>, memory: &mut Memory, now: Timestamp) -> Vec<Planned> {
    let cluster = shared.cluster();
    if !cluster.synced() {
        return vec![];
    }
    let mut pools: BTreeMap<String, Option<(PoolDrift, Option<NillableDuration>)>> = BTreeMap::new();
    // Per class: Ok(None) when it is gone (only core's checks apply), Err when it cannot be read.
    let mut classes: BTreeMap<String, Result<Option<ClassDrift>, ()>> = BTreeMap::new();
    let mut types: BTreeMap<String, Arc<Vec<InstanceType>>> = BTreeMap::new();
    let mut out = vec![];
    let mut seen = BTreeMap::new();
    for claim in cluster.nodeclaims().filter(|c| !c.deleting) {
        let Some(pool_name) = &claim.nodepool else { continue };
        let Some(pool) = cluster.nodepool(pool_name) else { continue };
        let pool_entry =
            pools.entry(pool_name.clone()).or_insert_with(|| pool_input(pool, &mut memory.errors));
        let Some((pool_drift, consolidate_after)) = pool_entry.as_ref() else { continue };
        let class_object = cluster.nodeclass(&claim.node_class);
        let class_entry = classes.entry(claim.node_class.clone()).or_insert_with(|| match class_object {
            Some(c) => class_input(c, shared.cloud.kubelet_identity(), &mut memory.errors).ok_or(()),
            None => Ok(None),
        });
        let Ok(class) = class_entry.as_ref().map(Option::as_ref) else { continue };
        // Without its class the claim's sizes are not known (upstream's lookup fails): no verdict.
        let instance_types = class_object.map(|c| {
            types
                .entry(claim.node_class.clone())
                .or_insert_with(|| shared.cloud.instance_types(Some(c)))
                .clone()
        });
        let node = cluster.node_of(claim);
        let input = ClaimInput {
            claim,
            node,
            pods: node.map(|n| bound_pods(&cluster, n)).unwrap_or_default(),
            pool: pool_drift,
            consolidate_after: *consolidate_after,
            class,
            instance_types: instance_types.as_deref().map(Vec::as_slice),
        };
        let previous = memory.pods.get(&claim.name);
        let (update, remember) = decide(&input, previous, now);
        if !update.is_empty() {
            out.push((Written::of(claim), update, previous.cloned()));
        }
        seen.insert(claim.name.clone(), remember);
    }
    memory.pods = seen;
    out
}

fn pool_input(
    pool: &NodePool,
    errors: &mut BTreeMap<String, String>,
) -> Option<(PoolDrift, Option<NillableDuration>)> {
    let key = format!("NodePool/{}", pool.name_any());
    let drift = match PoolDrift::new(pool) {
        Ok(d) => d,
        Err(e) => {
            report(errors, &key, e.category(), &e.to_string());
            return None;
        }
    };
    let after = match parse_nillable(&pool.spec.disruption.consolidate_after) {
        // A static pool's claims are never consolidated, so never marked Consolidatable (upstream
        // `nodeclaim/disruption/controller.go`); a pool cannot become static later.
        Ok(_) if pool.is_static() => None,
        Ok(a) => Some(a),
        Err(e) => {
            report(errors, &key, "InvalidConsolidateAfter", &e.to_string());
            None
        }
    };
    if after.is_some() {
        errors.remove(&key);
    }
    Some((drift, after))
}

fn class_input(
    class: &AKSNodeClass,
    kubelet_identity: Option<String>,
    errors: &mut BTreeMap<String, String>,
) -> Option<Option<ClassDrift>> {
    let key = format!("AKSNodeClass/{}", class.name_any());
    match ClassDrift::new(class) {
        Ok(c) => {
            errors.remove(&key);
            Some(Some(ClassDrift { kubelet_identity, ..c }))
        }
        Err(e) => {
            report(errors, &key, e.category(), &e.to_string());
            None
        }
    }
}

/// Logs a problem with an object once, until it changes or goes away.
fn report(errors: &mut BTreeMap<String, String>, key: &str, category: &str, message: &str) {
    if errors.get(key).map(String::as_str) != Some(message) {
        tracing::warn!(object = %key, category, error = %message, "cannot judge drift or consolidation against it; its nodeclaims are skipped");
        errors.insert(key.to_string(), message.to_string());
    }
}

/// The pods on `node` whose binding or removal is a pod event (see [`ClaimInput::pods`]).
fn bound_pods(cluster: &Cluster, node: &NodeRecord) -> BTreeSet<String> {
    cluster
        .pods_on_node(node.name())
        .filter(|p| !p.is_daemonset_pod() && !p.phase.is_terminal() && !p.deleting)
        .map(|p| format!("{}/{}", p.pod.id(), p.uid.as_deref().unwrap_or_default()))
        .collect()
}

/// Writes one claim's update: annotations by a metadata merge patch (annotations merge key by key);
/// status by a merge patch of the conditions list as the index read it, guarded by the
/// resourceVersion it was read at (or, after the annotation patch, by what that patch returned). The
/// written claim goes into the index at once, so the next sweep does not decide on what it changed.
/// Whether the status was written (or had nothing to write); a conflict waits for the next sweep.
async fn write<C: CloudProvider>(
    shared: &Shared<C>,
    claim: &Written,
    update: &Update,
    now: Timestamp,
) -> Result<bool, ControllerError> {
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    let name = claim.name.as_str();
    let mut list = claim.conditions.clone();
    let mut last_pod_event = claim.last_pod_event.map(Time);
    let mut version = claim.resource_version.clone();
    if !update.annotations.is_empty() {
        let patch = Patch::Merge(json!({ "metadata": { "annotations": update.annotations } }));
        let patched = match api.patch(name, &PatchParams::default(), &patch).await {
            Ok(p) => p,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        shared.cluster().apply(&patched);
        tracing::info!(nodeclaim = %name, "stamped nodeclaim with the current hash version");
        let status = patched.status.clone().unwrap_or_default();
        (list, last_pod_event, version) =
            (status.conditions, status.last_pod_event_time, patched.resource_version());
    }
    let was_drifted = conditions::is_true(&list, conditions::DRIFTED);
    if !update.touches_status() || !apply_status(&mut list, &mut last_pod_event, update, now) {
        return Ok(true);
    }
    let mut status = json!({ "conditions": list });
    if let Some(t) = &last_pod_event {
        status["lastPodEventTime"] = json!(t);
    }
    let Some(patched) = writes::patch_status_at(&api, name, version, json!({ "status": status })).await?
    else {
        tracing::debug!(nodeclaim = %name, "nodeclaim changed or went meanwhile; next sweep");
        return Ok(false);
    };
    shared.cluster().apply(&patched);
    match update.drifted {
        Some(Some(reason)) => {
            tracing::info!(nodeclaim = %name, reason = reason.as_str(), "marked nodeclaim drifted");
            if !was_drifted {
                shared.events.on_claim(&patched, events::drifted(reason.as_str(), reason.message())).await;
            }
        }
        Some(None) => tracing::info!(nodeclaim = %name, "nodeclaim no longer drifted"),
        None => {}
    }
    if let Some(c) = update.consolidatable {
        tracing::debug!(nodeclaim = %name, consolidatable = c, "updated nodeclaim consolidatable");
    }
    Ok(true)
}

#[cfg(test)]
#[path = "disruption_tests.rs"]
mod tests;
