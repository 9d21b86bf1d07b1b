//! Whether a set of classes fits one node of a template: their joint offering mask, their total
//! demand, and whether their per-node rules let them share a node. Merging nodes and right-sizing
//! them ask this of every template.

use crate::scheduling::node::NodeState;
use crate::scheduling::working::Solver;

/// The joint offering mask of `classes` on template `t` (0 when one of them cannot use it).
pub(crate) fn joint_mask(solver: &Solver, classes: &[(usize, u64)], t: usize) -> u32 {
    classes.iter().fold(solver.templates()[t].full_mask(), |m, &(c, _)| m & solver.classes()[c].masks[t])
}

/// What `classes` (with counts) ask of a node in every dimension.
pub(crate) fn total_demand(solver: &Solver, classes: &[(usize, u64)]) -> Vec<i64> {
    let mut total = vec![0i64; solver.dims().len()];
    for &(c, n) in classes {
        for (x, d) in total.iter_mut().zip(&solver.classes()[c].traits.demand) {
            *x += d * n as i64;
        }
    }
    total
}

/// Whether `classes` (with counts) may share one node as far as per-node rules go (hostname
/// affinity, anti-affinity and spread, host ports). Capacity aside, these rules do not depend on
/// the node's size, so whether they fit each of many templates is one resource comparison each.
pub(crate) fn rules_allow(solver: &Solver, classes: &[(usize, u64)]) -> bool {
    let mut state = NodeState::empty(vec![i64::MAX; solver.dims().len()], solver.selectors().list.len());
    for &(c, n) in classes {
        // A hostname affinity group on this node is satisfied by its own members.
        let traits = &solver.classes()[c].traits;
        if state.max_addable(traits, n, |_| true) < n {
            return false;
        }
        state.add(traits, n);
    }
    true
}

/// Whether template `t` may replace template `chosen` of the same pool: a pool with limits takes no
/// size larger than the node's own in any limited resource, so right-sizing a node never uses more
/// of a limit.
pub(crate) fn within_pool_limits(solver: &Solver, t: usize, chosen: usize) -> bool {
    let (candidate, own) = (&solver.templates()[t], &solver.templates()[chosen]);
    debug_assert_eq!(candidate.pool, own.pool, "right-sizing stays in the node's pool");
    candidate.limited.iter().zip(&own.limited).all(|(c, o)| c <= o)
}
