//! The solver's working state across relaxation rounds: the classes of pods, the nodes being filled
//! (slots), the NodePools' remaining limits, the topology counts and the memos.
//!
//! Every field is private and every change goes through a method here, because the pieces are tied
//! together and a change to one must update the others in the same step:
//! - a slot's node state is its capacity minus what its classes use, and its mask is the offerings
//!   every class on it can use (`commit`, `open`, `take_back`, `merge_slots`);
//! - `matching_anywhere[s]` counts the pods matching selector `s` over running pods and all slots;
//! - a pool's remaining limits shrink by one node's capacity for every new node opened;
//! - the topology counts hold the domains given to pods not yet taken back (`assign_domains`,
//!   `release_domain`);
//! - classes are never changed once added, so the memos keyed by class stay valid.
//!
//! The memos and the cancel latch are cells: filling a memo or latching a stop changes no answer the
//! state gives, so the phases that only read take `&Solver`.
//!
//! The phases (slots, spread, column generation, merging, writing claims; the solve drives them) are
//! functions over this state in their own files: they read through the accessors and change the
//! state only through the methods here.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_ZONE};
use crate::model::requirements::Requirements;
use crate::model::resources::NODES;
use crate::scheduling::base::RunningBase;
use crate::scheduling::bound::Bound;
use crate::scheduling::cancel::{CancelLatch, Cancelled, ShouldCancel};
use crate::scheduling::input::{SolveInput, Toleration};
use crate::scheduling::node::{NodeState, PodTraits};
use crate::scheduling::pack::{PackClasses, Packer, Pattern};
use crate::scheduling::shapes::{
    build_shapes, fits, group_shapes, intern_rules, Dims, Rule, Scope, Selectors, Shape,
};
use crate::scheduling::templates::{self, OfferingDomains, Template};
use crate::scheduling::topology::{Assignment, Domains, EligibleDomains};

/// A group of identical pods with one domain assignment at one relaxation level.
///
/// Its fields are public to read: the solver hands classes out only by shared reference, so they
/// cannot change after [`Solver::add_classes`].
pub(crate) struct Class {
    pub shape: usize,
    pub level: usize,
    pub pods: Vec<usize>,
    pub requirements: Requirements,
    pub traits: PodTraits,
    /// Offering mask per template (0 = cannot use).
    pub masks: Vec<u32>,
    /// At most this many pods of the class fit on one node because of its own per-node rules.
    pub per_node_limit: Option<u64>,
    /// The domains its pods were given, and the rules that chose them (to undo for unplaced pods).
    pub assignment: Assignment,
    pub rules: Vec<Rule>,
    /// The domains its pods could have been given.
    pub eligible: EligibleDomains,
}

/// The solver's classes as the packer reads them, with what one pod of each is worth in the
/// decision at hand.
pub(crate) struct ClassesWorth<'a> {
    classes: &'a [Class],
    worth: &'a [f64],
}

impl PackClasses for ClassesWorth<'_> {
    fn traits(&self, c: usize) -> &PodTraits {
        &self.classes[c].traits
    }

    fn masks(&self, c: usize) -> &[u32] {
        &self.classes[c].masks
    }

    fn value(&self, c: usize) -> f64 {
        self.worth[c]
    }
}

/// A node being planned: an existing node, or a new one from a template.
pub(crate) struct Slot {
    existing: Option<usize>,
    template: Option<usize>,
    mask: u32,
    state: NodeState,
    /// `(class, count)` in placement order.
    classes: Vec<(usize, u64)>,
}

impl Slot {
    /// The index of the existing node this slot is, if any.
    pub fn existing(&self) -> Option<usize> {
        self.existing
    }

    /// The template of a new node; None for an existing node and for a new one emptied by a merge.
    pub fn template(&self) -> Option<usize> {
        self.template
    }

    /// The offerings of the template that every class on the node can use.
    pub fn mask(&self) -> u32 {
        self.mask
    }

    pub fn state(&self) -> &NodeState {
        &self.state
    }

    /// `(class, count)` in placement order.
    pub fn classes(&self) -> &[(usize, u64)] {
        &self.classes
    }
}

/// Offering masks before size for one list of tolerations.
type MasksForTolerations = (Arc<[Toleration]>, Vec<u32>);

/// What a resource bound depends on besides the classes: existing free capacity, and pods per class.
pub(crate) type BoundKey = (Vec<i64>, Vec<(usize, u64)>);

/// The input's nodes of one (zone, capacity type), by index; `pair` is `None` for the nodes that lack
/// either label. Which domains a class reaches through existing nodes is asked per class, and a large
/// cluster's nodes share a handful of pairs, so grouping them once per solve lets a class skip every
/// node of a pair it already reaches or whose zone or capacity type it excludes.
pub(crate) struct NodesByPair<'a> {
    pub pair: Option<(&'a str, &'a str)>,
    pub nodes: Vec<usize>,
}

impl<'a> NodesByPair<'a> {
    fn group(input: &'a SolveInput) -> Vec<Self> {
        let mut index: HashMap<Option<(&'a str, &'a str)>, usize> = HashMap::new();
        let mut groups: Vec<Self> = vec![];
        for (i, node) in input.nodes.iter().enumerate() {
            let zone = node.labels.get(LABEL_ZONE);
            let capacity_type = node.labels.get(LABEL_CAPACITY_TYPE);
            let pair = zone.zip(capacity_type).map(|(z, c)| (&**z, &**c));
            let g = *index.entry(pair).or_insert_with(|| {
                groups.push(NodesByPair { pair, nodes: vec![] });
                groups.len() - 1
            });
            groups[g].nodes.push(i);
        }
        groups
    }
}

/// The solver's working state across relaxation rounds.
pub(crate) struct Solver<'a> {
    input: &'a SolveInput,
    dims: Dims,
    selectors: Selectors,
    shapes: Vec<Shape>,
    templates: Vec<Template>,
    offering_domains: OfferingDomains,
    nodes_by_pair: Vec<NodesByPair<'a>>,
    classes: Vec<Class>,
    slots: Vec<Slot>,
    /// Pods matching each selector anywhere (for hostname affinity bootstrapping).
    matching_anywhere: Vec<u32>,
    domains: Domains,
    /// Remaining limits per pool: one entry per limited resource (and `nodes`), in the order of the
    /// pool's `remaining` keys.
    remaining: Vec<Option<Vec<i64>>>,
    /// What one node of each template takes of its pool's limits, in the same order (a packing pass
    /// asks how many copies the limits allow of every template for every node it opens).
    limit_use: Vec<Vec<i64>>,
    /// Classes whose requirements are equal share a group; whether two classes may share a node
    /// depends only on their groups. Batches have thousands of classes but a handful of distinct
    /// requirements, and the packer asks for pairs in its innermost loop.
    groups: HashMap<Requirements, usize>,
    group_of: Vec<usize>,
    /// `group_compatible[g][h]`: groups g and h have a common outcome for every key.
    group_compatible: Vec<Vec<bool>>,
    /// The least any class asks of each dimension (a node with less free is full).
    smallest_demand: Vec<i64>,
    /// Offering masks before size, per requirements and tolerations ([`templates::offering_masks`]).
    compat_memo: RefCell<HashMap<Requirements, Vec<MasksForTolerations>>>,
    /// Lower bounds already solved, by the existing nodes' free capacity and `(class, pods)`: a
    /// batch placed in one round asks for the same bound when it is packed and when the plan is
    /// reported.
    bound_memo: RefCell<HashMap<BoundKey, Bound>>,
    cancel: CancelLatch<'a>,
}

impl<'a> Solver<'a> {
    pub fn new(input: &'a SolveInput, cancel: &'a dyn ShouldCancel) -> Self {
        let dims = Dims::for_input(input);
        let mut selectors = Selectors::default();
        let shapes = build_shapes(input, &dims, &mut selectors);
        let domains = Domains::from_running(input, &selectors);
        let mut solver = Self::assemble(input, dims, selectors, shapes, domains, cancel);
        solver.init_existing();
        solver
    }

    /// [`Self::new`] for an input whose running pods are those `base` holds on the input's nodes
    /// (`input.running` is empty): the counting is the base's, done once for many solves.
    pub fn with_base(input: &'a SolveInput, base: &RunningBase, cancel: &'a dyn ShouldCancel) -> Self {
        debug_assert!(input.running.is_empty(), "the base holds the running pods");
        let dims = Dims::for_input(input);
        let selectors = base.selectors().clone();
        debug_assert!(
            {
                let mut more = selectors.clone();
                intern_rules(input.pods.iter().map(Arc::as_ref), &mut more);
                (more.list.len(), more.label_keys.len()) == (selectors.list.len(), selectors.label_keys.len())
            },
            "the base was built from every pod a solve on it places"
        );
        let shapes = group_shapes(input, &dims, base.relevant(), &selectors);
        let domains = base.domains(input, &selectors);
        let mut solver = Self::assemble(input, dims, selectors, shapes, domains, cancel);
        solver.init_existing_from(base);
        solver
    }

    /// The working state before any existing node is added.
    fn assemble(
        input: &'a SolveInput,
        dims: Dims,
        selectors: Selectors,
        shapes: Vec<Shape>,
        mut domains: Domains,
        cancel: &'a dyn ShouldCancel,
    ) -> Self {
        let templates = templates::build(input, &dims);
        let offering_domains = OfferingDomains::new(&templates);
        let nodes_by_pair = NodesByPair::group(input);
        let limit_use = templates.iter().map(|t| limit_use(input, t)).collect();
        let smallest_demand = vec![i64::MAX; dims.len()];
        for shape in &shapes {
            // With every preference given up, the spreads left are the DoNotSchedule ones: those the
            // pods they select must keep balanced.
            let pod = &input.pods[shape.pods[0]];
            domains.watch_spreads(&shape.effective(pod, shape.relaxable_steps, 0, &selectors).rules);
        }
        let matching_anywhere = vec![0; selectors.list.len()];
        Solver {
            input,
            dims,
            selectors,
            shapes,
            templates,
            offering_domains,
            nodes_by_pair,
            classes: vec![],
            slots: vec![],
            matching_anywhere,
            domains,
            remaining: input
                .nodepools
                .iter()
                .map(|p| p.remaining.as_ref().map(|left| left.iter().map(|(_, v)| v).collect()))
                .collect(),
            limit_use,
            groups: HashMap::new(),
            group_of: vec![],
            group_compatible: vec![],
            smallest_demand,
            compat_memo: RefCell::default(),
            bound_memo: RefCell::default(),
            cancel: CancelLatch::new(cancel),
        }
    }

    /// [`Self::init_existing`] from the base's counts of each node's running pods.
    fn init_existing_from(&mut self, base: &RunningBase) {
        let nsel = self.selectors.list.len();
        for (i, node) in self.input.nodes.iter().enumerate() {
            let allocatable = self.dims.vector(&node.allocatable);
            let state = match base.node(&node.name) {
                Some(running) => {
                    for (anywhere, here) in self.matching_anywhere.iter_mut().zip(&running.state.matching) {
                        *anywhere += here;
                    }
                    let used = self.dims.vector(&running.used);
                    let mut state = running.state.clone();
                    state.free = allocatable.iter().zip(&used).map(|(a, u)| a - u).collect();
                    state
                }
                None => NodeState::empty(allocatable, nsel),
            };
            self.slots.push(Slot { existing: Some(i), template: None, mask: 0, state, classes: vec![] });
        }
    }

    /// Existing nodes with what their running pods use and count.
    fn init_existing(&mut self) {
        let index: BTreeMap<&str, usize> =
            self.input.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        let nsel = self.selectors.list.len();
        let mut states: Vec<NodeState> = self
            .input
            .nodes
            .iter()
            .map(|n| NodeState::empty(self.dims.vector(&n.allocatable), nsel))
            .collect();
        let mut matcher = self.selectors.matcher();
        for pod in &self.input.running {
            let matched = matcher.matching(pod).to_vec();
            for &s in &matched {
                self.matching_anywhere[s] += 1;
            }
            let Some(&i) = pod.node_name.as_deref().and_then(|n| index.get(n)) else { continue };
            let rules: Vec<Rule> = pod
                .anti_affinity
                .iter()
                .filter(|t| t.topology_key == LABEL_HOSTNAME)
                .filter_map(|t| self.selectors.find(&t.namespaces, &t.selector))
                .map(|selector| Rule::AntiAffinity { scope: Scope::Hostname, selector })
                .collect();
            let traits =
                PodTraits::new(self.dims.vector(&pod.requests), matched, &rules, pod.host_ports.clone());
            states[i].add(&traits, 1);
        }
        for (i, state) in states.into_iter().enumerate() {
            self.slots.push(Slot { existing: Some(i), template: None, mask: 0, state, classes: vec![] });
        }
    }

    /// Whether to stop at this safe point: asks the caller's hook until it once says yes.
    pub fn cancel_requested(&self) -> bool {
        self.cancel.requested()
    }

    /// [`Self::cancel_requested`] as an error, for `?` at the safe points of the driver.
    pub fn check_cancel(&self) -> Result<(), Cancelled> {
        self.cancel.check()
    }

    // --- Reading -------------------------------------------------------------------------------

    pub fn input(&self) -> &'a SolveInput {
        self.input
    }

    pub fn dims(&self) -> &Dims {
        &self.dims
    }

    pub fn selectors(&self) -> &Selectors {
        &self.selectors
    }

    pub fn shapes(&self) -> &[Shape] {
        &self.shapes
    }

    pub fn templates(&self) -> &[Template] {
        &self.templates
    }

    /// The (zone, capacity type) pairs the templates sell, by offering.
    pub fn offering_domains(&self) -> &OfferingDomains {
        &self.offering_domains
    }

    /// The input's nodes grouped by their zone and capacity type.
    pub fn nodes_by_pair(&self) -> &[NodesByPair<'a>] {
        &self.nodes_by_pair
    }

    pub fn classes(&self) -> &[Class] {
        &self.classes
    }

    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// How many pods matching selector `s` are placed or running anywhere.
    pub fn matching_anywhere(&self, s: usize) -> u32 {
        self.matching_anywhere[s]
    }

    /// How many nodes of a template its pool's limits still allow (`u64::MAX` without limits).
    pub fn limit_copies(&self, t: usize) -> u64 {
        let Some(left) = &self.remaining[self.templates[t].pool] else { return u64::MAX };
        left.iter()
            .zip(&self.limit_use[t])
            .filter(|(_, per_node)| **per_node > 0)
            .map(|(left, per_node)| (left.max(&0) / per_node) as u64)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Whether some template the class may use has room in its pool: [`Solver::candidates`] is
    /// not empty.
    pub(crate) fn may_open(&self, c: usize) -> bool {
        self.classes()[c].masks.iter().enumerate().any(|(t, m)| *m != 0 && self.pool_has_room(t))
    }

    /// Whether the limits of template `t`'s pool allow one more node of it: `limit_copies(t) > 0`,
    /// without dividing (asked of every size of a class for every node a large batch opens).
    fn pool_has_room(&self, t: usize) -> bool {
        let Some(left) = &self.remaining[self.templates[t].pool] else { return true };
        left.iter().zip(&self.limit_use[t]).all(|(left, per_node)| *per_node <= 0 || left >= per_node)
    }

    /// Templates the class may use now: its lowest tier with a template whose pool has room.
    pub(crate) fn candidates(&self, c: usize) -> Vec<usize> {
        let usable: Vec<usize> = self.classes()[c]
            .masks
            .iter()
            .enumerate()
            .filter(|(t, m)| **m != 0 && self.pool_has_room(*t))
            .map(|(t, _)| t)
            .collect();
        let Some(tier) = usable.iter().map(|&t| self.templates()[t].tier).min() else { return vec![] };
        usable.into_iter().filter(|&t| self.templates()[t].tier == tier).collect()
    }

    /// Pods counted in a topology domain for a selector.
    pub fn domain_count(&self, scope: Scope, selector: usize, domain: &str) -> u32 {
        self.domains.count(scope, selector, domain)
    }

    // --- Classes and topology domains -----------------------------------------------------------

    /// Adds the classes of a round; returns their ids.
    pub fn add_classes(&mut self, batch: Vec<Class>) -> Range<usize> {
        let before = self.classes.len();
        for class in &batch {
            let group = self.group(&class.requirements);
            self.group_of.push(group);
            for (least, need) in self.smallest_demand.iter_mut().zip(&class.traits.demand) {
                *least = (*least).min(*need);
            }
        }
        self.classes.extend(batch);
        before..self.classes.len()
    }

    /// The group of classes with these requirements, created (with its compatibility to every
    /// other group) the first time.
    fn group(&mut self, requirements: &Requirements) -> usize {
        if let Some(&g) = self.groups.get(requirements) {
            return g;
        }
        let reqs: Vec<(&Requirements, usize)> = self.groups.iter().map(|(r, g)| (r, *g)).collect();
        let g = self.group_compatible.len();
        let mut row = vec![false; g + 1];
        for (other, h) in reqs {
            row[h] = requirements.intersect(other).first_empty().is_none();
        }
        row[g] = requirements.first_empty().is_none();
        for (h, existing) in self.group_compatible.iter_mut().enumerate() {
            existing.push(row[h]);
        }
        self.group_compatible.push(row);
        self.groups.insert(requirements.clone(), g);
        g
    }

    /// Gives a pod of shape `s` its zone and capacity-type domains under `rules`, counting it there.
    pub fn assign_domains(
        &mut self,
        s: usize,
        rules: &[Rule],
        eligible: &EligibleDomains,
    ) -> Result<Assignment, String> {
        self.domains.assign(&self.shapes[s].matched_by, rules, eligible)
    }

    /// Uncounts one pod of class `c` from the domains it was given (it was not placed after all).
    pub fn release_domain(&mut self, c: usize) {
        let class = &self.classes[c];
        self.domains.unassign(&self.shapes[class.shape].matched_by, &class.rules, &class.assignment);
    }

    // --- Memos ---------------------------------------------------------------------------------

    /// Offering masks of every template for a shape's tolerations and demand with `requirements`
    /// (0 where the shape cannot use the template).
    pub fn masks(&self, s: usize, requirements: &Requirements) -> Vec<u32> {
        let pod = &self.input.pods[self.shapes[s].pods[0]];
        let mut memo = self.compat_memo.borrow_mut();
        let known = memo
            .get(requirements)
            .and_then(|by_tolerations| by_tolerations.iter().position(|(t, _)| *t == pod.tolerations));
        let entry = match known {
            Some(i) => i,
            None => {
                let masks =
                    templates::offering_masks(self.input, &self.templates, requirements, &pod.tolerations);
                let list = memo.entry(requirements.clone()).or_default();
                list.push((pod.tolerations.clone(), masks));
                list.len() - 1
            }
        };
        let before_size = &memo[requirements][entry].1;
        let demand = &self.shapes[s].demand;
        before_size
            .iter()
            .zip(&self.templates)
            .map(|(&mask, t)| if mask != 0 && fits(demand, &t.capacity) { mask } else { 0 })
            .collect()
    }

    /// The bound solved earlier for this key, if any.
    pub fn remembered_bound(&self, key: &BoundKey) -> Option<Bound> {
        self.bound_memo.borrow().get(key).cloned()
    }

    pub fn remember_bound(&self, key: BoundKey, bound: Bound) {
        self.bound_memo.borrow_mut().insert(key, bound);
    }

    /// Whether two classes may share a node: their requirements have a common outcome for every key.
    pub fn pair_ok(&self, a: usize, b: usize) -> bool {
        self.group_compatible[self.group_of[a]][self.group_of[b]]
    }

    /// Runs `f` with a packer over the solver's classes whose pattern values are `worth` and whose
    /// resources are priced at `resource_prices` (zeros: patterns are valued by `worth` alone).
    pub fn with_packer<R>(
        &self,
        worth: &[f64],
        resource_prices: Vec<f64>,
        f: impl FnOnce(&Packer<ClassesWorth>) -> R,
    ) -> R {
        let classes = ClassesWorth { classes: &self.classes, worth };
        let matching = &self.matching_anywhere;
        let bootstrap = |s: usize| matching[s] == 0;
        let packer = Packer {
            templates: &self.templates,
            classes,
            selectors: &self.selectors,
            group_of: &self.group_of,
            group_compatible: &self.group_compatible,
            bootstrap: &bootstrap,
            resource_prices,
            smallest_demand: &self.smallest_demand,
        };
        f(&packer)
    }

    // --- Placing and taking back ---------------------------------------------------------------

    /// Puts `n` pods of class `c` on slot `slot`.
    pub fn commit(&mut self, slot: usize, c: usize, n: u64) {
        let traits = self.classes[c].traits.clone();
        self.slots[slot].state.add(&traits, n);
        if let Some(t) = self.slots[slot].template {
            self.slots[slot].mask &= self.classes[c].masks[t];
        }
        match self.slots[slot].classes.iter_mut().find(|(k, _)| *k == c) {
            Some(e) => e.1 += n,
            None => self.slots[slot].classes.push((c, n)),
        }
        for &s in &traits.matched_by {
            self.matching_anywhere[s] += n as u32;
        }
    }

    /// Opens a new node filled as `pattern`, charging its pool's limits; its pods leave `remaining`.
    pub fn open(&mut self, pattern: &Pattern, remaining: &mut [u64]) {
        let tpl = &self.templates[pattern.template];
        if let Some(left) = &mut self.remaining[tpl.pool] {
            for (left, per_node) in left.iter_mut().zip(&self.limit_use[pattern.template]) {
                *left -= per_node;
            }
        }
        for &(c, n) in &pattern.counts {
            remaining[c] -= n;
            for &s in &self.classes[c].traits.matched_by {
                self.matching_anywhere[s] += n as u32;
            }
        }
        self.slots.push(Slot {
            existing: None,
            template: Some(pattern.template),
            mask: pattern.mask,
            state: pattern.state.clone(),
            classes: pattern.counts.clone(),
        });
    }

    /// Removes the last placed pod of class `c` from the last slot holding it.
    pub fn take_back(&mut self, c: usize) {
        let Some(i) = self.slots.iter().rposition(|s| s.classes.iter().any(|(k, n)| *k == c && *n > 0))
        else {
            return;
        };
        let traits = self.classes[c].traits.clone();
        let slot = &mut self.slots[i];
        slot.state.remove(&traits, 1);
        if let Some(entry) = slot.classes.iter_mut().find(|(k, _)| *k == c) {
            entry.1 -= 1;
        }
        slot.classes.retain(|(_, n)| *n > 0);
        if slot.existing.is_none() && slot.classes.is_empty() {
            slot.template = None;
        }
        for &s in &traits.matched_by {
            self.matching_anywhere[s] -= 1;
        }
    }

    /// Moves the pods of new slot `j` onto new slot `i`, which becomes a node of template `t` with
    /// offering mask `mask`; `j` is left empty.
    pub fn merge_slots(&mut self, i: usize, j: usize, t: usize, mask: u32) {
        let mut classes = self.slots[i].classes.clone();
        for &(c, n) in &self.slots[j].classes {
            match classes.iter_mut().find(|(k, _)| *k == c) {
                Some(e) => e.1 += n,
                None => classes.push((c, n)),
            }
        }
        let state = self.state_for(&classes, t);
        let merged = &mut self.slots[i];
        merged.template = Some(t);
        merged.mask = mask;
        merged.state = state;
        merged.classes = classes;
        let emptied = &mut self.slots[j];
        emptied.classes.clear();
        emptied.template = None;
    }

    /// Makes new slot `i` a node of template `t` with offering mask `mask`, keeping its pods.
    pub fn resize_slot(&mut self, i: usize, t: usize, mask: u32) {
        let state = self.state_for(&self.slots[i].classes, t);
        let slot = &mut self.slots[i];
        slot.template = Some(t);
        slot.mask = mask;
        slot.state = state;
    }

    /// Moves one pod of class `c` from new slot `from` to new slot `to`; `from` becomes a node of
    /// template `t` with offering mask `mask`, or is left empty when that was its last pod.
    pub fn move_pod(&mut self, from: usize, to: usize, c: usize, t: usize, mask: u32) {
        self.move_pods(from, &[(c, to)], t, mask);
    }

    /// Moves one pod of each `(class, to)` from new slot `from` to new slot `to`; `from` becomes a
    /// node of template `t` with offering mask `mask`, or is left empty when no pod stays.
    pub fn move_pods(&mut self, from: usize, moves: &[(usize, usize)], t: usize, mask: u32) {
        for &(c, to) in moves {
            let source = &mut self.slots[from];
            if let Some(entry) = source.classes.iter_mut().find(|(k, _)| *k == c) {
                entry.1 -= 1;
            }
            source.classes.retain(|(_, n)| *n > 0);
            source.state.remove(&self.classes[c].traits, 1);
            let traits = &self.classes[c].traits;
            let target = &mut self.slots[to];
            target.state.add(traits, 1);
            if let Some(t) = target.template {
                target.mask &= self.classes[c].masks[t];
            }
            match target.classes.iter_mut().find(|(k, _)| *k == c) {
                Some(e) => e.1 += 1,
                None => target.classes.push((c, 1)),
            }
        }
        if self.slots[from].classes.is_empty() {
            self.slots[from].template = None;
        } else {
            self.resize_slot(from, t, mask);
        }
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

/// What one node of template `t` takes of each of its pool's limits, in the order of the pool's
/// `remaining` keys: its instance type's capacity, and 1 for `nodes`.
fn limit_use(input: &SolveInput, t: &Template) -> Vec<i64> {
    let pool = &input.nodepools[t.pool];
    let capacity = &pool.instance_types[t.instance_type].capacity;
    let Some(left) = &pool.remaining else { return vec![] };
    left.iter().map(|(name, _)| if name == NODES { 1 } else { capacity.get(name) }).collect()
}
