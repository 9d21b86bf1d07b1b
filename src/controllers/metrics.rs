//! The controllers' side of the metrics ([`crate::operator::metrics`] defines them):
//!
//! - [`refresh`]: the gauges that describe the cluster (nodes' allocatable, NodePool usage and limits,
//!   pod states, node count, synced), recomputed from the index just before each scrape, so they are
//!   never staler than the index and cost nothing between scrapes;
//! - the labels of NodeClaims, Nodes and plans for the counters the controllers record;
//! - [`Probes`] for the metrics and health servers: ready once every watch has listed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::Shared;
use crate::apis::duration;
use crate::apis::NodeClaim;
use crate::cloud::CloudProvider;
use crate::model::labels::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_OS, LABEL_ZONE,
};
use crate::model::resources::{parse_resource_quantity, Resources, CPU};
use crate::operator::metrics::Metrics;
use crate::operator::server::Probes;
use crate::scheduling::Plan;
use crate::state::{Cluster, NotSynced, PodPhase};

pub use crate::operator::metrics::get;

/// Upstream core `metrics.TerminationModeGraceful` etc., the `termination_mode` of a disrupted claim.
const TERMINATION_GRACEFUL: &str = "graceful";
const TERMINATION_EVENTUAL: &str = "eventual";
const TERMINATION_FORCEFUL: &str = "forceful";

impl<C: CloudProvider + 'static> Probes for Shared<C> {
    fn ready(&self) -> Result<(), String> {
        readiness(&self.cluster())?;
        self.watch_health.ready(tokio::time::Instant::now())
    }

    fn live(&self) -> Result<(), String> {
        self.supervisor.health(tokio::time::Instant::now())?;
        match self.cloud.credentials_failing() {
            Some((failing, why)) if failing > self.settings.credential_restart_after => {
                Err(format!("Azure credentials failing for {} s: {why}", failing.as_secs()))
            }
            _ => Ok(()),
        }
    }

    fn refresh_metrics(&self) {
        refresh(get(), &self.cluster());
        let credential_failing = self.cloud.credentials_failing().map_or(0.0, |(f, _)| f.as_secs_f64());
        get().credential_failing.set(credential_failing);
        get().watch_failing.reset();
        for (kind, failing) in self.watch_health.failing(tokio::time::Instant::now()) {
            get().watch_failing.with_label_values(&[kind.name()]).set(failing.as_secs_f64());
        }
        let (source, age) = self.cloud.price_age(crate::cloud::wall_clock()());
        get().set_pricing_age(source.as_str(), age);
    }
}

/// Ready once every watch has delivered its initial list. A claim being launched also holds the synced
/// gate, but that is normal work: readiness must not flap with every launch.
pub fn readiness(cluster: &Cluster) -> Result<(), String> {
    match cluster.sync_status() {
        Err(reason @ NotSynced::Listing(_)) => Err(reason.to_string()),
        Ok(()) | Err(NotSynced::Launching(_)) => Ok(()),
    }
}

/// Upstream's `resource_type` value: the resource name lower-cased with `-` as `_`.
fn resource_type(name: &str) -> String {
    name.to_ascii_lowercase().replace('-', "_")
}

/// Upstream reports cpu in cores and everything else in base units.
fn resource_value(name: &str, amount: i64) -> f64 {
    if name == CPU {
        amount as f64 / 1000.0
    } else {
        amount as f64
    }
}

fn phase(phase: PodPhase) -> &'static str {
    match phase {
        PodPhase::Pending => "Pending",
        PodPhase::Running => "Running",
        PodPhase::Succeeded => "Succeeded",
        PodPhase::Failed => "Failed",
        PodPhase::Unknown => "Unknown",
    }
}

/// Recomputes every cluster-state gauge from the index. Each vector is reset first, so NodePools,
/// sizes and zones that are gone leave no series behind.
pub fn refresh(m: &Metrics, cluster: &Cluster) {
    m.cluster_state_synced.set(i64::from(cluster.synced()));
    m.cluster_state_node_count.set(i64::try_from(cluster.nodes().count()).unwrap_or(i64::MAX));

    let mut allocatable: BTreeMap<[String; 6], Resources> = BTreeMap::new();
    for (node, claim) in cluster.nodes() {
        let label = |key: &str| node.node.labels.get(key).cloned().unwrap_or_default();
        let pool = node.node.nodepool.clone().or_else(|| claim.and_then(|c| c.nodepool.clone()));
        let key = [
            pool.unwrap_or_default(),
            label(LABEL_INSTANCE_TYPE),
            label(LABEL_CAPACITY_TYPE),
            label(LABEL_ZONE),
            label(LABEL_ARCH),
            label(LABEL_OS),
        ];
        allocatable.entry(key).or_default().add_assign(&node.node.allocatable);
    }
    m.nodes_allocatable.reset();
    for (key, resources) in &allocatable {
        for (name, amount) in resources.iter() {
            let kind = resource_type(name);
            let [pool, size, capacity_type, zone, arch, os] = key.each_ref().map(String::as_str);
            let labels = [pool, size, capacity_type, zone, arch, os, kind.as_str()];
            m.nodes_allocatable.with_label_values(&labels).set(resource_value(name, amount));
        }
    }

    m.unreadable_objects.reset();
    for (kind, _, _) in cluster.invalid() {
        m.unreadable_objects.with_label_values(&[kind.name()]).inc();
    }

    let usage = cluster.nodepool_usage();
    m.nodepools_usage.reset();
    m.nodepools_limit.reset();
    for pool in cluster.nodepools() {
        let name = pool.name_any();
        for (resource, amount) in usage.get(&name).into_iter().flat_map(Resources::iter) {
            let labels = [resource_type(resource), name.clone()];
            m.nodepools_usage.with_label_values(&labels).set(resource_value(resource, amount));
        }
        for (resource, quantity) in pool.spec.limits.iter().flatten() {
            // The API server validated the quantity; one it could not store would not be here.
            if let Ok(amount) = parse_resource_quantity(resource, quantity.as_str()) {
                let labels = [resource_type(resource), name.clone()];
                m.nodepools_limit.with_label_values(&labels).set(resource_value(resource, amount));
            }
        }
    }

    let mut pods: BTreeMap<[String; 6], i64> = BTreeMap::new();
    for pod in cluster.pods() {
        let node = pod.pod.node_name.as_deref().and_then(|name| cluster.node(name));
        let label = |key: &str| node.and_then(|n| n.node.labels.get(key)).cloned().unwrap_or_default();
        let pool = node.and_then(|n| n.node.nodepool.clone());
        let key = [
            phase(pod.phase).to_string(),
            pod.pod.node_name.is_some().to_string(),
            pool.unwrap_or_default(),
            label(LABEL_ZONE),
            label(LABEL_CAPACITY_TYPE),
            label(LABEL_INSTANCE_TYPE),
        ];
        *pods.entry(key).or_default() += 1;
    }
    m.pods_state.reset();
    for (key, count) in &pods {
        m.pods_state.with_label_values(&key.each_ref().map(String::as_str)).set(*count);
    }
}

/// The latest plan that launches anything: the $/hour of its new claims per NodePool and its lower
/// bound. A batch that only fills existing or in-flight capacity leaves the gauges alone, so they keep
/// describing a decision that cost something.
pub fn record_plan(m: &Metrics, plan: &Plan) {
    if plan.nodeclaims.is_empty() {
        return;
    }
    let mut per_pool: BTreeMap<&str, f64> = BTreeMap::new();
    for claim in &plan.nodeclaims {
        *per_pool.entry(claim.nodepool.as_str()).or_default() += claim.price_per_hour;
    }
    m.plan_price.reset();
    for (pool, price) in per_pool {
        m.plan_price.with_label_values(&[pool]).set(price);
    }
    m.plan_lower_bound.set(plan.lower_bound_per_hour);
}

fn claim_label<'a>(claim: &'a NodeClaim, key: &str) -> &'a str {
    claim.labels().get(key).map_or("", String::as_str)
}

/// Upstream `DisruptionTerminationMode`: no terminationGracePeriod drains gracefully, a zero one
/// forcefully, any other eventually.
fn termination_mode(claim: &NodeClaim) -> &'static str {
    termination_mode_of(claim.spec.termination_grace_period.as_deref())
}

/// [`termination_mode`] from a terminationGracePeriod as written.
pub fn termination_mode_of(termination_grace_period: Option<&str>) -> &'static str {
    match termination_grace_period.map(duration::parse) {
        Some(Ok(grace)) if grace.is_zero() => TERMINATION_FORCEFUL,
        Some(Ok(_)) => TERMINATION_EVENTUAL,
        // The drain ignores an unreadable one, so it is graceful.
        None | Some(Err(_)) => TERMINATION_GRACEFUL,
    }
}

/// The claim's finalizer is gone: `karpenter_nodeclaims_terminated_total`.
pub fn nodeclaim_terminated(m: &Metrics, claim: &NodeClaim) {
    let label = |key| claim_label(claim, key);
    m.nodeclaim_terminated(label(LABEL_NODEPOOL), label(LABEL_CAPACITY_TYPE), label(LABEL_ZONE));
}

/// The claim was deleted by us for `reason` (upstream's reasons): `karpenter_nodeclaims_disrupted_total`.
pub fn nodeclaim_disrupted(m: &Metrics, claim: &NodeClaim, reason: &'static str) {
    let label = |key| claim_label(claim, key);
    m.nodeclaim_disrupted(reason, label(LABEL_NODEPOOL), label(LABEL_CAPACITY_TYPE), termination_mode(claim));
}

/// Node repair deleted the claim, whose Node had `condition`: `karpenter_nodeclaims_unhealthy_disrupted_total`
/// (and, as upstream, `karpenter_nodeclaims_disrupted_total{reason="unhealthy"}`).
pub fn nodeclaim_unhealthy_disrupted(m: &Metrics, claim: &NodeClaim, condition: &str) {
    let label = |key| claim_label(claim, key);
    let image_id = claim.status.as_ref().and_then(|s| s.image_id.as_deref()).unwrap_or_default();
    m.nodeclaim_unhealthy_disrupted(condition, label(LABEL_NODEPOOL), label(LABEL_CAPACITY_TYPE), image_id);
    // Repair sets the termination timestamp to now: the claim goes at once, whatever its grace period.
    m.nodeclaim_disrupted(
        "unhealthy",
        label(LABEL_NODEPOOL),
        label(LABEL_CAPACITY_TYPE),
        TERMINATION_FORCEFUL,
    );
}

/// The claim's Node registered: `karpenter_nodes_created_total`.
pub fn node_created(m: &Metrics, claim: &NodeClaim) {
    m.node_created(claim_label(claim, LABEL_NODEPOOL), claim_label(claim, LABEL_ZONE));
}

/// Our finalizer came off the Node: `karpenter_nodes_terminated_total`.
pub fn node_terminated(m: &Metrics, node: &Node) {
    let label = |key: &str| node.labels().get(key).map_or("", String::as_str);
    m.node_terminated(label(LABEL_NODEPOOL), label(LABEL_ZONE));
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
