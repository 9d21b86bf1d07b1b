//! Kubernetes Events the controllers emit (upstream core `events` and the per-controller `events.go`).
//!
//! The builders below are pure: each returns the [`Event`] for one thing that happened, with its reason
//! from the bounded set in [`reason`]. [`Events`] publishes them through [`super::events_sink`] (which
//! folds repeats of the same reason on the same object into one Event series) and:
//! - never fails the caller: a publish error is logged as a warning and dropped;
//! - drops an identical event (same object, reason and message) seen within [`DEDUPE_TIMEOUT`], as
//!   upstream's recorder does, so a pod that stays unschedulable is not reported every batch;
//! - for one provisioning batch, publishes at most [`MAX_POD_EVENTS_PER_BATCH`] nominated and as many
//!   unschedulable pod events, once per pod, in the background so the batch is not slowed down.
//!
//! NodeClaims are cluster-scoped, so their events land in the `default` namespace (as upstream's do).

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Reporter};
use kube::Resource;

use super::events_sink::Sink;
use crate::apis::NodeClaim;
use crate::state::SweepSchedule;

/// `reportingController` of every event.
pub const REPORTER: &str = "karpenter";
/// An identical event (object, reason, message) is not published again within this time (upstream: 2 min).
pub const DEDUPE_TIMEOUT: Duration = Duration::from_secs(2 * 60);
/// Upstream repeats an `Unconsolidatable` event at most every 15 minutes
/// (`pkg/controllers/disruption/events/events.go`): a pass every 10 s would otherwise repeat it.
pub const UNCONSOLIDATABLE_DEDUPE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// How long an identical event is held back after one went out.
pub fn dedupe_timeout(reason: &str) -> Duration {
    if reason == reason::UNCONSOLIDATABLE {
        UNCONSOLIDATABLE_DEDUPE_TIMEOUT
    } else {
        DEDUPE_TIMEOUT
    }
}
/// Pod events (nominated, and separately unschedulable) published per provisioning batch at most.
pub const MAX_POD_EVENTS_PER_BATCH: usize = 500;
/// The API server rejects an event note longer than 1 kB.
pub const MAX_NOTE_BYTES: usize = 1024;
/// Background publishes in flight at once for a batch of pod events.
const PUBLISH_CONCURRENCY: usize = 8;
/// The dedupe table is pruned of expired entries no sooner than it holds this many.
const DEDUPE_PRUNE_AT: usize = 4096;

/// The reasons, CamelCase; the whole set is here.
pub mod reason {
    pub const NOMINATED: &str = "Nominated";
    pub const FAILED_SCHEDULING: &str = "FailedScheduling";
    pub const LAUNCHED: &str = "Launched";
    pub const LAUNCH_FAILED: &str = "LaunchFailed";
    pub const INSUFFICIENT_CAPACITY: &str = "InsufficientCapacity";
    pub const REGISTERED: &str = "Registered";
    pub const LAUNCH_TIMEOUT: &str = "LaunchTimeout";
    pub const REGISTRATION_TIMEOUT: &str = "RegistrationTimeout";
    pub const TERMINATING: &str = "Terminating";
    pub const EVICTION_BLOCKED: &str = "EvictionBlocked";
    pub const DRAINED: &str = "Drained";
    pub const GARBAGE_COLLECTED: &str = "GarbageCollected";
    pub const DISRUPTION_BLOCKED: &str = "DisruptionBlocked";
    pub const DISRUPTING: &str = "Disrupting";
    pub const EXPIRED: &str = "Expired";
    pub const AWAITING_VOLUME_DETACHMENT: &str = "AwaitingVolumeDetachment";
    pub const UNHEALTHY: &str = "Unhealthy";
    pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";
    pub const INTERRUPTED: &str = "Interrupted";
    pub const DRIFTED: &str = "Drifted";
    pub const UNREADABLE: &str = "Unreadable";
    pub const CREDENTIALS_UNAVAILABLE: &str = "CredentialsUnavailable";
    pub const NODE_REGISTRATION_UNHEALTHY: &str = "NodeRegistrationUnhealthy";
    pub const UNCONSOLIDATABLE: &str = "Unconsolidatable";
    pub const WAITING_ON_NODECLAIM_TERMINATION: &str = "WaitingOnNodeClaimTermination";

    pub const ALL: [&str; 25] = [
        NOMINATED,
        FAILED_SCHEDULING,
        LAUNCHED,
        LAUNCH_FAILED,
        INSUFFICIENT_CAPACITY,
        REGISTERED,
        LAUNCH_TIMEOUT,
        REGISTRATION_TIMEOUT,
        TERMINATING,
        EVICTION_BLOCKED,
        DRAINED,
        GARBAGE_COLLECTED,
        DISRUPTION_BLOCKED,
        DISRUPTING,
        EXPIRED,
        AWAITING_VOLUME_DETACHMENT,
        UNHEALTHY,
        NODE_REPAIR_BLOCKED,
        INTERRUPTED,
        DRIFTED,
        UNREADABLE,
        CREDENTIALS_UNAVAILABLE,
        NODE_REGISTRATION_UNHEALTHY,
        UNCONSOLIDATABLE,
        WAITING_ON_NODECLAIM_TERMINATION,
    ];
}

// --- Builders (pure) -----------------------------------------------------------------------------

/// Where the plan puts a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nomination<'a> {
    /// A NodeClaim created in this batch, or one still in flight.
    NodeClaim(&'a str),
    /// A Node that exists.
    Node(&'a str),
}

fn event(type_: EventType, reason: &str, action: &str, note: String) -> Event {
    Event {
        type_,
        reason: reason.to_string(),
        note: Some(truncate(note, MAX_NOTE_BYTES)),
        action: action.to_string(),
        secondary: None,
    }
}

/// Cuts `note` to at most `max` bytes on a character boundary, marking the cut with `…`.
pub fn truncate(mut note: String, max: usize) -> String {
    if note.len() <= max {
        return note;
    }
    const MARK: &str = "…";
    let mut end = max.saturating_sub(MARK.len());
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note.truncate(end);
    note.push_str(MARK);
    note
}

/// On a pod: the plan places it (upstream `NominatePodEvent`).
pub fn nominated(target: Nomination<'_>) -> Event {
    let on = match target {
        Nomination::NodeClaim(name) => format!("nodeclaim/{name}"),
        Nomination::Node(name) => format!("node/{name}"),
    };
    event(EventType::Normal, reason::NOMINATED, "Provisioning", format!("Pod should schedule on: {on}"))
}

/// On a pod: the solver found no place for it, with its reason (upstream `PodFailedToScheduleEvent`).
pub fn failed_scheduling(why: &str) -> Event {
    event(
        EventType::Warning,
        reason::FAILED_SCHEDULING,
        "Provisioning",
        format!("Failed to schedule pod, {why}"),
    )
}

/// On a NodeClaim: the VM was created.
pub fn launched(instance_type: &str, zone: Option<&str>, capacity_type: &str) -> Event {
    let zone = zone.filter(|z| !z.is_empty()).unwrap_or("no zone");
    event(
        EventType::Normal,
        reason::LAUNCHED,
        "Launch",
        format!("Launched {instance_type} in {zone} ({capacity_type})"),
    )
}

/// On a NodeClaim: the launch failed and will be retried; `category` is the bounded error category.
pub fn launch_failed(category: &str, message: &str) -> Event {
    event(EventType::Warning, reason::LAUNCH_FAILED, "Launch", format!("{category}: {message}"))
}

/// On a NodeClaim: no offering could be launched; the claim is deleted and the pods provisioned again.
pub fn insufficient_capacity(message: &str) -> Event {
    event(
        EventType::Warning,
        reason::INSUFFICIENT_CAPACITY,
        "Launch",
        format!("{message}; deleting the nodeclaim so its pods get another offering"),
    )
}

/// On a NodeClaim: its Node registered.
pub fn registered(node: &str) -> Event {
    event(EventType::Normal, reason::REGISTERED, "Register", format!("Registered node {node}"))
}

/// On a NodeClaim: liveness, not launched in time.
pub fn launch_timeout(timeout: Duration) -> Event {
    event(
        EventType::Warning,
        reason::LAUNCH_TIMEOUT,
        "Delete",
        format!("Not launched within {}; deleting the nodeclaim", human(timeout)),
    )
}

/// On a NodeClaim: liveness, its Node did not register in time.
pub fn registration_timeout(timeout: Duration) -> Event {
    event(
        EventType::Warning,
        reason::REGISTRATION_TIMEOUT,
        "Delete",
        format!(
            "Node not registered within {}; deleting the nodeclaim. The VM's kubelet did not join: check the \
             cluster CA (KUBE_CA_CRT), the API server name and the bootstrap token (TLS_BOOTSTRAP_TOKEN) \
             it booted with",
            human(timeout)
        ),
    )
}

/// On a NodeClaim: its Nodes are being drained.
pub fn terminating(nodes: &[String]) -> Event {
    let note = if nodes.is_empty() {
        "Terminating nodeclaim".to_string()
    } else {
        format!("Draining node {}", nodes.join(", "))
    };
    event(EventType::Normal, reason::TERMINATING, "Terminate", note)
}

/// On a NodeClaim: PodDisruptionBudgets refused `blocked` evictions; retried with backoff.
pub fn eviction_blocked(node: &str, blocked: usize) -> Event {
    let pods = if blocked == 1 { "pod" } else { "pods" };
    event(
        EventType::Warning,
        reason::EVICTION_BLOCKED,
        "Drain",
        format!("Evicting {blocked} {pods} from node {node} would violate a PodDisruptionBudget; retrying"),
    )
}

/// On a NodeClaim: its Nodes are drained; the VM is deleted next.
pub fn drained() -> Event {
    event(EventType::Normal, reason::DRAINED, "Drain", "Drained; deleting the instance".to_string())
}

/// On a NodeClaim: its Node is drained but VolumeAttachments remain; the VM waits for them (upstream
/// `NodeAwaitingVolumeDetachmentEvent`).
pub fn awaiting_volume_detachment(node: &str, attachments: &[String]) -> Event {
    event(
        EventType::Normal,
        reason::AWAITING_VOLUME_DETACHMENT,
        "Drain",
        format!("Awaiting deletion of VolumeAttachments bound to node {node}: {}", attachments.join(", ")),
    )
}

/// On a NodeClaim: its Node has been unhealthy past the toleration, so node repair deletes it at once.
pub fn unhealthy(node: &str, condition: &str, since: &str) -> Event {
    event(
        EventType::Warning,
        reason::UNHEALTHY,
        "Repair",
        format!("Node {node} has had {condition} since {since}; deleting the nodeclaim to replace it"),
    )
}

/// On a NodeClaim: its Node is unhealthy but too much of its NodePool is, so it is not repaired
/// (upstream `NodeRepairBlocked`).
pub fn node_repair_blocked(why: &str) -> Event {
    event(EventType::Warning, reason::NODE_REPAIR_BLOCKED, "Repair", format!("Cannot repair node: {why}"))
}

/// On any object the controller cannot read or convert: it is left out of every decision until it
/// changes (a NodeClaim so left out keeps its VM: garbage collection spares it).
pub fn unreadable(why: &str) -> Event {
    event(
        EventType::Warning,
        reason::UNREADABLE,
        "Read",
        format!("Left out of provisioning and disruption decisions: {why}"),
    )
}

/// On an AKSNodeClass: the controller's Azure credential keeps failing, so nothing launches.
pub fn credentials_unavailable(why: &str) -> Event {
    event(
        EventType::Warning,
        reason::CREDENTIALS_UNAVAILABLE,
        "Authenticate",
        format!("The controller cannot get Azure tokens: {why}"),
    )
}

/// On a NodePool: its nodes keep failing to register (`NodeRegistrationHealthy=False`).
pub fn registration_unhealthy(why: &str) -> Event {
    event(EventType::Warning, reason::NODE_REGISTRATION_UNHEALTHY, "Register", why.to_string())
}

/// On a NodeClaim: Azure evicted its spot VM, so the claim is deleted and its pods provisioned again.
pub fn interrupted(provider_id: &str) -> Event {
    event(
        EventType::Warning,
        reason::INTERRUPTED,
        "Delete",
        format!("Spot instance {provider_id} was evicted; deleting the nodeclaim"),
    )
}

/// On a NodeClaim: its VM is gone, so the claim is deleted.
pub fn garbage_collected(provider_id: &str) -> Event {
    event(
        EventType::Normal,
        reason::GARBAGE_COLLECTED,
        "Delete",
        format!("Instance {provider_id} no longer exists; deleting the nodeclaim"),
    )
}

/// On a Node and its NodeClaim: a disruption pass would act on it, but `why` (a pod, a PDB, a budget)
/// blocks it (upstream `DisruptionBlocked`). `blocker` names the kind of blocker (`PodDisruptionBudget`,
/// `DoNotDisrupt`, `Budget`, ...) as the action: the recorder folds repeats of one action into one
/// series, so a different blocker shows as its own event.
pub fn disruption_blocked(blocker: &str, why: &str) -> Event {
    event(EventType::Normal, reason::DISRUPTION_BLOCKED, blocker, format!("Cannot disrupt: {why}"))
}

/// On an AKSNodeClass being deleted: these NodeClaims still name it (upstream provider
/// `WaitingOnNodeClaimTermination`, the first five names).
pub fn waiting_on_nodeclaim_termination(claims: &[String]) -> Event {
    let shown: Vec<&str> = claims.iter().take(5).map(String::as_str).collect();
    let more = if claims.len() > 5 { format!(" and {} other(s)", claims.len() - 5) } else { String::new() };
    event(
        EventType::Normal,
        reason::WAITING_ON_NODECLAIM_TERMINATION,
        "Finalize",
        format!("Waiting on NodeClaim termination for {}{more}", shown.join(", ")),
    )
}

/// On a Node and its NodeClaim: consolidation cannot remove or replace it, and `why` (upstream
/// `Unconsolidatable`, with its messages where the cause is the same).
pub fn unconsolidatable(why: &str) -> Event {
    event(EventType::Normal, reason::UNCONSOLIDATABLE, "Consolidate", why.to_string())
}

/// On a Node and its NodeClaim: a disruption command is acting on it (upstream `DisruptionLaunching`
/// and `DisruptionTerminating` in one reason); `what` says the method and the replacements.
pub fn disrupting(what: &str) -> Event {
    event(EventType::Normal, reason::DISRUPTING, "Disrupt", what.to_string())
}

/// On a NodeClaim (and its Node): `expireAfter` has passed, so it is deleted.
pub fn expired(expire_after: &str) -> Event {
    event(
        EventType::Normal,
        reason::EXPIRED,
        "Expire",
        format!("NodeClaim reached its expireAfter ({expire_after}); deleting it"),
    )
}

/// A reference to a Node by name.
pub fn node_ref(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.into()),
        ..ObjectReference::default()
    }
}

/// On a NodeClaim: it no longer matches its NodePool or AKSNodeClass (`reason` is the `Drifted`
/// condition's reason); the disruption loop replaces drifted nodes under the NodePool's budgets.
pub fn drifted(reason: &str, why: &str) -> Event {
    event(EventType::Normal, reason::DRIFTED, "Drift", format!("Drifted ({reason}): {why}"))
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

// --- References ----------------------------------------------------------------------------------

/// A reference to a pod by its index key `namespace/name` (and UID when known).
pub fn pod_ref(id: &str, uid: Option<String>) -> ObjectReference {
    let (namespace, name) = id.split_once('/').unwrap_or(("default", id));
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid,
        ..ObjectReference::default()
    }
}

/// A reference to a NodeClaim by name, when only the name is at hand.
pub fn nodeclaim_ref(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(NodeClaim::api_version(&()).into_owned()),
        kind: Some(NodeClaim::kind(&()).into_owned()),
        name: Some(name.into()),
        ..ObjectReference::default()
    }
}

/// Pod events for one batch: each pod once (first event wins), at most `cap` of them.
pub fn cap_per_pod<T>(events: impl IntoIterator<Item = (String, T)>, cap: usize) -> Vec<(String, T)> {
    let mut seen = BTreeSet::new();
    events.into_iter().filter(|(pod, _)| seen.insert(pod.clone())).take(cap).collect()
}

// --- Publishing ----------------------------------------------------------------------------------

/// Identical events seen recently, by a hash of (object, reason, note): a note can be a long line,
/// and the passes over a large cluster see thousands of them.
#[derive(Debug)]
pub struct Dedupe {
    seen: HashMap<u64, Instant>,
    prunes: SweepSchedule,
}

impl Default for Dedupe {
    fn default() -> Self {
        Dedupe { seen: HashMap::new(), prunes: SweepSchedule::new(DEDUPE_PRUNE_AT) }
    }
}

impl Dedupe {
    /// Whether an event with `key` should go out at `now`, none having gone out within `timeout`;
    /// records it if so.
    pub fn admit(&mut self, key: u64, now: Instant, timeout: Duration) -> bool {
        // A pass over a large cluster keeps thousands of live entries: pruning at a fixed size would
        // scan them all at every event.
        if self.prunes.due(self.seen.len()) {
            self.seen.retain(|_, at| now.saturating_duration_since(*at) < UNCONSOLIDATABLE_DEDUPE_TIMEOUT);
            self.prunes.swept(self.seen.len());
        }
        match self.seen.get(&key) {
            Some(at) if now.saturating_duration_since(*at) < timeout => false,
            _ => {
                self.seen.insert(key, now);
                true
            }
        }
    }

    /// What makes two events the same here, hashed: two different events share a hash once in 2^64.
    pub fn key(ev: &Event, reference: &ObjectReference) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        (
            reference.kind.as_deref(),
            reference.namespace.as_deref(),
            reference.name.as_deref(),
            reference.uid.as_deref(),
            &ev.reason,
            ev.note.as_deref(),
        )
            .hash(&mut hasher);
        hasher.finish()
    }
}

/// The controllers' event publisher; cheap to clone.
#[derive(Clone)]
pub struct Events {
    sink: Arc<Sink>,
    dedupe: Arc<Mutex<Dedupe>>,
}

impl Events {
    pub fn new(client: kube::Client) -> Self {
        let reporter = Reporter::from(REPORTER);
        Self { sink: Arc::new(Sink::new(client, reporter)), dedupe: Arc::new(Mutex::new(Dedupe::default())) }
    }

    fn admit(&self, ev: &Event, reference: &ObjectReference) -> bool {
        let mut dedupe = self.dedupe.lock().unwrap_or_else(|p| p.into_inner());
        dedupe.admit(Dedupe::key(ev, reference), Instant::now(), dedupe_timeout(&ev.reason))
    }

    /// Publishes one event; a failure is logged, never returned.
    pub async fn publish(&self, ev: Event, reference: ObjectReference) {
        if self.admit(&ev, &reference) {
            self.send(ev, reference).await;
        }
    }

    /// Sends an event the recorder admitted.
    async fn send(&self, ev: Event, reference: ObjectReference) {
        if let Err(error) = self.sink.publish(&ev, &reference).await {
            tracing::warn!(
                reason = %ev.reason,
                kind = reference.kind.as_deref().unwrap_or(""),
                name = reference.name.as_deref().unwrap_or(""),
                %error,
                "publishing an event failed"
            );
        }
    }

    /// Publishes an event about a NodeClaim object.
    pub async fn on_claim(&self, claim: &NodeClaim, ev: Event) {
        self.publish(ev, claim.object_ref(&())).await;
    }

    /// Publishes many events in the background (bounded concurrency), so the caller is not slowed down.
    /// The repeats the recorder folds are dropped here, as `events` yields them, so a pass that blocks
    /// every node of a large cluster holds only the events that are new, not one per node.
    pub fn spawn_all(&self, events: impl IntoIterator<Item = (Event, ObjectReference)>) {
        let admitted: Vec<(Event, ObjectReference)> =
            events.into_iter().filter(|(ev, reference)| self.admit(ev, reference)).collect();
        if admitted.is_empty() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            futures::stream::iter(admitted)
                .for_each_concurrent(PUBLISH_CONCURRENCY, |(ev, reference)| this.send(ev, reference))
                .await;
        });
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
