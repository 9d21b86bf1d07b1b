//! Builders for the disruption tests: a cluster snapshot of managed nodes on synthetic types, pods with
//! disruption attributes, NodePool policies, and an independent check of a command's post-command
//! cluster (the solver's feasibility checker, plus budgets, PDBs and do-not-disrupt). Built on
//! `solver_fixtures`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_azure::apis::duration::NillableDuration;
use karpenter_azure::apis::nodepool::{Budget as ApiBudget, ConsolidationPolicy, DisruptionReason};
use karpenter_azure::disruption::{
    decide, validate, BlockReason, Budget, Command, Decisions, DoNotDisrupt, ManagedNode, NodePod, Options,
    Pdb, PodKind, PoolPolicy, Snapshot,
};
use karpenter_azure::model::labels::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_OS,
    LABEL_ZONE,
};
use karpenter_azure::model::{CapacityType, InstanceType};
use karpenter_azure::scheduling::{feasibility, ExistingNode, Plan, Pod, SolveInput};

use crate::support::solver_fixtures::{pod, pool, GI};

/// The tests' "now": a Tuesday, 12:00 UTC.
pub fn now() -> Timestamp {
    "2026-12-01T12:00:00Z".parse().unwrap()
}

pub fn ago(minutes: i64) -> Timestamp {
    now().checked_sub(SignedDuration::from_mins(minutes)).unwrap()
}

/// On-demand types at 0.1 $/core/h with 4 GiB per core: c2, c4, c8.
pub fn general() -> Vec<InstanceType> {
    vec![
        crate::support::solver_fixtures::zonal_type("c2", 2000, 8 * GI, 0.2),
        crate::support::solver_fixtures::zonal_type("c4", 4000, 16 * GI, 0.4),
        crate::support::solver_fixtures::zonal_type("c8", 8000, 32 * GI, 0.8),
    ]
}

pub fn api_budget(nodes: &str) -> ApiBudget {
    ApiBudget { nodes: nodes.into(), schedule: None, duration: None, reasons: vec![] }
}

/// A pool consolidating Balanced after 0s, expiring after 720h, with the given budgets.
pub fn policy(name: &str, types: Vec<InstanceType>, budgets: &[ApiBudget]) -> PoolPolicy {
    PoolPolicy {
        name: name.into(),
        consolidation_policy: ConsolidationPolicy::Balanced,
        consolidate_after: NillableDuration::After(std::time::Duration::ZERO),
        expire_after: NillableDuration::After(std::time::Duration::from_secs(720 * 3600)),
        budgets: Budget::parse_all(budgets).unwrap(),
        limits: None,
        solver: Some(pool(name, types)),
        replicas: None,
    }
}

/// A cluster with one pool "general" over [`general`] and a budget of 100%.
pub fn cluster() -> Snapshot {
    Snapshot { nodepools: vec![policy("general", general(), &[api_budget("100%")])], ..Snapshot::default() }
}

/// A workload pod bound nowhere yet (the node builder binds it).
pub fn workload(name: &str, cpu_millis: i64) -> NodePod {
    NodePod {
        pod: pod(name, "app", cpu_millis, GI).into(),
        priority: 0,
        deletion_cost: 0,
        do_not_disrupt: DoNotDisrupt::No,
        started: Some(ago(120)),
        kind: PodKind::Workload,
    }
}

pub fn daemon(name: &str) -> NodePod {
    NodePod { kind: PodKind::DaemonSet, ..workload(name, 100) }
}

/// Adds an initialized node `name` of `type_name` (from its pool's catalog) in zone z-1, created two
/// hours ago, last pod event an hour ago, running `pods`.
pub fn add_node(
    snapshot: &mut Snapshot,
    pool_name: &str,
    name: &str,
    type_name: &str,
    capacity_type: CapacityType,
    pods: Vec<NodePod>,
) -> usize {
    let pool = snapshot.nodepools.iter().find(|p| p.name == pool_name).expect("pool");
    let types = pool.solver.as_ref().unwrap().instance_types.clone();
    let it = types.iter().find(|t| t.name == type_name).expect("type");
    let offering = it
        .offerings
        .iter()
        .find(|o| o.capacity_type == capacity_type)
        .unwrap_or_else(|| panic!("{type_name} has no {capacity_type:?} offering"));
    let mut labels: BTreeMap<String, String> = it.labels.clone();
    for (k, v) in [
        (LABEL_HOSTNAME, name),
        (LABEL_ZONE, offering.zone.as_str()),
        (LABEL_CAPACITY_TYPE, capacity_type.as_str()),
        (LABEL_INSTANCE_TYPE, type_name),
        (LABEL_NODEPOOL, pool_name),
        (LABEL_ARCH, "amd64"),
        (LABEL_OS, "linux"),
    ] {
        labels.insert(k.into(), v.into());
    }
    let pods = pods
        .into_iter()
        .map(|mut p| {
            Arc::make_mut(&mut p.pod).node_name = Some(name.into());
            p
        })
        .collect();
    snapshot.nodes.push(ManagedNode {
        node: Arc::new(ExistingNode {
            name: name.into(),
            labels: karpenter_azure::model::node_labels(&labels),
            taints: vec![],
            allocatable: it.allocatable.clone(),
            nodepool: Some(pool_name.into()),
            in_flight: false,
            startup_taints: vec![],
        }),
        nodeclaim: format!("{name}-claim"),
        nodepool: pool_name.into(),
        instance_type: type_name.into(),
        zone: offering.zone.clone(),
        capacity_type,
        price_per_hour: offering.price,
        created: ago(120),
        initialized: Some(ago(118)),
        last_pod_event: Some(ago(60)),
        drifted: None,
        do_not_disrupt: false,
        nominated: false,
        marked_for_deletion: false,
        deleting: false,
        ready: true,
        pods,
    });
    snapshot.nodes.len() - 1
}

pub fn node<'a>(snapshot: &'a mut Snapshot, name: &str) -> &'a mut ManagedNode {
    snapshot.nodes.iter_mut().find(|n| n.node.name == name).expect("node")
}

pub fn pdb(name: &str, app: &str, allowed: i32) -> Pdb {
    Pdb {
        namespace: crate::support::solver_fixtures::NS.into(),
        name: name.into(),
        selector: Some(crate::support::solver_fixtures::app_selector(app)),
        disruptions_allowed: allowed,
    }
}

/// Independent checks of a command against the snapshot it came from:
/// - the post-command cluster (the other nodes, the moved pods placed as the command says, its
///   replacements) passes the solver's feasibility checker;
/// - no candidate carries do-not-disrupt or runs an active do-not-disrupt pod or a pod behind a PDB
///   that allows nothing;
/// - each pool loses no more nodes than its budgets allow for the reason, counted here from scratch.
pub fn assert_command_valid(snapshot: &Snapshot, command: &Command, now: Timestamp) {
    let removed: Vec<&ManagedNode> = command
        .candidates
        .iter()
        .map(|c| snapshot.nodes.iter().find(|n| n.node.name == *c).unwrap())
        .collect();
    for n in &removed {
        assert!(!n.do_not_disrupt, "{} carries do-not-disrupt", n.node.name);
        for p in n.pods.iter() {
            assert!(p.do_not_disrupt.active(p.started, now).is_none(), "{} is protected", p.pod.id());
            if p.reschedulable() {
                let pdbs: Vec<&Pdb> = snapshot.pdbs.iter().filter(|b| b.selects(&p.pod)).collect();
                assert!(
                    pdbs.len() <= 1 && pdbs.iter().all(|b| b.disruptions_allowed > 0),
                    "{} is behind a PDB",
                    p.pod.id()
                );
            }
        }
    }
    // Budgets, recounted.
    let mut per_pool: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &removed {
        *per_pool.entry(n.nodepool.as_str()).or_default() += 1;
    }
    for (pool, count) in per_pool {
        let policy = snapshot.nodepools.iter().find(|p| p.name == pool).unwrap();
        let total = snapshot.nodes.iter().filter(|n| n.nodepool == pool && n.initialized.is_some()).count();
        let busy = snapshot
            .nodes
            .iter()
            .filter(|n| n.nodepool == pool && (n.marked_for_deletion || !n.ready))
            .count();
        let allowed = policy
            .budgets
            .iter()
            .filter(|b| b.applies(command.reason, now))
            .map(|b| b.allowed(total))
            .min()
            .unwrap_or(usize::MAX);
        assert!(count + busy <= allowed, "pool {pool}: {count} + {busy} disrupting > {allowed} allowed");
    }
    if command.reason == DisruptionReason::Underutilized {
        assert!(command.savings_per_hour > 0.0, "consolidation must save money: {command:?}");
        let before: f64 = removed.iter().map(|n| n.price_per_hour).sum();
        let after: f64 = command.replacements.iter().map(|c| c.price_per_hour).sum();
        assert!(after < before, "replacements ${after}/h, removed ${before}/h");
    }
    // The post-command cluster, built from the snapshot without the disruption code.
    let gone: Vec<&str> = command.candidates.iter().map(String::as_str).collect();
    let moved: Vec<Arc<Pod>> = removed
        .iter()
        .flat_map(|n| n.pods.iter().filter(|p| p.reschedulable()))
        .map(|p| Arc::new(Pod { node_name: None, ..(*p.pod).clone() }))
        .collect();
    let staying = snapshot.nodes.iter().filter(|n| !gone.contains(&n.node.name.as_str()));
    let input = SolveInput {
        pods: moved.clone(),
        running: staying.clone().flat_map(|n| n.pods.iter().map(|p| p.pod.clone())).collect(),
        nodes: staying.map(|n| n.node.clone()).collect(),
        nodepools: snapshot.nodepools.iter().filter_map(|p| p.solver.clone()).collect(),
        daemonsets: snapshot.daemonsets.clone(),
        options: snapshot.solve_options.clone(),
    };
    let replacement_names: Vec<&str> = command.replacements.iter().map(|c| c.name.as_str()).collect();
    let mut existing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in &command.moves {
        if !replacement_names.contains(&m.to.as_str()) {
            existing.entry(m.to.clone()).or_default().push(m.pod.clone());
        }
    }
    assert_eq!(command.moves.len(), moved.len(), "every moved pod has a destination: {command:?}");
    let plan = Plan {
        existing,
        nodeclaims: command.replacements.clone(),
        unschedulable: vec![],
        price_per_hour: command.replacements.iter().map(|c| c.price_per_hour).sum(),
        lower_bound_per_hour: 0.0,
    };
    if let Err(violations) = feasibility::check(&input, &plan) {
        let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
        panic!("post-command cluster infeasible:\n  {}\ncommand: {command:#?}", list.join("\n  "));
    }
}

/// `decide` at `at` with `options`, every command checked by [`assert_command_valid`] and by
/// `validate` on the same snapshot (a fresh command must validate).
pub fn decided_with_at(snapshot: &Snapshot, options: &Options, at: Timestamp) -> Decisions {
    let d = decide(snapshot, at, options);
    for c in &d.commands {
        assert_command_valid(snapshot, c, at);
        assert_eq!(validate(c, snapshot, at, options), Ok(()), "a fresh command validates: {c:#?}");
    }
    d
}

/// Why `node` was left alone (panics when a command took it).
pub fn reason_of(d: &Decisions, node: &str) -> BlockReason {
    d.blocked
        .iter()
        .find(|b| b.node == node)
        .unwrap_or_else(|| panic!("{node} not blocked: {d:#?}"))
        .reason
        .clone()
}

pub fn types_arc(types: Vec<InstanceType>) -> Arc<Vec<InstanceType>> {
    Arc::new(types)
}
