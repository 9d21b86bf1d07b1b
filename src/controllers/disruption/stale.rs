//! Leftovers of commands no one executes any more (upstream `controller.go` strips them at the start of
//! every pass): a `karpenter.sh/disrupted` taint on a Node, or a `DisruptionReason` condition on a
//! NodeClaim, where neither the Node nor its NodeClaim is being deleted and no command of this
//! leadership term owns the node. After a crash or a leader change mid-command, the next pass of the
//! new leader puts those nodes back into service; the decision is then made again from scratch.

use std::collections::BTreeSet;

use super::execute::{clear_disruption_reason, untaint};
use super::{Disrupting, Shared};
use crate::controllers::ControllerError;
use crate::model::labels::TAINT_DISRUPTED;

/// What to put back: (nodes to untaint, claims whose condition to clear).
pub fn leftovers<C>(shared: &Shared<C>, owned: &BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    let cluster = shared.cluster();
    let mut nodes = vec![];
    let mut claims = vec![];
    for (node, claim) in cluster.nodes() {
        let Some(claim) = claim else { continue };
        if node.deleting || claim.deleting || owned.contains(node.name()) {
            continue;
        }
        if node.node.taints.iter().any(|t| t.key == TAINT_DISRUPTED) {
            nodes.push(node.name().to_string());
        }
        if claim.disruption_reason.is_some() {
            claims.push(claim.name.clone());
        }
    }
    for claim in cluster.in_flight_claims() {
        if claim.disruption_reason.is_some() && !owned.contains(&claim.name) {
            claims.push(claim.name.clone());
        }
    }
    (nodes, claims)
}

/// Strips the leftovers; one failure does not stop the others, the first is returned.
pub async fn strip<C>(shared: &Shared<C>, disrupting: &Disrupting) -> Result<(), ControllerError> {
    let (nodes, claims) = leftovers(shared, &disrupting.names());
    let mut first_error = None;
    for node in &nodes {
        tracing::info!(node = %node, "removing a disruption taint no command owns");
        if let Err(e) = untaint(shared, node).await {
            first_error.get_or_insert(e);
        }
    }
    for claim in &claims {
        if let Err(e) = clear_disruption_reason(shared, claim).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}
