//! `simulate` takes the controller's snapshots of its objects: on a complete snapshot of a live cluster
//! both see the same input, and what a hand-written file lacks is filled in as the cluster's own
//! controllers would have written it. Here rather than in the state's tests because the simulator
//! sits above the state.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use crate::model::InstanceType;
use crate::scheduling::SolveOptions;
use crate::sim::load::{self, Objects, Source};
use crate::sim::managed;
use crate::sim::scenario::{self, Catalog, Scenario};
use crate::state::tests::{small_cluster, CLAIMS, CLUSTER};

fn objects(text: &str) -> Objects {
    load::load(&[Source::Text { name: "cluster.yaml".into(), text: text.into() }]).unwrap()
}

fn scenario(objects: &Objects) -> Scenario {
    scenario::build(objects, "eastus", &Catalog::Fixed(Arc::new(Vec::<InstanceType>::new()))).unwrap()
}

/// On a snapshot with claims and statuses, the simulator's solver and disruption input is the
/// controller's; only the NodePool without status plans in the simulator alone.
#[test]
fn a_live_cluster_snapshot_gives_the_controllers_input() {
    let objects = objects(&format!("{CLUSTER}---\n{CLAIMS}"));
    let sim = scenario(&objects);
    let cluster = small_cluster();
    let types = Arc::new(Vec::<InstanceType>::new());
    let options = SolveOptions { region: "eastus".into(), ..Default::default() };
    let ours = cluster.snapshot(&|_, _| types.clone(), options.clone());
    assert_eq!(sim.input.pods, ours.pods);
    assert_eq!(sim.input.running, ours.running);
    assert_eq!(sim.input.nodes, ours.nodes);
    assert_eq!(sim.input.daemonsets, ours.daemonsets);
    let names: Vec<&str> = sim.input.nodepools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["general", "pending-class"]);
    assert_eq!(format!("{:?}", sim.input.nodepools[0]), format!("{:?}", ours.nodepools[0]));
    let none = BTreeSet::new();
    let (theirs, _) = cluster.disruption_snapshot(&|_, _| types.clone(), options, &none, &none);
    let ours = managed::snapshot(&objects, &sim, &mut vec![]).unwrap();
    assert_eq!(format!("{:?}", ours.nodes), format!("{:?}", theirs.nodes));
    assert_eq!(format!("{:?}", ours.unmanaged), format!("{:?}", theirs.unmanaged));
    assert_eq!(format!("{:?}", ours.pdbs), format!("{:?}", theirs.pdbs));
}

/// Managed Nodes without providerIDs or claims, pods without status.
const HAND_WRITTEN: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec: {nodeClassRef: {name: default}, requirements: []}
---
apiVersion: v1
kind: Node
metadata:
  name: labelled
  creationTimestamp: '2026-12-01T08:00:00Z'
  labels: {karpenter.sh/nodepool: general}
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: claimed, creationTimestamp: '2026-12-01T08:00:00Z'}
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: general-x, labels: {karpenter.sh/nodepool: general}}
spec: {nodeClassRef: {name: default}, requirements: []}
status: {nodeName: claimed}
---
apiVersion: v1
kind: Pod
metadata: {name: running, creationTimestamp: '2026-12-01T09:00:00Z'}
spec: {nodeName: labelled, containers: [{name: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: waiting}
spec: {containers: [{name: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: preempting}
spec: {containers: [{name: c}]}
status: {nominatedNodeName: claimed, conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]}
"#;

#[test]
fn what_a_file_lacks_is_filled_in_as_the_cluster_would_have_written_it() {
    let objects = objects(HAND_WRITTEN);
    let sim = scenario(&objects);
    // An unbound pod is one the scheduler could not place; a nominated one waits for preemption.
    let pending: Vec<&str> = sim.input.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(pending, ["waiting"]);
    assert_eq!(sim.input.nodepools.len(), 1, "a pool without status plans");
    let snapshot = managed::snapshot(&objects, &sim, &mut vec![]).unwrap();
    let managed: Vec<(&str, &str)> =
        snapshot.nodes.iter().map(|n| (n.node.name.as_str(), n.nodeclaim.as_str())).collect();
    assert_eq!(managed, [("labelled", "labelled"), ("claimed", "general-x")]);
    let at = |s: &str| s.parse::<Timestamp>().unwrap();
    let labelled = &snapshot.nodes[0];
    assert_eq!(labelled.initialized, Some(at("2026-12-01T08:00:00Z")), "Ready: initialized at creation");
    assert_eq!(labelled.last_pod_event, Some(at("2026-12-01T09:00:00Z")), "its pod's start");
    assert_eq!(labelled.pods[0].started, Some(at("2026-12-01T09:00:00Z")));
    assert_eq!(snapshot.nodes[1].initialized, None, "neither Ready nor labelled initialized");
}
