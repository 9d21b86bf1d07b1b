//! Which nodes each method may disrupt, and for every other node why not, following upstream's
//! candidate rules (`pkg/controllers/disruption/helpers.go` `GetCandidates`, `types.go`
//! `NewCandidate`, `pkg/controllers/state/statenode.go`, and each method's `ShouldDisrupt`):
//!
//! - every method: a launched and initialized node, not already being deleted, not nominated, without
//!   `karpenter.sh/do-not-disrupt`, in a known NodePool, whose pods all may be evicted now (no active
//!   do-not-disrupt, duration form included; no PDB at zero allowance; no pod under several PDBs);
//! - emptiness: consolidateAfter is not Never and has elapsed since the last pod event (or since
//!   initialization), and no pod needs a new place;
//! - drift: `Drifted=True`;
//! - consolidation: as emptiness but with pods, and the pool's policy is WhenEmptyOrUnderutilized;
//! - emptiness and consolidation: never a node of a static pool (`spec.replicas`).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::apis::duration::NillableDuration;
use crate::apis::nodepool::{ConsolidationPolicy, DisruptionReason};

use super::command::BlockReason;
use super::cost::is_empty;
use super::snapshot::{ManagedNode, PoolPolicy, Snapshot};

/// The rules every voluntary method shares. `Err` names the first that fails.
pub fn base_check(snapshot: &Snapshot, node: &ManagedNode, now: Timestamp) -> Result<(), BlockReason> {
    if node.node.in_flight {
        return Err(BlockReason::InFlight);
    }
    if node.marked_for_deletion {
        return Err(BlockReason::MarkedForDeletion);
    }
    if node.initialized.is_none() {
        return Err(BlockReason::NotInitialized);
    }
    if node.nominated {
        return Err(BlockReason::Nominated);
    }
    if node.do_not_disrupt {
        return Err(BlockReason::NodeDoNotDisrupt);
    }
    if pool_of(snapshot, node).is_none() {
        return Err(BlockReason::UnknownNodePool { nodepool: node.nodepool.clone() });
    }
    for p in &node.pods {
        if let Some(left) = p.do_not_disrupt.active(p.started, now) {
            return Err(BlockReason::PodDoNotDisrupt { pod: p.pod.id(), left });
        }
    }
    for p in node.pods.iter().filter(|p| p.reschedulable()) {
        let pdbs: Vec<_> = snapshot.pdbs.iter().filter(|b| b.selects(&p.pod)).collect();
        match pdbs.as_slice() {
            [] => {}
            [one] if one.disruptions_allowed > 0 => {}
            [one] => return Err(BlockReason::Pdb { pod: p.pod.id(), pdb: one.id() }),
            many => {
                return Err(BlockReason::MultiplePdbs {
                    pod: p.pod.id(),
                    pdbs: many.iter().map(|b| b.id()).collect(),
                })
            }
        }
    }
    Ok(())
}

pub fn pool_of<'a>(snapshot: &'a Snapshot, node: &ManagedNode) -> Option<&'a PoolPolicy> {
    snapshot.nodepools.iter().find(|p| p.name == node.nodepool)
}

/// Upstream's `Consolidatable` condition: consolidateAfter has elapsed since the later of the last pod
/// event and initialization.
pub fn consolidatable(pool: &PoolPolicy, node: &ManagedNode, now: Timestamp) -> Result<(), BlockReason> {
    let after = match pool.consolidate_after {
        NillableDuration::Never => {
            return Err(BlockReason::ConsolidationDisabled { nodepool: pool.name.clone() })
        }
        NillableDuration::After(d) => d,
    };
    let since = node.last_pod_event.max(node.initialized).unwrap_or(node.created);
    let elapsed = now.as_second().saturating_sub(since.as_second()).max(0) as u64;
    match after.as_secs().checked_sub(elapsed) {
        Some(left) if left > 0 => Err(BlockReason::ConsolidateAfter { left: Duration::from_secs(left) }),
        _ => Ok(()),
    }
}

/// Whether `node` is a candidate for `reason` (the base rules included).
pub fn check(
    snapshot: &Snapshot,
    node: &ManagedNode,
    reason: DisruptionReason,
    now: Timestamp,
) -> Result<(), BlockReason> {
    base_check(snapshot, node, now)?;
    let pool = pool_of(snapshot, node).expect("base_check found the pool");
    match reason {
        DisruptionReason::Drifted => {
            if node.drifted.is_none() {
                return Err(BlockReason::Utilized);
            }
            Ok(())
        }
        // Upstream's emptiness and consolidation skip static pools (`OwnedByStaticNodePool`).
        DisruptionReason::Empty | DisruptionReason::Underutilized if pool.replicas.is_some() => {
            Err(BlockReason::StaticNodePool { nodepool: pool.name.clone() })
        }
        DisruptionReason::Empty => {
            if !is_empty(node) {
                return Err(BlockReason::Utilized);
            }
            consolidatable(pool, node, now)
        }
        DisruptionReason::Underutilized => {
            if is_empty(node) {
                // Emptiness owns empty nodes.
                return consolidatable(pool, node, now).and(Err(BlockReason::Utilized));
            }
            consolidatable(pool, node, now)?;
            if pool.consolidation_policy == ConsolidationPolicy::WhenEmpty {
                return Err(BlockReason::WhenEmptyPolicy { nodepool: pool.name.clone() });
            }
            Ok(())
        }
    }
}

/// Whether nodes of this pool may receive moved pods in a consolidation simulation: upstream keeps
/// pods off nodes inside their consolidateAfter window and off uninitialized nodes, so that a move
/// does not feed a node that is itself about to be judged.
pub fn destination_open(pool: Option<&PoolPolicy>, node: &ManagedNode, now: Timestamp) -> bool {
    if node.initialized.is_none() || node.node.in_flight {
        return false;
    }
    match pool {
        Some(pool) => !matches!(consolidatable(pool, node, now), Err(BlockReason::ConsolidateAfter { .. })),
        None => true,
    }
}
