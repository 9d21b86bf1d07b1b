//! Nodes for pods that need nodes of their own, each taking an equal share of the other pods.
//!
//! A class with a per-node limit (hostname anti-affinity against itself, a hostname spread, host
//! ports) needs at least `⌈pods / limit⌉` nodes whatever else happens: those nodes exist in every
//! feasible plan, so the cheapest plans put the other pods on them rather than on nodes of their
//! own. Packing largest-first does the opposite: the first such node is filled to the brim and the
//! last ones are left holding one pod each, on a node sized for nothing (upstream's benchmark, with a
//! fifth of its pods in one anti-affinity group, loses a quarter of its cost that way).
//!
//! So while such pods wait, each new node is an *anchor*: the group of limited classes needing the
//! most nodes (classes that count against one limit together, such as the shapes of one
//! anti-affinity group) supplies its pods, and the node is sized for them plus `1 / nodes still needed` of everything else that
//! waits (the share is recomputed after every node, so a node that rounds up leaves less for the
//! next). The node is filled by [`Packer::fill_balanced`], which keeps the used resources in the
//! proportions of the node's capacity, because the share is only worth its price if neither CPU nor
//! memory is left idle.

use std::collections::HashMap;

use crate::scheduling::pack::{PackClasses, Packer, Pattern};
use crate::scheduling::shapes::fits;

/// How many of the cheapest templates covering the target are filled and compared.
const TARGET_CANDIDATES: usize = 3;

/// The anchor node to open next: the head class, its pods on the node, and what the node should hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Anchor {
    pub head: usize,
    /// The head's pods on this node (its per-node limit, or what is left).
    pub head_pods: u64,
    /// The head's pods plus this node's share of every other waiting pod, per dimension.
    pub target: Vec<i64>,
}

/// Classes whose pods count together against one per-node limit: the classes holding the same
/// hostname anti-affinity (or hostname spread) over a selector that selects them, or one class with
/// host ports. At most `per_node` of their pods, together, share a node.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitedGroup {
    pub members: Vec<usize>,
    pub per_node: u64,
}

/// What the anchors of one packing pass are chosen from, built once per pass (classes do not change
/// within it): the limited groups, and the pass's classes grouped by demand for
/// [`Packer::fill_balanced`]. Both keep the caller's order.
#[derive(Debug, Clone, Default)]
pub struct AnchorIndex {
    pub groups: Vec<LimitedGroup>,
    /// Distinct demands, each with its classes.
    pub by_demand: Vec<(Vec<i64>, Vec<usize>)>,
}

impl AnchorIndex {
    /// `order` are the pass's classes in the caller's order; `groups` their limited groups.
    pub fn new<'d>(groups: Vec<LimitedGroup>, order: &[usize], demand: impl Fn(usize) -> &'d [i64]) -> Self {
        let mut slot: HashMap<&[i64], usize> = HashMap::new();
        let mut by_demand: Vec<(Vec<i64>, Vec<usize>)> = vec![];
        for &c in order {
            let d = demand(c);
            let b = *slot.entry(d).or_insert_with(|| {
                by_demand.push((d.to_vec(), vec![]));
                by_demand.len() - 1
            });
            by_demand[b].1.push(c);
        }
        AnchorIndex { groups, by_demand }
    }

    /// Drops classes that may take no more pods (`done(c)`), so fills do not step over them again.
    pub fn prune(&mut self, done: impl Fn(usize) -> bool) {
        for (_, classes) in &mut self.by_demand {
            classes.retain(|&c| !done(c));
        }
        self.by_demand.retain(|(_, classes)| !classes.is_empty());
        for group in &mut self.groups {
            group.members.retain(|&c| !done(c));
        }
        self.groups.retain(|g| !g.members.is_empty());
    }

    /// The anchor for the next node, if a limited group has pods left and other pods wait to share
    /// its nodes. Call [`Self::prune`] first: every class still listed may take pods, and every
    /// group member is one of the index's classes (as when the groups are of the classes the index
    /// was built from). `may_share(a, b)` says whether classes `a` and `b` may ever share a node
    /// (only those count toward the share).
    pub fn next_anchor<'d>(
        &self,
        remaining: &[u64],
        demand: impl Fn(usize) -> &'d [i64],
        may_share: impl Fn(usize, usize) -> bool,
    ) -> Option<Anchor> {
        // The group needing the most nodes (ties: the first); its head is its first member.
        let mut chosen: Option<(u64, &LimitedGroup)> = None;
        for group in self.groups.iter().filter(|g| g.per_node > 0) {
            let pods: u64 = group.members.iter().map(|&c| remaining[c]).sum();
            let nodes = pods.div_ceil(group.per_node);
            if nodes > 0 && chosen.is_none_or(|(n, _)| nodes > n) {
                chosen = Some((nodes, group));
            }
        }
        let (nodes, group) = chosen?;
        let head = *group.members.iter().find(|&&c| remaining[c] > 0)?;
        let head_pods = remaining[head].min(group.per_node);
        // What every waiting class that may share the head's node asks, less what the group's own
        // members ask (they wait for nodes of their own). Summing all and taking the members out
        // spares asking each class whether it is a member; the sums are integers, so exact.
        let mut others: Vec<i64> = vec![0; demand(head).len()];
        for (d, classes) in &self.by_demand {
            let pods: u64 = classes.iter().filter(|&&c| may_share(head, c)).map(|&c| remaining[c]).sum();
            for (o, x) in others.iter_mut().zip(d) {
                *o += x * pods as i64;
            }
        }
        let mut members = group.members.clone();
        members.sort_unstable();
        members.dedup();
        for &c in members.iter().filter(|&&c| may_share(head, c)) {
            for (o, x) in others.iter_mut().zip(demand(c)) {
                *o -= x * remaining[c] as i64;
            }
        }
        if others.iter().all(|x| *x <= 0) {
            return None; // nothing to share: the ordinary packer sizes a node for the head alone
        }
        let mut target: Vec<i64> = demand(head).iter().map(|d| d * head_pods as i64).collect();
        for (t, o) in target.iter_mut().zip(&others) {
            // Both are positive here; signed div_ceil is not stable.
            *t += ((*o).max(0) as u64).div_ceil(nodes) as i64;
        }
        Some(Anchor { head, head_pods, target })
    }
}

impl<C: PackClasses> Packer<'_, C> {
    /// The best balanced fill of `anchor` among the cheapest few of `candidates` that cover its
    /// target; `None` when no candidate covers it (the share is then larger than any node, and
    /// the ordinary packer's largest-first fill is the right one).
    pub fn anchor_pattern(
        &self,
        anchor: &Anchor,
        candidates: &[usize],
        index: &AnchorIndex,
        remaining: &[u64],
    ) -> Option<Pattern> {
        let head = anchor.head;
        let mut covering: Vec<(f64, usize)> = candidates
            .iter()
            .filter(|&&t| {
                self.classes.masks(head)[t] != 0 && fits(&anchor.target, &self.templates[t].capacity)
            })
            .map(|&t| (self.templates[t].price(self.classes.masks(head)[t]), t))
            .collect();
        covering.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        let mut best: Option<Pattern> = None;
        for &(_, t) in covering.iter().take(TARGET_CANDIDATES) {
            let Some(p) = self.fill_balanced(t, head, anchor.head_pods, index, remaining) else { continue };
            if p.beats(best.as_ref()) {
                best = Some(p);
            }
        }
        best
    }

    /// Fills a node of `template`: `head_pods` of `head`, then one pod at a time the pod whose
    /// demand points most the way the node's free capacity does (the largest dot product of demand
    /// and free capacity, each as a share of the node's capacity), until nothing more fits. Pods
    /// with equal demand are interchangeable for this choice, so the search runs over the index's
    /// distinct demands, and within one over its classes in order.
    pub fn fill_balanced(
        &self,
        template: usize,
        head: usize,
        head_pods: u64,
        index: &AnchorIndex,
        remaining: &[u64],
    ) -> Option<Pattern> {
        let mut mask = self.classes.masks(head)[template];
        if mask == 0 {
            return None;
        }
        let capacity = &self.templates[template].capacity;
        let mut state = self.empty_state(template);
        let n = state.max_addable(self.classes.traits(head), head_pods, self.bootstrap);
        if n == 0 {
            return None;
        }
        state.add(self.classes.traits(head), n);
        let mut counts: Vec<(usize, u64)> = vec![(head, n)];
        let mut groups = vec![self.group_of[head]];
        // Per demand, the first class that may still join: a class passed over (used up on this
        // node, or unable to join it) stays passed over, since the node only fills up.
        let mut cursor = vec![0usize; index.by_demand.len()];
        let share = |x: i64, cap: i64| if cap > 0 { x as f64 / cap as f64 } else { 0.0 };
        loop {
            let mut best: Option<(f64, usize)> = None;
            for (b, (demand, classes)) in index.by_demand.iter().enumerate() {
                if cursor[b] >= classes.len() || !fits(demand, &state.free) {
                    continue;
                }
                let score: f64 = demand
                    .iter()
                    .zip(&state.free)
                    .zip(capacity)
                    .map(|((d, f), c)| share(*d, *c) * share(*f, *c))
                    .sum();
                if best.is_none_or(|(s, _)| score > s) {
                    best = Some((score, b));
                }
            }
            let Some((_, b)) = best else { break };
            let classes = &index.by_demand[b].1;
            while let Some(&c) = classes.get(cursor[b]) {
                let on_node = counts.iter().find(|(k, _)| *k == c).map_or(0, |(_, n)| *n);
                let m = self.classes.masks(c)[template] & mask;
                let joins = c != head
                    && remaining[c] > on_node
                    && m != 0
                    && self.can_join(c, &groups)
                    && state.max_addable(self.classes.traits(c), 1, self.bootstrap) == 1;
                if !joins {
                    cursor[b] += 1;
                    continue;
                }
                state.add(self.classes.traits(c), 1);
                self.joined(c, &mut groups);
                mask = m;
                match counts.iter_mut().find(|(k, _)| *k == c) {
                    Some(e) => e.1 += 1,
                    None => counts.push((c, 1)),
                }
                break;
            }
        }
        Some(self.finish(template, mask, counts, state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMAND: [[i64; 2]; 4] = [[100, 1], [100, 1], [200, 1], [300, 1]];

    fn index(groups: Vec<LimitedGroup>, order: &[usize]) -> AnchorIndex {
        AnchorIndex::new(groups, order, |c| &DEMAND[c][..])
    }

    #[test]
    fn the_group_needing_most_nodes_anchors_with_an_equal_share_of_the_rest() {
        // Classes 0 and 1: one anti-affinity group, 3 + 1 pods, one per node. Class 2: 2 pods, one
        // per node. Class 3: 8 pods, no limit.
        let remaining = [3, 1, 2, 8];
        let groups = vec![
            LimitedGroup { members: vec![1, 0], per_node: 1 },
            LimitedGroup { members: vec![2], per_node: 1 },
        ];
        let index = index(groups, &[1, 2, 0, 3]);
        assert_eq!(
            index.by_demand,
            vec![(vec![100, 1], vec![1, 0]), (vec![200, 1], vec![2]), (vec![300, 1], vec![3])]
        );
        let anchor = index.next_anchor(&remaining, |c| &DEMAND[c][..], |_, _| true).unwrap();
        // Class 1 is the group's first member; the share is over 4 nodes.
        assert_eq!(anchor.head, 1);
        assert_eq!(anchor.head_pods, 1);
        // 100 of its own + (2×200 + 8×300) / 4 nodes; pods: 1 + (2 + 8) / 4 rounded up.
        assert_eq!(anchor.target, vec![100 + 700, 1 + 3]);
    }

    #[test]
    fn no_anchor_without_limited_pods_or_without_pods_to_share() {
        let demand = |c: usize| &DEMAND[c][..];
        let any = |_, _| true;
        let group = || vec![LimitedGroup { members: vec![0], per_node: 1 }];
        assert_eq!(index(vec![], &[0, 3]).next_anchor(&[3, 0, 0, 3], demand, any), None);
        assert_eq!(index(group(), &[0]).next_anchor(&[3, 0, 0, 0], demand, any), None);
        let mut used_up = index(group(), &[0, 3]);
        let remaining = [0, 0, 0, 3];
        used_up.prune(|c| remaining[c] == 0);
        assert!(used_up.groups.is_empty());
        assert_eq!(used_up.next_anchor(&remaining, demand, any), None);
        // Pods that may never share the head's nodes are no share of them.
        assert_eq!(index(group(), &[0, 3]).next_anchor(&[3, 0, 0, 3], demand, |_, _| false), None);
    }
}
