//! operatorpkg's status-condition metrics (`status/controller.go`) for NodeClaims, NodePools, Nodes,
//! AKSNodeClasses and NodeOverlays, from the index at each refresh (upstream's status controllers
//! reconcile every 10 s). See [`crate::operator::metrics::StatusMetrics`] for the metrics.
//!
//! The gauges are rebuilt per object and condition at each refresh. Transitions are looked for, as
//! upstream's controller does at each reconcile, whenever the watch delivers one of these objects
//! ([`object_observed`]) and at each refresh: a condition seen with a status it did not have when last
//! seen (or seen for the first time) is a transition; when it had another status before, the time
//! between the two `lastTransitionTime`s is how long that status lasted. An object seen deleting and
//! then gone has terminated: from its deletionTimestamp to the refresh that misses it. As upstream says
//! of its own, a change the watch folds into a later one is not seen.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::apis::conditions::{Condition, ConditionStatus};
use crate::disruption::repair::NodeCondition;
use crate::model::LabelLookup;
use crate::operator::metrics::status::{self, Family, Kind};
use crate::operator::metrics::Metrics;
use crate::operator::metrics::RebuiltGauge;
use crate::state::{Cluster, NodeClaimRecord, NodeRecord};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// One condition as seen.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    status: String,
    reason: String,
    since: Option<Timestamp>,
}

/// One object as seen.
#[derive(Clone, Debug, Default)]
struct Object {
    conditions: BTreeMap<String, Seen>,
    /// The values of the kind's extra labels.
    labels: Vec<String>,
    deleted_at: Option<Timestamp>,
}

/// The objects seen at the previous refresh, per kind and name.
#[derive(Debug, Default)]
pub struct StatusTracker {
    seen: BTreeMap<(&'static str, String), Object>,
}

impl StatusTracker {
    /// Forgets the objects the index no longer holds (a standby, which records no terminations).
    pub fn retain(&mut self, cluster: &Cluster) {
        self.seen.retain(|(kind, name), _| {
            status::KINDS.iter().find(|k| k.name == *kind).is_some_and(|k| object(cluster, k, name).is_some())
        });
    }
}

fn status_str(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

fn from_conditions(conditions: &[Condition]) -> BTreeMap<String, Seen> {
    conditions
        .iter()
        .map(|c| {
            let seen = Seen {
                status: status_str(c.status).to_string(),
                reason: c.reason.clone(),
                since: Some(c.last_transition_time.0),
            };
            (c.type_.clone(), seen)
        })
        .collect()
}

fn labels_of(kind: &Kind, labels: &impl LabelLookup) -> Vec<String> {
    kind.labels.iter().map(|key| labels.label(key).unwrap_or_default().to_string()).collect()
}

fn claim_object(claim: &NodeClaimRecord) -> Object {
    Object {
        conditions: from_conditions(&claim.conditions),
        labels: labels_of(&status::NODECLAIM, &claim.labels),
        deleted_at: claim.deleted_at,
    }
}

fn node_object(node: &NodeRecord) -> Object {
    let seen =
        |c: &NodeCondition| Seen { status: c.status.clone(), reason: c.reason.clone(), since: c.since };
    Object {
        conditions: node.conditions.iter().map(|c| (c.type_.clone(), seen(c))).collect(),
        labels: labels_of(&status::NODE, &node.node.labels),
        deleted_at: node.deleted_at,
    }
}

/// A NodePool, AKSNodeClass or NodeOverlay: conditions in `status.conditions`, no extra labels.
fn api_object(conditions: Option<&Vec<Condition>>, meta: &ObjectMeta) -> Object {
    Object {
        conditions: from_conditions(conditions.map(Vec::as_slice).unwrap_or_default()),
        labels: vec![],
        deleted_at: meta.deletion_timestamp.as_ref().map(|t| t.0),
    }
}

/// One object of `kind` as the index holds it now, if it does.
fn object(cluster: &Cluster, kind: &Kind, name: &str) -> Option<Object> {
    match kind.name {
        "nodeclaim" => cluster.nodeclaim(name).map(claim_object),
        "node" => cluster.node(name).map(node_object),
        "nodepool" => {
            cluster.nodepool(name).map(|p| api_object(p.status.as_ref().map(|s| &s.conditions), &p.metadata))
        }
        "aksnodeclass" => {
            cluster.nodeclass(name).map(|c| api_object(c.status.as_ref().map(|s| &s.conditions), &c.metadata))
        }
        _ => cluster
            .node_overlays()
            .find(|o| o.metadata.name.as_deref() == Some(name))
            .map(|o| api_object(o.status.as_ref().map(|s| &s.conditions), &o.metadata)),
    }
}

/// Every object of every kind in the index, as the metrics see it.
fn objects(cluster: &Cluster) -> Vec<(Kind, String, Object)> {
    let mut out = vec![];
    for claim in cluster.nodeclaims() {
        out.push((status::NODECLAIM, claim.name.clone(), claim_object(claim)));
    }
    for pool in cluster.nodepools() {
        let conditions = pool.status.as_ref().map(|s| &s.conditions);
        out.push((status::NODEPOOL, pool.name_any(), api_object(conditions, &pool.metadata)));
    }
    for (node, _) in cluster.nodes() {
        out.push((status::NODE, node.name().to_string(), node_object(node)));
    }
    for class in cluster.nodeclasses() {
        let conditions = class.status.as_ref().map(|s| &s.conditions);
        out.push((status::AKSNODECLASS, class.name_any(), api_object(conditions, &class.metadata)));
    }
    for overlay in cluster.node_overlays() {
        let conditions = overlay.status.as_ref().map(|s| &s.conditions);
        out.push((status::NODEOVERLAY, overlay.name_any(), api_object(conditions, &overlay.metadata)));
    }
    out
}

fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

/// The families an observation of `kind` goes to: the kind's, and the deprecated one where upstream
/// emits it, each with its extra label values.
fn families<'a>(m: &'a Metrics, kind: &Kind, labels: &[String]) -> Vec<(&'a Family, Vec<String>)> {
    let mut out = vec![(&m.status.kinds[kind.name], labels.to_vec())];
    if kind.deprecated {
        out.push((&m.status.deprecated, vec![kind.group.to_string(), kind.kind.to_string()]));
    }
    out
}

fn with<'a>(base: &[&'a str], extra: &'a [String]) -> Vec<&'a str> {
    base.iter().copied().chain(extra.iter().map(String::as_str)).collect()
}

/// The transitions of `object` since it was last seen (recorded when `record`); remembers it.
fn transitions(
    m: &Metrics,
    tracker: &mut StatusTracker,
    kind: Kind,
    name: &str,
    object: Object,
    record: bool,
) {
    let before = tracker.seen.get(&(kind.name, name.to_string()));
    if record {
        for (family, extra) in families(m, &kind, &object.labels) {
            for (type_, c) in &object.conditions {
                let previous = before.and_then(|b| b.conditions.get(type_));
                if previous.is_some_and(|p| p.status == c.status) {
                    continue;
                }
                family.transitions.with_label_values(&with(&[type_, &c.status, &c.reason], &extra)).inc();
                if let Some((p, (from, to))) = previous.and_then(|p| Some((p, (p.since?, c.since?)))) {
                    let labels = with(&[type_, &p.status], &extra);
                    family.transition_seconds.with_label_values(&labels).observe(seconds(from, to));
                }
            }
        }
    }
    tracker.seen.insert((kind.name, name.to_string()), object);
}

/// The watch delivered the object `name` of `kind`: its transitions, recorded when this replica leads
/// (a standby only remembers what it saw).
pub fn object_observed(
    m: &Metrics,
    tracker: &mut StatusTracker,
    cluster: &Cluster,
    kind: Kind,
    name: &str,
    record: bool,
) {
    if let Some(object) = object(cluster, &kind, name) {
        transitions(m, tracker, kind, name, object, record);
    }
}

/// Rebuilds the status gauges and records the transitions and terminations since the last refresh.
pub fn status_conditions(m: &Metrics, cluster: &Cluster, tracker: &mut StatusTracker, now: Timestamp) {
    // Each family's count, current status and termination gauges, rebuilt whole.
    let mut rebuilds: Vec<_> = m
        .status
        .kinds
        .values()
        .chain([&m.status.deprecated])
        .map(|f| (f, [&f.count, &f.current_status, &f.termination_current].map(RebuiltGauge::rebuild)))
        .collect();
    let mut previous = std::mem::take(&mut tracker.seen);
    for (kind, name, object) in objects(cluster) {
        for (family, extra) in families(m, &kind, &object.labels) {
            let Some((_, [count, current_status, termination_current])) =
                rebuilds.iter_mut().find(|(f, _)| std::ptr::eq(*f, family))
            else {
                continue;
            };
            for (type_, c) in &object.conditions {
                let labels = with(&["", &name, type_, &c.status, &c.reason], &extra);
                count.set(&labels, 1.0);
                let current = c.since.map_or(0.0, |since| seconds(since, now));
                current_status.set(&labels, current);
            }
            if let Some(deleted) = object.deleted_at {
                let labels = with(&["", &name], &extra);
                termination_current.set(&labels, seconds(deleted, now));
            }
        }
        let key = (kind.name, name);
        if let Some(before) = previous.remove(&key) {
            tracker.seen.insert(key.clone(), before);
        }
        transitions(m, tracker, kind, &key.1, object, true);
    }
    for rebuilt in rebuilds.into_iter().flat_map(|(_, r)| r) {
        rebuilt.finish();
    }
    // What was seen deleting and is gone now has terminated.
    for ((kind_name, _), gone) in previous {
        let (Some(kind), Some(deleted)) =
            (status::KINDS.iter().find(|k| k.name == kind_name), gone.deleted_at)
        else {
            continue;
        };
        for (family, extra) in families(m, kind, &gone.labels) {
            let labels: Vec<&str> = extra.iter().map(String::as_str).collect();
            family.termination_duration.with_label_values(&labels).observe(seconds(deleted, now));
        }
    }
}
