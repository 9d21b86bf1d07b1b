//! A scenario's objects loaded into the controller's cluster index ([`Cluster`]), so `simulate` takes
//! its solver and disruption input from the snapshots the controller takes ([`Cluster::snapshot`],
//! [`Cluster::disruption_snapshot`]) and the two cannot disagree.
//!
//! A file lacks what the cluster's own controllers would have written on a live object; it is filled
//! in first, as they would have written it:
//! - an unbound pod without a `PodScheduled` condition has not been judged by kube-scheduler yet: it is
//!   marked `Unschedulable`, so provisioning plans for it (and places it on existing room first);
//! - a bound pod without `status.startTime` started at its creation;
//! - a Node labelled `karpenter.sh/nodepool` that no NodeClaim names stands for its own claim: one of
//!   the Node's name, labels, creation time and providerID, launched and registered, and initialized
//!   at the Node's creation when the Node is Ready or labelled `karpenter.sh/initialized`;
//! - a NodeClaim whose `status.nodeName` names a Node of the input is joined to it by providerID (the
//!   Node's, else the claim's, else `simulate:///<node>`), as the index joins them;
//! - a NodeClaim without `status.lastPodEventTime` had its last pod event when the latest pod on its
//!   Node started;
//! - every NodePool that passes validation is `Ready` (files carry no status, and the controller
//!   plans only with Ready pools);
//! - every namespace an object lives in exists.
//!
//! NodeOverlays in the input are applied to every pool's instance types, as the controller applies
//! them with its `NodeOverlay` feature gate on.
//!
//! The index lists by name; [`InputOrder`] puts what a snapshot lists back in the order of the input
//! (a `kubectl get` snapshot lists by name anyway; a hand-written scenario reads, and solves, as
//! written).
//!
//! Objects the index cannot convert are reported as errors naming their file and object, never left
//! out silently. A pod bound to a node not in the input is left out with a warning, as is a NodePool's
//! missing AKSNodeClass (default node-class settings).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::load::{Objects, Sourced};
use super::managed::ManagedError;
use super::scenario::ScenarioError;
use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::validate::{self, ValidationError};
use crate::apis::{NodeClaim, NodePool};
use crate::model::labels::{LABEL_INITIALIZED, LABEL_NODEPOOL};
use crate::model::resources::Resources;
use crate::scheduling::from_k8s::{self, FromK8sError};
use crate::state::records::is_ready;
use crate::state::{key, Cluster, Kind, NodeClaimRecord, NodeRecord, PdbRecord, PodRecord};

/// The scheme of the providerIDs the simulator makes up to join a claim to its Node.
const SIMULATED_PROVIDER: &str = "simulate:///";

/// The objects in the index, with `warnings` receiving what the reader should know.
pub fn load(objects: &Objects, warnings: &mut Vec<String>) -> Result<Cluster, ScenarioError> {
    let mut cluster = Cluster::new();
    for ns in namespaces(objects) {
        cluster.apply(&ns);
    }
    for c in &objects.storage_classes {
        cluster.apply(&c.object);
    }
    for v in &objects.volumes {
        cluster.apply(&v.object);
    }
    for c in &objects.claims {
        cluster.apply(&c.object);
    }
    for c in &objects.nodeclasses {
        cluster.apply(&c.object);
    }
    for p in &objects.nodepools {
        cluster.apply(&ready(&p.object));
    }
    for o in &objects.node_overlays {
        cluster.apply(&o.object);
    }
    let pods = pods(objects);
    let (nodes, claims) = nodes_and_claims(objects, &pods);
    for node in &nodes {
        cluster.apply(node);
    }
    for claim in &claims {
        cluster.apply(claim);
    }
    for d in &objects.daemonsets {
        cluster.apply(&d.object);
    }
    for p in &objects.pdbs {
        cluster.apply(&p.object);
    }
    for pod in &pods {
        cluster.apply(pod);
    }
    for kind in Kind::ALL {
        cluster.mark_synced(kind);
    }
    check(objects, &cluster)?;
    let node_names: BTreeSet<&str> =
        objects.nodes.iter().filter_map(|n| n.object.metadata.name.as_deref()).collect();
    for p in objects.pods.iter().filter(|p| !terminal(&p.object)) {
        if let Some(node) = p.object.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            if !node_names.contains(node) {
                warnings.push(format!(
                    "{}: runs on node {node:?}, which is not in the input; left out",
                    p.display
                ));
            }
        }
    }
    for p in &objects.nodepools {
        let class_name = &p.object.spec.template.spec.node_class_ref.name;
        if cluster.nodeclass(class_name).is_none() {
            warnings.push(format!(
                "{}: AKSNodeClass {class_name:?} is not in the input; using the default node-class settings",
                p.display
            ));
        }
    }
    Ok(cluster)
}

/// Where each Node, NodeClaim and Pod stands in the input.
#[derive(Debug, Default)]
pub struct InputOrder {
    /// Nodes, then NodeClaims (in flight, they stand for nodes).
    nodes: BTreeMap<String, usize>,
    /// By `namespace/name`.
    pods: BTreeMap<String, usize>,
}

impl InputOrder {
    pub fn new(objects: &Objects) -> Self {
        let mut order = Self::default();
        let nodes = objects.nodes.iter().map(|n| &n.object.metadata);
        let claims = objects.nodeclaims.iter().map(|c| &c.object.metadata);
        for (i, meta) in nodes.chain(claims).enumerate() {
            order.nodes.entry(name_key(meta, false)).or_insert(i);
        }
        for (i, p) in objects.pods.iter().enumerate() {
            order.pods.insert(name_key(&p.object.metadata, true), i);
        }
        order
    }

    /// A node's place; after every input object when it is not one.
    pub fn node(&self, name: &str) -> usize {
        self.nodes.get(name).copied().unwrap_or(usize::MAX)
    }

    /// A pod's place; after every input object when it is not one (a workload's pods).
    pub fn pod(&self, pod: &crate::scheduling::Pod) -> usize {
        self.pods.get(&key(Some(&pod.namespace), &pod.name)).copied().unwrap_or(usize::MAX)
    }
}

/// The first object the index set aside or the validation refuses, as an error naming it; in the
/// order nodes, pods, DaemonSets, AKSNodeClasses, NodePools, NodeClaims, PodDisruptionBudgets. The
/// index keeps one error per object; the object is converted again here for an error of our own.
fn check(objects: &Objects, cluster: &Cluster) -> Result<(), ScenarioError> {
    let invalid: BTreeSet<(Kind, &str)> = cluster.invalid().map(|(kind, key, _)| (kind, key)).collect();
    let set_aside = |kind: Kind, meta: &ObjectMeta, namespaced: bool| {
        invalid.contains(&(kind, name_key(meta, namespaced).as_str()))
    };
    fn convert<T>(s: &Sourced<T>, error: FromK8sError) -> ScenarioError {
        ScenarioError::Convert { file: s.file.clone(), object: s.display.clone(), error: Box::new(error) }
    }
    fn refused<T>(s: &Sourced<T>, error: ValidationError) -> ScenarioError {
        ScenarioError::Invalid { file: s.file.clone(), object: s.display.clone(), error: Box::new(error) }
    }
    for n in objects.nodes.iter().filter(|n| set_aside(Kind::Node, &n.object.metadata, false)) {
        NodeRecord::from_k8s(&n.object).map_err(|e| convert(n, e))?;
    }
    // Succeeded and Failed pods are left out before they are read.
    let pods = objects.pods.iter().filter(|p| !terminal(&p.object));
    for p in pods.filter(|p| set_aside(Kind::Pod, &p.object.metadata, true)) {
        PodRecord::from_k8s(&p.object, cluster.pod_context()).map_err(|e| convert(p, e))?;
    }
    for d in objects.daemonsets.iter().filter(|d| set_aside(Kind::DaemonSet, &d.object.metadata, true)) {
        let template = d.object.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
        let (namespace, name) = (d.object.metadata.namespace.as_deref(), d.object.metadata.name.as_deref());
        let (namespace, name) = (namespace.unwrap_or("default"), name.unwrap_or_default());
        from_k8s::template_pods(&template, namespace, "DaemonSet", name, 1, cluster.pod_context())
            .map_err(|e| convert(d, e))?;
    }
    for c in &objects.nodeclasses {
        validate::aksnodeclass(&c.object).map_err(|e| refused(c, e))?;
    }
    for p in &objects.nodepools {
        validate::nodepool(&p.object).map_err(|e| refused(p, e))?;
        if set_aside(Kind::NodePool, &p.object.metadata, false) {
            from_k8s::nodepool(&p.object, &Resources::new(), Arc::default()).map_err(|e| convert(p, e))?;
        }
    }
    for c in objects.nodeclaims.iter().filter(|c| set_aside(Kind::NodeClaim, &c.object.metadata, false)) {
        NodeClaimRecord::from_k8s(&c.object).map_err(|e| managed_error(c, "spec", e))?;
    }
    for p in objects.pdbs.iter().filter(|p| set_aside(Kind::PodDisruptionBudget, &p.object.metadata, true)) {
        PdbRecord::from_k8s(&p.object).map_err(|e| managed_error(p, "spec.selector", e))?;
    }
    Ok(())
}

fn managed_error<T>(s: &Sourced<T>, field: &str, message: impl ToString) -> ManagedError {
    ManagedError {
        file: s.file.clone(),
        object: s.display.clone(),
        field: field.into(),
        message: message.to_string(),
    }
}

/// The index key of an object (`namespace/name`, or `name` when cluster-scoped).
fn name_key(meta: &ObjectMeta, namespaced: bool) -> String {
    let namespace = namespaced.then(|| meta.namespace.as_deref().unwrap_or("default"));
    key(namespace, meta.name.as_deref().unwrap_or_default())
}

fn terminal(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// The input's Namespaces, and one for every other namespace an object lives in.
fn namespaces(objects: &Objects) -> Vec<Namespace> {
    let mut out: Vec<Namespace> = objects.namespaces.iter().map(|n| n.object.clone()).collect();
    let defined: BTreeSet<String> = out.iter().filter_map(|n| n.metadata.name.clone()).collect();
    let used: BTreeSet<String> = objects
        .pods
        .iter()
        .map(|p| &p.object.metadata)
        .chain(objects.deployments.iter().map(|d| &d.object.metadata))
        .chain(objects.replicasets.iter().map(|d| &d.object.metadata))
        .chain(objects.statefulsets.iter().map(|d| &d.object.metadata))
        .chain(objects.jobs.iter().map(|d| &d.object.metadata))
        .chain(objects.daemonsets.iter().map(|d| &d.object.metadata))
        .map(|m| m.namespace.clone().unwrap_or_else(|| "default".into()))
        .filter(|ns| !defined.contains(ns))
        .collect();
    out.extend(used.into_iter().map(|name| Namespace {
        metadata: ObjectMeta { name: Some(name), ..ObjectMeta::default() },
        ..Namespace::default()
    }));
    out
}

/// The NodePool, `Ready`.
fn ready(pool: &NodePool) -> NodePool {
    let mut pool = pool.clone();
    let status = pool.status.get_or_insert_with(Default::default);
    let since = Time(pool.metadata.creation_timestamp.as_ref().map_or(Timestamp::UNIX_EPOCH, |t| t.0));
    conditions::set(
        &mut status.conditions,
        conditions::READY,
        ConditionStatus::True,
        "Ready",
        "",
        None,
        &since,
    );
    pool
}

/// The pods, with the scheduler's verdict on unbound ones and a start time on bound ones.
fn pods(objects: &Objects) -> Vec<Pod> {
    objects
        .pods
        .iter()
        .map(|p| {
            let mut pod = p.object.clone();
            if terminal(&pod) {
                return pod;
            }
            let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
            let created = pod.metadata.creation_timestamp.clone();
            let status = pod.status.get_or_insert_with(Default::default);
            if bound {
                if status.start_time.is_none() {
                    status.start_time = created;
                }
            } else {
                let conditions = status.conditions.get_or_insert_with(Vec::new);
                if !conditions.iter().any(|c| c.type_ == "PodScheduled") {
                    conditions.push(PodCondition {
                        type_: "PodScheduled".into(),
                        status: "False".into(),
                        reason: Some("Unschedulable".into()),
                        ..PodCondition::default()
                    });
                }
            }
            pod
        })
        .collect()
}

/// The Nodes and NodeClaims joined by providerID, with a claim for every managed Node that has none
/// and the claims' last pod events.
fn nodes_and_claims(objects: &Objects, pods: &[Pod]) -> (Vec<Node>, Vec<NodeClaim>) {
    let mut nodes: Vec<Node> = objects.nodes.iter().map(|n| n.object.clone()).collect();
    let mut claims: Vec<NodeClaim> = objects.nodeclaims.iter().map(|c| c.object.clone()).collect();
    let provider_id =
        |n: &Node| n.spec.as_ref().and_then(|s| s.provider_id.clone()).filter(|p| !p.is_empty());
    for node in &mut nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let named = claims
            .iter_mut()
            .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()));
        if let Some(claim) = named {
            let status = claim.status.get_or_insert_with(Default::default);
            let id = provider_id(node)
                .or_else(|| status.provider_id.clone().filter(|p| !p.is_empty()))
                .unwrap_or_else(|| format!("{SIMULATED_PROVIDER}{name}"));
            status.provider_id = Some(id.clone());
            node.spec.get_or_insert_with(Default::default).provider_id = Some(id);
            continue;
        }
        let by_id = provider_id(node).is_some_and(|id| {
            claims.iter().any(|c| c.status.as_ref().and_then(|s| s.provider_id.as_ref()) == Some(&id))
        });
        let labels = node.metadata.labels.clone().unwrap_or_default();
        if by_id || !labels.contains_key(LABEL_NODEPOOL) {
            continue;
        }
        let id = provider_id(node).unwrap_or_else(|| format!("{SIMULATED_PROVIDER}{name}"));
        node.spec.get_or_insert_with(Default::default).provider_id = Some(id.clone());
        claims.extend(own_claim(node, &objects.nodepools, id));
    }
    // The latest start of a live pod on each node.
    let mut last_start: BTreeMap<&str, Timestamp> = BTreeMap::new();
    for pod in pods.iter().filter(|p| !terminal(p)) {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let started = pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
        if let (Some(node), Some(started)) = (node, started) {
            let latest = last_start.entry(node).or_insert(started);
            *latest = (*latest).max(started);
        }
    }
    for claim in &mut claims {
        let status = claim.status.get_or_insert_with(Default::default);
        if status.last_pod_event_time.is_none() {
            let node = status.node_name.as_deref().unwrap_or_default();
            status.last_pod_event_time = last_start.get(node).map(|t| Time(*t));
        }
    }
    (nodes, claims)
}

/// The claim a managed Node without one stands for (see the module documentation).
fn own_claim(node: &Node, pools: &[Sourced<NodePool>], provider_id: String) -> Option<NodeClaim> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let pool = labels
        .get(LABEL_NODEPOOL)
        .and_then(|p| pools.iter().find(|s| s.object.metadata.name.as_deref() == Some(p.as_str())));
    let mut claim = NodeClaim {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(labels.clone()),
            creation_timestamp: node.metadata.creation_timestamp.clone(),
            ..ObjectMeta::default()
        },
        spec: serde_json::from_value(serde_json::json!({
            "nodeClassRef": {"name": pool.map_or("", |p| p.object.spec.template.spec.node_class_ref.name.as_str())},
        }))
        .ok()?,
        status: Some(Default::default()),
    };
    let status = claim.status.get_or_insert_with(Default::default);
    status.node_name = Some(name);
    status.provider_id = Some(provider_id);
    if let Some(created) = &node.metadata.creation_timestamp {
        for type_ in [conditions::LAUNCHED, conditions::REGISTERED] {
            conditions::set(&mut status.conditions, type_, ConditionStatus::True, type_, "", None, created);
        }
        if labels.get(LABEL_INITIALIZED).is_some_and(|v| v == "true") || is_ready(node) {
            let type_ = conditions::INITIALIZED;
            conditions::set(&mut status.conditions, type_, ConditionStatus::True, type_, "", None, created);
        }
    }
    Some(claim)
}
