//! The disruption snapshot of the small test cluster: which nodes are managed, what marks them for
//! deletion or nomination, their prices, and the pods' disruption attributes; and the pods provisioning
//! plans for when their node is being deleted.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use super::tests::{documents, small_cluster, yaml, CLAIMS, CLUSTER};
use super::Cluster;
use crate::apis::{AKSNodeClass, NodeClaim, NodePool};
use crate::disruption::static_pools::Counts;
use crate::disruption::{DoNotDisrupt, PodKind, Snapshot};
use crate::model::InstanceType;
use crate::scheduling::SolveOptions;

fn no_types(_: &NodePool, _: Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>> {
    Arc::default()
}

fn snapshot(cluster: &Cluster, disrupting: &[&str], nominated: &[&str]) -> Snapshot {
    let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    let (snapshot, errors) =
        cluster.disruption_snapshot(&no_types, SolveOptions::default(), &set(disrupting), &set(nominated));
    assert!(errors.is_empty(), "{errors:?}");
    snapshot
}

#[test]
fn managed_nodes_in_flight_claims_pods_and_pdbs() {
    let cluster = small_cluster();
    let s = snapshot(&cluster, &[], &[]);
    let nodes: Vec<_> =
        s.nodes.iter().map(|n| (n.node.name.as_str(), n.nodeclaim.as_str(), n.node.in_flight)).collect();
    assert_eq!(
        nodes,
        vec![
            ("node-a", "general-a", false),
            ("node-b", "general-b", false),
            ("general-c", "general-c", true)
        ]
    );
    assert!(s.unmanaged.is_empty());
    let a = &s.nodes[0];
    assert_eq!(a.nodepool, "general");
    assert!(a.ready && !a.marked_for_deletion && !a.nominated);
    assert!(a.initialized.is_some(), "node-a carries karpenter.sh/initialized");
    assert!(s.nodes[1].initialized.is_none() && !s.nodes[1].ready);
    // The Succeeded pod holds nothing; the DaemonSet pod goes with its node.
    assert_eq!(a.pods.iter().map(|p| p.pod.id()).collect::<Vec<_>>(), vec!["ns/web-1"]);
    assert_eq!(s.nodes[1].pods[0].kind, PodKind::DaemonSet);
    assert_eq!(s.pending.iter().map(|p| p.id()).collect::<Vec<_>>(), vec!["ns/web-2"]);
    assert_eq!(s.pdbs.len(), 1);
    assert_eq!((s.pdbs[0].id(), s.pdbs[0].disruptions_allowed), ("ns/web".to_string(), 0));
    // Every pool has a policy; only the Ready one can launch replacements.
    let pools: Vec<_> = s.nodepools.iter().map(|p| (p.name.as_str(), p.solver.is_some())).collect();
    assert_eq!(pools, vec![("general", true), ("pending-class", false)]);
    // No catalog: the offering is unknown and priced at 0 rather than guessed.
    assert_eq!(a.price_per_hour, 0.0);
}

/// Node-b tainted `karpenter.sh/disrupted`, node-a being deleted.
fn taint_node_b_and_delete_node_a(cluster: &mut Cluster) {
    let mut node_b: core::Node = serde_yaml::from_value(documents(CLUSTER)[4].clone()).unwrap();
    node_b
        .spec
        .as_mut()
        .unwrap()
        .taints
        .as_mut()
        .unwrap()
        .push(yaml("{key: karpenter.sh/disrupted, effect: NoSchedule}"));
    cluster.apply(&node_b);
    let mut node_a: core::Node = serde_yaml::from_value(documents(CLUSTER)[3].clone()).unwrap();
    node_a.metadata.deletion_timestamp = Some(yaml("'2026-01-01T00:00:00Z'"));
    cluster.apply(&node_a);
}

#[test]
fn commands_taints_deletion_and_nominations_mark_nodes() {
    let mut cluster = small_cluster();
    let s = snapshot(&cluster, &["node-a"], &["general-b"]);
    assert!(s.nodes[0].marked_for_deletion, "a command of this controller owns node-a");
    assert!(s.nodes[1].nominated, "nominated by its claim's name");

    taint_node_b_and_delete_node_a(&mut cluster);
    let s = snapshot(&cluster, &[], &[]);
    let marked: Vec<_> = s.nodes.iter().map(|n| (n.node.name.as_str(), n.marked_for_deletion)).collect();
    assert_eq!(marked, vec![("node-b", true), ("general-c", false), ("node-a", true)]);
    // The deleting node keeps its pods in the snapshot, and provisioning plans for them.
    assert_eq!(s.nodes[2].pods.len(), 1);
    let moving: Vec<_> =
        cluster.pods_of_deleting_nodes().iter().map(|p| (p.id(), p.node_name.clone())).collect();
    assert_eq!(moving, vec![("ns/web-1".to_string(), None)]);
}

#[test]
fn pod_attributes_for_disruption() {
    let mut cluster = small_cluster();
    let pod = |name: &str, annotations: &str, priority: i32| -> core::Pod {
        yaml(&format!(
            "metadata: {{name: {name}, namespace: ns, annotations: {{{annotations}}}}}\n\
             spec: {{nodeName: node-a, priority: {priority}, containers: [{{name: c}}]}}\n\
             status: {{phase: Running, startTime: '2026-01-01T00:00:00Z'}}"
        ))
    };
    cluster.apply(&pod("costly", "controller.kubernetes.io/pod-deletion-cost: '100'", 1000));
    cluster.apply(&pod("for-an-hour", "karpenter.sh/do-not-disrupt: 1h", 0));
    cluster.apply(&pod("typo", "karpenter.sh/do-not-disrupt: soon", 0));
    let s = snapshot(&cluster, &[], &[]);
    let find = |name: &str| s.nodes[0].pods.iter().find(|p| p.pod.name == name).expect(name);
    assert_eq!((find("costly").deletion_cost, find("costly").priority), (100, 1000));
    assert_eq!(find("costly").started, Some("2026-01-01T00:00:00Z".parse().unwrap()));
    assert_eq!(find("for-an-hour").do_not_disrupt, DoNotDisrupt::For(std::time::Duration::from_secs(3600)));
    assert_eq!(
        find("typo").do_not_disrupt,
        DoNotDisrupt::No,
        "an unreadable value protects nothing, as upstream"
    );
}

/// The index's claim counts per pool are those of the disruption snapshot, with the `deleted` claims
/// counted as deleting, as the static pool loop marks them.
fn assert_counts_match_the_snapshot(cluster: &Cluster, deleted: &[&str]) {
    let counts = cluster.claim_counts(|claim| deleted.contains(&claim));
    let mut s = snapshot(cluster, &[], &[]);
    for node in s.nodes.iter_mut().filter(|n| deleted.contains(&n.nodeclaim.as_str())) {
        node.deleting = true;
        node.marked_for_deletion = true;
    }
    let pools: BTreeSet<&str> =
        counts.keys().map(String::as_str).chain(s.nodes.iter().map(|n| n.nodepool.as_str())).collect();
    assert!(!pools.is_empty());
    for pool in pools {
        assert_eq!(counts.get(pool).copied().unwrap_or_default(), Counts::of(&s, pool), "pool {pool}");
    }
}

#[test]
fn claim_counts_are_the_snapshots_without_building_one() {
    let mut cluster = small_cluster();
    assert_counts_match_the_snapshot(&cluster, &[]);
    assert_counts_match_the_snapshot(&cluster, &["general-b", "general-c"]);

    taint_node_b_and_delete_node_a(&mut cluster);
    let claim = |name: &str| -> NodeClaim {
        let doc = documents(CLAIMS).into_iter().find(|d| d["metadata"]["name"].as_str() == Some(name));
        serde_yaml::from_value(doc.unwrap()).unwrap()
    };
    let mut general_c = claim("general-c");
    general_c.spec.taints.push(yaml("{key: karpenter.sh/disrupted, effect: NoSchedule}"));
    cluster.apply(&general_c);
    assert_counts_match_the_snapshot(&cluster, &[]);
    assert_counts_match_the_snapshot(&cluster, &["general-b"]);
    assert_eq!(
        cluster.claim_counts(|_| false)["general"],
        Counts { active: 0, pending_disruption: 2, deleting: 1 }
    );

    general_c.metadata.deletion_timestamp = Some(yaml("'2026-01-01T00:00:00Z'"));
    cluster.apply(&general_c);
    assert_counts_match_the_snapshot(&cluster, &[]);
}
