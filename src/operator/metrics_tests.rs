//! Tests of [`super::Metrics`]: the recorders put each value under the right labels, leader-only gauges
//! clear, summaries and reconcile units render as upstream's. The registry against upstream's list is
//! `metrics_upstream_tests.rs`.

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

#[test]
fn leader_only_gauges_have_no_series_after_a_clear() {
    let m = Metrics::new();
    m.cluster.synced.with_label_values(&[] as &[&str]).set(1.0);
    let pod = ["web-1", "ns", "", "", "false", "", "", "", "", "", "Pending", "false", "false"];
    let mut pods_state = m.cluster.pods_state.rebuild();
    pods_state.set(&pod, 1.0);
    pods_state.finish();
    m.disruption.eligible_nodes.with_label_values(&["drifted"]).set(2.0);
    m.scheduling_started(controller::PROVISIONER, "run-1", 3);
    m.nodeclaim_created("general");
    m.set_leading("karpenter-leader-election", false);
    m.clear_leader_only();
    let text = m.render().unwrap();
    for gone in [
        "karpenter_cluster_state_synced",
        "karpenter_pods_state",
        "karpenter_voluntary_disruption_eligible_nodes",
        "karpenter_scheduler_queue_depth",
    ] {
        assert!(!text.contains(gone), "{gone} after a clear:\n{text}");
    }
    // Counters are the process's: kept.
    assert!(text.contains("karpenter_nodeclaims_created_total"), "{text}");
    assert!(text.contains("leader_election_master_status"), "{text}");
    // Every leader-only metric is a gauge describing the cluster or a decision.
    for doc in m.docs().iter().filter(|d| d.leader_only) {
        assert_eq!(doc.kind, Type::Gauge, "{}", doc.name);
    }
}

#[test]
fn vectors_without_a_series_are_left_out_as_upstream() {
    let text = Metrics::new().render().unwrap();
    assert!(!text.contains("karpenter_nodeclaims_created_total"), "{text}");
    assert!(!text.contains("karpenter_cluster_state_synced"), "{text}");
    // Upstream initialises the consolidation timeouts to 0.
    let timeouts = "karpenter_voluntary_disruption_consolidation_timeouts_total";
    assert_eq!(value(&text, timeouts, &[("consolidation_type", "multi")]), Some(0.0), "{text}");
}

#[test]
fn summaries_render_quantiles_sum_and_count() {
    let m = Metrics::new();
    m.node_terminated("general", "eastus-1", Some(Duration::from_secs(30)), Some(Duration::from_secs(3600)));
    let text = m.render().unwrap();
    let kind = types(&text).get("karpenter_nodes_termination_duration_seconds").cloned();
    assert_eq!(kind.as_deref(), Some("summary"));
    let q = |quantile| {
        let labels = [("nodepool", "general"), ("quantile", quantile)];
        value(&text, "karpenter_nodes_termination_duration_seconds", &labels)
    };
    assert_eq!((q("0"), q("0.5"), q("1")), (Some(30.0), Some(30.0), Some(30.0)), "{text}");
    assert_eq!(value(&text, "karpenter_nodes_termination_duration_seconds_count", &[]), Some(1.0));
    let lifetime = [("nodepool", "general"), ("le", "3600")];
    assert_eq!(value(&text, "karpenter_nodes_lifetime_duration_seconds_bucket", &lifetime), Some(1.0));
}

#[test]
fn build_info_names_the_build() {
    let m = Metrics::new();
    m.record_build_info();
    let text = m.render().unwrap();
    let sample = samples(&text).into_iter().find(|s| s.name == "karpenter_build_info").expect("build info");
    assert_eq!(sample.value, 1.0);
    assert_eq!(sample.labels["version"], env!("CARGO_PKG_VERSION"));
    assert!(sample.labels["goversion"].starts_with("rustc "), "{:?}", sample.labels);
    assert!(!sample.labels["goarch"].is_empty() && !sample.labels["commit"].is_empty());
}

#[test]
fn work_units_count_as_reconciles() {
    let active =
        |text: &str| value(text, "controller_runtime_active_workers", &[("controller", "test.unit")]);
    {
        let _ok = Work::begin("test.unit");
        let mut failed = Work::begin("test.unit");
        failed.failed();
        assert_eq!(active(&get().render().unwrap()), Some(2.0));
    }
    let text = get().render().unwrap();
    let total = |result| {
        value(&text, "controller_runtime_reconcile_total", &[("controller", "test.unit"), ("result", result)])
    };
    assert_eq!((total("success"), total("error")), (Some(1.0), Some(1.0)), "{text}");
    let errors = value(&text, "controller_runtime_reconcile_errors_total", &[("controller", "test.unit")]);
    assert_eq!((errors, active(&text)), (Some(1.0), Some(0.0)));
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
fn scheduling_runs_are_per_controller_and_run() {
    let m = Metrics::new();
    m.scheduling_started(controller::PROVISIONER, "run-1", 30);
    m.scheduling_progress(controller::PROVISIONER, "run-1", Duration::from_millis(1500));
    let text = m.render().unwrap();
    let run1 = [("controller", "provisioner"), ("scheduling_id", "run-1")];
    assert_eq!(value(&text, "karpenter_scheduler_queue_depth", &run1), Some(30.0));
    assert_eq!(value(&text, "karpenter_scheduler_unfinished_work_seconds", &run1), Some(1.5));
    m.scheduling_finished(controller::PROVISIONER, "run-1", Duration::from_millis(7), 4);
    let text = m.render().unwrap();
    assert_eq!(value(&text, "karpenter_scheduler_queue_depth", &run1), Some(0.0));
    assert_eq!(value(&text, "karpenter_scheduler_unfinished_work_seconds", &run1), None, "{text}");
    let provisioner = [("controller", "provisioner")];
    assert_eq!(value(&text, "karpenter_scheduler_unschedulable_pods_count", &provisioner), Some(4.0));
    let count = value(&text, "karpenter_scheduler_scheduling_duration_seconds_count", &provisioner);
    assert_eq!(count, Some(1.0));
    // 7 ms lands in the 10 ms bucket of upstream's DurationBuckets, not in the 5 ms one.
    let bucket = |le| {
        let labels = [("controller", "provisioner"), ("le", le)];
        value(&text, "karpenter_scheduler_scheduling_duration_seconds_bucket", &labels)
    };
    assert_eq!((bucket("0.005"), bucket("0.01")), (Some(0.0), Some(1.0)));
    // The next run replaces the previous one's series.
    m.scheduling_started(controller::PROVISIONER, "run-2", 5);
    let text = m.render().unwrap();
    assert_eq!(value(&text, "karpenter_scheduler_queue_depth", &run1), None, "{text}");
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
    get().nodeclaim_created("one-registry");
    assert!(get().render().unwrap().contains("karpenter_nodeclaims_created_total"));
}

#[cfg(target_os = "linux")]
#[test]
fn the_process_collector_reports_this_process() {
    let text = Metrics::new().render().unwrap();
    assert!(value(&text, "process_resident_memory_bytes", &[]).is_some_and(|v| v > 0.0), "{text}");
    assert!(value(&text, "process_start_time_seconds", &[]).is_some_and(|v| v > 0.0));
}
