//! The controllers' side of the metrics ([`crate::operator::metrics`] defines them):
//!
//! - [`refresh`]: the gauges that describe the cluster, rebuilt from the index on the leader, at every
//!   scrape and every [`REFRESH_INTERVAL`] (upstream's metrics controllers requeue every 5 to 30 s): per
//!   Node (`metrics_nodes`), per NodePool, per pod (`metrics_pods`), per object's status conditions
//!   (`metrics_status`) and the index's own state. Each vector is rebuilt whole, so a deleted object's
//!   series is gone at the next refresh; a replica that does not lead serves none of them;
//! - the labels of NodeClaims, Nodes and plans for the counters the controllers record;
//! - [`Probes`] for the metrics and health servers: ready once every watch has listed.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::metrics_pods::PodTracker;
use super::metrics_status::StatusTracker;
use super::Shared;
use crate::apis::duration;
use crate::apis::{AKSNodeClass, NodeClaim, NodePool};
use crate::cloud::CloudProvider;
use crate::model::instancetype::InstanceType;
use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_ZONE};
use crate::operator::metrics::Metrics;
use crate::operator::server::Probes;
use crate::scheduling::Plan;
use crate::state::{Cluster, NotSynced};

pub use crate::operator::metrics::get;

/// How often the leader refreshes the cluster-state metrics between scrapes, so transitions and pod
/// timings are seen even when nobody scrapes (upstream's node metrics controller: every 5 s).
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// Upstream core `metrics.TerminationModeGraceful` etc., the `termination_mode` of a disrupted claim.
const TERMINATION_GRACEFUL: &str = "graceful";
const TERMINATION_EVENTUAL: &str = "eventual";
const TERMINATION_FORCEFUL: &str = "forceful";

/// What the cluster-state metrics remember between refreshes.
#[derive(Debug, Default)]
pub struct MetricsState {
    /// Since when the index has not been synced (upstream `unsyncedStartTime`).
    pub unsynced_since: Option<Instant>,
    /// Pods seen pending and unscheduled, and when provisioning first saw, decided and placed them.
    pub pods: PodTracker,
    /// The status conditions seen on each object, for transitions.
    pub status: StatusTracker,
    /// NodeClaims already counted in `karpenter_nodepools_cost_tracker_errors_total`.
    pub cost_errors: std::collections::BTreeSet<String>,
}

/// The instance types of a NodePool, with its AKSNodeClass, as provisioning sees them.
pub type Catalog<'a> = &'a dyn Fn(&NodePool, Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>>;

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
        refresh_if_leading(self);
        let m = get();
        let credential_failing = self.cloud.credentials_failing().map_or(Duration::ZERO, |(f, _)| f);
        m.set_credential_failing(credential_failing);
        let failing = self.watch_health.failing(tokio::time::Instant::now());
        m.set_watch_failing(failing.iter().map(|(kind, f)| (kind.name(), *f)));
        let (source, age) = self.cloud.price_age(crate::cloud::wall_clock()());
        m.set_pricing_age(source.as_str(), age);
    }
}

/// On the leader, rebuilds the cluster-state metrics; elsewhere drops every leader-only series. The
/// check and the write happen under the index's and the metrics state's locks (in that order, as the
/// pod watch takes them), so no refresh that started while leading writes after a standby's clear.
pub fn refresh_if_leading<C: CloudProvider + 'static>(shared: &Shared<C>) {
    let cluster = shared.cluster();
    let mut state = shared.metrics_state();
    if !shared.leading.load(Ordering::Relaxed) {
        get().clear_leader_only();
        // A standby follows the watches without refreshing: forget what the index no longer holds.
        state.pods.retain(&cluster);
        state.status.retain(&cluster);
        return;
    }
    let catalog = |_: &NodePool, class: Option<&AKSNodeClass>| shared.cloud.instance_types(class);
    refresh(get(), &cluster, &catalog, &mut state, Timestamp::now(), Instant::now());
}

/// The leader's refresh loop ([`REFRESH_INTERVAL`]).
pub async fn run<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    loop {
        refresh_if_leading(&shared);
        tokio::time::sleep(REFRESH_INTERVAL).await;
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
pub(super) fn resource_type(name: &str) -> String {
    name.to_ascii_lowercase().replace('-', "_")
}

/// Upstream reports cpu in cores and everything else in base units.
pub(super) fn resource_value(name: &str, amount: i64) -> f64 {
    if name == crate::model::resources::CPU {
        amount as f64 / 1000.0
    } else {
        amount as f64
    }
}

/// Recomputes every cluster-state metric from the index at `now` (`instant` on the monotonic clock).
pub fn refresh(
    m: &Metrics,
    cluster: &Cluster,
    catalog: Catalog<'_>,
    state: &mut MetricsState,
    now: Timestamp,
    instant: Instant,
) {
    let c = &m.cluster;
    let synced = cluster.synced();
    let since = if synced { None } else { Some(*state.unsynced_since.get_or_insert(instant)) };
    state.unsynced_since = since;
    c.synced.with_label_values(&[] as &[&str]).set(f64::from(u8::from(synced)));
    let unsynced = since.map_or(0.0, |s| instant.saturating_duration_since(s).as_secs_f64());
    c.unsynced_time.with_label_values(&[] as &[&str]).set(unsynced);
    c.node_count.with_label_values(&[] as &[&str]).set(cluster.nodes().count() as f64);

    c.unreadable_objects.reset();
    let mut unreadable: BTreeMap<&str, f64> = BTreeMap::new();
    for (kind, _, _) in cluster.invalid() {
        *unreadable.entry(kind.name()).or_default() += 1.0;
    }
    for (kind, n) in unreadable {
        c.unreadable_objects.with_label_values(&[kind]).set(n);
    }

    super::metrics_nodes::nodes(m, cluster, now);
    super::metrics_nodes::nodepools(m, cluster, catalog, &mut state.cost_errors);
    super::metrics_pods::pods(m, cluster, &mut state.pods, now);
    super::metrics_status::status_conditions(m, cluster, &mut state.status, now);
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
    let s = &m.scheduler;
    s.plan_price.reset();
    for (pool, price) in per_pool {
        s.plan_price.with_label_values(&[pool]).set(price);
    }
    s.plan_lower_bound.with_label_values(&[] as &[&str]).set(plan.lower_bound_per_hour);
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

/// How long ago `at` was, at `now`; `None` without a time (or one in the future).
fn since(at: Option<Timestamp>, now: Timestamp) -> Option<Duration> {
    let elapsed = now.duration_since(at?);
    Duration::try_from(elapsed).ok()
}

/// The claim's finalizer is gone: `karpenter_nodeclaims_terminated_total` and, from its deletion,
/// `karpenter_nodeclaims_termination_duration_seconds`.
pub fn nodeclaim_terminated(m: &Metrics, claim: &NodeClaim, now: Timestamp) {
    let label = |key| claim_label(claim, key);
    let took = since(claim.metadata.deletion_timestamp.as_ref().map(|t| t.0), now);
    m.nodeclaim_terminated(label(LABEL_NODEPOOL), label(LABEL_CAPACITY_TYPE), label(LABEL_ZONE), took);
}

/// The claim's VM is gone: `karpenter_nodeclaims_instance_termination_duration_seconds`, from its
/// `InstanceTerminating` condition (upstream's start), else its deletion.
pub fn instance_terminated(m: &Metrics, claim: &NodeClaim, now: Timestamp) {
    let conditions = claim.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let terminating = crate::apis::conditions::get(conditions, crate::apis::conditions::INSTANCE_TERMINATING)
        .map(|c| c.last_transition_time.0);
    let started = terminating.or(claim.metadata.deletion_timestamp.as_ref().map(|t| t.0));
    if let Some(took) = since(started, now) {
        m.instance_terminated(claim_label(claim, LABEL_NODEPOOL), took);
    }
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

/// Our finalizer came off the Node: `karpenter_nodes_terminated_total`, the termination's duration
/// and the Node's lifetime. The termination counts from the Node's deletion or, as the lifecycle drains
/// a Node before it deletes it, from its NodeClaim's (`claim_deleted`): upstream deletes the Node first.
pub fn node_terminated(m: &Metrics, node: &Node, claim_deleted: Option<Timestamp>, now: Timestamp) {
    let label = |key: &str| node.labels().get(key).map_or("", String::as_str);
    let deleted = node.metadata.deletion_timestamp.as_ref().map(|t| t.0).or(claim_deleted);
    let deleted_for = since(deleted, now);
    let lived = since(node.metadata.creation_timestamp.as_ref().map(|t| t.0), now);
    m.node_terminated(label(LABEL_NODEPOOL), label(LABEL_ZONE), deleted_for, lived);
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
