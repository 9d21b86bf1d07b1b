//! The virtual cluster as disruption sees it: a [`disruption::Snapshot`] built the way the controller
//! builds one from its index — managed nodes with their NodeClaim, offering, price, lifecycle times,
//! drift and pods; the NodePools' policies with their solver pools; PDBs with their allowance now.
//!
//! Drift here is what the controller detects, by the same functions ([`crate::disruption::drift`]):
//! the NodePool's template hash or the AKSNodeClass's spec hash changed since launch, the node's
//! labels no longer meet the pool's requirements, or its instance type is no longer offered.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod as K8sPod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::cluster::{node_of, pod_id, VirtualCluster};
use crate::apis::hash;
use crate::apis::nodepool::NodePool;
use crate::apis::AKSNodeClass;
use crate::disruption::drift::{self, ClaimFacts, ClassDrift, PoolDrift};
use crate::disruption::{Drifted, ManagedNode, Pdb, PoolPolicy, Snapshot, UnmanagedNode};
use crate::model::requirements::Requirements;
use crate::scheduling::{from_k8s, Pod, SolveInput};
use crate::sim::load::Sourced;
use crate::sim::managed::{self, ManagedError};

/// The hash annotations a node's NodeClaim is stamped with at launch, as the controller stamps them
/// ([`hash::annotations`]); empty when the pool is gone or cannot be hashed.
pub fn launch_hashes(cluster: &VirtualCluster, nodepool: &str) -> BTreeMap<String, String> {
    let Some(pool) = find_pool(cluster, nodepool) else { return BTreeMap::new() };
    hash::annotations(pool, find_class(cluster, pool)).unwrap_or_default()
}

fn find_pool<'a>(cluster: &'a VirtualCluster, name: &str) -> Option<&'a NodePool> {
    cluster
        .objects
        .nodepools
        .iter()
        .find(|p| p.object.metadata.name.as_deref() == Some(name))
        .map(|p| &p.object)
}

fn find_class<'a>(cluster: &'a VirtualCluster, pool: &NodePool) -> Option<&'a AKSNodeClass> {
    let name = &pool.spec.template.spec.node_class_ref.name;
    cluster
        .objects
        .nodeclasses
        .iter()
        .find(|c| c.object.metadata.name.as_deref() == Some(name.as_str()))
        .map(|c| &c.object)
}

/// What each NodePool's nodes are judged against now: the pool's and its class's drift inputs.
type DriftInputs = BTreeMap<String, (PoolDrift, Option<ClassDrift>)>;

fn drift_inputs(cluster: &VirtualCluster) -> DriftInputs {
    cluster
        .objects
        .nodepools
        .iter()
        .filter_map(|p| {
            let pool = PoolDrift::new(&p.object).ok()?;
            let class = find_class(cluster, &p.object).and_then(|c| ClassDrift::new(c).ok());
            Some((p.object.metadata.name.clone().unwrap_or_default(), (pool, class)))
        })
        .collect()
}

/// Why a node has drifted now, if it has, by the controller's rules ([`drift::drift_reason`]). A
/// node whose NodePool is gone is reported as `NodePoolDeleted`: the cluster would delete its
/// NodeClaim through the owner reference, which the timeline models as a replacement.
fn drift_reason(
    cluster: &VirtualCluster,
    node: &str,
    input: &SolveInput,
    inputs: &DriftInputs,
    now: Timestamp,
) -> Option<String> {
    let record = cluster.nodes.get(node)?;
    let Some(solver_pool) = input.nodepools.iter().find(|p| p.name == record.nodepool) else {
        return find_pool(cluster, &record.nodepool).is_none().then(|| "NodePoolDeleted".to_string());
    };
    let (pool, class) = inputs.get(&record.nodepool)?;
    let labels = cluster
        .objects
        .nodes
        .iter()
        .find(|n| n.object.metadata.name.as_deref() == Some(node))
        .and_then(|n| n.object.metadata.labels.clone())
        .unwrap_or_default();
    let claim = ClaimFacts {
        annotations: &record.annotations,
        labels: &labels,
        created: Some(record.launched),
        image_id: None,
    };
    // Virtual nodes have no kubelet version or image: the provider's version and image checks skip.
    drift::drift_reason(&claim, pool, class.as_ref(), None, Some(&solver_pool.instance_types), now)
        .map(|r| r.as_str().to_string())
}

/// Builds the snapshot from the cluster and the solver input of the same moment. `drift_since`
/// remembers when each node was first seen drifted (kept by the caller across passes). Pods'
/// disruption attributes are read as `simulate` reads them ([`managed::node_pod`]); a pod started
/// when the timeline bound it.
pub fn build(
    cluster: &VirtualCluster,
    input: &SolveInput,
    now: Timestamp,
    drift_since: &mut BTreeMap<String, Timestamp>,
) -> Result<Snapshot, ManagedError> {
    let k8s_pods: BTreeMap<String, &Sourced<K8sPod>> =
        cluster.objects.pods.iter().map(|p| (pod_id(&p.object), p)).collect();
    let mut on_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for pod in &input.running {
        if let Some(node) = pod.node_name.as_deref() {
            on_node.entry(node).or_default().push(pod);
        }
    }
    let mut snapshot = Snapshot {
        pending: input.pods.clone(),
        daemonsets: input.daemonsets.clone(),
        solve_options: input.options.clone(),
        ..Snapshot::default()
    };
    let inputs = drift_inputs(cluster);
    for node in &input.nodes {
        let pods_here = on_node.get(node.name.as_str()).cloned().unwrap_or_default();
        let Some(record) = cluster.nodes.get(&node.name) else {
            snapshot
                .unmanaged
                .push(UnmanagedNode { node: node.clone(), pods: pods_here.into_iter().cloned().collect() });
            continue;
        };
        let drifted = match drift_reason(cluster, &node.name, input, &inputs, now) {
            Some(reason) => {
                let since = *drift_since.entry(node.name.clone()).or_insert(now);
                Some(Drifted { reason, since })
            }
            None => {
                drift_since.remove(&node.name);
                None
            }
        };
        let mut pods = vec![];
        for pod in pods_here {
            let mut node_pod = managed::node_pod(pod, k8s_pods.get(&pod.id()).copied())?;
            node_pod.started = cluster.started.get(&pod.id()).copied();
            pods.push(node_pod);
        }
        snapshot.nodes.push(ManagedNode {
            node: node.clone(),
            nodeclaim: record.nodeclaim.clone(),
            nodepool: record.nodepool.clone(),
            instance_type: record.instance_type.clone(),
            zone: record.zone.clone(),
            capacity_type: record.capacity_type,
            price_per_hour: record.price_per_hour,
            created: record.launched,
            initialized: record.ready(now).then_some(record.ready_at),
            last_pod_event: Some(record.last_pod_event),
            drifted,
            do_not_disrupt: false,
            nominated: false,
            marked_for_deletion: record.disrupting,
            ready: record.ready(now),
            pods,
        });
    }
    for pool in &cluster.objects.nodepools {
        let name = pool.object.metadata.name.clone().unwrap_or_default();
        let solver = input.nodepools.iter().find(|p| p.name == name).cloned();
        // A pool whose policy cannot be read leaves its nodes blocked as of an unknown pool.
        if let Ok(policy) = PoolPolicy::from_nodepool(&pool.object, solver) {
            snapshot.nodepools.push(policy);
        }
    }
    for pdb in &cluster.objects.pdbs {
        if let Some(p) = pdb_now(&pdb.object, cluster, now) {
            snapshot.pdbs.push(p);
        }
    }
    Ok(snapshot)
}

/// A PDB with `disruptionsAllowed` as the disruption controller would compute it now: healthy
/// matching pods (bound to a Ready node) minus `minAvailable`, or `maxUnavailable` minus the
/// unhealthy ones; percentages of the matching pods, rounded up as Kubernetes does.
fn pdb_now(pdb: &PodDisruptionBudget, cluster: &VirtualCluster, now: Timestamp) -> Option<Pdb> {
    let spec = pdb.spec.as_ref()?;
    let namespace = pdb.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let selector = spec.selector.as_ref().and_then(|s| from_k8s::label_selector("spec.selector", s).ok());
    let matching: Vec<&K8sPod> = cluster
        .objects
        .pods
        .iter()
        .map(|p| &p.object)
        .filter(|p| p.metadata.namespace.as_deref().unwrap_or("default") == namespace)
        .filter(|p| {
            let labels = p.metadata.labels.clone().unwrap_or_default();
            selector.as_ref().is_some_and(|s: &Requirements| s.matches(&labels))
        })
        .collect();
    let expected = matching.len() as i32;
    let healthy = matching
        .iter()
        .filter(|p| {
            node_of(p).and_then(|n| cluster.nodes.get(n)).map_or(node_of(p).is_some(), |r| r.ready(now))
        })
        .count() as i32;
    let resolve = |v: &IntOrString| match v {
        IntOrString::Int(i) => *i,
        IntOrString::String(s) => {
            let pct: i32 = s.trim_end_matches('%').parse().unwrap_or(0);
            (expected * pct + 99) / 100
        }
    };
    let allowed = if let Some(min) = &spec.min_available {
        healthy - resolve(min)
    } else if let Some(max) = &spec.max_unavailable {
        resolve(max) - (expected - healthy)
    } else {
        0
    };
    Some(Pdb {
        namespace,
        name: pdb.metadata.name.clone().unwrap_or_default(),
        selector,
        disruptions_allowed: allowed.max(0),
    })
}
