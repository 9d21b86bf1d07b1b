//! An independent feasibility checker for plans: given the solver's input and a [`Plan`], it lists every
//! rule the plan breaks (fit, instance types and offerings, prices, selectors, taints, topology spread,
//! pod (anti-)affinity, host ports, volume zones, NodePool limits, DaemonSet overhead).
//!
//! It shares no code with the solver beyond the data types and the primitive predicates
//! ([`Requirements::matches`], [`tolerates_all`], [`HostPort::conflicts`], [`selection`]): it rebuilds
//! every node of the plan as a label map with its pods and checks each rule with plain loops over pods
//! and nodes, favouring clarity over speed (quadratic in places; meant for tests and small inputs).
//!
//! Simplifications, each chosen so that a plan upstream Karpenter could produce is never rejected:
//! - Topology spread checks the *final* state: a domain that received a placed pod carrying a
//!   DoNotSchedule constraint may hold at most `min + maxSkew` matching pods, `min` taken over the
//!   eligible domains (zero when fewer than `minDomains`). Eligible zones and capacity types are those of
//!   available offerings, of types that could hold the pod alone, in pools whose taints it tolerates and
//!   whose requirements meet one of its terms, plus those of existing nodes it could use. Eligible
//!   hostnames are the nodes of the plan (existing and new) the pod could use.
//! - Required pod affinity: the pod's domain must hold another selected pod, unless the pod selects
//!   itself and no other pod anywhere is selected (it was the first of its group).
//! - NodePool limits sum the *capacity* of each claim's chosen type (not the max over its options).
//! - Startup taints are ignored for scheduling, as upstream ignores them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use crate::apis::Taint;
use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_NODEPOOL, LABEL_ZONE};
use crate::model::requirements::Requirements;
use crate::model::resources::{Resources, NODES};
use crate::model::selection::{allowed_offerings, offering_labels, type_allowed};
use crate::model::{InstanceType, Offering};
use crate::scheduling::input::{tolerates_all, NodePoolInput, Pod, PodId, SolveInput, WhenUnsatisfiable};
use crate::scheduling::plan::{NewNodeClaim, Plan};

/// Which rule a plan breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// Every pending pod placed or reported exactly once; no unknown pods or nodes; reasons given.
    Accounting,
    /// Requests within allocatable; `allocatable`/`requests` fields consistent.
    Capacity,
    /// Chosen type and options exist in the pool and can hold the pods.
    InstanceType,
    /// Chosen offering exists, is available, and is priced as stated.
    Offering,
    /// The plan's total price is the sum of its claims.
    Price,
    /// Node labels meet each pod's required node affinity and the claim's and pool's requirements.
    NodeSelection,
    /// A claim's requirements pin the zone or capacity type its pods' topology depends on.
    DomainNotPinned,
    Taints,
    TopologySpread,
    PodAntiAffinity,
    PodAffinity,
    HostPorts,
    VolumeZones,
    Limits,
    /// A claim's DaemonSet overhead leaves out DaemonSet pods that will land on it.
    DaemonOverhead,
}

/// One broken rule, with a message naming the pod or node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    pub rule: Rule,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.rule, self.message)
    }
}

/// Checks `plan` against `input`; `Err` lists every violation found (sorted, deduplicated).
pub fn check(input: &SolveInput, plan: &Plan) -> Result<(), Vec<Violation>> {
    let mut pending_by_id = HashMap::new();
    for pod in &input.pods {
        pending_by_id.entry(pod.id()).or_insert(pod.as_ref());
    }
    let mut checker = Checker { input, pending_by_id, violations: BTreeSet::new() };
    let nodes = checker.build_nodes(plan);
    checker.check_accounting(plan);
    checker.check_claims(plan);
    checker.check_limits(plan);
    for node in &nodes {
        checker.check_node(node);
    }
    let world = World::new(input, &nodes);
    checker.check_topology_spread(&world);
    checker.check_anti_affinity(&world);
    checker.check_affinity(&world);
    if checker.violations.is_empty() {
        Ok(())
    } else {
        Err(checker.violations.into_iter().collect())
    }
}

/// A node of the plan, existing or new, with everything the rules look at.
struct NodeView<'a> {
    name: String,
    labels: BTreeMap<String, String>,
    /// Taints that block scheduling (startup taints removed).
    taints: Vec<Taint>,
    allocatable: Resources,
    running: Vec<&'a Pod>,
    placed: Vec<&'a Pod>,
    /// DaemonSet pods that will run on a new node (empty for existing nodes: theirs are running).
    daemons: Vec<&'a Pod>,
    claim: Option<&'a NewNodeClaim>,
}

mod topology;
use topology::World;

struct Checker<'a> {
    input: &'a SolveInput,
    /// The pending pods by id (the first of a repeated id), so a plan's pods are looked up once each.
    pending_by_id: HashMap<PodId, &'a Pod>,
    violations: BTreeSet<Violation>,
}

impl<'a> Checker<'a> {
    fn fail(&mut self, rule: Rule, message: String) {
        self.violations.insert(Violation { rule, message });
    }

    fn pending(&self, id: &str) -> Option<&'a Pod> {
        self.pending_by_id.get(id).copied()
    }

    fn pool(&self, name: &str) -> Option<&'a NodePoolInput> {
        self.input.nodepools.iter().find(|p| p.name == name)
    }

    fn build_nodes(&mut self, plan: &'a Plan) -> Vec<NodeView<'a>> {
        let mut nodes = Vec::new();
        for node in &self.input.nodes {
            let ignored =
                |t: &Taint| node.startup_taints.iter().any(|s| s.key == t.key && s.effect == t.effect);
            let mut labels: BTreeMap<String, String> =
                node.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            labels.entry(LABEL_HOSTNAME.to_string()).or_insert_with(|| node.name.clone());
            let placed = plan.existing.get(&node.name).into_iter().flatten();
            nodes.push(NodeView {
                name: node.name.clone(),
                labels,
                taints: node.taints.iter().filter(|t| !ignored(t)).cloned().collect(),
                allocatable: node.allocatable.clone(),
                running: self
                    .input
                    .running
                    .iter()
                    .filter(|p| p.node_name.as_deref() == Some(&node.name))
                    .map(Arc::as_ref)
                    .collect(),
                placed: placed.filter_map(|id| self.pending(id)).collect(),
                daemons: vec![],
                claim: None,
            });
        }
        for name in plan.existing.keys() {
            if !self.input.nodes.iter().any(|n| &n.name == name) {
                self.fail(Rule::Accounting, format!("plan places pods on unknown existing node {name}"));
            }
        }
        for claim in &plan.nodeclaims {
            let Some(pool) = self.pool(&claim.nodepool) else {
                self.fail(Rule::InstanceType, format!("{}: unknown nodepool {}", claim.name, claim.nodepool));
                continue;
            };
            let Some((labels, allocatable)) = self.claim_labels(claim, pool) else { continue };
            let mut taints = pool.taints.clone();
            taints.extend(claim.taints.iter().filter(|t| !pool.taints.contains(t)).cloned());
            nodes.push(NodeView {
                name: claim.name.clone(),
                daemons: self.daemons_for(pool, &labels),
                labels,
                taints,
                allocatable,
                running: vec![],
                placed: claim.pods.iter().filter_map(|id| self.pending(id)).collect(),
                claim: Some(claim),
            });
        }
        nodes
    }

    /// The labels a new node will carry and its type's allocatable; `None` (after recording why) when
    /// the claim's instance type or offering does not exist.
    fn claim_labels(
        &mut self,
        claim: &NewNodeClaim,
        pool: &'a NodePoolInput,
    ) -> Option<(BTreeMap<String, String>, Resources)> {
        let Some(it) = pool.instance_types.iter().find(|t| t.name == claim.instance_type) else {
            let message = format!(
                "{}: instance type {} is not in nodepool {}",
                claim.name, claim.instance_type, pool.name
            );
            self.fail(Rule::InstanceType, message);
            return None;
        };
        let Some(offering) = find_offering(it, &claim.zone, claim.capacity_type.as_str()) else {
            let message = format!(
                "{}: {} has no {} offering in {}",
                claim.name,
                it.name,
                claim.capacity_type.as_str(),
                claim.zone
            );
            self.fail(Rule::Offering, message);
            return None;
        };
        let mut labels = node_labels(pool, it, offering);
        labels.insert(LABEL_HOSTNAME.to_string(), claim.name.clone());
        // Labels the claim adds from single-valued requirements must not contradict what the pool, type
        // and offering impose; the rest (custom labels pinned by pods) join the node's labels.
        for (k, v) in &claim.labels {
            match labels.get(k) {
                Some(derived) if derived != v && k != LABEL_HOSTNAME => {
                    let message = format!("{}: label {k}={v} contradicts {k}={derived}", claim.name);
                    self.fail(Rule::NodeSelection, message);
                }
                Some(_) => {}
                None => {
                    labels.insert(k.clone(), v.clone());
                }
            }
        }
        Some((labels, it.allocatable.clone()))
    }

    /// DaemonSet pods that will run on a new node of `pool` with `labels`.
    fn daemons_for(&self, pool: &NodePoolInput, labels: &BTreeMap<String, String>) -> Vec<&'a Pod> {
        self.input
            .daemonsets
            .iter()
            .filter(|ds| {
                tolerates_all(&ds.tolerations, &pool.taints) && terms_match(&ds.required_terms, labels)
            })
            .collect()
    }

    fn check_accounting(&mut self, plan: &Plan) {
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        let listed = plan
            .existing
            .values()
            .flatten()
            .chain(plan.nodeclaims.iter().flat_map(|c| &c.pods))
            .chain(plan.unschedulable.iter().map(|u| &u.pod));
        for id in listed {
            *seen.entry(id.as_str()).or_default() += 1;
        }
        let pending: BTreeSet<PodId> = self.input.pods.iter().map(|p| p.id()).collect();
        for id in &pending {
            match seen.get(id.as_str()).copied().unwrap_or(0) {
                1 => {}
                0 => self.fail(Rule::Accounting, format!("pod {id} is neither placed nor unschedulable")),
                n => self.fail(Rule::Accounting, format!("pod {id} appears {n} times in the plan")),
            }
        }
        for id in seen.keys().filter(|id| !pending.contains(**id)) {
            self.fail(Rule::Accounting, format!("plan names unknown pod {id}"));
        }
        for u in plan.unschedulable.iter().filter(|u| u.reason.trim().is_empty()) {
            self.fail(Rule::Accounting, format!("pod {} is unschedulable without a reason", u.pod));
        }
        let mut names = BTreeSet::new();
        for claim in &plan.nodeclaims {
            if !names.insert(&claim.name) || self.input.nodes.iter().any(|n| n.name == claim.name) {
                self.fail(Rule::Accounting, format!("node name {} is used twice", claim.name));
            }
            if claim.pods.is_empty() {
                self.fail(Rule::Accounting, format!("{}: a new NodeClaim without pods", claim.name));
            }
        }
    }

    /// Instance-type options, offering, price, and the `requests`/`allocatable` bookkeeping of claims.
    fn check_claims(&mut self, plan: &Plan) {
        let mut total = 0.0;
        for claim in &plan.nodeclaims {
            total += claim.price_per_hour;
            let Some(pool) = self.pool(&claim.nodepool) else { continue };
            let Some(it) = pool.instance_types.iter().find(|t| t.name == claim.instance_type) else {
                continue;
            };
            let name = &claim.name;
            if let Some(o) = find_offering(it, &claim.zone, claim.capacity_type.as_str()) {
                if !o.available {
                    self.fail(
                        Rule::Offering,
                        format!(
                            "{name}: offering {} {} of {} is unavailable",
                            o.zone,
                            claim.capacity_type.as_str(),
                            it.name
                        ),
                    );
                }
                if (o.price - claim.price_per_hour).abs() > 1e-9 {
                    self.fail(
                        Rule::Offering,
                        format!("{name}: price {} but the offering costs {}", claim.price_per_hour, o.price),
                    );
                }
            }
            let pods: Vec<&Pod> = claim.pods.iter().filter_map(|id| self.pending(id)).collect();
            let pod_requests = sum_requests(&pods);
            if claim.allocatable != it.allocatable {
                self.fail(
                    Rule::Capacity,
                    format!(
                        "{name}: allocatable {} differs from {}'s {}",
                        claim.allocatable, it.name, it.allocatable
                    ),
                );
            }
            let expected = pod_requests.add(&claim.daemon_overhead);
            if claim.requests != expected {
                self.fail(
                    Rule::Capacity,
                    format!("{name}: requests {} but pods + daemon overhead = {expected}", claim.requests),
                );
            }
            self.check_options(claim, pool, &pod_requests);
        }
        if (total - plan.price_per_hour).abs() > 1e-6 * (1.0 + total.abs()) {
            self.fail(
                Rule::Price,
                format!("plan price {} but its claims sum to {total}", plan.price_per_hour),
            );
        }
    }

    /// The options list starts with the chosen type, names pool types, and each could hold the pods.
    fn check_options(&mut self, claim: &NewNodeClaim, pool: &NodePoolInput, pod_requests: &Resources) {
        let name = &claim.name;
        if claim.instance_type_options.first() != Some(&claim.instance_type) {
            self.fail(
                Rule::InstanceType,
                format!("{name}: options do not start with {}", claim.instance_type),
            );
        }
        if claim.instance_type_options.len() > self.input.options.max_instance_type_options.max(1) {
            self.fail(
                Rule::InstanceType,
                format!("{name}: {} options exceed the maximum", claim.instance_type_options.len()),
            );
        }
        let unique: BTreeSet<&String> = claim.instance_type_options.iter().collect();
        if unique.len() != claim.instance_type_options.len() {
            self.fail(Rule::InstanceType, format!("{name}: options repeat a type"));
        }
        for option in &claim.instance_type_options {
            let Some(it) = pool.instance_types.iter().find(|t| &t.name == option) else {
                self.fail(
                    Rule::InstanceType,
                    format!("{name}: option {option} is not in nodepool {}", pool.name),
                );
                continue;
            };
            let launchable = type_allowed(it, &claim.requirements)
                && allowed_offerings(it, &claim.requirements).any(|o| o.available);
            if !launchable {
                self.fail(
                    Rule::InstanceType,
                    format!("{name}: option {option} has no available offering its requirements allow"),
                );
                continue;
            }
            // Daemons are judged on the option's own labels (in the claim's zone and capacity type).
            let offering =
                find_offering(it, &claim.zone, claim.capacity_type.as_str()).or(it.offerings.first());
            let Some(offering) = offering else { continue };
            let daemons = self.daemons_for(pool, &node_labels(pool, it, offering));
            let needed = pod_requests.add(&sum_requests(&daemons));
            if !needed.fits(&it.allocatable) {
                self.fail(
                    Rule::InstanceType,
                    format!(
                        "{name}: option {option} cannot hold the pods and daemons ({} short)",
                        needed.exceeding(&it.allocatable).join(", ")
                    ),
                );
            }
        }
    }

    fn check_limits(&mut self, plan: &Plan) {
        for pool in &self.input.nodepools {
            let Some(remaining) = &pool.remaining else { continue };
            let claims: Vec<&NewNodeClaim> =
                plan.nodeclaims.iter().filter(|c| c.nodepool == pool.name).collect();
            let mut used = Resources::new().with(NODES, claims.len() as i64);
            for claim in &claims {
                if let Some(it) = pool.instance_types.iter().find(|t| t.name == claim.instance_type) {
                    used.add_assign(&it.capacity);
                }
            }
            // A resource the limits do not name is unlimited.
            for resource in used.exceeding(remaining).into_iter().filter(|r| has_key(remaining, r)) {
                self.fail(
                    Rule::Limits,
                    format!(
                        "nodepool {}: new claims add {resource}={} over the remaining limit {}",
                        pool.name,
                        used.get(&resource),
                        remaining.get(&resource)
                    ),
                );
            }
        }
    }

    /// Rules local to one node: capacity, selection, taints, host ports, volume zones, daemons, pinning.
    fn check_node(&mut self, node: &NodeView<'a>) {
        let all: Vec<&Pod> = node.running.iter().chain(&node.placed).copied().collect();
        let mut used = sum_requests(&all);
        if let Some(claim) = node.claim {
            used.add_assign(&claim.daemon_overhead);
            let expected = sum_requests(&node.daemons);
            if !expected.fits(&claim.daemon_overhead) {
                self.fail(
                    Rule::DaemonOverhead,
                    format!(
                        "{}: daemon overhead {} leaves out daemons needing {expected}",
                        node.name, claim.daemon_overhead
                    ),
                );
            }
        }
        if !used.fits(&node.allocatable) && !node.placed.is_empty() {
            self.fail(
                Rule::Capacity,
                format!(
                    "{}: requests {used} exceed allocatable {} ({})",
                    node.name,
                    node.allocatable,
                    used.exceeding(&node.allocatable).join(", ")
                ),
            );
        }
        if let Some(claim) = node.claim {
            self.check_claim_requirements(node, claim);
        }
        for pod in &node.placed {
            let id = pod.id();
            if !terms_match(&pod.required_terms, &node.labels) {
                self.fail(
                    Rule::NodeSelection,
                    format!(
                        "pod {id} on {}: no required node-affinity term matches the node's labels",
                        node.name
                    ),
                );
            }
            if !tolerates_all(&pod.tolerations, &node.taints) {
                self.fail(
                    Rule::Taints,
                    format!("pod {id} on {}: does not tolerate the node's taints", node.name),
                );
            }
            if let Some(zones) = &pod.volume_zones {
                let zone = node.labels.get(LABEL_ZONE);
                if !zone.is_some_and(|z| zones.contains(z)) {
                    self.fail(
                        Rule::VolumeZones,
                        format!(
                            "pod {id} on {}: zone {zone:?} is not one of its volumes' zones {zones:?}",
                            node.name
                        ),
                    );
                }
            }
        }
        self.check_host_ports(node);
    }

    /// The claim's requirements admit its node's labels, the pool's requirements too, and every domain a
    /// pod's topology depends on is pinned (else Azure could launch elsewhere, or another size).
    fn check_claim_requirements(&mut self, node: &NodeView<'a>, claim: &NewNodeClaim) {
        let Some(pool) = self.pool(&claim.nodepool) else { return };
        for (whose, requirements) in [("claim", &claim.requirements), ("nodepool", &pool.requirements)] {
            for r in requirements.iter().filter(|r| r.key() != LABEL_HOSTNAME) {
                let value = node.labels.get(r.key()).map(String::as_str);
                if !r.admits(value) {
                    self.fail(
                        Rule::NodeSelection,
                        format!(
                            "{}: {whose} requirement {r} does not admit {}={value:?}",
                            node.name,
                            r.key()
                        ),
                    );
                }
            }
        }
        for pod in &node.placed {
            for key in domain_keys(pod) {
                let pinned = claim.requirements.get(key).and_then(|r| r.single_value());
                if pinned != node.labels.get(key).map(String::as_str) {
                    self.fail(
                        Rule::DomainNotPinned,
                        format!(
                            "{}: pod {} depends on {key} but the claim's requirements do not pin it to {:?}",
                            node.name,
                            pod.id(),
                            node.labels.get(key)
                        ),
                    );
                }
            }
        }
    }

    fn check_host_ports(&mut self, node: &NodeView<'a>) {
        let occupants: Vec<(&Pod, bool)> = node
            .running
            .iter()
            .chain(&node.daemons)
            .map(|p| (*p, false))
            .chain(node.placed.iter().map(|p| (*p, true)))
            .collect();
        for (i, (a, a_placed)) in occupants.iter().enumerate() {
            for (b, b_placed) in &occupants[i + 1..] {
                if !(a_placed | b_placed) {
                    continue;
                }
                for pa in &a.host_ports {
                    if let Some(pb) = b.host_ports.iter().find(|pb| pa.conflicts(pb)) {
                        self.fail(
                            Rule::HostPorts,
                            format!(
                                "{}: pods {} and {} both bind {}/{} ({})",
                                node.name,
                                a.id(),
                                b.id(),
                                pa.port,
                                pa.protocol,
                                pb.host_ip
                            ),
                        );
                    }
                }
            }
        }
    }
}

/// Labels of a new node of `pool` as `it` bought through `offering` (hostname not included).
fn node_labels(pool: &NodePoolInput, it: &InstanceType, offering: &Offering) -> BTreeMap<String, String> {
    let mut labels = pool.labels.clone();
    // Single-valued pool requirements become labels, as upstream resolves them onto the NodeClaim.
    for r in pool.requirements.iter() {
        if let Some(v) = r.single_value() {
            labels.entry(r.key().to_string()).or_insert_with(|| v.to_string());
        }
    }
    labels.insert(LABEL_NODEPOOL.to_string(), pool.name.clone());
    labels.extend(it.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels.extend(offering_labels(offering).iter().map(|(k, v)| (k.to_string(), v.to_string())));
    labels
}

/// The topology keys other than the hostname whose domain a pod's placement depends on: the keys of
/// its hard topology rules, and the zone when its volumes are bound.
fn domain_keys(pod: &Pod) -> BTreeSet<&str> {
    let spreads = pod
        .topology_spread
        .iter()
        .filter(|c| c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule)
        .map(|c| c.topology_key.as_str());
    let terms = pod.affinity.iter().chain(&pod.anti_affinity).map(|t| t.topology_key.as_str());
    let volumes = pod.volume_zones.as_ref().map(|_| LABEL_ZONE);
    spreads.chain(terms).chain(volumes).filter(|k| *k != LABEL_HOSTNAME).collect()
}

fn find_offering<'t>(it: &'t InstanceType, zone: &str, capacity_type: &str) -> Option<&'t Offering> {
    it.offerings.iter().find(|o| o.zone == zone && o.capacity_type.as_str() == capacity_type)
}

/// Whether a node with `labels` meets one of the required terms (no terms: any node).
fn terms_match(terms: &[Requirements], labels: &BTreeMap<String, String>) -> bool {
    terms.is_empty() || terms.iter().any(|t| t.matches(labels))
}

fn sum_requests(pods: &[&Pod]) -> Resources {
    pods.iter().fold(Resources::new(), |acc, p| acc.add(&p.requests))
}

/// Whether `resources` lists `name` at all (a limit of zero still limits).
fn has_key(resources: &Resources, name: &str) -> bool {
    resources.iter().any(|(k, _)| k == name)
}

#[cfg(test)]
#[path = "feasibility_tests.rs"]
mod tests;
