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

use crate::scheduling::pack::{Packer, Pattern};
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

/// The anchor for the next node, if some group of limited classes waits and other pods wait to
/// share its nodes. `waiting` are the classes with pods left that may still be placed, in the
/// caller's order; `may_share(a, b)` says whether classes `a` and `b` may ever share a node (only
/// those count toward the share).
pub fn next_anchor(
    groups: &[LimitedGroup],
    waiting: &[usize],
    remaining: &[u64],
    demand: impl Fn(usize) -> Vec<i64>,
    may_share: impl Fn(usize, usize) -> bool,
) -> Option<Anchor> {
    let position: std::collections::HashMap<usize, usize> =
        waiting.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    // The group needing the most nodes (ties: the first listed); its head is its first waiting member.
    let mut chosen: Option<(u64, &LimitedGroup, usize)> = None;
    for group in groups.iter().filter(|g| g.per_node > 0) {
        let pods: u64 =
            group.members.iter().filter(|c| position.contains_key(c)).map(|&c| remaining[c]).sum();
        let nodes = pods.div_ceil(group.per_node);
        let head = group
            .members
            .iter()
            .filter(|c| remaining[**c] > 0)
            .filter_map(|c| position.get(c).map(|&i| (i, *c)))
            .min()
            .map(|(_, c)| c);
        if let Some(head) = head {
            if nodes > 0 && chosen.is_none_or(|(n, _, _)| nodes > n) {
                chosen = Some((nodes, group, head));
            }
        }
    }
    let (nodes, group, head) = chosen?;
    let head_pods = remaining[head].min(group.per_node);
    let mut others: Vec<i64> = vec![];
    for &c in waiting {
        if remaining[c] == 0 || group.members.contains(&c) || !may_share(head, c) {
            continue;
        }
        let d = demand(c);
        others.resize(d.len(), 0);
        for (o, x) in others.iter_mut().zip(&d) {
            *o += x * remaining[c] as i64;
        }
    }
    if others.iter().all(|x| *x <= 0) {
        return None; // nothing to share: the ordinary packer sizes a node for the head alone
    }
    let mut target = demand(head).iter().map(|d| d * head_pods as i64).collect::<Vec<i64>>();
    target.resize(others.len(), 0);
    for (t, o) in target.iter_mut().zip(&others) {
        // Both are positive here; signed div_ceil is not stable.
        *t += ((*o).max(0) as u64).div_ceil(nodes) as i64;
    }
    Some(Anchor { head, head_pods, target })
}

impl Packer<'_> {
    /// The best balanced fill of `anchor` among the cheapest few of `candidates` that cover its
    /// target; `None` when no candidate covers it (the share is then larger than any node, and
    /// the ordinary packer's largest-first fill is the right one).
    pub fn anchor_pattern(
        &self,
        anchor: &Anchor,
        candidates: &[usize],
        waiting: &[usize],
        remaining: &[u64],
    ) -> Option<Pattern> {
        let head = anchor.head;
        let mut covering: Vec<(f64, usize)> = candidates
            .iter()
            .filter(|&&t| {
                self.classes[head].masks[t] != 0 && fits(&anchor.target, &self.templates[t].capacity)
            })
            .map(|&t| (self.templates[t].price(self.classes[head].masks[t]), t))
            .collect();
        covering.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        let mut best: Option<Pattern> = None;
        for &(_, t) in covering.iter().take(TARGET_CANDIDATES) {
            let Some(p) = self.fill_balanced(t, head, anchor.head_pods, waiting, remaining) else { continue };
            let better = match &best {
                None => true,
                Some(b) => {
                    let (e, be) = (p.efficiency(), b.efficiency());
                    e > be * (1.0 + 1e-9)
                        || (e >= be * (1.0 - 1e-9) && (p.price, p.template) < (b.price, b.template))
                }
            };
            if better {
                best = Some(p);
            }
        }
        best
    }

    /// Fills a node of `template`: `head_pods` of `head`, then one pod at a time the pod whose
    /// demand points most the way the node's free capacity does (the largest dot product of demand
    /// and free capacity, each as a share of the node's capacity), until nothing more fits. Pods
    /// with equal demand are interchangeable for this choice, so the search runs over distinct
    /// demands, and within one over its classes in `waiting` order.
    pub fn fill_balanced(
        &self,
        template: usize,
        head: usize,
        head_pods: u64,
        waiting: &[usize],
        remaining: &[u64],
    ) -> Option<Pattern> {
        let mut mask = self.classes[head].masks[template];
        if mask == 0 {
            return None;
        }
        let capacity = &self.templates[template].capacity;
        let mut state = self.empty_state(template);
        let n = state.max_addable(self.classes[head].traits, head_pods, self.bootstrap);
        if n == 0 {
            return None;
        }
        state.add(self.classes[head].traits, n);
        let mut counts: Vec<(usize, u64)> = vec![(head, n)];
        let mut groups = vec![self.group_of[head]];
        // Distinct demands, each with its classes in `waiting` order (the head is done).
        let mut index: HashMap<&[i64], usize> = HashMap::new();
        let mut buckets: Vec<(&[i64], Vec<usize>)> = vec![];
        for &c in waiting.iter().filter(|&&c| c != head && remaining[c] > 0) {
            let demand = self.classes[c].traits.demand.as_slice();
            let b = *index.entry(demand).or_insert_with(|| {
                buckets.push((demand, vec![]));
                buckets.len() - 1
            });
            buckets[b].1.push(c);
        }
        // Buckets and classes are consumed from the back; keep `waiting` order.
        for (_, classes) in &mut buckets {
            classes.reverse();
        }
        let share = |x: i64, cap: i64| if cap > 0 { x as f64 / cap as f64 } else { 0.0 };
        loop {
            let mut best: Option<(f64, usize)> = None;
            for (b, (demand, classes)) in buckets.iter().enumerate() {
                if classes.is_empty() || !fits(demand, &state.free) {
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
            // The first class of the bucket that may join; the others stay for later pods.
            let mut added = false;
            while let Some(&c) = buckets[b].1.last() {
                let on_node = counts.iter().find(|(k, _)| *k == c).map_or(0, |(_, n)| *n);
                let m = self.classes[c].masks[template] & mask;
                let joins = remaining[c] > on_node
                    && m != 0
                    && self.can_join(c, &groups)
                    && state.max_addable(self.classes[c].traits, 1, self.bootstrap) == 1;
                if !joins {
                    buckets[b].1.pop(); // done or blocked for the rest of this node
                    continue;
                }
                state.add(self.classes[c].traits, 1);
                self.joined(c, &mut groups);
                mask = m;
                match counts.iter_mut().find(|(k, _)| *k == c) {
                    Some(e) => e.1 += 1,
                    None => counts.push((c, 1)),
                }
                added = true;
                break;
            }
            if !added {
                buckets[b].1.clear();
            }
        }
        Some(self.finish(template, mask, counts, state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_needing_most_nodes_anchors_with_an_equal_share_of_the_rest() {
        // Classes 0 and 1: one anti-affinity group, 3 + 1 pods, one per node. Class 2: 2 pods, one
        // per node. Class 3: 8 pods, no limit.
        let remaining = [3, 1, 2, 8];
        let groups = [
            LimitedGroup { members: vec![0, 1], per_node: 1 },
            LimitedGroup { members: vec![2], per_node: 1 },
        ];
        let demand = |c: usize| vec![[100, 100, 200, 300][c], 1];
        let anchor = next_anchor(&groups, &[1, 2, 0, 3], &remaining, demand, |_, _| true).unwrap();
        // Class 1 comes first in the caller's order; the share is over 4 nodes.
        assert_eq!(anchor.head, 1);
        assert_eq!(anchor.head_pods, 1);
        // 100 of its own + (2×200 + 8×300) / 4 nodes; pods: 1 + (2 + 8) / 4 rounded up.
        assert_eq!(anchor.target, vec![100 + 700, 1 + 3]);
    }

    #[test]
    fn no_anchor_without_limited_pods_or_without_pods_to_share() {
        let demand = |_| vec![100];
        let any = |_, _| true;
        let group = [LimitedGroup { members: vec![0], per_node: 1 }];
        assert_eq!(next_anchor(&[], &[0, 1], &[3, 3], demand, any), None);
        assert_eq!(next_anchor(&group, &[0], &[3], demand, any), None);
        assert_eq!(next_anchor(&group, &[0, 1], &[0, 3], demand, any), None);
        // Pods that may never share the head's nodes are no share of them.
        assert_eq!(next_anchor(&group, &[0, 1], &[3, 3], demand, |_, _| false), None);
    }
}
