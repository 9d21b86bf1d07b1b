//! The nodes a solve fills: existing and in-flight nodes first (free capacity), then new nodes opened
//! from templates — column-generation patterns first, the greedy packer for the rest — within the
//! NodePools' tiers and limits; and what a set of classes needs of a template.

use crate::scheduling::anchors;
use crate::scheduling::colgen;
use crate::scheduling::input::tolerates_all;
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

    pub(crate) fn bootstraps(&self, c: usize) -> bool {
        self.classes()[c]
            .traits
            .rules
            .iter()
            .any(|r| matches!(r, Rule::Affinity { selector, .. } if self.matching_anywhere(*selector) == 0))
    }
}

impl Solver<'_> {}
