//! The metrics and health servers of the `karpenter-azure controller` binary, end to end: the probes
//! answer, `/metrics` counts what the controller did while provisioning a Deployment (NodeClaims, Nodes,
//! VM creates, cloud calls, the state of the cluster, every Node and pod by name), `promtool` accepts
//! the page, a real Prometheus server scrapes it, and draining and terminating the nodes is counted.
//! Across the scrapes of the run every upstream metric (`tests/fixtures/upstream-metrics.txt`) has a
//! sample, but those that need an event this run does not cause, each named with the event and where
//! it is exercised. Also: a METRICS_PORT that is taken stops start-up with one line naming it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
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
/// Upstream's metrics, restated from upstream's code.
const UPSTREAM: &str = include_str!("../fixtures/upstream-metrics.txt");

/// The upstream metrics a provisioning and a termination do not record, with the event each needs and
/// where that event is exercised.
const NOT_EXERCISED: &[(&str, &str)] = &[
    (
        "karpenter_nodeclaims_disrupted_total",
        "a disruption or a lifecycle timeout (disruption, provisioning e2e)",
    ),
    ("karpenter_pods_disruption_initiated_total", "a voluntary disruption (disruption e2e)"),
    ("karpenter_voluntary_disruption_decisions_total", "a disruption command (disruption e2e)"),
    ("karpenter_voluntary_disruption_decisions_by_nodepool_total", "a disruption command (disruption e2e)"),
    ("karpenter_voluntary_disruption_failed_validations_total", "a command its validation refuses"),
    ("karpenter_voluntary_disruption_queue_failures_total", "a command that fails while executing"),
    ("karpenter_consolidation_score", "a consolidation move in a Balanced NodePool"),
    ("karpenter_consolidation_moves_total", "a consolidation move (disruption e2e)"),
    ("karpenter_nodeclaims_unhealthy_disrupted_total", "node repair (repair e2e)"),
    ("karpenter_instance_vm_create_failure_total", "a failing VM create (fault injection, provisioning e2e)"),
    ("karpenter_image_selection_error_count", "an AKSNodeClass with no image for the sizes"),
    ("karpenter_nodepools_cost_tracker_errors_total", "a NodeClaim whose offering has no price"),
    ("karpenter_cloudprovider_errors_total", "a failing cloud call"),
    ("controller_runtime_reconcile_panics_total", "a panicking reconcile"),
    ("controller_runtime_reconcile_errors_total", "a failing reconcile"),
    ("karpenter_scheduler_unfinished_work_seconds", "a solve that runs past a second (removed when it ends)"),
    ("operator_node_termination_current_time_seconds", "a Node deleted with a finalizer left on it"),
    ("operator_node_termination_duration_seconds", "a Node deleted with a finalizer left on it"),
    ("operator_nodepool_termination_current_time_seconds", "a NodePool deleted with a finalizer on it"),
    ("operator_nodepool_termination_duration_seconds", "a NodePool deleted with a finalizer on it"),
    (
        "operator_status_condition_transition_seconds",
        "a NodeClaim or NodePool condition seen to change status",
    ),
    ("operator_nodeclaim_status_condition_transition_seconds", "a NodeClaim condition seen to change status"),
    ("operator_nodepool_status_condition_transition_seconds", "a NodePool condition seen to change status"),
    ("operator_node_status_condition_transition_seconds", "a Node condition seen to change status"),
    (
        "operator_aksnodeclass_status_condition_transition_seconds",
        "an AKSNodeClass condition seen to change status",
    ),
    (
        "operator_aksnodeclass_termination_current_time_seconds",
        "an AKSNodeClass still deleting at a scrape (its finalizer goes as soon as no NodeClaim uses it)",
    ),
    ("leader_election_master_status", "leader election, off here (leader e2e)"),
];

fn upstream_names() -> Vec<&'static str> {
    UPSTREAM
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

fn url(port: u16, path: &str) -> String {
    format!("http://127.0.0.1:{port}{path}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_provisioning_and_prometheus_scrapes_them() {
    let cluster = cluster::shared();
    let client = cluster.client().await;
    let controller = setup::controller(POOL).start(&client).await;
    let health = controller.health_probe_port();
    let seen = Scraper::start(controller.metrics_port());

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
            let (cpu, names) = pool_nodes(&client).await?;
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
    // Upstream's own names (a `_count` gauge, a counter without `_total`) keep upstream's spelling: the
    // dashboards exist for them. Any other finding fails.
    let upstream = upstream_names();
    let unexpected: Vec<&&str> =
        findings.iter().filter(|l| !upstream.iter().any(|name| l.starts_with(&format!("{name} ")))).collect();
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
    // One node of the pool, by name, through Prometheus: the per-node series carry node_name.
    let per_node = format!("count(karpenter_nodes_allocatable{{nodepool=\"{POOL}\",resource_type=\"cpu\"}})");
    controller
        .wait_until(
            "Prometheus to have scraped the synced state and the created NodeClaims",
            STAGE,
            || async {
                let synced = server.query_one("karpenter_cluster_state_synced").await?;
                let created = server.query_one(&created).await?;
                let nodes = server.query_one(&per_node).await?;
                let n = claims.len() as f64;
                if synced == 1.0 && created == n && nodes == n {
                    Ok(())
                } else {
                    Err(format!("synced {synced}, created {created}, per-node series {nodes}"))
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

    // Termination is counted too: the drains and evictions (the claims go while their pods run), the
    // claims, their Nodes, the VM deletes, how long each took.
    delete_claims(&client, &controller).await;
    let text = controller
        .wait_until("/metrics to count the terminations", Duration::from_secs(30), || async {
            let (_, text) = prometheus::get(&url(controller.metrics_port(), "/metrics")).await?;
            let samples = parse(&text)?;
            let pool = [("nodepool", POOL)];
            let delete = [("controller", "nodeclaim.lifecycle"), ("method", "Delete")];
            let counts = [
                sum(&samples, "karpenter_nodeclaims_terminated_total", &pool),
                sum(&samples, "karpenter_nodes_terminated_total", &pool),
                sum(&samples, "karpenter_nodeclaims_termination_duration_seconds_count", &pool),
                sum(&samples, "karpenter_nodes_termination_duration_seconds_count", &pool),
                sum(&samples, "karpenter_nodes_lifetime_duration_seconds_count", &pool),
                sum(&samples, "karpenter_cloudprovider_duration_seconds_count", &delete),
                sum(&samples, "karpenter_nodes_drained_total", &pool),
                sum(&samples, "karpenter_pods_eviction_requests_total", &[("code", "200")]),
            ];
            let n = claims.len() as f64;
            let gone = samples.iter().all(|s| s.labels.get("namespace").map(String::as_str) != Some(POOL));
            if counts[..5].iter().all(|c| *c == Some(n)) && counts[5..].iter().all(|c| c.is_some_and(|c| c >= n.min(1.0))) && gone {
                Ok(text)
            } else {
                Err(format!("terminated claims and nodes, durations, deletes, drains, evictions: {counts:?}, want {n}; the pods' series gone: {gone}"))
            }
        })
        .await;
    // Deleted Nodes and pods leave no series behind.
    let samples = parse(&text).expect("a page");
    let stale: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.labels.get("node_name").is_some_and(|n| names_of_nodes(&claims).contains(n)))
        .collect();
    assert!(stale.is_empty(), "series of deleted Nodes: {stale:?}");
    delete_pool(&client).await;
    // The AKSNodeClass's termination is seen by the status metrics.
    tokio::time::sleep(Duration::from_secs(6)).await;

    let seen = seen.stop();
    let excused: BTreeSet<&str> = NOT_EXERCISED.iter().map(|(name, _)| *name).collect();
    let missing: Vec<&str> =
        upstream_names().into_iter().filter(|n| !seen.contains(*n) && !excused.contains(n)).collect();
    let exercised_anyway: Vec<&&str> = excused.iter().filter(|n| seen.contains(**n)).collect();
    println!(
        "e2e metrics: {} of {} upstream metrics had a sample; not exercised here: {}; of those seen anyway: {exercised_anyway:?}",
        upstream_names().iter().filter(|n| seen.contains(**n)).count(),
        upstream_names().len(),
        NOT_EXERCISED.len()
    );
    assert!(missing.is_empty(), "upstream metrics with no sample across the run: {missing:?}");
}

/// The Node names of `claims`.
fn names_of_nodes(claims: &[serde_json::Value]) -> BTreeSet<String> {
    claims.iter().filter_map(|c| c["status"]["nodeName"].as_str().map(String::from)).collect()
}

/// Scrapes a page every 500 ms in the background, gathering the names of the metrics that had a sample
/// (a histogram or summary under its own name).
struct Scraper {
    seen: Arc<Mutex<BTreeSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Scraper {
    fn start(port: u16) -> Scraper {
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let gathered = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok((200, text)) = prometheus::get(&url(port, "/metrics")).await {
                    let samples = parse(&text).unwrap_or_default();
                    let mut seen = gathered.lock().unwrap_or_else(|p| p.into_inner());
                    for s in samples {
                        let base = ["_bucket", "_sum", "_count"]
                            .iter()
                            .find_map(|suffix| s.name.strip_suffix(suffix))
                            .unwrap_or(&s.name);
                        seen.insert(base.to_string());
                        seen.insert(s.name);
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Scraper { seen, task }
    }

    fn stop(self) -> BTreeSet<String> {
        self.task.abort();
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
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

/// What the page must say after the Deployment runs: a problem per mismatch. `names` are the pool's
/// Nodes.
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
    let running = samples
        .iter()
        .filter(|s| {
            s.name == "karpenter_pods_state"
                && s.labels.get("owner").is_some_and(|o| o.contains("/replicasets/"))
        })
        .filter(|s| {
            [pool, ("phase", "Running"), ("scheduled", "true")]
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .count();
    expect("running pods", Some(running as f64), &|v| v == REPLICAS as f64);
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
    // Every Node of the pool has its own series, labelled with its name.
    for node in names {
        let cpu = [("node_name", node.as_str()), ("resource_type", "cpu")];
        if value("karpenter_nodes_allocatable", &cpu).is_none() {
            problems.push(format!("no karpenter_nodes_allocatable of Node {node}"));
        }
    }
    let pods = samples.iter().filter(|s| {
        s.name == "karpenter_pods_state"
            && s.labels.get("namespace").map(String::as_str) == Some(POOL)
            && s.labels.get("name").is_some_and(|n| n.starts_with(&format!("{APP}-")))
    });
    if pods.clone().count() != REPLICAS
        || pods.clone().any(|s| s.value != 1.0 || s.labels["owner"].is_empty())
    {
        problems
            .push(format!("karpenter_pods_state of the Deployment's pods: {:?}", pods.collect::<Vec<_>>()));
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

/// The DaemonSet on the pool's nodes.
fn daemonset() -> serde_json::Value {
    let mut spec = manifests::pod_spec(POOL, "100m", "64Mi");
    spec["containers"][0]["resources"]["limits"] = serde_json::json!({"cpu": "200m"});
    serde_json::json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": POOL},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}}, "spec": spec}}})
}

/// The AKSNodeClass and NodePool (with limits), Ready; then a DaemonSet and the Deployment (its pods with
/// limits), all of its pods Running.
async fn provision(client: &Client, controller: &Controller) {
    let mut pool = manifests::node_pool(POOL, Some("D"));
    pool["spec"]["limits"] = serde_json::json!({"cpu": "1000"});
    setup::class_and_pool_ready(client, controller, &manifests::node_class(POOL), &pool).await;
    objects::apply(client, &daemonset()).await.expect("applying the DaemonSet");
    let mut deployment = manifests::deployment(POOL, APP, POOL, REPLICAS, "500m", "1Gi");
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    container["resources"]["limits"] = serde_json::json!({"cpu": "1"});
    objects::apply(client, &deployment).await.expect("applying the Deployment");
    setup::running_pods(client, POOL, &format!("app={APP}"), REPLICAS).within(STAGE).wait(controller).await;
}

/// Deletes the NodeClaims while the Deployment's pods run (so they are drained), then the Deployment
/// and any claim made meanwhile for its evicted pods, and waits for the controller to finish them.
async fn delete_claims(client: &Client, controller: &Controller) {
    let background = DeleteParams::background();
    let delete_all = || async {
        for claim in claims_of(client, POOL).await.unwrap_or_default() {
            let name = claim["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let _ = nodeclaims(client).delete(&name, &background).await;
        }
    };
    delete_all().await;
    let drained = wait::within(STAGE, || async {
        let (_, text) = prometheus::get(&url(controller.metrics_port(), "/metrics")).await?;
        let evicted = sum(&parse(&text)?, "karpenter_pods_eviction_requests_total", &[("code", "200")]);
        evicted.filter(|n| *n >= 1.0).ok_or_else(|| "no eviction yet".to_string())
    })
    .await;
    if let Err(err) = drained {
        println!("e2e metrics: no eviction counted: {err}");
    }
    for workload in [manifests::deployment(POOL, APP, POOL, 0, "500m", "1Gi"), daemonset()] {
        if let Ok(api) = objects::api_for(client, &workload).await {
            let _ = api.delete(workload["metadata"]["name"].as_str().unwrap_or_default(), &background).await;
        }
    }
    delete_all().await;
    // The next step waits for what the terminations counted, and says what it saw.
    let _ = wait::within(STAGE, || async {
        match claims_of(client, POOL).await {
            Ok(left) if left.is_empty() || controller.exit_status().is_some() => Ok(()),
            Ok(left) => {
                // A claim made for an evicted pod before the Deployment went.
                delete_all().await;
                Err(format!("{} NodeClaims left", left.len()))
            }
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
