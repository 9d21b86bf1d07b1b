//! Scenario tests of the solver on the real eastus catalog. Integration tests: the catalog is a layer
//! beside the solver, not below it, so only a test outside both may join them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use karpenter_azure::catalog::{instance_types, CapacityOptions, PriceTable, UnavailableOfferings};
use karpenter_azure::model::labels;
use karpenter_azure::model::requirements::{Requirement, Requirements};
use karpenter_azure::model::resources::Resources;
use karpenter_azure::scheduling::input::{NodePoolInput, Pod, SolveInput};
use karpenter_azure::scheduling::solve;

fn eastus_pool(name: &str, weight: i32) -> NodePoolInput {
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
        replicas: None,
    }
}

fn pod(name: &str, cpu_m: i64, mem_mi: i64) -> Pod {
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
        pods: (0..100).map(|i| Arc::new(pod(&format!("web-{i}"), 1000, 2048))).collect(),
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
        pods: vec![pod("huge", 1000, 64 << 20).into()],
        nodepools: vec![eastus_pool("general", 0)],
        ..Default::default()
    };
    let plan = solve(&input);
    assert_eq!(plan.unschedulable.len(), 1);
    let reason = &plan.unschedulable[0].reason;
    assert!(reason.contains("nodepool general") && reason.contains("memory"), "{reason}");
}
