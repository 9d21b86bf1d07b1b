//! The provisioning side's metrics: the scheduler's (upstream core
//! `pkg/controllers/provisioning/scheduling/metrics.go`, `pkg/controllers/state/metrics.go`), the
//! cloud provider's (`pkg/cloudprovider/metrics/cloudprovider.go`), the Azure provider's VM creates and
//! image selection (`pkg/providers/instance/metrics.go`, `pkg/metrics/metrics.go`) and ours (the
//! latest plan's price and lower bound), with their recorders.

use std::time::Duration;

use prometheus::{GaugeVec, HistogramVec, IntCounterVec};

use super::metrics::{current_controller, Metrics, VmCreate, DURATION_BUCKETS};
use super::metrics_registry::{remove_where, Origin, Registrar, DEFAULT_BUCKETS};

const SCHEDULING: Origin = Origin::Core("pkg/controllers/provisioning/scheduling/metrics.go");
const CLOUD: Origin = Origin::Core("pkg/cloudprovider/metrics/cloudprovider.go");
const INSTANCE: Origin = Origin::Azure("pkg/providers/instance/metrics.go");

pub struct SchedulerMetrics {
    /// `karpenter_scheduler_scheduling_duration_seconds{controller}`.
    pub scheduling_duration: HistogramVec,
    /// `karpenter_scheduler_queue_depth{controller, scheduling_id}`.
    pub queue_depth: GaugeVec,
    /// `karpenter_scheduler_unfinished_work_seconds{controller, scheduling_id}`.
    pub unfinished_work: GaugeVec,
    /// `karpenter_scheduler_ignored_pods_count`.
    pub ignored_pods: GaugeVec,
    /// `karpenter_scheduler_unschedulable_pods_count{controller}`.
    pub unschedulable_pods: GaugeVec,
    /// `karpenter_scheduler_pending_pods_by_effective_zone_count{controller, zone}`.
    pub pending_by_zone: GaugeVec,
    /// `karpenter_pods_scheduling_decision_duration_seconds`.
    pub pod_scheduling_decision: HistogramVec,
    /// `karpenter_cloudprovider_duration_seconds{controller, method, provider}`.
    pub cloudprovider_duration: HistogramVec,
    /// `karpenter_cloudprovider_errors_total{controller, method, provider, error}`.
    pub cloudprovider_errors: IntCounterVec,
    /// `karpenter_instance_vm_create_start_total{image, size, zone, capacity_type, nodepool}`.
    pub vm_create_start: IntCounterVec,
    /// `karpenter_instance_vm_create_failure_total{..., phase, error_code}`.
    pub vm_create_failure: IntCounterVec,
    /// `karpenter_image_selection_error_count{family}`.
    pub image_selection_errors: IntCounterVec,
    /// `karpenter_azure_plan_price_dollars_per_hour{nodepool}`: ours.
    pub plan_price: GaugeVec,
    /// `karpenter_azure_plan_lower_bound_dollars_per_hour`: ours.
    pub plan_lower_bound: GaugeVec,
}

impl SchedulerMetrics {
    pub fn register(r: &Registrar) -> SchedulerMetrics {
        let run = &["controller", "scheduling_id"];
        let vm = ["image", "size", "zone", "capacity_type", "nodepool"];
        SchedulerMetrics {
            scheduling_duration: r
                .def(
                    "karpenter_scheduler_scheduling_duration_seconds",
                    "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
                    &["controller"],
                )
                .origin(SCHEDULING)
                .recorded("provisioning, per round: snapshot and solve", &["scheduling_finished"])
                .histogram(DURATION_BUCKETS),
            queue_depth: r
                .def(
                    "karpenter_scheduler_queue_depth",
                    "The number of pods currently waiting to be scheduled.",
                    run,
                )
                .origin(SCHEDULING)
                .recorded(
                    "provisioning: the pods of the round being solved, then 0 when it is done; one scheduling_id per round",
                    &["scheduling_started", "scheduling_finished"],
                )
                .leader_only()
                .gauge(),
            unfinished_work: r
                .def(
                    "karpenter_scheduler_unfinished_work_seconds",
                    "How many seconds of work has been done that is in progress and hasn't been observed by scheduling_duration_seconds.",
                    run,
                )
                .origin(SCHEDULING)
                .recorded(
                    "provisioning: while a round solves, how long it has been solving (updated every second); removed when it ends",
                    &["scheduling_started", "scheduling_progress"],
                )
                .leader_only()
                .gauge(),
            ignored_pods: r
                .def(
                    "karpenter_scheduler_ignored_pods_count",
                    "Number of pods ignored during scheduling by Karpenter",
                    &[],
                )
                .origin(SCHEDULING)
                .recorded(
                    "provisioning, per round: pods left out (set aside after a solver failure, or unreadable)",
                    &["set_ignored_pods"],
                )
                .leader_only()
                .gauge(),
            unschedulable_pods: r
                .def("karpenter_scheduler_unschedulable_pods_count", "The number of unschedulable Pods.", &["controller"])
                .origin(SCHEDULING)
                .recorded("provisioning, per solve", &["scheduling_finished"])
                .leader_only()
                .gauge(),
            pending_by_zone: r
                .def(
                    "karpenter_scheduler_pending_pods_by_effective_zone_count",
                    "Pending pods dimensioned by effective zone constraint, or the intersection of pod-level zone signals, volume topology (PVC zones), and topology constraints. Values: specific zone name (e.g., 'us-west-2a'), 'flexible' (multiple zones), or 'none' (no valid intersection).",
                    &["controller", "zone"],
                )
                .origin(SCHEDULING)
                .recorded(
                    "provisioning, per solve: the pending pods by the one zone their node affinity and volumes allow (`flexible`: several, `none`: no zone)",
                    &["pending_by_zone"],
                )
                .leader_only()
                .gauge(),
            pod_scheduling_decision: r
                .def(
                    "karpenter_pods_scheduling_decision_duration_seconds",
                    "The time it takes for Karpenter to first try to schedule a pod after it's been seen.",
                    &[],
                )
                .origin(Origin::Core("pkg/controllers/state/metrics.go"))
                .recorded(
                    "provisioning, per pod: from the pod watch seeing it waiting for capacity to the first plan that placed it (or found it unschedulable)",
                    &["pod_scheduling_decided"],
                )
                .histogram(DURATION_BUCKETS),
            cloudprovider_duration: r
                .def(
                    "karpenter_cloudprovider_duration_seconds",
                    "Duration of cloud provider method calls. Labeled by the controller, method name and provider.",
                    &["controller", "method", "provider"],
                )
                .origin(CLOUD)
                .recorded("every cloud call (`cloud::metered`)", &["cloud_call"])
                .histogram(DEFAULT_BUCKETS),
            cloudprovider_errors: r
                .def(
                    "karpenter_cloudprovider_errors_total",
                    "Total number of errors returned from CloudProvider calls.",
                    &["controller", "method", "provider", "error"],
                )
                .origin(CLOUD)
                .recorded("every failed cloud call, by error category", &["cloud_call"])
                .counter(),
            vm_create_start: r
                .def("karpenter_instance_vm_create_start_total", "Total number of VM creation operations started.", &vm)
                .origin(INSTANCE)
                .recorded("Azure provider, before the VM PUT", &["vm_create_started"])
                .counter(),
            vm_create_failure: r
                .def(
                    "karpenter_instance_vm_create_failure_total",
                    "Total number of VM creation failures.",
                    // The create's labels first, so failures join starts on them.
                    &["image", "size", "zone", "capacity_type", "nodepool", "phase", "error_code"],
                )
                .origin(INSTANCE)
                .recorded(
                    "Azure provider, a refused PUT (phase sync) or a failed operation (async)",
                    &["vm_create_failed"],
                )
                .counter(),
            image_selection_errors: r
                .def(
                    "karpenter_image_selection_error_count",
                    "The number of errors encountered while selecting an image.",
                    &["family"],
                )
                .origin(Origin::Azure("pkg/metrics/metrics.go"))
                .recorded(
                    "Azure provider, when no image of the AKSNodeClass's family can be resolved for a launch",
                    &["image_selection_failed"],
                )
                .counter(),
            plan_price: r
                .def(
                    "karpenter_azure_plan_price_dollars_per_hour",
                    "The $/hour of the NodeClaims the latest provisioning plan that launched any capacity created, by nodepool.",
                    &["nodepool"],
                )
                .recorded("provisioning: the $/hour of the latest plan that launched capacity", &["record_plan"])
                .leader_only()
                .gauge(),
            plan_lower_bound: r
                .def(
                    "karpenter_azure_plan_lower_bound_dollars_per_hour",
                    "A proven lower bound on the $/hour of the new capacity of the latest provisioning plan that launched any: no plan placing the same pods can cost less. Compare with sum(karpenter_azure_plan_price_dollars_per_hour).",
                    &[],
                )
                .recorded("provisioning: that plan's proven lower bound", &["record_plan"])
                .leader_only()
                .gauge(),
        }
    }
}

impl Metrics {
    /// A round of `pods` starts solving as run `id`: the controller's earlier runs are dropped.
    pub fn scheduling_started(&self, controller: &'static str, id: &str, pods: usize) {
        let s = &self.scheduler;
        for gauge in [&s.queue_depth, &s.unfinished_work] {
            remove_where(gauge, "controller", controller);
        }
        s.queue_depth.with_label_values(&[controller, id]).set(pods as f64);
        s.unfinished_work.with_label_values(&[controller, id]).set(0.0);
    }

    /// Run `id` has been solving for `took`.
    pub fn scheduling_progress(&self, controller: &'static str, id: &str, took: Duration) {
        self.scheduler.unfinished_work.with_label_values(&[controller, id]).set(took.as_secs_f64());
    }

    /// Run `id` ended after `took` with `unschedulable` pods left: its queue is empty.
    pub fn scheduling_finished(
        &self,
        controller: &'static str,
        id: &str,
        took: Duration,
        unschedulable: usize,
    ) {
        let s = &self.scheduler;
        let _ = s.unfinished_work.remove_label_values(&[controller, id]);
        s.queue_depth.with_label_values(&[controller, id]).set(0.0);
        s.scheduling_duration.with_label_values(&[controller]).observe(took.as_secs_f64());
        s.unschedulable_pods.with_label_values(&[controller]).set(unschedulable as f64);
    }

    /// The pending pods of a solve by effective zone (replacing the controller's earlier counts).
    pub fn pending_by_zone<'a>(
        &self,
        controller: &'static str,
        zones: impl IntoIterator<Item = (&'a str, usize)>,
    ) {
        let gauge = &self.scheduler.pending_by_zone;
        remove_where(gauge, "controller", controller);
        for (zone, pods) in zones {
            gauge.with_label_values(&[controller, zone]).set(pods as f64);
        }
    }

    pub fn set_ignored_pods(&self, pods: usize) {
        self.scheduler.ignored_pods.with_label_values(&[] as &[&str]).set(pods as f64);
    }

    /// One pod's first scheduling decision, `wait` after the controller first saw it pending.
    pub fn pod_scheduling_decided(&self, wait: Duration) {
        self.scheduler.pod_scheduling_decision.with_label_values(&[] as &[&str]).observe(wait.as_secs_f64());
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
        let s = &self.scheduler;
        s.cloudprovider_duration
            .with_label_values(&[controller, method, provider])
            .observe(took.as_secs_f64());
        if let Some(error) = error {
            s.cloudprovider_errors.with_label_values(&[controller, method, provider, error]).inc();
        }
    }

    pub fn vm_create_started(&self, vm: &VmCreate<'_>) {
        self.scheduler.vm_create_start.with_label_values(&vm.values()).inc();
    }

    /// `phase` is `sync` (the PUT was refused) or `async` (the operation failed); `error_code` a static
    /// category.
    pub fn vm_create_failed(&self, vm: &VmCreate<'_>, phase: &'static str, error_code: &'static str) {
        let [image, size, zone, capacity_type, nodepool] = vm.values();
        let labels = [image, size, zone, capacity_type, nodepool, phase, error_code];
        self.scheduler.vm_create_failure.with_label_values(&labels).inc();
    }

    /// No image of `family` (the AKSNodeClass's `imageFamily`) could be resolved.
    pub fn image_selection_failed(&self, family: &str) {
        self.scheduler.image_selection_errors.with_label_values(&[family]).inc();
    }
}
