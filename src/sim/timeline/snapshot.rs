//! The virtual cluster as disruption sees it: a [`disruption::Snapshot`] built the way the controller
//! builds one from its index — managed nodes with their NodeClaim, offering, price, lifecycle times,
//! drift and pods; the NodePools' policies with their solver pools; PDBs with their allowance now.
//!
//! Drift here is what the controller detects (upstream `pkg/controllers/nodeclaim/disruption/drift.go`):
//! the NodePool's template hash or the AKSNodeClass's spec hash changed since launch, or the node's
//! labels no longer meet the pool's requirements.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod as K8sPod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::cluster::{hash_of, node_of, pod_id, VirtualCluster};
use crate::apis::duration::{parse_nillable, NillableDuration};
use crate::apis::nodepool::NodePool;
use crate::disruption::{
    Budget, DoNotDisrupt, Drifted, ManagedNode, NodePod, Pdb, PodKind, PoolPolicy, Snapshot, UnmanagedNode,
};
use crate::model::requirements::Requirements;
use crate::scheduling::{from_k8s, Pod, SolveInput};

/// Annotation a pod or node carries to opt out of voluntary disruption (upstream `karpenter.sh/do-not-disrupt`).
const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// Annotation that orders pods for eviction (lower first).
const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The hashes a node is stamped with at launch: the NodePool's template without its requirements
/// (requirements drift is judged on labels), and the AKSNodeClass's spec without tags (tags change in
/// place on the VM, as upstream).
pub fn launch_hashes(cluster: &VirtualCluster, nodepool: &str) -> (u64, u64) {
    let Some(pool) = find_pool(cluster, nodepool) else { return (0, 0) };
    let mut template = pool.spec.template.clone();
    template.spec.requirements.clear();
    let class_name = &pool.spec.template.spec.node_class_ref.name;
    let class_hash = cluster
        .objects
        .nodeclasses
        .iter()
        .find(|c| c.object.metadata.name.as_deref() == Some(class_name.as_str()))
        .map(|c| {
            let mut spec = c.object.spec.clone();
            spec.tags.clear();
            hash_of(&spec)
        })
        .unwrap_or(0);
    (hash_of(&template), class_hash)
}

fn find_pool<'a>(cluster: &'a VirtualCluster, name: &str) -> Option<&'a NodePool> {
    cluster
        .objects
        .nodepools
        .iter()
        .find(|p| p.object.metadata.name.as_deref() == Some(name))
        .map(|p| &p.object)
}

/// Why a node has drifted now, if it has; `hashes` are each pool's current [`launch_hashes`].
fn drift_reason(
    cluster: &VirtualCluster,
    node: &str,
    input: &SolveInput,
    hashes: &BTreeMap<String, (u64, u64)>,
) -> Option<&'static str> {
    let record = cluster.nodes.get(node)?;
    let Some(pool) = input.nodepools.iter().find(|p| p.name == record.nodepool) else {
        return find_pool(cluster, &record.nodepool).is_none().then_some("NodePoolDeleted");
    };
    let (pool_hash, class_hash) = hashes.get(&record.nodepool).copied().unwrap_or_default();
    if pool_hash != record.nodepool_hash {
        return Some("NodePoolDrifted");
    }
    if class_hash != record.nodeclass_hash {
        return Some("NodeClassDrifted");
    }
    let labels = cluster
        .objects
        .nodes
        .iter()
        .find(|n| n.object.metadata.name.as_deref() == Some(node))
        .and_then(|n| n.object.metadata.labels.clone())
        .unwrap_or_default();
    if !pool.requirements.matches(&labels) {
        return Some("RequirementsDrifted");
    }
    if !pool.instance_types.iter().any(|t| t.name == record.instance_type) {
        return Some("InstanceTypeNotFound");
    }
    None
}

/// Builds the snapshot from the cluster and the solver input of the same moment. `drift_since`
/// remembers when each node was first seen drifted (kept by the caller across passes).
pub fn build(
    cluster: &VirtualCluster,
    input: &SolveInput,
    now: Timestamp,
    drift_since: &mut BTreeMap<String, Timestamp>,
) -> Snapshot {
    let k8s_pods: BTreeMap<String, &K8sPod> =
        cluster.objects.pods.iter().map(|p| (pod_id(&p.object), &p.object)).collect();
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
    let hashes: BTreeMap<String, (u64, u64)> = cluster
        .objects
        .nodepools
        .iter()
        .filter_map(|p| p.object.metadata.name.clone())
        .map(|name| {
            let h = launch_hashes(cluster, &name);
            (name, h)
        })
        .collect();
    for node in &input.nodes {
        let pods_here = on_node.get(node.name.as_str()).cloned().unwrap_or_default();
        let Some(record) = cluster.nodes.get(&node.name) else {
            snapshot
                .unmanaged
                .push(UnmanagedNode { node: node.clone(), pods: pods_here.into_iter().cloned().collect() });
            continue;
        };
        let drifted = match drift_reason(cluster, &node.name, input, &hashes) {
            Some(reason) => {
                let since = *drift_since.entry(node.name.clone()).or_insert(now);
                Some(Drifted { reason: reason.to_string(), since })
            }
            None => {
                drift_since.remove(&node.name);
                None
            }
        };
        let pods = pods_here
            .into_iter()
            .map(|pod| {
                let k8s = k8s_pods.get(&pod.id()).copied();
                node_pod(pod, k8s, cluster.started.get(&pod.id()).copied())
            })
            .collect();
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
        snapshot
            .nodepools
            .push(policy(&pool.object, input.nodepools.iter().find(|p| p.name == name).cloned()));
    }
    for pdb in &cluster.objects.pdbs {
        if let Some(p) = pdb_now(&pdb.object, cluster, now) {
            snapshot.pdbs.push(p);
        }
    }
    snapshot
}

fn node_pod(pod: &Pod, k8s: Option<&K8sPod>, started: Option<Timestamp>) -> NodePod {
    let annotations = k8s.and_then(|p| p.metadata.annotations.clone()).unwrap_or_default();
    // The API server has already refused values that are not durations or "true" in a real
    // cluster; a scenario's bad value protects the pod rather than being ignored.
    let do_not_disrupt = DoNotDisrupt::from_annotation(annotations.get(DO_NOT_DISRUPT).map(String::as_str))
        .unwrap_or(DoNotDisrupt::Always);
    NodePod {
        pod: pod.clone(),
        priority: k8s.and_then(|p| p.spec.as_ref()?.priority).unwrap_or(0),
        deletion_cost: annotations.get(DELETION_COST).and_then(|c| c.parse().ok()).unwrap_or(0),
        do_not_disrupt,
        started,
        kind: PodKind::Workload,
    }
}

/// A NodePool's disruption policy. Values the API server would have refused fall back to upstream's
/// defaults (the scenario's objects were already validated when loaded).
fn policy(pool: &NodePool, solver: Option<crate::scheduling::NodePoolInput>) -> PoolPolicy {
    let disruption = &pool.spec.disruption;
    PoolPolicy {
        name: pool.metadata.name.clone().unwrap_or_default(),
        consolidation_policy: disruption.consolidation_policy,
        consolidate_after: parse_nillable(&disruption.consolidate_after)
            .unwrap_or(NillableDuration::After(std::time::Duration::ZERO)),
        expire_after: parse_nillable(&pool.spec.template.spec.expire_after)
            .unwrap_or(NillableDuration::Never),
        budgets: Budget::parse_all(&disruption.budgets).unwrap_or_default(),
        limits: pool.spec.limits.as_ref().and_then(|limits| {
            let text: BTreeMap<String, String> =
                limits.iter().map(|(k, v)| (k.clone(), v.as_str().to_string())).collect();
            crate::model::resources::Resources::parse(&text).ok()
        }),
        solver,
    }
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
