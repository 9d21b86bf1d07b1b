//! Whether a set of classes fits one node of a template: their joint offering mask, their total
//! demand, and whether their per-node rules let them share a node. Merging nodes and right-sizing
//! them ask this of every template.

use crate::scheduling::node::NodeState;
use crate::scheduling::working::Solver;

impl Solver<'_> {
    /// The joint offering mask of `classes` on template `t` (0 when one of them cannot use it).
    pub(crate) fn joint_mask(&self, classes: &[(usize, u64)], t: usize) -> u32 {
        classes.iter().fold(self.templates()[t].full_mask(), |m, &(c, _)| m & self.classes()[c].masks[t])
    }

    /// What `classes` (with counts) ask of a node in every dimension.
    pub(crate) fn total_demand(&self, classes: &[(usize, u64)]) -> Vec<i64> {
        let mut total = vec![0i64; self.dims().len()];
        for &(c, n) in classes {
            for (x, d) in total.iter_mut().zip(&self.classes()[c].traits.demand) {
                *x += d * n as i64;
            }
        }
        total
    }

    /// Whether `classes` (with counts) may share one node as far as per-node rules go (hostname
    /// affinity, anti-affinity and spread, host ports). Capacity aside, these rules do not depend on
    /// the node's size, so whether they fit each of many templates is one resource comparison each.
    pub(crate) fn rules_allow(&self, classes: &[(usize, u64)]) -> bool {
        let mut state = NodeState::empty(vec![i64::MAX; self.dims().len()], self.selectors().list.len());
        for &(c, n) in classes {
            // A hostname affinity group on this node is satisfied by its own members.
            let traits = &self.classes()[c].traits;
            if state.max_addable(traits, n, |_| true) < n {
                return false;
            }
            state.add(traits, n);
        }
        true
    }
}
