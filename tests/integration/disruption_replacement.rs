//! What a consolidation replacement may launch as: pinned to the capacity type it was priced at,
//! options whose worst launch price keeps the move saving money, an M→1 move onto a candidate's own
//! type judged as the deletion of the others, the NodePool's minValues kept, spot-to-spot moves
//! that see on-demand-only zones as topology domains, and spot nodes whose pods or pool keep their
//! replacement off spot replaced as an ordinary move.

use crate::support::disruption_fixtures as cluster;
use crate::support::solver_fixtures as fixtures;
use std::sync::Arc;

use cluster::*;
use fixtures::{instance_type, spread, GI};
use karpenter_azure::disruption::{BlockReason, Decisions, Options, Snapshot};
use karpenter_azure::model::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE};
use karpenter_azure::model::requirements::Requirement;
use karpenter_azure::model::CapacityType::{OnDemand, Spot};
use karpenter_azure::model::InstanceType;

fn any_saving() -> Options {
    Options { consolidation_threshold: 0.0, ..Options::default() }
}

fn spot_to_spot() -> Options {
    Options { spot_to_spot_consolidation: true, ..any_saving() }
}

fn with_pool(types: Vec<InstanceType>) -> Snapshot {
    Snapshot { nodepools: vec![policy("general", types, &[api_budget("100%")])], ..Snapshot::default() }
}

/// Moves node `name` to `zone` (the fixtures put every node in its type's first offering's zone).
fn move_to_zone(s: &mut Snapshot, name: &str, zone: &str) {
    let n = node(s, name);
    n.zone = zone.into();
    Arc::make_mut(&mut n.node).labels.insert(LABEL_ZONE.into(), zone.into());
}

/// A pod of app `web` spread over zones with a skew of at most one.
fn web(name: &str) -> karpenter_azure::disruption::NodePod {
    let mut p = workload(name, 500);
    let pod = Arc::make_mut(&mut p.pod);
    std::sync::Arc::make_mut(&mut pod.labels).insert("app".into(), "web".into());
    pod.topology_spread = vec![spread("web", LABEL_ZONE, 1)];
    p
}

fn capacity_types(d: &Decisions) -> Vec<String> {
    d.commands[0].replacements[0]
        .requirements
        .get(LABEL_CAPACITY_TYPE)
        .and_then(|r| r.finite_values())
        .map(|v| v.into_iter().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Twenty cheap two-core types and an eight-core one, spot and on demand in z-1 and z-2; z-3 offers
/// them on demand only when `z3_on_demand`.
fn spot_catalog(z3_on_demand: bool) -> Vec<InstanceType> {
    let offer = |od: f64, spot: f64| {
        let mut o =
            vec![("z-1", OnDemand, od), ("z-1", Spot, spot), ("z-2", OnDemand, od), ("z-2", Spot, spot)];
        if z3_on_demand {
            o.push(("z-3", OnDemand, od));
        }
        o
    };
    let mut types: Vec<InstanceType> = (0..20)
        .map(|i| {
            let name = format!("t{i:02}");
            instance_type(&name, 2000, 8 * GI, &offer(0.2, 0.05 + 0.001 * f64::from(i)))
        })
        .collect();
    types.push(instance_type("s8", 8000, 32 * GI, &offer(0.8, 0.24)));
    types
}

#[test]
fn spot_to_spot_counts_a_zone_only_on_demand_reaches_as_a_spread_domain() {
    // Two web pods on a spot node in z-1, one on a spot node in z-2. Replacing the first node puts
    // both pods back in z-1 on one cheaper spot node: a skew of one between z-1 and z-2. When z-3
    // has on-demand offerings it is a domain with no web pod (upstream's simulation sees every
    // offering), so the second pod must go to z-3, on demand: spot nodes are replaced by spot only.
    for z3_on_demand in [false, true] {
        let mut s = with_pool(spot_catalog(z3_on_demand));
        add_node(&mut s, "general", "a", "s8", Spot, vec![web("web-1"), web("web-2")]);
        add_node(&mut s, "general", "b", "s8", Spot, vec![web("web-3")]);
        move_to_zone(&mut s, "b", "z-2");
        node(&mut s, "b").do_not_disrupt = true;
        let d = decided_with_at(&s, &spot_to_spot(), now());
        if z3_on_demand {
            assert!(d.commands.is_empty(), "{d:#?}");
            assert!(matches!(reason_of(&d, "a"), BlockReason::NoCheaperPlacement { .. }), "{d:#?}");
        } else {
            let c = &d.commands[0];
            assert_eq!(c.candidates, vec!["a"], "{c:#?}");
            assert_eq!((c.replacements.len(), c.replacements[0].zone.as_str()), (1, "z-1"), "{c:#?}");
            assert_eq!(c.replacements[0].capacity_type, Spot);
            assert_eq!(capacity_types(&d), ["spot"]);
        }
    }
}

/// A pod of app `web` spread over capacity types with a skew of at most one.
fn web_over_capacity_types(name: &str) -> karpenter_azure::disruption::NodePod {
    let mut p = workload(name, 500);
    let pod = Arc::make_mut(&mut p.pod);
    std::sync::Arc::make_mut(&mut pod.labels).insert("app".into(), "web".into());
    pod.topology_spread = vec![spread("web", LABEL_CAPACITY_TYPE, 1)];
    p
}

#[test]
fn a_spot_node_whose_pods_must_leave_spot_gets_an_on_demand_replacement_gate_or_not() {
    // One web pod runs on demand (a full node), three on spot, spread over capacity types with a
    // skew of one. Without the spot node `big`, its pod must go on demand (2 : 2, not 1 : 3), and a
    // two-core on-demand node (0.20) is cheaper than `big` (0.24). The pods keep that replacement off
    // spot, so it is an ordinary replacement, not spot-to-spot: it needs no SpotToSpotConsolidation
    // (upstream `computeConsolidation` takes the spot-to-spot path only when the replacement's
    // capacity-type requirement has spot).
    for options in [any_saving(), spot_to_spot()] {
        let mut s = with_pool(spot_catalog(false));
        let full = vec![web_over_capacity_types("web-1"), workload("fill", 1500)];
        add_node(&mut s, "general", "od", "t00", OnDemand, full);
        let two = vec![web_over_capacity_types("web-2"), web_over_capacity_types("web-3")];
        add_node(&mut s, "general", "keep", "s8", Spot, two);
        add_node(&mut s, "general", "big", "s8", Spot, vec![web_over_capacity_types("web-4")]);
        node(&mut s, "od").do_not_disrupt = true;
        node(&mut s, "keep").do_not_disrupt = true;
        let d = decided_with_at(&s, &options, now());
        let c = d.commands.first().unwrap_or_else(|| panic!("{options:?}: {d:#?}"));
        assert_eq!(c.candidates, vec!["big"], "{c:#?}");
        assert_eq!(c.replacements.len(), 1, "{c:#?}");
        assert_eq!(c.replacements[0].capacity_type, OnDemand, "{c:#?}");
        assert_eq!(capacity_types(&d), ["on-demand"]);
        assert!((c.savings_per_hour - 0.04).abs() < 1e-9, "{c:#?}");
    }
}

#[test]
fn a_spot_node_moves_to_a_cheaper_on_demand_only_pool_and_not_to_spot_without_the_gate() {
    // `big` (spot s8, 0.24) runs one pod. A second pool allows on demand only and offers a two-core
    // type at 0.20: that replacement is kept off spot by its pool, an ordinary move with the gate
    // off too. When the second pool allows spot as well, the replacement is a spot one (0.05) and
    // the gate refuses it.
    for od_only in [true, false] {
        let spot_pool_types = spot_catalog(false).into_iter().filter(|t| t.name == "s8").collect();
        let mut s = with_pool(spot_pool_types);
        let mut second = policy("second", spot_catalog(false)[..1].to_vec(), &[api_budget("100%")]);
        if od_only {
            let solver = second.solver.as_mut().unwrap();
            solver.requirements.add(Requirement::is_in(LABEL_CAPACITY_TYPE, ["on-demand"]));
        }
        s.nodepools.push(second);
        add_node(&mut s, "general", "big", "s8", Spot, vec![workload("a", 1000)]);
        let d = decided_with_at(&s, &any_saving(), now());
        if od_only {
            let c = d.commands.first().unwrap_or_else(|| panic!("{d:#?}"));
            assert_eq!(c.candidates, vec!["big"], "{c:#?}");
            let r = &c.replacements[0];
            assert_eq!(
                (r.nodepool.as_str(), r.instance_type.as_str(), r.capacity_type),
                ("second", "t00", OnDemand)
            );
            assert!((c.savings_per_hour - 0.04).abs() < 1e-9, "{c:#?}");
        } else {
            assert!(d.commands.is_empty(), "{d:#?}");
            assert_eq!(reason_of(&d, "big"), BlockReason::SpotToSpotDisabled, "{d:#?}");
        }
    }
}

#[test]
fn a_spot_replacement_of_an_on_demand_node_is_pinned_to_spot() {
    // Upstream pins an on-demand node's [on-demand, spot] replacement to spot: its options were
    // priced as spot, so a spot shortage must not launch a dearer on-demand node instead.
    let mut s = with_pool(spot_catalog(false));
    add_node(&mut s, "general", "od", "s8", OnDemand, vec![workload("a", 1000)]);
    let d = decided_with_at(&s, &any_saving(), now());
    let c = &d.commands[0];
    assert_eq!(c.replacements[0].capacity_type, Spot, "{c:#?}");
    assert_eq!(capacity_types(&d), ["spot"]);
}

#[test]
fn several_nodes_do_not_become_one_of_their_own_type_at_their_price() {
    // Three c4 each run a one-core pod, and c4 is the smallest type. One c4 holds all three pods,
    // but a c4 replacement is the same as keeping one of them and deleting the other two, with a pod
    // more moved (upstream `filterOutSameInstanceType`): that deletion is the move.
    let mut s = with_pool(general().into_iter().filter(|t| t.name != "c2").collect());
    for i in 0..3 {
        add_node(&mut s, "general", &format!("n{i}"), "c4", OnDemand, vec![workload(&format!("p{i}"), 1000)]);
    }
    let d = decided_with_at(&s, &any_saving(), now());
    let c = &d.commands[0];
    assert!(c.replacements.iter().all(|r| r.instance_type != "c4"), "{c:#?}");
    assert_eq!(c.method, karpenter_azure::disruption::Method::MultiNodeConsolidation, "{c:#?}");
    assert!(c.replacements.is_empty() && c.candidates.len() == 2, "{c:#?}");
    assert!((c.savings_per_hour - 0.8).abs() < 1e-9, "{c:#?}");
    assert_eq!(c.moves.len(), 2, "{c:#?}");
}

#[test]
fn a_replacement_launches_only_where_it_still_saves() {
    // c2 costs 0.2 in z-1 but 0.9 in z-2, more than the c8 it replaces: its claim keeps z-1 only,
    // and of its other options c2z (0.3 in both zones) is kept and c8 is not (upstream
    // `WorstLaunchPrice` judges each option at its dearest zone the claim allows).
    let types = vec![
        instance_type("c2", 2000, 8 * GI, &[("z-1", OnDemand, 0.2), ("z-2", OnDemand, 0.9)]),
        instance_type("c2z", 2000, 8 * GI, &[("z-1", OnDemand, 0.3), ("z-2", OnDemand, 0.3)]),
        instance_type("c8", 8000, 32 * GI, &[("z-1", OnDemand, 0.8), ("z-2", OnDemand, 0.8)]),
    ];
    let mut s = with_pool(types);
    add_node(&mut s, "general", "n", "c8", OnDemand, vec![workload("a", 1000)]);
    let d = decided_with_at(&s, &any_saving(), now());
    let claim = &d.commands[0].replacements[0];
    assert_eq!((claim.instance_type.as_str(), claim.zone.as_str()), ("c2", "z-1"), "{claim:#?}");
    assert_eq!(claim.instance_type_options, ["c2", "c2z"], "{claim:#?}");
    let zones = claim.requirements.get(LABEL_ZONE).and_then(|r| r.finite_values()).unwrap_or_default();
    assert_eq!(zones.into_iter().collect::<Vec<_>>(), ["z-1"], "{claim:#?}");
}

#[test]
fn a_replacement_keeps_the_node_pools_min_values_after_the_price_cut() {
    // The pool asks for three instance types. A c8 running one core is replaced by a c2 whose
    // cheaper options are c2 and c4 only: two types, so the move is refused (upstream does not
    // consolidate by relaxing minValues, whatever the policy). Asking for two, it goes ahead.
    for (min_values, replaced) in [(3, false), (2, true)] {
        let mut s = cluster();
        let pool = s.nodepools[0].solver.as_mut().unwrap();
        pool.requirements.add(
            Requirement::is_in(LABEL_INSTANCE_TYPE, ["c2", "c4", "c8"]).with_min_values(Some(min_values)),
        );
        add_node(&mut s, "general", "n", "c8", OnDemand, vec![workload("a", 1000)]);
        let d = decided_with_at(&s, &any_saving(), now());
        if replaced {
            let c = &d.commands[0];
            assert_eq!(c.replacements[0].instance_type_options, ["c2", "c4"], "{c:#?}");
        } else {
            assert!(d.commands.is_empty(), "{d:#?}");
            let reason = reason_of(&d, "n");
            assert!(reason.to_string().contains("minValues"), "{reason}");
        }
    }
}
