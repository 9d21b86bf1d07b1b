//! Tests of the shared parts of records: equal values are held once, values no record uses are swept,
//! the index's pods of one template point at the same labels, tolerations and owner, and its
//! NodeClaims of one size at the same labels and annotations, and its Nodes at the same label keys and
//! values.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use super::shared::{Interner, SweepSchedule};
use super::tests::yaml;
use super::Cluster;

#[test]
fn equal_values_are_held_once() {
    let mut table: Interner<BTreeMap<String, String>> = Interner::default();
    let first = table.share(Arc::new(BTreeMap::from([("app".to_string(), "web".to_string())])));
    let second = table.share(Arc::new(BTreeMap::from([("app".to_string(), "web".to_string())])));
    let other = table.share(Arc::new(BTreeMap::from([("app".to_string(), "db".to_string())])));
    assert!(Arc::ptr_eq(&first, &second));
    assert!(!Arc::ptr_eq(&first, &other));
    assert_eq!(table.len(), 2);
}

#[test]
fn a_borrowed_value_gets_the_held_copy_or_becomes_one() {
    let mut table: Interner<str> = Interner::default();
    let held = table.share(Arc::from("eastus-1"));
    assert!(Arc::ptr_eq(&held, &table.share_ref("eastus-1")), "the held copy, not a new one");
    let new = table.share_ref("eastus-2");
    assert_eq!(&*new, "eastus-2");
    assert!(Arc::ptr_eq(&new, &table.share(Arc::from("eastus-2"))), "a new value is held from then on");
    assert_eq!(table.len(), 2);
}

#[test]
fn values_no_one_uses_are_swept_and_used_ones_kept() {
    let mut table: Interner<str> = Interner::default();
    let kept: Vec<Arc<str>> = (0..10).map(|i| table.share(Arc::from(format!("kept-{i}")))).collect();
    for i in 0..10_000 {
        drop(table.share(Arc::from(format!("gone-{i}"))));
        assert!(table.len() <= 2 * kept.len() + 64 + 1, "table grew to {} at {i}", table.len());
    }
    for (i, value) in kept.iter().enumerate() {
        assert!(Arc::ptr_eq(value, &table.share(Arc::from(format!("kept-{i}")))), "kept-{i} was swept");
    }
}

fn replica(name: &str, hash: &str) -> core::Pod {
    yaml(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ns, labels: {{app: web, pod-template-hash: {hash}}},\n  \
         ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-{hash}, uid: u, controller: true}}]}}\n\
         spec: {{containers: [{{name: c}}], tolerations: [{{key: node.kubernetes.io/not-ready, operator: Exists, \
         effect: NoExecute, tolerationSeconds: 300}}]}}\n"
    ))
}

#[test]
fn the_index_keeps_one_copy_of_what_replicas_share() {
    let mut cluster = Cluster::default();
    for (name, hash) in [("a", "1"), ("b", "1"), ("c", "2")] {
        cluster.apply(&replica(name, hash));
    }
    let record = |name: &str| cluster.pod(&format!("ns/{name}")).expect("pod is indexed").clone();
    let (a, b, c) = (record("a"), record("b"), record("c"));
    assert!(Arc::ptr_eq(&a.pod.labels, &b.pod.labels));
    assert!(Arc::ptr_eq(&a.pod.tolerations, &b.pod.tolerations));
    assert!(Arc::ptr_eq(a.pod.owner.as_ref().unwrap(), b.pod.owner.as_ref().unwrap()));
    assert!(Arc::ptr_eq(&a.owner_link, &b.owner_link));
    // Another ReplicaSet: other labels and owner, the same tolerations.
    assert!(!Arc::ptr_eq(&a.pod.labels, &c.pod.labels));
    assert!(Arc::ptr_eq(&a.pod.tolerations, &c.pod.tolerations));
    assert_eq!(c.pod.labels.get("pod-template-hash").map(String::as_str), Some("2"));
    assert_eq!(c.pod.owner.as_deref(), Some("ReplicaSet/web-2"));
    assert_eq!(&*c.owner_link, "/apis/apps/v1/namespaces/ns/replicasets/web-2");
    // Sharing changes nothing a reader sees: the records equal fresh conversions.
    let fresh = crate::state::PodRecord::from_k8s(&replica("a", "1"), &Default::default()).unwrap();
    assert_eq!(a, fresh);
}

fn claim(name: &str, size: &str, annotations: &str) -> crate::apis::nodeclaim::NodeClaim {
    yaml(&format!(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\n\
         metadata: {{name: {name}, labels: {{karpenter.sh/nodepool: general, \
         node.kubernetes.io/instance-type: {size}}}, annotations: {{{annotations}}}}}\n\
         spec: {{nodeClassRef: {{name: default}}, requirements: []}}\n"
    ))
}

#[test]
fn the_index_keeps_one_copy_of_what_claims_of_one_size_share() {
    let hashes = "karpenter.sh/nodepool-hash: '1'";
    let replacement = "karpenter.sh/nodepool-hash: '1', karpenter.sh/replacement-for: a";
    let mut cluster = Cluster::default();
    cluster.apply(&claim("a", "Standard_D2s_v5", hashes));
    cluster.apply(&claim("b", "Standard_D2s_v5", hashes));
    cluster.apply(&claim("c", "Standard_D4s_v5", replacement));
    let record = |name: &str| cluster.nodeclaim(name).expect("claim is indexed").clone();
    let (a, b, c) = (record("a"), record("b"), record("c"));
    assert!(Arc::ptr_eq(&a.labels, &b.labels));
    assert!(Arc::ptr_eq(&a.annotations, &b.annotations));
    assert!(!Arc::ptr_eq(&a.labels, &c.labels));
    assert!(!Arc::ptr_eq(&a.annotations, &c.annotations));
    assert_eq!(c.labels.get("node.kubernetes.io/instance-type").map(String::as_str), Some("Standard_D4s_v5"));
    assert_eq!(c.annotations.get("karpenter.sh/replacement-for").map(String::as_str), Some("a"));
    let fresh = crate::state::NodeClaimRecord::from_k8s(&claim("a", "Standard_D2s_v5", hashes)).unwrap();
    assert_eq!(a, fresh);
}

fn node(name: &str, size: &str) -> core::Node {
    yaml(&format!(
        "apiVersion: v1\nkind: Node\n\
         metadata: {{name: {name}, labels: {{karpenter.sh/nodepool: general, kubernetes.io/hostname: {name}, \
         node.kubernetes.io/instance-type: {size}}}}}\n\
         status: {{allocatable: {{cpu: '2', memory: 8Gi, pods: '110'}}}}\n"
    ))
}

#[test]
fn the_index_keeps_one_copy_of_each_label_key_and_value_its_nodes_share() {
    let mut cluster = Cluster::default();
    cluster.apply(&node("a", "Standard_D2s_v5"));
    cluster.apply(&node("b", "Standard_D2s_v5"));
    cluster.apply(&node("c", "Standard_D4s_v5"));
    let record = |name: &str| cluster.node(name).expect("node is indexed").clone();
    let (a, b, c) = (record("a"), record("b"), record("c"));
    let entry = |n: &crate::state::NodeRecord, key: &str| {
        let (k, v) = n.node.labels.get_key_value(key).expect("label is there");
        (k.clone(), v.clone())
    };
    let size = "node.kubernetes.io/instance-type";
    let (a_key, a_size) = entry(&a, size);
    let (b_key, b_size) = entry(&b, size);
    let (c_key, c_size) = entry(&c, size);
    assert!(Arc::ptr_eq(&a_key, &b_key) && Arc::ptr_eq(&a_key, &c_key), "one copy of a key");
    assert!(Arc::ptr_eq(&a_size, &b_size), "one copy of a value");
    assert!(!Arc::ptr_eq(&a_size, &c_size));
    assert!(Arc::ptr_eq(&entry(&a, "karpenter.sh/nodepool").1, &entry(&c, "karpenter.sh/nodepool").1));
    assert_eq!(&*entry(&b, "kubernetes.io/hostname").1, "b");
    // Sharing changes nothing a reader sees: the records equal fresh conversions.
    let fresh = crate::state::NodeRecord::from_k8s(&node("a", "Standard_D2s_v5")).unwrap();
    assert_eq!(a, fresh);
}

#[test]
fn a_sweep_is_due_at_the_floor_then_once_the_table_has_doubled() {
    let mut sweeps = SweepSchedule::new(100);
    assert!(!sweeps.due(99));
    assert!(sweeps.due(100), "a fresh table is swept at the floor");
    sweeps.swept(300);
    assert!(!sweeps.due(599), "a table of live entries waits to double");
    assert!(sweeps.due(600));
    sweeps.swept(10);
    assert!(!sweeps.due(99), "a nearly empty table waits for the floor again");
    assert!(sweeps.due(100));
}
