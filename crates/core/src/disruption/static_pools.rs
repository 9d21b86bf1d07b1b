//! Static NodePools (`spec.replicas`, upstream core v1.14 `pkg/controllers/static/provisioning`,
//! `static/deprovisioning` and `disruption/staticdrift.go`): a fixed node count, whatever the pods ask.
//!
//! Per static pool, counting its NodeClaims in the snapshot:
//! - *active*: neither being deleted nor being replaced by a disruption command (in-flight claims
//!   count: they are nodes on their way);
//! - *pending disruption*: being replaced (tainted `karpenter.sh/disrupted`, not deleted yet);
//! - *deleting*: being deleted.
//!
//! Scale up: while `active + pending < replicas`, launch `replicas − active` claims, no more than
//! `limits.nodes − (active + pending + deleting)` (a replaced node counts until its replacement is up, so
//! a drift never launches a second one). Scale down: while `active > replicas`, remove the excess:
//! claims that have not launched first, then empty nodes without an active do-not-disrupt pod, then
//! the cheapest to disrupt (reschedule cost × lifetime left), nodes with a do-not-disrupt pod last.
//! Budgets do not apply to a change of `replicas`, as upstream.
//!
//! Drift of a static node is replaced by a fresh claim of the pool ([`static_claim`]), one per
//! drifted node within the Drifted budget, and only while no scale-down is pending.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use crate::apis::duration::NillableDuration;
use crate::model::node_labels;
use crate::model::resources::NODES;
use crate::scheduling::{static_claim, Cancelled, ExistingNode, NewNodeClaim, ShouldCancel};

use super::cost::{is_empty, node_disruption_cost};
use super::simulate::{outcome, Outcome, Replace};
use super::snapshot::{ManagedNode, PoolPolicy, Snapshot, UnmanagedNode};

/// What a static pool needs now.
#[derive(Clone, Debug, PartialEq)]
pub enum StaticAction {
    /// Launch these claims (scale up, or replace nodes that went away).
    Launch { nodepool: String, claims: Vec<NewNodeClaim> },
    /// Delete these NodeClaims (scale down); termination drains their nodes.
    Remove { nodepool: String, nodeclaims: Vec<String> },
    /// The pool is short of nodes but cannot launch: its node limit, or no size it may launch.
    Blocked { nodepool: String, reason: String },
}

/// The NodeClaim counts of one static pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub active: usize,
    pub pending_disruption: usize,
    pub deleting: usize,
}

impl Counts {
    pub fn of(snapshot: &Snapshot, pool: &str) -> Counts {
        let mut counts = Counts::default();
        for n in snapshot.nodes.iter().filter(|n| n.nodepool == pool) {
            counts.add(n.deleting, n.marked_for_deletion);
        }
        counts
    }

    /// Counts one more claim: deleting, else pending disruption when marked for deletion, else active.
    pub fn add(&mut self, deleting: bool, marked_for_deletion: bool) {
        if deleting {
            self.deleting += 1;
        } else if marked_for_deletion {
            self.pending_disruption += 1;
        } else {
            self.active += 1;
        }
    }

    /// Whether a pool of `replicas` with these counts holds its count: [`decide`] neither launches nor
    /// removes anything for it.
    pub fn holds(&self, replicas: i64) -> bool {
        let replicas = replicas.max(0) as usize;
        self.active <= replicas && self.active + self.pending_disruption >= replicas
    }

    /// How many more claims `limits.nodes` allows.
    pub fn room(&self, pool: &PoolPolicy) -> usize {
        let total = self.active + self.pending_disruption + self.deleting;
        node_limit(pool).map_or(usize::MAX, |limit| limit.saturating_sub(total))
    }
}

/// `limits.nodes`, when set.
pub fn node_limit(pool: &PoolPolicy) -> Option<usize> {
    let limits = pool.limits.as_ref()?;
    // Limits other than nodes are refused on static pools by the CRD.
    limits.iter().any(|(k, _)| k == NODES).then(|| limits.get(NODES).max(0) as usize)
}

/// What every static pool needs at `now`; pools that hold their count need nothing.
pub fn decide(snapshot: &Snapshot, now: Timestamp, max_options: usize) -> Vec<StaticAction> {
    let mut out = vec![];
    for pool in &snapshot.nodepools {
        let Some(replicas) = pool.replicas else { continue };
        let counts = Counts::of(snapshot, &pool.name);
        if counts.holds(replicas) {
            continue;
        }
        let replicas = replicas.max(0) as usize;
        if counts.active > replicas {
            let nodeclaims =
                removal_order(snapshot, pool, now).into_iter().take(counts.active - replicas).collect();
            out.push(StaticAction::Remove { nodepool: pool.name.clone(), nodeclaims });
            continue;
        }
        // Not Ready, or its class is missing: upstream waits for the pool to be Ready.
        let Some(input) = pool.solver.as_ref() else { continue };
        let wanted = replicas - counts.active;
        let granted = wanted.min(counts.room(pool));
        if granted == 0 {
            out.push(StaticAction::Blocked {
                nodepool: pool.name.clone(),
                reason: format!(
                    "limits.nodes is reached: {} of {replicas} replicas run",
                    counts.active + counts.pending_disruption
                ),
            });
            continue;
        }
        match (1..=granted)
            .map(|n| static_claim(input, &snapshot.daemonsets, n, max_options))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(claims) => out.push(StaticAction::Launch { nodepool: pool.name.clone(), claims }),
            Err(reason) => out.push(StaticAction::Blocked { nodepool: pool.name.clone(), reason }),
        }
    }
    out
}

/// The pool's active claims in the order a scale-down removes them.
fn removal_order(snapshot: &Snapshot, pool: &PoolPolicy, now: Timestamp) -> Vec<String> {
    let mut ranked: Vec<((u8, f64, &str), &ManagedNode)> = snapshot
        .nodes
        .iter()
        .filter(|n| n.nodepool == pool.name && !n.marked_for_deletion)
        .map(|n| {
            let protected =
                n.do_not_disrupt || n.pods.iter().any(|p| p.do_not_disrupt.active(p.started, now).is_some());
            let tier = if n.node.in_flight {
                0
            } else if is_empty(n) && !protected {
                1
            } else if !protected {
                2
            } else {
                3
            };
            ((tier, node_disruption_cost(n) * lifetime_remaining(pool, n, now), n.nodeclaim.as_str()), n)
        })
        .collect();
    ranked
        .sort_by(|(a, _), (b, _)| a.0.cmp(&b.0).then_with(|| a.1.total_cmp(&b.1)).then_with(|| a.2.cmp(b.2)));
    ranked.into_iter().map(|(_, n)| n.nodeclaim.clone()).collect()
}

/// The share of its lifetime a node has left, in [0, 1]; 1 when it never expires (upstream
/// `pkg/utils/disruption` `LifetimeRemaining`).
fn lifetime_remaining(pool: &PoolPolicy, node: &ManagedNode, now: Timestamp) -> f64 {
    match pool.expire_after {
        NillableDuration::Never => 1.0,
        NillableDuration::After(d) if d.is_zero() => 0.0,
        NillableDuration::After(d) => {
            let age = now.as_second().saturating_sub(node.created.as_second()).max(0) as f64;
            ((d.as_secs_f64() - age) / d.as_secs_f64()).clamp(0.0, 1.0)
        }
    }
}

/// Removing drifted static node `i` with `claim` launched in its place: the pods that must move go to
/// the claim, to other nodes, or to new NodeClaims of dynamic pools, as a solve places them. The claim
/// is the first replacement; its pods' moves name it.
pub fn drift_outcome(
    snapshot: &Snapshot,
    i: usize,
    claim: &NewNodeClaim,
    now: Timestamp,
    cancel: &dyn ShouldCancel,
) -> Result<Outcome, Cancelled> {
    let mut with = snapshot.clone();
    with.unmanaged.push(UnmanagedNode {
        node: Arc::new(ExistingNode {
            name: claim.name.clone(),
            labels: node_labels(&claim.labels),
            taints: claim.taints.clone(),
            allocatable: claim.allocatable.saturating_sub(&claim.daemon_overhead),
            nodepool: Some(claim.nodepool.clone()),
            in_flight: true,
            startup_taints: claim.startup_taints.clone(),
        }),
        pods: vec![],
    });
    let mut result = outcome(&with, &BTreeSet::from([i]), now, Replace::Any, cancel)?;
    result.replacements.insert(0, claim.clone());
    Ok(result)
}

/// The drifted static nodes that may be replaced now and the claim each gets, by pool: none while a
/// scale-down is pending, and no more than `limits.nodes` leaves room for. `candidates` are in the
/// order drift takes them, already within the Drifted budget.
pub fn drift_replacements(
    snapshot: &Snapshot,
    candidates: &[usize],
    max_options: usize,
) -> BTreeMap<usize, Result<NewNodeClaim, String>> {
    let mut room: BTreeMap<&str, usize> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for &i in candidates {
        let node = &snapshot.nodes[i];
        let Some(pool) = snapshot.nodepools.iter().find(|p| p.name == node.nodepool) else { continue };
        let Some(replicas) = pool.replicas else { continue };
        let counts = Counts::of(snapshot, &pool.name);
        if counts.active > replicas.max(0) as usize {
            out.insert(i, Err(format!("NodePool {} is scaling down to {replicas} replicas", pool.name)));
            continue;
        }
        let left = room.entry(pool.name.as_str()).or_insert_with(|| counts.room(pool));
        if *left == 0 {
            out.insert(
                i,
                Err(format!("limits.nodes of NodePool {} leaves no room for a replacement", pool.name)),
            );
            continue;
        }
        let Some(input) = pool.solver.as_ref() else {
            out.insert(
                i,
                Err(format!("NodePool {} cannot launch (not Ready, or no AKSNodeClass)", pool.name)),
            );
            continue;
        };
        *left -= 1;
        out.insert(i, static_claim(input, &snapshot.daemonsets, 1, max_options));
    }
    out
}
