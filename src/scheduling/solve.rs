//! The solver: from a [`SolveInput`] to a [`Plan`].
//!
//! 1. Pods are grouped into shapes ([`crate::scheduling::shapes`]); each shape is tried with all its
//!    preferences honoured first (relaxation level 0).
//! 2. Zone- and capacity-type-scoped topology rules pin each pod to a domain
//!    ([`crate::scheduling::topology`]); pods of a shape with the same domain form a class.
//! 3. Classes fill existing and in-flight nodes first (free capacity), largest first.
//! 4. What is left goes onto new nodes in NodePool weight order ([`crate::scheduling::slots`]):
//!    whole copies of the configuration LP's node patterns first ([`crate::scheduling::colgen`]),
//!    then the greedy packer for the remainder ([`crate::scheduling::pack`]), both valuing pods at
//!    the lower bound's dual prices ([`crate::scheduling::bound`]); zone spread is repaired where
//!    pods could not be placed ([`crate::scheduling::spread`]).
//! 5. Pods that did not fit give up one more preference, in upstream's order, and go round again;
//!    pods with nothing left to give up are reported with a reason ([`crate::scheduling::explain`]).
//! 6. Pairs of new nodes are merged where one cheaper node holds both ([`crate::scheduling::improve`]);
//!    new nodes are right-sized and turned into NodeClaims ([`crate::scheduling::claims`]), and the
//!    plan reports the larger of two certified lower bounds.

use std::collections::{BTreeMap, HashMap};

use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_ZONE};
use crate::model::requirements::{Requirement, Requirements};
use crate::scheduling::bound::{self, BoundClass};
use crate::scheduling::claims;
use crate::scheduling::explain;
use crate::scheduling::improve;
use crate::scheduling::input::{tolerates_all, SolveInput};
use crate::scheduling::node::{NodeState, PodTraits};
use crate::scheduling::plan::{Plan, Unschedulable};
use crate::scheduling::shapes::{build_shapes, Dims, Rule, Scope, Selectors, Shape};
use crate::scheduling::templates::{self, Template};
use crate::scheduling::topology::{Assignment, Domains};

/// A pod waiting to be placed: (shape, pod index, relaxation level).
type PendingPod = (usize, usize, usize);
/// A pod that could not be placed this round, with the reason.
type Failure = (usize, usize, usize, String);
/// A shape's constraints at one level: effective rules, the term chosen, eligible zones and capacity types.
type ShapeAtLevel = (crate::scheduling::shapes::Effective, usize, Vec<String>, Vec<String>);

/// A group of identical pods with one domain assignment at one relaxation level.
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
    /// The zones and capacity types its pods could have been given.
    pub eligible_zones: Vec<String>,
    pub eligible_capacity_types: Vec<String>,
}

impl Class {
    pub fn eligible(&self, scope: Scope) -> &[String] {
        match scope {
            Scope::Zone => &self.eligible_zones,
            _ => &self.eligible_capacity_types,
        }
    }
}

/// A node being planned: an existing node, or a new one from a template.
pub(crate) struct Slot {
    pub existing: Option<usize>,
    pub template: Option<usize>,
    pub mask: u32,
    pub state: NodeState,
    /// `(class, count)` in placement order.
    pub classes: Vec<(usize, u64)>,
}

/// The solver's working state across relaxation rounds.
pub(crate) struct Solver<'a> {
    pub input: &'a SolveInput,
    pub dims: Dims,
    pub selectors: Selectors,
    pub shapes: Vec<Shape>,
    pub templates: Vec<Template>,
    pub classes: Vec<Class>,
    pub slots: Vec<Slot>,
    /// Pods matching each selector anywhere (for hostname affinity bootstrapping).
    pub matching_anywhere: Vec<u32>,
    pub domains: Domains,
    /// Remaining limits per pool (resources of instance-type capacity, plus `nodes`).
    pub remaining: Vec<Option<crate::model::resources::Resources>>,
    pub(crate) pair_memo: HashMap<(usize, usize), bool>,
    compat_memo: HashMap<(usize, Requirements), Vec<u32>>,
}

/// Solves one batch. Pure and deterministic.
pub fn solve(input: &SolveInput) -> Plan {
    let mut solver = Solver::new(input);
    let unschedulable = solver.run();
    improve::merge_nodes(&mut solver);
    claims::build_plan(&mut solver, unschedulable)
}

impl<'a> Solver<'a> {
    fn new(input: &'a SolveInput) -> Self {
        let dims = Dims::for_input(input);
        let mut selectors = Selectors::default();
        let shapes = build_shapes(input, &dims, &mut selectors);
        let templates = templates::build(input, &dims);
        let domains = Domains::from_running(input, &selectors);
        let mut solver = Solver {
            input,
            dims,
            selectors,
            shapes,
            templates,
            classes: vec![],
            slots: vec![],
            matching_anywhere: vec![],
            domains,
            remaining: input.nodepools.iter().map(|p| p.remaining.clone()).collect(),
            pair_memo: HashMap::new(),
            compat_memo: HashMap::new(),
        };
        solver.matching_anywhere = vec![0; solver.selectors.list.len()];
        solver.init_existing();
        solver
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
        for pod in &self.input.running {
            let matched = self.selectors.matching(pod);
            for &s in &matched {
                self.matching_anywhere[s] += 1;
            }
            let Some(&i) = pod.node_name.as_deref().and_then(|n| index.get(n)) else { continue };
            let rules: Vec<Rule> = pod
                .anti_affinity
                .iter()
                .filter(|t| t.topology_key == crate::model::labels::LABEL_HOSTNAME)
                .filter_map(|t| {
                    let sel = crate::scheduling::shapes::Selector {
                        namespaces: t.namespaces.clone(),
                        labels: t.selector.clone(),
                    };
                    self.selectors.list.iter().position(|x| *x == sel)
                })
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

    /// Runs relaxation rounds until every pod is placed or has nothing left to relax.
    fn run(&mut self) -> Vec<Unschedulable> {
        let mut pending: Vec<PendingPod> = vec![];
        for (s, shape) in self.shapes.iter().enumerate() {
            for &p in &shape.pods {
                pending.push((s, p, 0));
            }
        }
        let mut failed: Vec<Unschedulable> = vec![];
        while !pending.is_empty() {
            let (batch, topology_failures) = self.classify(&pending);
            let mut unplaced: Vec<Failure> = topology_failures;
            let before = self.classes.len();
            self.classes.extend(batch);
            let ids: Vec<usize> = (before..self.classes.len()).collect();
            let mut remaining = self.place(&ids);
            let mut reasons: BTreeMap<usize, String> = BTreeMap::new();
            for &class in &ids {
                if remaining[class] == 0 {
                    continue;
                }
                reasons.insert(class, explain::why_not(self, class));
                let c = &self.classes[class];
                for _ in 0..remaining[class] {
                    // The pod's domain counted for topology; it is not there after all.
                    self.domains.unassign(&self.shapes[c.shape].matched_by, &c.rules, &c.assignment);
                }
            }
            self.enforce_spread(&ids, &mut remaining, &mut reasons);
            for &class in &ids {
                let c = &self.classes[class];
                let placed = c.pods.len() - remaining[class] as usize;
                for &p in &c.pods[placed..] {
                    unplaced.push((c.shape, p, c.level, reasons[&class].clone()));
                }
            }
            pending.clear();
            for (shape, pod, level, reason) in unplaced {
                if level < self.shapes[shape].relaxable_steps {
                    pending.push((shape, pod, level + 1));
                } else {
                    failed.push(Unschedulable { pod: self.input.pods[pod].id(), reason });
                }
            }
            pending.sort();
        }
        failed.sort_by(|a, b| a.pod.cmp(&b.pod));
        failed
    }

    /// Builds the classes of a round: effective constraints, domains, template masks.
    fn classify(&mut self, pending: &[PendingPod]) -> (Vec<Class>, Vec<Failure>) {
        let mut failures = vec![];
        let mut groups: BTreeMap<(usize, usize, usize, Assignment), Vec<usize>> = BTreeMap::new();
        let mut cache: HashMap<(usize, usize), ShapeAtLevel> = HashMap::new();
        for &(s, p, level) in pending {
            if let std::collections::hash_map::Entry::Vacant(slot) = cache.entry((s, level)) {
                slot.insert(self.effective_for(s, level));
            }
            let (effective, term, zones, capacity_types) = &cache[&(s, level)];
            match self.domains.assign(&self.shapes[s].matched_by, &effective.rules, zones, capacity_types) {
                Ok(assignment) => groups.entry((s, level, *term, assignment)).or_default().push(p),
                Err(reason) => failures.push((s, p, level, reason)),
            }
        }
        let mut classes = vec![];
        for ((s, level, _term, assignment), pods) in groups {
            let (effective, _, eligible_zones, eligible_capacity_types) = &cache[&(s, level)];
            let (eligible_zones, eligible_capacity_types) =
                (eligible_zones.clone(), eligible_capacity_types.clone());
            let mut requirements = effective.requirements.clone();
            if let Some(z) = &assignment.zone {
                requirements.add(Requirement::is_in(LABEL_ZONE, [z.clone()]));
            }
            if let Some(c) = &assignment.capacity_type {
                requirements.add(Requirement::is_in(LABEL_CAPACITY_TYPE, [c.clone()]));
            }
            let shape = &self.shapes[s];
            let pod = &self.input.pods[shape.pods[0]];
            let traits = PodTraits::new(
                shape.demand.clone(),
                shape.matched_by.clone(),
                &effective.rules,
                pod.host_ports.clone(),
            );
            let per_node_limit = per_node_limit(&traits);
            let masks = self.masks(s, &requirements);
            let rules = effective.rules.clone();
            classes.push(Class {
                shape: s,
                level,
                pods,
                requirements,
                traits,
                masks,
                per_node_limit,
                assignment,
                rules,
                eligible_zones,
                eligible_capacity_types,
            });
        }
        (classes, failures)
    }

    /// The effective constraints of a shape at a level, the required term chosen, and the zones and
    /// capacity types its pods may be assigned to.
    fn effective_for(&mut self, s: usize, level: usize) -> ShapeAtLevel {
        let pod = &self.input.pods[self.shapes[s].pods[0]];
        let terms = pod.required_terms.len().max(1);
        let mut chosen = None;
        for term in 0..terms {
            let effective = self.shapes[s].effective(pod, level, term, &self.selectors);
            let requirements = with_volume_zones(&effective.requirements, pod);
            let masks = self.masks(s, &requirements);
            let homes = masks.iter().any(|m| *m != 0) || self.existing_homes(s, &requirements);
            if homes || term + 1 == terms {
                chosen = Some((effective, term, requirements, masks));
                if homes {
                    break;
                }
            }
        }
        let (mut effective, term, requirements, masks) = chosen.expect("at least one term is tried");
        effective.requirements = requirements;
        let (zones, capacity_types) = self.eligible_domains(&effective.requirements, &masks);
        (effective, term, zones, capacity_types)
    }

    fn existing_homes(&self, s: usize, requirements: &Requirements) -> bool {
        let pod = &self.input.pods[self.shapes[s].pods[0]];
        self.input
            .nodes
            .iter()
            .any(|n| requirements.matches(&n.labels) && tolerates_all(&pod.tolerations, &n.taints))
    }

    /// Zones and capacity types reachable through templates (by their masks) or existing nodes.
    fn eligible_domains(&self, requirements: &Requirements, masks: &[u32]) -> (Vec<String>, Vec<String>) {
        let mut zones = std::collections::BTreeSet::new();
        let mut capacity_types = std::collections::BTreeSet::new();
        for (t, &mask) in masks.iter().enumerate() {
            for (i, o) in self.templates[t].offerings.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    zones.insert(o.zone.clone());
                    capacity_types.insert(o.capacity_type.as_str().to_string());
                }
            }
        }
        for n in &self.input.nodes {
            if requirements.matches(&n.labels) {
                if let Some(z) = n.labels.get(LABEL_ZONE) {
                    zones.insert(z.clone());
                }
                if let Some(c) = n.labels.get(LABEL_CAPACITY_TYPE) {
                    capacity_types.insert(c.clone());
                }
            }
        }
        (zones.into_iter().collect(), capacity_types.into_iter().collect())
    }

    /// Offering masks of every template for a shape's tolerations and demand with `requirements`.
    pub(crate) fn masks(&mut self, s: usize, requirements: &Requirements) -> Vec<u32> {
        if let Some(m) = self.compat_memo.get(&(s, requirements.clone())) {
            return m.clone();
        }
        let pod = &self.input.pods[self.shapes[s].pods[0]];
        let mut masks = vec![0u32; self.templates.len()];
        for (t, mask) in templates::compatible(
            self.input,
            &self.templates,
            requirements,
            &pod.tolerations,
            &self.shapes[s].demand,
        ) {
            masks[t] = mask;
        }
        self.compat_memo.insert((s, requirements.clone()), masks.clone());
        masks
    }

    /// Whether two classes may share a node: their requirements have a common outcome for every key.
    pub(crate) fn pair_ok(&mut self, a: usize, b: usize) -> bool {
        let key = (a.min(b), a.max(b));
        if let Some(&ok) = self.pair_memo.get(&key) {
            return ok;
        }
        let joint = self.classes[a].requirements.intersect(&self.classes[b].requirements);
        let ok = joint.first_empty().is_none();
        self.pair_memo.insert(key, ok);
        ok
    }

    /// Places the classes of a round; returns the pods that found no node, per class.
    fn place(&mut self, ids: &[usize]) -> Vec<u64> {
        let mut order: Vec<usize> = ids.to_vec();
        let mut remaining: Vec<u64> = vec![0; self.classes.len()];
        for &c in ids {
            remaining[c] = self.classes[c].pods.len() as u64;
        }
        let (bound, _) = self.bound_for(ids, &remaining);
        let values = self.values(ids, &bound);
        order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then_with(|| a.cmp(&b)));
        self.fill_existing(&order, &mut remaining);
        self.pack_new(&order, &mut remaining, &values, &bound.resource_prices);
        // The first pods of each class are the placed ones, handed out in slot order.
        remaining
    }

    /// Per-pod values from the lower bound's duals, with a fallback for classes the LP leaves at 0.
    fn values(&self, ids: &[usize], bound: &bound::Bound) -> Vec<f64> {
        let mut values = vec![0.0; self.classes.len()];
        for (k, &c) in ids.iter().enumerate() {
            // A tiny share of the cheapest node that could hold it keeps zero-valued pods ordered.
            let fallback = self.cheapest_share(c) * 1e-6;
            values[c] = bound.values[k] + fallback;
        }
        values
    }

    fn cheapest_share(&self, c: usize) -> f64 {
        let class = &self.classes[c];
        class
            .masks
            .iter()
            .enumerate()
            .filter(|(_, m)| **m != 0)
            .map(|(t, m)| {
                let tpl = &self.templates[t];
                let share = tpl.dominant_share(&class.traits.demand);
                tpl.price(*m) * share
            })
            .fold(f64::INFINITY, f64::min)
            .min(1e6)
    }

    /// The bound over `ids` with `counts` pods each.
    pub(crate) fn bound_for(&self, ids: &[usize], counts: &[u64]) -> (bound::Bound, Vec<i64>) {
        let free = self.existing_free();
        let bound_classes: Vec<BoundClass> = ids
            .iter()
            .map(|&c| {
                let class = &self.classes[c];
                BoundClass {
                    demand: &class.traits.demand,
                    count: counts[c],
                    templates: class
                        .masks
                        .iter()
                        .enumerate()
                        .filter(|(_, m)| **m != 0)
                        .map(|(t, _)| t)
                        .collect(),
                    per_node: class.per_node_limit,
                }
            })
            .collect();
        let existing = self.input.nodes.len() as u64;
        (bound::compute(&bound_classes, &self.templates, &free, existing), free)
    }

    /// Free capacity summed over existing nodes before this solve placed anything.
    fn existing_free(&self) -> Vec<i64> {
        let mut free = vec![0i64; self.dims.len()];
        for slot in self.slots.iter().filter(|s| s.existing.is_some()) {
            let mut f = slot.state.free.clone();
            for &(c, n) in &slot.classes {
                for (x, d) in f.iter_mut().zip(&self.classes[c].traits.demand) {
                    *x += d * n as i64;
                }
            }
            for (acc, x) in free.iter_mut().zip(f) {
                *acc += x.max(0);
            }
        }
        free
    }
}

/// At most this many pods of a class fit on one node because of its own per-node rules.
fn per_node_limit(traits: &PodTraits) -> Option<u64> {
    let mut limit: Option<u64> = None;
    let mut tighten = |n: u64| limit = Some(limit.map_or(n, |l| l.min(n)));
    for rule in &traits.rules {
        match *rule {
            Rule::AntiAffinity { selector, .. } if traits.matched_by.binary_search(&selector).is_ok() => {
                tighten(1)
            }
            Rule::Spread { selector, max_skew, .. } if traits.matched_by.binary_search(&selector).is_ok() => {
                tighten(max_skew as u64)
            }
            _ => {}
        }
    }
    if !traits.host_ports.is_empty() {
        tighten(1);
    }
    limit
}

/// Bound volumes pin zones like a node requirement.
fn with_volume_zones(requirements: &Requirements, pod: &crate::scheduling::input::Pod) -> Requirements {
    match &pod.volume_zones {
        Some(zones) => {
            let mut r = requirements.clone();
            r.add(Requirement::is_in(LABEL_ZONE, zones.iter().cloned()));
            r
        }
        None => requirements.clone(),
    }
}
