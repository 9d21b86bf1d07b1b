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
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::events;
use super::metrics;
use super::nodeclaim::{self, resource_list};
use super::{termination, ControllerError, Shared};
use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::labels::{
    FINALIZER_TERMINATION, LABEL_INITIALIZED, LABEL_NODEPOOL, LABEL_REGISTERED, TAINT_UNREGISTERED,
};
use crate::apis::{NodeClaim, Taint};
use crate::cloud::azure::naming;
use crate::cloud::{CloudError, CloudProvider};
use crate::operator::metrics::{controller, in_controller};
use crate::state::records::is_ephemeral_taint;

/// Upstream liveness: a claim not launched within 5 minutes is deleted.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Upstream liveness: a claim whose Node has not registered within 15 minutes is deleted.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How often a claim waiting for its Node is looked at again (Node events also wake it).
const WAIT_POLL: Duration = Duration::from_secs(2);
/// A settled claim is still looked at now and then, so a missed event is not fatal.
const RESYNC: Duration = Duration::from_secs(5 * 60);
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
        if age > REGISTRATION_TIMEOUT {
            shared.events.on_claim(claim, events::registration_timeout(REGISTRATION_TIMEOUT)).await;
            return delete_claim(&api, claim, "registration_timeout").await;
        }
        return register(claim, shared, &api, &provider_id).await;
    }
    // A Node deleted by someone else takes its claim with it (and so its VM).
    let node_deleting =
        status.node_name.as_deref().and_then(|n| shared.cluster().node(n).map(|n| n.deleting));
    if node_deleting == Some(true) {
        return delete_claim(&api, claim, NODE_DELETED).await;
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

fn now() -> Time {
    Time(Timestamp::now())
}

/// A merge patch of `metadata`, guarded by the resourceVersion the decision was made on.
async fn patch_meta(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    meta: serde_json::Value,
) -> Result<(), ControllerError> {
    let mut meta = meta;
    meta["resourceVersion"] = json!(claim.resource_version());
    api.patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(json!({ "metadata": meta }))).await?;
    Ok(())
}

async fn patch_status(
    api: &Api<NodeClaim>,
    name: &str,
    status: serde_json::Value,
) -> Result<(), ControllerError> {
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({ "status": status }))).await?;
    Ok(())
}

/// Sets one condition and writes the conditions back if anything changed.
async fn set_condition(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
) -> Result<(), ControllerError> {
    let mut list = claim.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    if conditions::set(&mut list, type_, status, reason, message, claim.metadata.generation, &now()) {
        patch_status(api, &claim.name_any(), json!({ "conditions": list })).await?;
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
    match api.delete(&claim.name_any(), &DeleteParams::default()).await {
        Ok(_) => {
            if reason != NODE_DELETED {
                metrics::nodeclaim_disrupted(metrics::get(), claim, reason);
            }
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Action::await_change()),
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
    let request = match nodeclaim::launch_request(claim, class.as_ref(), &types) {
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
    if !labels.is_empty() {
        patch_meta(api, claim, json!({ "labels": labels })).await?;
    }
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
    patch_status(api, &name, status).await?;
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

async fn register<C>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    api: &Api<NodeClaim>,
    provider_id: &str,
) -> Result<Action, ControllerError> {
    let node_name = shared
        .cluster()
        .nodes()
        .find(|(n, _)| n.provider_id.as_deref() == Some(provider_id))
        .map(|(n, _)| n.name().to_string());
    let Some(node_name) = node_name else {
        set_condition(
            api,
            claim,
            conditions::REGISTERED,
            ConditionStatus::Unknown,
            "NodeNotFound",
            "Node not registered with cluster",
        )
        .await?;
        return Ok(Action::requeue(WAIT_POLL));
    };
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let Some(node) = nodes.get_opt(&node_name).await? else {
        return Ok(Action::requeue(WAIT_POLL));
    };
    let mut labels = claim.labels().clone();
    labels.insert(LABEL_REGISTERED.to_string(), "true".to_string());
    let mut finalizers = node.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == FINALIZER_TERMINATION) {
        finalizers.push(FINALIZER_TERMINATION.to_string());
    }
    let mut owners = node.owner_references().to_vec();
    if !owners.iter().any(|o| o.uid == claim.uid().unwrap_or_default()) {
        owners.push(
            claim
                .controller_owner_ref(&())
                .map(|mut o| {
                    o.controller = None;
                    o
                })
                .unwrap_or_default(),
        );
    }
    let taints: Vec<_> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != TAINT_UNREGISTERED)
        .collect();
    let patch = json!({
        "metadata": {
            "resourceVersion": node.resource_version(),
            "labels": labels,
            "finalizers": finalizers,
            "ownerReferences": owners,
        },
        "spec": { "taints": taints },
    });
    nodes.patch(&node_name, &PatchParams::default(), &Patch::Merge(patch)).await?;
    let mut list = claim.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    conditions::set(
        &mut list,
        conditions::REGISTERED,
        ConditionStatus::True,
        "Registered",
        "",
        claim.metadata.generation,
        &now(),
    );
    patch_status(api, &claim.name_any(), json!({ "nodeName": node_name, "conditions": list })).await?;
    metrics::node_created(metrics::get(), claim);
    tracing::info!(
        nodeclaim = %claim.name_any(),
        node = %node_name,
        nodepool = claim.labels().get(LABEL_NODEPOOL).map(String::as_str).unwrap_or(""),
        "registered nodeclaim"
    );
    shared.events.on_claim(claim, events::registered(&node_name)).await;
    Ok(Action::requeue(WAIT_POLL))
}

/// Initialized once the Node is Ready, the claim's startup taints and the known ephemeral taints are
/// gone, and every extended resource the claim requested is allocatable.
async fn initialize<C>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    api: &Api<NodeClaim>,
) -> Result<Action, ControllerError> {
    let Some(node_name) = claim.status.as_ref().and_then(|s| s.node_name.clone()) else {
        return Ok(Action::requeue(WAIT_POLL));
    };
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let Some(node) = nodes.get_opt(&node_name).await? else {
        return Ok(Action::requeue(WAIT_POLL));
    };
    if let Some(reason) = not_initialized(claim, &node) {
        set_condition(
            api,
            claim,
            conditions::INITIALIZED,
            ConditionStatus::Unknown,
            "NotInitialized",
            &reason,
        )
        .await?;
        return Ok(Action::requeue(WAIT_POLL));
    }
    let patch = json!({ "metadata": { "labels": { LABEL_INITIALIZED: "true" } } });
    nodes.patch(&node_name, &PatchParams::default(), &Patch::Merge(patch)).await?;
    let mut list = claim.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let (generation, t) = (claim.metadata.generation, now());
    conditions::set(
        &mut list,
        conditions::INITIALIZED,
        ConditionStatus::True,
        "Initialized",
        "",
        generation,
        &t,
    );
    conditions::set(&mut list, conditions::READY, ConditionStatus::True, "Ready", "", generation, &t);
    patch_status(api, &claim.name_any(), json!({ "conditions": list })).await?;
    tracing::info!(nodeclaim = %claim.name_any(), node = %node_name, "initialized nodeclaim");
    Ok(Action::requeue(RESYNC))
}

/// Why the Node is not initialized yet, or None when it is.
pub fn not_initialized(claim: &NodeClaim, node: &Node) -> Option<String> {
    let status = node.status.clone().unwrap_or_default();
    let ready =
        status.conditions.unwrap_or_default().iter().any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return Some("Node not ready".into());
    }
    let taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|t| serde_json::from_value(serde_json::to_value(t).ok()?).ok())
        .collect();
    let startup =
        |t: &Taint| claim.spec.startup_taints.iter().any(|s| s.key == t.key && s.effect == t.effect);
    if let Some(t) = taints.iter().find(|t| startup(t) || is_ephemeral_taint(t)) {
        return Some(format!("taint {} still present", t.key));
    }
    let allocatable = status.allocatable.unwrap_or_default();
    const BASIC: [&str; 4] = ["cpu", "memory", "pods", "ephemeral-storage"];
    for resource in claim.spec.resources.requests.keys().filter(|k| !BASIC.contains(&k.as_str())) {
        let present = allocatable.get(resource).is_some_and(|q| q.0 != "0" && !q.0.is_empty());
        if !present {
            return Some(format!("resource {resource} not registered"));
        }
    }
    None
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
    patch_meta(api, claim, json!({ "finalizers": kept })).await?;
    metrics::nodeclaim_terminated(metrics::get(), claim);
    tracing::info!(nodeclaim = %name, "terminated nodeclaim");
    Ok(Action::await_change())
}
