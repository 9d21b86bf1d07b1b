//! Tests of the cluster-state metrics (per Node, NodePool, pod and status condition), the plan gauges,
//! the claim labels and readiness.

use k8s_openapi::api::core::v1 as core;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use std::sync::Arc;
use std::time::Instant;

use super::*;
use crate::controllers::metrics_pods::{pod_observed, PodTracker};
use crate::model::instancetype::{InstanceType, Offering};
use crate::model::resources::Resources;
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
  creationTimestamp: "2026-08-01T11:00:00Z"
  labels: {karpenter.sh/nodepool: general, node.kubernetes.io/instance-type: Standard_D4s_v5, karpenter.sh/capacity-type: on-demand, topology.kubernetes.io/zone: eastus-1, kubernetes.io/arch: amd64, kubernetes.io/os: linux}
spec: {providerID: "azure:///vm/a"}
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  allocatable: {cpu: 3860m, memory: 12Gi, pods: "110", ephemeral-storage: 100Gi}
  conditions: [{type: Ready, status: "True", reason: KubeletReady, lastTransitionTime: "2026-08-01T11:01:00Z"}]
---
apiVersion: v1
kind: Node
metadata:
  name: node-b
  creationTimestamp: "2026-08-01T11:00:00Z"
  labels: {karpenter.sh/nodepool: general, node.kubernetes.io/instance-type: Standard_D4s_v5, karpenter.sh/capacity-type: on-demand, topology.kubernetes.io/zone: eastus-1, kubernetes.io/arch: amd64, kubernetes.io/os: linux}
spec: {providerID: "azure:///vm/b"}
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  allocatable: {cpu: 3860m, memory: 12Gi, pods: "110", ephemeral-storage: 100Gi}
---
apiVersion: v1
kind: Node
metadata: {name: system-1, creationTimestamp: "2026-08-01T10:00:00Z", labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux}}
status:
  allocatable: {cpu: "2", memory: 4Gi, pods: "30"}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: general-x, labels: {karpenter.sh/nodepool: general}}
spec: {nodeClassRef: {name: default}, requirements: []}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: general-a, labels: {karpenter.sh/nodepool: general, node.kubernetes.io/instance-type: Standard_D4s_v5, karpenter.sh/capacity-type: on-demand, topology.kubernetes.io/zone: eastus-1}}
spec: {nodeClassRef: {name: default}, requirements: []}
status: {providerID: "azure:///vm/a", nodeName: node-a}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: ns
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-5d9, uid: u1, controller: true}]
spec: {nodeName: node-a, containers: [{name: c, resources: {requests: {cpu: 500m}, limits: {cpu: "1"}}}]}
status: {phase: Running, conditions: [{type: Ready, status: "True"}, {type: PodScheduled, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: agent-a
  namespace: kube-system
  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u2, controller: true}]
spec: {nodeName: node-a, containers: [{name: c, resources: {requests: {cpu: 100m}, limits: {cpu: 200m}}}]}
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: web-2, namespace: ns}
spec: {nodeName: node-b, containers: [{name: c, resources: {requests: {cpu: 500m}}}]}
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: coredns, namespace: kube-system}
spec: {nodeName: system-1, containers: [{name: c, resources: {requests: {cpu: 100m}}}]}
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: web-3, namespace: ns, creationTimestamp: "2026-08-01T11:50:00Z"}
spec: {containers: [{name: c}]}
status: {phase: Pending, conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]}
---
apiVersion: v1
kind: Pod
metadata: {name: job, namespace: ns}
spec: {nodeName: node-a, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
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

/// A catalog with one priced offering: a D4s_v5 in eastus-1 on demand at $0.192/hour.
fn catalog(_: &crate::apis::NodePool, _: Option<&crate::apis::AKSNodeClass>) -> Arc<Vec<InstanceType>> {
    Arc::new(vec![InstanceType {
        name: "Standard_D4s_v5".into(),
        vcpus: 4,
        memory_mib: 16384,
        labels: Default::default(),
        capacity: Resources::new(),
        overhead: Default::default(),
        allocatable: Resources::new(),
        offerings: vec![Offering {
            zone: "eastus-1".into(),
            capacity_type: crate::model::CapacityType::OnDemand,
            price: 0.192,
            available: true,
        }],
    }])
}

fn now() -> Timestamp {
    "2026-08-01T12:00:00Z".parse().unwrap()
}

/// Refreshes `m` from `cluster` at [`now`].
fn refresh_now(m: &Metrics, cluster: &Cluster, state: &mut MetricsState) {
    refresh(m, cluster, &catalog, state, now(), Instant::now());
}

/// The one sample of `name` whose labels include `labels`, if exactly one.
fn one(m: &Metrics, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let text = m.render().unwrap();
    let matching: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    match matching[..] {
        [v] => Some(v),
        _ => None,
    }
}

#[test]
fn every_node_has_its_own_series_with_upstream_labels() {
    let m = Metrics::new();
    refresh_now(&m, &cluster(), &mut MetricsState::default());
    let a = [("node_name", "node-a"), ("nodepool", "general"), ("instance_type", "Standard_D4s_v5")];
    let cpu = |name, labels: &[(&str, &str)]| {
        let mut labels = labels.to_vec();
        labels.push(("resource_type", "cpu"));
        one(&m, name, &labels)
    };
    assert_eq!(cpu("karpenter_nodes_allocatable", &a), Some(3.86));
    assert_eq!(
        one(&m, "karpenter_nodes_allocatable", &[("node_name", "node-a"), ("resource_type", "pods")]),
        Some(110.0)
    );
    // web-1 (500m, limit 1) and the DaemonSet pod (100m, limit 200m); the Succeeded job holds nothing.
    assert_eq!(cpu("karpenter_nodes_total_pod_requests", &a), Some(0.6));
    assert_eq!(cpu("karpenter_nodes_total_pod_limits", &a), Some(1.2));
    assert_eq!(cpu("karpenter_nodes_total_daemon_requests", &a), Some(0.1));
    assert_eq!(cpu("karpenter_nodes_total_daemon_limits", &a), Some(0.2));
    assert_eq!(cpu("karpenter_nodes_system_overhead", &a), Some(0.14));
    let no_pod_count =
        one(&m, "karpenter_nodes_total_pod_requests", &[("node_name", "node-a"), ("resource_type", "pods")]);
    assert_eq!(no_pod_count, None, "upstream's requests have no pods resource");
    let managed = |node| {
        one(&m, "karpenter_nodes_current_lifetime_seconds", &[("node_name", node), ("managed", "true")])
    };
    assert_eq!(managed("node-a"), Some(3600.0), "created an hour before now, with a NodeClaim");
    assert_eq!(managed("system-1"), None, "no NodeClaim: managed=false");
    assert!(one(
        &m,
        "karpenter_nodes_current_lifetime_seconds",
        &[("node_name", "system-1"), ("managed", "false")]
    )
    .is_some());
    // 0.6 + 0.5 (web-2) + 0.1 (coredns) of 3.86 + 3.86 + 2 cores.
    let utilization = one(&m, "karpenter_cluster_utilization_percent", &[("resource_type", "cpu")]).unwrap();
    assert!((utilization - 100.0 * 1.2 / 9.72).abs() < 1e-9, "{utilization}");
}

#[test]
fn nodepool_usage_limits_and_cost() {
    let m = Metrics::new();
    let mut state = MetricsState::default();
    refresh_now(&m, &cluster(), &mut state);
    let usage = |resource, pool| {
        one(&m, "karpenter_nodepools_usage", &[("resource_type", resource), ("nodepool", pool)])
    };
    let limit = |resource, pool| {
        one(&m, "karpenter_nodepools_limit", &[("resource_type", resource), ("nodepool", pool)])
    };
    // Usage counts node capacity, plus the launching claim as one more node.
    assert_eq!(usage("cpu", "general"), Some(8.0));
    assert_eq!(usage("nodes", "general"), Some(3.0));
    assert_eq!(limit("cpu", "general"), Some(16.0));
    assert_eq!(limit("memory", "general"), Some(64.0 * 1024.0 * 1024.0 * 1024.0));
    assert_eq!(limit("cpu", "empty"), None, "no limits, no series");
    // general-a is priced; general-x has no labels yet (not costed, no error); empty costs nothing.
    assert_eq!(one(&m, "karpenter_nodepools_cost_total", &[("nodepool", "general")]), Some(0.192));
    assert_eq!(one(&m, "karpenter_nodepools_cost_total", &[("nodepool", "empty")]), Some(0.0));
    assert_eq!(one(&m, "karpenter_nodepools_cost_tracker_errors_total", &[]), None);
}

#[test]
fn a_claim_that_cannot_be_priced_is_counted_once() {
    let m = Metrics::new();
    let mut cluster = cluster();
    cluster.apply(&yaml::<NodeClaim>(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\n\
         metadata: {name: general-y, labels: {karpenter.sh/nodepool: general, node.kubernetes.io/instance-type: Standard_E2s_v5, karpenter.sh/capacity-type: spot, topology.kubernetes.io/zone: eastus-2}}\n\
         spec: {nodeClassRef: {name: default}, requirements: []}\n",
    ));
    let mut state = MetricsState::default();
    refresh_now(&m, &cluster, &mut state);
    refresh_now(&m, &cluster, &mut state);
    assert_eq!(
        one(&m, "karpenter_nodepools_cost_tracker_errors_total", &[("nodepool", "general")]),
        Some(1.0)
    );
}

#[test]
fn every_pod_has_its_state_with_upstream_labels() {
    let m = Metrics::new();
    refresh_now(&m, &cluster(), &mut MetricsState::default());
    let web1 = [
        ("name", "web-1"),
        ("namespace", "ns"),
        ("owner", "/apis/apps/v1/namespaces/ns/replicasets/web-5d9"),
        ("node", "node-a"),
        ("scheduled", "true"),
        ("nodepool", "general"),
        ("zone", "eastus-1"),
        ("arch", "amd64"),
        ("capacity_type", "on-demand"),
        ("instance_type", "Standard_D4s_v5"),
        ("phase", "Running"),
        ("ready", "true"),
        ("managed", "true"),
    ];
    assert_eq!(one(&m, "karpenter_pods_state", &web1), Some(1.0));
    let pending =
        [("name", "web-3"), ("node", ""), ("scheduled", "false"), ("phase", "Pending"), ("managed", "false")];
    assert_eq!(one(&m, "karpenter_pods_state", &pending), Some(1.0));
    // A pending pod has been unstarted and unbound since its creation, ten minutes before now.
    let web3 = [("name", "web-3"), ("namespace", "ns")];
    assert_eq!(one(&m, "karpenter_pods_unstarted_time_seconds", &web3), Some(600.0));
    assert_eq!(one(&m, "karpenter_pods_unbound_time_seconds", &web3), Some(600.0));
    assert_eq!(one(&m, "karpenter_pods_unbound_time_seconds", &[("name", "web-1")]), None);
}

#[test]
fn pods_seen_pending_give_their_startup_and_bound_durations_when_they_run() {
    let m = Metrics::new();
    let mut tracker = PodTracker::default();
    let created = "2026-08-01T11:00:00Z";
    let pod = |phase: &str, conditions: &str| -> core::Pod {
        yaml(&format!(
            "metadata: {{name: p, namespace: ns, creationTimestamp: '{created}'}}\n\
             spec: {{containers: [{{name: c}}]}}\nstatus: {{phase: {phase}, conditions: [{conditions}]}}"
        ))
    };
    tracker.ack("ns/p", "2026-08-01T11:00:01Z".parse().unwrap());
    tracker.decided("ns/p", "2026-08-01T11:00:02Z".parse().unwrap(), true);
    pod_observed(&m, &mut tracker, &pod("Pending", ""), true);
    let running = pod(
        "Running",
        "{type: PodScheduled, status: 'True', lastTransitionTime: '2026-08-01T11:00:32Z'}, \
         {type: Ready, status: 'True', lastTransitionTime: '2026-08-01T11:01:02Z'}",
    );
    pod_observed(&m, &mut tracker, &running, true);
    pod_observed(&m, &mut tracker, &running, true);
    let text = m.render().unwrap();
    let sum = |name: &str| one(&m, name, &[]);
    assert_eq!(sum("karpenter_pods_startup_duration_seconds_sum"), Some(62.0), "{text}");
    assert_eq!(sum("karpenter_pods_startup_duration_seconds_count"), Some(1.0), "observed once");
    assert_eq!(sum("karpenter_pods_bound_duration_seconds_sum"), Some(32.0));
    assert_eq!(sum("karpenter_pods_provisioning_startup_duration_seconds_sum"), Some(60.0));
    assert_eq!(sum("karpenter_pods_provisioning_bound_duration_seconds_sum"), Some(30.0));
    // A standby follows pods but records nothing.
    let standby = Metrics::new();
    let mut tracker = PodTracker::default();
    pod_observed(&standby, &mut tracker, &pod("Pending", ""), false);
    pod_observed(&standby, &mut tracker, &running, false);
    assert!(!standby.render().unwrap().contains("karpenter_pods_startup_duration_seconds"));
}

#[test]
fn status_conditions_count_transitions_and_terminations() {
    let m = Metrics::new();
    let mut cluster = cluster();
    let mut state = MetricsState::default();
    let pool = |status: &str, deleting: bool| -> crate::apis::NodePool {
        let deletion =
            if deleting { ", deletionTimestamp: '2026-08-01T11:59:00Z', finalizers: [x]" } else { "" };
        yaml(&format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: empty{deletion}}}\n\
             spec: {{template: {{spec: {{nodeClassRef: {{name: default}}, requirements: []}}}}}}\n\
             status: {{conditions: [{{type: Ready, status: '{status}', reason: R{status}, lastTransitionTime: '2026-08-01T11:{}:00Z'}}]}}",
            if status == "True" { "50" } else { "40" }
        ))
    };
    cluster.apply(&pool("False", false));
    refresh_now(&m, &cluster, &mut state);
    let ready = [("name", "empty"), ("type", "Ready"), ("status", "False"), ("reason", "RFalse")];
    assert_eq!(one(&m, "operator_nodepool_status_condition_count", &ready), Some(1.0));
    assert_eq!(one(&m, "operator_nodepool_status_condition_current_status_seconds", &ready), Some(1200.0));
    let mut deprecated = ready.to_vec();
    deprecated.extend([("kind", "NodePool"), ("group", "karpenter.sh")]);
    assert_eq!(one(&m, "operator_status_condition_count", &deprecated), Some(1.0));
    cluster.apply(&pool("True", true));
    refresh_now(&m, &cluster, &mut state);
    assert_eq!(one(&m, "operator_nodepool_status_condition_count", &ready), None, "the old status is gone");
    let transitions = [("type", "Ready"), ("status", "True"), ("reason", "RTrue")];
    assert_eq!(one(&m, "operator_nodepool_status_condition_transitions_total", &transitions), Some(1.0));
    // False lasted from 11:40 to 11:50.
    let lasted = [("type", "Ready"), ("status", "False")];
    assert_eq!(one(&m, "operator_nodepool_status_condition_transition_seconds_sum", &lasted), Some(600.0));
    assert_eq!(
        one(&m, "operator_nodepool_termination_current_time_seconds", &[("name", "empty")]),
        Some(60.0)
    );
    cluster.delete_key(Kind::NodePool, "empty");
    refresh_now(&m, &cluster, &mut state);
    assert_eq!(one(&m, "operator_nodepool_termination_duration_seconds_count", &[]), Some(1.0));
    assert_eq!(one(&m, "operator_nodepool_status_condition_count", &[("name", "empty")]), None);
    // Nodes carry their pool and class labels; the NodeClaim of node-a its nodepool.
    let node =
        [("name", "node-a"), ("karpenter_sh_nodepool", "general"), ("type", "Ready"), ("status", "True")];
    assert_eq!(one(&m, "operator_node_status_condition_count", &node), Some(1.0));
}

#[test]
fn node_count_and_synced_follow_the_index_and_gone_series_disappear() {
    let m = Metrics::new();
    let mut cluster = cluster();
    let mut state = MetricsState::default();
    refresh_now(&m, &cluster, &mut state);
    let scalar = |name| one(&m, name, &[]);
    assert_eq!(
        (scalar("karpenter_cluster_state_node_count"), scalar("karpenter_cluster_state_synced")),
        (Some(3.0), Some(0.0))
    );
    for kind in Kind::ALL {
        cluster.mark_synced(kind);
    }
    refresh_now(&m, &cluster, &mut state);
    assert_eq!(scalar("karpenter_cluster_state_synced"), Some(0.0), "a claim is still launching");
    assert!(scalar("karpenter_cluster_state_unsynced_time_seconds").is_some());
    cluster.delete_key(Kind::NodeClaim, "general-x");
    cluster.delete_key(Kind::NodeClaim, "general-a");
    cluster.delete_key(Kind::Node, "node-a");
    for pod in ["ns/web-1", "kube-system/agent-a", "ns/job"] {
        cluster.delete_key(Kind::Pod, pod);
    }
    refresh_now(&m, &cluster, &mut state);
    assert_eq!(
        (scalar("karpenter_cluster_state_node_count"), scalar("karpenter_cluster_state_synced")),
        (Some(2.0), Some(1.0))
    );
    assert_eq!(scalar("karpenter_cluster_state_unsynced_time_seconds"), Some(0.0));
    let text = m.render().unwrap();
    assert!(
        !text.contains("node-a") && !text.contains("web-1") && !text.contains("general-a"),
        "series of removed objects are gone:\n{text}"
    );
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
    let price = |pool: &str| m.scheduler.plan_price.with_label_values(&[pool]).get();
    let bound = || m.scheduler.plan_lower_bound.with_label_values(&[] as &[&str]).get();
    assert!((price("a") - 0.3).abs() < 1e-12 && (price("b") - 0.05).abs() < 1e-12);
    assert_eq!(bound(), 0.3);
    record_plan(&m, &Plan::default());
    assert_eq!(bound(), 0.3, "a plan that launches nothing changes nothing");
    record_plan(
        &m,
        &Plan { nodeclaims: vec![planned("b", 0.4)], lower_bound_per_hour: 0.4, ..Plan::default() },
    );
    let text = m.render().unwrap();
    assert!(!text.contains(r#"nodepool="a""#), "pool a is not in the latest plan:\n{text}");
    assert_eq!((price("b"), bound()), (0.4, 0.4));
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
    nodeclaim_terminated(&m, &claim(None), now());
    node_created(&m, &claim(None));
    nodeclaim_disrupted(&m, &claim(None), "launch_timeout");
    nodeclaim_disrupted(&m, &claim(Some("1h")), "garbage_collected");
    nodeclaim_disrupted(&m, &claim(Some("0s")), "garbage_collected");
    let l = &m.lifecycle;
    assert_eq!(l.nodeclaims_terminated.with_label_values(&["general", "spot", "eastus-2"]).get(), 1);
    assert_eq!(l.nodes_created.with_label_values(&["general", "eastus-2"]).get(), 1);
    let disrupted = |reason: &str, mode: &str| {
        l.nodeclaims_disrupted.with_label_values(&[reason, "general", "spot", "", mode]).get()
    };
    assert_eq!(disrupted("launch_timeout", "graceful"), 1);
    assert_eq!(disrupted("garbage_collected", "eventual"), 1);
    assert_eq!(disrupted("garbage_collected", "forceful"), 1);
    let node: core::Node = yaml(
        "metadata: {name: n, creationTimestamp: '2026-08-01T10:00:00Z', deletionTimestamp: '2026-08-01T11:59:00Z', \
         labels: {karpenter.sh/nodepool: general, topology.kubernetes.io/zone: eastus-3}}",
    );
    node_terminated(&m, &node, None, now());
    assert_eq!(l.nodes_terminated.with_label_values(&["general", "eastus-3"]).get(), 1);
    let lifetime = l.node_lifetime.with_label_values(&["general"]);
    assert_eq!((lifetime.get_sample_count(), lifetime.get_sample_sum()), (1, 7200.0));
    assert_eq!(
        one(&m, "karpenter_nodes_termination_duration_seconds_sum", &[("nodepool", "general")]),
        Some(60.0)
    );
}

#[test]
fn a_pod_the_index_no_longer_holds_is_forgotten() {
    let m = Metrics::new();
    let mut tracker = PodTracker::default();
    let pod = |phase: &str, conditions: &str| -> core::Pod {
        yaml(&format!(
            "metadata: {{name: gone, namespace: ns, creationTimestamp: '2026-08-01T11:00:00Z'}}\n\
             spec: {{containers: [{{name: c}}]}}\nstatus: {{phase: {phase}, conditions: [{conditions}]}}"
        ))
    };
    pod_observed(&m, &mut tracker, &pod("Pending", ""), true);
    tracker.retain(&cluster());
    let ready = "{type: Ready, status: 'True', lastTransitionTime: '2026-08-01T11:01:00Z'}";
    pod_observed(&m, &mut tracker, &pod("Running", ready), true);
    assert!(!m.render().unwrap().contains("karpenter_pods_startup_duration_seconds"), "not seen pending");
}
