//! Table tests of the disruption candidate rules, budgets, emptiness, drift and expiration, in the
//! spirit of upstream's disruption suite (`pkg/controllers/disruption/*_test.go`): each case builds a
//! small snapshot, decides, and checks the command or the reason a node is left alone. Every command
//! goes through the independent post-command check.

use crate::support::disruption_fixtures as cluster;
use std::sync::Arc;

use std::time::Duration;

use cluster::*;
use karpenter_azure::apis::duration::NillableDuration;
use karpenter_azure::apis::nodepool::{Budget as ApiBudget, ConsolidationPolicy, DisruptionReason};
use karpenter_azure::disruption::{
    expired, validate, BlockReason, Budget, Decisions, DoNotDisrupt, Drifted, Method, Options, Snapshot,
};
use karpenter_azure::model::CapacityType::OnDemand;

fn decided(snapshot: &Snapshot) -> Decisions {
    decided_at(snapshot, now())
}

fn decided_at(snapshot: &Snapshot, at: k8s_openapi::jiff::Timestamp) -> Decisions {
    decided_with_at(snapshot, &Options::default(), at)
}

/// One empty node "n" next to a busy one; each case changes one thing that should keep "n".
#[test]
fn candidate_rules_each_block_an_empty_node() {
    type Edit = fn(&mut Snapshot);
    let cases: Vec<(&str, Edit, BlockReason)> = vec![
        ("not initialized", |s| node(s, "n").initialized = None, BlockReason::NotInitialized),
        ("in flight", |s| Arc::make_mut(&mut node(s, "n").node).in_flight = true, BlockReason::InFlight),
        ("marked for deletion", |s| node(s, "n").marked_for_deletion = true, BlockReason::MarkedForDeletion),
        ("nominated", |s| node(s, "n").nominated = true, BlockReason::Nominated),
        ("node do-not-disrupt", |s| node(s, "n").do_not_disrupt = true, BlockReason::NodeDoNotDisrupt),
        (
            "unknown pool",
            |s| node(s, "n").nodepool = "gone".into(),
            BlockReason::UnknownNodePool { nodepool: "gone".into() },
        ),
        (
            "consolidateAfter not elapsed",
            |s| s.nodepools[0].consolidate_after = NillableDuration::After(Duration::from_secs(90 * 60)),
            BlockReason::ConsolidateAfter { left: Duration::from_secs(30 * 60) },
        ),
        (
            "consolidateAfter Never",
            |s| s.nodepools[0].consolidate_after = NillableDuration::Never,
            BlockReason::ConsolidationDisabled { nodepool: "general".into() },
        ),
        (
            "budget of zero",
            |s| s.nodepools[0].budgets = Budget::parse_all(&[api_budget("0")]).unwrap(),
            BlockReason::Budget {
                nodepool: "general".into(),
                reason: DisruptionReason::Empty,
                limited_by: "budgets[0] (nodes: 0)".into(),
            },
        ),
    ];
    for (name, edit, want) in cases {
        let mut s = cluster();
        add_node(&mut s, "general", "busy", "c4", OnDemand, vec![workload("a", 3500)]);
        add_node(&mut s, "general", "n", "c4", OnDemand, vec![daemon("ds-n")]);
        let before = decided(&s);
        assert_eq!(before.commands.len(), 1, "{name}: baseline deletes n");
        assert_eq!(before.commands[0].candidates, vec!["n"], "{name}");
        edit(&mut s);
        let d = decided(&s);
        assert!(d.commands.iter().all(|c| !c.candidates.contains(&"n".to_string())), "{name}: {d:#?}");
        assert_eq!(reason_of(&d, "n"), want, "{name}");
        assert!(!reason_of(&d, "n").to_string().is_empty(), "{name}: a reason a person can read");
    }
}

/// Pod-level blockers on a node that consolidation would otherwise fold into its neighbour.
#[test]
fn pod_rules_block_consolidation() {
    let base = || {
        let mut s = cluster();
        // Only a c8 holds "a"; "p" fits beside it.
        add_node(&mut s, "general", "big", "c8", OnDemand, vec![workload("a", 6000)]);
        add_node(&mut s, "general", "n", "c4", OnDemand, vec![workload("p", 1000)]);
        s
    };
    let d = decided(&base());
    let c = &d.commands[0];
    assert_eq!(c.reason, DisruptionReason::Underutilized);
    assert_eq!(c.candidates, vec!["n"], "{c:#?}");
    assert!(c.replacements.is_empty(), "p moves next to a: {c:#?}");

    type Edit = fn(&mut Snapshot);
    let cases: Vec<(&str, Edit, Option<BlockReason>)> = vec![
        (
            "do-not-disrupt true",
            |s| node(s, "n").pods[0].do_not_disrupt = DoNotDisrupt::Always,
            Some(BlockReason::PodDoNotDisrupt { pod: "default/p".into(), left: None }),
        ),
        (
            "do-not-disrupt for 4h, started 2h ago",
            |s| node(s, "n").pods[0].do_not_disrupt = DoNotDisrupt::For(Duration::from_secs(4 * 3600)),
            Some(BlockReason::PodDoNotDisrupt {
                pod: "default/p".into(),
                left: Some(Duration::from_secs(2 * 3600)),
            }),
        ),
        (
            "do-not-disrupt for 1h, started 2h ago, has run out",
            |s| node(s, "n").pods[0].do_not_disrupt = DoNotDisrupt::For(Duration::from_secs(3600)),
            None,
        ),
        (
            "PDB allows 0",
            |s| s.pdbs.push(pdb("app-pdb", "app", 0)),
            Some(BlockReason::Pdb { pod: "default/p".into(), pdb: "default/app-pdb".into() }),
        ),
        ("PDB allows 1", |s| s.pdbs.push(pdb("app-pdb", "app", 1)), None),
        (
            "two PDBs",
            |s| {
                s.pdbs.push(pdb("one", "app", 5));
                s.pdbs.push(pdb("two", "app", 5));
            },
            Some(BlockReason::MultiplePdbs {
                pod: "default/p".into(),
                pdbs: vec!["default/one".into(), "default/two".into()],
            }),
        ),
        (
            "WhenEmpty policy",
            |s| s.nodepools[0].consolidation_policy = ConsolidationPolicy::WhenEmpty,
            Some(BlockReason::WhenEmptyPolicy { nodepool: "general".into() }),
        ),
    ];
    for (name, edit, want) in cases {
        let mut s = base();
        // Keep "big" out of the way: only "n" is judged.
        node(&mut s, "big").do_not_disrupt = true;
        edit(&mut s);
        let d = decided(&s);
        match want {
            Some(reason) => {
                assert!(d.commands.is_empty(), "{name}: {d:#?}");
                assert_eq!(reason_of(&d, "n"), reason, "{name}");
            }
            None => assert_eq!(d.commands[0].candidates, vec!["n"], "{name}: {d:#?}"),
        }
    }
}

#[test]
fn do_not_disrupt_annotation_forms() {
    assert_eq!(DoNotDisrupt::from_annotation(None), Ok(DoNotDisrupt::No));
    assert_eq!(DoNotDisrupt::from_annotation(Some("true")), Ok(DoNotDisrupt::Always));
    assert_eq!(DoNotDisrupt::from_annotation(Some("90m")), Ok(DoNotDisrupt::For(Duration::from_secs(5400))));
    let err = DoNotDisrupt::from_annotation(Some("soon")).unwrap_err().to_string();
    assert!(err.contains("karpenter.sh/do-not-disrupt") && err.contains("30m"), "{err}");
    let four_hours = DoNotDisrupt::For(Duration::from_secs(4 * 3600));
    assert_eq!(four_hours.active(None, now()), Some(Some(Duration::from_secs(4 * 3600))), "not started yet");
    assert_eq!(four_hours.active(Some(ago(240)), now()), None);
}

fn empties(count: usize, budgets: &[ApiBudget]) -> Snapshot {
    let mut s = cluster();
    s.nodepools[0].budgets = Budget::parse_all(budgets).unwrap();
    for i in 0..count {
        add_node(&mut s, "general", &format!("e{i}"), "c2", OnDemand, vec![daemon(&format!("ds{i}"))]);
    }
    s
}

fn removed(d: &Decisions) -> usize {
    d.commands.iter().map(|c| c.candidates.len()).sum()
}

#[test]
fn budget_rules() {
    let at = |text: &str| text.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
    let window = |nodes: &str, schedule: &str, duration: &str| ApiBudget {
        nodes: nodes.into(),
        schedule: Some(schedule.into()),
        duration: Some(duration.into()),
        reasons: vec![],
    };
    let only = |nodes: &str, reasons: Vec<DisruptionReason>| ApiBudget { reasons, ..api_budget(nodes) };
    let cases: Vec<(&str, Vec<ApiBudget>, &str, usize)> = vec![
        ("a count", vec![api_budget("2")], "2026-12-01T12:00:00Z", 2),
        ("a percentage rounds up", vec![api_budget("30%")], "2026-12-01T12:00:00Z", 2),
        ("the default 10% of 5 nodes", vec![api_budget("10%")], "2026-12-01T12:00:00Z", 1),
        ("0% blocks", vec![api_budget("0%")], "2026-12-01T12:00:00Z", 0),
        (
            "the most restrictive wins",
            vec![api_budget("100%"), api_budget("3"), api_budget("60%")],
            "2026-12-01T12:00:00Z",
            3,
        ),
        ("no budgets: no limit", vec![], "2026-12-01T12:00:00Z", 5),
        ("a window that is active", vec![window("0", "0 9 * * *", "8h")], "2026-12-01T12:00:00Z", 0),
        ("the same window, after it closes", vec![window("0", "0 9 * * *", "8h")], "2026-12-01T17:00:00Z", 5),
        (
            "a weekday window on a Sunday",
            vec![window("0", "0 0 * * mon-fri", "24h")],
            "2026-12-06T12:00:00Z",
            5,
        ),
        ("@daily for 1h, at 00:30", vec![window("1", "@daily", "1h")], "2026-12-01T00:30:00Z", 1),
        (
            "a budget for another reason",
            vec![only("0", vec![DisruptionReason::Drifted])],
            "2026-12-01T12:00:00Z",
            5,
        ),
        (
            "a budget for this reason",
            vec![only("1", vec![DisruptionReason::Empty])],
            "2026-12-01T12:00:00Z",
            1,
        ),
    ];
    for (name, budgets, time, want) in cases {
        let s = empties(5, &budgets);
        let d = decided_at(&s, at(time));
        assert_eq!(removed(&d), want, "{name}: {d:#?}");
        assert_eq!(d.blocked.len(), 5 - want, "{name}");
    }
}

#[test]
fn disruptions_in_flight_use_up_the_budget() {
    let mut s = empties(5, &[api_budget("3")]);
    node(&mut s, "e0").marked_for_deletion = true;
    node(&mut s, "e1").ready = false;
    let d = decided(&s);
    assert_eq!(removed(&d), 1, "3 allowed, 2 already disrupting: {d:#?}");
}

#[test]
fn budget_errors_name_the_field() {
    let bad = |b: ApiBudget| Budget::parse(&b, 2).unwrap_err().to_string();
    let e = bad(api_budget("ten"));
    assert!(e.contains("spec.disruption.budgets[2].nodes") && e.contains("10%"), "{e}");
    let e = bad(api_budget("120%"));
    assert!(e.contains("budgets[2].nodes"), "{e}");
    let e =
        bad(ApiBudget { schedule: Some("0 9 * *".into()), duration: Some("1h".into()), ..api_budget("1") });
    assert!(e.contains("budgets[2].schedule") && e.contains("5"), "{e}");
    let e = bad(ApiBudget { schedule: Some("@daily".into()), ..api_budget("1") });
    assert!(e.contains("budgets[2].duration"), "{e}");
    let e = bad(ApiBudget { duration: Some("1h".into()), ..api_budget("1") });
    assert!(e.contains("budgets[2].schedule"), "{e}");
}

#[test]
fn emptiness_removes_every_empty_node_in_one_command() {
    let mut s = empties(3, &[api_budget("100%")]);
    add_node(&mut s, "general", "busy", "c2", OnDemand, vec![workload("a", 1800)]);
    let d = decided(&s);
    assert_eq!(d.commands.len(), 1);
    let c = &d.commands[0];
    assert_eq!((c.method, c.reason), (Method::Emptiness, DisruptionReason::Empty));
    assert_eq!(c.candidates, vec!["e0", "e1", "e2"]);
    assert!(c.replacements.is_empty() && c.moves.is_empty());
    assert!((c.savings_per_hour - 0.6).abs() < 1e-9);
    assert_eq!(c.disruption_cost, 3.0, "one per node, DaemonSet pods cost nothing");
    assert_eq!(reason_of(&d, "busy"), BlockReason::Deferred);
    assert!((d.cluster_price_per_hour - 0.8).abs() < 1e-9);
}

fn drifted(s: &mut Snapshot, name: &str, minutes_ago: i64) {
    node(s, name).drifted = Some(Drifted { reason: "NodePoolDrifted".into(), since: ago(minutes_ago) });
}

#[test]
fn drift_replaces_the_longest_drifted_node_first_and_before_removing_it() {
    let mut s = cluster();
    add_node(&mut s, "general", "d1", "c4", OnDemand, vec![workload("a", 3000)]);
    add_node(&mut s, "general", "d2", "c4", OnDemand, vec![workload("b", 3000)]);
    drifted(&mut s, "d1", 10);
    drifted(&mut s, "d2", 50);
    let d = decided(&s);
    assert_eq!(d.commands.len(), 1);
    let c = &d.commands[0];
    assert_eq!((c.method, c.reason), (Method::Drift, DisruptionReason::Drifted));
    assert_eq!(c.candidates, vec!["d2"], "oldest drift first");
    assert_eq!(c.replacements.len(), 1);
    assert_eq!(c.moves.len(), 1);
    assert_eq!(c.moves[0].to, c.replacements[0].name, "the pod waits for its replacement");
    assert_eq!(reason_of(&d, "d1"), BlockReason::Deferred);
}

#[test]
fn drift_takes_empty_nodes_first_and_has_its_own_budget() {
    let mut s = cluster();
    add_node(&mut s, "general", "old", "c4", OnDemand, vec![workload("a", 3000)]);
    add_node(&mut s, "general", "empty", "c4", OnDemand, vec![daemon("ds")]);
    drifted(&mut s, "old", 50);
    drifted(&mut s, "empty", 10);
    // Emptiness may not act (budget for Empty is 0), so drift handles the empty node first.
    s.nodepools[0].budgets = Budget::parse_all(&[ApiBudget {
        reasons: vec![DisruptionReason::Empty, DisruptionReason::Underutilized],
        ..api_budget("0")
    }])
    .unwrap();
    let d = decided(&s);
    assert_eq!(d.commands[0].candidates, vec!["empty"]);
    assert!(d.commands[0].replacements.is_empty(), "nothing to move, nothing to launch");

    s.nodepools[0].budgets =
        Budget::parse_all(&[ApiBudget { reasons: vec![DisruptionReason::Drifted], ..api_budget("0") }])
            .unwrap();
    let d = decided(&s);
    assert_eq!(d.commands[0].method, Method::Emptiness, "drift blocked, emptiness still acts");
    assert_eq!(reason_of(&d, "old"), BlockReason::Deferred, "one method acts per pass");
    s.nodes.retain(|n| n.node.name != "empty");
    let d = decided(&s);
    assert!(
        matches!(reason_of(&d, "old"), BlockReason::Budget { reason: DisruptionReason::Drifted, .. }),
        "{d:#?}"
    );
}

#[test]
fn drift_skips_a_node_whose_pods_have_nowhere_to_go() {
    let mut s = cluster();
    add_node(&mut s, "general", "d", "c8", OnDemand, vec![workload("huge", 7000)]);
    drifted(&mut s, "d", 10);
    s.nodepools[0].solver.as_mut().unwrap().instance_types = types_arc(general()[..2].to_vec());
    let d = decided(&s);
    assert!(d.commands.is_empty());
    assert!(matches!(reason_of(&d, "d"), BlockReason::NoCheaperPlacement { .. }), "{d:#?}");
}

#[test]
fn expiration_is_forceful_and_ordered() {
    let mut s = cluster();
    add_node(&mut s, "general", "young", "c2", OnDemand, vec![]);
    add_node(&mut s, "general", "old", "c2", OnDemand, vec![]);
    add_node(&mut s, "general", "older", "c2", OnDemand, vec![]);
    s.nodepools[0].expire_after = NillableDuration::After(Duration::from_secs(3600));
    node(&mut s, "young").created = ago(30);
    node(&mut s, "old").created = ago(61);
    node(&mut s, "older").created = ago(90);
    node(&mut s, "older").do_not_disrupt = true;
    let e = expired(&s, now());
    let names: Vec<&str> = e.iter().map(|x| x.node.as_str()).collect();
    assert_eq!(names, vec!["older", "old"], "do-not-disrupt does not stop expiry; earliest first");
    assert_eq!(e[0].expired_at, ago(30));
    s.nodepools[0].expire_after = NillableDuration::Never;
    assert!(expired(&s, now()).is_empty());
}

#[test]
fn validation_rejects_a_command_once_its_world_changed() {
    let mut s = cluster();
    add_node(&mut s, "general", "big", "c8", OnDemand, vec![workload("a", 2000)]);
    add_node(&mut s, "general", "n", "c4", OnDemand, vec![workload("p", 1000)]);
    let d = decided(&s);
    let c = d.commands[0].clone();
    let opts = Options::default();

    let mut gone = s.clone();
    gone.nodes.retain(|n| !c.candidates.contains(&n.node.name));
    assert!(matches!(
        validate(&c, &gone, now(), &opts),
        Err(karpenter_azure::disruption::Invalid::CandidateGone { .. })
    ));

    let mut protected = s.clone();
    node(&mut protected, &c.candidates[0]).pods[0].do_not_disrupt = DoNotDisrupt::Always;
    let err = validate(&c, &protected, now(), &opts).unwrap_err();
    assert_eq!(err.category(), "churn", "{err}");

    let mut budget = s.clone();
    budget.nodepools[0].budgets = Budget::parse_all(&[api_budget("0")]).unwrap();
    assert_eq!(validate(&c, &budget, now(), &opts).unwrap_err().category(), "budget");

    let mut fuller = s.clone();
    for n in fuller.nodes.iter_mut() {
        n.pods.push(cluster::workload(&format!("late-{}", n.node.name), 3000));
        let name = n.node.name.clone();
        Arc::make_mut(&mut n.pods.last_mut().unwrap().pod).node_name = Some(name);
    }
    let err = validate(&c, &fuller, now(), &opts).unwrap_err();
    assert_eq!(err.category(), "scheduling", "{err}");
}
