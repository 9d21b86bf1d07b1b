//! One disruption pass: the methods in upstream's order (`pkg/controllers/disruption/controller.go`),
//! emptiness → drift → consolidation (multi-node, then single-node), stopping at the first that finds
//! something to do, each under its NodePool budgets; and for every node no command takes, why not.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;

use crate::apis::nodepool::DisruptionReason;
use crate::scheduling::{solve_with_cancel, Cancelled, Plan, ShouldCancel, SolveInput};

use super::budgets::{allowances, within};
use super::candidates::{base_check, check};
use super::command::{BlockReason, Blocked, Command, Decisions, Method};
use super::consolidation::consolidate;
use super::cost::{is_empty, node_disruption_cost};
use super::simulate::{outcome, Outcome, Replace};
use super::snapshot::Snapshot;
use super::static_pools;
use super::Options;

/// Decides what to disrupt at `now`. Pure and deterministic.
pub fn decide(snapshot: &Snapshot, now: Timestamp, options: &Options) -> Decisions {
    never_cancelled(decide_with_cancel(snapshot, now, options, &|| false))
}

/// The outcome of a computation whose cancel hook never says so.
fn never_cancelled<T>(outcome: Result<T, Cancelled>) -> T {
    match outcome {
        Ok(value) => value,
        Err(Cancelled) => unreachable!("a hook that never cancels"),
    }
}

/// [`decide`], stopped at the first safe point of a solve where `cancel` says so.
pub fn decide_with_cancel(
    snapshot: &Snapshot,
    now: Timestamp,
    options: &Options,
    cancel: &dyn ShouldCancel,
) -> Result<Decisions, Cancelled> {
    let mut blocked: BTreeMap<usize, BlockReason> = BTreeMap::new();
    let mut eligible: Vec<usize> = vec![];
    for (i, node) in snapshot.nodes.iter().enumerate() {
        match base_check(snapshot, node, now) {
            Ok(()) => eligible.push(i),
            Err(reason) => {
                blocked.insert(i, reason);
            }
        }
    }
    let mut commands = emptiness(snapshot, &eligible, now, &mut blocked);
    if commands.is_empty() {
        commands = drift(snapshot, &eligible, now, &mut blocked, cancel)?;
    }
    if commands.is_empty() {
        commands = consolidation(snapshot, &eligible, now, options, &mut blocked, cancel)?;
    }
    let taken: BTreeSet<&str> =
        commands.iter().flat_map(|c| c.candidates.iter().map(String::as_str)).collect();
    let blocked = snapshot
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| !taken.contains(n.node.name.as_str()))
        .map(|(i, n)| Blocked {
            node: n.node.name.clone(),
            reason: blocked.remove(&i).unwrap_or(if commands.is_empty() {
                BlockReason::Utilized
            } else {
                BlockReason::Deferred
            }),
        })
        .collect();
    Ok(Decisions {
        commands,
        blocked,
        cluster_price_per_hour: snapshot.nodes.iter().fold(0.0, |sum, n| sum + n.price_per_hour),
    })
}

/// The solver's lower bound for placing every pending pod and every pod of the managed nodes on fresh
/// capacity, with the unmanaged nodes as they are; 0 for a cluster of no managed node.
pub fn repack_lower_bound(snapshot: &Snapshot) -> f64 {
    never_cancelled(repack_lower_bound_with_cancel(snapshot, &|| false))
}

/// [`repack_lower_bound`], stopped at the first safe point of its solve where `cancel` says so.
pub fn repack_lower_bound_with_cancel(
    snapshot: &Snapshot,
    cancel: &dyn ShouldCancel,
) -> Result<f64, Cancelled> {
    if snapshot.nodes.is_empty() {
        return Ok(0.0);
    }
    crate::scheduling::lower_bound_with_cancel(&repack_input(snapshot), cancel)
}

/// The solver's plan for placing every pending pod and every pod of the managed nodes on fresh
/// capacity, with the unmanaged nodes as they are: what a from-scratch repack would cost
/// (`price_per_hour`) beside what none can beat (`lower_bound_per_hour`).
pub fn repack(snapshot: &Snapshot) -> Plan {
    never_cancelled(repack_with_cancel(snapshot, &|| false))
}

/// [`repack`], stopped at the first safe point of its solve where `cancel` says so.
pub fn repack_with_cancel(snapshot: &Snapshot, cancel: &dyn ShouldCancel) -> Result<Plan, Cancelled> {
    solve_with_cancel(&repack_input(snapshot), cancel)
}

/// The solve of a from-scratch repack: every pending pod and every reschedulable pod of the managed
/// nodes, onto the unmanaged nodes as they are and fresh capacity of the launchable pools.
fn repack_input(snapshot: &Snapshot) -> SolveInput {
    let mut pods = snapshot.pending.clone();
    for n in &snapshot.nodes {
        pods.extend(n.pods.iter().filter(|p| p.reschedulable()).map(|p| p.pod.clone()));
    }
    SolveInput {
        pods,
        running: snapshot.unmanaged.iter().flat_map(|u| u.pods.iter().cloned()).collect(),
        nodes: snapshot.unmanaged.iter().map(|u| u.node.clone()).collect(),
        nodepools: snapshot.nodepools.iter().filter_map(|p| p.launchable().cloned()).collect(),
        daemonsets: snapshot.daemonsets.clone(),
        options: snapshot.solve_options.clone(),
    }
}

/// Takes candidates in order while their pool's budget allows; the rest are blocked by the budget.
fn within_budgets(
    snapshot: &Snapshot,
    ordered: Vec<usize>,
    reason: DisruptionReason,
    now: Timestamp,
    blocked: &mut BTreeMap<usize, BlockReason>,
) -> Vec<usize> {
    let (taken, refused) = within(snapshot, &ordered, &allowances(snapshot, reason, now), reason);
    blocked.extend(refused);
    taken
}

/// Empty nodes within budget, removed together without replacement (upstream `emptiness.go`).
fn emptiness(
    snapshot: &Snapshot,
    eligible: &[usize],
    now: Timestamp,
    blocked: &mut BTreeMap<usize, BlockReason>,
) -> Vec<Command> {
    let mut ordered = vec![];
    for &i in eligible.iter().filter(|&&i| is_empty(&snapshot.nodes[i])) {
        match check(snapshot, &snapshot.nodes[i], DisruptionReason::Empty, now) {
            Ok(()) => ordered.push(i),
            Err(reason) => {
                blocked.insert(i, reason);
            }
        }
    }
    // The most expensive first, so a tight budget removes the most cost.
    ordered.sort_by(|&a, &b| {
        let (x, y) = (&snapshot.nodes[a], &snapshot.nodes[b]);
        y.price_per_hour.total_cmp(&x.price_per_hour).then_with(|| x.node.name.cmp(&y.node.name))
    });
    let chosen = within_budgets(snapshot, ordered, DisruptionReason::Empty, now, blocked);
    if chosen.is_empty() {
        return vec![];
    }
    let mut candidates: Vec<String> = chosen.iter().map(|&i| snapshot.nodes[i].node.name.clone()).collect();
    candidates.sort();
    let savings: f64 = chosen.iter().map(|&i| snapshot.nodes[i].price_per_hour).sum();
    let disruption: f64 = chosen.iter().map(|&i| node_disruption_cost(&snapshot.nodes[i])).sum();
    vec![Command {
        reason: DisruptionReason::Empty,
        method: Method::Emptiness,
        explanation: format!("delete {} empty node(s), saving ${savings:.4}/h", candidates.len()),
        candidates,
        replacements: vec![],
        savings_per_hour: savings,
        disruption_cost: disruption,
        moves: vec![],
    }]
}

/// One drifted node, empty ones first and then the longest drifted, replaced before it is removed
/// (upstream `drift.go`); its replacements may be several NodeClaims.
fn drift(
    snapshot: &Snapshot,
    eligible: &[usize],
    now: Timestamp,
    blocked: &mut BTreeMap<usize, BlockReason>,
    cancel: &dyn ShouldCancel,
) -> Result<Vec<Command>, Cancelled> {
    let mut ordered: Vec<usize> = eligible
        .iter()
        .copied()
        .filter(|&i| check(snapshot, &snapshot.nodes[i], DisruptionReason::Drifted, now).is_ok())
        .collect();
    ordered.sort_by_key(|&i| {
        let n = &snapshot.nodes[i];
        (!is_empty(n), n.drifted.as_ref().map(|d| d.since), n.node.name.clone())
    });
    let within = within_budgets(snapshot, ordered, DisruptionReason::Drifted, now, blocked);
    // A static pool's drifted node gets a fresh claim of its pool, not a repack of its pods.
    let static_replacements =
        static_pools::drift_replacements(snapshot, &within, snapshot.solve_options.max_instance_type_options);
    for (k, &i) in within.iter().enumerate() {
        let (result, static_pool) = match static_replacements.get(&i) {
            Some(Ok(claim)) => (static_pools::drift_outcome(snapshot, i, claim, now, cancel)?, true),
            Some(Err(detail)) => {
                blocked.insert(i, BlockReason::CannotReplace { detail: detail.clone() });
                continue;
            }
            None => {
                let removed: BTreeSet<usize> = [i].into();
                (outcome(snapshot, &removed, now, Replace::Any, cancel)?, false)
            }
        };
        if let Some(command) = drift_command(snapshot, i, &within[k + 1..], result, static_pool, blocked) {
            return Ok(vec![command]);
        }
    }
    Ok(vec![])
}

/// The drift command replacing node `i` as `result` plans, the nodes `later` in drift's order deferred;
/// `None`, with `i` blocked, when a pod of it has no place. A node of a static pool is replaced by the
/// NodeClaim of its pool that leads `result`'s replacements.
fn drift_command(
    snapshot: &Snapshot,
    i: usize,
    later: &[usize],
    result: Outcome,
    static_pool: bool,
    blocked: &mut BTreeMap<usize, BlockReason>,
) -> Option<Command> {
    if let Some((pod, why)) = result.stranded.first() {
        blocked
            .insert(i, BlockReason::NoCheaperPlacement { detail: format!("pod {pod} has no place: {why}") });
        return None;
    }
    for &j in later {
        blocked.insert(j, BlockReason::Deferred);
    }
    let node = &snapshot.nodes[i];
    let drift = node.drifted.as_ref().expect("a drift candidate");
    let explanation = if static_pool {
        format!(
            "replace drifted node ({}) of static pool {} with a NodeClaim of the pool",
            drift.reason, node.nodepool
        )
    } else {
        format!("replace drifted node ({}) with {} NodeClaim(s)", drift.reason, result.replacements.len())
    };
    Some(Command {
        reason: DisruptionReason::Drifted,
        method: Method::Drift,
        candidates: vec![node.node.name.clone()],
        explanation,
        savings_per_hour: node.price_per_hour - result.replacement_price(),
        replacements: result.replacements,
        disruption_cost: node_disruption_cost(node),
        moves: result.moves,
    })
}

fn consolidation(
    snapshot: &Snapshot,
    eligible: &[usize],
    now: Timestamp,
    options: &Options,
    blocked: &mut BTreeMap<usize, BlockReason>,
    cancel: &dyn ShouldCancel,
) -> Result<Vec<Command>, Cancelled> {
    let mut ordered = vec![];
    let open: Vec<usize> = eligible.iter().copied().filter(|i| !blocked.contains_key(i)).collect();
    for i in open {
        match check(snapshot, &snapshot.nodes[i], DisruptionReason::Underutilized, now) {
            Ok(()) => ordered.push(i),
            Err(reason) => {
                blocked.insert(i, reason);
            }
        }
    }
    // Each move takes its nodes within the budgets (`consolidate`), so every candidate may be part
    // of one: the budget limits how many nodes a move takes, not which.
    let budgets = allowances(snapshot, DisruptionReason::Underutilized, now);
    let (command, reasons) = consolidate(snapshot, &ordered, &budgets, now, options, cancel)?;
    blocked.extend(reasons);
    Ok(command.into_iter().collect())
}
