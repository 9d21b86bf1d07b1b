//! Pods whose hard topology rules use a key the solver does not model are refused with a reason, rather
//! than planned as if the rule were not there.
//!
//! The solver knows three topology domains: the zone, the node (hostname) and the capacity type
//! (`Scope` in [`crate::scheduling::shapes`]). A `DoNotSchedule` topology spread or a required pod
//! (anti-)affinity term on any other key (a custom node label, `topology.kubernetes.io/region`) would
//! be dropped silently by the grouping into shapes, and the plan could break the rule; such a pod is
//! reported unschedulable instead, so the controller records an event with the reason and
//! kube-scheduler stays in charge of it. Soft rules (`ScheduleAnyway`, preferred terms) on other keys
//! are preferences and are left unhonoured.

use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_ZONE};
use crate::scheduling::input::{Pod, WhenUnsatisfiable};

/// The topology keys the solver models.
pub const SUPPORTED: [&str; 3] = [LABEL_ZONE, LABEL_HOSTNAME, LABEL_CAPACITY_TYPE];

/// Why `pod` cannot be planned, when a hard topology rule uses an unsupported key.
pub fn refusal(pod: &Pod) -> Option<String> {
    let spread = pod
        .topology_spread
        .iter()
        .filter(|s| s.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule)
        .map(|s| ("topologySpreadConstraints", &s.topology_key));
    let affinity = pod.affinity.iter().map(|t| ("podAffinity", &t.topology_key));
    let anti = pod.anti_affinity.iter().map(|t| ("podAntiAffinity", &t.topology_key));
    let (rule, key) =
        spread.chain(affinity).chain(anti).find(|(_, key)| !SUPPORTED.contains(&key.as_str()))?;
    Some(format!(
        "{rule} topology key {key:?} is not supported (only {} are); the pod is left to kube-scheduler",
        SUPPORTED.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::requirements::Requirements;
    use crate::scheduling::input::{PodAffinityTerm, TopologySpread};

    fn spread(key: &str, when: WhenUnsatisfiable) -> TopologySpread {
        TopologySpread {
            topology_key: key.into(),
            max_skew: 1,
            min_domains: None,
            when_unsatisfiable: when,
            selector: Requirements::new(),
        }
    }

    #[test]
    fn hard_rules_on_other_keys_are_refused_and_soft_ones_are_not() {
        let mut pod = Pod {
            topology_spread: vec![spread(LABEL_ZONE, WhenUnsatisfiable::DoNotSchedule)],
            ..Pod::default()
        };
        assert_eq!(refusal(&pod), None);
        pod.topology_spread.push(spread("rack", WhenUnsatisfiable::ScheduleAnyway));
        assert_eq!(refusal(&pod), None, "a preference");
        pod.anti_affinity.push(PodAffinityTerm {
            selector: Requirements::new(),
            namespaces: vec![],
            topology_key: "topology.kubernetes.io/region".into(),
        });
        let why = refusal(&pod).expect("refused");
        assert!(why.contains("podAntiAffinity") && why.contains("topology.kubernetes.io/region"), "{why}");
        assert!(why.contains(LABEL_HOSTNAME), "{why}");
    }
}
