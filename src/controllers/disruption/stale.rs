//! Commands left behind by a controller that stopped mid-way (a crash, a leader change), settled at the
//! start of every pass, so nothing stays tainted or half-done:
//!
//! - **resumed**: replacement NodeClaims carry `karpenter.azure.com/replacement-for` with the candidates
//!   they replace. When those candidates still exist, are tainted `karpenter.sh/disrupted` and are not
//!   being deleted, the command was interrupted between launching the replacements and deleting the
//!   candidates; it is resumed (wait for the replacements, then delete the candidates) rather than
//!   decided again, which would launch a second set of replacements.
//! - **stripped**: any other `karpenter.sh/disrupted` taint on a Node, or `DisruptionReason` condition on
//!   a NodeClaim, where neither is being deleted and no command of this term owns the node, is removed
//!   (upstream `controller.go` does the same at the start of every pass); the next decision starts from
//!   scratch.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use tokio::task::JoinSet;

use super::execute::{self, clear_disruption_reason, untaint, Started};
use super::{Disrupting, Shared};
use crate::apis::nodepool::DisruptionReason;
use crate::controllers::ControllerError;
use crate::disruption::{Command, Method};
use crate::model::labels::{ANNOTATION_REPLACEMENT_FOR, TAINT_DISRUPTED};

/// Interrupted commands: candidates → replacement claim names, with the candidates' reason.
fn interrupted<C>(
    shared: &Shared<C>,
    owned: &BTreeSet<String>,
) -> Vec<(Vec<String>, Vec<String>, Option<String>)> {
    let cluster = shared.cluster();
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for claim in cluster.nodeclaims().filter(|c| !c.deleting) {
        if let Some(list) = claim.annotations.get(ANNOTATION_REPLACEMENT_FOR) {
            groups.entry(list.clone()).or_default().push(claim.name.clone());
        }
    }
    let mut out = vec![];
    for (list, replacements) in groups {
        let candidates: Vec<String> = list.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
        if candidates.is_empty() || candidates.iter().any(|c| owned.contains(c)) {
            continue;
        }
        let mut reason = None;
        let live = candidates.iter().all(|name| {
            let Some(node) = cluster.node(name) else { return false };
            let claim = cluster.claim_of(node);
            if reason.is_none() {
                reason = claim.and_then(|c| c.disruption_reason.clone());
            }
            !node.deleting
                && !claim.is_some_and(|c| c.deleting)
                && node.node.taints.iter().any(|t| t.key == TAINT_DISRUPTED)
        });
        if live {
            out.push((candidates, replacements, reason));
        }
    }
    out
}

/// Resumes interrupted commands as tasks of `commands`; their candidates join `disrupting`.
pub fn resume<C: Send + Sync + 'static>(
    shared: &Arc<Shared<C>>,
    disrupting: &Disrupting,
    commands: &mut JoinSet<()>,
) {
    for (candidates, replacements, reason) in interrupted(shared, &disrupting.names()) {
        let reason = match reason.as_deref() {
            Some("Drifted") => DisruptionReason::Drifted,
            Some("Empty") => DisruptionReason::Empty,
            _ => DisruptionReason::Underutilized,
        };
        let method = match (reason, candidates.len()) {
            (DisruptionReason::Drifted, _) => Method::Drift,
            (DisruptionReason::Empty, _) => Method::Emptiness,
            (_, 1) => Method::SingleNodeConsolidation,
            _ => Method::MultiNodeConsolidation,
        };
        tracing::info!(candidates = ?candidates, replacements = ?replacements, "resuming a disruption command a previous leader started");
        disrupting.add(&candidates);
        let command = Command {
            reason,
            method,
            candidates,
            replacements: vec![],
            savings_per_hour: 0.0,
            disruption_cost: 0.0,
            moves: vec![],
            explanation: format!("resumed at {}", Timestamp::now()),
        };
        let started = Started { replacements, at: std::time::Instant::now() };
        let (shared, disrupting) = (shared.clone(), disrupting.clone());
        commands.spawn(async move { execute::finish(&shared, &disrupting, command, started).await });
    }
}

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
