//! Scenario tests of the solver on the real eastus catalog.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::apis::labels;
use crate::catalog::{instance_types, CapacityOptions, PriceTable, UnavailableOfferings};
use crate::scheduling::input::{NodePoolInput, Pod, SolveInput};
use crate::scheduling::requirements::{Requirement, Requirements};
use crate::scheduling::resources::Resources;
use crate::scheduling::solve;

pub(crate) fn eastus_pool(name: &str, weight: i32) -> NodePoolInput {
    let types = instance_types(
        "eastus",
        &CapacityOptions::default(),
        &PriceTable::static_for_region("eastus"),
        &UnavailableOfferings::default(),
        Duration::ZERO,
    )
    .unwrap();
    let mut requirements = Requirements::new();
    requirements.add(Requirement::is_in(labels::LABEL_NODEPOOL, [name]));
    NodePoolInput {
        name: name.into(),
        weight,
        requirements,
        labels: BTreeMap::from([(labels::LABEL_NODEPOOL.to_string(), name.to_string())]),
        taints: vec![],
        startup_taints: vec![],
        remaining: None,
        instance_types: Arc::new(types),
    }
}

pub(crate) fn pod(name: &str, cpu_m: i64, mem_mi: i64) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        requests: Resources::new().with("cpu", cpu_m).with("memory", mem_mi << 20).with("pods", 1),
        ..Default::default()
    }
}

#[test]
fn packs_identical_pods_near_the_bound() {
    let input = SolveInput {
        pods: (0..100).map(|i| pod(&format!("web-{i}"), 1000, 2048)).collect(),
        nodepools: vec![eastus_pool("general", 0)],
        ..Default::default()
    };
    let plan = solve(&input);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.placed_pods(), 100);
    assert!(plan.lower_bound_per_hour > 0.0);
    assert!(plan.lower_bound_per_hour <= plan.price_per_hour + 1e-9);
    // 100 pods leave a partly filled tail node; the LP relaxation has no such rounding loss.
    assert!(plan.optimality_ratio() < 1.25, "ratio {}", plan.optimality_ratio());
    assert_eq!(plan, solve(&input), "deterministic");
}

#[test]
fn too_big_pods_are_explained() {
    let input = SolveInput {
        pods: vec![pod("huge", 1000, 64 << 20)],
        nodepools: vec![eastus_pool("general", 0)],
        ..Default::default()
    };
    let plan = solve(&input);
    assert_eq!(plan.unschedulable.len(), 1);
    let reason = &plan.unschedulable[0].reason;
    assert!(reason.contains("nodepool general") && reason.contains("memory"), "{reason}");
}

#[test]
#[ignore]
fn debug_mixed_plan() {
    let input = crate::bench::mixed_input(5000);
    let plan = solve(&input);
    let mut by_type: std::collections::BTreeMap<String, (usize, usize, f64)> = Default::default();
    for c in &plan.nodeclaims {
        let e = by_type.entry(format!("{} {}", c.instance_type, c.capacity_type.as_str())).or_default();
        e.0 += 1;
        e.1 += c.pods.len();
        e.2 += c.price_per_hour;
        if e.0 == 1 {
            println!(
                "{} cpu {} mem {} alloc {:?}",
                c.instance_type,
                c.requests.get("cpu"),
                c.requests.get("memory") >> 20,
                c.allocatable
            );
        }
    }
    for (k, v) in by_type {
        println!("{k}: nodes {} pods {} price {:.3}", v.0, v.1, v.2);
    }
    println!(
        "price {} lb {} unsched {}",
        plan.price_per_hour,
        plan.lower_bound_per_hour,
        plan.unschedulable.len()
    );
}

#[test]
#[ignore]
fn debug_mixed_duals() {
    let input = crate::bench::mixed_input(5000);
    let dims = crate::scheduling::model::Dims::for_input(&input);
    let templates = crate::scheduling::templates::build(&input, &dims);
    let plan = solve(&input);
    println!("dims {:?} lb {}", dims.names, plan.lower_bound_per_hour);
    // Recompute duals over a single class holding all demand.
    let mut demand = vec![0i64; dims.len()];
    for p in &input.pods {
        for (d, v) in demand.iter_mut().zip(dims.vector(&p.requests)) {
            *d += v;
        }
    }
    let lp = crate::scheduling::lp::CoveringLp {
        demand: demand.iter().map(|d| *d as f64).collect(),
        columns: templates
            .iter()
            .map(|t| (t.price(t.full_mask()), t.capacity.iter().map(|c| *c as f64).collect()))
            .collect(),
    };
    let b = lp.solve();
    println!("aggregate lb {} duals {:?}", b.lower_bound, b.duals);
    let mut ranked: Vec<(f64, String)> = templates
        .iter()
        .map(|t| {
            let worth: f64 = t.capacity.iter().zip(&b.duals).map(|(c, y)| *c as f64 * y).sum();
            (
                worth / t.price(t.full_mask()),
                input.nodepools[t.pool].instance_types[t.instance_type].name.clone(),
            )
        })
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    for r in ranked.iter().take(8) {
        println!("{r:?}");
    }
}
