//! A solve that panics must not stop provisioning. The solver is pure and tested against oracles, but
//! an input nobody foresaw could still make it panic; retried with the same pods it would panic on
//! every round, and no pod would get capacity again. [`solve_isolating`] solves the batch; on a panic
//! it finds the pods the solver panics on by solving halves of the batch (each on its own, so the
//! search costs a few solves per bad pod), plans the others, and returns the bad ones, which the
//! provisioner reports on the pod and leaves out for [`QUARANTINE`].

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use crate::scheduling::{Plan, Pod, PodId, SolveInput};

/// How long a pod the solver panicked on is left out of provisioning before it is tried again.
pub const QUARANTINE: Duration = Duration::from_secs(10 * 60);

/// The plan for the pods the solver can plan (None when it panics whatever is left out), and the
/// pods it panics on.
pub fn solve_isolating(
    input: &SolveInput,
    solve: &dyn Fn(&SolveInput) -> Plan,
) -> (Option<Plan>, Vec<PodId>) {
    if let Some(plan) = try_solve(input, &input.pods, solve) {
        return (Some(plan), vec![]);
    }
    let mut bad = vec![];
    find_bad(input, &input.pods, solve, &mut bad);
    let good: Vec<Arc<Pod>> = input.pods.iter().filter(|p| !bad.contains(&p.id())).cloned().collect();
    match try_solve(input, &good, solve) {
        Some(plan) => (Some(plan), bad),
        // It panics on something the pods share: all of them wait.
        None => (None, input.pods.iter().map(|p| p.id()).collect()),
    }
}

/// The solve of `input` with only `pods` pending; None when it panics.
fn try_solve(input: &SolveInput, pods: &[Arc<Pod>], solve: &dyn Fn(&SolveInput) -> Plan) -> Option<Plan> {
    let batch = SolveInput { pods: pods.to_vec(), ..input.clone() };
    catch_unwind(AssertUnwindSafe(|| solve(&batch))).ok()
}

/// Adds to `bad` the pods of `pods` the solver panics on alone or within their half.
fn find_bad(
    input: &SolveInput,
    pods: &[Arc<Pod>],
    solve: &dyn Fn(&SolveInput) -> Plan,
    bad: &mut Vec<PodId>,
) {
    if pods.len() <= 1 {
        if try_solve(input, pods, solve).is_none() {
            bad.extend(pods.iter().map(|p| p.id()));
        }
        return;
    }
    let (left, right) = pods.split_at(pods.len() / 2);
    for half in [left, right] {
        if try_solve(input, half, solve).is_none() {
            find_bad(input, half, solve, bad);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(names: &[&str]) -> SolveInput {
        let pods = names
            .iter()
            .map(|name| {
                Arc::new(Pod { name: name.to_string(), namespace: "default".into(), ..Pod::default() })
            })
            .collect();
        SolveInput { pods, ..SolveInput::default() }
    }

    /// A solver that panics on any batch with a pod named `poison*`.
    fn fragile(input: &SolveInput) -> Plan {
        assert!(!input.pods.iter().any(|p| p.name.starts_with("poison")), "a bug on this pod");
        crate::scheduling::solve(input)
    }

    #[test]
    fn the_pods_the_solver_panics_on_are_set_aside_and_the_others_are_planned() {
        let names = ["a", "b", "poison-1", "c", "d", "e", "poison-2", "f"];
        let (plan, bad) = solve_isolating(&input(&names), &fragile);
        assert_eq!(bad, ["default/poison-1", "default/poison-2"]);
        let plan = plan.expect("the others are planned");
        let decided = plan.unschedulable.len() + plan.nodeclaims.iter().map(|c| c.pods.len()).sum::<usize>();
        assert_eq!(decided, 6, "{plan:?}");
        let (plan, bad) = solve_isolating(&input(&["a", "b"]), &fragile);
        assert!(plan.is_some() && bad.is_empty());
    }
}
