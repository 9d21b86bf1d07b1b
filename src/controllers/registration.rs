//! Registration and initialization of a launched NodeClaim (upstream core `nodeclaim/lifecycle`
//! `registration.go`, `initialization.go`): find the Node with the claim's providerID, give it the claim's
//! labels, taints and our finalizer and drop `karpenter.sh/unregistered`, then wait until it is Ready,
//! its startup and ephemeral taints are gone and the requested extended resources are allocatable.
//! Called by [`super::lifecycle`], whose patch helpers it uses.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::events;
use super::lifecycle::{now, patch_status, set_condition, RESYNC, WAIT_POLL};
use super::metrics;
use super::{ControllerError, Shared};
use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::{NodeClaim, Taint};
use crate::model::labels::{
    FINALIZER_TERMINATION, LABEL_INITIALIZED, LABEL_NODEPOOL, LABEL_REGISTERED, TAINT_UNREGISTERED,
};
use crate::state::records::{is_ephemeral_taint, is_ready};

/// Registered once the Node with the claim's providerID exists and carries the claim's labels, taints and
/// our finalizer, without `karpenter.sh/unregistered`.
pub(super) async fn register<C>(
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
    match nodes.patch(&node_name, &PatchParams::default(), &Patch::Merge(patch)).await {
        Ok(_) => {}
        // The Node changed since it was read (its kubelet, the node controllers): read it again soon.
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(Action::requeue(WAIT_POLL)),
        Err(e) => return Err(e.into()),
    }
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
    let status = json!({ "nodeName": node_name, "conditions": list });
    if patch_status(api, claim, status).await?.is_none() {
        return Ok(Action::requeue(WAIT_POLL));
    }
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
pub(super) async fn initialize<C>(
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
    if patch_status(api, claim, json!({ "conditions": list })).await?.is_none() {
        return Ok(Action::requeue(WAIT_POLL));
    }
    tracing::info!(nodeclaim = %claim.name_any(), node = %node_name, "initialized nodeclaim");
    Ok(Action::requeue(RESYNC))
}

/// Why the Node is not initialized yet, or None when it is.
pub fn not_initialized(claim: &NodeClaim, node: &Node) -> Option<String> {
    if !is_ready(node) {
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
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.clone()).unwrap_or_default();
    const BASIC: [&str; 4] = ["cpu", "memory", "pods", "ephemeral-storage"];
    for resource in claim.spec.resources.requests.keys().filter(|k| !BASIC.contains(&k.as_str())) {
        let present = allocatable.get(resource).is_some_and(|q| q.0 != "0" && !q.0.is_empty());
        if !present {
            return Some(format!("resource {resource} not registered"));
        }
    }
    None
}
