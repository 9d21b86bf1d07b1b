//! The chart's monitoring objects, rendered by the real helm and checked by promtool: the PodMonitor, the
//! Azure Monitor PodMonitor, the PrometheusRule (its alerts exactly those of the rule file, which
//! `promtool check rules` accepts and whose unit tests `promtool test rules` passes) and the Grafana
//! dashboards (ConfigMaps for the sidecar, every panel query valid PromQL).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::chart::{render, render_result};
use super::helm::find;
use super::prometheus::require;

const RULES: &str = "charts/karpenter-azure/files/prometheus-rules.yaml";
const RULE_TESTS: &str = "tests/prometheus/alerts.test.yaml";
const DASHBOARDS: [&str; 4] = ["capacity", "cost", "disruption", "performance"];

/// Runs promtool with `args`; panics with its output unless it succeeds.
fn promtool(args: &[&str]) -> String {
    let output = Command::new(require("promtool")).args(args).output().expect("promtool runs");
    let printed =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "promtool {args:?} failed:\n{printed}");
    printed
}

fn alert_names(groups: &Value) -> Vec<String> {
    let rules = groups
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default());
    rules.filter_map(|r| r["alert"].as_str().map(str::to_string)).collect()
}

/// The rule file as JSON.
fn rule_file() -> Value {
    let text = std::fs::read_to_string(RULES).expect("reading the rule file");
    serde_yaml::from_str(&text).expect("the rule file is YAML")
}

/// Every panel query of a dashboard.
fn panel_queries(dashboard: &Value) -> Vec<String> {
    let mut out = vec![];
    let mut stack: Vec<&Value> = dashboard["panels"].as_array().into_iter().flatten().collect();
    while let Some(panel) = stack.pop() {
        stack.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.extend(target["expr"].as_str().map(str::to_string));
        }
    }
    out
}

/// A dashboard query as Prometheus takes it: Grafana's `$__rate_interval` as a fixed window.
pub fn as_promql(query: &str) -> String {
    query.replace("$__rate_interval", "2m")
}

/// The chart's dashboards, by name.
pub fn dashboards() -> Vec<(String, Value)> {
    DASHBOARDS
        .iter()
        .map(|name| {
            let path = format!("charts/karpenter-azure/dashboards/{name}.json");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
            (name.to_string(), serde_json::from_str(&text).unwrap_or_else(|err| panic!("{path}: {err}")))
        })
        .collect()
}

#[test]
fn monitors_rules_and_dashboards_render_only_when_enabled() {
    let plain = render(&[]);
    for kind in ["PodMonitor", "PrometheusRule"] {
        assert!(!plain.iter().any(|d| d["kind"] == kind), "no {kind} unless enabled");
    }
    assert!(!plain.iter().any(|d| d["kind"] == "ConfigMap"), "no dashboards unless enabled");

    let docs = render(&[
        "podMonitor.enabled=true",
        "podMonitor.additionalLabels.release=prometheus",
        "podMonitor.endpointConfig.interval=15s",
        "azureMonitor.enabled=true",
        "prometheusRule.enabled=true",
        "prometheusRule.additionalLabels.release=prometheus",
        "dashboards.enabled=true",
        "dashboards.namespace=monitoring",
    ]);
    let selector = &find(&docs, "Deployment", None)["spec"]["selector"]["matchLabels"];
    let monitors: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "PodMonitor").collect();
    let of_group = |group: &str| {
        *monitors.iter().find(|m| m["apiVersion"] == group).unwrap_or_else(|| panic!("a {group} PodMonitor"))
    };
    let operator = of_group("monitoring.coreos.com/v1");
    assert_eq!(operator["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(operator["spec"]["selector"]["matchLabels"], *selector);
    assert_eq!(
        operator["spec"]["podMetricsEndpoints"],
        serde_json::json!([{"port": "http-metrics", "path": "/metrics", "interval": "15s"}])
    );
    let azure = of_group("azmonitoring.coreos.com/v1");
    assert_eq!(azure["spec"]["selector"]["matchLabels"], *selector);
    assert_eq!(azure["spec"]["podMetricsEndpoints"][0]["port"], "http-metrics");

    let rule = find(&docs, "PrometheusRule", None);
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(alert_names(&rule["spec"]["groups"]), alert_names(&rule_file()["groups"]));
    assert_eq!(
        rule["spec"]["groups"],
        rule_file()["groups"],
        "the PrometheusRule holds the rule file as it is"
    );

    let maps: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "ConfigMap").collect();
    assert_eq!(maps.len(), DASHBOARDS.len());
    for (name, dashboard) in dashboards() {
        let map = maps
            .iter()
            .find(|m| {
                m["metadata"]["name"].as_str().is_some_and(|n| n.ends_with(&format!("-dashboard-{name}")))
            })
            .unwrap_or_else(|| panic!("a ConfigMap for the {name} dashboard"));
        assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
        assert_eq!(map["metadata"]["namespace"], "monitoring");
        let data =
            map["data"][format!("karpenter-azure-{name}.json")].as_str().expect("the dashboard's JSON");
        let shipped: Value = serde_json::from_str(data).expect("the ConfigMap holds valid JSON");
        assert_eq!(shipped, dashboard, "the {name} dashboard ships as it is in the chart");
    }
}

#[test]
fn alerts_can_be_left_out_and_dashboards_chosen() {
    let docs = render(&[
        "prometheusRule.enabled=true",
        "prometheusRule.disabledAlerts={KarpenterNoLeader,KarpenterDisruptionBlocked}",
        "dashboards.enabled=true",
        "dashboards.names={cost}",
    ]);
    let names = alert_names(&find(&docs, "PrometheusRule", None)["spec"]["groups"]);
    assert!(
        !names.iter().any(|n| n == "KarpenterNoLeader" || n == "KarpenterDisruptionBlocked"),
        "{names:?}"
    );
    assert!(names.iter().any(|n| n == "KarpenterLaunchesFailing"), "{names:?}");
    let maps: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "ConfigMap").collect();
    assert_eq!(maps.len(), 1);
    let err = render_result(&["dashboards.enabled=true", "dashboards.names={network}"]).unwrap_err();
    assert!(err.contains("/dashboards/names/0"), "{err}");
}

#[test]
fn the_rule_file_passes_promtool_check_rules() {
    let out = promtool(&["check", "rules", RULES]);
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn the_alerts_fire_when_they_should_and_stay_silent_otherwise() {
    // Every alert has a test where it fires.
    let tests = std::fs::read_to_string(RULE_TESTS).expect("reading the alert tests");
    for name in alert_names(&rule_file()["groups"]) {
        assert!(
            tests.contains(&format!("alertname: {name}\n        exp_alerts:")),
            "no firing test for {name}"
        );
    }
    let dir = Path::new(RULE_TESTS).parent().expect("a directory");
    let file = Path::new(RULE_TESTS).file_name().expect("a file name").to_str().expect("UTF-8");
    let output = Command::new(require("promtool"))
        .args(["test", "rules", file])
        .current_dir(dir)
        .output()
        .expect("promtool runs");
    let printed =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && printed.contains("SUCCESS"), "promtool test rules:\n{printed}");
}

#[test]
fn every_dashboard_query_is_valid_promql() {
    // promtool parses a recording rule's expression: one rule per panel query.
    let mut rules = String::from("groups:\n  - name: dashboards\n    rules:\n");
    let mut count = 0;
    for (name, dashboard) in dashboards() {
        assert_eq!(
            dashboard["templating"]["list"][0]["name"], "datasource",
            "{name}: a data source variable"
        );
        let queries = panel_queries(&dashboard);
        assert!(queries.len() >= 6, "{name}: {} queries", queries.len());
        for query in queries {
            count += 1;
            let expr = serde_json::to_string(&as_promql(&query)).expect("a JSON string is YAML");
            rules.push_str(&format!("      - record: dashboard:{name}:{count}\n        expr: {expr}\n"));
        }
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("dashboards.yaml");
    std::fs::write(&path, rules).expect("writing the rules");
    let out = promtool(&["check", "rules", "--lint=none", path.to_str().expect("UTF-8")]);
    assert!(out.contains(&format!("SUCCESS: {count} rules found")), "{out}");
}

/// Upstream's published dashboard queries (`tests/fixtures/upstream/grafana-dashboard-queries.yaml`) with
/// their template variables filled in: every filter open, pods distributed by NodePool, the provisioner's
/// reconciles, and any scrape job for upstream's `job="karpenter"`.
pub fn upstream_dashboard_queries() -> Vec<(String, String)> {
    let path = "tests/fixtures/upstream/grafana-dashboard-queries.yaml";
    let text = std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{path}: {err}"));
    let fixture: Value = serde_yaml::from_str(&text).unwrap_or_else(|err| panic!("{path}: {err}"));
    let fill = |expr: &str| {
        let mut out = as_promql(expr);
        for var in ["$nodepool", "$zone", "$arch", "$capacity_type", "$instance_type"] {
            out = out.replace(var, ".*");
        }
        // `job="karpenter"` names upstream's own scrape job; any job here.
        out.replace("$distribution_filter", "nodepool")
            .replace("$controller", "provisioner")
            .replace("job=\"karpenter\"", "job=~\".+\"")
    };
    let queries = fixture["queries"].as_array().unwrap_or_else(|| panic!("{path}: no queries"));
    queries
        .iter()
        .map(|q| {
            let panel = format!(
                "{}: {}",
                q["dashboard"].as_str().unwrap_or_default(),
                q["panel"].as_str().unwrap_or_default()
            );
            (panel, fill(q["expr"].as_str().unwrap_or_default()))
        })
        .collect()
}

#[test]
fn upstreams_dashboard_queries_are_valid_promql_once_filled_in() {
    let queries = upstream_dashboard_queries();
    assert!(queries.len() >= 30, "{} queries", queries.len());
    let mut rules = String::from("groups:\n  - name: upstream\n    rules:\n");
    for (i, (panel, query)) in queries.iter().enumerate() {
        assert!(!query.contains('$'), "{panel}: a variable left in {query}");
        let expr = serde_json::to_string(query).expect("a JSON string is YAML");
        rules.push_str(&format!("      - record: upstream:{i}\n        expr: {expr}\n"));
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("upstream.yaml");
    std::fs::write(&path, rules).expect("writing the rules");
    promtool(&["check", "rules", "--lint=none", path.to_str().expect("UTF-8")]);
}
