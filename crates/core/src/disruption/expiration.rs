//! Expiration: a NodeClaim is deleted once `expireAfter` has passed since its creation, with no
//! budget, no replacement first and node-level do-not-disrupt ignored (upstream
//! `pkg/controllers/nodeclaim/expiration/controller.go`, `designs/forceful-expiration.md`). Decided
//! here so that the controller and the simulator agree on the moment.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::apis::duration::NillableDuration;

use super::command::Expired;
use super::snapshot::Snapshot;

/// The NodeClaims whose expireAfter has passed at `now`, sorted by expiry time then name. Nodes
/// already being deleted and nodes of pools missing from the snapshot are left out.
pub fn expired(snapshot: &Snapshot, now: Timestamp) -> Vec<Expired> {
    let mut out: Vec<Expired> = snapshot
        .nodes
        .iter()
        .filter(|n| !n.marked_for_deletion)
        .filter_map(|n| {
            let pool = snapshot.nodepools.iter().find(|p| p.name == n.nodepool)?;
            let NillableDuration::After(after) = pool.expire_after else { return None };
            let at = n.created.checked_add(SignedDuration::try_from(after).ok()?).ok()?;
            (at <= now).then(|| Expired {
                node: n.node.name.clone(),
                nodeclaim: n.nodeclaim.clone(),
                nodepool: n.nodepool.clone(),
                expired_at: at,
            })
        })
        .collect();
    out.sort_by(|a, b| a.expired_at.cmp(&b.expired_at).then_with(|| a.nodeclaim.cmp(&b.nodeclaim)));
    out
}
