//! Static NodePools (`spec.replicas`) in the pure decisions: the replica count is held up and down,
//! `limits.nodes` caps launches, a scale-down takes unlaunched claims, then empty nodes, then the
//! cheapest to disrupt, and protected nodes last; emptiness and consolidation leave static nodes alone,
//! drift replaces one with a fresh claim of its pool and waits while a scale-down is pending.

use karpenter_azure::apis::nodepool::DisruptionReason;
use karpenter_azure::disruption::snapshot::{DoNotDisrupt, Snapshot};
use karpenter_azure::disruption::static_pools::{decide, StaticAction};
use karpenter_azure::disruption::{decide as decide_disruption, validate, BlockReason, Drifted, Options};
use karpenter_azure::model::resources::Resources;
use karpenter_azure::model::CapacityType::OnDemand;
use std::sync::Arc;

use crate::support::disruption_fixtures::*;

/// A cluster with a static pool "fixed" of `replicas` over [`general`], budget 100%.
fn fixed(replicas: i64) -> Snapshot {
    let mut pool = policy("fixed", general(), &[api_budget("100%")]);
    pool.replicas = Some(replicas);
    pool.solver.as_mut().unwrap().replicas = Some(replicas);
    Snapshot { nodepools: vec![pool], ..Snapshot::default() }
}

fn drifted(reason: &str) -> Drifted {
    Drifted { reason: reason.into(), since: ago(5) }
}

fn launched(actions: &[StaticAction]) -> usize {
    actions
        .iter()
        .map(|a| match a {
            StaticAction::Launch { claims, .. } => claims.len(),
            _ => 0,
        })
        .sum()
}

fn removed(actions: &[StaticAction]) -> Vec<String> {
    actions
        .iter()
        .flat_map(|a| match a {
            StaticAction::Remove { nodeclaims, .. } => nodeclaims.clone(),
            _ => vec![],
        })
        .collect()
}

#[test]
fn an_empty_static_pool_launches_its_replicas_as_the_cheapest_allowed_size() {
    let actions = decide(&fixed(3), now(), 60);
    assert_eq!(launched(&actions), 3, "{actions:#?}");
    let StaticAction::Launch { nodepool, claims } = &actions[0] else { panic!("{actions:#?}") };
    assert_eq!(nodepool, "fixed");
    assert!(claims.iter().all(|c| c.instance_type == "c2" && c.pods.is_empty()), "{claims:#?}");
    assert_eq!(claims[0].instance_type_options, ["c2", "c4", "c8"]);
}

#[test]
fn a_pool_at_its_count_needs_nothing_and_in_flight_claims_count() {
    let mut s = fixed(2);
    add_node(&mut s, "fixed", "a", "c2", OnDemand, vec![]);
    let b = add_node(&mut s, "fixed", "b", "c2", OnDemand, vec![]);
    Arc::make_mut(&mut s.nodes[b].node).in_flight = true;
    assert!(decide(&s, now(), 60).is_empty());
}

#[test]
fn a_deleted_or_expired_node_is_launched_again_but_a_replaced_one_is_not() {
    let mut s = fixed(3);
    add_node(&mut s, "fixed", "a", "c2", OnDemand, vec![]);
    let b = add_node(&mut s, "fixed", "b", "c2", OnDemand, vec![]);
    let c = add_node(&mut s, "fixed", "c", "c2", OnDemand, vec![]);
    s.nodes[b].marked_for_deletion = true;
    s.nodes[b].deleting = true;
    assert_eq!(launched(&decide(&s, now(), 60)), 1, "the deleted node's place is filled");
    // A node a disruption command is replacing still counts until it goes.
    s.nodes[b].deleting = false;
    assert!(decide(&s, now(), 60).is_empty());
    s.nodes[c].marked_for_deletion = true;
    assert!(decide(&s, now(), 60).is_empty(), "two pending + one active still make three");
}

#[test]
fn limits_nodes_caps_launches_and_says_so_when_nothing_fits() {
    let mut s = fixed(5);
    s.nodepools[0].limits = Some(Resources::new().with("nodes", 3));
    add_node(&mut s, "fixed", "a", "c2", OnDemand, vec![]);
    let b = add_node(&mut s, "fixed", "b", "c2", OnDemand, vec![]);
    s.nodes[b].marked_for_deletion = true;
    s.nodes[b].deleting = true;
    assert_eq!(launched(&decide(&s, now(), 60)), 1, "a deleting node still holds its place in the limit");
    add_node(&mut s, "fixed", "c", "c2", OnDemand, vec![]);
    let actions = decide(&s, now(), 60);
    assert!(
        matches!(&actions[..], [StaticAction::Blocked { reason, .. }] if reason.contains("limits.nodes")),
        "{actions:#?}"
    );
}

#[test]
fn a_scale_down_removes_unlaunched_then_empty_then_cheapest_and_protected_last() {
    let mut s = fixed(1);
    let mut guarded = workload("guarded", 100);
    guarded.do_not_disrupt = DoNotDisrupt::Always;
    add_node(&mut s, "fixed", "protected", "c2", OnDemand, vec![guarded]);
    add_node(&mut s, "fixed", "busy", "c2", OnDemand, vec![workload("w1", 100), workload("w2", 100)]);
    add_node(&mut s, "fixed", "light", "c2", OnDemand, vec![workload("w3", 100)]);
    add_node(&mut s, "fixed", "empty", "c2", OnDemand, vec![daemon("ds")]);
    let pending = add_node(&mut s, "fixed", "pending", "c2", OnDemand, vec![]);
    Arc::make_mut(&mut s.nodes[pending].node).in_flight = true;
    let order = removed(&decide(&s, now(), 60));
    assert_eq!(order, ["pending-claim", "empty-claim", "light-claim", "busy-claim"], "protected stays");
}

#[test]
fn consolidation_and_emptiness_leave_static_nodes_and_drift_replaces_them_from_the_pool() {
    let mut s = fixed(2);
    add_node(&mut s, "fixed", "empty", "c8", OnDemand, vec![]);
    add_node(&mut s, "fixed", "idle", "c8", OnDemand, vec![workload("w", 100)]);
    let d = decide_disruption(&s, now(), &Options::default());
    assert!(d.commands.is_empty(), "{:#?}", d.commands);
    assert!(
        d.blocked
            .iter()
            .all(|b| matches!(&b.reason, BlockReason::StaticNodePool { nodepool } if nodepool == "fixed")),
        "{:#?}",
        d.blocked
    );

    node(&mut s, "idle").drifted = Some(drifted("NodePoolDrifted"));
    let d = decide_disruption(&s, now(), &Options::default());
    let [command] = &d.commands[..] else { panic!("{d:#?}") };
    assert_eq!(command.reason, DisruptionReason::Drifted);
    assert_eq!(command.candidates, ["idle"]);
    let [replacement] = &command.replacements[..] else { panic!("{command:#?}") };
    assert_eq!(replacement.nodepool, "fixed");
    assert_eq!(replacement.instance_type, "c2", "a fresh claim of the pool, not the old size");
    // The pod that must move has a place (the other node here); a fresh command validates.
    assert_eq!(command.moves.len(), 1, "{command:#?}");
    assert_eq!(validate(command, &s, now(), &Options::default()), Ok(()));
}

#[test]
fn drift_waits_while_a_static_pool_scales_down() {
    let mut s = fixed(1);
    add_node(&mut s, "fixed", "a", "c2", OnDemand, vec![]);
    add_node(&mut s, "fixed", "b", "c2", OnDemand, vec![]);
    node(&mut s, "a").drifted = Some(drifted("NodePoolDrifted"));
    let d = decide_disruption(&s, now(), &Options::default());
    assert!(d.commands.is_empty(), "{:#?}", d.commands);
    let a = d.blocked.iter().find(|b| b.node == "a").unwrap();
    assert!(
        matches!(&a.reason, BlockReason::CannotReplace { detail } if detail.contains("scaling down")),
        "{a:?}"
    );
}

#[test]
fn a_dynamic_pool_never_plans_a_node_in_a_static_pool() {
    let mut s = fixed(1);
    s.nodepools.push(policy("general", general(), &[api_budget("100%")]));
    add_node(&mut s, "fixed", "a", "c8", OnDemand, vec![]);
    add_node(&mut s, "general", "g", "c8", OnDemand, vec![workload("w", 1000)]);
    let d = decide_disruption(&s, now(), &Options::default());
    for c in &d.commands {
        assert!(c.replacements.iter().all(|r| r.nodepool == "general"), "{c:#?}");
    }
}
