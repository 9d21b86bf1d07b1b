//! Registration of a launched NodeClaim (upstream core `nodeclaim/lifecycle/registration.go`): find the
//! Node with the claim's providerID, give it the claim's labels, annotations, taints and our finalizer and drop
//! `karpenter.sh/unregistered`.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::phase::WAIT_POLL;
use super::set_condition;
use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::NodeClaim;
use crate::controllers::{events, metrics, writes, ControllerError, Shared};
use crate::model::labels::{FINALIZER_TERMINATION, LABEL_NODEPOOL, LABEL_REGISTERED, TAINT_UNREGISTERED};

/// Registered once the Node with the claim's providerID exists and carries the claim's labels, taints and
/// our finalizer, without `karpenter.sh/unregistered`.
pub(super) async fn register<C>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    api: &Api<NodeClaim>,
    provider_id: &str,
    now: Timestamp,
) -> Result<Action, ControllerError> {
    let node_name = shared.cluster().node_with_provider_id(provider_id).map(|n| n.name().to_string());
    let Some(node_name) = node_name else {
        set_condition(
            api,
            claim,
            conditions::REGISTERED,
            ConditionStatus::Unknown,
            "NodeNotFound",
            "Node not registered with cluster",
            now,
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
    // The claim's annotations (its NodePool template's among them) go to the Node too, as upstream's
    // `syncNode` assigns them.
    let annotations = claim.annotations();
    let patch = json!({
        "metadata": {
            "labels": labels,
            "annotations": annotations,
            "finalizers": finalizers,
            "ownerReferences": owners,
        },
        "spec": { "taints": taints },
    });
    // The Node changes under us (its kubelet, the node controllers): when it did, read it again soon.
    if writes::patch(&nodes, &node, patch).await?.is_none() {
        return Ok(Action::requeue(WAIT_POLL));
    }
    let mut list = claim.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    conditions::set(
        &mut list,
        conditions::REGISTERED,
        ConditionStatus::True,
        "Registered",
        "",
        claim.metadata.generation,
        &Time(now),
    );
    let status = json!({ "nodeName": node_name, "conditions": list });
    if writes::patch_status(api, claim, json!({ "status": status })).await?.is_none() {
        return Ok(Action::requeue(WAIT_POLL));
    }
    metrics::node_created(metrics::get(), claim);
    if let Some(pool) = claim.labels().get(LABEL_NODEPOOL) {
        shared.registrations.record(pool, true);
    }
    tracing::info!(
        nodeclaim = %claim.name_any(),
        node = %node_name,
        nodepool = claim.labels().get(LABEL_NODEPOOL).map(String::as_str).unwrap_or(""),
        "registered nodeclaim"
    );
    shared.events.on_claim(claim, events::registered(&node_name)).await;
    Ok(Action::requeue(WAIT_POLL))
}
