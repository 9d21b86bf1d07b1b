//! The cancel hook of [`solve_with_cancel`]: it stops the solve, and while it does not, the plan is
//! exactly [`solve`]'s.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::labels::{LABEL_INSTANCE_TYPE, LABEL_NODEPOOL};
use crate::model::resources::{CPU, MEMORY, PODS};
use crate::model::{CapacityType, InstanceType, Offering, Overhead, Requirement, Requirements, Resources};
use crate::scheduling::{solve, solve_with_cancel, Cancelled, NodePoolInput, Pod, SolveInput};

const GI: i64 = 1 << 30;

fn instance_type(name: &str, cpus: i64, price: f64) -> InstanceType {
    let capacity = Resources::new().with(CPU, cpus * 1000).with(MEMORY, cpus * 4 * GI).with(PODS, 110);
    InstanceType {
        name: name.into(),
        vcpus: cpus as u32,
        memory_mib: (cpus * 4096) as u64,
        labels: BTreeMap::from([(LABEL_INSTANCE_TYPE.to_string(), name.to_string())]),
        allocatable: capacity.clone(),
        capacity,
        overhead: Overhead::default(),
        offerings: ["z-1", "z-2"]
            .iter()
            .map(|zone| Offering {
                zone: zone.to_string(),
                capacity_type: CapacityType::OnDemand,
                price,
                available: true,
            })
            .collect(),
    }
}

/// Two workloads of different shapes and one pod too big for any type, so the solve runs several
/// relaxation rounds, opens several nodes and has merges to consider.
fn input() -> SolveInput {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::is_in(LABEL_NODEPOOL, ["general"]));
    let pool = NodePoolInput {
        name: "general".into(),
        weight: 0,
        requirements,
        labels: BTreeMap::from([(LABEL_NODEPOOL.to_string(), "general".to_string())]),
        taints: vec![],
        startup_taints: vec![],
        remaining: None,
        instance_types: Arc::new(vec![
            instance_type("c2", 2, 0.2),
            instance_type("c4", 4, 0.38),
            instance_type("c8", 8, 0.8),
        ]),
        replicas: None,
    };
    let pod = |name: String, cpu_m: i64, mem: i64| Pod {
        namespace: "default".into(),
        name,
        requests: Resources::new().with(CPU, cpu_m).with(MEMORY, mem).with(PODS, 1),
        ..Default::default()
    };
    let mut pods: Vec<Pod> = (0..25).map(|i| pod(format!("web-{i}"), 700, GI)).collect();
    pods.extend((0..9).map(|i| pod(format!("db-{i}"), 1500, 6 * GI)));
    pods.push(pod("huge".into(), 64_000, GI));
    SolveInput { pods, nodepools: vec![pool], ..Default::default() }
}

#[test]
fn a_hook_that_says_stop_stops_the_solve() {
    let asked = Cell::new(0);
    let stop = || {
        asked.set(asked.get() + 1);
        true
    };
    assert_eq!(solve_with_cancel(&input(), &stop), Err(Cancelled));
    assert_eq!(asked.get(), 1, "the first safe point stops it");
}

#[test]
fn a_hook_that_never_cancels_gives_exactly_the_plan_of_solve() {
    let input = input();
    let asked = Cell::new(0);
    let never = || {
        asked.set(asked.get() + 1);
        false
    };
    let plan = solve_with_cancel(&input, &never).expect("never cancelled");
    assert_eq!(plan, solve(&input));
    assert!(!plan.nodeclaims.is_empty() && plan.unschedulable.len() == 1, "{plan:?}");
    assert!(asked.get() > 3, "asked at every safe point, {} times", asked.get());
}

#[test]
fn stopping_at_any_safe_point_gives_no_plan() {
    let input = input();
    let asked = Cell::new(0);
    let never = || {
        asked.set(asked.get() + 1);
        false
    };
    let expected = solve_with_cancel(&input, &never).unwrap();
    let safe_points = asked.get();
    for allowed in 0..safe_points {
        let calls = Cell::new(0);
        let after = || {
            calls.set(calls.get() + 1);
            calls.get() > allowed
        };
        assert_eq!(solve_with_cancel(&input, &after), Err(Cancelled), "stopping after {allowed} safe points");
    }
    let calls = Cell::new(0);
    let late = || {
        calls.set(calls.get() + 1);
        calls.get() > safe_points
    };
    assert_eq!(solve_with_cancel(&input, &late), Ok(expected), "a deadline after the last safe point");
}
