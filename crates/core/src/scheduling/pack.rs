//! Packing classes of pods onto new nodes at least cost.
//!
//! Each step takes the most valuable class still waiting (the head), and for every template the head
//! may use it fills an empty node two ways — largest classes first, and in proportion to what is left —
//! then keeps the fill with the best *efficiency*: the value of the pods placed divided by the node's
//! price. A pod's value is its resource demand priced at the lower bound's dual prices
//! ([`crate::scheduling::bound`]), so a node whose efficiency is 1 is exactly as good as the LP
//! optimum, and the search can stop early: no template can beat the efficiency its capacity allows.
//! The winning fill is then repeated for as many nodes as the remaining pods allow, which is what
//! makes 20,000 pods a few hundred decisions instead of 20,000.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use crate::scheduling::node::{NodeState, PodTraits};
use crate::scheduling::shapes::Selectors;
use crate::scheduling::templates::Template;

/// What the packer reads of each class, by class index. The solver lends its own classes with the
/// worths of a decision, so a decision costs nothing per class it does not read (a large batch has
/// thousands of classes and makes a decision per node it opens).
pub trait PackClasses {
    fn traits(&self, c: usize) -> &PodTraits;
    /// Offering mask per template index (0 = the class cannot use the template).
    fn masks(&self, c: usize) -> &[u32];
    /// What one pod of the class is worth.
    fn value(&self, c: usize) -> f64;
}

/// One planned fill of a node.
#[derive(Clone, Debug)]
pub struct Pattern {
    pub template: usize,
    pub mask: u32,
    /// `(class, pods)` in the order they were added.
    pub counts: Vec<(usize, u64)>,
    pub state: NodeState,
    pub price: f64,
    pub value: f64,
}

impl Pattern {
    /// Whether this fill is better than `best`: clearly more efficient, or as efficient and cheaper
    /// (ties by template, so the choice is deterministic).
    pub fn beats(&self, best: Option<&Pattern>) -> bool {
        match best {
            None => true,
            Some(b) => {
                let (e, be) = (self.efficiency(), b.efficiency());
                e > be * (1.0 + 1e-9)
                    || (e >= be * (1.0 - 1e-9) && (self.price, self.template) < (b.price, b.template))
            }
        }
    }

    pub fn efficiency(&self) -> f64 {
        if self.price > 0.0 {
            self.value / self.price
        } else {
            f64::INFINITY
        }
    }
}

/// Packing context for one batch.
pub struct Packer<'a, C: PackClasses> {
    pub templates: &'a [Template],
    pub classes: C,
    pub selectors: &'a Selectors,
    /// The requirements group of each class: classes with equal requirements share one.
    pub group_of: &'a [usize],
    /// Whether two groups may share a node (their requirements intersect).
    pub group_compatible: &'a [Vec<bool>],
    /// Whether a self-matching pod may start a hostname affinity group (no matching pod yet).
    pub bootstrap: &'a dyn Fn(usize) -> bool,
    /// Dual price of each resource dimension, for the efficiency bound of a template.
    pub resource_prices: Vec<f64>,
    /// The smallest demand of any class in each dimension: a node with less left in some dimension
    /// takes no more pods.
    pub smallest_demand: &'a [i64],
}

/// How many proportional fills to try per decision (on the best greedy templates).
const PROPORTIONAL_CANDIDATES: usize = 6;

impl<C: PackClasses> Packer<'_, C> {
    pub(crate) fn empty_state(&self, template: usize) -> NodeState {
        NodeState::empty(self.templates[template].capacity.clone(), self.selectors.list.len())
    }

    /// Whether `class` may join a node holding classes of `groups` (distinct); a node holds a few
    /// groups however many classes it holds, so this is the cheap form of a pairwise check.
    pub(crate) fn can_join(&self, class: usize, groups: &[usize]) -> bool {
        let g = self.group_of[class];
        groups.iter().all(|&h| h == g || self.group_compatible[g][h])
    }

    fn is_full(&self, state: &NodeState) -> bool {
        state.free.iter().zip(self.smallest_demand).any(|(free, least)| free < least)
    }

    /// Records that a class of `class`'s group is on the node.
    pub(crate) fn joined(&self, class: usize, groups: &mut Vec<usize>) {
        let g = self.group_of[class];
        if !groups.contains(&g) {
            groups.push(g);
        }
    }

    /// Largest-first fill: the head as many times as it goes, then every other class in `order`.
    pub fn fill_greedy(
        &self,
        template: usize,
        head: usize,
        order: &[usize],
        remaining: &[u64],
    ) -> Option<Pattern> {
        let mut mask = self.classes.masks(head)[template];
        if mask == 0 {
            return None;
        }
        let mut state = self.empty_state(template);
        let mut counts = vec![];
        let n = state.max_addable(self.classes.traits(head), remaining[head], self.bootstrap);
        if n == 0 {
            return None;
        }
        state.add(self.classes.traits(head), n);
        counts.push((head, n));
        let mut groups = vec![self.group_of[head]];
        for &c in order {
            if c == head || remaining[c] == 0 {
                continue;
            }
            let m = self.classes.masks(c)[template] & mask;
            if m == 0 || !self.can_join(c, &groups) {
                continue;
            }
            let n = state.max_addable(self.classes.traits(c), remaining[c], self.bootstrap);
            if n > 0 {
                state.add(self.classes.traits(c), n);
                counts.push((c, n));
                self.joined(c, &mut groups);
                mask = m;
                if self.is_full(&state) {
                    break;
                }
            }
        }
        Some(self.finish(template, mask, counts, state))
    }

    /// Fill from a plan: first up to the planned count of each class (in plan order), then as many
    /// more of each class in `order` as still fit.
    pub fn fill_planned(
        &self,
        template: usize,
        planned: &[(usize, u64)],
        order: &[usize],
        remaining: &[u64],
    ) -> Option<Pattern> {
        let mut mask = self.templates[template].full_mask();
        let mut state = self.empty_state(template);
        let mut counts: Vec<(usize, u64)> = vec![];
        let mut groups = vec![];
        let steps = planned.iter().copied().chain(order.iter().map(|&c| (c, u64::MAX)));
        for (c, want) in steps {
            let already = counts.iter().find(|(k, _)| *k == c).map_or(0, |(_, n)| *n);
            let left = remaining[c].saturating_sub(already).min(want);
            if left == 0 {
                continue;
            }
            let m = self.classes.masks(c)[template] & mask;
            if m == 0 || !self.can_join(c, &groups) {
                continue;
            }
            let n = state.max_addable(self.classes.traits(c), left, self.bootstrap);
            if n == 0 {
                continue;
            }
            state.add(self.classes.traits(c), n);
            self.joined(c, &mut groups);
            mask = m;
            match counts.iter_mut().find(|(k, _)| *k == c) {
                Some(e) => e.1 += n,
                None => counts.push((c, n)),
            }
        }
        if counts.is_empty() {
            return None;
        }
        Some(self.finish(template, mask, counts, state))
    }

    /// Proportional fill: one pod at a time, always from the class with the most pods left per pod
    /// already on the node, so complementary shapes (CPU-heavy next to memory-heavy) share nodes.
    /// Ties go to the class earlier in `order`.
    ///
    /// Only the class just added changes its score, so the candidates sit in a max-heap with one
    /// live entry per class: a node of `n` pods costs `n log(classes)`, not `n × classes` (a node
    /// of the largest sizes holds thousands of pods).
    pub fn fill_proportional(
        &self,
        template: usize,
        head: usize,
        order: &[usize],
        remaining: &[u64],
    ) -> Option<Pattern> {
        let mut mask = self.classes.masks(head)[template];
        if mask == 0 {
            return None;
        }
        let mut state = self.empty_state(template);
        if state.max_addable(self.classes.traits(head), 1, self.bootstrap) == 0 {
            return None;
        }
        state.add(self.classes.traits(head), 1);
        let mut counts: Vec<(usize, u64)> = vec![(head, 1)];
        let mut groups = vec![self.group_of[head]];
        // Position of each class in `counts`, and of each class in `order` (for ties).
        let mut slot_of: HashMap<usize, usize> = HashMap::from([(head, 0)]);
        let placed = |c: usize, counts: &[(usize, u64)], slot_of: &HashMap<usize, usize>| {
            slot_of.get(&c).map_or(0, |&i| counts[i].1)
        };
        let score = |left: u64, placed: u64| left as f64 / (placed + 1) as f64;
        let mut heap: BinaryHeap<Candidate> = order
            .iter()
            .enumerate()
            .filter_map(|(position, &c)| {
                let already = placed(c, &counts, &slot_of);
                let left = remaining[c].saturating_sub(already);
                (left > 0).then(|| Candidate {
                    score: score(left, already),
                    position,
                    class: c,
                    placed: already,
                })
            })
            .collect();
        while let Some(candidate) = heap.pop() {
            let c = candidate.class;
            if candidate.placed != placed(c, &counts, &slot_of) {
                continue; // superseded by the entry pushed when a pod of `c` was added
            }
            let m = self.classes.masks(c)[template] & mask;
            if m == 0
                || !self.can_join(c, &groups)
                || state.max_addable(self.classes.traits(c), 1, self.bootstrap) == 0
            {
                continue; // blocked for the rest of this node: its entry is not pushed again
            }
            state.add(self.classes.traits(c), 1);
            self.joined(c, &mut groups);
            mask = m;
            let now = match slot_of.get(&c) {
                Some(&i) => {
                    counts[i].1 += 1;
                    counts[i].1
                }
                None => {
                    slot_of.insert(c, counts.len());
                    counts.push((c, 1));
                    1
                }
            };
            let left = remaining[c].saturating_sub(now);
            if left > 0 {
                heap.push(Candidate {
                    score: score(left, now),
                    position: candidate.position,
                    class: c,
                    placed: now,
                });
            }
        }
        Some(self.finish(template, mask, counts, state))
    }

    pub(crate) fn finish(
        &self,
        template: usize,
        mask: u32,
        counts: Vec<(usize, u64)>,
        state: NodeState,
    ) -> Pattern {
        let value = counts.iter().map(|&(c, n)| self.classes.value(c) * n as f64).sum();
        let price = self.templates[template].price(mask);
        Pattern { template, mask, counts, state, price, value }
    }

    /// The best fill for `head` among `candidates` (templates it may use, already limited to the
    /// tier and the pools' remaining limits).
    pub fn best_pattern(
        &self,
        head: usize,
        candidates: &[usize],
        order: &[usize],
        remaining: &[u64],
    ) -> Option<Pattern> {
        // Efficiency can never exceed what the template's capacity is worth at the dual prices.
        let mut ranked: Vec<(usize, f64)> = candidates
            .iter()
            .map(|&t| {
                let tpl = &self.templates[t];
                let worth: f64 =
                    tpl.capacity.iter().zip(&self.resource_prices).map(|(c, p)| (*c).max(0) as f64 * p).sum();
                let price = tpl.price(self.classes.masks(head)[t]);
                (t, if price > 0.0 { worth / price } else { f64::INFINITY })
            })
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut best: Option<Pattern> = None;
        let mut greedy: Vec<Pattern> = vec![];
        for &(t, upper) in &ranked {
            if let Some(b) = &best {
                // Strictly below: a template that could only tie is not worth the fill.
                if upper.is_finite() && upper < b.efficiency() * (1.0 - 1e-9) && b.value > 0.0 {
                    break;
                }
            }
            if let Some(p) = self.fill_greedy(t, head, order, remaining) {
                if p.beats(best.as_ref()) {
                    best = Some(p.clone());
                }
                greedy.push(p);
            }
        }
        greedy.sort_by(|a, b| {
            b.efficiency().total_cmp(&a.efficiency()).then_with(|| a.template.cmp(&b.template))
        });
        for p in greedy.iter().take(PROPORTIONAL_CANDIDATES) {
            if let Some(q) = self.fill_proportional(p.template, head, order, remaining) {
                if q.beats(best.as_ref()) {
                    best = Some(q);
                }
            }
        }
        best
    }
}

/// How many times a pattern can be repeated with the pods that remain.
pub fn repeats(pattern: &Pattern, remaining: &[u64]) -> u64 {
    pattern.counts.iter().map(|&(c, n)| remaining[c] / n.max(1)).min().unwrap_or(0).max(1)
}

/// A class waiting in [`Packer::fill_proportional`]'s heap: the highest score first, then the
/// earliest in the caller's order.
struct Candidate {
    score: f64,
    position: usize,
    class: usize,
    /// Pods of the class on the node when the entry was pushed; a stale entry is skipped.
    placed: u64,
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.position.cmp(&self.position))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate {}
