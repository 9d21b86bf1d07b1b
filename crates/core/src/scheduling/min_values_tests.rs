//! MinValuesPolicy in the solver: under Strict the pods of a node whose NodePool's minValues its fitting
//! sizes cannot meet stay pending with the reason; under BestEffort the node is planned with the
//! minValues lowered to what those sizes meet, and a minValues that can be met is left as it is.

use std::collections::BTreeMap;

use crate::model::labels::LABEL_INSTANCE_TYPE;
use crate::model::{Requirement, Requirements};
use crate::scheduling::test_support::{instance_type, pod, pool, GI};
use crate::scheduling::{placement_with_base, solve, MinValuesPolicy, RunningBase, SolveInput, SolveOptions};

/// One pod of 1.5 CPUs, which c2, c4 and c8 hold, and a pool asking for `min_values` instance types.
fn input(min_values: u32, policy: MinValuesPolicy) -> SolveInput {
    let pool = pool(
        "general",
        vec![
            instance_type("c1", 1, 0.1),
            instance_type("c2", 2, 0.2),
            instance_type("c4", 4, 0.38),
            instance_type("c8", 8, 0.8),
        ],
        [Requirement::exists(LABEL_INSTANCE_TYPE).with_min_values(Some(min_values))],
    );
    let options = SolveOptions { min_values_policy: policy, ..SolveOptions::default() };
    SolveInput {
        pods: vec![pod("web", 1500, GI).into()],
        nodepools: vec![pool],
        options,
        ..Default::default()
    }
}

fn planned_min_values(input: &SolveInput) -> Option<u32> {
    let plan = solve(input);
    assert_eq!(plan.nodeclaims.len(), 1, "{plan:?}");
    plan.nodeclaims[0].requirements.get(LABEL_INSTANCE_TYPE).and_then(|r| r.min_values())
}

#[test]
fn strict_leaves_the_pods_pending_when_the_fitting_sizes_are_too_few() {
    let plan = solve(&input(4, MinValuesPolicy::Strict));
    assert!(plan.nodeclaims.is_empty(), "{plan:?}");
    assert_eq!(plan.unschedulable.len(), 1);
    let reason = &plan.unschedulable[0].reason;
    assert!(reason.contains(LABEL_INSTANCE_TYPE) && reason.contains('4'), "{reason}");
}

#[test]
fn best_effort_lowers_the_claims_min_values_to_what_the_fitting_sizes_meet() {
    // c1 cannot hold the pod: three sizes fit.
    assert_eq!(planned_min_values(&input(4, MinValuesPolicy::BestEffort)), Some(3));
}

#[test]
fn min_values_that_can_be_met_are_kept_under_either_policy() {
    for policy in [MinValuesPolicy::Strict, MinValuesPolicy::BestEffort] {
        assert_eq!(planned_min_values(&input(2, policy)), Some(2), "{policy:?}");
    }
}

#[test]
fn relaxing_drops_a_min_values_no_option_offers_a_value_for() {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::exists(LABEL_INSTANCE_TYPE).with_min_values(Some(3)));
    requirements.add(Requirement::exists("example.com/team").with_min_values(Some(2)));
    let options: Vec<BTreeMap<String, String>> = ["c2", "c4"]
        .iter()
        .map(|name| BTreeMap::from([(LABEL_INSTANCE_TYPE.to_string(), name.to_string())]))
        .collect();
    assert!(requirements.check_min_values(options.iter()).is_err());
    assert!(requirements.relax_min_values(options.iter()));
    assert_eq!(requirements.get(LABEL_INSTANCE_TYPE).and_then(|r| r.min_values()), Some(2));
    assert_eq!(
        requirements.get("example.com/team").and_then(|r| r.min_values()),
        None,
        "the API's minimum is 1"
    );
    assert!(requirements.check_min_values(options.iter()).is_ok());
    assert!(!requirements.relax_min_values(options.iter()), "nothing left to relax");
}

/// A placement tells what its plan will say before the NodeClaims are written, unless writing one may
/// fail: under Strict a claim whose minValues its sizes cannot meet leaves its pods pending instead.
#[test]
fn a_placement_is_sketched_only_where_no_claim_can_fail_on_min_values() {
    let sketch_of = |input: &SolveInput| {
        let base = RunningBase::new(input);
        let placement = placement_with_base(input, &base, &|| false).expect("never cancelled");
        placement.sketch().map(|s| (s.unschedulable.to_vec(), s.new_nodes))
    };
    assert_eq!(sketch_of(&input(4, MinValuesPolicy::Strict)), None);
    assert_eq!(sketch_of(&input(2, MinValuesPolicy::Strict)), None);
    for min_values in [2, 4] {
        let input = input(min_values, MinValuesPolicy::BestEffort);
        let plan = solve(&input);
        let (unschedulable, new_nodes) = sketch_of(&input).expect("BestEffort claims cannot fail");
        assert_eq!(unschedulable, plan.unschedulable);
        let sketched: Vec<(Vec<String>, f64)> =
            new_nodes.into_iter().map(|n| (n.pods, n.price_per_hour)).collect();
        let planned: Vec<(Vec<String>, f64)> =
            plan.nodeclaims.iter().map(|c| (c.pods.clone(), c.price_per_hour)).collect();
        assert_eq!(sketched, planned, "minValues {min_values}");
    }
}
