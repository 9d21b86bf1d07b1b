//! The controller's Prometheus metrics. Every metric is defined and registered here, in one registry,
//! with upstream's names, types and label names (Karpenter core `pkg/metrics`, `pkg/controllers/...`,
//! `pkg/cloudprovider/metrics`; the Azure provider's `pkg/providers/instance/vm/metrics.go`), so
//! dashboards built for upstream work unchanged.
//!
//! Label values come only from bounded sets: NodePool, instance type, zone, capacity type, a static
//! reason or error category, a controller or method name, a resource name. Never an object name or an
//! error message. Where upstream labels a series with one (a pod's name and namespace, a node's name, a
//! scheduling run's UUID), the series here is summed over those objects instead; the field docs say so.
//!
//! Counters and histograms are recorded where the event happens (the controllers, the cloud-provider
//! decorator, the Azure provider) through the methods below, which fix the label order. The gauges that
//! describe the cluster are recomputed from the index just before each scrape (`controllers::metrics`).
//! The pure modules (scheduling, disruption, the catalog's pure half) never touch this.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

pub use super::metrics_disruption::{consolidation_type, decision, DisruptionMetrics};

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

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
    fn values(&self) -> [&str; 5] {
        [self.image, self.size, self.zone, self.capacity_type, self.nodepool]
    }
}

/// Every metric, registered in its own registry. Record through the methods; read with
/// [`Metrics::render`].
pub struct Metrics {
    registry: Registry,
    /// `karpenter_nodeclaims_created_total{reason, nodepool, min_values_relaxed}`.
    pub nodeclaims_created: IntCounterVec,
    /// `karpenter_nodeclaims_terminated_total{nodepool, capacity_type, zone}`.
    pub nodeclaims_terminated: IntCounterVec,
    /// `karpenter_nodeclaims_disrupted_total{reason, nodepool, capacity_type, consolidation_policy,
    /// termination_mode}`.
    pub nodeclaims_disrupted: IntCounterVec,
    /// `karpenter_nodeclaims_unhealthy_disrupted_total{condition, nodepool, capacity_type, image_id}`:
    /// NodeClaims node repair deleted (upstream `pkg/controllers/node/health/metrics.go`).
    pub nodeclaims_unhealthy_disrupted: IntCounterVec,
    /// `karpenter_nodes_created_total{nodepool, zone}`: Nodes registered for a NodeClaim.
    pub nodes_created: IntCounterVec,
    /// `karpenter_nodes_terminated_total{nodepool, zone}`: Nodes whose termination finalizer we removed.
    pub nodes_terminated: IntCounterVec,
    /// `karpenter_nodes_allocatable`: summed over the Nodes sharing the labels (upstream: one series
    /// per node, labelled with its name).
    pub nodes_allocatable: GaugeVec,
    /// `karpenter_nodepools_usage{resource_type, nodepool}`.
    pub nodepools_usage: GaugeVec,
    /// `karpenter_nodepools_limit{resource_type, nodepool}`.
    pub nodepools_limit: GaugeVec,
    /// `karpenter_pods_state`: the number of pods in each state (upstream: 1 per pod, labelled with its
    /// name, namespace, owner and node).
    pub pods_state: IntGaugeVec,
    /// `karpenter_scheduler_scheduling_duration_seconds{controller}`.
    pub scheduling_duration: HistogramVec,
    /// `karpenter_pods_scheduling_decision_duration_seconds`: from the controller first seeing a pod
    /// pending to the first plan that decided its place.
    pub pod_scheduling_decision: Histogram,
    /// `karpenter_scheduler_queue_depth{controller}` (upstream adds the scheduling run's UUID).
    pub queue_depth: IntGaugeVec,
    /// `karpenter_scheduler_unschedulable_pods_count{controller}`.
    pub unschedulable_pods: IntGaugeVec,
    /// `karpenter_cloudprovider_duration_seconds{controller, method, provider}`.
    pub cloudprovider_duration: HistogramVec,
    /// `karpenter_cloudprovider_errors_total{controller, method, provider, error}`.
    pub cloudprovider_errors: IntCounterVec,
    /// `karpenter_instance_vm_create_start_total{image, size, zone, capacity_type, nodepool}`.
    pub vm_create_start: IntCounterVec,
    /// `karpenter_instance_vm_create_failure_total{..., phase, error_code}`.
    pub vm_create_failure: IntCounterVec,
    /// `karpenter_cluster_state_node_count`.
    pub cluster_state_node_count: IntGauge,
    /// `karpenter_cluster_state_synced`.
    pub cluster_state_synced: IntGauge,
    /// `leader_election_master_status{name}`: 1 while this replica holds the Lease `name`, else 0
    /// (controller-runtime's metric, which upstream Karpenter exposes).
    pub leader_status: IntGaugeVec,
    /// `karpenter_azure_plan_price_dollars_per_hour{nodepool}`: ours.
    pub plan_price: GaugeVec,
    /// `karpenter_azure_plan_lower_bound_dollars_per_hour`: ours.
    pub plan_lower_bound: Gauge,
    /// `karpenter_azure_pricing_age_seconds{source}`: ours; one series, for the source in effect.
    pub pricing_age: GaugeVec,
    /// `karpenter_azure_task_restarts_total{task}`: ours; a long-running task that ended or panicked
    /// and was started again.
    pub task_restarts: IntCounterVec,
    /// `karpenter_azure_unreadable_objects{kind}`: ours; objects left out of every decision because
    /// they cannot be read or converted.
    pub unreadable_objects: IntGaugeVec,
    /// `karpenter_azure_watch_failing_seconds{kind}`: ours; how long each failing watch has failed.
    pub watch_failing: GaugeVec,
    /// `karpenter_azure_credential_failing_seconds`: ours; how long the Azure credential has failed
    /// to get tokens (0 while it works).
    pub credential_failing: Gauge,
    /// The disruption controller's.
    pub disruption: DisruptionMetrics,
}

/// The node labels `karpenter_nodes_allocatable` keeps (upstream's snake-cased well-known labels that
/// are bounded), then `resource_type`.
pub const NODE_LABELS: [&str; 7] =
    ["nodepool", "instance_type", "capacity_type", "zone", "arch", "os", "resource_type"];
/// The labels of `karpenter_pods_state` (upstream's, without name, namespace, owner and node).
pub const POD_LABELS: [&str; 6] =
    ["phase", "scheduled", "nodepool", "zone", "capacity_type", "instance_type"];

impl Metrics {
    /// A fresh set in a fresh registry; the process uses [`get`], tests make their own.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let metric =
                IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric definition");
            registry.register(Box::new(metric.clone())).expect("metric names are unique");
            metric
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let metric = GaugeVec::new(Opts::new(name, help), labels).expect("a valid metric definition");
            registry.register(Box::new(metric.clone())).expect("metric names are unique");
            metric
        };
        let int_gauge = |name: &str, help: &str, labels: &[&str]| {
            let metric = IntGaugeVec::new(Opts::new(name, help), labels).expect("a valid metric definition");
            registry.register(Box::new(metric.clone())).expect("metric names are unique");
            metric
        };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: &[f64]| {
            let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
            let metric = HistogramVec::new(opts, labels).expect("a valid metric definition");
            registry.register(Box::new(metric.clone())).expect("metric names are unique");
            metric
        };
        let scalar = |name: &str, help: &str| {
            let metric = IntGauge::new(name, help).expect("a valid metric definition");
            registry.register(Box::new(metric.clone())).expect("metric names are unique");
            metric
        };
        let vm = ["image", "size", "zone", "capacity_type", "nodepool"];
        let plan_lower_bound = Gauge::new(
            "karpenter_azure_plan_lower_bound_dollars_per_hour",
            "A proven lower bound on the $/hour of the new capacity of the latest provisioning plan that launched any: no plan placing the same pods can cost less. Compare with sum(karpenter_azure_plan_price_dollars_per_hour).",
        )
        .expect("a valid metric definition");
        registry.register(Box::new(plan_lower_bound.clone())).expect("metric names are unique");
        let credential_failing = Gauge::new(
            "karpenter_azure_credential_failing_seconds",
            "How long the Azure credential has failed to get tokens without a success in between; 0 while it works. Past a minute the AKSNodeClasses show CredentialsReady=False, past KARPENTER_CREDENTIAL_RESTART_AFTER (15 minutes) /healthz fails.",
        )
        .expect("a valid metric definition");
        registry.register(Box::new(credential_failing.clone())).expect("metric names are unique");
        let disruption = DisruptionMetrics::register(&registry);
        Metrics {
            disruption,
            nodeclaims_created: counter(
                "karpenter_nodeclaims_created_total",
                "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created, the owning nodepool, and if min values was relaxed for this nodeclaim.",
                &["reason", "nodepool", "min_values_relaxed"],
            ),
            nodeclaims_terminated: counter(
                "karpenter_nodeclaims_terminated_total",
                "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool, capacity type, and zone.",
                &["nodepool", "capacity_type", "zone"],
            ),
            nodeclaims_disrupted: counter(
                "karpenter_nodeclaims_disrupted_total",
                "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was disrupted, the owning nodepool, the capacity type, the consolidation policy, and the termination mode.",
                &["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
            ),
            nodeclaims_unhealthy_disrupted: counter(
                "karpenter_nodeclaims_unhealthy_disrupted_total",
                "Number of unhealthy nodeclaims disrupted in total by Karpenter. Labeled by condition on the node was disrupted, the owning nodepool, and the image ID.",
                &["condition", "nodepool", "capacity_type", "image_id"],
            ),
            nodes_created: counter(
                "karpenter_nodes_created_total",
                "Number of nodes created in total by Karpenter. Labeled by owning nodepool and zone.",
                &["nodepool", "zone"],
            ),
            nodes_terminated: counter(
                "karpenter_nodes_terminated_total",
                "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and zone.",
                &["nodepool", "zone"],
            ),
            nodes_allocatable: gauge(
                "karpenter_nodes_allocatable",
                "Node allocatable are the resources allocatable by nodes, summed over the nodes with the same labels.",
                &NODE_LABELS,
            ),
            nodepools_usage: gauge(
                "karpenter_nodepools_usage",
                "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and resource type.",
                &["resource_type", "nodepool"],
            ),
            nodepools_limit: gauge(
                "karpenter_nodepools_limit",
                "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool name and resource type.",
                &["resource_type", "nodepool"],
            ),
            pods_state: int_gauge(
                "karpenter_pods_state",
                "Pod state is the current state of pods: the number of pods with each phase, whether they are scheduled, and the nodepool, zone, capacity type and instance type of their node.",
                &POD_LABELS,
            ),
            pod_scheduling_decision: histogram(
                "karpenter_pods_scheduling_decision_duration_seconds",
                "The time from Karpenter first seeing a pod waiting for capacity to its first scheduling decision for the pod, in seconds.",
                &[],
                DURATION_BUCKETS,
            )
            .with_label_values(&[] as &[&str]),
            scheduling_duration: histogram(
                "karpenter_scheduler_scheduling_duration_seconds",
                "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
                &["controller"],
                DURATION_BUCKETS,
            ),
            queue_depth: int_gauge(
                "karpenter_scheduler_queue_depth",
                "The number of pods currently waiting to be scheduled.",
                &["controller"],
            ),
            unschedulable_pods: int_gauge(
                "karpenter_scheduler_unschedulable_pods_count",
                "The number of unschedulable Pods.",
                &["controller"],
            ),
            cloudprovider_duration: histogram(
                "karpenter_cloudprovider_duration_seconds",
                "Duration of cloud provider method calls. Labeled by the controller, method name and provider.",
                &["controller", "method", "provider"],
                prometheus::DEFAULT_BUCKETS,
            ),
            cloudprovider_errors: counter(
                "karpenter_cloudprovider_errors_total",
                "Total number of errors returned from CloudProvider calls.",
                &["controller", "method", "provider", "error"],
            ),
            vm_create_start: counter(
                "karpenter_instance_vm_create_start_total",
                "Total number of VM creation operations started.",
                &vm,
            ),
            vm_create_failure: counter(
                "karpenter_instance_vm_create_failure_total",
                "Total number of VM creation failures.",
                // The create's labels first, so failures join starts on them.
                &["image", "size", "zone", "capacity_type", "nodepool", "phase", "error_code"],
            ),
            cluster_state_node_count: scalar(
                "karpenter_cluster_state_node_count",
                "Current count of nodes in cluster state",
            ),
            cluster_state_synced: scalar(
                "karpenter_cluster_state_synced",
                "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and nodes that are stored in the APIServer have the same representation as Karpenter's cluster state",
            ),
            leader_status: int_gauge(
                "leader_election_master_status",
                "Gauge of if the reporter is master of a particular lease, 1 indicates master, 0 indicates backup. The name label is the name of the lease.",
                &["name"],
            ),
            plan_price: gauge(
                "karpenter_azure_plan_price_dollars_per_hour",
                "The $/hour of the NodeClaims the latest provisioning plan that launched any capacity created, by nodepool.",
                &["nodepool"],
            ),
            plan_lower_bound,
            pricing_age: gauge(
                "karpenter_azure_pricing_age_seconds",
                "Age of the VM prices the solver uses: seconds since the last successful Retail Prices API refresh (source=live), or, before the first one, since the controller started on the embedded table (source=static, spot priced as on-demand).",
                &["source"],
            ),
            credential_failing,
            watch_failing: gauge(
                "karpenter_azure_watch_failing_seconds",
                "How long the watch of each kind has been failing (a series only while it fails); past KARPENTER_WATCH_STALE_AFTER (5 minutes) /readyz fails.",
                &["kind"],
            ),
            unreadable_objects: int_gauge(
                "karpenter_azure_unreadable_objects",
                "Objects the controller cannot read or convert (for example a NodeClaim written by another version with an operator this one does not know), by kind; they are left out of every decision, and a NodeClaim among them keeps its VM.",
                &["kind"],
            ),
            task_restarts: counter(
                "karpenter_azure_task_restarts_total",
                "Long-running controller tasks (provisioning, the NodeClaim lifecycle, status, garbage collection, disruption, ...) that ended or panicked and were started again, by task.",
                &["task"],
            ),
            registry,
        }
    }

    /// Every metric with at least one series, in the Prometheus text format.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }

    pub fn nodeclaim_created(&self, nodepool: &str) {
        self.nodeclaim_provisioned(nodepool, false);
    }

    /// A claim provisioning created; `min_values_relaxed` as its `karpenter.sh/nodeclaim-min-values-relaxed`
    /// annotation says (upstream provisioner.go labels the counter from it).
    pub fn nodeclaim_provisioned(&self, nodepool: &str, min_values_relaxed: bool) {
        let relaxed = if min_values_relaxed { "true" } else { "false" };
        self.nodeclaims_created.with_label_values(&[REASON_PROVISIONED, nodepool, relaxed]).inc();
    }

    /// `reason` is [`REASON_PROVISIONED`] or, for a disruption's replacement, the lower-case
    /// disruption reason (upstream `CreateNodeClaims` with `WithReason`).
    pub fn nodeclaim_created_for(&self, reason: &str, nodepool: &str) {
        // A replacement is labelled as not relaxed, whatever its minValues.
        self.nodeclaims_created.with_label_values(&[reason, nodepool, "false"]).inc();
    }

    pub fn nodeclaim_terminated(&self, nodepool: &str, capacity_type: &str, zone: &str) {
        self.nodeclaims_terminated.with_label_values(&[nodepool, capacity_type, zone]).inc();
    }

    /// `reason` is upstream's (`insufficient_capacity`, `launch_timeout`, `garbage_collected`, ...);
    /// `consolidation_policy` stays empty as upstream leaves it outside consolidation.
    pub fn nodeclaim_disrupted(
        &self,
        reason: &'static str,
        nodepool: &str,
        capacity_type: &str,
        termination_mode: &'static str,
    ) {
        let labels = [reason, nodepool, capacity_type, "", termination_mode];
        self.nodeclaims_disrupted.with_label_values(&labels).inc();
    }

    /// A voluntary disruption (or an expiration) of one NodeClaim and its `pods` reschedulable pods:
    /// `karpenter_nodeclaims_disrupted_total` and `karpenter_pods_disruption_initiated_total` with the
    /// pool's consolidation policy.
    pub fn disrupted_by_policy(&self, labels: [&str; 5], pods: usize) {
        self.nodeclaims_disrupted.with_label_values(&labels).inc();
        self.disruption.pods_disruption_initiated.with_label_values(&labels).inc_by(pods as u64);
    }

    /// Node repair deleted a claim whose Node had `condition` (snake-cased, as upstream: `ready`).
    pub fn nodeclaim_unhealthy_disrupted(
        &self,
        condition: &str,
        nodepool: &str,
        capacity_type: &str,
        image_id: &str,
    ) {
        let labels = [condition, nodepool, capacity_type, image_id];
        self.nodeclaims_unhealthy_disrupted.with_label_values(&labels).inc();
    }

    pub fn node_created(&self, nodepool: &str, zone: &str) {
        self.nodes_created.with_label_values(&[nodepool, zone]).inc();
    }

    pub fn node_terminated(&self, nodepool: &str, zone: &str) {
        self.nodes_terminated.with_label_values(&[nodepool, zone]).inc();
    }

    pub fn scheduling_finished(&self, controller: &'static str, took: Duration, unschedulable: usize) {
        self.scheduling_duration.with_label_values(&[controller]).observe(took.as_secs_f64());
        self.unschedulable_pods.with_label_values(&[controller]).set(saturating_i64(unschedulable));
    }

    /// One pod's first scheduling decision, `wait` after the controller first saw it pending.
    pub fn pod_scheduling_decided(&self, wait: Duration) {
        self.pod_scheduling_decision.observe(wait.as_secs_f64());
    }

    pub fn set_queue_depth(&self, controller: &'static str, pods: usize) {
        self.queue_depth.with_label_values(&[controller]).set(saturating_i64(pods));
    }

    /// One finished cloud-provider call of the current controller ([`current_controller`]); `error`
    /// is a static category.
    pub fn cloud_call(
        &self,
        method: &'static str,
        provider: &'static str,
        took: Duration,
        error: Option<&'static str>,
    ) {
        let controller = current_controller();
        self.cloudprovider_duration
            .with_label_values(&[controller, method, provider])
            .observe(took.as_secs_f64());
        if let Some(error) = error {
            self.cloudprovider_errors.with_label_values(&[controller, method, provider, error]).inc();
        }
    }

    /// Whether this replica now holds the leader Lease `lease`.
    pub fn set_leading(&self, lease: &str, leading: bool) {
        self.leader_status.with_label_values(&[lease]).set(i64::from(leading));
    }

    /// Sets the price-age gauge: one series, labelled with the source in effect.
    pub fn set_pricing_age(&self, source: &'static str, age: Duration) {
        self.pricing_age.reset();
        self.pricing_age.with_label_values(&[source]).set(age.as_secs_f64());
    }

    /// A supervised task ended or panicked and is started again.
    pub fn task_restarted(&self, task: &str) {
        self.task_restarts.with_label_values(&[task]).inc();
    }

    pub fn vm_create_started(&self, vm: &VmCreate<'_>) {
        self.vm_create_start.with_label_values(&vm.values()).inc();
    }

    /// `phase` is `sync` (the PUT was refused) or `async` (the operation failed); `error_code` a static
    /// category.
    pub fn vm_create_failed(&self, vm: &VmCreate<'_>, phase: &'static str, error_code: &'static str) {
        let [image, size, zone, capacity_type, nodepool] = vm.values();
        let labels = [image, size, zone, capacity_type, nodepool, phase, error_code];
        self.vm_create_failure.with_label_values(&labels).inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn saturating_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics, the ones `/metrics` serves.
pub fn get() -> &'static Metrics {
    &METRICS
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
