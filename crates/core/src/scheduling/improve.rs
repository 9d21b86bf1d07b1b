//! Local search after packing: merge pairs of new nodes into one cheaper node.
//!
//! Greedy packing leaves partly filled nodes at the tail of each class (the last few pods of a
//! Deployment, the last zone of a spread). Two such nodes can often share one node of another size
//! for less than the two cost together; this pass finds those merges among the least-used new nodes
//! until none pays off. Right-sizing a single node to the cheapest size that still holds its pods is
//! done when NodeClaims are written ([`crate::scheduling::claims`]).

use crate::model::resources::NODES;
use crate::scheduling::cancel::Cancelled;
use crate::scheduling::node_fit;
use crate::scheduling::working::Solver;

/// How many of the least-used new nodes the pairwise search looks at (it is quadratic).
const MERGE_CANDIDATES: usize = 48;

/// Merges new nodes while that lowers the total price.
pub(crate) fn merge_nodes(solver: &mut Solver) -> Result<(), Cancelled> {
    loop {
        solver.check_cancel()?;
        let candidates = least_used_new_slots(solver);
        let mut best: Option<(f64, usize, usize, usize, u32)> = None; // (saving, i, j, template, mask)
        for (a, &i) in candidates.iter().enumerate() {
            for &j in &candidates[a + 1..] {
                if let Some((t, mask, saving)) = merge_option(solver, i, j) {
                    if best.is_none_or(|b| saving > b.0) {
                        best = Some((saving, i, j, t, mask));
                    }
                }
            }
        }
        let Some((_, i, j, t, mask)) = best else { return Ok(()) };
        solver.merge_slots(i, j, t, mask);
    }
}

/// New slots with pods, least used (by the largest share of any resource) first.
fn least_used_new_slots(solver: &Solver) -> Vec<usize> {
    let mut slots: Vec<(f64, usize)> = solver
        .slots()
        .iter()
        .enumerate()
        .filter(|(_, s)| s.existing().is_none() && s.template().is_some() && !s.classes().is_empty())
        .map(|(i, s)| {
            let capacity = &solver.templates()[s.template().expect("filtered")].capacity;
            let used = s
                .state()
                .free
                .iter()
                .zip(capacity)
                .filter(|(_, c)| **c > 0)
                .map(|(f, c)| 1.0 - *f as f64 / *c as f64)
                .fold(0.0, f64::max);
            (used, i)
        })
        .collect();
    slots.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    slots.into_iter().take(MERGE_CANDIDATES).map(|(_, i)| i).collect()
}

/// The cheapest template that holds both slots' pods, if it costs less than the two together.
fn merge_option(solver: &Solver, i: usize, j: usize) -> Option<(usize, u32, f64)> {
    let (ti, tj) = (solver.slots()[i].template()?, solver.slots()[j].template()?);
    let tier = solver.templates()[ti].tier;
    if solver.templates()[tj].tier != tier {
        return None;
    }
    let current = solver.templates()[ti].price(solver.slots()[i].mask())
        + solver.templates()[tj].price(solver.slots()[j].mask());
    let members_i: Vec<usize> = solver.slots()[i].classes().iter().map(|(c, _)| *c).collect();
    let members_j: Vec<usize> = solver.slots()[j].classes().iter().map(|(c, _)| *c).collect();
    for &a in &members_i {
        for &b in &members_j {
            if a != b && !solver.pair_ok(a, b) {
                return None;
            }
        }
    }
    let mut classes = solver.slots()[i].classes().to_vec();
    for &(c, n) in solver.slots()[j].classes() {
        match classes.iter_mut().find(|(k, _)| *k == c) {
            Some(e) => e.1 += n,
            None => classes.push((c, n)),
        }
    }
    if !node_fit::rules_allow(solver, &classes) {
        return None;
    }
    let demand = node_fit::total_demand(solver, &classes);
    let mut best: Option<(usize, u32, f64)> = None;
    for t in 0..solver.templates().len() {
        let tpl = &solver.templates()[t];
        if tpl.tier != tier || !within_limits(solver, t, ti, tj) {
            continue;
        }
        let mask = node_fit::joint_mask(solver, &classes, t);
        if mask == 0 {
            continue;
        }
        let price = tpl.price(mask);
        if price >= current - 1e-9 || best.is_some_and(|b| price >= b.2) {
            continue;
        }
        if crate::scheduling::shapes::fits(&demand, &tpl.capacity) {
            best = Some((t, mask, price));
        }
    }
    best.map(|(t, mask, price)| (t, mask, current - price))
}

/// A pool with limits may not grow: the merged node's capacity must not exceed the two it replaces.
fn within_limits(solver: &Solver, t: usize, ti: usize, tj: usize) -> bool {
    let pool = solver.templates()[t].pool;
    let Some(limits) = &solver.input().nodepools[pool].remaining else { return true };
    let capacity = |x: usize| {
        let tpl = &solver.templates()[x];
        &solver.input().nodepools[tpl.pool].instance_types[tpl.instance_type].capacity
    };
    let same_pool = solver.templates()[ti].pool == pool && solver.templates()[tj].pool == pool;
    same_pool
        && limits
            .iter()
            .filter(|(name, _)| *name != NODES)
            .all(|(name, _)| capacity(t).get(name) <= capacity(ti).get(name) + capacity(tj).get(name))
}
