//! What the pods of a round are worth: the resource lower bound over a set of the solver's classes
//! (remembered in the working state), the groups of classes that per-node rules limit together (the
//! bound and the anchors both count them), and per-pod values from the bound's duals, by which the
//! packers order and fill.

use std::collections::BTreeMap;

use crate::scheduling::bound::{self, BoundClass};
use crate::scheduling::working::Solver;

/// The bound over `ids` with `counts` pods each.
pub(crate) fn bound_for(solver: &Solver, ids: &[usize], counts: &[u64]) -> bound::Bound {
    let free = existing_free(solver);
    let key = (free.clone(), ids.iter().map(|&c| (c, counts[c])).collect());
    if let Some(bound) = solver.remembered_bound(&key) {
        return bound;
    }
    let bound_classes: Vec<BoundClass> = ids
        .iter()
        .map(|&c| {
            let class = &solver.classes()[c];
            BoundClass {
                demand: &class.traits.demand,
                count: counts[c],
                templates: class.masks.iter().enumerate().filter(|(_, m)| **m != 0).map(|(t, _)| t).collect(),
                per_node: class.per_node_limit,
            }
        })
        .collect();
    let groups = node_count_groups(solver, ids);
    let existing = solver.input().nodes.len() as u64;
    let bound = bound::compute(&bound_classes, &groups, solver.templates(), &free, existing);
    solver.remember_bound(key, bound.clone());
    bound
}

/// The classes of `ids` (as positions in `ids`) that share a hostname anti-affinity or hostname
/// spread over a selector selecting each of them: per rule, at most the largest limit among the
/// members of their pods share a node (a member adding itself to a node checks its own limit).
fn node_count_groups(solver: &Solver, ids: &[usize]) -> Vec<bound::NodeCountGroup> {
    self_limit_rules(solver, ids)
        .into_iter()
        .filter(|rule| rule.members.len() > 1)
        .map(|rule| bound::NodeCountGroup { members: rule.members, per_node: rule.most })
        .collect()
}

/// Free capacity summed over existing nodes before this solve placed anything.
fn existing_free(solver: &Solver) -> Vec<i64> {
    let mut free = vec![0i64; solver.dims().len()];
    for slot in solver.slots().iter().filter(|s| s.existing().is_some()) {
        let mut f = slot.state().free.clone();
        for &(c, n) in slot.classes() {
            for (x, d) in f.iter_mut().zip(&solver.classes()[c].traits.demand) {
                *x += d * n as i64;
            }
        }
        for (acc, x) in free.iter_mut().zip(f) {
            *acc += x.max(0);
        }
    }
    free
}

/// Per hostname anti-affinity or hostname spread rule (kind and selector), the positions in
/// `classes` of the classes holding it that its selector selects, in order, and the smallest and
/// largest per-node limit among them.
pub(crate) fn self_limit_rules(solver: &Solver, classes: &[usize]) -> Vec<SelfLimitRule> {
    let mut by_rule: BTreeMap<(bool, usize), SelfLimitRule> = BTreeMap::new();
    for (k, &c) in classes.iter().enumerate() {
        for (anti, selector, limit) in solver.classes()[c].traits.self_limits() {
            let rule = by_rule.entry((anti, selector)).or_insert(SelfLimitRule {
                members: vec![],
                fewest: limit,
                most: limit,
            });
            if rule.members.last() != Some(&k) {
                rule.members.push(k);
            }
            rule.fewest = rule.fewest.min(limit);
            rule.most = rule.most.max(limit);
        }
    }
    by_rule.into_values().collect()
}

/// Per-pod values from the lower bound's duals, with a fallback for classes the LP leaves at 0.
pub(crate) fn pod_values(solver: &Solver, ids: &[usize], bound: &bound::Bound) -> Vec<f64> {
    let mut values = vec![0.0; solver.classes().len()];
    for (k, &c) in ids.iter().enumerate() {
        // A tiny share of the cheapest node that could hold it keeps zero-valued pods ordered.
        let fallback = cheapest_share(solver, c) * 1e-6;
        values[c] = bound.values[k] + fallback;
    }
    values
}

fn cheapest_share(solver: &Solver, c: usize) -> f64 {
    let class = &solver.classes()[c];
    class
        .masks
        .iter()
        .enumerate()
        .filter(|(_, m)| **m != 0)
        .map(|(t, m)| {
            let tpl = &solver.templates()[t];
            let share = tpl.dominant_share(&class.traits.demand);
            tpl.price(*m) * share
        })
        .fold(f64::INFINITY, f64::min)
        .min(1e6)
}

/// One hostname anti-affinity or hostname spread rule and the classes it limits together.
pub(crate) struct SelfLimitRule {
    /// Positions in the classes asked about.
    pub members: Vec<usize>,
    /// The smallest and largest per-node limit among the members.
    pub fewest: u64,
    pub most: u64,
}
