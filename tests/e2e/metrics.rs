//! The metrics and health servers of the `karpenter-azure controller` binary, end to end: the probes
//! answer, `/metrics` counts what the controller did while provisioning a Deployment (NodeClaims, Nodes,
//! VM creates, cloud calls, the state of the cluster), `promtool` accepts the page, and a real Prometheus
//! server scrapes it. Also: a METRICS_PORT that is taken stops start-up with one line naming it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_azure::model::resources::parse_resource_quantity;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};

use super::controller::Controller;
use super::lookups::{claims_of, nodeclaims};
use super::manifests::{self, LABEL_NODEPOOL};
use super::prometheus::{self, parse, promtool_check, sum, Prometheus, Sample};
use super::{cluster, objects, setup, wait};

const POOL: &str = "e2e-metrics";
const APP: &str = "web";
const REPLICAS: usize = 4;
/// Pool Ready, pods Running, metrics settled, Prometheus up: each within this.
const STAGE: Duration = Duration::from_secs(60);
/// Upstream's own metric names that `promtool check metrics` lints for a `_count` suffix on a gauge;
/// renaming them would break the dashboards they exist for, so these findings (and only these) pass.
const UPSTREAM_LINT_FINDINGS: &[&str] =
    &["karpenter_cluster_state_node_count", "karpenter_scheduler_unschedulable_pods_count"];

fn url(port: u16, path: &str) -> String {
    format!("http://127.0.0.1:{port}{path}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_provisioning_and_prometheus_scrapes_them() {
    let cluster = cluster::shared();
    let client = cluster.client().await;
    let controller = setup::controller(POOL).start(&client).await;
    let health = controller.health_probe_port();

    // (a) The probes: healthz at once, readyz once every watch has listed.
    controller
        .wait_until("/readyz to answer 200", STAGE, || async {
            match prometheus::get(&url(health, "/readyz")).await? {
                (200, _) => Ok(()),
                (status, body) => Err(format!("{status}: {body}")),
            }
        })
        .await;
    assert_eq!(prometheus::get(&url(health, "/healthz")).await.unwrap().0, 200);
    assert_eq!(prometheus::get(&url(health, "/nothing-here")).await.unwrap().0, 404);

    provision(&client, &controller).await;
    let claims = claims_of(&client, POOL).await.expect("listing NodeClaims");
    assert!(!claims.is_empty(), "the Deployment got NodeClaims");

    // (b) What the page says matches what happened.
    let text = controller
        .wait_until("/metrics to count the provisioning", Duration::from_secs(30), || async {
            let (status, text) = prometheus::get(&url(controller.metrics_port(), "/metrics")).await?;
            if status != 200 {
                return Err(format!("{status}: {text}"));
            }
            let samples = parse(&text)?;
            let (cpu, mut names) = pool_nodes(&client).await?;
            names.extend(claims.iter().filter_map(|c| c["metadata"]["name"].as_str().map(String::from)));
            let problems = check(&samples, claims.len(), cpu, &names);
            if problems.is_empty() {
                Ok(text)
            } else {
                Err(problems.join("; "))
            }
        })
        .await;

    // Kept with the logs, to read what a scrape looked like.
    let page = cluster.dir.join("logs").join(format!("metrics-{POOL}.txt"));
    std::fs::write(&page, &text).unwrap_or_else(|err| panic!("{}: {err}", page.display()));

    // (c) promtool reads the page; its only findings are upstream's names.
    let (code, printed) = promtool_check(&text);
    let findings: Vec<&str> = printed.lines().filter(|l| !l.trim().is_empty()).collect();
    let unexpected: Vec<&&str> =
        findings.iter().filter(|l| !UPSTREAM_LINT_FINDINGS.iter().any(|name| l.starts_with(name))).collect();
    assert!(
        code == 0 || (code == 3 && unexpected.is_empty()),
        "promtool check metrics exited {code} (1: unparsable, 3: lint findings); unexpected: {unexpected:?}\n{printed}"
    );

    // (d) A real Prometheus scrapes it.
    let target = format!("127.0.0.1:{}", controller.metrics_port());
    let server = Prometheus::start(&target, &cluster.dir.join("logs").join(format!("prometheus-{POOL}.log")));
    wait::until("the scrape target to be up", STAGE, || async {
        match server.target_health().await {
            Ok((health, _)) if health == "up" => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    let created = format!("sum(karpenter_nodeclaims_created_total{{nodepool=\"{POOL}\"}})");
    controller
        .wait_until(
            "Prometheus to have scraped the synced state and the created NodeClaims",
            STAGE,
            || async {
                let synced = server.query_one("karpenter_cluster_state_synced").await?;
                let created = server.query_one(&created).await?;
                if synced == 1.0 && created == claims.len() as f64 {
                    Ok(())
                } else {
                    Err(format!("synced {synced}, created {created}"))
                }
            },
        )
        .await;
    drop(server);
    println!(
        "e2e metrics: {} NodeClaims counted; promtool exit {code} ({} upstream-name findings); Prometheus \
         scraped the target; page in {}",
        claims.len(),
        findings.len(),
        page.display()
    );

    // Termination is counted too: the claims, their Nodes, the VM deletes.
    delete_claims(&client, &controller).await;
    controller
        .wait_until("/metrics to count the terminations", Duration::from_secs(30), || async {
            let (_, text) = prometheus::get(&url(controller.metrics_port(), "/metrics")).await?;
            let samples = parse(&text)?;
            let pool = [("nodepool", POOL)];
            let delete = [("controller", "nodeclaim.lifecycle"), ("method", "Delete")];
            let counts = [
                sum(&samples, "karpenter_nodeclaims_terminated_total", &pool),
                sum(&samples, "karpenter_nodes_terminated_total", &pool),
                sum(&samples, "karpenter_cloudprovider_duration_seconds_count", &delete),
            ];
            let n = claims.len() as f64;
            if counts[..2].iter().all(|c| *c == Some(n)) && counts[2].is_some_and(|c| c >= n) {
                Ok(())
            } else {
                Err(format!("claims, nodes terminated and VM deletes: {counts:?}, want {n}"))
            }
        })
        .await;
    delete_pool(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_metrics_port_stops_start_up_with_one_line_naming_the_setting() {
    let client = cluster::shared().client().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = taken.local_addr().unwrap().port();
    let controller = setup::controller("e2e-metrics-port-taken")
        .namespaces(&[])
        .env("METRICS_PORT", port.to_string())
        .start(&client)
        .await;
    let status =
        wait::until("the controller to exit with METRICS_PORT taken", Duration::from_secs(30), || async {
            controller.exit_status().ok_or_else(|| "still running".to_string())
        })
        .await;
    assert!(!status.success(), "{status}");
    let log = controller.log_tail(20);
    let errors: Vec<&str> = log.lines().filter(|l| l.starts_with("error: ")).collect();
    let want = format!("error: --metrics-port (METRICS_PORT): cannot listen on 0.0.0.0:{port}: ");
    assert!(errors.len() == 1 && errors[0].starts_with(&want), "want one line starting {want:?}:\n{log}");
    drop(taken);
}

/// What the page must say after the Deployment runs: a problem per mismatch. `names` are the objects
/// (NodeClaims, Nodes) no label value may be.
fn check(samples: &[Sample], claims: usize, cpu_cores: f64, names: &[String]) -> Vec<String> {
    let n = claims as f64;
    let pool = ("nodepool", POOL);
    let value = |name: &str, labels: &[(&str, &str)]| sum(samples, name, labels);
    let mut problems = Vec::new();
    let mut expect = |what: &str, got: Option<f64>, ok: &dyn Fn(f64) -> bool| {
        if !got.is_some_and(ok) {
            problems.push(format!("{what} = {got:?}"));
        }
    };
    let created = [pool, ("reason", "provisioned"), ("min_values_relaxed", "false")];
    expect("nodeclaims created", value("karpenter_nodeclaims_created_total", &created), &|v| v == n);
    expect("nodes created", value("karpenter_nodes_created_total", &[pool]), &|v| v == n);
    expect("VM creates started", value("karpenter_instance_vm_create_start_total", &[pool]), &|v| v == n);
    let create = [("controller", "nodeclaim.lifecycle"), ("method", "Create"), ("provider", "azure")];
    expect("cloud Create calls", value("karpenter_cloudprovider_duration_seconds_count", &create), &|v| {
        v >= n
    });
    expect("synced", value("karpenter_cluster_state_synced", &[]), &|v| v == 1.0);
    expect("node count", value("karpenter_cluster_state_node_count", &[]), &|v| v >= n);
    expect("usage nodes", value("karpenter_nodepools_usage", &[pool, ("resource_type", "nodes")]), &|v| {
        v == n
    });
    let running = [pool, ("phase", "Running"), ("scheduled", "true")];
    expect("running pods", value("karpenter_pods_state", &running), &|v| v == REPLICAS as f64);
    let cpu = [pool, ("resource_type", "cpu")];
    expect("allocatable cpu", value("karpenter_nodes_allocatable", &cpu), &|v| (v - cpu_cores).abs() < 1e-6);
    let provisioner = [("controller", "provisioner")];
    let solves = value("karpenter_scheduler_scheduling_duration_seconds_count", &provisioner);
    expect("solves", solves, &|v| v >= 1.0);
    // Each pod once, at its first decision; a pod kube-scheduler bound first never waited for one.
    let decisions = value("karpenter_pods_scheduling_decision_duration_seconds_count", &[]);
    expect("first scheduling decisions", decisions, &|v| (1.0..=REPLICAS as f64).contains(&v));
    expect("queue depth", value("karpenter_scheduler_queue_depth", &provisioner), &|v| v == 0.0);
    let price = value("karpenter_azure_plan_price_dollars_per_hour", &[pool]);
    expect("plan price", price, &|v| v > 0.0);
    let bound = value("karpenter_azure_plan_lower_bound_dollars_per_hour", &[]);
    let total = value("karpenter_azure_plan_price_dollars_per_hour", &[]).unwrap_or(0.0);
    expect("plan lower bound", bound, &|v| v > 0.0 && v <= total + 1e-9);
    let failures = value("karpenter_instance_vm_create_failure_total", &[pool]);
    if failures.is_some() {
        problems.push(format!("VM create failures = {failures:?}, none were injected"));
    }
    let values = samples.iter().flat_map(|s| s.labels.values());
    if let Some(leak) = values.into_iter().find(|v| names.contains(v)) {
        problems.push(format!("an object name is a label value: {leak}"));
    }
    problems
}

/// The allocatable cpu, in cores, of the Nodes of the pool as the API reports it, and their names.
async fn pool_nodes(client: &Client) -> Result<(f64, Vec<String>), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default().labels(&format!("{LABEL_NODEPOOL}={POOL}")))
        .await
        .map_err(|err| format!("listing Nodes: {err}"))?;
    let mut millis = 0;
    for node in &list.items {
        let cpu = node.status.as_ref().and_then(|s| s.allocatable.as_ref()).and_then(|a| a.get("cpu"));
        let cpu = cpu.ok_or_else(|| "a Node without allocatable cpu".to_string())?;
        millis += parse_resource_quantity("cpu", &cpu.0).map_err(|err| err.to_string())?;
    }
    let names = list.items.iter().filter_map(|n| n.metadata.name.clone()).collect();
    Ok((millis as f64 / 1000.0, names))
}

/// The AKSNodeClass and NodePool, Ready; then the Deployment, all of its pods Running.
async fn provision(client: &Client, controller: &Controller) {
    let pool = manifests::node_pool(POOL, Some("D"));
    setup::class_and_pool_ready(client, controller, &manifests::node_class(POOL), &pool).await;
    let deployment = manifests::deployment(POOL, APP, POOL, REPLICAS, "500m", "1Gi");
    objects::apply(client, &deployment).await.expect("applying the Deployment");
    setup::running_pods(client, POOL, &format!("app={APP}"), REPLICAS).within(STAGE).wait(controller).await;
}

/// Deletes the Deployment and the NodeClaims, and waits for the controller to finish the claims.
async fn delete_claims(client: &Client, controller: &Controller) {
    let background = DeleteParams::background();
    let deployment = manifests::deployment(POOL, APP, POOL, 0, "500m", "1Gi");
    if let Ok(api) = objects::api_for(client, &deployment).await {
        let _ = api.delete(APP, &background).await;
    }
    for claim in claims_of(client, POOL).await.unwrap_or_default() {
        let name = claim["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let _ = nodeclaims(client).delete(&name, &background).await;
    }
    // The next step waits for what the terminations counted, and says what it saw.
    let _ = wait::within(STAGE, || async {
        match claims_of(client, POOL).await {
            Ok(left) if left.is_empty() || controller.exit_status().is_some() => Ok(()),
            Ok(left) => Err(format!("{} NodeClaims left", left.len())),
            Err(err) => Err(err),
        }
    })
    .await;
}

/// Deletes the NodePool, the AKSNodeClass and the namespace.
async fn delete_pool(client: &Client) {
    let background = DeleteParams::background();
    for object in [manifests::node_pool(POOL, None), manifests::node_class(POOL)] {
        if let Ok(api) = objects::api_for(client, &object).await {
            let _ = api.delete(POOL, &background).await;
        }
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(POOL, &background).await;
}
