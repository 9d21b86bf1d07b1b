//! PreferencePolicy in the solver: under Respect a pod's preferred node affinity picks the dearer size it
//! prefers; under Ignore the preference is given up from the start and the cheapest size wins.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::labels::{LABEL_INSTANCE_TYPE, LABEL_NODEPOOL};
use crate::model::resources::{CPU, MEMORY, PODS};
use crate::model::{CapacityType, InstanceType, Offering, Overhead, Requirement, Requirements, Resources};
use crate::scheduling::input::Weighted;
use crate::scheduling::{solve, NodePoolInput, Pod, PreferencePolicy, SolveInput, SolveOptions};

const GI: i64 = 1 << 30;

fn instance_type(name: &str, price: f64) -> InstanceType {
    let capacity = Resources::new().with(CPU, 2000).with(MEMORY, 8 * GI).with(PODS, 110);
    InstanceType {
        name: name.into(),
        vcpus: 2,
        memory_mib: 8192,
        labels: BTreeMap::from([(LABEL_INSTANCE_TYPE.to_string(), name.to_string())]),
        allocatable: capacity.clone(),
        capacity,
        overhead: Overhead::default(),
        offerings: vec![Offering {
            zone: "z-1".into(),
            capacity_type: CapacityType::OnDemand,
            price,
            available: true,
        }],
    }
}

fn planned_size(policy: PreferencePolicy) -> String {
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
        instance_types: Arc::new(vec![instance_type("cheap", 0.1), instance_type("preferred", 0.5)]),
        replicas: None,
    };
    let mut preferred = Requirements::new();
    preferred.add(Requirement::is_in(LABEL_INSTANCE_TYPE, ["preferred"]));
    let pod = Pod {
        namespace: "default".into(),
        name: "web".into(),
        requests: Resources::new().with(CPU, 500).with(MEMORY, GI).with(PODS, 1),
        preferred_terms: vec![Weighted { weight: 100, term: preferred }],
        ..Default::default()
    };
    let options = SolveOptions { preference_policy: policy, ..SolveOptions::default() };
    let plan = solve(&SolveInput { pods: vec![pod], nodepools: vec![pool], options, ..Default::default() });
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
