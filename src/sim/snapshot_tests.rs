//! The controller's snapshot and the simulator's scenario agree: both turn the same objects into the
//! same solver input. Here rather than in the state's tests because the simulator sits above the state.

use std::sync::Arc;

use crate::model::InstanceType;
use crate::scheduling::SolveOptions;
use crate::sim::load::{self, Source};
use crate::sim::scenario::{self, Catalog};
use crate::state::tests::{all_synced, apply_all, CLUSTER};
use crate::state::Cluster;

/// The controller and the simulator build the same input from the same objects (without claims,
/// which the simulator does not read).
#[test]
fn snapshot_agrees_with_the_simulator() {
    let mut cluster = Cluster::new();
    apply_all(&mut cluster, CLUSTER);
    all_synced(&mut cluster);
    let objects = load::load(&[Source::Text { name: "cluster.yaml".into(), text: CLUSTER.into() }]).unwrap();
    let types = Arc::new(Vec::<InstanceType>::new());
    let sim = scenario::build(&objects, "eastus", &Catalog::Fixed(types.clone())).unwrap().input;
    let ours = cluster.snapshot(
        &|_: &crate::apis::NodePool, _: Option<&crate::apis::AKSNodeClass>| types.clone(),
        SolveOptions { region: "eastus".into(), ..Default::default() },
    );
    assert_eq!(ours.pods, sim.pods);
    let mut sim_running = sim.running.clone();
    sim_running.sort_by_key(|p| (p.node_name.clone(), p.id()));
    let mut our_running = ours.running.clone();
    our_running.sort_by_key(|p| (p.node_name.clone(), p.id()));
    assert_eq!(our_running, sim_running);
    assert_eq!(ours.daemonsets, sim.daemonsets);
    // Without claims, node-b's startup taints are unknown to both.
    assert_eq!(ours.nodes, sim.nodes);
    // The simulator plans with every pool; the controller only with Ready ones.
    let sim_general = sim.nodepools.iter().find(|p| p.name == "general").unwrap();
    let ours_general = &ours.nodepools[0];
    assert_eq!(ours.nodepools.len(), 1);
    assert_eq!(ours_general.name, sim_general.name);
    assert_eq!(ours_general.requirements, sim_general.requirements);
    assert_eq!(ours_general.labels, sim_general.labels);
    assert_eq!(ours_general.taints, sim_general.taints);
    assert_eq!(ours_general.remaining, sim_general.remaining);
    assert_eq!(ours_general.weight, sim_general.weight);
}

/// A pending pod with a bound volume in eastus-2 and pod affinity to a namespace picked by label.
const VOLUMES_AND_NAMESPACES: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: caches, labels: {team: blue}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ns}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-db-0, namespace: ns}
spec: {volumeName: pv-1}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-1}
spec:
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: topology.disk.csi.azure.com/zone, operator: In, values: [eastus-2]}
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: ns}
spec:
  containers: [{name: c, resources: {requests: {cpu: 500m}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data-db-0}}]
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {labelSelector: {matchLabels: {app: cache}}, namespaceSelector: {matchLabels: {team: blue}}, topologyKey: topology.kubernetes.io/zone}
status: {conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable}]}
"#;

/// Volume zones and namespace selectors come out the same from both.
#[test]
fn volumes_and_namespaces_agree_with_the_simulator() {
    let mut cluster = Cluster::new();
    apply_all(&mut cluster, VOLUMES_AND_NAMESPACES);
    all_synced(&mut cluster);
    let objects =
        load::load(&[Source::Text { name: "v.yaml".into(), text: VOLUMES_AND_NAMESPACES.into() }]).unwrap();
    let types = Arc::new(Vec::<InstanceType>::new());
    let sim = scenario::build(&objects, "eastus", &Catalog::Fixed(types.clone())).unwrap().input;
    let ours = cluster.snapshot(&|_, _| types.clone(), SolveOptions::default());
    assert_eq!(ours.pods, sim.pods);
    assert_eq!(ours.pods[0].volume_zones, Some(vec!["eastus-2".to_string()]));
    assert_eq!(ours.pods[0].affinity[0].namespaces, ["caches"]);
}
