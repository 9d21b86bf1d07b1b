//! The virtual cluster as the controller's index would see it now ([`objects_at`]): its nodes as Nodes
//! with their NodeClaims, pods with their start times, PDBs with their allowance now. The engine loads
//! these objects as `simulate` loads a file ([`crate::sim::scenario`], [`crate::sim::managed`]), so
//! the timeline's disruption input is the controller's disruption snapshot.
//!
//! Drift here is what the controller detects, by the same functions ([`crate::disruption::drift`]):
//! the NodePool's template hash or the AKSNodeClass's spec hash changed since launch, the node's
//! labels no longer meet the pool's requirements, or its instance type is no longer offered.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeCondition, Pod as K8sPod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::cluster::{node_of, pod_id, NodeRecord, VirtualCluster};
use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::hash;
use crate::apis::nodeclaim::NodeClaimStatus;
use crate::apis::nodepool::NodePool;
use crate::apis::{AKSNodeClass, NodeClaim};
use crate::disruption::drift::{self, ClaimFacts, ClassDrift, PoolDrift};
use crate::disruption::Drifted;
use crate::model::labels::LABEL_INITIALIZED;
use crate::model::requirements::Requirements;
use crate::scheduling::{from_k8s, SolveInput};
use crate::sim::load::{Objects, Sourced};

/// The providerID scheme of the virtual cluster's nodes.
const PROVIDER: &str = "simulate:///";

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

/// Which managed nodes have drifted now, with since when: `drift_since` remembers when each node was
/// first seen drifted (kept by the caller across passes). `input` is the solver input of the moment,
/// for the instance types each pool still offers.
pub fn drifted(
    cluster: &VirtualCluster,
    input: &SolveInput,
    now: Timestamp,
    drift_since: &mut BTreeMap<String, Timestamp>,
) -> BTreeMap<String, Drifted> {
    let inputs = drift_inputs(cluster);
    let mut out = BTreeMap::new();
    for name in cluster.nodes.keys() {
        match drift_reason(cluster, name, input, &inputs, now) {
            Some(reason) => {
                let since = *drift_since.entry(name.clone()).or_insert(now);
                out.insert(name.clone(), Drifted { reason, since });
            }
            None => drop(drift_since.remove(name)),
        }
    }
    out
}

/// The cluster's objects as the API server would hold them now, for the controller's index: each
/// launched or adopted node as a Node and its NodeClaim (launched and registered at launch,
/// initialized and Ready at `ready_at`, `Drifted` per `drifted`, the hash annotations it was stamped
/// with, its last pod event); pods with the `startTime` they were bound at; PDBs with
/// `status.disruptionsAllowed` computed now. A node being disrupted already carries the
/// `karpenter.sh/disrupted` taint.
pub fn objects_at(cluster: &VirtualCluster, now: Timestamp, drifted: &BTreeMap<String, Drifted>) -> Objects {
    let mut objects = cluster.objects.clone();
    for node in &mut objects.nodes {
        let Some(record) = node.object.metadata.name.as_deref().and_then(|n| cluster.nodes.get(n)) else {
            continue;
        };
        let ready = record.ready(now);
        let provider_id = format!("{PROVIDER}{}", record.name);
        let labels = node.object.metadata.labels.get_or_insert_with(BTreeMap::new);
        if ready {
            labels.insert(LABEL_INITIALIZED.into(), "true".into());
        }
        let labels = labels.clone();
        node.object.spec.get_or_insert_with(Default::default).provider_id = Some(provider_id.clone());
        let status = node.object.status.get_or_insert_with(Default::default);
        status.conditions = Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            last_transition_time: Some(Time(if ready { record.ready_at } else { record.launched })),
            ..NodeCondition::default()
        }]);
        if let Some(claim) = claim_of(cluster, record, labels, provider_id, now, drifted.get(&record.name)) {
            objects.nodeclaims.push(Sourced {
                file: node.file.clone(),
                display: format!("NodeClaim/{}", record.nodeclaim),
                object: claim,
            });
        }
    }
    for pod in &mut objects.pods {
        let started = cluster.started.get(&pod_id(&pod.object)).map(|t| Time(*t));
        pod.object.status.get_or_insert_with(Default::default).start_time = started;
    }
    for pdb in &mut objects.pdbs {
        if let Some(allowed) = pdb_now(&pdb.object, cluster, now) {
            pdb.object.status.get_or_insert_with(Default::default).disruptions_allowed = allowed;
        }
    }
    objects
}

/// The NodeClaim behind a node of the cluster.
fn claim_of(
    cluster: &VirtualCluster,
    record: &NodeRecord,
    labels: BTreeMap<String, String>,
    provider_id: String,
    now: Timestamp,
    drifted: Option<&Drifted>,
) -> Option<NodeClaim> {
    let class =
        find_pool(cluster, &record.nodepool).map(|p| p.spec.template.spec.node_class_ref.name.clone());
    let spec =
        serde_json::from_value(serde_json::json!({"nodeClassRef": {"name": class.unwrap_or_default()}}));
    let mut conditions = vec![];
    let mut set = |type_: &str, reason: &str, at: Timestamp| {
        let at = Time(at);
        conditions::set(&mut conditions, type_, ConditionStatus::True, reason, "", None, &at);
    };
    set(conditions::LAUNCHED, conditions::LAUNCHED, record.launched);
    set(conditions::REGISTERED, conditions::REGISTERED, record.launched);
    if record.ready(now) {
        set(conditions::INITIALIZED, conditions::INITIALIZED, record.ready_at);
    }
    if let Some(d) = drifted {
        set(conditions::DRIFTED, &d.reason, d.since);
    }
    Some(NodeClaim {
        metadata: ObjectMeta {
            name: Some(record.nodeclaim.clone()),
            labels: Some(labels),
            annotations: Some(record.annotations.clone()),
            creation_timestamp: Some(Time(record.launched)),
            ..ObjectMeta::default()
        },
        spec: spec.ok()?,
        status: Some(NodeClaimStatus {
            node_name: Some(record.name.clone()),
            provider_id: Some(provider_id),
            conditions,
            last_pod_event_time: Some(Time(record.last_pod_event)),
            ..NodeClaimStatus::default()
        }),
    })
}

/// A PDB's `disruptionsAllowed` as the disruption controller would compute it now: healthy matching
/// pods (bound to a Ready node) minus `minAvailable`, or `maxUnavailable` minus the unhealthy ones;
/// percentages of the matching pods, rounded up as Kubernetes does.
fn pdb_now(pdb: &PodDisruptionBudget, cluster: &VirtualCluster, now: Timestamp) -> Option<i32> {
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
    Some(allowed.max(0))
}
