//! The cancel hook of [`solve_with_cancel`]: it stops the solve, and while it does not, the plan is
//! exactly [`solve`]'s. And [`lower_bound_with_cancel`] is exactly the bound of [`solve`]'s plan.

use std::cell::Cell;
use std::sync::Arc;

use crate::scheduling::test_support::{instance_type_in, pod, pool, GI};
use crate::scheduling::{lower_bound_with_cancel, solve, solve_with_cancel, Cancelled, Pod, SolveInput};

/// Two workloads of different shapes and one pod too big for any type, so the solve runs several
/// relaxation rounds, opens several nodes and has merges to consider.
fn input() -> SolveInput {
    let zones = ["z-1", "z-2"];
    let pool = pool(
        "general",
        vec![
            instance_type_in("c2", 2, 0.2, &zones),
            instance_type_in("c4", 4, 0.38, &zones),
            instance_type_in("c8", 8, 0.8, &zones),
        ],
        [],
    );
    let mut pods: Vec<Pod> = (0..25).map(|i| pod(&format!("web-{i}"), 700, GI)).collect();
    pods.extend((0..9).map(|i| pod(&format!("db-{i}"), 1500, 6 * GI)));
    pods.push(pod("huge", 64_000, GI));
    SolveInput { pods: pods.into_iter().map(Arc::new).collect(), nodepools: vec![pool], ..Default::default() }
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

#[test]
fn the_bound_alone_is_exactly_the_bound_of_the_whole_solve() {
    let mut inputs = vec![input()];
    // Pods of many sizes over types of one family: a bound the configuration LP has to work for.
    let mut varied = input();
    varied.pods = (0..60)
        .map(|i| Arc::new(pod(&format!("p-{i}"), 300 + (i * 137) % 3_500, (1 + i % 7) * GI / 2)))
        .collect();
    inputs.push(varied);
    for input in inputs {
        let plan = solve(&input);
        assert!(plan.lower_bound_per_hour > 0.0, "{plan:?}");
        let bound = lower_bound_with_cancel(&input, &|| false).expect("never cancelled");
        assert_eq!(bound.to_bits(), plan.lower_bound_per_hour.to_bits(), "{bound} vs {plan:?}");
    }
    assert_eq!(lower_bound_with_cancel(&input(), &|| true), Err(Cancelled));
}
