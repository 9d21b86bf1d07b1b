//! The disruption view of a scenario: the controller's disruption snapshot of the scenario's index
//! ([`crate::state::Cluster::disruption_snapshot`]; which nodes are managed, their offering, price,
//! lifecycle times, drift, do-not-disrupt and pods are the index's rules), with what only `simulate`
//! does on top:
//! - the pods of workloads without pods in the input are pending here too;
//! - a NodePool whose disruption settings cannot be read, and a bound pod whose
//!   `karpenter.sh/do-not-disrupt` or `controller.kubernetes.io/pod-deletion-cost` cannot be read,
//!   are errors naming the file and field (the controller leaves the pool out and reads such a pod's
//!   values as absent);
//! - a managed node whose offering has no price in its pool's catalog, and a NodeClaim without a
//!   `karpenter.sh/nodepool` label, are warnings.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use super::index::InputOrder;
use super::load::{Objects, Sourced};
use super::scenario::Scenario;
use crate::disruption::{offering_price, DoNotDisrupt, Snapshot};
use crate::model::labels::ANNOTATION_DO_NOT_DISRUPT;

/// `controller.kubernetes.io/pod-deletion-cost`: the ReplicaSet controller's scale-down order, which
/// upstream Karpenter also reads as the cost of evicting the pod.
pub use crate::model::labels::ANNOTATION_POD_DELETION_COST;

/// An object whose disruption attributes cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {object}: {field}: {message}")]
pub struct ManagedError {
    pub file: String,
    pub object: String,
    pub field: String,
    pub message: String,
}

impl ManagedError {
    pub fn category(&self) -> &'static str {
        "InvalidDisruptionInput"
    }
}

fn error<T>(s: &Sourced<T>, field: &str, message: impl ToString) -> ManagedError {
    ManagedError {
        file: s.file.clone(),
        object: s.display.clone(),
        field: field.into(),
        message: message.to_string(),
    }
}

/// Builds the disruption snapshot; `warnings` receives what the reader should know.
pub fn snapshot(
    objects: &Objects,
    scenario: &Scenario,
    warnings: &mut Vec<String>,
) -> Result<Snapshot, ManagedError> {
    let none = BTreeSet::new();
    let options = scenario.input.options.clone();
    let (mut snapshot, errors) =
        scenario.cluster.disruption_snapshot(&scenario.catalog(), options, &none, &none);
    if let Some(e) = errors.into_iter().next() {
        let source = objects.nodepools.iter().find(|p| p.object.metadata.name.as_deref() == Some(&e.pool));
        return Err(ManagedError {
            file: source.map(|p| p.file.clone()).unwrap_or_default(),
            object: source.map_or_else(|| format!("NodePool/{}", e.pool), |p| p.display.clone()),
            field: e.field,
            message: e.message,
        });
    }
    snapshot.pending.extend(scenario.expanded.iter().cloned().map(Arc::new));
    let order = InputOrder::new(objects);
    snapshot.nodes.sort_by_key(|n| order.node(&n.node.name));
    snapshot.unmanaged.sort_by_key(|n| order.node(&n.node.name));
    snapshot.pending.sort_by_key(|p| order.pod(p));
    for n in &mut snapshot.nodes {
        n.pods.sort_by_key(|p| order.pod(&p.pod));
    }
    for n in &mut snapshot.unmanaged {
        n.pods.sort_by_key(|p| order.pod(p));
    }
    let pod_objects: BTreeMap<(&str, &str), &Sourced<core::Pod>> = objects
        .pods
        .iter()
        .map(|p| {
            let meta = &p.object.metadata;
            let namespace = meta.namespace.as_deref().unwrap_or("default");
            ((namespace, meta.name.as_deref().unwrap_or_default()), p)
        })
        .collect();
    for node in &snapshot.nodes {
        for p in &node.pods {
            let source = pod_objects.get(&(p.pod.namespace.as_str(), p.pod.name.as_str()));
            if let Some(source) = source {
                check_pod(source)?;
            }
        }
    }
    for n in snapshot.nodes.iter().filter(|n| !n.node.in_flight) {
        let price =
            offering_price(&snapshot.nodepools, &n.nodepool, &n.instance_type, &n.zone, n.capacity_type);
        if price.is_none() {
            warnings.push(format!(
                "Node/{}: no price for {:?} ({}, {}) in NodePool {:?}; counted at 0 $/h",
                n.node.name,
                n.instance_type,
                n.capacity_type.as_str(),
                n.zone,
                n.nodepool
            ));
        }
    }
    for c in &objects.nodeclaims {
        let name = c.object.metadata.name.as_deref().unwrap_or_default();
        let cluster = &scenario.cluster;
        if cluster.nodeclaim(name).is_some_and(|r| r.nodepool.is_none() && cluster.node_of(r).is_none()) {
            warnings.push(format!("{}: has no karpenter.sh/nodepool label; left out", c.display));
        }
    }
    Ok(snapshot)
}

/// A bound pod's disruption annotations can be read.
fn check_pod(s: &Sourced<core::Pod>) -> Result<(), ManagedError> {
    let annotations = s.object.metadata.annotations.clone().unwrap_or_default();
    if let Some(cost) = annotations.get(ANNOTATION_POD_DELETION_COST) {
        cost.parse::<i32>().map_err(|_| {
            error(
                s,
                &format!("metadata.annotations[{ANNOTATION_POD_DELETION_COST}]"),
                format!("{cost:?} is not a 32-bit integer; write a whole number such as 100"),
            )
        })?;
    }
    DoNotDisrupt::from_annotation(annotations.get(ANNOTATION_DO_NOT_DISRUPT).map(String::as_str))
        .map_err(|e| error(s, &format!("metadata.annotations[{ANNOTATION_DO_NOT_DISRUPT}]"), e))?;
    Ok(())
}
