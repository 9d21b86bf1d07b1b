//! The solver's working model of the pods: dense resource vectors, a registry of the pod selectors
//! that topology rules use, pod *shapes* (pods that differ only in name), and the effective
//! constraints of a shape at a relaxation level.
//!
//! Twenty thousand pods usually come from a handful of workloads; grouping them into shapes first is
//! what lets the solver reason about classes of identical pods instead of single pods.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_ZONE};
use crate::model::requirements::Requirements;
use crate::model::resources::{Resources, CPU, MEMORY, PODS};
use crate::scheduling::input::{
    HostPort, Pod, PodAffinityTerm, SolveInput, Toleration, TopologySpread, Weighted, WhenUnsatisfiable,
};

/// The resource dimensions that matter in one solve, in a fixed order.
#[derive(Clone, Debug)]
pub struct Dims {
    pub names: Vec<String>,
}

impl Dims {
    /// cpu, memory and pods always; then every other resource some pod requests, sorted.
    pub fn for_input(input: &SolveInput) -> Dims {
        let mut extra = BTreeSet::new();
        for pod in input.pods.iter().map(Arc::as_ref).chain(&input.daemonsets) {
            for (name, amount) in pod.requests.iter() {
                if amount > 0 && ![CPU, MEMORY, PODS].contains(&name) {
                    extra.insert(name.to_string());
                }
            }
        }
        let mut names = vec![CPU.to_string(), MEMORY.to_string(), PODS.to_string()];
        names.extend(extra);
        Dims { names }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn vector(&self, resources: &Resources) -> Vec<i64> {
        self.names.iter().map(|n| resources.get(n)).collect()
    }

    pub fn resources(&self, vector: &[i64]) -> Resources {
        self.names.iter().zip(vector).filter(|(_, v)| **v != 0).map(|(n, v)| (n.clone(), *v)).collect()
    }
}

/// `a ≤ b` in every dimension.
pub fn fits(a: &[i64], b: &[i64]) -> bool {
    a.iter().zip(b).all(|(x, y)| x <= y)
}

/// How many copies of `item` fit in `free`.
pub fn copies_that_fit(item: &[i64], free: &[i64]) -> u64 {
    item.iter()
        .zip(free)
        .filter(|(need, _)| **need > 0)
        .map(|(need, have)| if *have <= 0 { 0 } else { (*have / *need) as u64 })
        .min()
        .unwrap_or(u64::MAX)
}

/// A selector over pods: a label selector within some namespaces. Topology rules refer to selectors
/// by index so that per-node and per-zone counters are plain vectors.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selector {
    pub namespaces: Vec<String>,
    pub labels: Requirements,
}

impl Selector {
    pub fn selects(&self, pod: &Pod) -> bool {
        self.namespaces.contains(&pod.namespace) && self.labels.matches(&pod.labels)
    }
}

/// The selectors that select pods, remembered by namespace and labels ([`Selectors::matcher`]).
pub(crate) struct Matcher<'s, 'p> {
    selectors: &'s Selectors,
    seen: HashMap<(&'p str, &'p BTreeMap<String, String>), Vec<usize>>,
}

impl<'p> Matcher<'_, 'p> {
    /// The selectors that select `pod`, ascending.
    pub fn matching(&mut self, pod: &'p Pod) -> &[usize] {
        let selectors = self.selectors;
        self.seen.entry((pod.namespace.as_str(), &pod.labels)).or_insert_with(|| selectors.matching(pod))
    }
}

/// A hash of a selector's parts, the same whether they are owned or borrowed.
fn fingerprint(namespaces: &[String], labels: &Requirements) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    namespaces.hash(&mut hasher);
    labels.hash(&mut hasher);
    hasher.finish()
}

/// Interns selectors, and the topology keys beyond the zone, hostname and capacity type that rules
/// use (each becomes a [`Scope::Label`]).
#[derive(Clone, Default, Debug)]
pub struct Selectors {
    pub list: Vec<Selector>,
    /// Selectors by a hash of their parts, so that a lookup by reference clones nothing.
    index: HashMap<u64, Vec<usize>>,
    /// The keys of the [`Scope::Label`] scopes, by index.
    pub label_keys: Vec<String>,
}

impl Selectors {
    pub fn intern(&mut self, selector: Selector) -> usize {
        if let Some(i) = self.find(&selector.namespaces, &selector.labels) {
            return i;
        }
        let at = self.list.len();
        self.index.entry(fingerprint(&selector.namespaces, &selector.labels)).or_default().push(at);
        self.list.push(selector);
        at
    }

    /// [`Self::intern`] by parts, cloning them only for a selector not seen before (nearly every pod
    /// of a workload repeats its selectors).
    pub fn intern_ref(&mut self, namespaces: &[String], labels: &Requirements) -> usize {
        match self.find(namespaces, labels) {
            Some(i) => i,
            None => self.intern(Selector { namespaces: namespaces.to_vec(), labels: labels.clone() }),
        }
    }

    /// The index of the selector with these parts, if it is interned.
    pub fn find(&self, namespaces: &[String], labels: &Requirements) -> Option<usize> {
        let candidates = self.index.get(&fingerprint(namespaces, labels))?;
        candidates
            .iter()
            .copied()
            .find(|&i| self.list[i].namespaces == namespaces && self.list[i].labels == *labels)
    }

    /// The selectors that select `pod`, ascending.
    pub fn matching(&self, pod: &Pod) -> Vec<usize> {
        (0..self.list.len()).filter(|&i| self.list[i].selects(pod)).collect()
    }

    /// [`Self::matching`] for many pods, each namespace and set of labels matched once: the pods of
    /// one workload share them.
    pub(crate) fn matcher<'p>(&self) -> Matcher<'_, 'p> {
        Matcher { selectors: self, seen: HashMap::new() }
    }

    /// The scope of a topology key, interning a key other than the three well-known ones.
    pub fn intern_key(&mut self, key: &str) -> Scope {
        if let Some(scope) = self.scope_of(key) {
            return scope;
        }
        self.label_keys.push(key.to_string());
        Scope::Label(self.label_keys.len() as u16 - 1)
    }

    /// The scope of a topology key, if some rule uses it.
    pub fn scope_of(&self, key: &str) -> Option<Scope> {
        Scope::of(key)
            .or_else(|| self.label_keys.iter().position(|k| k == key).map(|i| Scope::Label(i as u16)))
    }

    /// The label key of a scope.
    pub fn key_of(&self, scope: Scope) -> &str {
        match scope {
            Scope::Label(i) => &self.label_keys[i as usize],
            _ => scope.well_known_key().expect("the three well-known scopes have a key"),
        }
    }

    /// Every scope whose domains are assigned before packing: all but the hostname.
    pub fn domain_scopes(&self) -> Vec<Scope> {
        let labels = (0..self.label_keys.len() as u16).map(Scope::Label);
        [Scope::Zone, Scope::CapacityType].into_iter().chain(labels).collect()
    }
}

/// Where a topology rule applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    Hostname,
    Zone,
    CapacityType,
    /// Any other node label: a key some NodePool's requirements or labels, or an instance type's
    /// labels, define (the index of [`Selectors::label_keys`]).
    Label(u16),
}

impl Scope {
    /// The scope of one of the three well-known keys.
    pub fn of(key: &str) -> Option<Scope> {
        match key {
            LABEL_HOSTNAME => Some(Scope::Hostname),
            LABEL_ZONE => Some(Scope::Zone),
            LABEL_CAPACITY_TYPE => Some(Scope::CapacityType),
            _ => None,
        }
    }

    fn well_known_key(self) -> Option<&'static str> {
        match self {
            Scope::Hostname => Some(LABEL_HOSTNAME),
            Scope::Zone => Some(LABEL_ZONE),
            Scope::CapacityType => Some(LABEL_CAPACITY_TYPE),
            Scope::Label(_) => None,
        }
    }
}

/// One topology rule of a pod, with its selector interned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// At most `max_skew` more matching pods in a domain than in the emptiest eligible domain.
    Spread { scope: Scope, selector: usize, max_skew: u32, min_domains: Option<u32> },
    /// The domain must already hold a matching pod (or the pod bootstraps it when it matches itself).
    Affinity { scope: Scope, selector: usize, self_matching: bool },
    /// The domain must hold no matching pod.
    AntiAffinity { scope: Scope, selector: usize },
}

impl Rule {
    pub fn scope(&self) -> Scope {
        match *self {
            Rule::Spread { scope, .. } | Rule::Affinity { scope, .. } | Rule::AntiAffinity { scope, .. } => {
                scope
            }
        }
    }
}

/// The constraints a pod must meet at one relaxation level.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Effective {
    /// The chosen required node-affinity term ∩ the heaviest preferred term still honoured.
    pub requirements: Requirements,
    pub rules: Vec<Rule>,
}

/// Pods that differ only in their names: the unit the solver reasons about.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Indices into `SolveInput::pods`, in input order.
    pub pods: Vec<usize>,
    pub demand: Vec<i64>,
    /// Selectors that select these pods.
    pub matched_by: Vec<usize>,
    /// How many preferences can be given up, in upstream's order (see [`Shape::effective`]).
    pub relaxable_steps: usize,
}

/// Everything about a pod that affects where it may go, by reference: the grouping key of shapes.
#[derive(Hash, PartialEq, Eq)]
struct ShapeKey<'a> {
    namespace: &'a str,
    relevant_labels: Vec<(&'a str, &'a str)>,
    requests: &'a Resources,
    required_terms: &'a [Requirements],
    preferred_terms: &'a [Weighted<Requirements>],
    tolerations: &'a [Toleration],
    topology_spread: &'a [TopologySpread],
    affinity: &'a [PodAffinityTerm],
    anti_affinity: &'a [PodAffinityTerm],
    preferred_affinity: &'a [Weighted<PodAffinityTerm>],
    preferred_anti_affinity: &'a [Weighted<PodAffinityTerm>],
    host_ports: &'a [HostPort],
    volume_zones: &'a Option<Vec<String>>,
}

/// Label keys some selector of `pods` looks at: only these make pods' labels matter for grouping.
pub(crate) fn relevant_label_keys<'a>(pods: impl Iterator<Item = &'a Pod>) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for pod in pods {
        let terms =
            all_terms(pod).map(|t| &t.selector).chain(pod.topology_spread.iter().map(|s| &s.selector));
        for selector in terms {
            for key in selector.keys() {
                // Most pods repeat a handful of keys: allocate only for a new one.
                if !keys.contains(key) {
                    keys.insert(key.to_string());
                }
            }
        }
    }
    keys
}

/// Groups the pending pods into shapes (in order of first appearance) and interns every selector
/// their rules and the running pods' rules use.
pub fn build_shapes(input: &SolveInput, dims: &Dims, selectors: &mut Selectors) -> Vec<Shape> {
    let relevant = relevant_label_keys(input.pods.iter().chain(&input.running).map(Arc::as_ref));
    intern_rules(input.pods.iter().chain(&input.running).map(Arc::as_ref), selectors);
    group_shapes(input, dims, &relevant, selectors)
}

/// Interns every selector and topology key the rules of `pods` use.
pub(crate) fn intern_rules<'a>(pods: impl Iterator<Item = &'a Pod>, selectors: &mut Selectors) {
    for pod in pods {
        for t in all_terms(pod) {
            selectors.intern_ref(&t.namespaces, &t.selector);
        }
        for s in &pod.topology_spread {
            selectors.intern_ref(std::slice::from_ref(&pod.namespace), &s.selector);
        }
        let keys = pod.topology_spread.iter().map(|s| &s.topology_key);
        for key in keys.chain(all_terms(pod).map(|t| &t.topology_key)) {
            selectors.intern_key(key);
        }
    }
}

/// Groups the pending pods into shapes (in order of first appearance), with the selectors that
/// select each; every selector a rule uses is interned already.
pub(crate) fn group_shapes(
    input: &SolveInput,
    dims: &Dims,
    relevant: &BTreeSet<String>,
    selectors: &Selectors,
) -> Vec<Shape> {
    let mut index: HashMap<ShapeKey, usize> = HashMap::new();
    let mut shapes: Vec<Shape> = vec![];
    for (i, pod) in input.pods.iter().enumerate() {
        let key = ShapeKey {
            namespace: &pod.namespace,
            relevant_labels: pod
                .labels
                .iter()
                .filter(|(k, _)| relevant.contains(*k))
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect(),
            requests: &pod.requests,
            required_terms: &pod.required_terms,
            preferred_terms: &pod.preferred_terms,
            tolerations: &pod.tolerations,
            topology_spread: &pod.topology_spread,
            affinity: &pod.affinity,
            anti_affinity: &pod.anti_affinity,
            preferred_affinity: &pod.preferred_affinity,
            preferred_anti_affinity: &pod.preferred_anti_affinity,
            host_ports: &pod.host_ports,
            volume_zones: &pod.volume_zones,
        };
        match index.get(&key) {
            Some(&s) => shapes[s].pods.push(i),
            None => {
                index.insert(key, shapes.len());
                let relaxable_steps = pod.preferred_affinity.len()
                    + pod.preferred_anti_affinity.len()
                    + pod.preferred_terms.len()
                    + pod
                        .topology_spread
                        .iter()
                        .filter(|s| s.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway)
                        .count();
                shapes.push(Shape {
                    pods: vec![i],
                    demand: dims.vector(&pod.requests),
                    matched_by: vec![],
                    relaxable_steps,
                });
            }
        }
    }
    for shape in &mut shapes {
        shape.matched_by = selectors.matching(&input.pods[shape.pods[0]]);
    }
    shapes
}

fn all_terms(pod: &Pod) -> impl Iterator<Item = &PodAffinityTerm> {
    pod.affinity
        .iter()
        .chain(&pod.anti_affinity)
        .chain(pod.preferred_affinity.iter().map(|w| &w.term))
        .chain(pod.preferred_anti_affinity.iter().map(|w| &w.term))
}

fn by_weight<T: Clone>(list: &[Weighted<T>]) -> Vec<T> {
    let mut sorted: Vec<&Weighted<T>> = list.iter().collect();
    // Stable: equal weights keep their written order.
    sorted.sort_by_key(|w| std::cmp::Reverse(w.weight));
    sorted.into_iter().map(|w| w.term.clone()).collect()
}

impl Shape {
    /// The constraints of this shape's pods after giving up the first `level` preferences, in
    /// upstream's relaxation order: preferred pod affinity, preferred pod anti-affinity, preferred
    /// node affinity, then ScheduleAnyway spreads (heaviest first within each kind). `term` picks
    /// which required node-affinity term is used (terms are alternatives).
    pub fn effective(&self, pod: &Pod, level: usize, term: usize, selectors: &Selectors) -> Effective {
        let mut skip = level;
        let mut take = |list: Vec<PodAffinityTerm>| -> Vec<PodAffinityTerm> {
            let dropped = skip.min(list.len());
            skip -= dropped;
            list.into_iter().skip(dropped).collect()
        };
        let preferred_affinity = take(by_weight(&pod.preferred_affinity));
        let preferred_anti = take(by_weight(&pod.preferred_anti_affinity));
        let preferred_nodes = by_weight(&pod.preferred_terms);
        let dropped_nodes = skip.min(preferred_nodes.len());
        skip -= dropped_nodes;
        let soft_spreads: Vec<&TopologySpread> = pod
            .topology_spread
            .iter()
            .filter(|s| s.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway)
            .collect();
        let dropped_spreads = skip.min(soft_spreads.len());

        let mut requirements = pod.required_terms.get(term).cloned().unwrap_or_default();
        if let Some(preferred) = preferred_nodes.get(dropped_nodes) {
            requirements = requirements.intersect(preferred);
        }
        let find = |namespaces: &[String], labels: &Requirements| {
            selectors.find(namespaces, labels).expect("selectors are interned")
        };
        let mut rules = vec![];
        for t in pod.affinity.iter().chain(&preferred_affinity) {
            if let Some(scope) = selectors.scope_of(&t.topology_key) {
                let selector = find(&t.namespaces, &t.selector);
                rules.push(Rule::Affinity { scope, selector, self_matching: t.selects(pod) });
            }
        }
        for t in pod.anti_affinity.iter().chain(&preferred_anti) {
            if let Some(scope) = selectors.scope_of(&t.topology_key) {
                let selector = find(&t.namespaces, &t.selector);
                rules.push(Rule::AntiAffinity { scope, selector });
            }
        }
        let hard =
            pod.topology_spread.iter().filter(|s| s.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule);
        for s in hard.chain(soft_spreads.into_iter().skip(dropped_spreads)) {
            if let Some(scope) = selectors.scope_of(&s.topology_key) {
                let selector = find(std::slice::from_ref(&pod.namespace), &s.selector);
                rules.push(Rule::Spread {
                    scope,
                    selector,
                    max_skew: s.max_skew.max(1),
                    min_domains: s.min_domains,
                });
            }
        }
        Effective { requirements, rules }
    }
}
