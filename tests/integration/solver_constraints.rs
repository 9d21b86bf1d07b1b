//! Table-style tests of each scheduling constraint, in the spirit of upstream's scheduling suite: each
//! builds a small input, solves it, asserts the specific outcome and runs the feasibility checker.

use crate::support::solver_fixtures as fixtures;
use std::sync::Arc;

use fixtures::*;
use karpenter_azure::model::labels::{LABEL_ARCH, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_ZONE};
use karpenter_azure::model::requirements::Requirement;
use karpenter_azure::model::resources::{Resources, CPU, MEMORY, NVIDIA_GPU, PODS};
use karpenter_azure::model::CapacityType;
use karpenter_azure::scheduling::input::Weighted;
use karpenter_azure::scheduling::{solve, Plan, SolveInput};
use std::collections::BTreeMap;

fn solved(input: &SolveInput) -> Plan {
    let plan = solve(input);
    assert_feasible(input, &plan);
    plan
}

/// Three general types, cheapest per core first: 2, 4 and 8 cores at 0.1 $/core/h.
fn general() -> Vec<karpenter_azure::model::InstanceType> {
    vec![
        zonal_type("c2", 2000, 8 * GI, 0.2),
        zonal_type("c4", 4000, 16 * GI, 0.4),
        zonal_type("c8", 8000, 32 * GI, 0.8),
    ]
}

#[test]
fn node_selector_on_a_well_known_label() {
    let arm = with_labels(zonal_type("arm4", 4000, 16 * GI, 0.5), &[(LABEL_ARCH, "arm64")]);
    let mut types = general();
    types.push(arm);
    let mut p = pod("p", "web", 1000, GI);
    p.required_terms = vec![requirements(&[Requirement::is_in(LABEL_ARCH, ["arm64"])])];
    let input = input(vec![p], vec![pool("default", types)]);
    let plan = solved(&input);
    assert_eq!(claim_of(&plan, "default/p").unwrap().instance_type, "arm4");
}

#[test]
fn required_node_affinity_terms_are_ored() {
    let mut p = pod("p", "web", 1000, GI);
    p.required_terms = vec![
        requirements(&[Requirement::is_in(LABEL_ARCH, ["s390x"])]),
        requirements(&[Requirement::is_in(LABEL_INSTANCE_TYPE, ["c4"])]),
    ];
    let input = input(vec![p], vec![pool("default", general())]);
    let plan = solved(&input);
    assert_eq!(claim_of(&plan, "default/p").unwrap().instance_type, "c4");
}

#[test]
fn preferred_node_affinity_is_honoured_when_possible() {
    let mut p = pod("p", "web", 1000, GI);
    p.preferred_terms =
        vec![Weighted { weight: 50, term: requirements(&[Requirement::is_in(LABEL_ZONE, ["z-2"])]) }];
    let input = input(vec![p], vec![pool("default", general())]);
    let plan = solved(&input);
    assert_eq!(claim_of(&plan, "default/p").unwrap().zone, "z-2");
}

#[test]
fn preferred_node_affinity_is_relaxed_when_it_cannot_be_met() {
    let mut p = pod("p", "web", 1000, GI);
    p.preferred_terms =
        vec![Weighted { weight: 50, term: requirements(&[Requirement::is_in(LABEL_ARCH, ["arm64"])]) }];
    let input = input(vec![p], vec![pool("default", general())]);
    let plan = solved(&input);
    assert!(claim_of(&plan, "default/p").is_some(), "{plan:#?}");
}

#[test]
fn taints_need_tolerations() {
    let mut tainted = pool("dedicated", vec![zonal_type("cheap", 4000, 16 * GI, 0.1)]);
    tainted.taints = vec![taint("dedicated", "batch")];
    let untainted = pool("general", general());
    // Without a toleration the cheaper tainted pool is out of reach.
    let plain = input(vec![pod("plain", "web", 1000, GI)], vec![tainted.clone(), untainted.clone()]);
    assert_eq!(claim_of(&solved(&plain), "default/plain").unwrap().nodepool, "general");
    // With one, the pod may use it, and it is cheaper.
    let mut tolerant = pod("tolerant", "batch", 1000, GI);
    tolerant.tolerations = vec![toleration("dedicated")].into();
    let tolerant = input(vec![tolerant], vec![tainted, untainted]);
    assert_eq!(claim_of(&solved(&tolerant), "default/tolerant").unwrap().nodepool, "dedicated");
}

#[test]
fn the_heavier_nodepool_wins_even_if_pricier() {
    let mut heavy = pool("heavy", vec![zonal_type("pricey", 4000, 16 * GI, 1.0)]);
    heavy.weight = 10;
    let mut light = pool("light", vec![zonal_type("cheap", 4000, 16 * GI, 0.1)]);
    light.weight = 1;
    let input = input(vec![pod("p", "web", 1000, GI)], vec![light, heavy]);
    let plan = solved(&input);
    assert_eq!(claim_of(&plan, "default/p").unwrap().nodepool, "heavy");
}

#[test]
fn limits_leave_pods_unschedulable_with_a_reason() {
    let mut limited = pool("limited", vec![zonal_type("c4", 4000, 16 * GI, 0.4)]);
    limited.remaining = Some(Resources::new().with(CPU, 4000));
    let input = input(pods("web", 4, 1500, GI), vec![limited]);
    let plan = solved(&input);
    assert_eq!(plan.nodeclaims.len(), 1);
    assert_eq!(plan.unschedulable.len(), 2, "{plan:#?}");
    for u in &plan.unschedulable {
        assert!(u.reason.to_lowercase().contains("limit"), "reason should mention the limit: {}", u.reason);
    }
}

#[test]
fn zone_spread_max_skew_1_across_three_zones() {
    let mut web = pods("web", 6, 500, GI);
    web.iter_mut().for_each(|p| p.topology_spread = vec![spread("web", LABEL_ZONE, 1)]);
    let input = input(web, vec![pool("default", general())]);
    let plan = solved(&input);
    let per_zone = pods_per_zone(&plan, "web");
    assert_eq!(per_zone.values().copied().collect::<Vec<_>>(), vec![2, 2, 2], "{per_zone:?}");
}

#[test]
fn hostname_spread_puts_one_pod_per_node() {
    let mut web = pods("web", 4, 500, GI);
    web.iter_mut().for_each(|p| p.topology_spread = vec![spread("web", LABEL_HOSTNAME, 1)]);
    let input = input(web, vec![pool("default", general())]);
    let plan = solved(&input);
    assert_eq!(plan.nodeclaims.len(), 4);
}

#[test]
fn hostname_anti_affinity_puts_one_pod_per_node() {
    let mut web = pods("web", 3, 500, GI);
    web.iter_mut().for_each(|p| p.anti_affinity = vec![affinity_term("web", LABEL_HOSTNAME)]);
    let input = input(web, vec![pool("default", general())]);
    let plan = solved(&input);
    assert_eq!(plan.nodeclaims.len(), 3);
    assert!(plan.nodeclaims.iter().all(|c| c.pods.len() == 1));
}

#[test]
fn the_bound_buys_a_node_per_pod_of_an_anti_affinity_group_of_several_sizes() {
    // Twelve pods under one hostname anti-affinity, in three sizes: three classes of four. No two
    // share a node, so every plan buys twelve nodes, and the cheapest node costs 0.2 $/h.
    let mut web: Vec<_> = (0..12).map(|i| pod(&format!("web-{i}"), "web", 300 + 200 * (i % 3), GI)).collect();
    web.iter_mut().for_each(|p| p.anti_affinity = vec![affinity_term("web", LABEL_HOSTNAME)]);
    let plan = solved(&input(web, vec![pool("default", general())]));
    assert_eq!(plan.nodeclaims.len(), 12);
    assert!(plan.lower_bound_per_hour >= 12.0 * 0.2 - 1e-9, "bound {}", plan.lower_bound_per_hour);
    assert!(plan.lower_bound_per_hour <= plan.price_per_hour + 1e-9);

    // The same for a hostname spread of maxSkew 2 over the pods: at most two share a node.
    let mut web: Vec<_> = (0..12).map(|i| pod(&format!("web-{i}"), "web", 300 + 200 * (i % 3), GI)).collect();
    web.iter_mut().for_each(|p| p.topology_spread = vec![spread("web", LABEL_HOSTNAME, 2)]);
    let plan = solved(&input(web, vec![pool("default", general())]));
    assert!(plan.lower_bound_per_hour >= 6.0 * 0.2 - 1e-9, "bound {}", plan.lower_bound_per_hour);
    assert!(plan.lower_bound_per_hour <= plan.price_per_hour + 1e-9);
}

#[test]
fn zone_anti_affinity_uses_each_zone_once() {
    let mut web = pods("web", 4, 500, GI);
    web.iter_mut().for_each(|p| p.anti_affinity = vec![affinity_term("web", LABEL_ZONE)]);
    let input = input(web, vec![pool("default", general())]);
    let plan = solved(&input);
    let per_zone = pods_per_zone(&plan, "web");
    assert_eq!(per_zone.len(), 3, "{per_zone:?}");
    assert!(per_zone.values().all(|n| *n == 1));
    assert_eq!(plan.unschedulable.len(), 1, "three zones hold three pods; the fourth waits");
}

#[test]
fn zonal_self_affinity_keeps_pods_in_one_zone() {
    let mut web = pods("web", 6, 3000, GI);
    web.iter_mut().for_each(|p| p.affinity = vec![affinity_term("web", LABEL_ZONE)]);
    let input = input(web, vec![pool("default", general())]);
    let plan = solved(&input);
    assert!(plan.nodeclaims.len() >= 2);
    assert_eq!(pods_per_zone(&plan, "web").len(), 1, "{plan:#?}");
    assert!(plan.unschedulable.is_empty());
}

#[test]
fn running_pods_anti_affinity_keeps_new_pods_away() {
    let mut input = input(vec![pod("p", "web", 500, GI)], vec![pool("default", general())]);
    input.nodes.push(Arc::new(existing_node(
        "n1",
        "z-1",
        Resources::new().with(CPU, 8000).with(MEMORY, 32 * GI).with(PODS, 110),
    )));
    let mut guard = pod("guard", "guard", 500, GI);
    guard.node_name = Some("n1".into());
    guard.anti_affinity = vec![affinity_term("web", LABEL_HOSTNAME)];
    input.running.push(Arc::new(guard));
    let plan = solved(&input);
    assert!(plan.existing.is_empty(), "{plan:#?}");
    assert!(claim_of(&plan, "default/p").is_some());
}

#[test]
fn host_port_conflicts_split_pods() {
    let mut web = pods("web", 2, 500, GI);
    web.iter_mut().for_each(|p| p.host_ports = vec![host_port(8080)]);
    let input = input(web, vec![pool("default", general())]);
    let plan = solved(&input);
    assert_eq!(plan.nodeclaims.len(), 2);
}

#[test]
fn volume_zones_pin_the_node() {
    let mut p = pod("p", "db", 500, GI);
    p.volume_zones = Some(vec!["z-3".into()]);
    let input = input(vec![p], vec![pool("default", general())]);
    let plan = solved(&input);
    assert_eq!(claim_of(&plan, "default/p").unwrap().zone, "z-3");
}

const RACK: &str = "example.com/rack";

/// Pods of one app per rack domain, from the claims' labels.
fn pods_per_rack(plan: &Plan, app: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for claim in &plan.nodeclaims {
        let here = claim.pods.iter().filter(|p| p.starts_with(&format!("{NS}/{app}-"))).count();
        if here > 0 {
            *out.entry(claim.labels.get(RACK).cloned().unwrap_or_default()).or_default() += here;
        }
    }
    out
}

#[test]
fn a_spread_on_a_key_a_nodepool_requirement_lists_balances_over_its_values() {
    let mut racked = pool("racked", general());
    racked.requirements.add(Requirement::is_in(RACK, ["a", "b", "c"]));
    let mut web = pods("web", 6, 500, GI);
    web.iter_mut().for_each(|p| p.topology_spread.push(spread("web", RACK, 1)));
    let plan = solved(&input(web, vec![racked]));
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let per_rack = pods_per_rack(&plan, "web");
    assert_eq!(per_rack, BTreeMap::from([("a".into(), 2), ("b".into(), 2), ("c".into(), 2)]));
    for claim in &plan.nodeclaims {
        let pinned = claim.requirements.get(RACK).and_then(|r| r.single_value());
        assert_eq!(
            pinned,
            claim.labels.get(RACK).map(String::as_str),
            "{}: the claim pins its rack",
            claim.name
        );
    }
}

#[test]
fn anti_affinity_on_a_key_nodepool_labels_define_uses_each_pool_once() {
    let labelled = |name: &str, rack: &str| {
        let mut p = pool(name, general());
        p.requirements.add(Requirement::is_in(RACK, [rack]));
        p.labels.insert(RACK.into(), rack.into());
        p
    };
    let mut db = pods("db", 3, 500, GI);
    db.iter_mut().for_each(|p| p.anti_affinity.push(affinity_term("db", RACK)));
    let plan =
        solved(&input(db, vec![labelled("left", "a"), labelled("right", "b"), pool("plain", general())]));
    assert_eq!(pods_per_rack(&plan, "db"), BTreeMap::from([("a".into(), 1), ("b".into(), 1)]));
    let reasons: Vec<&str> = plan.unschedulable.iter().map(|u| u.reason.as_str()).collect();
    assert_eq!(reasons.len(), 1, "two racks hold two of the three pods: {reasons:?}");
    assert!(reasons[0].contains(RACK), "{reasons:?}");
}

#[test]
fn a_spread_on_an_instance_type_label_counts_sizes_as_domains() {
    let mut web = pods("web", 3, 500, GI);
    web.iter_mut().for_each(|p| p.topology_spread.push(spread("web", LABEL_INSTANCE_TYPE, 1)));
    let plan = solved(&input(web, vec![pool("default", general())]));
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let sizes: std::collections::BTreeSet<&str> =
        plan.nodeclaims.iter().map(|c| c.instance_type.as_str()).collect();
    assert_eq!(sizes.len(), 3, "one pod per size: {:?}", plan.nodeclaims);
}

#[test]
fn a_hard_rule_on_a_key_nothing_defines_is_unschedulable_and_a_soft_one_is_dropped() {
    let mut hard = pods("hard", 2, 500, GI);
    hard.iter_mut().for_each(|p| p.topology_spread.push(spread("hard", RACK, 1)));
    let mut soft = pod("soft", "soft", 500, GI);
    let mut anyway = spread("soft", RACK, 1);
    anyway.when_unsatisfiable = karpenter_azure::scheduling::input::WhenUnsatisfiable::ScheduleAnyway;
    soft.topology_spread.push(anyway);
    let mut all = hard;
    all.push(soft);
    all.push(pod("plain", "plain", 500, GI));
    let plan = solved(&input(all, vec![pool("default", general())]));
    assert!(claim_of(&plan, "default/plain").is_some(), "other pods are planned");
    assert!(claim_of(&plan, "default/soft").is_some(), "a preference is given up");
    for id in ["default/hard-0", "default/hard-1"] {
        let reason = unschedulable_reason(&plan, id).unwrap_or_else(|| panic!("{id} is unschedulable"));
        assert!(reason.contains(RACK) && reason.contains("defines"), "{id}: {reason}");
    }
}

#[test]
fn gpu_requests_pick_a_gpu_size() {
    let mut types = general();
    types.push(with_gpus(zonal_type("g1", 8000, 56 * GI, 1.5), 1));
    types.push(with_gpus(zonal_type("g4", 32000, 224 * GI, 5.0), 4));
    let mut p = pod("train", "train", 2000, 8 * GI);
    p.requests.set(NVIDIA_GPU, 1);
    let input = input(vec![p], vec![pool("default", types)]);
    let plan = solved(&input);
    assert_eq!(claim_of(&plan, "default/train").unwrap().instance_type, "g1");
}

#[test]
fn a_pod_too_big_for_any_type_names_the_nodepool() {
    let input = input(vec![pod("huge", "huge", 64_000, GI)], vec![pool("general", general())]);
    let plan = solved(&input);
    let reason = unschedulable_reason(&plan, "default/huge").expect("unschedulable");
    assert!(reason.contains("general"), "reason should name the nodepool: {reason}");
}

#[test]
fn existing_nodes_with_room_are_used_before_new_ones() {
    let mut input = input(pods("web", 2, 1000, GI), vec![pool("default", general())]);
    input.nodes.push(Arc::new(existing_node(
        "n1",
        "z-1",
        Resources::new().with(CPU, 4000).with(MEMORY, 16 * GI).with(PODS, 110),
    )));
    let plan = solved(&input);
    assert!(plan.nodeclaims.is_empty(), "{plan:#?}");
    assert_eq!(plan.existing["n1"].len(), 2);
    assert_eq!(plan.price_per_hour, 0.0);
}

#[test]
fn daemonset_overhead_counts_on_new_nodes() {
    let mut input =
        input(pods("web", 2, 800, GI), vec![pool("default", vec![zonal_type("c2", 2000, 8 * GI, 0.2)])]);
    input.daemonsets.push(pod("agent", "agent", 500, 256 * MI));
    let plan = solved(&input);
    // 2 × 800m + 500m does not fit 2000m: the DaemonSet forces a second node.
    assert_eq!(plan.nodeclaims.len(), 2, "{plan:#?}");
    for claim in &plan.nodeclaims {
        assert_eq!(claim.daemon_overhead.get(CPU), 500);
        assert_eq!(claim.requests.get(CPU), 800 + 500);
    }
}

#[test]
fn spot_is_chosen_when_cheaper_and_allowed() {
    let types = vec![instance_type(
        "c4",
        4000,
        16 * GI,
        &[("z-1", CapacityType::OnDemand, 0.4), ("z-1", CapacityType::Spot, 0.1)],
    )];
    let input = input(vec![pod("p", "web", 1000, GI)], vec![pool("default", types)]);
    let plan = solved(&input);
    assert_eq!(claim_of(&plan, "default/p").unwrap().capacity_type, CapacityType::Spot);
}

#[test]
fn planned_nodeclaims_never_take_the_name_of_a_node_or_a_reserved_name() {
    let mut input = input(pods("web", 3, 3000, GI), vec![pool("general", general())]);
    let full = Resources::new().with(CPU, 0).with(MEMORY, 0).with(PODS, 0);
    input.nodes.push(Arc::new(existing_node("general-1", "z-1", full)));
    input.options.reserved_names = std::sync::Arc::new(["general-2".to_string()].into());
    let plan = solved(&input);
    let names: Vec<&str> = plan.nodeclaims.iter().map(|c| c.name.as_str()).collect();
    assert!(!names.is_empty());
    assert!(!names.contains(&"general-1") && !names.contains(&"general-2"), "{names:?}");
    assert_eq!(names[0], "general-3");
}
