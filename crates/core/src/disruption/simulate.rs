//! "Where would these pods go?": the solver's input for a cluster without some nodes, and the
//! outcome of one solve read as a disruption (upstream `helpers.go` `SimulateScheduling`). Every
//! question of that kind in this module goes through [`crate::scheduling::solve`]; there is no
//! second scheduler.
//!
//! The input: the pending pods, the reschedulable pods of the removed nodes and of nodes already being
//! deleted, placed on the remaining nodes or on new NodeClaims from the pools. Nodes that may not
//! receive moved pods (uninitialized, inside their consolidateAfter window) stay in the input with no
//! room to spare, so the pods on them still count for topology.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use crate::model::resources::{Resources, NODES};
use crate::scheduling::{
    place_with_cancel, placement_with_base, Cancelled, ExistingNode, NewNodeClaim, Plan, PodId, RunningBase,
    ShouldCancel, Sketch, SolveInput,
};

use super::candidates::{destination_open, pool_of};
use super::command::Move;
use super::snapshot::Snapshot;

/// Which capacity types replacements may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replace {
    /// Any offering the pools allow.
    Any,
    /// Every node is spot and spot-to-spot consolidation is on: the solve sees every offering; a
    /// replacement the pool and pods would let run on spot is held to spot, one they keep off spot
    /// is an ordinary replacement ([`super::replacement::spot_rule_broken`]).
    SpotOnly,
    /// Every node is spot and spot-to-spot consolidation is off: no new NodeClaims at all, the pods
    /// must fit on what exists. When they do not, the move is solved again as [`Replace::OffSpot`]
    /// ([`solve_move`]).
    Never,
    /// The second solve of a [`Replace::Never`] move: every offering, and only replacements the pool
    /// and pods keep off spot may open (upstream `computeConsolidation` takes the spot-to-spot path,
    /// refused while the gate is off, only when the replacement's capacity-type requirement has spot).
    OffSpot,
}

/// Solves a move under `replace` with `solve`: a [`Replace::Never`] move whose pods do not all fit
/// on what exists is solved again as [`Replace::OffSpot`]. Returns the mode of the outcome. `solve`
/// may answer a move with a refusal (`E`) instead of an outcome, except under [`Replace::Never`],
/// whose stranded pods decide the second solve.
pub fn solve_move<E>(
    replace: Replace,
    mut solve: impl FnMut(Replace) -> Result<Result<Outcome, E>, Cancelled>,
) -> Result<(Replace, Result<Outcome, E>), Cancelled> {
    let solved = solve(replace)?;
    if replace == Replace::Never && solved.as_ref().is_ok_and(|outcome| !outcome.stranded.is_empty()) {
        return Ok((Replace::OffSpot, solve(Replace::OffSpot)?));
    }
    Ok((replace, solved))
}

/// What removing a set of nodes would take.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// NodeClaims that receive at least one moved pod. Claims that only serve pods already pending
    /// are provisioning's business and not part of the command.
    pub replacements: Vec<NewNodeClaim>,
    pub moves: Vec<Move>,
    /// Moved pods the solve could not place, with its reason.
    pub stranded: Vec<(PodId, String)>,
}

impl Outcome {
    pub fn replacement_price(&self) -> f64 {
        self.replacements.iter().map(|c| c.price_per_hour).sum()
    }
}

/// The solver input for the cluster without `removed` (indices into `snapshot.nodes`).
pub fn input_without(
    snapshot: &Snapshot,
    removed: &BTreeSet<usize>,
    now: Timestamp,
    replace: Replace,
) -> SolveInput {
    input_of(snapshot, removed, now, replace, Running::Listed)
}

/// Where a solve's input finds the running pods.
#[derive(Clone, Copy, PartialEq)]
enum Running {
    /// In `SolveInput::running`.
    Listed,
    /// In the pass's [`RunningBase`]: `SolveInput::running` stays empty.
    InBase,
}

/// The solves of one pass over `snapshot` at `now`, which share the running pods of every node and
/// every pod a solve may place (the pending pods and those of every node) in one [`RunningBase`].
pub struct PassSolves<'a> {
    snapshot: &'a Snapshot,
    base: RunningBase,
    now: Timestamp,
}

impl<'a> PassSolves<'a> {
    pub fn new(snapshot: &'a Snapshot, now: Timestamp) -> Self {
        let base = RunningBase::new(&input_without(snapshot, &BTreeSet::new(), now, Replace::Any));
        PassSolves { snapshot, base, now }
    }

    /// [`outcome`] with the running pods read from the pass's base instead of from a copy of them in
    /// each solve's input; or the refusal `refuse` makes of the move's [`MoveSketch`] before the
    /// replacements' NodeClaims are written.
    pub fn outcome_unless<E>(
        &self,
        removed: &BTreeSet<usize>,
        replace: Replace,
        cancel: &dyn ShouldCancel,
        refuse: impl FnOnce(&MoveSketch) -> Option<E>,
    ) -> Result<Result<Outcome, E>, Cancelled> {
        let input = input_of(self.snapshot, removed, self.now, replace, Running::InBase);
        let placement = placement_with_base(&input, &self.base, cancel)?;
        let moved = moved_pods(self.snapshot, removed);
        if let Some(sketch) = placement.sketch() {
            if let Some(refusal) = refuse(&MoveSketch::read(&sketch, &moved)) {
                return Ok(Err(refusal));
            }
        }
        Ok(Ok(read_outcome(&moved, placement.into_plan())))
    }
}

fn input_of(
    snapshot: &Snapshot,
    removed: &BTreeSet<usize>,
    now: Timestamp,
    replace: Replace,
    listed: Running,
) -> SolveInput {
    let listed = listed == Running::Listed;
    let mut pods = snapshot.pending.clone();
    let mut running = vec![];
    let mut nodes: Vec<Arc<ExistingNode>> = vec![];
    for (i, n) in snapshot.nodes.iter().enumerate() {
        let leaving = removed.contains(&i) || n.marked_for_deletion;
        if leaving {
            pods.extend(n.pods.iter().filter(|p| p.reschedulable()).map(|p| p.pod.clone()));
            continue;
        }
        if destination_open(pool_of(snapshot, n), n, now) {
            nodes.push(n.node.clone());
        } else {
            let allocatable = used(n.pods.iter().map(|p| &p.pod.requests));
            nodes.push(Arc::new(ExistingNode { allocatable, ..(*n.node).clone() }));
        }
        if listed {
            running.extend(n.pods.iter().map(|p| p.pod.clone()));
        }
    }
    for u in &snapshot.unmanaged {
        nodes.push(u.node.clone());
        if listed {
            running.extend(u.pods.iter().cloned());
        }
    }
    let nodepools = match replace {
        // The pools stay, at a limit of no more nodes: their zones and capacity types remain
        // eligible domains of a topology spread (a zone left without nodes still counts as 0, as
        // upstream's scheduler takes domains from the NodePools), but no NodeClaim can open.
        Replace::Never => snapshot
            .nodepools
            .iter()
            .filter_map(|p| p.launchable().cloned())
            .map(|mut pool| {
                pool.remaining = Some(Resources::new().with(NODES, 0));
                pool
            })
            .collect(),
        // Moves of spot nodes solve with every offering too, so the zones and capacity types only
        // on-demand reaches stay domains of a topology spread (upstream's simulation sees every
        // offering); the replacements are held to the spot rules afterwards (`super::replacement`).
        Replace::Any | Replace::SpotOnly | Replace::OffSpot => {
            snapshot.nodepools.iter().filter_map(|p| p.launchable().cloned()).collect()
        }
    };
    SolveInput {
        pods,
        running,
        nodes,
        nodepools,
        daemonsets: snapshot.daemonsets.clone(),
        options: snapshot.solve_options.clone(),
    }
}

/// The sum of `requests`.
pub(super) fn used<'a>(requests: impl Iterator<Item = &'a Resources>) -> Resources {
    let mut total = Resources::new();
    for r in requests {
        total.add_assign(r);
    }
    total
}

/// Solves the cluster without `removed` and reads the plan as a disruption. The plan carries no lower
/// bound (only where the pods go matters here).
pub fn outcome(
    snapshot: &Snapshot,
    removed: &BTreeSet<usize>,
    now: Timestamp,
    replace: Replace,
    cancel: &dyn ShouldCancel,
) -> Result<Outcome, Cancelled> {
    let input = input_without(snapshot, removed, now, replace);
    let plan = place_with_cancel(&input, cancel)?;
    Ok(read_outcome(&moved_pods(snapshot, removed), plan))
}

/// The reschedulable pods of `removed`: those a move of them places.
fn moved_pods(snapshot: &Snapshot, removed: &BTreeSet<usize>) -> HashSet<PodId> {
    removed
        .iter()
        .flat_map(|&i| snapshot.nodes[i].pods.iter().filter(|p| p.reschedulable()).map(|p| p.pod.id()))
        .collect()
}

/// What a move's [`Outcome`] will say of its stranded pods and replacements, read from the solve's
/// placement before the NodeClaims are written.
#[derive(Clone, Debug, PartialEq)]
pub struct MoveSketch<'p> {
    /// The outcome's first stranded pod, with the solve's reason.
    pub first_stranded: Option<(&'p str, &'p str)>,
    /// The `price_per_hour` of each of the outcome's replacements, in order.
    pub replacement_prices: Vec<f64>,
}

impl<'p> MoveSketch<'p> {
    fn read(sketch: &'p Sketch<'_>, moved: &HashSet<PodId>) -> MoveSketch<'p> {
        let first_stranded = sketch
            .unschedulable
            .iter()
            .find(|u| moved.contains(&u.pod))
            .map(|u| (u.pod.as_str(), u.reason.as_str()));
        let replacement_prices = sketch
            .new_nodes
            .iter()
            .filter(|n| n.pods.iter().any(|p| moved.contains(p)))
            .map(|n| n.price_per_hour)
            .collect();
        MoveSketch { first_stranded, replacement_prices }
    }

    /// What the outcome's [`Outcome::replacement_price`] will be.
    pub fn replacement_price(&self) -> f64 {
        self.replacement_prices.iter().sum()
    }
}

/// The plan of a solve as the moves and replacements of the `moved` pods.
fn read_outcome(moved: &HashSet<PodId>, plan: Plan) -> Outcome {
    let mut moves = vec![];
    for (node, placed) in plan.existing {
        moves.extend(
            placed.into_iter().filter(|p| moved.contains(p)).map(|pod| Move { pod, to: node.clone() }),
        );
    }
    let mut replacements = vec![];
    for claim in plan.nodeclaims {
        let before = moves.len();
        moves.extend(
            claim
                .pods
                .iter()
                .filter(|p| moved.contains(*p))
                .map(|p| Move { pod: p.clone(), to: claim.name.clone() }),
        );
        if moves.len() > before {
            replacements.push(claim);
        }
    }
    moves.sort();
    let stranded: Vec<(PodId, String)> = plan
        .unschedulable
        .into_iter()
        .filter(|u| moved.contains(&u.pod))
        .map(|u| (u.pod, u.reason))
        .collect();
    Outcome { replacements, moves, stranded }
}
