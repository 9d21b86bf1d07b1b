//! The chart as rendered by `helm template` (no cluster needed): it lints, the controller pod runs
//! unprivileged and is probed on the health port, it stays off the nodes it provisions, and the metrics
//! Service, the optional ServiceMonitor and the PodDisruptionBudget come out as configured.

use serde_json::{json, Value};

use super::helm::{find, Helm, CHART, CI_VALUES};

/// The chart rendered with the CI values plus `sets`: `key=value` pairs for `--set`, or whole flags such
/// as `--set-json=key=0.5` (`--set` reads numbers with a fraction as strings).
pub fn render(sets: &[&str]) -> Vec<Value> {
    render_result(sets).unwrap_or_else(|err| panic!("{err}"))
}

/// Like [`render`], with helm's message as `Err`.
pub fn render_result(sets: &[&str]) -> Result<Vec<Value>, String> {
    let mut args = vec!["--values", CI_VALUES];
    for set in sets {
        if set.starts_with("--") {
            args.push(set);
        } else {
            args.extend(["--set", set]);
        }
    }
    Helm::offline().template(&args)
}

/// The pod template of the controller's Deployment.
pub fn pod_spec(docs: &[Value]) -> &Value {
    &find(docs, "Deployment", None)["spec"]["template"]["spec"]
}

/// The Deployment's selector labels, which every placement term must count.
fn selector(docs: &[Value]) -> &Value {
    &find(docs, "Deployment", None)["spec"]["selector"]["matchLabels"]
}

#[test]
fn the_chart_lints_strictly_with_the_ci_values() {
    let out = Helm::offline().run(&["lint", CHART, "--strict", "--values", CI_VALUES]);
    let out = out.unwrap_or_else(|err| panic!("{err}"));
    assert!(out.contains("1 chart(s) linted, 0 chart(s) failed"), "{out}");
}

#[test]
fn the_controller_pod_runs_unprivileged_and_is_probed_on_the_health_port() {
    let docs = render(&[]);
    let pod = pod_spec(&docs);
    assert_eq!(
        pod["securityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert_eq!(pod["automountServiceAccountToken"], true, "the controller calls the API server");
    assert_eq!(pod["serviceAccountName"], "karpenter-azure");
    assert_eq!(pod["terminationGracePeriodSeconds"], 60);
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let container = &containers[0];
    assert_eq!(container["args"], json!(["controller"]));
    assert_eq!(container["image"], "karpenter-azure:0.1.0", "the tag defaults to appVersion");
    assert_eq!(
        container["securityContext"],
        json!({"runAsNonRoot": true, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
               "capabilities": {"drop": ["ALL"]}})
    );
    assert_eq!(
        container["ports"],
        json!([{"name": "http-metrics", "containerPort": 8080, "protocol": "TCP"},
               {"name": "http-health", "containerPort": 8081, "protocol": "TCP"}])
    );
    assert_eq!(container["livenessProbe"]["httpGet"], json!({"path": "/healthz", "port": "http-health"}));
    assert_eq!(container["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": "http-health"}));
    assert!(container["resources"]["requests"]["memory"].is_string(), "{container:#}");

    let deployment = find(&docs, "Deployment", None);
    assert_eq!(deployment["spec"]["strategy"], json!({"rollingUpdate": {"maxUnavailable": 1}}));
    assert_eq!(deployment["spec"]["replicas"], 0, "the CI values run no pod");
    assert_eq!(
        render(&["replicas=2"]).iter().find(|d| d["kind"] == "Deployment").unwrap()["spec"]["replicas"],
        2
    );

    let pinned = render(&[&format!("image.digest=sha256:{}", "ab".repeat(32))]);
    let image = pod_spec(&pinned)["containers"][0]["image"].as_str().unwrap().to_string();
    assert_eq!(image, format!("karpenter-azure:0.1.0@sha256:{}", "ab".repeat(32)));
}

#[test]
fn the_controller_stays_off_the_nodes_it_provisions_and_spreads_over_nodes_and_zones() {
    let docs = render(&[]);
    let pod = pod_spec(&docs);
    let selector = selector(&docs).clone();
    assert_eq!(
        selector,
        json!({"app.kubernetes.io/name": "karpenter-azure", "app.kubernetes.io/instance": "karpenter-azure"})
    );
    assert_eq!(pod["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["tolerations"], json!([{"key": "CriticalAddonsOnly", "operator": "Exists"}]));
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!({"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}
        ]})
    );
    assert_eq!(
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!([{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": selector}}])
    );
    assert_eq!(
        pod["topologySpreadConstraints"],
        json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": selector}}])
    );

    // Workload identity: the webhook acts on the pod label and reads the ServiceAccount annotation.
    let labels = &find(&docs, "Deployment", None)["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["azure.workload.identity/use"], "true");
    let account = find(&docs, "ServiceAccount", None);
    assert_eq!(
        account["metadata"]["annotations"]["azure.workload.identity/client-id"],
        "00000000-0000-0000-0000-00000000c11e"
    );

    // A preferred term of the user's own gets the selector too; an explicit selector is kept.
    let preferred = "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]";
    let own = render(&[
        "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution=null",
        &format!("{preferred}.weight=50"),
        &format!("{preferred}.podAffinityTerm.topologyKey=kubernetes.io/hostname"),
        "topologySpreadConstraints[0].labelSelector.matchLabels.app=mine",
        "topologySpreadConstraints[0].maxSkew=2",
        "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
        "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
    ]);
    let anti = &pod_spec(&own)["affinity"]["podAntiAffinity"];
    assert_eq!(
        anti["preferredDuringSchedulingIgnoredDuringExecution"],
        json!([{"weight": 50, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": selector}
        }}])
    );
    assert!(anti.get("requiredDuringSchedulingIgnoredDuringExecution").is_none(), "{anti:#}");
    assert_eq!(
        pod_spec(&own)["topologySpreadConstraints"][0]["labelSelector"],
        json!({"matchLabels": {"app": "mine"}})
    );
}

#[test]
fn the_metrics_service_the_optional_service_monitor_and_the_disruption_budget() {
    let docs = render(&[]);
    let service = find(&docs, "Service", None);
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "http-metrics", "port": 8080, "targetPort": "http-metrics", "protocol": "TCP"}])
    );
    assert_eq!(service["spec"]["selector"], *selector(&docs));
    assert!(!docs.iter().any(|d| d["kind"] == "ServiceMonitor"), "no ServiceMonitor unless enabled");
    let budget = find(&docs, "PodDisruptionBudget", None);
    assert_eq!(budget["spec"], json!({"maxUnavailable": 1, "selector": {"matchLabels": selector(&docs)}}));
    assert!(!render(&["podDisruptionBudget.enabled=false"])
        .iter()
        .any(|d| d["kind"] == "PodDisruptionBudget"));

    let monitored = render(&[
        "serviceMonitor.enabled=true",
        "serviceMonitor.additionalLabels.release=prometheus",
        "serviceMonitor.endpointConfig.interval=15s",
        "controller.metrics.port=9090",
    ]);
    let monitor = find(&monitored, "ServiceMonitor", None);
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(monitor["spec"]["selector"]["matchLabels"], *selector(&monitored));
    assert_eq!(
        monitor["spec"]["endpoints"],
        json!([{"port": "http-metrics", "path": "/metrics", "interval": "15s"}])
    );
    let service = find(&monitored, "Service", None);
    assert_eq!(service["spec"]["ports"][0]["port"], 9090, "the Service follows the metrics port");
    assert_eq!(pod_spec(&monitored)["containers"][0]["ports"][0]["containerPort"], 9090);
}

#[test]
fn maps_a_user_nulls_out_render_as_empty() {
    // `--set x=null` removes a key, and templates that merge maps must not trip over the gap.
    let docs = render(&[
        "serviceAccount.annotations=null",
        "service.annotations=null",
        "additionalAnnotations=null",
        "podLabels=null",
        "serviceMonitor.enabled=true",
        "serviceMonitor.endpointConfig=null",
    ]);
    assert!(find(&docs, "ServiceAccount", None)["metadata"].get("annotations").is_none());
    assert!(find(&docs, "Service", None)["metadata"].get("annotations").is_none());
    assert_eq!(
        find(&docs, "ServiceMonitor", None)["spec"]["endpoints"],
        json!([{"port": "http-metrics", "path": "/metrics"}])
    );
    let labels = &find(&docs, "Deployment", None)["spec"]["template"]["metadata"]["labels"];
    assert_eq!(*labels, *selector(&docs), "only the selector labels are left");
}
