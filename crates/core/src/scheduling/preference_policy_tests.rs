//! PreferencePolicy in the solver: under Respect a pod's preferred node affinity picks the dearer size it
//! prefers; under Ignore the preference is given up from the start and the cheapest size wins.

use crate::model::labels::LABEL_INSTANCE_TYPE;
use crate::model::{Requirement, Requirements};
use crate::scheduling::input::Weighted;
use crate::scheduling::test_support::{instance_type, pod, pool, GI};
use crate::scheduling::{solve, Pod, PreferencePolicy, SolveInput, SolveOptions};

fn planned_size(policy: PreferencePolicy) -> String {
    let pool = pool("general", vec![instance_type("cheap", 2, 0.1), instance_type("preferred", 2, 0.5)], []);
    let mut preferred = Requirements::new();
    preferred.add(Requirement::is_in(LABEL_INSTANCE_TYPE, ["preferred"]));
    let pod = Pod { preferred_terms: vec![Weighted { weight: 100, term: preferred }], ..pod("web", 500, GI) };
    let options = SolveOptions { preference_policy: policy, ..SolveOptions::default() };
    let plan =
        solve(&SolveInput { pods: vec![pod.into()], nodepools: vec![pool], options, ..Default::default() });
    assert_eq!(plan.nodeclaims.len(), 1, "{plan:?}");
    plan.nodeclaims[0].instance_type.clone()
}

#[test]
fn respect_honours_a_preference_that_can_be_met() {
    assert_eq!(planned_size(PreferencePolicy::Respect), "preferred");
}

#[test]
fn ignore_gives_preferences_up_from_the_start() {
    assert_eq!(planned_size(PreferencePolicy::Ignore), "cheap");
}
