//! The disruption view of a snapshot: which nodes Karpenter manages and everything the disruption
//! decisions need about them, built from the same objects as the provisioning scenario.
//!
//! - A Node is managed when it carries `karpenter.sh/nodepool`, or a NodeClaim in the input names it
//!   in `status.nodeName`. Its instance type, zone and capacity type come from its labels (the
//!   claim's when the Node lacks them; capacity type on-demand when neither says); its price is that
//!   offering's in its pool's catalog.
//! - Times: created = the NodeClaim's (else the Node's) creationTimestamp; initialized = the claim's
//!   Initialized transition, else the Node's creation when it is labelled `karpenter.sh/initialized`
//!   or Ready; last pod event = the claim's `status.lastPodEventTime`, else the latest start of a pod
//!   on the node.
//! - Drifted = the claim's `Drifted=True` condition (reason and transition time); do-not-disrupt =
//!   `karpenter.sh/do-not-disrupt: "true"` on the Node or the claim; being deleted = a
//!   deletionTimestamp on either.
//! - A NodeClaim without a Node is capacity in flight. Every other Node is unmanaged: a destination
//!   for moved pods, never a candidate.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::jiff::Timestamp;

use super::load::{Objects, Sourced};
use super::scenario::Scenario;
use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::NodeClaim;
use crate::disruption::{
    offering_price, DoNotDisrupt, Drifted, ManagedNode, NodePod, Pdb, PodKind, PoolPolicy, Snapshot,
    UnmanagedNode,
};
use crate::model::labels::{
    ANNOTATION_DO_NOT_DISRUPT, LABEL_CAPACITY_TYPE, LABEL_INITIALIZED, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL,
    LABEL_ZONE,
};
use crate::model::CapacityType;
use crate::scheduling::Pod;
use crate::state::records::{is_ready, NodeClaimRecord, PdbRecord, ANNOTATION_MIRROR_POD};

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
    let input = &scenario.input;
    let mut claims: BTreeMap<String, (&Sourced<NodeClaim>, NodeClaimRecord)> = BTreeMap::new();
    let mut in_flight = vec![];
    for c in &objects.nodeclaims {
        let record = NodeClaimRecord::from_k8s(&c.object).map_err(|e| error(c, "spec", e))?;
        match &record.node_name {
            Some(node) if objects.nodes.iter().any(|n| n.object.metadata.name.as_deref() == Some(node)) => {
                claims.insert(node.clone(), (c, record));
            }
            _ => in_flight.push((c, record)),
        }
    }
    let pod_objects: BTreeMap<(String, String), &Sourced<core::Pod>> = objects
        .pods
        .iter()
        .map(|p| {
            let meta = &p.object.metadata;
            (
                (
                    meta.namespace.clone().unwrap_or_else(|| "default".into()),
                    meta.name.clone().unwrap_or_default(),
                ),
                p,
            )
        })
        .collect();
    let mut nodepools = vec![];
    for p in &objects.nodepools {
        let name = p.object.metadata.name.clone().unwrap_or_default();
        let solver = input.nodepools.iter().find(|s| s.name == name).cloned();
        nodepools
            .push(PoolPolicy::from_nodepool(&p.object, solver).map_err(|e| error(p, &e.field, e.message))?);
    }
    nodepools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut snapshot = Snapshot {
        pending: input.pods.clone(),
        daemonsets: input.daemonsets.clone(),
        solve_options: input.options.clone(),
        ..Snapshot::default()
    };
    for pdb in &objects.pdbs {
        let r = PdbRecord::from_k8s(&pdb.object).map_err(|e| error(pdb, "spec.selector", e))?;
        snapshot.pdbs.push(Pdb {
            namespace: r.namespace,
            name: r.name,
            selector: r.selector,
            disruptions_allowed: r.disruptions_allowed,
        });
    }
    for (n, existing) in objects.nodes.iter().zip(&input.nodes) {
        let pods: Vec<&Pod> =
            input.running.iter().filter(|p| p.node_name.as_deref() == Some(existing.name.as_str())).collect();
        let claim = claims.get(&existing.name);
        let labels = n.object.metadata.labels.clone().unwrap_or_default();
        let pool =
            labels.get(LABEL_NODEPOOL).cloned().or_else(|| claim.and_then(|(_, r)| r.nodepool.clone()));
        let Some(pool) = pool else {
            snapshot
                .unmanaged
                .push(UnmanagedNode { node: existing.clone(), pods: pods.into_iter().cloned().collect() });
            continue;
        };
        let label =
            |key: &str| labels.get(key).or_else(|| claim.and_then(|(_, r)| r.labels.get(key))).cloned();
        let instance_type = label(LABEL_INSTANCE_TYPE).unwrap_or_default();
        let zone = label(LABEL_ZONE).unwrap_or_default();
        let capacity_type = if label(LABEL_CAPACITY_TYPE).as_deref() == Some("spot") {
            CapacityType::Spot
        } else {
            CapacityType::OnDemand
        };
        let price = offering_price(&nodepools, &pool, &instance_type, &zone, capacity_type);
        if price.is_none() {
            warnings.push(format!(
                "{}: no price for {instance_type:?} ({}, {zone}) in NodePool {pool:?}; counted at 0 $/h",
                n.display,
                capacity_type.as_str()
            ));
        }
        let node_meta = &n.object.metadata;
        let claim_meta = claim.map(|(c, _)| &c.object.metadata);
        let claim_status = claim.and_then(|(c, _)| c.object.status.as_ref());
        let node_created = node_meta.creation_timestamp.as_ref().map(|t| t.0);
        let created = claim_meta.and_then(|m| m.creation_timestamp.as_ref()).map(|t| t.0).or(node_created);
        let claim_condition = |type_: &str| {
            claim_status
                .and_then(|s| conditions::get(&s.conditions, type_))
                .filter(|c| c.status == ConditionStatus::True)
        };
        let node_initialized =
            labels.get(LABEL_INITIALIZED).is_some_and(|v| v == "true") || is_ready(&n.object);
        let initialized = claim_condition(conditions::INITIALIZED)
            .map(|c| c.last_transition_time.0)
            .or(if node_initialized { node_created.or(created) } else { None });
        let mut node_pods = vec![];
        for pod in &pods {
            let source = pod_objects.get(&(pod.namespace.clone(), pod.name.clone())).copied();
            node_pods.push(node_pod(pod, source)?);
        }
        let last_pod_event = claim_status
            .and_then(|s| s.last_pod_event_time.as_ref())
            .map(|t| t.0)
            .or_else(|| node_pods.iter().filter_map(|p| p.started).max());
        let annotated = |annotations: Option<&BTreeMap<String, String>>| {
            annotations.and_then(|a| a.get(ANNOTATION_DO_NOT_DISRUPT)).is_some_and(|v| v == "true")
        };
        let disrupted_taint = existing.taints.iter().any(|t| t.key == "karpenter.sh/disrupted");
        snapshot.nodes.push(ManagedNode {
            node: existing.clone(),
            nodeclaim: claim.map_or_else(|| existing.name.clone(), |(_, r)| r.name.clone()),
            nodepool: pool,
            instance_type,
            zone,
            capacity_type,
            price_per_hour: price.unwrap_or(0.0),
            created: created.unwrap_or(Timestamp::UNIX_EPOCH),
            initialized,
            last_pod_event,
            drifted: claim_condition(conditions::DRIFTED)
                .map(|c| Drifted { reason: c.reason.clone(), since: c.last_transition_time.0 }),
            do_not_disrupt: annotated(node_meta.annotations.as_ref())
                || annotated(claim_meta.and_then(|m| m.annotations.as_ref())),
            nominated: false,
            marked_for_deletion: node_meta.deletion_timestamp.is_some()
                || claim_meta.is_some_and(|m| m.deletion_timestamp.is_some())
                || disrupted_taint,
            ready: is_ready(&n.object),
            pods: node_pods,
        });
    }
    for (c, record) in in_flight {
        let Some(pool) = record.nodepool.clone() else {
            warnings.push(format!("{}: has no karpenter.sh/nodepool label; left out", c.display));
            continue;
        };
        let label = |key: &str| record.labels.get(key).cloned().unwrap_or_default();
        let capacity_type =
            if label(LABEL_CAPACITY_TYPE) == "spot" { CapacityType::Spot } else { CapacityType::OnDemand };
        let (instance_type, zone) = (label(LABEL_INSTANCE_TYPE), label(LABEL_ZONE));
        snapshot.nodes.push(ManagedNode {
            node: record.in_flight_node(),
            nodeclaim: record.name.clone(),
            price_per_hour: offering_price(&nodepools, &pool, &instance_type, &zone, capacity_type)
                .unwrap_or(0.0),
            nodepool: pool,
            instance_type,
            zone,
            capacity_type,
            created: record.created.as_ref().map_or(Timestamp::UNIX_EPOCH, |t| t.0),
            initialized: None,
            last_pod_event: None,
            drifted: None,
            do_not_disrupt: false,
            nominated: false,
            marked_for_deletion: record.deleting,
            ready: false,
            pods: vec![],
        });
    }
    snapshot.nodepools = nodepools;
    Ok(snapshot)
}

/// A running pod with its disruption attributes from its manifest (defaults when the pod came from a
/// workload expansion and has no manifest).
pub(crate) fn node_pod(pod: &Pod, source: Option<&Sourced<core::Pod>>) -> Result<NodePod, ManagedError> {
    let mut out = NodePod {
        pod: pod.clone(),
        priority: 0,
        deletion_cost: 0,
        do_not_disrupt: DoNotDisrupt::No,
        started: None,
        kind: if pod.owner.as_deref().is_some_and(|o| o.starts_with("DaemonSet/")) {
            PodKind::DaemonSet
        } else {
            PodKind::Workload
        },
    };
    let Some(s) = source else { return Ok(out) };
    let meta = &s.object.metadata;
    let annotations = meta.annotations.clone().unwrap_or_default();
    if annotations.contains_key(ANNOTATION_MIRROR_POD) {
        out.kind = PodKind::Mirror;
    }
    out.priority = s.object.spec.as_ref().and_then(|spec| spec.priority).unwrap_or(0);
    if let Some(cost) = annotations.get(ANNOTATION_POD_DELETION_COST) {
        out.deletion_cost = cost.parse().map_err(|_| {
            error(
                s,
                &format!("metadata.annotations[{ANNOTATION_POD_DELETION_COST}]"),
                format!("{cost:?} is not a 32-bit integer; write a whole number such as 100"),
            )
        })?;
    }
    out.do_not_disrupt =
        DoNotDisrupt::from_annotation(annotations.get(ANNOTATION_DO_NOT_DISRUPT).map(String::as_str))
            .map_err(|e| error(s, &format!("metadata.annotations[{ANNOTATION_DO_NOT_DISRUPT}]"), e))?;
    out.started = s
        .object
        .status
        .as_ref()
        .and_then(|st| st.start_time.as_ref())
        .or(meta.creation_timestamp.as_ref())
        .map(|t| t.0);
    Ok(out)
}
