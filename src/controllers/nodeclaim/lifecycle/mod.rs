//! The NodeClaim lifecycle (upstream core `pkg/controllers/nodeclaim/lifecycle`): finalizer → launch →
//! registration → initialization, with liveness timeouts, and termination on deletion.
//!
//! A `kube::runtime::Controller` over NodeClaims, also woken by Node changes (mapped to the claim by
//! providerID). Each reconcile reads the clock once, asks the pure [`phase::phase`] which step the
//! claim needs, runs that one sub-reconciler and requeues:
//! - [`launch`]: the VM, through the cloud provider;
//! - [`registration`]: the Node with the claim's providerID gets the claim's labels, taints and our
//!   finalizer;
//! - [`initialization`]: the Node is Ready and its startup taints are gone;
//! - liveness: the launch and registration timeouts delete the claim (decided in [`phase`]);
//! - [`finalize`]: on deletion, the Node is drained ([`crate::controllers::node::termination`]), then the VM, the Node
//!   and the claim's finalizer go.
//!
//! Every write goes through [`crate::controllers::writes`]: guarded by the resourceVersion the step decided on, and a
//! step refused as stale is looked at again after [`phase::WAIT_POLL`] without a backoff.

mod finalize;
mod initialization;
mod launch;
mod launch_prices;
pub mod phase;
mod registration;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::NodeClaim;
use crate::cloud::{CloudError, CloudProvider};
use crate::controllers::writes::{self, Deleted};
use crate::controllers::{events, metrics, ControllerError, Shared};
use crate::model::labels::FINALIZER_TERMINATION;
use crate::operator::metrics::{controller, in_controller};
use phase::{Phase, Timeouts, RESYNC, WAIT_POLL};

pub use phase::REGISTRATION_TIMEOUT;

/// Why we delete a claim whose Node someone else deleted; not a disruption, so not counted as one.
const NODE_DELETED: &str = "node_deleted";
/// Upstream retries launch errors with a 1 s – 1 min backoff.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

pub async fn run<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    let claims: Api<NodeClaim> = Api::all(shared.client.clone());
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let mapper = shared.clone();
    // The controller's store holds every claim while it runs, so it keeps only what the steps read.
    let (reader, writer) = reflector::store();
    let claims = watcher(claims, watcher::Config::default()).modify(phase::trim_for_store);
    Controller::for_stream(reflector::reflector(writer, claims).applied_objects(), reader)
        .watches(nodes, watcher::Config::default(), move |node: Node| {
            claim_of_node(&mapper, &node).map(|name| ObjectRef::new(&name))
        })
        .run(reconcile, error_policy, shared)
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// The claim a Node belongs to: by the index's providerID join, else by the name the cloud gave its
/// machine (a Node can register before the claim's providerID is written).
fn claim_of_node<C: CloudProvider>(shared: &Shared<C>, node: &Node) -> Option<String> {
    let provider_id = node.spec.as_ref()?.provider_id.as_deref()?;
    let cluster = shared.cluster();
    if let Some(claim) = cluster.nodeclaim_with_provider_id(provider_id) {
        return Some(claim.name.clone());
    }
    drop(cluster);
    shared.cloud.claim_of_provider_id(provider_id)
}

fn error_policy<C>(claim: Arc<NodeClaim>, error: &ControllerError, shared: Arc<Shared<C>>) -> Action {
    let name = claim.name_any();
    let mut failures = shared.failures.lock().unwrap_or_else(|p| p.into_inner());
    let n = failures.entry(name.clone()).or_insert(0);
    *n = n.saturating_add(1);
    let delay = BACKOFF_MIN.saturating_mul(1u32 << (*n - 1).min(6)).min(BACKOFF_MAX);
    tracing::warn!(nodeclaim = %name, category = error.category(), %error, retry_in_s = delay.as_secs(), "nodeclaim reconcile failed");
    Action::requeue(delay)
}

async fn reconcile<C: CloudProvider + 'static>(
    claim: Arc<NodeClaim>,
    shared: Arc<Shared<C>>,
) -> Result<Action, ControllerError> {
    let mut in_flight = shared.begin_work(controller::NODECLAIM_LIFECYCLE).await;
    let now = Timestamp::now();
    // kube spawns each reconcile as a task of its own, so the controller name is set here, per reconcile.
    let stepped = in_controller(controller::NODECLAIM_LIFECYCLE, step(&claim, &shared, now)).await;
    let action = in_flight.result(stepped)?;
    shared.failures.lock().unwrap_or_else(|p| p.into_inner()).remove(&claim.name_any());
    Ok(action)
}

/// Runs the sub-reconciler of the claim's phase at `now`.
async fn step<C: CloudProvider + 'static>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    now: Timestamp,
) -> Result<Action, ControllerError> {
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    let node_name = claim.status.as_ref().and_then(|s| s.node_name.as_deref());
    let node_deleting = node_name.and_then(|n| shared.cluster().node(n).map(|n| n.deleting));
    let timeouts = Timeouts { registration: shared.settings.registration_timeout, ..Timeouts::default() };
    let seen_as = format!("NodeClaim/{}", claim.uid().unwrap_or_default());
    let age = shared.first_seen.guarded(&seen_as, phase::age(claim, now), std::time::Instant::now());
    match phase::phase_at_age(claim, node_deleting, age, &timeouts) {
        Phase::Terminating => finalize::finalize(claim, shared, &api).await,
        Phase::Released => {
            shared.first_seen.retain(|key| key != seen_as);
            Ok(Action::await_change())
        }
        Phase::AddFinalizer => {
            let mut finalizers = claim.finalizers().to_vec();
            finalizers.push(FINALIZER_TERMINATION.to_string());
            writes::patch(&api, claim, json!({ "metadata": { "finalizers": finalizers } })).await?;
            Ok(Action::requeue(WAIT_POLL))
        }
        Phase::Launch => {
            // Whatever hangs inside the cloud call, the create ends when the launch timeout does; the
            // next reconcile then finds the claim timed out.
            let left = timeouts.launch.saturating_sub(age);
            launch::launch(claim, shared, &api, now, left).await
        }
        Phase::LaunchTimedOut { timeout } => {
            record_failure(shared, claim);
            shared.events.on_claim(claim, events::launch_timeout(timeout)).await;
            delete_claim(&api, claim, "launch_timeout").await
        }
        Phase::Register { provider_id } => {
            registration::register(claim, shared, &api, &provider_id, now).await
        }
        Phase::RegistrationTimedOut { timeout } => {
            record_failure(shared, claim);
            shared.events.on_claim(claim, events::registration_timeout(timeout)).await;
            delete_claim(&api, claim, "registration_timeout").await
        }
        Phase::NodeDeleted { provider_id } => {
            // Azure's node manager deletes the Node of a VM that is gone: for a spot VM, an eviction.
            let reason = match shared.cloud.get(&provider_id).await {
                Err(CloudError::NotFound(_)) => {
                    let (reason, event) = crate::controllers::nodeclaim::gc::vanished(claim, &provider_id);
                    shared.events.on_claim(claim, event).await;
                    reason
                }
                _ => NODE_DELETED,
            };
            delete_claim(&api, claim, reason).await
        }
        Phase::Initialize => initialization::initialize(claim, shared, &api, now).await,
        Phase::Settled => Ok(Action::requeue(RESYNC)),
    }
}

/// A claim of its NodePool is given up for not launching or registering in time.
fn record_failure<C>(shared: &Shared<C>, claim: &NodeClaim) {
    if let Some(pool) = claim.labels().get(crate::model::labels::LABEL_NODEPOOL) {
        shared.registrations.record(pool, false);
    }
}

/// Sets one condition at `now` and writes the conditions back if anything changed (guarded; a stale
/// write is dropped, as the step requeues anyway).
async fn set_condition(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Result<(), ControllerError> {
    let mut list = claim.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    if conditions::set(&mut list, type_, status, reason, message, claim.metadata.generation, &Time(now)) {
        writes::patch_status(api, claim, json!({ "status": { "conditions": list } })).await?;
    }
    Ok(())
}

/// Deletes the claim if it is still the one the decision was made on; `reason` is upstream's, and
/// except for [`NODE_DELETED`] counts the claim as disrupted. A claim someone deleted (or changed)
/// meanwhile is not deleted, nor counted, twice.
async fn delete_claim(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    reason: &'static str,
) -> Result<Action, ControllerError> {
    tracing::info!(nodeclaim = %claim.name_any(), reason, "deleting nodeclaim");
    match writes::delete(api, claim, true).await? {
        Deleted::Now => {
            if reason != NODE_DELETED {
                metrics::nodeclaim_disrupted(metrics::get(), claim, reason);
            }
            Ok(Action::await_change())
        }
        Deleted::Gone => Ok(Action::await_change()),
        Deleted::Stale => Ok(Action::requeue(WAIT_POLL)),
    }
}
