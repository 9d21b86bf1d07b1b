//! Tests of the cluster index: which pods are provisionable, the synced gate, relists, and the
//! snapshot of a small cluster, checked field by field (the simulator's tests compare it with their own
//! assembly of the same objects).

use std::cell::RefCell;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1 as core;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::*;
use crate::apis::{NodeClaim, TaintEffect};
use crate::model::labels::LABEL_INSTANCE_TYPE;
use crate::model::resources::{Resources, CPU, NODES};
use crate::model::InstanceType;
use crate::model::LabelLookup;
use crate::scheduling::SolveOptions;

pub(crate) fn yaml<T: DeserializeOwned>(text: &str) -> T {
    serde_yaml::from_str(text).expect("test object parses")
}

const UNSCHEDULABLE: &str = "{conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable}]}";

/// A pod in namespace `ns`; `extra_meta` / `extra_spec` are flow-style YAML fields, `status` a mapping.
fn pod(name: &str, extra_meta: &str, extra_spec: &str, status: &str) -> core::Pod {
    yaml(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ns{extra_meta}}}\n\
         spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 500m}}}}}}]{extra_spec}}}\nstatus: {status}\n"
    ))
}

pub(crate) fn all_synced(cluster: &mut Cluster) {
    for kind in Kind::ALL {
        cluster.mark_synced(kind);
    }
}

#[test]
fn provisionable_pods_exclude_each_upstream_case() {
    let cases: &[(&str, core::Pod, bool)] = &[
        ("pending and unschedulable", pod("p", "", "", UNSCHEDULABLE), true),
        ("not yet seen by the scheduler", pod("p", "", "", "{}"), false),
        (
            "gated, not unschedulable",
            pod("p", "", "", "{conditions: [{type: PodScheduled, status: 'False', reason: SchedulingGated}]}"),
            false,
        ),
        ("bound", pod("p", "", ", nodeName: n1", UNSCHEDULABLE), false),
        (
            "nominated by preemption",
            pod(
                "p",
                "",
                "",
                "{nominatedNodeName: n1, conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable}]}",
            ),
            false,
        ),
        (
            "owned by a DaemonSet",
            pod(
                "p",
                ", ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: ds, uid: u, controller: true}]",
                "",
                UNSCHEDULABLE,
            ),
            false,
        ),
        ("mirror pod", pod("p", ", annotations: {kubernetes.io/config.mirror: x}", "", UNSCHEDULABLE), false),
        (
            "terminal",
            pod(
                "p",
                "",
                "",
                "{phase: Failed, conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable}]}",
            ),
            false,
        ),
        ("being deleted", pod("p", ", deletionTimestamp: '2026-01-01T00:00:00Z'", "", UNSCHEDULABLE), false),
    ];
    for (case, p, want) in cases {
        let mut cluster = Cluster::new();
        cluster.apply(p);
        assert_eq!(cluster.provisionable_pods().count(), usize::from(*want), "{case}");
    }
}

fn nodeclaim(name: &str, provider_id: Option<&str>, deleting: bool) -> NodeClaim {
    let deletion = if deleting { ", deletionTimestamp: '2026-01-01T00:00:00Z', finalizers: [x]" } else { "" };
    let status = provider_id.map_or(String::new(), |id| format!("status: {{providerID: '{id}'}}\n"));
    yaml(&format!(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\n\
         metadata: {{name: {name}, labels: {{karpenter.sh/nodepool: general}}{deletion}}}\n\
         spec: {{nodeClassRef: {{name: default}}, requirements: []}}\n{status}"
    ))
}

#[test]
fn synced_waits_for_every_list_and_for_launching_claims() {
    let mut cluster = Cluster::new();
    assert_eq!(cluster.sync_status(), Err(NotSynced::Listing(Kind::Pod)));
    for kind in &Kind::ALL[..6] {
        cluster.mark_synced(*kind);
    }
    assert_eq!(cluster.sync_status(), Err(NotSynced::Listing(Kind::PodDisruptionBudget)));
    for kind in &Kind::ALL[6..10] {
        cluster.mark_synced(*kind);
    }
    assert_eq!(cluster.sync_status(), Err(NotSynced::Listing(Kind::Namespace)), "volumes and namespaces too");
    cluster.mark_synced(Kind::Namespace);
    assert_eq!(cluster.sync_status(), Err(NotSynced::Listing(Kind::NodeOverlay)), "overlays price the types");
    cluster.mark_synced(Kind::NodeOverlay);
    assert!(cluster.synced());

    cluster.apply(&nodeclaim("c1", None, false));
    assert_eq!(cluster.sync_status(), Err(NotSynced::Launching("c1".into())));
    // A claim already being deleted will never be capacity: it does not hold the gate.
    cluster.apply(&nodeclaim("c1", None, true));
    assert!(cluster.synced());
    cluster.apply(&nodeclaim("c2", None, false));
    assert!(!cluster.synced());
    cluster.apply(&nodeclaim("c2", Some("azure:///vm/c2"), false));
    assert!(cluster.synced());
}

#[test]
fn a_relist_drops_objects_deleted_while_the_watch_was_down() {
    let mut cluster = Cluster::new();
    cluster.apply(&pod("a", "", "", UNSCHEDULABLE));
    cluster.apply(&pod("b", "", ", nodeName: n1", "{}"));
    cluster.mark_synced(Kind::Pod);
    cluster.begin_relist(Kind::Pod);
    cluster.apply(&pod("a", "", "", UNSCHEDULABLE));
    assert!(cluster.pod("ns/b").is_some(), "kept until the relist ends");
    cluster.mark_synced(Kind::Pod);
    assert!(cluster.pod("ns/b").is_none());
    assert_eq!(cluster.pods_on_node("n1").count(), 0);
    assert!(cluster.pod("ns/a").is_some());
}

#[test]
fn an_object_that_cannot_be_converted_is_reported_and_left_out() {
    let mut cluster = Cluster::new();
    cluster.apply(&pod("p", "", "", UNSCHEDULABLE));
    let match_fields = ", affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
                        {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n]}]}]}}}";
    cluster.apply(&pod("p", "", match_fields, UNSCHEDULABLE));
    assert!(cluster.pod("ns/p").is_none(), "the stale version is gone too");
    let invalid: Vec<_> = cluster.invalid().map(|(k, key, e)| (k, key.to_string(), e.category())).collect();
    assert_eq!(invalid, vec![(Kind::Pod, "ns/p".to_string(), "Unsupported")]);
    cluster.delete_key(Kind::Pod, "ns/p");
    assert_eq!(cluster.invalid().count(), 0);
}

#[test]
fn pods_follow_their_node_when_bound_and_deleted() {
    let mut cluster = Cluster::new();
    cluster.apply(&pod("p", "", "", UNSCHEDULABLE));
    assert_eq!(cluster.provisionable_pods().count(), 1);
    let bound = pod("p", "", ", nodeName: n1", "{phase: Running}");
    cluster.apply(&bound);
    assert_eq!(cluster.provisionable_pods().count(), 0);
    assert_eq!(cluster.pods_on_node("n1").map(|p| p.pod.id()).collect::<Vec<_>>(), vec!["ns/p"]);
    cluster.delete(&bound);
    assert_eq!(cluster.pods_on_node("n1").count(), 0);
}

/// A NodePool with a cpu limit, a pool that is not Ready, two registered nodes (one not yet
/// initialized, with a startup taint and not-ready), one in-flight claim, pods bound and pending, a
/// DaemonSet, and a PDB.
pub(crate) const CLUSTER: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  limits: {cpu: "16"}
  template:
    metadata: {labels: {team: a}}
    spec:
      nodeClassRef: {name: default}
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
      startupTaints: [{key: example.com/agent, effect: NoSchedule}]
status: {conditions: [{type: Ready, status: "True", reason: Ready, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}]}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: pending-class}
spec:
  template:
    spec: {nodeClassRef: {name: missing}, requirements: []}
---
apiVersion: karpenter.azure.com/v1beta1
kind: AKSNodeClass
metadata: {name: default}
spec: {}
---
apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {karpenter.sh/nodepool: general, karpenter.sh/initialized: "true", team: a}
spec: {providerID: "azure:///vm/a"}
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  allocatable: {cpu: 3800m, memory: 12Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: node-b
  labels: {karpenter.sh/nodepool: general, team: a}
spec:
  providerID: "azure:///vm/b"
  taints:
  - {key: example.com/agent, effect: NoSchedule}
  - {key: node.kubernetes.io/not-ready, effect: NoSchedule}
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  allocatable: {cpu: 3800m, memory: 12Gi, pods: "110"}
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: ns, labels: {app: web}}
spec: {nodeName: node-a, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: web-2, namespace: ns, labels: {app: web}}
spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
status: {phase: Pending, conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]}
---
apiVersion: v1
kind: Pod
metadata: {name: job-done, namespace: ns}
spec: {nodeName: node-a, containers: [{name: c, resources: {requests: {cpu: "2"}}}]}
status: {phase: Succeeded}
---
apiVersion: v1
kind: Pod
metadata:
  name: agent-x
  namespace: kube-system
  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u, controller: true}]
spec: {nodeName: node-b, containers: [{name: c, resources: {requests: {cpu: 100m}}}]}
status: {phase: Running}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: c, resources: {requests: {cpu: 100m}}}]}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: ns}
spec: {selector: {matchLabels: {app: web}}, minAvailable: 1}
status: {disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}
"#;

/// The claims behind node-a and node-b, and one launched whose node has not registered.
pub(crate) const CLAIMS: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: general-a, labels: {karpenter.sh/nodepool: general}}
spec: {nodeClassRef: {name: default}, requirements: []}
status: {providerID: "azure:///vm/a", nodeName: node-a}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: general-b, labels: {karpenter.sh/nodepool: general}}
spec:
  nodeClassRef: {name: default}
  requirements: []
  startupTaints: [{key: example.com/agent, effect: NoSchedule}]
status: {providerID: "azure:///vm/b", nodeName: node-b}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: general-c
  labels: {karpenter.sh/nodepool: general, team: a, node.kubernetes.io/instance-type: Standard_D2s_v5}
spec:
  nodeClassRef: {name: default}
  requirements:
  - {key: topology.kubernetes.io/zone, operator: In, values: [eastus-1]}
  - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
  taints: [{key: dedicated, value: a, effect: NoSchedule}]
  startupTaints: [{key: example.com/agent, effect: NoSchedule}]
status:
  providerID: "azure:///vm/c"
  capacity: {cpu: "2", memory: 8Gi}
  allocatable: {cpu: 1900m, memory: 5Gi, pods: "110"}
"#;

pub(crate) fn documents(text: &str) -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(text).map(|d| serde_yaml::Value::deserialize(d).unwrap()).collect()
}

/// Applies every document of `text` to the index.
pub(crate) fn apply_all(cluster: &mut Cluster, text: &str) {
    for doc in documents(text) {
        let kind = doc["kind"].as_str().unwrap().to_string();
        match kind.as_str() {
            "NodePool" => cluster.apply(&serde_yaml::from_value::<crate::apis::NodePool>(doc).unwrap()),
            "AKSNodeClass" => {
                cluster.apply(&serde_yaml::from_value::<crate::apis::AKSNodeClass>(doc).unwrap())
            }
            "NodeClaim" => cluster.apply(&serde_yaml::from_value::<NodeClaim>(doc).unwrap()),
            "Node" => cluster.apply(&serde_yaml::from_value::<core::Node>(doc).unwrap()),
            "Pod" => cluster.apply(&serde_yaml::from_value::<core::Pod>(doc).unwrap()),
            "DaemonSet" => cluster.apply(&serde_yaml::from_value::<DaemonSet>(doc).unwrap()),
            "PodDisruptionBudget" => cluster.apply(
                &serde_yaml::from_value::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(doc).unwrap(),
            ),
            "Namespace" => cluster.apply(&serde_yaml::from_value::<core::Namespace>(doc).unwrap()),
            "PersistentVolumeClaim" => {
                cluster.apply(&serde_yaml::from_value::<core::PersistentVolumeClaim>(doc).unwrap())
            }
            "PersistentVolume" => {
                cluster.apply(&serde_yaml::from_value::<core::PersistentVolume>(doc).unwrap())
            }
            "NodeOverlay" => cluster.apply(&serde_yaml::from_value::<crate::apis::NodeOverlay>(doc).unwrap()),
            other => panic!("unexpected kind {other}"),
        }
    }
}

pub(crate) fn small_cluster() -> Cluster {
    let mut cluster = Cluster::new();
    apply_all(&mut cluster, CLUSTER);
    apply_all(&mut cluster, CLAIMS);
    all_synced(&mut cluster);
    assert!(cluster.synced(), "{:?}", cluster.sync_status());
    assert_eq!(cluster.invalid().count(), 0);
    cluster
}

fn taint(key: &str) -> crate::apis::Taint {
    crate::apis::Taint { key: key.into(), value: None, effect: TaintEffect::NoSchedule, time_added: None }
}

/// A 2-vCPU size with one on-demand offering in eastus-1 at `price`.
fn two_vcpu_type(name: &str, price: f64) -> InstanceType {
    InstanceType {
        name: name.into(),
        vcpus: 2,
        memory_mib: 8192,
        labels: [(LABEL_INSTANCE_TYPE.to_string(), name.to_string())].into(),
        capacity: Resources::new().with(CPU, 2000),
        overhead: Default::default(),
        allocatable: Resources::new().with(CPU, 2000),
        offerings: vec![crate::model::Offering {
            zone: "eastus-1".into(),
            capacity_type: crate::model::CapacityType::OnDemand,
            price,
            available: true,
        }],
    }
}

#[test]
fn node_overlays_price_every_pools_types_until_deleted() {
    let mut cluster = small_cluster();
    let types = Arc::new(vec![two_vcpu_type("Standard_A", 0.1), two_vcpu_type("Standard_B", 0.2)]);
    let catalog = |_: &crate::apis::NodePool, _: Option<&crate::apis::AKSNodeClass>| types.clone();
    let first = |cluster: &Cluster| {
        let pools = cluster.solver_pools(&catalog);
        let general = pools.iter().find(|p| p.name == "general").unwrap();
        (general.instance_types[0].name.clone(), general.instance_types[0].offerings[0].price)
    };
    assert_eq!(first(&cluster), ("Standard_A".to_string(), 0.1));
    // The pool's template label `team: a` is matched, as upstream matches template labels.
    apply_all(
        &mut cluster,
        "apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: cheap-b}
spec:
  price: '0.05'
  requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [Standard_B]}
  - {key: team, operator: In, values: [a]}
",
    );
    assert_eq!(first(&cluster), ("Standard_B".to_string(), 0.05));
    let annotations = |options: &[&str]| {
        let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
        cluster.overlay_annotations("general", &options, &catalog)
    };
    assert_eq!(
        annotations(&["Standard_A", "Standard_B"]),
        [("karpenter.sh/price-overlay-applied".to_string(), "true".to_string())].into()
    );
    assert!(annotations(&["Standard_A"]).is_empty(), "no option of the claim was priced by an overlay");
    let overlay = cluster.node_overlays().next().unwrap().clone();
    cluster.delete(&overlay);
    assert_eq!(first(&cluster), ("Standard_A".to_string(), 0.1));
}

/// Upstream's NodeOverlay controller judges conflicts over every NodePool whose instance types
/// resolve, Ready or not: an overlay that conflicts only on a pool that cannot launch yet is left out
/// of the Ready pools too. A pool whose AKSNodeClass does not exist takes no part.
#[test]
fn an_overlay_conflicting_only_on_a_pool_that_is_not_ready_is_left_out_everywhere() {
    let mut cluster = small_cluster();
    let types = Arc::new(vec![two_vcpu_type("Standard_B", 0.2)]);
    let catalog = |_: &crate::apis::NodePool, _: Option<&crate::apis::AKSNodeClass>| types.clone();
    let price_in_general = |cluster: &Cluster| {
        let pools = cluster.solver_pools(&catalog);
        assert_eq!(pools.len(), 1, "only the Ready pool is solved over");
        pools[0].instance_types[0].offerings[0].price
    };
    // `z-team-b` comes first at equal weight (the later name) and prices Standard_B on pool `team-b`;
    // `a-everywhere` then prices the same offering there at the same weight: a conflict.
    let overlays = "apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: a-everywhere}
spec:
  weight: 10
  price: '0.05'
  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [Standard_B]}]
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: z-team-b}
spec:
  weight: 10
  price: '0.07'
  requirements: [{key: team, operator: In, values: [b]}]
";
    apply_all(&mut cluster, overlays);
    assert_eq!(price_in_general(&cluster), 0.05, "no pool but general: nothing conflicts");
    // A pool with no class resolves no instance types, so it takes no part (upstream skips a pool
    // whose GetInstanceTypes fails).
    let pool = |name: &str, class: &str| {
        format!(
            "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  template:
    metadata: {{labels: {{team: b}}}}
    spec: {{nodeClassRef: {{name: {class}}}, requirements: []}}
"
        )
    };
    apply_all(&mut cluster, &pool("team-b-without-class", "missing"));
    assert_eq!(price_in_general(&cluster), 0.05);
    apply_all(&mut cluster, &pool("team-b", "default"));
    assert_eq!(price_in_general(&cluster), 0.2, "a-everywhere conflicts on team-b and is left out whole");
    let general: Vec<&crate::apis::NodePool> = cluster.ready_nodepools().collect();
    let rejected = cluster.overlaid_catalogs(&general, &catalog).rejected;
    assert_eq!(rejected.keys().collect::<Vec<_>>(), ["a-everywhere"]);
}

#[test]
fn snapshot_of_a_small_cluster() {
    let cluster = small_cluster();
    let asked = RefCell::new(vec![]);
    let catalog = |pool: &crate::apis::NodePool, class: Option<&crate::apis::AKSNodeClass>| {
        asked.borrow_mut().push((pool.metadata.name.clone().unwrap(), class.is_some()));
        Arc::new(Vec::<InstanceType>::new())
    };
    let input = cluster.snapshot(&catalog, SolveOptions { region: "eastus".into(), ..Default::default() });

    assert_eq!(input.pods.iter().map(|p| p.id()).collect::<Vec<_>>(), vec!["ns/web-2"]);
    // Bound and not terminal, node by node; the DaemonSet pod on node-b is capacity in use too.
    assert_eq!(
        input.running.iter().map(|p| p.id()).collect::<Vec<_>>(),
        vec!["ns/web-1", "kube-system/agent-x"]
    );

    let names: Vec<_> = input.nodes.iter().map(|n| (n.name.as_str(), n.in_flight)).collect();
    assert_eq!(names, vec![("node-a", false), ("node-b", false), ("general-c", true)]);
    let (a, b, c) = (&input.nodes[0], &input.nodes[1], &input.nodes[2]);
    assert_eq!(a.allocatable.get(CPU), 3800);
    assert_eq!(a.nodepool.as_deref(), Some("general"));
    assert!(a.startup_taints.is_empty(), "initialized: its taints all count");
    // Not initialized: the claim's startup taint and not-ready will go away.
    assert_eq!(b.taints.len(), 2);
    assert_eq!(b.startup_taints, vec![taint("example.com/agent"), taint("node.kubernetes.io/not-ready")]);
    assert_eq!(c.allocatable.get(CPU), 1900);
    assert_eq!(c.nodepool.as_deref(), Some("general"));
    assert_eq!(c.labels.label(LABEL_INSTANCE_TYPE), Some("Standard_D2s_v5"));
    assert_eq!(c.labels.label("topology.kubernetes.io/zone"), Some("eastus-1"));
    assert!(!c.labels.contains_key("kubernetes.io/arch"), "two values: no label yet");
    assert_eq!(c.taints.len(), 2);
    assert_eq!(c.startup_taints, vec![taint("example.com/agent")]);

    // Only the Ready pool; its class was found.
    assert_eq!(*asked.borrow(), vec![("general".to_string(), true)]);
    assert_eq!(input.nodepools.len(), 1);
    let pool = &input.nodepools[0];
    // 16 cpu − (4 + 4 of the nodes + 2 of the in-flight claim).
    assert_eq!(pool.remaining, Some(Resources::new().with(CPU, 6000)));
    assert_eq!(pool.startup_taints, vec![taint("example.com/agent")]);
    assert_eq!(input.options.region, "eastus");

    assert_eq!(input.daemonsets.len(), 1);
    assert_eq!(input.daemonsets[0].owner.as_deref(), Some("DaemonSet/agent"));
    assert_eq!(input.daemonsets[0].requests.get(CPU), 100);

    let usage = cluster.nodepool_usage();
    assert_eq!(usage["general"].get(NODES), 3);
    let pdb = cluster.pdbs().next().unwrap();
    assert_eq!(pdb.disruptions_allowed, 0);
    assert!(pdb.selects(&input.running[0]));
}

/// The claim's Initialized condition can arrive before the Node's update that drops not-ready and
/// adds the initialized label (two watches): until both have, the node's ephemeral taints do not count.
#[test]
fn a_node_is_initialized_only_once_its_claim_and_the_node_both_say_so() {
    let catalog = |_: &crate::apis::NodePool, _: Option<&crate::apis::AKSNodeClass>| {
        Arc::new(Vec::<InstanceType>::new())
    };
    let node_b = |cluster: &Cluster| {
        let input =
            cluster.snapshot(&catalog, SolveOptions { region: "eastus".into(), ..Default::default() });
        input.nodes.into_iter().find(|n| n.name == "node-b").expect("node-b")
    };
    let mut cluster = small_cluster();
    let mut claim = nodeclaim("general-b", Some("azure:///vm/b"), false);
    let status = claim.status.get_or_insert_with(Default::default);
    status.node_name = Some("node-b".into());
    let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:01:00Z".parse().unwrap());
    crate::apis::conditions::set(
        &mut status.conditions,
        crate::apis::conditions::INITIALIZED,
        crate::apis::conditions::ConditionStatus::True,
        "Initialized",
        "",
        None,
        &at,
    );
    cluster.apply(&claim);
    // The claim is Initialized, the Node (not yet updated in the index) still has not-ready.
    let b = node_b(&cluster);
    assert!(
        b.startup_taints.contains(&taint("node.kubernetes.io/not-ready")),
        "not-ready is still ignored: {:?}",
        b.startup_taints
    );
}

#[test]
fn nodes_and_claims_join_by_provider_id() {
    let cluster = small_cluster();
    let joined: Vec<_> =
        cluster.nodes().map(|(n, c)| (n.name().to_string(), c.map(|c| c.name.clone()))).collect();
    assert_eq!(
        joined,
        vec![("node-a".into(), Some("general-a".into())), ("node-b".into(), Some("general-b".into()))]
    );
    let in_flight: Vec<_> = cluster.in_flight_claims().map(|c| c.name.as_str()).collect();
    assert_eq!(in_flight, vec!["general-c"]);
}

#[test]
fn nodes_and_claims_are_found_by_provider_id() {
    let cluster = small_cluster();
    for (node, claim) in cluster.nodes() {
        let id = node.provider_id.as_deref().expect("the fixture's nodes have providerIDs");
        assert_eq!(cluster.node_with_provider_id(id).map(|n| n.name()), Some(node.name()));
        assert_eq!(cluster.nodeclaim_with_provider_id(id).map(|c| &c.name), claim.map(|c| &c.name));
    }
    assert!(cluster.node_with_provider_id("azure:///nowhere").is_none());
    assert!(cluster.nodeclaim_with_provider_id("azure:///nowhere").is_none());
}

#[test]
fn deleting_nodes_leave_the_snapshot_but_still_count_against_limits() {
    let mut cluster = small_cluster();
    let mut node_a: core::Node = serde_yaml::from_value(documents(CLUSTER)[3].clone()).unwrap();
    node_a.metadata.deletion_timestamp = Some(yaml("'2026-01-01T00:00:00Z'"));
    cluster.apply(&node_a);
    let input = cluster.snapshot(
        &|_: &crate::apis::NodePool, _: Option<&crate::apis::AKSNodeClass>| Arc::default(),
        SolveOptions::default(),
    );
    assert_eq!(input.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), vec!["node-b", "general-c"]);
    assert_eq!(input.running.iter().map(|p| p.id()).collect::<Vec<_>>(), vec!["kube-system/agent-x"]);
    assert_eq!(input.nodepools[0].remaining, Some(Resources::new().with(CPU, 6000)));
}

#[test]
fn records_stay_small() {
    // The index holds thousands of these; keep the fixed part of each record modest.
    assert!(std::mem::size_of::<PodRecord>() <= 640, "{}", std::mem::size_of::<PodRecord>());
    // Nodes are far fewer than pods; their creation, deletion and phase feed the node metrics.
    assert!(std::mem::size_of::<NodeRecord>() <= 384, "{}", std::mem::size_of::<NodeRecord>());
}

#[test]
fn volume_zones_are_read_at_snapshot_time() {
    let mut cluster = Cluster::new();
    all_synced(&mut cluster);
    let spec = ", volumes: [{name: data, persistentVolumeClaim: {claimName: data-db-0}}]";
    cluster.apply(&pod("db-0", "", spec, UNSCHEDULABLE));
    let zones = |cluster: &Cluster| {
        let input = cluster.snapshot(&|_, _| Arc::new(vec![]), SolveOptions::default());
        input.pods.iter().find(|p| p.name == "db-0").expect("pending").volume_zones.clone()
    };
    assert_eq!(zones(&cluster), None, "no claim known yet");
    // The claim and its volume arrive after the pod; the next snapshot sees them.
    cluster.apply(&yaml::<core::PersistentVolumeClaim>(
        "metadata: {name: data-db-0, namespace: ns}\nspec: {volumeName: pv-1}\n",
    ));
    cluster.apply(&yaml::<core::PersistentVolume>(
        "metadata: {name: pv-1}\nspec:\n  nodeAffinity:\n    required:\n      nodeSelectorTerms:\n        - matchExpressions:\n            - {key: topology.disk.csi.azure.com/zone, operator: In, values: [eastus-2]}\n",
    ));
    assert_eq!(zones(&cluster), Some(vec!["eastus-2".to_string()]));
    cluster.delete_key(Kind::PersistentVolume, "pv-1");
    assert_eq!(zones(&cluster), None);
}

#[test]
fn a_namespace_selector_follows_the_namespaces() {
    let mut cluster = Cluster::new();
    all_synced(&mut cluster);
    let affinity = ", affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [\
        {labelSelector: {matchLabels: {app: cache}}, namespaceSelector: {matchLabels: {team: blue}}, \
        topologyKey: topology.kubernetes.io/zone}]}}";
    cluster.apply(&pod("web", "", affinity, UNSCHEDULABLE));
    let namespaces =
        |cluster: &Cluster| cluster.pod("ns/web").expect("indexed").pod.affinity[0].namespaces.clone();
    assert!(namespaces(&cluster).is_empty(), "no namespace labelled team=blue yet");
    cluster.apply(&yaml::<core::Namespace>("metadata: {name: caches, labels: {team: blue}}\n"));
    cluster.apply(&yaml::<core::Namespace>("metadata: {name: other, labels: {team: red}}\n"));
    assert_eq!(namespaces(&cluster), ["caches"]);
    cluster.delete_key(Kind::Namespace, "caches");
    assert!(namespaces(&cluster).is_empty());
}

#[test]
fn claims_carry_what_disruption_reads() {
    let claim: NodeClaim = yaml(
        r"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: general-a
  labels: {karpenter.sh/nodepool: general}
  annotations: {karpenter.sh/nodepool-hash: '42', karpenter.sh/nodepool-hash-version: v9}
spec: {nodeClassRef: {name: default}, requirements: []}
status:
  providerID: azure:///vm/a
  imageID: img-1
  lastPodEventTime: '2026-01-01T00:05:00Z'
  conditions:
    - {type: Initialized, status: 'True', reason: Initialized, lastTransitionTime: '2026-01-01T00:01:00Z'}
    - {type: Drifted, status: 'True', reason: NodeClassDrift, lastTransitionTime: '2026-01-01T00:02:00Z'}
    - {type: Consolidatable, status: 'True', reason: Consolidatable, lastTransitionTime: '2026-01-01T00:03:00Z'}
    - {type: DisruptionReason, status: 'True', reason: Drifted, lastTransitionTime: '2026-01-01T00:04:00Z'}
",
    );
    let r = records::NodeClaimRecord::from_k8s(&claim).unwrap();
    let t = |s: &str| s.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
    assert_eq!(r.initialized_at, Some(t("2026-01-01T00:01:00Z")));
    let drifted = r.drifted.clone().unwrap();
    assert_eq!((drifted.reason.as_str(), drifted.since), ("NodeClassDrift", t("2026-01-01T00:02:00Z")));
    assert!(r.consolidatable);
    assert_eq!(r.disruption_reason.as_deref(), Some("Drifted"));
    assert_eq!(r.last_pod_event, Some(t("2026-01-01T00:05:00Z")));
    assert_eq!(r.image_id.as_deref(), Some("img-1"));
    assert_eq!(r.annotations["karpenter.sh/nodepool-hash"], "42");
    assert_eq!(r.conditions.len(), 4, "kept whole for writers");

    // Conditions that are not True leave the fields empty.
    let mut claim = claim;
    for c in &mut claim.status.as_mut().unwrap().conditions {
        c.status = crate::apis::conditions::ConditionStatus::False;
    }
    claim.status.as_mut().unwrap().last_pod_event_time = None;
    let r = records::NodeClaimRecord::from_k8s(&claim).unwrap();
    assert_eq!((r.initialized_at, r.drifted, r.consolidatable), (None, None, false));
    assert_eq!((r.disruption_reason, r.last_pod_event), (None, None));

    let node: core::Node = yaml(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n\
         status: {nodeInfo: {kubeletVersion: v1.34.4, machineID: '', systemUUID: '', bootID: '', kernelVersion: '',\n\
           osImage: '', containerRuntimeVersion: '', kubeProxyVersion: '', operatingSystem: linux, architecture: amd64}}\n",
    );
    assert_eq!(records::NodeRecord::from_k8s(&node).unwrap().kubelet_version.as_deref(), Some("v1.34.4"));
    let bare: core::Node = yaml("apiVersion: v1\nkind: Node\nmetadata: {name: n}\n");
    assert_eq!(records::NodeRecord::from_k8s(&bare).unwrap().kubelet_version, None);
}
