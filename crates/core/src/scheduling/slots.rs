//! The nodes a solve fills: existing and in-flight nodes first (free capacity), then new nodes opened
//! from templates — column-generation patterns first, the greedy packer for the rest — within the
//! NodePools' tiers and limits.

use crate::scheduling::anchors;
use crate::scheduling::colgen;
use crate::scheduling::input::tolerates_all;
use crate::scheduling::pack::repeats;
use crate::scheduling::shapes::Rule;
use crate::scheduling::valuation;
use crate::scheduling::working::Solver;

/// How many times column generation is re-run on the pods the previous round left.
const COLUMN_GENERATION_ROUNDS: usize = 6;

/// First fit onto existing and already planned nodes.
pub(crate) fn fill_existing(solver: &mut Solver, order: &[usize], remaining: &mut [u64]) {
    for &c in order {
        for i in 0..solver.slots().len() {
            if remaining[c] == 0 {
                break;
            }
            // Room first: on a cluster at rest most nodes have none, and that check is a few integer
            // comparisons where the node's labels and taints are string comparisons.
            let bootstrap = |s: usize| solver.matching_anywhere(s) == 0;
            let n =
                solver.slots()[i].state().max_addable(&solver.classes()[c].traits, remaining[c], bootstrap);
            if n > 0 && slot_accepts(solver, i, c) {
                solver.commit(i, c, n);
                remaining[c] -= n;
            }
        }
    }
}

fn slot_accepts(solver: &Solver, i: usize, c: usize) -> bool {
    match (solver.slots()[i].existing(), solver.slots()[i].template()) {
        (Some(n), _) => {
            let node = &solver.input().nodes[n];
            let pod = &solver.input().pods[solver.classes()[c].pods[0]];
            let taints = node.taints.iter().filter(|t| !node.startup_taints.contains(t));
            solver.classes()[c].requirements.matches(&node.labels) && tolerates_all(&pod.tolerations, taints)
        }
        (None, Some(t)) => {
            let m = solver.classes()[c].masks[t] & solver.slots()[i].mask();
            if m == 0 {
                return false;
            }
            let members: Vec<usize> = solver.slots()[i].classes().iter().map(|(k, _)| *k).collect();
            if !members.iter().all(|&k| k == c || solver.pair_ok(c, k)) {
                return false;
            }
            true
        }
        _ => false,
    }
}

/// Opens new nodes for what is left, highest-weight pools first. Stops early, leaving pods in
/// `remaining`, when the cancel hook says so; the caller then discards the round.
pub(crate) fn pack_new(
    solver: &mut Solver,
    order: &[usize],
    remaining: &mut [u64],
    values: &[f64],
    resource_prices: &[f64],
) {
    // Whole copies of the column-generation patterns first, re-solving what remains a few times
    // (rounding down, then diving); the greedy packs what is left.
    for _ in 0..COLUMN_GENERATION_ROUNDS {
        if solver.cancel_requested() {
            return;
        }
        let mut opened = 0;
        for (pattern, copies) in colgen::plan(solver, order, remaining) {
            // Limits are checked per copy: the LP does not know them.
            let copies = copies.min(repeats(&pattern, remaining)).min(solver.limit_copies(pattern.template));
            for _ in 0..copies {
                solver.open(&pattern, remaining);
                opened += 1;
            }
        }
        if opened == 0 {
            break;
        }
    }
    // Classes no new node can take (no template, limits reached); their pods stay in `remaining`
    // and are explained by the caller.
    let mut parked = vec![false; solver.classes().len()];
    let mut anchor_index = anchors::AnchorIndex::new(limited_groups(solver, order), order, |c| {
        &solver.classes()[c].traits.demand
    });
    // The head is the first class in `order` with pods left and not parked; neither comes back
    // within the pass (pods are only taken, classes only parked), so the search never restarts.
    let mut next = 0;
    // Whether a class may have run out of pods or been parked since the anchors were last pruned
    // (pruning reads every class; most nodes opened leave every class with pods).
    let mut prune_due = true;
    loop {
        while next < order.len() && (remaining[order[next]] == 0 || parked[order[next]]) {
            next += 1;
        }
        let Some(&head) = order.get(next) else { break };
        if solver.cancel_requested() {
            return;
        }
        let candidates = solver.candidates(head);
        if candidates.is_empty() {
            parked[head] = true;
            prune_due = true;
            continue;
        }
        if prune_due {
            anchor_index.prune(|c| remaining[c] == 0 || parked[c]);
            prune_due = false;
        }
        let anchor = anchor_index
            .next_anchor(remaining, |c| &solver.classes()[c].traits.demand, |a, b| solver.pair_ok(a, b))
            .and_then(|anchor| {
                let candidates = solver.candidates(anchor.head);
                (!candidates.is_empty()).then_some((anchor, candidates))
            });
        // An anchor node is opened once: the next one's share is recomputed from what is left.
        let (pattern, anchored) = solver.with_packer(values, resource_prices.to_vec(), |packer| {
            match anchor.and_then(|(anchor, candidates)| {
                packer.anchor_pattern(&anchor, &candidates, &anchor_index, remaining)
            }) {
                Some(p) => (Some(p), true),
                None => {
                    // Only classes with pods left can join a node; late in a batch most
                    // have none.
                    let waiting: Vec<usize> = order.iter().copied().filter(|&c| remaining[c] > 0).collect();
                    (packer.best_pattern(head, &candidates, &waiting, remaining), false)
                }
            }
        });
        let Some(pattern) = pattern else {
            parked[head] = true;
            prune_due = true;
            continue;
        };
        let mut copies = repeats(&pattern, remaining).min(solver.limit_copies(pattern.template));
        if anchored || pattern.counts.iter().any(|&(c, _)| bootstraps(solver, c)) {
            copies = 1;
        }
        for _ in 0..copies.max(1) {
            solver.open(&pattern, remaining);
        }
        prune_due |= pattern.counts.iter().any(|&(c, _)| remaining[c] == 0);
    }
}

/// The groups of `classes` that count together against one per-node limit (see
/// [`anchors::LimitedGroup`]): per selector, the classes holding a hostname anti-affinity or
/// hostname spread over it that the selector selects, with the smallest of their limits; and each
/// class with host ports alone.
fn limited_groups(solver: &Solver, classes: &[usize]) -> Vec<anchors::LimitedGroup> {
    let mut groups: Vec<anchors::LimitedGroup> = valuation::self_limit_rules(solver, classes)
        .into_iter()
        .map(|rule| anchors::LimitedGroup {
            members: rule.members.iter().map(|&k| classes[k]).collect(),
            per_node: rule.fewest,
        })
        .collect();
    groups.extend(
        classes
            .iter()
            .filter(|&&c| !solver.classes()[c].traits.host_ports.is_empty())
            .map(|&c| anchors::LimitedGroup { members: vec![c], per_node: 1 }),
    );
    groups
}

fn bootstraps(solver: &Solver, c: usize) -> bool {
    solver.classes()[c]
        .traits
        .rules
        .iter()
        .any(|r| matches!(r, Rule::Affinity { selector, .. } if solver.matching_anywhere(*selector) == 0))
}
