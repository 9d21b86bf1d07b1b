//! Initialization of a registered NodeClaim (upstream core `nodeclaim/lifecycle/initialization.go`):
//! wait until its Node is Ready, its startup and ephemeral taints are gone and the requested extended
//! resources are allocatable, then label the Node initialized and the claim Initialized and Ready.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::phase::{RESYNC, WAIT_POLL};
use super::set_condition;
use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::{NodeClaim, Taint};
use crate::controllers::{writes, ControllerError, Shared};
use crate::model::labels::LABEL_INITIALIZED;
use crate::state::records::{is_ephemeral_taint, is_ready};

/// Initialized once the Node is Ready, the claim's startup taints and the known ephemeral taints are
/// gone, and every extended resource the claim requested is allocatable.
pub(super) async fn initialize<C>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    api: &Api<NodeClaim>,
    now: Timestamp,
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
            now,
        )
        .await?;
        return Ok(Action::requeue(WAIT_POLL));
    }
    let patch = json!({ "metadata": { "labels": { LABEL_INITIALIZED: "true" } } });
    nodes.patch(&node_name, &PatchParams::default(), &Patch::Merge(patch)).await?;
    let mut list = claim.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let (generation, t) = (claim.metadata.generation, Time(now));
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
    if writes::patch_status(api, claim, json!({ "status": { "conditions": list } })).await?.is_none() {
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
