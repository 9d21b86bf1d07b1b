//! From the solver's planned nodes to a [`Plan`]: right-size each new node to the cheapest template
//! that still holds its pods, pick its offering, list the other instance types that would do
//! (cheapest first), and write the NodeClaim's requirements, labels and resources.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE};
use crate::model::requirements::{Requirement, Requirements};
use crate::model::selection::offering_labels;
use crate::model::{CapacityType, InstanceType, Offering};
use crate::scheduling::input::{MinValuesPolicy, NodePoolInput, PodId};
use crate::scheduling::node_fit;
use crate::scheduling::plan::{NewNodeClaim, Plan, Unschedulable};
use crate::scheduling::templates::{Template, TemplateOffering};
use crate::scheduling::working::{Slot, Solver};

/// Builds the plan; `unschedulable` comes from the relaxation rounds, `lower_bound_per_hour` from
/// certifying the bound over the pods placed.
pub(crate) fn build_plan(
    solver: &Solver,
    mut unschedulable: Vec<Unschedulable>,
    lower_bound_per_hour: f64,
) -> Plan {
    let mut plan = Plan::default();
    let mut names = ClaimNames::new(solver);
    let mut zone_use = ZoneUse::new();
    for (slot, held) in slots_with_pods(solver) {
        let pods: Vec<PodId> = held.iter().map(|&p| solver.input().pods[p].id()).collect();
        match (slot.existing(), slot.template()) {
            (Some(i), _) if !pods.is_empty() => {
                plan.existing.entry(solver.input().nodes[i].name.clone()).or_default().extend(pods);
            }
            (None, Some(_)) if !pods.is_empty() => {
                match new_claim(solver, slot, pods.clone(), &mut names, &mut zone_use) {
                    Ok(claim) => plan.nodeclaims.push(claim),
                    Err(reason) => unschedulable
                        .extend(pods.into_iter().map(|pod| Unschedulable { pod, reason: reason.clone() })),
                }
            }
            _ => {}
        }
    }
    unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
    plan.unschedulable = unschedulable;
    // `+ 0.0`: an empty float sum is -0.0, which would print as "-0.0000".
    plan.price_per_hour = plan.nodeclaims.iter().map(|c| c.price_per_hour).sum::<f64>() + 0.0;
    plan.lower_bound_per_hour = lower_bound_per_hour;
    plan
}

/// Every slot with the input indices of the pods it holds: the first placed pods of each class go to
/// its slots in slot order.
pub(crate) fn slots_with_pods<'s>(solver: &'s Solver) -> impl Iterator<Item = (&'s Slot, Vec<usize>)> + 's {
    let mut cursor = vec![0usize; solver.classes().len()];
    solver.slots().iter().map(move |slot| {
        let mut pods = vec![];
        for &(c, n) in slot.classes() {
            let list = &solver.classes()[c].pods;
            pods.extend_from_slice(&list[cursor[c]..cursor[c] + n as usize]);
            cursor[c] += n as usize;
        }
        (slot, pods)
    })
}

/// How many new nodes each zone has been given so far in a plan, which breaks ties between equally
/// cheap offerings.
pub(crate) type ZoneUse = BTreeMap<String, usize>;

/// Whether writing a new slot's NodeClaim can fail, leaving its pods unschedulable: only on a
/// minValues the options cannot meet under [`MinValuesPolicy::Strict`].
pub(crate) fn claims_may_fail(solver: &Solver) -> bool {
    solver.input().options.min_values_policy == MinValuesPolicy::Strict
        && (solver.input().nodepools.iter().any(|p| has_min_values(&p.requirements))
            || solver.classes().iter().any(|c| has_min_values(&c.requirements)))
}

fn has_min_values(requirements: &Requirements) -> bool {
    requirements.iter().any(|r| r.min_values().is_some())
}

/// The offering a new slot's NodeClaim launches as (one of its cheapest option's), counted in
/// `zone_use`: the NodeClaim [`build_plan`] writes for the slot is priced at it.
pub(crate) fn priced_offering<'s>(
    solver: &'s Solver,
    slot: &Slot,
    zone_use: &mut ZoneUse,
) -> &'s TemplateOffering {
    let (t, mask, price) = option_candidates(solver, slot)
        .min_by(|a, b| by_price_then_name(solver, a, b))
        .unwrap_or_else(|| own_option(solver, slot));
    chosen_offering(&solver.templates()[t], mask, price, zone_use)
}

/// Among the offerings of `mask` that cost `price`, spot first, then the zone with the fewest new
/// nodes so far; counted in `zone_use`.
fn chosen_offering<'t>(
    tpl: &'t Template,
    mask: u32,
    price: f64,
    zone_use: &mut ZoneUse,
) -> &'t TemplateOffering {
    let offering = tpl
        .offerings
        .iter()
        .enumerate()
        .filter(|(i, o)| mask & (1 << i) != 0 && (o.price - price).abs() <= 1e-12)
        .map(|(_, o)| o)
        .min_by(|a, b| {
            b.capacity_type
                .cmp(&a.capacity_type)
                .then_with(|| zone_use.get(&a.zone).cmp(&zone_use.get(&b.zone)))
                .then_with(|| a.zone.cmp(&b.zone))
        })
        .expect("the mask holds the cheapest offering");
    *zone_use.entry(offering.zone.clone()).or_default() += 1;
    offering
}

/// Templates of the slot's pool and tier that hold its pods, cheapest first (ties by name), limited
/// so that a pool with limits never gets an option larger than the chosen node.
fn options(solver: &Solver, slot: &Slot) -> Vec<(usize, u32, f64)> {
    let mut out: Vec<(usize, u32, f64)> = option_candidates(solver, slot).collect();
    out.sort_by(|a, b| by_price_then_name(solver, a, b));
    out
}

/// [`options`] unsorted.
fn option_candidates<'s>(solver: &'s Solver, slot: &'s Slot) -> impl Iterator<Item = (usize, u32, f64)> + 's {
    let chosen = slot.template().expect("new slots have a template");
    let pool = solver.templates()[chosen].pool;
    let allowed = node_fit::rules_allow(solver, slot.classes());
    let demand = node_fit::total_demand(solver, slot.classes());
    solver.templates().iter().enumerate().filter(move |(_, t)| allowed && t.pool == pool).filter_map(
        move |(t, tpl)| {
            if !crate::scheduling::shapes::fits(&demand, &tpl.capacity) {
                return None;
            }
            let mask = node_fit::joint_mask(solver, slot.classes(), t);
            if mask == 0 {
                return None;
            }
            if !node_fit::within_pool_limits(solver, t, chosen) {
                return None;
            }
            Some((t, mask, tpl.price(mask)))
        },
    )
}

fn by_price_then_name(solver: &Solver, a: &(usize, u32, f64), b: &(usize, u32, f64)) -> std::cmp::Ordering {
    a.2.total_cmp(&b.2).then_with(|| type_name(solver, a.0).cmp(type_name(solver, b.0)))
}

/// The slot's own template, the option of a slot no other option holds. Cannot happen: the slot's
/// own template holds its pods.
fn own_option(solver: &Solver, slot: &Slot) -> (usize, u32, f64) {
    let t = slot.template().expect("new slot");
    (t, slot.mask(), solver.templates()[t].price(slot.mask()))
}

fn type_name<'s>(solver: &'s Solver, t: usize) -> &'s str {
    let tpl = &solver.templates()[t];
    &solver.input().nodepools[tpl.pool].instance_types[tpl.instance_type].name
}

fn new_claim(
    solver: &Solver,
    slot: &Slot,
    pods: Vec<String>,
    names: &mut ClaimNames<'_>,
    zone_use: &mut ZoneUse,
) -> Result<NewNodeClaim, String> {
    let mut options = options(solver, slot);
    if options.is_empty() {
        options.push(own_option(solver, slot));
    }
    // Right-size: the cheapest option wins.
    let (t, mask, price) = options[0];
    let tpl = &solver.templates()[t];
    let pool = &solver.input().nodepools[tpl.pool];
    let it = &pool.instance_types[tpl.instance_type];
    let offering = chosen_offering(tpl, mask, price, zone_use);
    let listed_count = options.len().min(solver.input().options.max_instance_type_options.max(1));
    let option_names: Vec<String> =
        options[..listed_count].iter().map(|&(o, ..)| type_name(solver, o).to_string()).collect();
    let mut requirements = pool.requirements.clone();
    for &(c, _) in slot.classes() {
        requirements = requirements.intersect(&solver.classes()[c].requirements);
    }
    // minValues is judged on every type that would do, not only on those the claim lists. Under
    // BestEffort a minValues those types cannot meet is lowered to what they meet instead.
    if has_min_values(&requirements) {
        let label_sets = option_label_sets(solver, &options);
        if let Err(e) = requirements.check_min_values(label_sets.iter()) {
            match solver.input().options.min_values_policy {
                MinValuesPolicy::Strict => return Err(format!("nodepool requirements: {e}")),
                MinValuesPolicy::BestEffort => {
                    requirements.relax_min_values(label_sets.iter());
                }
            }
        }
    }
    let listed = &options[..listed_count];
    // The claim carries the zones and capacity types its listed options may launch in, so the launcher
    // chooses among exactly the offerings the plan priced (the cheapest first) and still has the others
    // to fall back on after a capacity error.
    let allowed: Vec<&TemplateOffering> = listed
        .iter()
        .flat_map(|&(o, m, _)| {
            solver.templates()[o].offerings.iter().enumerate().filter(move |(i, _)| m & (1 << i) != 0)
        })
        .map(|(_, off)| off)
        .collect();
    require_options(
        &mut requirements,
        option_names.iter().cloned(),
        allowed.iter().map(|o| (o.capacity_type, o.zone.as_str())),
    );
    let probe = Offering {
        zone: offering.zone.clone(),
        capacity_type: offering.capacity_type,
        price: offering.price,
        available: true,
    };
    let labels = claim_labels(pool, &requirements, it, &probe);
    let mut requests = tpl.daemon_overhead.clone();
    for &(c, n) in slot.classes() {
        let demand = solver.dims().resources(&solver.classes()[c].traits.demand);
        for _ in 0..n {
            requests.add_assign(&demand);
        }
    }
    Ok(NewNodeClaim {
        name: names.fresh(tpl.pool),
        nodepool: pool.name.clone(),
        instance_type: it.name.clone(),
        instance_type_options: option_names,
        zone: offering.zone.clone(),
        capacity_type: offering.capacity_type,
        price_per_hour: offering.price,
        requirements,
        labels,
        taints: pool.taints.clone(),
        startup_taints: pool.startup_taints.clone(),
        allocatable: it.allocatable.clone(),
        requests,
        daemon_overhead: tpl.daemon_overhead.clone(),
        pods,
    })
}

/// The names of a plan's new claims: per pool the next `<pool>-<n>` that no node of the input and no
/// reserved name has ([`SolveOptions::reserved_names`]), so a planned NodeClaim is never mistaken for an
/// existing node. The input's node names are gathered once, at the first new claim: a consolidation
/// pass plans many moves, each on every node of the cluster, and a scan of the nodes per claim made
/// its replacements quadratic.
///
/// [`SolveOptions::reserved_names`]: crate::scheduling::SolveOptions::reserved_names
struct ClaimNames<'s> {
    solver: &'s Solver<'s>,
    /// Per pool, the last `n` handed out.
    counters: Vec<usize>,
    nodes: Option<HashSet<&'s str>>,
}

impl<'s> ClaimNames<'s> {
    fn new(solver: &'s Solver<'s>) -> Self {
        ClaimNames { solver, counters: vec![0; solver.input().nodepools.len()], nodes: None }
    }

    fn fresh(&mut self, pool: usize) -> String {
        let input = self.solver.input();
        let nodes = self.nodes.get_or_insert_with(|| input.nodes.iter().map(|n| n.name.as_str()).collect());
        let counter = &mut self.counters[pool];
        loop {
            *counter += 1;
            let name = format!("{}-{counter}", input.nodepools[pool].name);
            if !input.options.reserved_names.contains(&name) && !nodes.contains(name.as_str()) {
                return name;
            }
        }
    }
}

/// Pins every requirement on a key no instance type or offering defines (a NodePool's own label key)
/// that still lists several values to the first of them: the node must carry one value of it, and the
/// claim must say which, as upstream's NodeClaims take one value of such a requirement as their label
/// (`Requirements.Labels` in `pkg/scheduling/requirements.go`).
fn pin_open_label_keys(requirements: &mut Requirements) {
    let pins: Vec<Requirement> = requirements
        .iter()
        .filter(|r| !crate::model::labels::is_well_known(r.key()) && r.single_value().is_none())
        .filter_map(|r| {
            let first = r.finite_values()?.into_iter().next()?;
            Some(Requirement::is_in(r.key(), [first.to_string()]))
        })
        .collect();
    for pin in pins {
        requirements.add(pin);
    }
}

/// Narrows a new claim's `requirements` to the instance types it lists (`types`) and to the capacity
/// types and zones of the `offerings` it may launch in, so the launcher chooses among exactly those,
/// and pins the NodePool's own label keys ([`pin_open_label_keys`]).
pub(crate) fn require_options<'a>(
    requirements: &mut Requirements,
    types: impl IntoIterator<Item = String>,
    offerings: impl IntoIterator<Item = (CapacityType, &'a str)>,
) {
    let (capacity_types, zones): (BTreeSet<&str>, BTreeSet<&str>) =
        offerings.into_iter().map(|(capacity_type, zone)| (capacity_type.as_str(), zone)).unzip();
    requirements.add(Requirement::is_in(LABEL_INSTANCE_TYPE, types));
    requirements.add(Requirement::is_in(LABEL_CAPACITY_TYPE, capacity_types.iter().map(|s| s.to_string())));
    // A regional offering has no zone label to require (upstream labels it `0`, which no pod selects).
    if zones.iter().all(|z| !z.is_empty()) {
        requirements.add(Requirement::is_in(LABEL_ZONE, zones.iter().map(|s| s.to_string())));
    }
    pin_open_label_keys(requirements);
}

/// A new claim's labels: the pool's, then every single-valued requirement, the chosen instance type's
/// labels, and those of its `offering` (zone, capacity type, priority).
pub(crate) fn claim_labels(
    pool: &NodePoolInput,
    requirements: &Requirements,
    chosen: &InstanceType,
    offering: &Offering,
) -> BTreeMap<String, String> {
    let mut labels = pool.labels.clone();
    for r in requirements.iter() {
        if let Some(v) = r.single_value() {
            labels.insert(r.key().to_string(), v.to_string());
        }
    }
    labels.extend(chosen.labels.clone());
    for (k, v) in offering_labels(offering) {
        labels.insert(k.to_string(), v.to_string());
    }
    labels
}

/// The labels of every offering of the options, which minValues is judged on.
fn option_label_sets(solver: &Solver, options: &[(usize, u32, f64)]) -> Vec<BTreeMap<String, String>> {
    let mut label_sets: Vec<BTreeMap<String, String>> = vec![];
    for &(t, mask, _) in options {
        let tpl = &solver.templates()[t];
        let it = &solver.input().nodepools[tpl.pool].instance_types[tpl.instance_type];
        for (i, o) in tpl.offerings.iter().enumerate() {
            if mask & (1 << i) == 0 {
                continue;
            }
            let mut labels = it.labels.clone();
            let probe = Offering {
                zone: o.zone.clone(),
                capacity_type: o.capacity_type,
                price: o.price,
                available: true,
            };
            labels.extend(offering_labels(&probe).iter().map(|(k, v)| (k.to_string(), v.to_string())));
            label_sets.push(labels);
        }
    }
    label_sets
}

#[cfg(test)]
#[path = "min_values_tests.rs"]
mod min_values_tests;
