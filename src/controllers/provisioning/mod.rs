//! The provisioning loop (upstream core `provisioning/provisioner.go`): wait for a batch of
//! provisionable pods, wait for a synced index, snapshot, solve, and create one NodeClaim per planned
//! claim. Pods of nodes being deleted are planned for too (they will be evicted), so an expired or
//! deleted node's pods get capacity before the drain lets them go; every 10 s while there are any.
//! Created claims go into the index at once, so the next batch counts them (and waits for their
//! launch through the synced gate) even before the watch delivers them. Each pod's wait from the pod
//! watch first seeing it provisionable to its first decision is recorded (`batch::DecisionClock`).

pub mod batch;
pub mod isolate;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::Mutex;

use crate::cloud::CloudProvider;
use crate::controllers::events::{self, Nomination};
use crate::controllers::nodeclaim::{self, CreateError};
use crate::controllers::{metrics, nodepool_health, ControllerError, Shared};
use crate::model::labels::{ANNOTATION_MIN_VALUES_RELAXED, LABEL_ZONE};
use crate::operator::metrics::controller::PROVISIONER;
use crate::scheduling::{self, Plan, PodId};
use batch::{DecisionClock, Window};

/// Upstream requeues a provisionable pod every 10 s while it stays provisionable; a periodic batch
/// does the same for pods left pending by a deleted claim or a pool that became Ready.
const RETRIGGER_INTERVAL: Duration = Duration::from_secs(10);
/// How often a closed batch re-checks the synced gate while claims are launching.
const SYNC_POLL: Duration = Duration::from_millis(200);
/// How long a node the plan put pods on stays out of disruption (upstream `state.Cluster`
/// `nominationPeriod`, 20 s): kube-scheduler binds the pods meanwhile.
pub const NOMINATION_WINDOW: Duration = Duration::from_secs(20);

/// A provisionable pod's key, and when the pod watch saw it so.
pub type Trigger = (String, Instant);

/// Runs while this replica leads. `triggers` outlives a leadership term: the next term locks it again.
pub async fn run<C: CloudProvider + 'static>(
    shared: Arc<Shared<C>>,
    triggers: Arc<Mutex<UnboundedReceiver<Trigger>>>,
) {
    let mut triggers = triggers.lock().await;
    // Keys queued before this term are stale; pods still pending are found by the first round below.
    while triggers.try_recv().is_ok() {}
    wait_for_sync(&shared).await;
    let mut pending_at_start = shared.cluster().provisionable_pods().next().is_some();
    let mut decisions = DecisionClock::default();
    loop {
        let first = if std::mem::take(&mut pending_at_start) {
            String::new()
        } else {
            tokio::select! {
            trigger = triggers.recv() => match trigger {
                Some((key, seen)) => {
                    decisions.seen(&key, seen);
                    shared.metrics_state().pods.ack(&key, Timestamp::now());
                    key
                }
                None => return,
            },
            _ = tokio::time::sleep(RETRIGGER_INTERVAL) => {
                let idle = {
                    let cluster = shared.cluster();
                    cluster.provisionable_pods().next().is_none() && cluster.pods_of_deleting_nodes().is_empty()
                };
                if idle {
                    continue;
                }
                String::new()
            }
            }
        };
        let opened = Instant::now();
        let mut window = Window::open(first, opened, shared.settings.batch_idle, shared.settings.batch_max);
        loop {
            let deadline = tokio::time::Instant::from_std(window.deadline());
            match tokio::time::timeout_at(deadline, triggers.recv()).await {
                Ok(Some((key, seen))) => {
                    decisions.seen(&key, seen);
                    shared.metrics_state().pods.ack(&key, Timestamp::now());
                    window.add(key, Instant::now());
                }
                Ok(None) => return,
                Err(_) => break,
            }
        }
        wait_for_sync(&shared).await;
        let mut in_flight = shared.begin_work(PROVISIONER).await;
        if let Err(error) = in_flight.result(provision(&shared, &mut decisions, opened).await) {
            tracing::warn!(category = error.category(), %error, "provisioning failed");
        }
    }
}

async fn wait_for_sync<C>(shared: &Shared<C>) {
    loop {
        let status = shared.cluster().sync_status();
        match status {
            Ok(()) => return,
            Err(reason) => tracing::debug!(%reason, "provisioning waits for the cluster state"),
        }
        tokio::time::sleep(SYNC_POLL).await;
    }
}

/// One round: snapshot → solve → create. `opened` is when the round's batch window opened.
async fn provision<C: CloudProvider + 'static>(
    shared: &Arc<Shared<C>>,
    decisions: &mut DecisionClock,
    opened: Instant,
) -> Result<(), ControllerError> {
    let options = shared.solve_options();
    // Upstream times the whole Schedule: snapshot and solve.
    let started = Instant::now();
    let m = metrics::get();
    let input = {
        let cluster = shared.cluster();
        let mut input = cluster.snapshot(&|_pool, class| shared.cloud.instance_types(class), options);
        input.pods.extend(cluster.pods_of_deleting_nodes());
        let quarantined = shared.quarantined();
        input.pods.retain(|p| !quarantined.contains(&p.id()));
        let unreadable = cluster.invalid().filter(|(kind, _, _)| *kind == crate::state::Kind::Pod).count();
        m.set_ignored_pods(quarantined.len() + unreadable);
        input
    };
    if input.pods.is_empty() {
        return Ok(());
    }
    let pods = input.pods.len();
    let id = scheduling_id();
    m.scheduling_started(PROVISIONER, &id, pods);
    m.pending_by_zone(PROVISIONER, effective_zones(&input.pods).iter().map(|(z, n)| (z.as_str(), *n)));
    let mut solving = tokio::task::spawn_blocking(move || {
        isolate::solve_isolating(&input, &|batch: &scheduling::SolveInput| scheduling::solve(batch))
    });
    let solved = loop {
        tokio::select! {
            solved = &mut solving => break solved,
            _ = tokio::time::sleep(Duration::from_secs(1)) => m.scheduling_progress(PROVISIONER, &id, started.elapsed()),
        }
    };
    let (plan, bad) = solved.map_err(|e| ControllerError::Invalid(format!("the solver failed: {e}")))?;
    if !bad.is_empty() {
        set_aside(shared, &bad);
    }
    let unschedulable = plan.as_ref().map_or(0, |p| p.unschedulable.len());
    m.scheduling_finished(PROVISIONER, &id, started.elapsed(), unschedulable);
    let Some(plan) = plan else { return Ok(()) };
    metrics::record_plan(m, &plan);
    // Only pods waiting for capacity count (not the pods of nodes being deleted, planned every round).
    let first = {
        let cluster = shared.cluster();
        let provisionable: HashSet<&str> = cluster.provisionable_pod_keys().collect();
        let planned = plan.nodeclaims.iter().flat_map(|c| &c.pods).chain(plan.existing.values().flatten());
        let planned = planned.map(String::as_str).chain(plan.unschedulable.iter().map(|u| u.pod.as_str()));
        let decided: Vec<&str> = planned.filter(|pod| provisionable.contains(pod)).collect();
        let placed: HashSet<&str> = plan
            .nodeclaims
            .iter()
            .flat_map(|c| &c.pods)
            .chain(plan.existing.values().flatten())
            .map(String::as_str)
            .collect();
        let mut state = shared.metrics_state();
        let now = Timestamp::now();
        for pod in &decided {
            state.pods.decided(pod, now, placed.contains(pod));
        }
        drop(state);
        let first = decisions
            .decide(decided.iter().copied(), opened, Instant::now(), |wait| m.pod_scheduling_decided(wait));
        decisions.retain(&provisionable);
        first
    };
    tracing::info!(
        pods,
        first_decided = first.pods,
        longest_decision_wait_ms = first.longest_wait.as_millis() as u64,
        nodeclaims = plan.nodeclaims.len(),
        on_existing = plan.existing.values().map(Vec::len).sum::<usize>(),
        unschedulable = plan.unschedulable.len(),
        price_per_hour = plan.price_per_hour,
        lower_bound_per_hour = plan.lower_bound_per_hour,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "computed a scheduling plan"
    );
    for u in &plan.unschedulable {
        tracing::info!(pod = %u.pod, reason = %u.reason, "pod cannot be scheduled");
    }
    let mut nominations = Vec::new();
    let held_back = probing_only(shared, &plan);
    let creates = plan
        .nodeclaims
        .iter()
        .enumerate()
        .filter(|(i, _)| !held_back.contains(i))
        .map(|(_, planned)| planned)
        .map(|planned| async move { (planned, nodeclaim::create(shared, planned, BTreeMap::new()).await) });
    let mut failed = None;
    for (planned, result) in futures::future::join_all(creates).await {
        match result {
            Ok(created) => {
                let claim = created.name_any();
                nominations.extend(planned.pods.iter().map(|p| (p.clone(), Target::Claim(claim.clone()))));
                let relaxed =
                    created.annotations().get(ANNOTATION_MIN_VALUES_RELAXED).is_some_and(|v| v == "true");
                m.nodeclaim_provisioned(&planned.nodepool, relaxed);
                tracing::info!(
                    nodeclaim = %created.name_any(),
                    nodepool = %planned.nodepool,
                    instance_type = %planned.instance_type,
                    instance_type_options = planned.instance_type_options.len(),
                    // The zone the plan priced; the claim may leave the launch a choice of zones.
                    planned_zone = %planned.zone,
                    zones = %allowed_zones(&created),
                    capacity_type = planned.capacity_type.as_str(),
                    pods = planned.pods.len(),
                    requests = ?planned.requests.to_quantities(),
                    "created nodeclaim"
                );
            }
            Err(CreateError::PoolGone(_)) => {
                tracing::warn!(nodepool = %planned.nodepool, "NodePool vanished before its claim was created");
            }
            Err(CreateError::Kube(error)) => {
                tracing::warn!(nodepool = %planned.nodepool, %error, "creating a nodeclaim failed");
                failed = Some(error);
            }
        }
    }
    pod_events(shared, &plan, nominations);
    failed.map_or(Ok(()), |e| Err(e.into()))
}

/// A scheduling run's `scheduling_id` (upstream: a UUID per scheduler): unique in the process and,
/// with the process's start time in it, across restarts.
/// The zones a created NodeClaim lets the launch choose from: its zone requirement's values, or `any`.
fn allowed_zones(claim: &crate::apis::nodeclaim::NodeClaim) -> String {
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == LABEL_ZONE && r.operator == crate::apis::common::Operator::In)
        .map_or_else(|| "any".to_string(), |r| r.values.join(","))
}

fn scheduling_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static STARTED: std::sync::LazyLock<i64> =
        std::sync::LazyLock::new(|| Timestamp::now().as_nanosecond() as i64);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{:x}-{n}", *STARTED)
}

/// The pending pods by the zone they can run in (upstream `computeEffectiveZoneFromPod`, without the
/// topology spread): the one zone their node affinity (a single required term with a zone `In`) and
/// their volumes allow, `flexible` when several or no constraint, `none` when they allow none.
fn effective_zones(pods: &[Arc<scheduling::Pod>]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for pod in pods.iter().filter(|p| p.node_name.is_none()) {
        let affinity = match pod.required_terms.as_slice() {
            [term] => term.get(LABEL_ZONE).and_then(|r| r.finite_values()),
            _ => None,
        };
        let mut zones: Option<BTreeSet<&str>> = affinity;
        if let Some(volumes) = &pod.volume_zones {
            let volumes: BTreeSet<&str> = volumes.iter().map(String::as_str).collect();
            zones = Some(match zones {
                Some(z) => z.intersection(&volumes).copied().collect(),
                None => volumes,
            });
        }
        let zone = match zones {
            Some(z) if z.len() == 1 => z.into_iter().next().unwrap_or_default().to_string(),
            Some(z) if z.is_empty() => "none".to_string(),
            _ => "flexible".to_string(),
        };
        *out.entry(zone).or_default() += 1;
    }
    out
}

/// The planned claims not to create this round: a NodePool whose nodes keep failing to register
/// (`NodeRegistrationHealthy=False`) launches one claim at a time, a probe, instead of a whole plan of
/// VMs that would not join either; its other pods wait for the next round.
fn probing_only<C>(shared: &Shared<C>, plan: &Plan) -> HashSet<usize> {
    let cluster = shared.cluster();
    let mut probing: BTreeMap<&str, usize> = BTreeMap::new();
    let mut held = HashSet::new();
    for (i, planned) in plan.nodeclaims.iter().enumerate() {
        let pool = planned.nodepool.as_str();
        if !matches!(shared.registrations.state(pool), Some(nodepool_health::Registration::Unhealthy { .. }))
        {
            continue;
        }
        let launching = probing.entry(pool).or_insert_with(|| {
            cluster
                .nodeclaims()
                .filter(|c| c.nodepool.as_deref() == Some(pool) && !c.registered && !c.deleting)
                .count()
        });
        if *launching > 0 {
            held.insert(i);
        } else {
            *launching += 1;
        }
    }
    if !held.is_empty() {
        tracing::warn!(
            held_back = held.len(),
            "NodePools whose nodes do not register launch one NodeClaim at a time"
        );
    }
    held
}

/// Leaves the pods the solver panicked on out of provisioning for [`isolate::QUARANTINE`], and says so
/// on each pod.
fn set_aside<C>(shared: &Shared<C>, pods: &[PodId]) {
    let until = Instant::now() + isolate::QUARANTINE;
    shared
        .quarantine
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(pods.iter().map(|p| (p.clone(), until)));
    tracing::error!(pods = ?pods, retry_in_s = isolate::QUARANTINE.as_secs(), "the solver panicked on these pods; they are left out of provisioning for now");
    let why = format!(
        "the solver failed on this pod; it is left out of provisioning for {} minutes",
        isolate::QUARANTINE.as_secs() / 60
    );
    let out: Vec<_> = {
        let cluster = shared.cluster();
        pods.iter()
            .map(|pod| {
                let uid = cluster.pod(pod).and_then(|p| p.uid.clone());
                (events::failed_scheduling(&why), events::pod_ref(pod, uid))
            })
            .collect()
    };
    shared.events.spawn_all(out);
}

enum Target {
    Claim(String),
    Existing(String),
}

/// Nominated events for the pods placed on the claims just created and on existing capacity, and
/// FailedScheduling for the ones left pending; each pod once, capped per batch, published in the
/// background.
fn pod_events<C>(shared: &Shared<C>, plan: &Plan, mut nominations: Vec<(PodId, Target)>) {
    for (node, pods) in &plan.existing {
        nominations.extend(pods.iter().map(|p| (p.clone(), Target::Existing(node.clone()))));
    }
    {
        let now = Instant::now();
        let mut nominated = shared.nominations.lock().unwrap_or_else(|p| p.into_inner());
        for (_, target) in &nominations {
            let (Target::Claim(name) | Target::Existing(name)) = target;
            nominated.insert(name.clone(), now);
        }
    }
    let nominations = events::cap_per_pod(nominations, events::MAX_POD_EVENTS_PER_BATCH);
    let unschedulable = events::cap_per_pod(
        plan.unschedulable.iter().map(|u| (u.pod.clone(), u.reason.as_str())),
        events::MAX_POD_EVENTS_PER_BATCH,
    );
    let out: Vec<_> = {
        let cluster = shared.cluster();
        let uid = |pod: &str| cluster.pod(pod).and_then(|p| p.uid.clone());
        let nominated = nominations.iter().map(|(pod, target)| {
            let ev = match target {
                Target::Claim(name) => events::nominated(Nomination::NodeClaim(name)),
                // An in-flight claim is existing capacity under the claim's name.
                Target::Existing(name) if cluster.node(name).is_some() => {
                    events::nominated(Nomination::Node(name))
                }
                Target::Existing(name) => events::nominated(Nomination::NodeClaim(name)),
            };
            (ev, events::pod_ref(pod, uid(pod)))
        });
        let failed = unschedulable
            .iter()
            .map(|(pod, why)| (events::failed_scheduling(why), events::pod_ref(pod, uid(pod))));
        nominated.chain(failed).collect()
    };
    shared.events.spawn_all(out);
}
