//! Termination of a NodeClaim being deleted (upstream core `nodeclaim/termination`): its Node is drained
//! ([`crate::controllers::node::termination`]: taint, evictions, terminationGracePeriod), then the VM is
//! deleted, then the Node (our finalizer removed first), then the claim's finalizer.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::phase::WAIT_POLL;
use crate::apis::NodeClaim;
use crate::cloud::{CloudError, CloudProvider};
use crate::controllers::node::termination;
use crate::controllers::{metrics, writes, ControllerError, Shared};
use crate::model::labels::FINALIZER_TERMINATION;

/// Drains the Node(s), then deletes the VM, then the Node, then the claim's finalizer; each pass does
/// what is left and requeues until the claim is released.
pub(super) async fn finalize<C: CloudProvider + 'static>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    api: &Api<NodeClaim>,
) -> Result<Action, ControllerError> {
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
            Ok(()) | Err(CloudError::NotFound(_)) => {
                metrics::instance_terminated(metrics::get(), claim, Timestamp::now());
            }
            Err(error) => return Err(error.into()),
        }
    }
    let nodes: Api<Node> = Api::all(shared.client.clone());
    for node_name in node_names {
        let Some(node) = nodes.get_opt(&node_name).await? else { continue };
        if node.finalizers().iter().any(|f| f == FINALIZER_TERMINATION) {
            let kept: Vec<&String> =
                node.finalizers().iter().filter(|f| *f != FINALIZER_TERMINATION).collect();
            if writes::patch(&nodes, &node, json!({ "metadata": { "finalizers": kept } })).await?.is_none() {
                return Ok(Action::requeue(WAIT_POLL));
            }
            let claim_deleted = claim.metadata.deletion_timestamp.as_ref().map(|t| t.0);
            metrics::node_terminated(metrics::get(), &node, claim_deleted, Timestamp::now());
        }
        // Only the Node that was read: one of the same name registered since is not ours to delete.
        writes::delete(&nodes, &node, false).await?;
    }
    let kept: Vec<&String> = claim.finalizers().iter().filter(|f| *f != FINALIZER_TERMINATION).collect();
    if writes::patch(api, claim, json!({ "metadata": { "finalizers": kept } })).await?.is_none() {
        return Ok(Action::requeue(WAIT_POLL));
    }
    metrics::nodeclaim_terminated(metrics::get(), claim, Timestamp::now());
    tracing::info!(nodeclaim = %name, "terminated nodeclaim");
    Ok(Action::await_change())
}
