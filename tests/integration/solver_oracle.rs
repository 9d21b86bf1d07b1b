//! The solver against a brute-force oracle on tiny inputs: every partition of the pods into nodes and
//! the cheapest fitting type and available offering per node give the optimum $/h. The solver's price
//! must stay within FACTOR of it, and its lower bound must never exceed it. Some cases hold pods that
//! a hostname spread counts without carrying it (overlapping selectors).
//!
//! Cases come from a seeded linear congruential generator, so every run checks the same inputs and a
//! failure names the case number to reproduce.

use crate::support::solver_fixtures as fixtures;
use std::sync::Arc;

use fixtures::*;
use karpenter_azure::model::labels::LABEL_HOSTNAME;
use karpenter_azure::model::requirements::Requirement;
use karpenter_azure::model::resources::Resources;
use karpenter_azure::model::{CapacityType, InstanceType};
use karpenter_azure::scheduling::{solve, Pod, SolveInput};

/// The solver's price may exceed the optimum by at most this factor.
const FACTOR: f64 = 1.5;
const CASES: u64 = 400;

/// Knuth's MMIX LCG; the high bits are the usable ones.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn random_types(rng: &mut Lcg) -> Vec<InstanceType> {
    let count = 1 + rng.below(4);
    (0..count)
        .map(|i| {
            let cpu = rng.pick(&[1000, 2000, 4000, 8000]);
            let memory = rng.pick(&[2, 4, 8, 16, 32]) * GI;
            let base = 0.05 + rng.below(96) as f64 / 100.0;
            let offerings: Vec<(&str, CapacityType, f64)> = (0..1 + rng.below(3))
                .map(|_| {
                    let zone = rng.pick(&ZONES);
                    let spot = rng.chance(40);
                    let price = if spot { base * (0.3 + rng.below(70) as f64 / 100.0) } else { base };
                    (zone, if spot { CapacityType::Spot } else { CapacityType::OnDemand }, price)
                })
                .collect();
            let mut it = instance_type(&format!("t{i}"), cpu, memory, &offerings);
            // Duplicate (zone, capacity type) pairs are not real offerings; keep the first.
            let mut seen = std::collections::BTreeSet::new();
            it.offerings.retain(|o| seen.insert((o.zone.clone(), o.capacity_type)));
            for o in it.offerings.iter_mut() {
                o.available = rng.chance(85);
            }
            it.offerings[0].available = true;
            it
        })
        .collect()
}

fn random_input(rng: &mut Lcg) -> SolveInput {
    let types = random_types(rng);
    let count = 1 + rng.below(6) as usize;
    let mut pods: Vec<Pod> = (0..count)
        .map(|i| {
            // Each pod fits at least one type on its own, so the optimum places every pod.
            let host = &types[rng.below(types.len() as u64) as usize];
            let cpu = 100 + rng.below(host.allocatable.get("cpu") as u64 - 100) as i64;
            let memory = 64 * MI + rng.below((host.allocatable.get("memory") - 64 * MI) as u64) as i64;
            pod(&format!("p{i}"), "generic", cpu, memory)
        })
        .collect();
    if count >= 2 && rng.chance(30) {
        for p in pods.iter_mut().filter(|_| rng.chance(60)) {
            std::sync::Arc::make_mut(&mut p.labels).insert("app".into(), "anti".into());
            p.anti_affinity = vec![affinity_term("anti", LABEL_HOSTNAME)];
        }
    }
    // Overlapping selectors: a hostname spread on `tier=x` that also counts pods labelled tier=x
    // without the spread, so a node holding a spread pod holds no other tier=x pod.
    if count >= 2 && rng.chance(30) {
        for p in pods.iter_mut() {
            if !p.anti_affinity.is_empty() || !rng.chance(70) {
                continue;
            }
            std::sync::Arc::make_mut(&mut p.labels).insert("tier".into(), "x".into());
            if rng.chance(50) {
                let mut rule = spread("any", LABEL_HOSTNAME, 1);
                rule.selector = requirements(&[Requirement::is_in("tier", ["x"])]);
                p.topology_spread = vec![rule];
            }
        }
    }
    input(pods, vec![pool("default", types)])
}

/// Cheapest $/h of one node holding `block`, or None when no type fits or anti-affinity forbids it.
fn node_price(types: &[InstanceType], pods: &[Arc<Pod>], block: &[usize]) -> Option<f64> {
    if block.iter().filter(|i| !pods[**i].anti_affinity.is_empty()).count() > 1 {
        return None;
    }
    let tiered = block.iter().filter(|i| pods[**i].labels.contains_key("tier")).count();
    if tiered > 1 && block.iter().any(|i| !pods[*i].topology_spread.is_empty()) {
        return None;
    }
    let requests = block.iter().fold(Resources::new(), |acc, i| acc.add(&pods[*i].requests));
    types
        .iter()
        .filter(|t| requests.fits(&t.allocatable))
        .filter_map(|t| t.offerings.iter().filter(|o| o.available).map(|o| o.price).reduce(f64::min))
        .reduce(f64::min)
}

/// The optimum over every set partition (restricted growth strings).
fn optimum(input: &SolveInput) -> f64 {
    let types = &input.nodepools[0].instance_types;
    let pods = &input.pods;
    let mut best = f64::INFINITY;
    let mut assignment = vec![0usize; pods.len()];
    fn recurse(
        i: usize,
        blocks: usize,
        assignment: &mut Vec<usize>,
        types: &[InstanceType],
        pods: &[Arc<Pod>],
        best: &mut f64,
    ) {
        if i == pods.len() {
            let mut total = 0.0;
            for b in 0..blocks {
                let block: Vec<usize> = (0..pods.len()).filter(|p| assignment[*p] == b).collect();
                match node_price(types, pods, &block) {
                    Some(price) => total += price,
                    None => return,
                }
            }
            *best = best.min(total);
            return;
        }
        for b in 0..=blocks {
            assignment[i] = b;
            recurse(i + 1, blocks.max(b + 1), assignment, types, pods, best);
        }
    }
    recurse(0, 0, &mut assignment, types, pods, &mut best);
    best
}

#[test]
fn solver_is_near_the_brute_force_optimum_and_its_bound_is_valid() {
    let mut rng = Lcg(0x5eed_cafe);
    let mut worst = (1.0f64, 0u64);
    let mut failures = vec![];
    let mut optimal = 0;
    for case in 0..CASES {
        let input = random_input(&mut rng);
        let best = optimum(&input);
        assert!(best.is_finite(), "case {case}: the generator must produce placeable pods");
        let plan = solve(&input);
        assert_feasible(&input, &plan);
        if !plan.unschedulable.is_empty() {
            failures.push(format!("case {case}: left pods unschedulable: {:?}", plan.unschedulable));
            continue;
        }
        let ratio = plan.price_per_hour / best;
        if ratio <= 1.0 + 1e-9 {
            optimal += 1;
        }
        if std::env::var("ORACLE_DEBUG").is_ok_and(|c| c == case.to_string()) {
            println!("case {case}: optimum {best}\ninput: {input:#?}\nplan: {plan:#?}");
        }
        if ratio > worst.0 {
            worst = (ratio, case);
        }
        if ratio > FACTOR + 1e-9 {
            failures.push(format!(
                "case {case}: price {:.4} vs optimum {best:.4} (×{ratio:.3})",
                plan.price_per_hour
            ));
        }
        if plan.lower_bound_per_hour > best + 1e-9 {
            failures.push(format!(
                "case {case}: lower bound {:.6} exceeds the optimum {best:.6}",
                plan.lower_bound_per_hour
            ));
        }
    }
    println!(
        "worst price/optimum ratio over {CASES} cases: {:.4} (case {}); optimal in {optimal} cases",
        worst.0, worst.1
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
