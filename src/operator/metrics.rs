//! The controller's Prometheus metrics. Every metric is defined and registered in one registry, by
//! this module and its groups (`metrics_lifecycle`, `metrics_scheduler`, `metrics_cluster`,
//! `metrics_disruption`, `metrics_status`, `metrics_runtime`), with upstream's names, types, label
//! names and buckets (Karpenter core v1.14 `pkg/metrics`, `pkg/controllers/...`,
//! `pkg/cloudprovider/metrics`; the Azure provider's `pkg/providers/instance/metrics.go` and
//! `pkg/metrics`; operatorpkg's status controller; controller-runtime's), so dashboards built for
//! upstream work unchanged. Each definition also documents itself ([`Doc`]): the documentation's table
//! is generated from the registry (`karpenter-azure metrics-table`).
//!
//! Labels are upstream's, object names included: the per-node gauges carry `node_name`, `karpenter_pods_state`
//! and the pod timing gauges the pod's `name` and `namespace`, the status-condition gauges the object's
//! `name`, the scheduler's gauges a `scheduling_id` per round. Those series exist only while their
//! object does: the gauges describing the cluster are rebuilt from the index (`controllers::metrics`),
//! so a deleted object's series is gone at the next refresh. The other label values are bounded: a
//! NodePool, instance type, zone, capacity type, static reason or error category, controller or method
//! name, resource name; never an error message.
//!
//! Counters and histograms are recorded where the event happens (the controllers, the cloud-provider
//! decorator, the Azure provider) through the recorder methods, which fix the label order. The
//! gauges that describe the cluster or a decision are the leader's: upstream runs the controllers that
//! set them only on the leader, so a standby serves none of them ([`Metrics::clear_leader_only`]).
//! The pure modules (scheduling, disruption, the catalog's pure half) never touch this.

use std::future::Future;
use std::sync::LazyLock;

pub use super::metrics_cluster::{node_label_keys, node_labels, ClusterMetrics, POD_LABELS};
pub use super::metrics_disruption::{consolidation_type, decision, DisruptionMetrics};
pub use super::metrics_lifecycle::LifecycleMetrics;
pub use super::metrics_rebuilt::RebuiltGauge;
pub use super::metrics_registry::{Doc, Origin, Type};
pub use super::metrics_runtime::{RuntimeMetrics, Work};
pub use super::metrics_scheduler::SchedulerMetrics;
pub use super::metrics_status::StatusMetrics;

use prometheus::{Encoder, Registry, TextEncoder};

use super::metrics_registry::{LeaderOnly, Registrar};

/// The status-condition metrics' kinds and families.
pub mod status {
    pub use crate::operator::metrics_status::{
        prometheus_label, Family, Kind, AKSNODECLASS, KINDS, NODE, NODECLAIM, NODEOVERLAY, NODEPOOL,
    };
}

/// The `Content-Type` of [`Metrics::render`]: the Prometheus text format.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Upstream core `metrics.DurationBuckets()` (controller-runtime's, plus long tails for singletons).
pub const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25,
    1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

/// Values of the `controller` label: upstream's controller names, as `injection.GetControllerName`.
pub mod controller {
    pub const PROVISIONER: &str = "provisioner";
    pub const NODECLAIM_LIFECYCLE: &str = "nodeclaim.lifecycle";
    pub const NODECLAIM_GC: &str = "nodeclaim.garbagecollection";
    pub const NODE_TERMINATION: &str = "node.termination";
    pub const NODE_HEALTH: &str = "node.health";
    pub const DISRUPTION: &str = "disruption";
    pub const DISRUPTION_QUEUE: &str = "disruption.queue";
    pub const NODECLAIM_DISRUPTION: &str = "nodeclaim.disruption";
    pub const NODECLAIM_INPLACE: &str = "nodeclaim.inplaceupdate";
    pub const STATUS: &str = "status";
    pub const STATIC_PROVISIONING: &str = "static.provisioning";
    pub const METRICS: &str = "metrics";
}

/// Upstream core `metrics.ProvisionedReason`, the `reason` of NodeClaims the provisioner creates.
pub const REASON_PROVISIONED: &str = "provisioned";

tokio::task_local! {
    /// The controller whose work is running, for the `controller` label of the cloud-provider metrics
    /// (upstream carries it in the `context.Context`).
    static CONTROLLER: &'static str;
}

/// Runs `work` as controller `name`: cloud calls made inside it are labelled with that name. A task
/// spawned inside does not inherit it (kube's `Controller` spawns each reconcile: wrap the reconcile).
pub async fn in_controller<F: Future>(name: &'static str, work: F) -> F::Output {
    CONTROLLER.scope(name, work).await
}

/// The controller set by [`in_controller`], or `""` (upstream's value when the context has none).
pub fn current_controller() -> &'static str {
    CONTROLLER.try_with(|name| *name).unwrap_or("")
}

/// What a VM create is labelled with (`karpenter_instance_vm_create_*`).
#[derive(Clone, Copy, Debug)]
pub struct VmCreate<'a> {
    /// The image ID; as upstream, one series per image version the node classes resolve to.
    pub image: &'a str,
    /// The VM size.
    pub size: &'a str,
    pub zone: &'a str,
    pub capacity_type: &'a str,
    pub nodepool: &'a str,
}

impl VmCreate<'_> {
    pub(super) fn values(&self) -> [&str; 5] {
        [self.image, self.size, self.zone, self.capacity_type, self.nodepool]
    }
}

/// Every metric, registered in its own registry. Record through the methods; read with
/// [`Metrics::render`].
pub struct Metrics {
    registry: Registry,
    docs: Vec<Doc>,
    leader_only: LeaderOnly,
    /// The per-object families kept outside the registry, sorted by name.
    rebuilt: Vec<RebuiltGauge>,
    /// NodeClaims and Nodes created, disrupted, terminated; drains and evictions.
    pub lifecycle: LifecycleMetrics,
    /// Scheduling, cloud-provider calls, VM creates, the latest plan.
    pub scheduler: SchedulerMetrics,
    /// The cluster's state: per Node, NodePool and pod.
    pub cluster: ClusterMetrics,
    /// The disruption controller's.
    pub disruption: DisruptionMetrics,
    /// operatorpkg's status-condition metrics, per kind.
    pub status: StatusMetrics,
    /// Build, process, leader election, reconciles, our health gauges.
    pub runtime: RuntimeMetrics,
}

impl Metrics {
    /// A fresh set in a fresh registry; the process uses [`get`], tests make their own.
    pub fn new() -> Metrics {
        let r = Registrar::new();
        let lifecycle = LifecycleMetrics::register(&r);
        let scheduler = SchedulerMetrics::register(&r);
        let cluster = ClusterMetrics::register(&r);
        let disruption = DisruptionMetrics::register(&r);
        let status = StatusMetrics::register(&r);
        let runtime = RuntimeMetrics::register(&r);
        let (registry, docs, leader_only, rebuilt) = r.finish();
        Metrics {
            registry,
            docs,
            leader_only,
            rebuilt,
            lifecycle,
            scheduler,
            cluster,
            disruption,
            status,
            runtime,
        }
    }

    /// Every metric with at least one series, in the Prometheus text format.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let mut out = Vec::new();
        self.render_to(&mut out)?;
        String::from_utf8(out).map_err(|err| prometheus::Error::Msg(format!("metrics text: {err}")))
    }

    /// Writes [`Metrics::render`]'s text to `out` as it goes, family by family, so a writer that
    /// compresses never needs the whole text at once. The registry's families and the rebuilt ones
    /// are merged in name order, as the registry orders its own.
    pub fn render_to(&self, out: &mut impl std::io::Write) -> Result<(), prometheus::Error> {
        let encoder = TextEncoder::new();
        let mut rebuilt = self.rebuilt.iter().peekable();
        for family in self.registry.gather() {
            while let Some(gauge) = rebuilt.next_if(|g| g.name() < family.name()) {
                gauge.render(out)?;
            }
            encoder.encode(std::slice::from_ref(&family), out)?;
        }
        for gauge in rebuilt {
            gauge.render(out)?;
        }
        Ok(())
    }

    /// What each registered metric is, in registration order.
    pub fn docs(&self) -> &[Doc] {
        &self.docs
    }

    /// Drops every series of the leader-only metrics: a replica that does not lead serves none.
    pub fn clear_leader_only(&self) {
        self.leader_only.clear();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics, the ones `/metrics` serves.
pub fn get() -> &'static Metrics {
    &METRICS
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "metrics_upstream_tests.rs"]
mod upstream_tests;
