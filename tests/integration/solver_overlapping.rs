//! Topology rules whose selectors overlap other pods: a pod counted by a spread it does not carry (a
//! passive member), a pod counted by several spreads, and spreads next to affinity groups — the shape
//! of upstream Karpenter's own scheduling benchmark, where every pod carries one of seven `my-label`
//! values and the zone-spread and hostname-spread groups select on that label. Every pod that has a
//! place must be placed, and the independent feasibility checker (which counts every matching pod
//! on the plan's final state) must accept the plan.

use crate::support::solver_fixtures as fixtures;

use std::collections::BTreeMap;

use fixtures::*;
use karpenter_azure::model::labels::{LABEL_HOSTNAME, LABEL_ZONE};
use karpenter_azure::model::requirements::Requirement;
use karpenter_azure::scheduling::input::{Pod, TopologySpread, WhenUnsatisfiable};
use karpenter_azure::scheduling::{solve, Plan, SolveInput};

fn general() -> Vec<karpenter_azure::model::InstanceType> {
    vec![
        zonal_type("c2", 2000, 8 * GI, 0.2),
        zonal_type("c4", 4000, 16 * GI, 0.4),
        zonal_type("c8", 8000, 32 * GI, 0.8),
    ]
}

fn labelled(mut pod: Pod, key: &str, value: &str) -> Pod {
    std::sync::Arc::make_mut(&mut pod.labels).insert(key.into(), value.into());
    pod
}

fn spread_on(key: &str, value: &str, topology_key: &str) -> TopologySpread {
    TopologySpread {
        topology_key: topology_key.into(),
        max_skew: 1,
        min_domains: None,
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        selector: requirements(&[Requirement::is_in(key, [value])]),
    }
}

fn solved_without_pending(input: &SolveInput) -> Plan {
    let plan = solve(input);
    assert_feasible(input, &plan);
    assert!(plan.unschedulable.is_empty(), "pods left pending: {:#?}", plan.unschedulable);
    plan
}

/// Pods carrying `key=value` per zone, over the plan's new nodes.
fn per_zone(plan: &Plan, input: &SolveInput, key: &str, value: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for claim in &plan.nodeclaims {
        for name in &claim.pods {
            let pod = input.pods.iter().find(|p| &p.id() == name).expect("a planned pod is an input pod");
            if pod.labels.get(key).map(String::as_str) == Some(value) {
                *out.entry(claim.zone.clone()).or_default() += 1;
            }
        }
    }
    out
}

#[test]
fn pods_without_the_spread_that_it_selects_count_toward_its_skew() {
    // 7 spread pods and 11 unconstrained pods, all labelled tier=front: the spread counts all 18.
    let mut all: Vec<Pod> = (0..7)
        .map(|i| {
            let mut p = labelled(pod(&format!("spread-{i}"), "spread", 500, GI), "tier", "front");
            p.topology_spread = vec![spread_on("tier", "front", LABEL_ZONE)];
            p
        })
        .collect();
    all.extend((0..11).map(|i| labelled(pod(&format!("plain-{i}"), "plain", 700, 2 * GI), "tier", "front")));
    let input = input(all, vec![pool("default", general())]);
    let plan = solved_without_pending(&input);
    let zones = per_zone(&plan, &input, "tier", "front");
    let (min, max) = (zones.values().min().unwrap(), zones.values().max().unwrap());
    assert!(zones.len() == 3 && max - min <= 1, "tier=front per zone: {zones:?}");
}

#[test]
fn a_pod_counted_by_two_spreads_keeps_both_balanced() {
    // Group a spreads on a=x, group b on b=y; the "both" pods carry both labels and both spreads.
    let mut all = vec![];
    for i in 0..5 {
        let mut p = labelled(pod(&format!("a-{i}"), "a", 500, GI), "a", "x");
        p.topology_spread = vec![spread_on("a", "x", LABEL_ZONE)];
        all.push(p);
        let mut q = labelled(pod(&format!("b-{i}"), "b", 300, GI), "b", "y");
        q.topology_spread = vec![spread_on("b", "y", LABEL_ZONE)];
        all.push(q);
        let mut both = labelled(labelled(pod(&format!("both-{i}"), "both", 200, GI), "a", "x"), "b", "y");
        both.topology_spread = vec![spread_on("a", "x", LABEL_ZONE), spread_on("b", "y", LABEL_ZONE)];
        all.push(both);
    }
    let input = input(all, vec![pool("default", general())]);
    let plan = solved_without_pending(&input);
    for (key, value) in [("a", "x"), ("b", "y")] {
        let zones = per_zone(&plan, &input, key, value);
        let (min, max) = (zones.values().min().unwrap(), zones.values().max().unwrap());
        assert!(zones.len() == 3 && max - min <= 1, "{key}={value} per zone: {zones:?}");
    }
}

#[test]
fn a_passive_pod_held_to_one_zone_does_not_strand_the_spread() {
    // Five unconstrained tier=front pods may only run in z-1; the six spread pods must then go to the
    // other zones rather than be refused.
    let mut all: Vec<Pod> = (0..5)
        .map(|i| {
            let mut p = labelled(pod(&format!("pinned-{i}"), "pinned", 500, GI), "tier", "front");
            p.required_terms = vec![requirements(&[Requirement::is_in(LABEL_ZONE, ["z-1"])])];
            p
        })
        .collect();
    all.extend((0..6).map(|i| {
        let mut p = labelled(pod(&format!("spread-{i}"), "spread", 500, GI), "tier", "front");
        p.topology_spread = vec![spread_on("tier", "front", LABEL_ZONE)];
        p
    }));
    let input = input(all, vec![pool("default", general())]);
    let plan = solved_without_pending(&input);
    for i in 0..6 {
        let zone = &claim_of(&plan, &format!("default/spread-{i}")).unwrap().zone;
        assert_ne!(zone, "z-1", "spread-{i} went to the zone the pinned pods fill");
    }
}

#[test]
fn upstream_benchmark_shape_places_every_pod() {
    // Upstream's benchmark in small: generic, zone-spread and hostname-spread pods share `my-label`
    // values, zonal self-affinity groups, and a hostname anti-affinity group over all of them.
    let values = ["a", "b", "c"];
    let sizes = [(100, GI / 4), (250, GI / 2), (500, GI), (1000, 2 * GI), (1500, 4 * GI)];
    let mut all = vec![];
    for i in 0..60usize {
        let (cpu, memory) = sizes[(i * 7) % sizes.len()];
        let value = values[(i * 5) % values.len()];
        let kind = ["generic", "spread-zone", "spread-host", "affinity", "anti"][i % 5];
        let mut p = pod(&format!("{kind}-{i}"), kind, cpu, memory);
        std::sync::Arc::make_mut(&mut p.labels).remove("app");
        match kind {
            "generic" => p = labelled(p, "my-label", value),
            "spread-zone" => {
                p = labelled(p, "my-label", value);
                p.topology_spread = vec![spread_on("my-label", values[(i * 3) % values.len()], LABEL_ZONE)];
            }
            "spread-host" => {
                p = labelled(p, "my-label", value);
                p.topology_spread =
                    vec![spread_on("my-label", values[(i * 3) % values.len()], LABEL_HOSTNAME)];
            }
            "affinity" => {
                p = labelled(p, "my-affinity", value);
                p.affinity = vec![term_on("my-affinity", value, LABEL_ZONE)];
            }
            _ => {
                p = labelled(p, "app", "nginx");
                p.anti_affinity = vec![term_on("app", "nginx", LABEL_HOSTNAME)];
            }
        }
        all.push(p);
    }
    let input = input(all, vec![pool("default", general())]);
    solved_without_pending(&input);
}

fn term_on(
    key: &str,
    value: &str,
    topology_key: &str,
) -> karpenter_azure::scheduling::input::PodAffinityTerm {
    karpenter_azure::scheduling::input::PodAffinityTerm {
        selector: requirements(&[Requirement::is_in(key, [value])]),
        namespaces: vec!["default".into()],
        topology_key: topology_key.into(),
    }
}

#[test]
fn zone_and_capacity_type_spreads_over_the_same_pods_with_spot_in_two_zones() {
    // Spot is sold in two zones only, on-demand in all three, and both spreads count every pod
    // labelled tier=back: a pod must never be pinned to spot in the zone that has none, and the
    // zone spread must still hold on the final plan.
    use karpenter_azure::model::labels::LABEL_CAPACITY_TYPE;
    use karpenter_azure::model::CapacityType;
    let mut offerings: Vec<(&str, CapacityType, f64)> =
        ZONES.iter().map(|z| (*z, CapacityType::OnDemand, 0.2)).collect();
    offerings.extend(ZONES[..2].iter().map(|z| (*z, CapacityType::Spot, 0.08)));
    let types = vec![instance_type("c2", 2000, 8 * GI, &offerings)];
    let mut all = vec![];
    for i in 0..9 {
        let mut p = labelled(pod(&format!("by-capacity-{i}"), "by-capacity", 100, 128 * MI), "tier", "back");
        p.topology_spread = vec![spread_on("tier", "back", LABEL_CAPACITY_TYPE)];
        all.push(p);
    }
    for i in 0..3 {
        let mut p = labelled(pod(&format!("by-zone-{i}"), "by-zone", 100, 128 * MI), "tier", "back");
        p.topology_spread = vec![spread_on("tier", "back", LABEL_ZONE)];
        all.push(p);
    }
    all.extend((0..3).map(|i| labelled(pod(&format!("plain-{i}"), "plain", 100, 128 * MI), "tier", "back")));
    let input = input(all, vec![pool("default", types)]);
    let plan = solved_without_pending(&input);
    for claim in &plan.nodeclaims {
        assert!(
            !(claim.zone == ZONES[2] && claim.capacity_type == CapacityType::Spot),
            "{} is spot in {}, which sells no spot",
            claim.name,
            claim.zone
        );
    }
}

#[test]
fn pods_that_need_nodes_of_their_own_take_an_equal_share_of_the_rest() {
    // Forty hostname anti-affinity pods need forty nodes in any plan; 240 generic pods of varied
    // shapes and workloads (too many classes for column generation) fit beside them. Sizes are
    // priced by capacity, as upstream's fake types are, so a node sized for one anti-affinity pod
    // alone wastes most of what it costs: the plan must stay close to the bound.
    let types: Vec<_> =
        (1..=32).map(|k| zonal_type(&format!("s{k}"), 1000 * k, 2 * GI * k, 0.3 * k as f64)).collect();
    let shapes = [(100, GI / 8), (250, GI / 4), (500, GI / 2), (1000, GI), (1500, 2 * GI), (250, 2 * GI)];
    let mut all = vec![];
    for i in 0..40usize {
        let (cpu, memory) = shapes[(i * 5) % shapes.len()];
        let mut p = labelled(pod(&format!("anti-{i}"), "nginx", cpu, memory), "app", "nginx");
        p.anti_affinity = vec![term_on("app", "nginx", LABEL_HOSTNAME)];
        all.push(p);
    }
    for i in 0..240usize {
        let (cpu, memory) = shapes[(i * 7 + 3) % shapes.len()];
        all.push(pod(&format!("generic-{i}"), &format!("web-{}", i % 40), cpu, memory));
    }
    let input = input(all, vec![pool("default", types)]);
    let plan = solved_without_pending(&input);
    let anti_nodes = plan.nodeclaims.iter().filter(|c| c.pods.iter().any(|p| p.contains("anti-"))).count();
    assert_eq!(anti_nodes, 40);
    assert!(
        plan.price_per_hour <= 1.15 * plan.lower_bound_per_hour,
        "{} nodes, {:.2} $/h against a bound of {:.2}",
        plan.nodeclaims.len(),
        plan.price_per_hour,
        plan.lower_bound_per_hour
    );
}
