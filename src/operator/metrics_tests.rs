//! Tests of [`super::Metrics`]: every metric is registered under upstream's name and type, with
//! upstream's label names, and the recorders put each value under the right label.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

/// One sample line of the text format: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Reads the sample lines of the text format (the test values contain no `"`, `,` or `}`).
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample line has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').expect("label=value");
                    (k.to_string(), v.trim_matches('"').to_string())
                })
                .collect();
            Sample { name: name.to_string(), labels, value: value.parse().expect("a number") }
        })
        .collect()
}

/// The `# TYPE` of each metric family.
fn types(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.to_string()))
        .collect()
}

fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(text)
        .into_iter()
        .find(|s| {
            s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

/// Records one sample in every metric, so every family shows up in the output.
fn record_everything(m: &Metrics) {
    m.nodeclaim_created("general");
    m.nodeclaim_terminated("general", "spot", "eastus-1");
    m.nodeclaim_disrupted("insufficient_capacity", "general", "on-demand", "graceful");
    m.nodeclaim_unhealthy_disrupted("ready", "general", "spot", "/CommunityGalleries/x/versions/1");
    m.node_created("general", "eastus-2");
    m.node_terminated("general", "eastus-2");
    m.nodes_allocatable
        .with_label_values(&["general", "Standard_D4s_v5", "on-demand", "eastus-1", "amd64", "linux", "cpu"])
        .set(3.86);
    m.nodepools_usage.with_label_values(&["memory", "general"]).set(1024.0);
    m.nodepools_limit.with_label_values(&["cpu", "general"]).set(100.0);
    m.pods_state
        .with_label_values(&["Running", "true", "general", "eastus-1", "spot", "Standard_D2s_v5"])
        .set(3);
    m.set_queue_depth(controller::PROVISIONER, 12);
    m.scheduling_finished(controller::PROVISIONER, Duration::from_millis(40), 2);
    m.pod_scheduling_decided(Duration::from_millis(1200));
    m.cloud_call("Create", "azure", Duration::from_millis(300), Some("InsufficientCapacityError"));
    let vm = VmCreate {
        image: "/CommunityGalleries/x/images/2204gen2containerd/versions/1",
        size: "Standard_D4s_v5",
        zone: "eastus-1",
        capacity_type: "on-demand",
        nodepool: "general",
    };
    m.vm_create_started(&vm);
    m.vm_create_failed(&vm, "async", "ZonalAllocationFailed");
    m.plan_price.with_label_values(&["general"]).set(0.384);
    m.plan_lower_bound.set(0.3);
    m.set_leading("karpenter-leader-election", true);
    m.set_pricing_age("static", Duration::from_secs(5));
    m.task_restarted("gc");
    m.unreadable_objects.with_label_values(&["NodeClaim"]).set(1);
    m.watch_failing.with_label_values(&["Pod"]).set(30.0);
    let d = &m.disruption;
    d.evaluation_duration.with_label_values(&["underutilized", "single"]).observe(0.2);
    d.decisions.with_label_values(&["replace", "underutilized", "single"]).inc();
    d.eligible_nodes.with_label_values(&["drifted"]).set(2.0);
    d.failed_validations.with_label_values(&["multi"]).inc();
    d.queue_failures.with_label_values(&["delete", "empty", "empty"]).inc();
    d.allowed_disruptions.with_label_values(&["general", "empty"]).set(1.0);
    m.disrupted_by_policy(["underutilized", "general", "spot", "Balanced", "graceful"], 3);
    d.cluster_price.set(1.5);
    d.repack_lower_bound.set(1.2);
}

/// Every metric the issue lists (plus ours), its type and its label names (histograms: of `_count`).
const EXPECTED: &[(&str, &str, &[&str])] = &[
    ("karpenter_nodeclaims_created_total", "counter", &["reason", "nodepool", "min_values_relaxed"]),
    ("karpenter_nodeclaims_terminated_total", "counter", &["nodepool", "capacity_type", "zone"]),
    (
        "karpenter_nodeclaims_disrupted_total",
        "counter",
        &["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
    ),
    (
        "karpenter_nodeclaims_unhealthy_disrupted_total",
        "counter",
        &["condition", "nodepool", "capacity_type", "image_id"],
    ),
    ("karpenter_nodes_created_total", "counter", &["nodepool", "zone"]),
    ("karpenter_nodes_terminated_total", "counter", &["nodepool", "zone"]),
    ("karpenter_nodes_allocatable", "gauge", &NODE_LABELS),
    ("karpenter_nodepools_usage", "gauge", &["resource_type", "nodepool"]),
    ("karpenter_nodepools_limit", "gauge", &["resource_type", "nodepool"]),
    ("karpenter_pods_state", "gauge", &POD_LABELS),
    ("karpenter_scheduler_scheduling_duration_seconds", "histogram", &["controller"]),
    ("karpenter_pods_scheduling_decision_duration_seconds", "histogram", &[]),
    ("karpenter_scheduler_queue_depth", "gauge", &["controller"]),
    ("karpenter_scheduler_unschedulable_pods_count", "gauge", &["controller"]),
    ("karpenter_cloudprovider_duration_seconds", "histogram", &["controller", "method", "provider"]),
    ("karpenter_cloudprovider_errors_total", "counter", &["controller", "method", "provider", "error"]),
    (
        "karpenter_instance_vm_create_start_total",
        "counter",
        &["image", "size", "zone", "capacity_type", "nodepool"],
    ),
    (
        "karpenter_instance_vm_create_failure_total",
        "counter",
        &["image", "size", "zone", "capacity_type", "nodepool", "phase", "error_code"],
    ),
    ("karpenter_cluster_state_node_count", "gauge", &[]),
    ("karpenter_cluster_state_synced", "gauge", &[]),
    ("karpenter_azure_plan_price_dollars_per_hour", "gauge", &["nodepool"]),
    ("karpenter_azure_plan_lower_bound_dollars_per_hour", "gauge", &[]),
    ("karpenter_azure_pricing_age_seconds", "gauge", &["source"]),
    ("karpenter_azure_task_restarts_total", "counter", &["task"]),
    ("karpenter_azure_unreadable_objects", "gauge", &["kind"]),
    ("karpenter_azure_watch_failing_seconds", "gauge", &["kind"]),
    ("karpenter_azure_credential_failing_seconds", "gauge", &[]),
    ("leader_election_master_status", "gauge", &["name"]),
    (
        "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
        "histogram",
        &["reason", "consolidation_type"],
    ),
    (
        "karpenter_voluntary_disruption_decisions_total",
        "counter",
        &["decision", "reason", "consolidation_type"],
    ),
    ("karpenter_voluntary_disruption_eligible_nodes", "gauge", &["reason"]),
    ("karpenter_voluntary_disruption_failed_validations_total", "counter", &["consolidation_type"]),
    (
        "karpenter_voluntary_disruption_queue_failures_total",
        "counter",
        &["decision", "reason", "consolidation_type"],
    ),
    ("karpenter_nodepools_allowed_disruptions", "gauge", &["nodepool", "reason"]),
    (
        "karpenter_pods_disruption_initiated_total",
        "counter",
        &["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
    ),
    ("karpenter_azure_cluster_price_dollars_per_hour", "gauge", &[]),
    ("karpenter_azure_cluster_repack_lower_bound_dollars_per_hour", "gauge", &[]),
];

#[test]
fn every_metric_is_registered_with_upstream_name_type_and_labels() {
    let m = Metrics::new();
    record_everything(&m);
    let text = m.render().unwrap();
    let types = types(&text);
    let samples = samples(&text);
    for (name, kind, labels) in EXPECTED {
        assert_eq!(types.get(*name).map(String::as_str), Some(*kind), "{name}:\n{text}");
        let series = if *kind == "histogram" { format!("{name}_count") } else { name.to_string() };
        let sample =
            samples.iter().find(|s| s.name == series).unwrap_or_else(|| panic!("{series} in\n{text}"));
        let mut got: Vec<&str> = sample.labels.keys().map(String::as_str).collect();
        let mut want = labels.to_vec();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "labels of {name}");
    }
    assert_eq!(types.len(), EXPECTED.len(), "no metric beyond the listed ones: {types:?}");
}

#[test]
fn cluster_state_scalars_show_before_anything_is_recorded() {
    let text = Metrics::new().render().unwrap();
    assert_eq!(value(&text, "karpenter_cluster_state_synced", &[]), Some(0.0), "{text}");
    assert_eq!(value(&text, "karpenter_cluster_state_node_count", &[]), Some(0.0));
    assert_eq!(value(&text, "karpenter_azure_plan_lower_bound_dollars_per_hour", &[]), Some(0.0));
    // Vectors without a series are left out, as upstream's are.
    assert!(!text.contains("karpenter_nodeclaims_created_total"), "{text}");
}

#[test]
fn recorders_put_values_under_the_right_labels() {
    let m = Metrics::new();
    m.nodeclaim_created("a");
    m.nodeclaim_created("a");
    m.nodeclaim_created("b");
    m.nodeclaim_provisioned("b", true);
    m.nodeclaim_disrupted("launch_timeout", "a", "spot", "eventual");
    m.vm_create_failed(
        &VmCreate {
            image: "img",
            size: "Standard_D2s_v5",
            zone: "eastus-3",
            capacity_type: "spot",
            nodepool: "a",
        },
        "sync",
        "SKUNotAvailable",
    );
    let text = m.render().unwrap();
    let created = |pool| {
        value(
            &text,
            "karpenter_nodeclaims_created_total",
            &[("nodepool", pool), ("reason", "provisioned"), ("min_values_relaxed", "false")],
        )
    };
    assert_eq!((created("a"), created("b")), (Some(2.0), Some(1.0)));
    let relaxed = &[("nodepool", "b"), ("reason", "provisioned"), ("min_values_relaxed", "true")];
    assert_eq!(value(&text, "karpenter_nodeclaims_created_total", relaxed), Some(1.0));
    let disrupted = [
        ("reason", "launch_timeout"),
        ("nodepool", "a"),
        ("capacity_type", "spot"),
        ("consolidation_policy", ""),
        ("termination_mode", "eventual"),
    ];
    assert_eq!(value(&text, "karpenter_nodeclaims_disrupted_total", &disrupted), Some(1.0), "{text}");
    let failure = [
        ("size", "Standard_D2s_v5"),
        ("zone", "eastus-3"),
        ("phase", "sync"),
        ("error_code", "SKUNotAvailable"),
    ];
    assert_eq!(value(&text, "karpenter_instance_vm_create_failure_total", &failure), Some(1.0), "{text}");
}

#[test]
fn scheduling_and_queue_depth_are_per_controller() {
    let m = Metrics::new();
    m.set_queue_depth(controller::PROVISIONER, 30);
    let text = m.render().unwrap();
    assert_eq!(value(&text, "karpenter_scheduler_queue_depth", &[("controller", "provisioner")]), Some(30.0));
    m.scheduling_finished(controller::PROVISIONER, Duration::from_millis(7), 4);
    m.set_queue_depth(controller::PROVISIONER, 0);
    let text = m.render().unwrap();
    let provisioner = [("controller", "provisioner")];
    assert_eq!(value(&text, "karpenter_scheduler_queue_depth", &provisioner), Some(0.0));
    assert_eq!(value(&text, "karpenter_scheduler_unschedulable_pods_count", &provisioner), Some(4.0));
    assert_eq!(
        value(&text, "karpenter_scheduler_scheduling_duration_seconds_count", &provisioner),
        Some(1.0)
    );
    // 7 ms lands in the 10 ms bucket of upstream's DurationBuckets, not in the 5 ms one.
    let bucket = |le| {
        value(
            &text,
            "karpenter_scheduler_scheduling_duration_seconds_bucket",
            &[("controller", "provisioner"), ("le", le)],
        )
    };
    assert_eq!((bucket("0.005"), bucket("0.01")), (Some(0.0), Some(1.0)));
}

#[test]
fn the_price_age_has_one_series_for_the_source_in_effect() {
    let m = Metrics::new();
    m.set_pricing_age("static", Duration::from_secs(90));
    let text = m.render().unwrap();
    assert_eq!(value(&text, "karpenter_azure_pricing_age_seconds", &[("source", "static")]), Some(90.0));
    m.set_pricing_age("live", Duration::from_millis(2500));
    let text = m.render().unwrap();
    assert_eq!(value(&text, "karpenter_azure_pricing_age_seconds", &[("source", "live")]), Some(2.5));
    assert_eq!(value(&text, "karpenter_azure_pricing_age_seconds", &[("source", "static")]), None, "{text}");
}

#[tokio::test]
async fn cloud_calls_carry_the_controller_they_run_in() {
    let m = Metrics::new();
    in_controller(controller::NODECLAIM_GC, async {
        tokio::task::yield_now().await;
        m.cloud_call("List", "azure", Duration::from_millis(2), None);
    })
    .await;
    m.cloud_call("Get", "azure", Duration::from_millis(2), Some("NodeClaimNotFoundError"));
    let text = m.render().unwrap();
    let list = [("controller", "nodeclaim.garbagecollection"), ("method", "List"), ("provider", "azure")];
    assert_eq!(value(&text, "karpenter_cloudprovider_duration_seconds_count", &list), Some(1.0), "{text}");
    assert_eq!(
        value(&text, "karpenter_cloudprovider_errors_total", &list),
        None,
        "no error, no error series"
    );
    let get = [("controller", ""), ("method", "Get"), ("error", "NodeClaimNotFoundError")];
    assert_eq!(value(&text, "karpenter_cloudprovider_errors_total", &get), Some(1.0), "{text}");
}

#[test]
fn the_process_metrics_are_one_registry() {
    assert!(std::ptr::eq(get(), get()));
    assert!(get().render().unwrap().contains("karpenter_cluster_state_synced"));
}

/// Upstream's metrics, restated from upstream's code (the file names each source).
const UPSTREAM: &str = include_str!("../../tests/fixtures/upstream-metrics.txt");

#[test]
fn every_upstream_metric_is_registered() {
    let m = Metrics::new();
    record_everything(&m);
    let types = types(&m.render().unwrap());
    let missing: Vec<&str> = UPSTREAM
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| !types.contains_key(*name))
        .collect();
    assert!(missing.is_empty(), "{} upstream metrics not registered:\n{}", missing.len(), missing.join("\n"));
}
