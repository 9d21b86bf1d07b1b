//! The nodes a solve fills: existing and in-flight nodes first (free capacity), then new nodes opened
//! from templates — column-generation patterns first, the greedy packer for the rest — within the
//! NodePools' tiers and limits; and what a set of classes needs of a template.

use std::collections::BTreeMap;

use crate::scheduling::anchors;
use crate::scheduling::colgen;
use crate::scheduling::input::tolerates_all;
use crate::scheduling::node::NodeState;
use crate::scheduling::pack::repeats;
use crate::scheduling::shapes::Rule;
use crate::scheduling::working::Solver;

/// How many times column generation is re-run on the pods the previous round left.
const COLUMN_GENERATION_ROUNDS: usize = 6;

impl Solver<'_> {
    /// First fit onto existing and already planned nodes.
    pub(crate) fn fill_existing(&mut self, order: &[usize], remaining: &mut [u64]) {
        for &c in order {
            for i in 0..self.slots().len() {
                if remaining[c] == 0 {
                    break;
                }
                if !self.slot_accepts(i, c) {
                    continue;
                }
                let bootstrap = |s: usize| self.matching_anywhere(s) == 0;
                let n =
                    self.slots()[i].state().max_addable(&self.classes()[c].traits, remaining[c], bootstrap);
                if n > 0 {
                    self.commit(i, c, n);
                    remaining[c] -= n;
                }
            }
        }
    }

    pub(crate) fn slot_accepts(&self, i: usize, c: usize) -> bool {
        match (self.slots()[i].existing(), self.slots()[i].template()) {
            (Some(n), _) => {
                let node = &self.input().nodes[n];
                let pod = &self.input().pods[self.classes()[c].pods[0]];
                let taints: Vec<_> =
                    node.taints.iter().filter(|t| !node.startup_taints.contains(t)).cloned().collect();
                self.classes()[c].requirements.matches(&node.labels)
                    && tolerates_all(&pod.tolerations, &taints)
            }
            (None, Some(t)) => {
                let m = self.classes()[c].masks[t] & self.slots()[i].mask();
                if m == 0 {
                    return false;
                }
                let members: Vec<usize> = self.slots()[i].classes().iter().map(|(k, _)| *k).collect();
                if !members.iter().all(|&k| k == c || self.pair_ok(c, k)) {
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
        &mut self,
        order: &[usize],
        remaining: &mut [u64],
        values: &[f64],
        resource_prices: &[f64],
    ) {
        // Whole copies of the column-generation patterns first, re-solving what remains a few times
        // (rounding down, then diving); the greedy packs what is left.
        for _ in 0..COLUMN_GENERATION_ROUNDS {
            if self.cancel_requested() {
                return;
            }
            let mut opened = 0;
            for (pattern, copies) in colgen::plan(self, order, remaining) {
                // Limits are checked per copy: the LP does not know them.
                let copies =
                    copies.min(repeats(&pattern, remaining)).min(self.limit_copies(pattern.template));
                for _ in 0..copies {
                    self.open(&pattern, remaining);
                    opened += 1;
                }
            }
            if opened == 0 {
                break;
            }
        }
        // Classes no new node can take (no template, limits reached); their pods stay in `remaining`
        // and are explained by the caller.
        let mut parked = vec![false; self.classes().len()];
        let mut anchor_index = anchors::AnchorIndex::new(self.limited_groups(order), order, |c| {
            &self.classes()[c].traits.demand
        });
        // The head is the first class in `order` with pods left and not parked; neither comes back
        // within the pass (pods are only taken, classes only parked), so the search never restarts.
        let mut next = 0;
        loop {
            while next < order.len() && (remaining[order[next]] == 0 || parked[order[next]]) {
                next += 1;
            }
            let Some(&head) = order.get(next) else { break };
            if self.cancel_requested() {
                return;
            }
            let candidates = self.candidates(head);
            if candidates.is_empty() {
                parked[head] = true;
                continue;
            }
            anchor_index.prune(|c| remaining[c] == 0 || parked[c]);
            let anchor = anchor_index
                .next_anchor(remaining, |c| &self.classes()[c].traits.demand, |a, b| self.pair_ok(a, b))
                .and_then(|anchor| {
                    let candidates = self.candidates(anchor.head);
                    (!candidates.is_empty()).then_some((anchor, candidates))
                });
            // An anchor node is opened once: the next one's share is recomputed from what is left.
            let (pattern, anchored) = self.with_packer(values, resource_prices.to_vec(), |packer| {
                match anchor.and_then(|(anchor, candidates)| {
                    packer.anchor_pattern(&anchor, &candidates, &anchor_index, remaining)
                }) {
                    Some(p) => (Some(p), true),
                    None => {
                        // Only classes with pods left can join a node; late in a batch most
                        // have none.
                        let waiting: Vec<usize> =
                            order.iter().copied().filter(|&c| remaining[c] > 0).collect();
                        (packer.best_pattern(head, &candidates, &waiting, remaining), false)
                    }
                }
            });
            let Some(pattern) = pattern else {
                parked[head] = true;
                continue;
            };
            let mut copies = repeats(&pattern, remaining).min(self.limit_copies(pattern.template));
            if anchored || pattern.counts.iter().any(|&(c, _)| self.bootstraps(c)) {
                copies = 1;
            }
            for _ in 0..copies.max(1) {
                self.open(&pattern, remaining);
            }
        }
    }

    /// The groups of `classes` that count together against one per-node limit (see
    /// [`anchors::LimitedGroup`]): per selector, the classes holding a hostname anti-affinity or
    /// hostname spread over it that the selector selects, with the smallest of their limits; and each
    /// class with host ports alone.
    pub(crate) fn limited_groups(&self, classes: &[usize]) -> Vec<anchors::LimitedGroup> {
        let mut groups: Vec<anchors::LimitedGroup> = self
            .self_limit_rules(classes)
            .into_iter()
            .map(|rule| anchors::LimitedGroup {
                members: rule.members.iter().map(|&k| classes[k]).collect(),
                per_node: rule.fewest,
            })
            .collect();
        groups.extend(
            classes
                .iter()
                .filter(|&&c| !self.classes()[c].traits.host_ports.is_empty())
                .map(|&c| anchors::LimitedGroup { members: vec![c], per_node: 1 }),
        );
        groups
    }

    /// Per hostname anti-affinity or hostname spread rule (kind and selector), the positions in
    /// `classes` of the classes holding it that its selector selects, in order, and the smallest and
    /// largest per-node limit among them.
    pub(crate) fn self_limit_rules(&self, classes: &[usize]) -> Vec<SelfLimitRule> {
        let mut by_rule: BTreeMap<(bool, usize), SelfLimitRule> = BTreeMap::new();
        for (k, &c) in classes.iter().enumerate() {
            for (anti, selector, limit) in self.classes()[c].traits.self_limits() {
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

    pub(crate) fn bootstraps(&self, c: usize) -> bool {
        self.classes()[c]
            .traits
            .rules
            .iter()
            .any(|r| matches!(r, Rule::Affinity { selector, .. } if self.matching_anywhere(*selector) == 0))
    }

    /// Templates the class may use now: its lowest tier with a template whose pool has room.
    pub(crate) fn candidates(&self, c: usize) -> Vec<usize> {
        let usable: Vec<usize> = self.classes()[c]
            .masks
            .iter()
            .enumerate()
            .filter(|(t, m)| **m != 0 && self.limit_copies(*t) > 0)
            .map(|(t, _)| t)
            .collect();
        let Some(tier) = usable.iter().map(|&t| self.templates()[t].tier).min() else { return vec![] };
        usable.into_iter().filter(|&t| self.templates()[t].tier == tier).collect()
    }
}

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

    /// Rebuilds a slot's node state for template `t` from its classes.
    pub(crate) fn state_for(&self, classes: &[(usize, u64)], t: usize) -> NodeState {
        let mut state = NodeState::empty(self.templates()[t].capacity.clone(), self.selectors().list.len());
        for &(c, n) in classes {
            state.add(&self.classes()[c].traits, n);
        }
        state
    }
}

/// One hostname anti-affinity or hostname spread rule and the classes it limits together.
pub(crate) struct SelfLimitRule {
    /// Positions in the classes asked about.
    pub members: Vec<usize>,
    /// The smallest and largest per-node limit among the members.
    pub fewest: u64,
    pub most: u64,
}
