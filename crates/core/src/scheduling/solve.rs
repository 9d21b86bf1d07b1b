//! The solver: from a [`SolveInput`] to a [`Plan`].
//!
//! 1. Pods are grouped into shapes ([`crate::scheduling::shapes`]); each shape is tried with all its
//!    preferences honoured first (relaxation level 0).
//! 2. Topology rules on any key but the hostname (zone, capacity type, or another label some NodePool
//!    or instance type defines) pin each pod to a domain ([`crate::scheduling::topology`]); pods of a
//!    shape with the same domains form a class.
//! 3. Classes fill existing and in-flight nodes first (free capacity), largest first.
//! 4. What is left goes onto new nodes in NodePool weight order ([`crate::scheduling::slots`]):
//!    whole copies of the configuration LP's node patterns first ([`crate::scheduling::colgen`]),
//!    then the greedy packer for the remainder ([`crate::scheduling::pack`]), both valuing pods at
//!    the lower bound's dual prices ([`crate::scheduling::valuation`], [`crate::scheduling::bound`]).
//!    While pods that need nodes of their own wait (per-node limits), each new node is sized for them
//!    plus an equal share of the rest ([`crate::scheduling::anchors`]). Zone spread is repaired where
//!    pods could not be placed ([`crate::scheduling::spread`]).
//! 5. Pods that did not fit give up one more preference, in upstream's order, and go round again;
//!    pods with nothing left to give up are reported with a reason ([`crate::scheduling::explain`]).
//! 6. Pairs of new nodes are merged where one cheaper node holds both ([`crate::scheduling::improve`]);
//!    pods move (one, or several together) or trade places with smaller ones between new nodes where
//!    that lets a node take a cheaper size ([`crate::scheduling::downsize`]); the plan reports the larger of two certified lower bounds (the resource bound and the
//!    configuration LP's, [`crate::scheduling::colgen`]); new nodes are right-sized and turned into
//!    NodeClaims ([`crate::scheduling::claims`]).
//!
//! The working state and its invariants are in [`crate::scheduling::working`]; this file drives the
//! steps and reads top-down: the entry points, then one function per step in order, then the
//! helpers of classifying. [`solve_with_cancel`] asks a caller's hook at safe points (each
//! relaxation round, each node pattern opened, each merge) whether to stop
//! ([`crate::scheduling::cancel`]): disruption runs many solves per pass and needs a deadline, but
//! pure code cannot read the clock, so the caller decides.

use std::collections::{BTreeMap, HashMap};

use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_ZONE};
use crate::model::requirements::{Requirement, Requirements};
use crate::model::selection::label_domains as label_domains_of_type;
use crate::model::LabelLookup;
use crate::scheduling::base::RunningBase;
use crate::scheduling::cancel::{Cancelled, ShouldCancel};
use crate::scheduling::claims;
use crate::scheduling::colgen;
use crate::scheduling::downsize;
use crate::scheduling::explain;
use crate::scheduling::improve;
use crate::scheduling::input::{tolerates_all, PreferencePolicy, SolveInput};
use crate::scheduling::node::PodTraits;
use crate::scheduling::placement::Placement;
use crate::scheduling::plan::{Plan, Unschedulable};
use crate::scheduling::shapes::Scope;
use crate::scheduling::slots;
use crate::scheduling::spread;
use crate::scheduling::topology::{Assignment, EligibleDomains};
use crate::scheduling::valuation;
use crate::scheduling::working::{Class, Solver};

/// A pod waiting to be placed: (shape, pod index, relaxation level).
type PendingPod = (usize, usize, usize);
/// A pod that could not be placed this round, with the reason.
type Failure = (usize, usize, usize, String);
/// A shape's constraints at one level: effective rules, the term chosen, eligible zones and capacity types.
type ShapeAtLevel = (crate::scheduling::shapes::Effective, usize, EligibleDomains);

/// Solves one batch. Pure and deterministic.
pub fn solve(input: &SolveInput) -> Plan {
    match solve_with_cancel(input, &|| false) {
        Ok(plan) => plan,
        Err(Cancelled) => unreachable!("a hook that never cancels"),
    }
}

/// [`solve`], stopped with [`Cancelled`] at the first safe point where `cancel` says so. While the hook
/// says no, the plan is exactly [`solve`]'s: the hook is only asked, it changes nothing.
pub fn solve_with_cancel(input: &SolveInput, cancel: &dyn ShouldCancel) -> Result<Plan, Cancelled> {
    solve_steps(input, cancel, Bound::Certify)
}

/// [`solve_with_cancel`] without the certified lower bound: the same placement, with
/// `lower_bound_per_hour` 0. For callers that only ask where pods would go (every disruption move is
/// such a question), since on a large cluster the bound costs several times the placement.
pub fn place_with_cancel(input: &SolveInput, cancel: &dyn ShouldCancel) -> Result<Plan, Cancelled> {
    solve_steps(input, cancel, Bound::Skip)
}

/// [`place_with_cancel`] for an input whose running pods `base` holds, up to its [`Placement`]:
/// `input.running` is empty and the pods on `input.nodes` are the base's. The solves of a
/// disruption pass share one base ([`crate::scheduling::base`]), and a pass writes the NodeClaims
/// only of the moves it may take.
pub fn placement_with_base<'a>(
    input: &'a SolveInput,
    base: &'a RunningBase,
    cancel: &'a dyn ShouldCancel,
) -> Result<Placement<'a>, Cancelled> {
    let (solver, unschedulable) = placed_solver(input, cancel, Some(base))?;
    Ok(Placement::new(solver, unschedulable))
}

/// [`solve_with_cancel`]'s `lower_bound_per_hour` alone: the same solve and the same certified bound,
/// without writing the plan's NodeClaims (their requirements, labels and instance-type lists), which
/// on a large cluster is a fair share of the solve's time and its largest allocation.
pub fn lower_bound_with_cancel(input: &SolveInput, cancel: &dyn ShouldCancel) -> Result<f64, Cancelled> {
    let (solver, _) = placed_solver(input, cancel, None)?;
    Ok(certified_lower_bound(&solver))
}

/// Whether a solve certifies its lower bound.
#[derive(Clone, Copy, PartialEq)]
enum Bound {
    Certify,
    Skip,
}

fn solve_steps(input: &SolveInput, cancel: &dyn ShouldCancel, bound: Bound) -> Result<Plan, Cancelled> {
    let (solver, unschedulable) = placed_solver(input, cancel, None)?;
    let lower_bound_per_hour = match bound {
        Bound::Certify => certified_lower_bound(&solver),
        Bound::Skip => 0.0,
    };
    Ok(claims::build_plan(&solver, unschedulable, lower_bound_per_hour))
}

/// Steps 1 to 6: the working state with every pod that can be placed on a node, and the pods left
/// pending with their reasons.
fn placed_solver<'a>(
    input: &'a SolveInput,
    cancel: &'a dyn ShouldCancel,
    base: Option<&'a RunningBase>,
) -> Result<(Solver<'a>, Vec<Unschedulable>), Cancelled> {
    // Step 1: the shapes, with the templates and the existing nodes, make the working state.
    let mut solver = match base {
        Some(base) => Solver::with_base(input, base, cancel),
        None => Solver::new(input, cancel),
    };
    // Steps 2 to 5, round by round.
    let unschedulable = relaxation_rounds(&mut solver)?;
    // Step 6.
    improve::merge_nodes(&mut solver)?;
    downsize::downsize_nodes(&mut solver)?;
    solver.check_cancel()?;
    Ok((solver, unschedulable))
}

/// Steps 2 to 5: rounds until every pod is placed or has nothing left to relax. Returns the pods
/// left pending with their reasons, by pod.
fn relaxation_rounds(solver: &mut Solver) -> Result<Vec<Unschedulable>, Cancelled> {
    // Every pod starts with all its preferences honoured (level 0), or, under PreferencePolicy Ignore,
    // with all of them given up.
    let ignore = solver.input().options.preference_policy == PreferencePolicy::Ignore;
    let mut pending: Vec<PendingPod> = vec![];
    for (s, shape) in solver.shapes().iter().enumerate() {
        let level = if ignore { shape.relaxable_steps } else { 0 };
        for &p in &shape.pods {
            pending.push((s, p, level));
        }
    }
    let mut failed: Vec<Unschedulable> = vec![];
    // Pods of each class that found no node (they moved on to a later round or failed).
    let mut unplaced_of: Vec<u64> = vec![];
    while !pending.is_empty() {
        solver.check_cancel()?;
        // Step 2.
        let (batch, mut unplaced) = classify(solver, &pending);
        let ids: Vec<usize> = solver.add_classes(batch).collect();
        // Steps 3 and 4.
        let mut remaining = place(solver, &ids);
        // Packing may have stopped early for a cancel; what it left is not a result.
        solver.check_cancel()?;
        // Why each class left pods over, and their domains given back.
        let mut reasons: BTreeMap<usize, String> = BTreeMap::new();
        for &class in &ids {
            if remaining[class] == 0 {
                continue;
            }
            reasons.insert(class, explain::why_not(solver, class));
            for _ in 0..remaining[class] {
                // The pod's domain counted for topology; it is not there after all.
                solver.release_domain(class);
            }
        }
        // Step 4's spread repair, now that the pods left over are known.
        spread::enforce_spread(solver, &ids, &mut remaining, &mut reasons);
        unplaced_of.resize(solver.classes().len(), 0);
        for &class in &ids {
            unplaced_of[class] = remaining[class];
        }
        for &class in &ids {
            let c = &solver.classes()[class];
            let placed = c.pods.len() - remaining[class] as usize;
            for &p in &c.pods[placed..] {
                unplaced.push((c.shape, p, c.level, reasons[&class].clone()));
            }
        }
        // Step 5.
        pending = relax(solver, unplaced, &mut failed);
    }
    failed.extend(enforce_spread_across_rounds(solver, &mut unplaced_of));
    failed.sort_by(|a, b| a.pod.cmp(&b.pod));
    Ok(failed)
}

/// Step 2: builds the classes of a round (effective constraints, domains, template masks); the pods
/// no domain could be given fail the round with the reason.
fn classify(solver: &mut Solver, pending: &[PendingPod]) -> (Vec<Class>, Vec<Failure>) {
    let mut failures = vec![];
    let mut groups: BTreeMap<(usize, usize, usize, Assignment), Vec<usize>> = BTreeMap::new();
    let mut cache: HashMap<(usize, usize), ShapeAtLevel> = HashMap::new();
    for &(s, _, level) in pending {
        if let std::collections::hash_map::Entry::Vacant(slot) = cache.entry((s, level)) {
            slot.insert(effective_for(solver, s, level));
        }
    }
    // Pods without zone or capacity-type rules of their own go first: those that spreads count
    // (passive members) take the least loaded domains, and the spreads' own pods then choose
    // knowing where they went. The other way round, a passive pod that can only go to one
    // domain could tip a spread whose pods were already placed.
    let has_domain_rules =
        |&(s, _, level): &PendingPod| cache[&(s, level)].0.rules.iter().any(|r| r.scope() != Scope::Hostname);
    let (passive, ruled): (Vec<PendingPod>, Vec<PendingPod>) =
        pending.iter().partition(|pod| !has_domain_rules(pod));
    for (s, p, level) in passive.into_iter().chain(ruled) {
        let (effective, term, eligible) = &cache[&(s, level)];
        match solver.assign_domains(s, &effective.rules, eligible) {
            Ok(assignment) => groups.entry((s, level, *term, assignment)).or_default().push(p),
            Err(reason) => failures.push((s, p, level, reason)),
        }
    }
    let mut classes = vec![];
    for ((s, level, _term, assignment), pods) in groups {
        let (effective, _, eligible) = &cache[&(s, level)];
        let mut requirements = effective.requirements.clone();
        if let Some(z) = &assignment.zone {
            requirements.add(Requirement::is_in(LABEL_ZONE, [z.clone()]));
        }
        if let Some(c) = &assignment.capacity_type {
            requirements.add(Requirement::is_in(LABEL_CAPACITY_TYPE, [c.clone()]));
        }
        for (scope, domain) in &assignment.labels {
            requirements.add(Requirement::is_in(solver.selectors().key_of(*scope), [domain.clone()]));
        }
        let shape = &solver.shapes()[s];
        let pod = &solver.input().pods[shape.pods[0]];
        let traits = PodTraits::new(
            shape.demand.clone(),
            shape.matched_by.clone(),
            &effective.rules,
            pod.host_ports.clone(),
        );
        let per_node_limit = traits.per_node_limit();
        let masks = solver.masks(s, &requirements);
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
            eligible: eligible.clone(),
        });
    }
    (classes, failures)
}

/// Steps 3 and 4: places the classes of a round, most valuable first; returns the pods that found no
/// node, per class.
fn place(solver: &mut Solver, ids: &[usize]) -> Vec<u64> {
    let mut order: Vec<usize> = ids.to_vec();
    let mut remaining: Vec<u64> = vec![0; solver.classes().len()];
    for &c in ids {
        remaining[c] = solver.classes()[c].pods.len() as u64;
    }
    let bound = valuation::bound_for(solver, ids, &remaining);
    let values = valuation::pod_values(solver, ids, &bound);
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then_with(|| a.cmp(&b)));
    slots::fill_existing(solver, &order, &mut remaining);
    slots::pack_new(solver, &order, &mut remaining, &values, &bound.resource_prices);
    // The first pods of each class are the placed ones, handed out in slot order.
    remaining
}

/// Step 5: the pods of a round that found no node give up one more preference and wait for the next
/// round; those with nothing left to give up go to `failed` with their reason. Returns the next
/// round's pods, in order.
fn relax(solver: &Solver, unplaced: Vec<Failure>, failed: &mut Vec<Unschedulable>) -> Vec<PendingPod> {
    let mut pending = vec![];
    for (shape, pod, level, reason) in unplaced {
        if level < solver.shapes()[shape].relaxable_steps {
            pending.push((shape, pod, level + 1));
        } else {
            failed.push(Unschedulable { pod: solver.input().pods[pod].id(), reason });
        }
    }
    pending.sort();
    pending
}

/// Step 4, once more over all rounds: a spread's pods placed in one round can be tipped by pods of a later round that it counts
/// and that found no node after all (their domain ends up short). Repeats the repair over every
/// class until no spread changes; the pods taken back fail with the spread's reason.
fn enforce_spread_across_rounds(solver: &mut Solver, unplaced_of: &mut [u64]) -> Vec<Unschedulable> {
    let all: Vec<usize> = (0..solver.classes().len()).collect();
    let before = unplaced_of.to_vec();
    let mut reasons: BTreeMap<usize, String> = BTreeMap::new();
    while spread::enforce_spread(solver, &all, unplaced_of, &mut reasons) {}
    let mut failed = vec![];
    for (class, reason) in reasons {
        let pods = &solver.classes()[class].pods;
        let (now_placed, was_placed) =
            (pods.len() - unplaced_of[class] as usize, pods.len() - before[class] as usize);
        for &p in &pods[now_placed..was_placed] {
            failed.push(Unschedulable { pod: solver.input().pods[p].id(), reason: reason.clone() });
        }
    }
    failed
}

/// Step 6: the larger of two certified lower bounds on the price of any plan that places the pods this one
/// places: the resource bound and the configuration LP's.
fn certified_lower_bound(solver: &Solver) -> f64 {
    let mut placed = vec![0u64; solver.classes().len()];
    for slot in solver.slots() {
        for &(c, n) in slot.classes() {
            placed[c] += n;
        }
    }
    let configuration_bound = colgen::certified_bound(solver, &placed);
    let ids: Vec<usize> = (0..solver.classes().len()).collect();
    let resource_bound = valuation::bound_for(solver, &ids, &placed);
    // Both bounds are valid; the configuration LP's is usually the tighter one.
    resource_bound.per_hour.max(configuration_bound.unwrap_or(0.0))
}

/// The effective constraints of a shape at a level, the required term chosen, and the zones and
/// capacity types its pods may be assigned to.
fn effective_for(solver: &Solver, s: usize, level: usize) -> ShapeAtLevel {
    let pod = &solver.input().pods[solver.shapes()[s].pods[0]];
    let terms = pod.required_terms.len().max(1);
    let mut chosen = None;
    for term in 0..terms {
        let effective = solver.shapes()[s].effective(pod, level, term, solver.selectors());
        let requirements = with_volume_zones(&effective.requirements, pod);
        let masks = solver.masks(s, &requirements);
        let homes = masks.iter().any(|m| *m != 0) || existing_homes(solver, s, &requirements);
        if homes || term + 1 == terms {
            chosen = Some((effective, term, requirements, masks));
            if homes {
                break;
            }
        }
    }
    let (mut effective, term, requirements, masks) = chosen.expect("at least one term is tried");
    effective.requirements = requirements;
    let eligible = eligible_domains(solver, &effective.requirements, &masks);
    (effective, term, eligible)
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

fn existing_homes(solver: &Solver, s: usize, requirements: &Requirements) -> bool {
    let pod = &solver.input().pods[solver.shapes()[s].pods[0]];
    solver
        .input()
        .nodes
        .iter()
        .any(|n| requirements.matches(&n.labels) && tolerates_all(&pod.tolerations, &n.taints))
}

/// Zones, capacity types and their pairs reachable through templates (by their masks) or
/// existing nodes.
fn eligible_domains(solver: &Solver, requirements: &Requirements, masks: &[u32]) -> EligibleDomains {
    let mut zones = std::collections::BTreeSet::new();
    let mut capacity_types = std::collections::BTreeSet::new();
    let mut pairs = std::collections::BTreeSet::new();
    for (zone, capacity_type) in solver.offering_domains().reached(masks) {
        zones.insert(zone.clone());
        capacity_types.insert(capacity_type.clone());
        pairs.insert((zone.clone(), capacity_type.clone()));
    }
    let nodes = &solver.input().nodes;
    let admits = |key: &str, value: &str| requirements.get(key).is_none_or(|r| r.admits(Some(value)));
    for group in solver.nodes_by_pair() {
        let mut matching = group.nodes.iter().map(|&i| &nodes[i]).filter(|n| requirements.matches(&n.labels));
        let Some((zone, capacity_type)) = group.pair else {
            for n in matching {
                zones.extend(n.labels.label(LABEL_ZONE).map(str::to_string));
                capacity_types.extend(n.labels.label(LABEL_CAPACITY_TYPE).map(str::to_string));
            }
            continue;
        };
        // A pair already reached gains nothing from its nodes; one the requirements exclude has no
        // node that matches.
        let pair = (zone.to_string(), capacity_type.to_string());
        if pairs.contains(&pair) || !admits(LABEL_ZONE, zone) || !admits(LABEL_CAPACITY_TYPE, capacity_type) {
            continue;
        }
        if matching.next().is_some() {
            zones.insert(pair.0.clone());
            capacity_types.insert(pair.1.clone());
            pairs.insert(pair);
        }
    }
    EligibleDomains {
        zones: zones.into_iter().collect(),
        capacity_types: capacity_types.into_iter().collect(),
        pairs,
        labels: label_domains(solver, requirements, masks),
    }
}

/// The domains of every other label key a rule uses, reachable through templates (by their masks)
/// or existing nodes.
fn label_domains(
    solver: &Solver,
    requirements: &Requirements,
    masks: &[u32],
) -> BTreeMap<Scope, Vec<String>> {
    let selectors = solver.selectors();
    let mut out = BTreeMap::new();
    for scope in selectors.domain_scopes().into_iter().filter(|s| matches!(s, Scope::Label(_))) {
        let key = selectors.key_of(scope);
        let mut domains = std::collections::BTreeSet::new();
        for (template, _) in solver.templates().iter().zip(masks).filter(|(_, m)| **m != 0) {
            let pool = &solver.input().nodepools[template.pool];
            let instance_type = &pool.instance_types[template.instance_type];
            let allowed = pool.requirements.intersect(requirements);
            domains.extend(label_domains_of_type(key, instance_type, &allowed));
        }
        for n in solver.input().nodes.iter().filter(|n| requirements.matches(&n.labels)) {
            domains.extend(n.labels.label(key).map(str::to_string));
        }
        out.insert(scope, domains.into_iter().collect());
    }
    out
}
