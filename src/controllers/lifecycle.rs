//! The NodeClaim lifecycle (upstream core `nodeclaim/lifecycle`): finalizer → launch → registration →
//! initialization, with liveness timeouts, and termination on deletion.
//!
//! A `kube::runtime::Controller` over NodeClaims, also woken by Node changes (mapped to the claim by
//! providerID). Each reconcile advances one step and requeues; every write is a merge patch carrying the
//! object's resourceVersion, so a stale read fails with a conflict and is retried rather than clobbering.
//!
//! Termination: on NodeClaim deletion the Node is drained ([`super::termination`]: taint, evictions,
//! terminationGracePeriod), then the VM is deleted, then the Node (our finalizer removed first), then the
//! claim's finalizer.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::events;
use super::metrics;
use super::nodeclaim::{self, resource_list};
use super::registration::{initialize, register};
use super::{termination, ControllerError, Shared};
use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::NodeClaim;
use crate::cloud::azure::naming;
use crate::cloud::{CloudError, CloudProvider};
use crate::model::labels::FINALIZER_TERMINATION;
use crate::operator::metrics::{controller, in_controller};

/// Upstream liveness: a claim not launched within 5 minutes is deleted.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Upstream liveness: a claim whose Node has not registered within 15 minutes is deleted.
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How often a claim waiting for its Node is looked at again (Node events also wake it).
pub(super) const WAIT_POLL: Duration = Duration::from_secs(2);
/// A settled claim is still looked at now and then, so a missed event is not fatal.
pub(super) const RESYNC: Duration = Duration::from_secs(5 * 60);
/// Why we delete a claim whose Node someone else deleted; not a disruption, so not counted as one.
const NODE_DELETED: &str = "node_deleted";
/// Upstream retries launch errors with a 1 s – 1 min backoff.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

pub async fn run<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    let claims: Api<NodeClaim> = Api::all(shared.client.clone());
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let mapper = shared.clone();
    Controller::new(claims, watcher::Config::default())
        .watches(nodes, watcher::Config::default(), move |node: Node| {
            claim_of_node(&mapper, &node).map(|name| ObjectRef::new(&name))
        })
        .run(reconcile, error_policy, shared)
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// The claim a Node belongs to: by the index's providerID join, else by the VM name `aks-<claim>`.
fn claim_of_node<C>(shared: &Shared<C>, node: &Node) -> Option<String> {
    let provider_id = node.spec.as_ref()?.provider_id.as_deref()?;
    let cluster = shared.cluster();
    if let Some(claim) = cluster.nodeclaims().find(|c| c.provider_id.as_deref() == Some(provider_id)) {
        return Some(claim.name.clone());
    }
    let vm = naming::parse_provider_id(provider_id).ok()?;
    naming::claim_name(&vm.vm_name).map(str::to_string)
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
    let _in_flight = shared.begin_work().await;
    // kube spawns each reconcile as a task of its own, so the controller name is set here, per reconcile.
    let action = in_controller(controller::NODECLAIM_LIFECYCLE, step(&claim, &shared)).await?;
    shared.failures.lock().unwrap_or_else(|p| p.into_inner()).remove(&claim.name_any());
    Ok(action)
}

async fn step<C: CloudProvider + 'static>(
    claim: &NodeClaim,
    shared: &Shared<C>,
) -> Result<Action, ControllerError> {
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    if claim.metadata.deletion_timestamp.is_some() {
        return finalize(claim, shared, &api).await;
    }
    // The finalizer goes on before any cloud call, so a VM is never created for a claim that could
    // vanish without cleaning it up.
    if !claim.finalizers().iter().any(|f| f == FINALIZER_TERMINATION) {
        let mut finalizers = claim.finalizers().to_vec();
        finalizers.push(FINALIZER_TERMINATION.to_string());
        patch_meta(&api, claim, json!({ "finalizers": finalizers })).await?;
        return Ok(Action::requeue(WAIT_POLL));
    }
    let status = claim.status.clone().unwrap_or_default();
    let age = age(claim);
    let Some(provider_id) = status.provider_id.clone().filter(|p| !p.is_empty()) else {
        if age > LAUNCH_TIMEOUT {
            shared.events.on_claim(claim, events::launch_timeout(LAUNCH_TIMEOUT)).await;
            return delete_claim(&api, claim, "launch_timeout").await;
        }
        return launch(claim, shared, &api).await;
    };
    if !conditions::is_true(&status.conditions, conditions::REGISTERED) {
        let timeout = shared.settings.registration_timeout;
        if age > timeout {
            shared.events.on_claim(claim, events::registration_timeout(timeout)).await;
            return delete_claim(&api, claim, "registration_timeout").await;
        }
        return register(claim, shared, &api, &provider_id).await;
    }
    // A Node deleted by someone else takes its claim with it (and so its VM).
    let node_deleting =
        status.node_name.as_deref().and_then(|n| shared.cluster().node(n).map(|n| n.deleting));
    if node_deleting == Some(true) {
        // Azure's node manager deletes the Node of a VM that is gone: for a spot VM, an eviction.
        let reason = match shared.cloud.get(&provider_id).await {
            Err(CloudError::NotFound(_)) => {
                let (reason, event) = super::gc::vanished(claim, &provider_id);
                shared.events.on_claim(claim, event).await;
                reason
            }
            _ => NODE_DELETED,
        };
        return delete_claim(&api, claim, reason).await;
    }
    if !conditions::is_true(&status.conditions, conditions::INITIALIZED) {
        return initialize(claim, shared, &api).await;
    }
    Ok(Action::requeue(RESYNC))
}

fn age(claim: &NodeClaim) -> Duration {
    let created = claim.metadata.creation_timestamp.as_ref().map_or(Timestamp::now(), |t| t.0);
    Duration::from_secs(Timestamp::now().as_second().saturating_sub(created.as_second()).max(0) as u64)
}

pub(super) fn now() -> Time {
    Time(Timestamp::now())
}

/// A merge patch of `metadata`, guarded by the resourceVersion the decision was made on: the claim as
/// stored after the patch, or None when the claim changed or went meanwhile.
///
/// The reflector can hand a reconcile a claim older than the last write (the watch event is still on
/// its way); such a write is refused with a conflict (or a 404 once the claim is gone), and the step
/// is neither retried with a backoff nor counted, logged or reported again: the watch event that
/// follows brings the newer claim.
pub(super) async fn patch_meta(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    meta: serde_json::Value,
) -> Result<Option<NodeClaim>, ControllerError> {
    let mut meta = meta;
    meta["resourceVersion"] = json!(claim.resource_version());
    let patch = Patch::Merge(json!({ "metadata": meta }));
    unless_stale(api.patch(&claim.name_any(), &PatchParams::default(), &patch).await)
}

/// A merge patch of `status`, guarded like [`patch_meta`].
pub(super) async fn patch_status(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    status: serde_json::Value,
) -> Result<Option<NodeClaim>, ControllerError> {
    let patch = json!({ "metadata": { "resourceVersion": claim.resource_version() }, "status": status });
    unless_stale(api.patch_status(&claim.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await)
}

/// A guarded write's stored claim, or None when it was refused because the claim changed or went.
fn unless_stale(written: Result<NodeClaim, kube::Error>) -> Result<Option<NodeClaim>, ControllerError> {
    match written {
        Ok(stored) => Ok(Some(stored)),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Sets one condition and writes the conditions back if anything changed.
pub(super) async fn set_condition(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
) -> Result<(), ControllerError> {
    let mut list = claim.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    if conditions::set(&mut list, type_, status, reason, message, claim.metadata.generation, &now()) {
        patch_status(api, claim, json!({ "conditions": list })).await?;
    }
    Ok(())
}

/// Deletes the claim; `reason` is upstream's, and except for [`NODE_DELETED`] counts the claim as
/// disrupted.
async fn delete_claim(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    reason: &'static str,
) -> Result<Action, ControllerError> {
    tracing::info!(nodeclaim = %claim.name_any(), reason, "deleting nodeclaim");
    // Guarded by the version the decision was made on: a claim someone deleted (or changed) meanwhile
    // is not deleted, nor counted, twice.
    let params = DeleteParams {
        preconditions: Some(Preconditions { uid: claim.uid(), resource_version: claim.resource_version() }),
        ..DeleteParams::default()
    };
    match api.delete(&claim.name_any(), &params).await {
        Ok(_) => {
            if reason != NODE_DELETED {
                metrics::nodeclaim_disrupted(metrics::get(), claim, reason);
            }
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Action::await_change()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Action::requeue(WAIT_POLL)),
        Err(e) => Err(e.into()),
    }
}

async fn launch<C: CloudProvider + 'static>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    api: &Api<NodeClaim>,
) -> Result<Action, ControllerError> {
    let name = claim.name_any();
    let class = shared.cluster().nodeclass(&claim.spec.node_class_ref.name).cloned();
    let types = shared.catalog.types_for(class.as_ref());
    let records = |name: &str| shared.catalog.sku_record(name);
    let request = match nodeclaim::launch_request_with(claim, class.as_ref(), &types, &records) {
        Ok(request) => request,
        Err(error) if error.category() == "NodeClassNotReady" => {
            // As upstream: the claim cannot launch until its class changes, and provisioning creates no
            // claims for a class that is not Ready, so it goes instead of waiting.
            tracing::info!(nodeclaim = %name, %error, "launch failed");
            shared.events.on_claim(claim, events::launch_failed(error.category(), &error.to_string())).await;
            return delete_claim(api, claim, "nodeclass_not_ready").await;
        }
        Err(error) => {
            let ev = events::launch_failed("LaunchRequestInvalid", &error.to_string());
            shared.events.on_claim(claim, ev).await;
            set_condition(
                api,
                claim,
                conditions::LAUNCHED,
                ConditionStatus::Unknown,
                "LaunchRequestInvalid",
                &error.to_string(),
            )
            .await?;
            return Err(ControllerError::Invalid(error.to_string()));
        }
    };
    let instance = match shared.cloud.create(&request).await {
        Ok(instance) => instance,
        Err(error @ (CloudError::InsufficientCapacity { .. } | CloudError::NodeClassNotReady(_))) => {
            // The cloud marked the refused offerings unavailable; the next batch solves again without them.
            tracing::info!(nodeclaim = %name, category = error.category(), %error, "launch failed");
            let ev = match &error {
                CloudError::InsufficientCapacity { .. } => events::insufficient_capacity(&error.to_string()),
                _ => events::launch_failed(error.category(), &error.to_string()),
            };
            shared.events.on_claim(claim, ev).await;
            let reason = match &error {
                CloudError::InsufficientCapacity { .. } => "insufficient_capacity",
                _ => "nodeclass_not_ready",
            };
            return delete_claim(api, claim, reason).await;
        }
        Err(error) => {
            shared.events.on_claim(claim, events::launch_failed(error.category(), &error.to_string())).await;
            set_condition(
                api,
                claim,
                conditions::LAUNCHED,
                ConditionStatus::Unknown,
                error.category(),
                &error.to_string(),
            )
            .await?;
            return Err(error.into());
        }
    };
    let instance_type = types.iter().find(|t| t.name == instance.instance_type);
    let labels = nodeclaim::launched_labels(
        claim.metadata.labels.as_ref().unwrap_or(&Default::default()),
        instance_type,
        instance.zone.as_deref(),
        instance.capacity_type,
    );
    let launched = if labels.is_empty() {
        claim.clone()
    } else {
        match patch_meta(api, claim, json!({ "labels": labels })).await? {
            Some(stored) => stored,
            None => return Ok(Action::requeue(WAIT_POLL)),
        }
    };
    let mut list = claim.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    conditions::set(
        &mut list,
        conditions::LAUNCHED,
        ConditionStatus::True,
        "Launched",
        "",
        claim.metadata.generation,
        &now(),
    );
    let mut status = json!({
        "providerID": instance.provider_id,
        "imageID": instance.image_id.clone().or_else(|| {
            request.options.iter().find(|o| o.name == instance.instance_type).map(|o| o.image_id.clone())
        }),
        "conditions": list,
    });
    if let Some(t) = instance_type {
        status["capacity"] = json!(resource_list(&t.capacity));
        status["allocatable"] = json!(resource_list(&t.allocatable));
    }
    if patch_status(api, &launched, status).await?.is_none() {
        return Ok(Action::requeue(WAIT_POLL));
    }
    tracing::info!(
        nodeclaim = %name,
        provider_id = %instance.provider_id,
        instance_type = %instance.instance_type,
        zone = instance.zone.as_deref().unwrap_or(""),
        capacity_type = instance.capacity_type.as_str(),
        "launched nodeclaim"
    );
    let ev =
        events::launched(&instance.instance_type, instance.zone.as_deref(), instance.capacity_type.as_str());
    shared.events.on_claim(claim, ev).await;
    Ok(Action::requeue(WAIT_POLL))
}

/// Termination: drain the Node(s), then the VM, then the Node, then the claim's finalizer.
async fn finalize<C: CloudProvider + 'static>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    api: &Api<NodeClaim>,
) -> Result<Action, ControllerError> {
    if !claim.finalizers().iter().any(|f| f == FINALIZER_TERMINATION) {
        return Ok(Action::await_change());
    }
    let name = claim.name_any();
    let status = claim.status.clone().unwrap_or_default();
    let mut node_names: Vec<String> = status.node_name.clone().into_iter().collect();
    if let Some(provider_id) = status.provider_id.as_deref() {
        let cluster = shared.cluster();
        for (node, _) in cluster.nodes().filter(|(n, _)| n.provider_id.as_deref() == Some(provider_id)) {
            if !node_names.iter().any(|n| n == node.name()) {
                node_names.push(node.name().to_string());
            }
        }
    }
    if let Some(delay) = termination::drain(claim, shared, &node_names).await? {
        return Ok(Action::requeue(delay));
    }
    if let Some(provider_id) = status.provider_id.as_deref().filter(|p| !p.is_empty()) {
        match shared.cloud.delete(provider_id).await {
            Ok(()) | Err(CloudError::NotFound(_)) => {}
            Err(error) => return Err(error.into()),
        }
    }
    let nodes: Api<Node> = Api::all(shared.client.clone());
    for node_name in node_names {
        let Some(node) = nodes.get_opt(&node_name).await? else { continue };
        if node.finalizers().iter().any(|f| f == FINALIZER_TERMINATION) {
            let kept: Vec<&String> =
                node.finalizers().iter().filter(|f| *f != FINALIZER_TERMINATION).collect();
            let patch =
                json!({ "metadata": { "resourceVersion": node.resource_version(), "finalizers": kept } });
            nodes.patch(&node_name, &PatchParams::default(), &Patch::Merge(patch)).await?;
            metrics::node_terminated(metrics::get(), &node);
        }
        match nodes.delete(&node_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let kept: Vec<&String> = claim.finalizers().iter().filter(|f| *f != FINALIZER_TERMINATION).collect();
    if patch_meta(api, claim, json!({ "finalizers": kept })).await?.is_none() {
        return Ok(Action::requeue(WAIT_POLL));
    }
    metrics::nodeclaim_terminated(metrics::get(), claim);
    tracing::info!(nodeclaim = %name, "terminated nodeclaim");
    Ok(Action::await_change())
}
