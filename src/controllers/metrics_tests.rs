//! Tests of the cluster-state gauges, the plan gauges, the claim labels and readiness.

use k8s_openapi::api::core::v1 as core;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::*;
use crate::scheduling::plan::NewNodeClaim;
use crate::state::Kind;

fn yaml<T: DeserializeOwned>(text: &str) -> T {
    serde_yaml::from_str(text).expect("test object parses")
}

/// Two pools (one with limits), three nodes (two of one size and zone, one unmanaged), a claim still
/// launching, and pods: running on each kind of node, pending, done.
const CLUSTER: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  limits: {cpu: "16", memory: 64Gi}
  template: {spec: {nodeClassRef: {name: default}, requirements: []}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: empty}
spec:
  template: {spec: {nodeClassRef: {name: default}, requirements: []}}
---
apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {karpenter.sh/nodepool: general, node.kubernetes.io/instance-type: Standard_D4s_v5, karpenter.sh/capacity-type: on-demand, topology.kubernetes.io/zone: eastus-1, kubernetes.io/arch: amd64, kubernetes.io/os: linux}
spec: {providerID: "azure:///vm/a"}
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  allocatable: {cpu: 3860m, memory: 12Gi, pods: "110", ephemeral-storage: 100Gi}
---
apiVersion: v1
kind: Node
metadata:
  name: node-b
  labels: {karpenter.sh/nodepool: general, node.kubernetes.io/instance-type: Standard_D4s_v5, karpenter.sh/capacity-type: on-demand, topology.kubernetes.io/zone: eastus-1, kubernetes.io/arch: amd64, kubernetes.io/os: linux}
spec: {providerID: "azure:///vm/b"}
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  allocatable: {cpu: 3860m, memory: 12Gi, pods: "110", ephemeral-storage: 100Gi}
---
apiVersion: v1
kind: Node
metadata: {name: system-1, labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux}}
status:
  allocatable: {cpu: "2", memory: 4Gi, pods: "30"}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: general-x, labels: {karpenter.sh/nodepool: general}}
spec: {nodeClassRef: {name: default}, requirements: []}
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: ns}
spec: {nodeName: node-a, containers: [{name: c}]}
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: web-2, namespace: ns}
spec: {nodeName: node-b, containers: [{name: c}]}
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: coredns, namespace: kube-system}
spec: {nodeName: system-1, containers: [{name: c}]}
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: web-3, namespace: ns}
spec: {containers: [{name: c}]}
status: {phase: Pending, conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]}
---
apiVersion: v1
kind: Pod
metadata: {name: job, namespace: ns}
spec: {nodeName: node-a, containers: [{name: c}]}
status: {phase: Succeeded}
"#;

fn cluster() -> Cluster {
    let mut cluster = Cluster::new();
    for doc in serde_yaml::Deserializer::from_str(CLUSTER) {
        let doc = serde_yaml::Value::deserialize(doc).unwrap();
        match doc["kind"].as_str().unwrap() {
            "NodePool" => cluster.apply(&serde_yaml::from_value::<crate::apis::NodePool>(doc).unwrap()),
            "NodeClaim" => cluster.apply(&serde_yaml::from_value::<NodeClaim>(doc).unwrap()),
            "Node" => cluster.apply(&serde_yaml::from_value::<core::Node>(doc).unwrap()),
            "Pod" => cluster.apply(&serde_yaml::from_value::<core::Pod>(doc).unwrap()),
            other => panic!("unexpected kind {other}"),
        }
    }
    assert_eq!(cluster.invalid().count(), 0, "{:?}", cluster.invalid().collect::<Vec<_>>());
    cluster
}

const D4: [&str; 6] = ["general", "Standard_D4s_v5", "on-demand", "eastus-1", "amd64", "linux"];

fn allocatable(m: &Metrics, node: [&str; 6], resource: &str) -> f64 {
    let [a, b, c, d, e, f] = node;
    m.nodes_allocatable.with_label_values(&[a, b, c, d, e, f, resource]).get()
}

#[test]
fn allocatable_is_summed_over_nodes_with_the_same_labels() {
    let m = Metrics::new();
    refresh(&m, &cluster());
    assert!((allocatable(&m, D4, "cpu") - 7.72).abs() < 1e-9, "two D4s of 3860m, in cores");
    assert_eq!(allocatable(&m, D4, "memory"), 2.0 * 12.0 * 1024.0 * 1024.0 * 1024.0);
    assert_eq!(allocatable(&m, D4, "ephemeral_storage"), 2.0 * 100.0 * 1024.0 * 1024.0 * 1024.0);
    assert_eq!(allocatable(&m, ["", "", "", "", "amd64", "linux"], "pods"), 30.0, "unmanaged: no nodepool");
    let text = m.render().unwrap();
    assert!(!text.contains("node_name"), "no per-node series:\n{text}");
    assert!(!text.contains("node-a"), "no node name in any label:\n{text}");
}

#[test]
fn nodepool_usage_and_limits_per_resource() {
    let m = Metrics::new();
    refresh(&m, &cluster());
    let usage = |resource: &str, pool: &str| m.nodepools_usage.with_label_values(&[resource, pool]).get();
    let limit = |resource: &str, pool: &str| m.nodepools_limit.with_label_values(&[resource, pool]).get();
    // Usage counts node capacity, plus the launching claim as one more node.
    assert_eq!(usage("cpu", "general"), 8.0);
    assert_eq!(usage("nodes", "general"), 3.0);
    assert_eq!(limit("cpu", "general"), 16.0);
    assert_eq!(limit("memory", "general"), 64.0 * 1024.0 * 1024.0 * 1024.0);
    let text = m.render().unwrap();
    assert!(!text.contains(r#"karpenter_nodepools_limit{nodepool="empty""#), "no limits, no series:\n{text}");
}

#[test]
fn pods_are_counted_by_state_and_the_labels_of_their_node() {
    let m = Metrics::new();
    refresh(&m, &cluster());
    let pods = |labels: [&str; 6]| m.pods_state.with_label_values(&labels).get();
    assert_eq!(pods(["Running", "true", "general", "eastus-1", "on-demand", "Standard_D4s_v5"]), 2);
    assert_eq!(pods(["Succeeded", "true", "general", "eastus-1", "on-demand", "Standard_D4s_v5"]), 1);
    assert_eq!(pods(["Running", "true", "", "", "", ""]), 1, "on the unmanaged node");
    assert_eq!(pods(["Pending", "false", "", "", "", ""]), 1);
    let text = m.render().unwrap();
    assert!(!text.contains("web-1") && !text.contains("namespace="), "no pod identity in labels:\n{text}");
}

#[test]
fn node_count_and_synced_follow_the_index_and_gone_series_disappear() {
    let m = Metrics::new();
    let mut cluster = cluster();
    refresh(&m, &cluster);
    assert_eq!((m.cluster_state_node_count.get(), m.cluster_state_synced.get()), (3, 0));
    for kind in Kind::ALL {
        cluster.mark_synced(kind);
    }
    refresh(&m, &cluster);
    assert_eq!(m.cluster_state_synced.get(), 0, "a claim is still launching");
    cluster.delete_key(Kind::NodeClaim, "general-x");
    cluster.delete_key(Kind::Node, "node-a");
    cluster.delete_key(Kind::Node, "node-b");
    refresh(&m, &cluster);
    assert_eq!((m.cluster_state_node_count.get(), m.cluster_state_synced.get()), (1, 1));
    let text = m.render().unwrap();
    assert!(!text.contains("Standard_D4s_v5"), "series of removed nodes are gone:\n{text}");
}

#[test]
fn readiness_waits_for_the_lists_but_not_for_launches() {
    let mut cluster = cluster();
    let not_ready = readiness(&cluster).unwrap_err();
    assert!(not_ready.contains("Pod watch has not finished"), "{not_ready}");
    for kind in Kind::ALL {
        cluster.mark_synced(kind);
    }
    assert!(!cluster.synced(), "general-x is launching");
    assert_eq!(readiness(&cluster), Ok(()));
}

fn planned(pool: &str, price: f64) -> NewNodeClaim {
    NewNodeClaim {
        name: format!("{pool}-0"),
        nodepool: pool.into(),
        instance_type: "Standard_D2s_v5".into(),
        instance_type_options: vec![],
        zone: "eastus-1".into(),
        capacity_type: crate::model::CapacityType::OnDemand,
        price_per_hour: price,
        requirements: crate::model::requirements::Requirements::new(),
        labels: Default::default(),
        taints: vec![],
        startup_taints: vec![],
        allocatable: Resources::new(),
        requests: Resources::new(),
        daemon_overhead: Resources::new(),
        pods: vec![],
    }
}

#[test]
fn the_plan_gauges_describe_the_latest_plan_that_launched_something() {
    let m = Metrics::new();
    let plan = Plan {
        nodeclaims: vec![planned("a", 0.1), planned("a", 0.2), planned("b", 0.05)],
        price_per_hour: 0.35,
        lower_bound_per_hour: 0.3,
        ..Plan::default()
    };
    record_plan(&m, &plan);
    let price = |pool: &str| m.plan_price.with_label_values(&[pool]).get();
    assert!((price("a") - 0.3).abs() < 1e-12 && (price("b") - 0.05).abs() < 1e-12);
    assert_eq!(m.plan_lower_bound.get(), 0.3);
    record_plan(&m, &Plan::default());
    assert_eq!(m.plan_lower_bound.get(), 0.3, "a plan that launches nothing changes nothing");
    record_plan(
        &m,
        &Plan { nodeclaims: vec![planned("b", 0.4)], lower_bound_per_hour: 0.4, ..Plan::default() },
    );
    let text = m.render().unwrap();
    assert!(!text.contains(r#"nodepool="a""#), "pool a is not in the latest plan:\n{text}");
    assert_eq!((price("b"), m.plan_lower_bound.get()), (0.4, 0.4));
}

fn claim(grace: Option<&str>) -> NodeClaim {
    let grace = grace.map_or(String::new(), |g| format!(", terminationGracePeriod: '{g}'"));
    yaml(&format!(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\n\
         metadata: {{name: c, labels: {{karpenter.sh/nodepool: general, karpenter.sh/capacity-type: spot, topology.kubernetes.io/zone: eastus-2}}}}\n\
         spec: {{nodeClassRef: {{name: default}}, requirements: []{grace}}}\n"
    ))
}

#[test]
fn claim_counters_take_upstream_labels_from_the_claim() {
    let m = Metrics::new();
    nodeclaim_terminated(&m, &claim(None));
    node_created(&m, &claim(None));
    nodeclaim_disrupted(&m, &claim(None), "launch_timeout");
    nodeclaim_disrupted(&m, &claim(Some("1h")), "garbage_collected");
    nodeclaim_disrupted(&m, &claim(Some("0s")), "garbage_collected");
    assert_eq!(m.nodeclaims_terminated.with_label_values(&["general", "spot", "eastus-2"]).get(), 1);
    assert_eq!(m.nodes_created.with_label_values(&["general", "eastus-2"]).get(), 1);
    let disrupted = |reason: &str, mode: &str| {
        m.nodeclaims_disrupted.with_label_values(&[reason, "general", "spot", "", mode]).get()
    };
    assert_eq!(disrupted("launch_timeout", "graceful"), 1);
    assert_eq!(disrupted("garbage_collected", "eventual"), 1);
    assert_eq!(disrupted("garbage_collected", "forceful"), 1);
    let node: core::Node =
        yaml("metadata: {name: n, labels: {karpenter.sh/nodepool: general, topology.kubernetes.io/zone: eastus-3}}");
    node_terminated(&m, &node);
    assert_eq!(m.nodes_terminated.with_label_values(&["general", "eastus-3"]).get(), 1);
}
