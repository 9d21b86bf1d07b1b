//! The scale benchmark (`make scale`): one controller on a kwok cluster grown step by step toward 5,000
//! nodes and 50,000 pods, through the controller's own provisioning (pending pods → NodeClaims → fake-ARM
//! VMs → kwok Nodes). Ignored by `cargo test`: it runs for many minutes and reports, it does not hold
//! the debug build to the targets.
//!
//! `SCALE_STEPS` lists the node counts to grow to (default `1000,2000,3000,4000,5000`: with the default
//! pods per node, every step is a burst of 10,000 pods), `SCALE_PODS_PER_NODE`
//! how many pods fill a node (default 10; every node is a Standard_D2s_v5 and the pods' requests are
//! sized to fill it with that many), `SCALE_STEP_TIMEOUT_S` how long a step may take to settle
//! (default 900). At each step the test creates the pods that take the cluster to the step's size, in
//! parallel from this process (a Deployment would be paced by kube-controller-manager's client rate),
//! and prints one row:
//! - the burst: how long creating its pods took, and from the last of them to kube-scheduler's verdict
//!   on the last pod (only a pod it marked unschedulable is the controller's to provision), to the last
//!   NodeClaim and to every pod bound, as this process's watches first saw them; and the controller's
//!   own wait per pod, from seeing it unschedulable to the plan that decided it
//!   (`karpenter_pods_scheduling_decision_duration_seconds`: mean, and the bucket bound of the longest;
//!   target: the batch window, `BATCH_MAX_DURATION` 10 s, plus 2 s);
//! - a consolidation pass at that size: mean and bound of the slowest of the passes on the settled
//!   cluster, from `karpenter_voluntary_disruption_decision_evaluation_duration_seconds` (target ≤ 1 s
//!   at 5,000 nodes);
//! - start-up at that size: the controller killed and started again, until `/readyz` answers 200 (every
//!   watch has listed);
//! - the controller's peak (`VmHWM`, since its previous start) and current (`VmRSS`) resident memory
//!   (target ≤ 400 MB at 50,000 pods);
//! - the requests per second the controller makes to the API server during the burst (from its first
//!   pod until the step settled) and at rest (over the passes above), as the API server counts them:
//!   a FlowSchema matching only the controller's ServiceAccount (at the priority level its requests get
//!   anyway) makes `apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}` the controller's
//!   own count (`apiserver_request_total` has no label naming the client);
//! - and a second line: the CPU seconds each process used during the burst (the control plane's, the
//!   controller's, and this process's, which serves the fake ARM), to tell where a step's time went.
//!
//! `make scale` builds the test (so the controller and the fake ARM) with the release profile; a plain
//! `cargo test` run measures the debug build, and the summary says which.
//!
//! Growth stops, and the test ends green with the rows so far, when the machine's control plane cannot
//! go further: a step that does not settle in time, pods the API server refuses to create, or a
//! component that exited. The reason printed names the component and what it answered. A controller
//! that exits, or a first step that never settles, fails the test.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{json, Value};

use super::controller::Controller;
use super::disruption_watch::fast_disruption_env;
use super::lookups::nodeclaims;
use super::manifests::{self, LABEL_NODEPOOL};
use super::prometheus::{self, Sample};
use super::tracker::{signed_seconds, Tracker};
use super::{cleanup, cluster, identity, objects, setup, wait};

/// Namespace, AKSNodeClass and NodePool.
const NAME: &str = "e2e-scale";
const APP: &str = "scale";
const INSTANCE_TYPE: &str = "Standard_D2s_v5";
/// What the pods of one node request together: under the allocatable of a Standard_D2s_v5 (2 vCPU,
/// 8 GiB, less the AKS reservations), over what one more pod would leave room for.
const NODE_CPU_MILLI: usize = 1800;
const NODE_MEMORY_MI: usize = 4000;
/// The FlowSchema that singles out the controller's requests.
const FLOW_SCHEMA: &str = "e2e-scale-controller";
/// The priority level the API server's default `service-accounts` FlowSchema gives the controller.
const PRIORITY_LEVEL: &str = "workload-low";
const DISPATCHED: &str = "apiserver_flowcontrol_dispatched_requests_total";
const PASS_HISTOGRAM: &str = "karpenter_voluntary_disruption_decision_evaluation_duration_seconds";
/// From the controller's pod watch seeing a pod wait for capacity to the plan that decided it.
const DECISION_HISTOGRAM: &str = "karpenter_pods_scheduling_decision_duration_seconds";

/// The batch window the controller runs with (`BATCH_MAX_DURATION` in `controller.rs`), plus 2 s.
const DECISION_TARGET_S: f64 = 12.0;
const PASS_TARGET_S: f64 = 1.0;
const RSS_TARGET_MB: f64 = 400.0;

/// Concurrent pod creations.
const CREATORS: usize = 16;
/// The burst has settled once every pod is bound and no NodeClaim appeared for this long.
const CLAIMS_STABLE: Duration = Duration::from_secs(10);
/// Passes measured on the settled cluster (one every 2 s with `fast_disruption_env`), and how long
/// they may take together.
const PASSES: f64 = 3.0;
const PASSES_WITHIN: Duration = Duration::from_secs(300);
/// How long a restarted controller may take to answer `/readyz` 200.
const STARTUP_WITHIN: Duration = Duration::from_secs(300);
/// Pod deletion at the end, before the NodeClaims go.
const PODS_GONE: Duration = Duration::from_secs(600);

/// One step's measurements.
struct Row {
    nodes: usize,
    pods: usize,
    burst: usize,
    create_s: f64,
    /// From the last pod created to kube-scheduler's verdict on the last pod (unschedulable or bound).
    marked_s: f64,
    decided_s: f64,
    /// The controller's own wait per pod, from its histogram: mean, and the bucket bound of the longest.
    decision_mean_s: f64,
    decision_max_s: f64,
    bound_s: f64,
    pass_mean_ms: f64,
    pass_max_s: f64,
    passes: f64,
    startup_s: f64,
    peak_rss_mib: f64,
    rss_mib: f64,
    startup_peak_mib: f64,
    rest_rps: f64,
    burst_rps: f64,
    /// CPU seconds each process spent from the burst's first pod until the step settled.
    burst_cpu: Vec<(&'static str, f64)>,
}

/// Why growth stopped.
struct Stop {
    step: usize,
    reason: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "grows the cluster toward 5,000 nodes for many minutes; run by `make scale`"]
async fn a_controller_grows_toward_5000_nodes() {
    let steps: Vec<usize> = env_or("SCALE_STEPS", "1000,2000,3000,4000,5000")
        .split(',')
        .map(|s| s.trim().parse().unwrap_or_else(|err| panic!("SCALE_STEPS entry {s:?}: {err}")))
        .collect();
    let per_node: usize = env_or("SCALE_PODS_PER_NODE", "10").parse().expect("SCALE_PODS_PER_NODE");
    let step_timeout =
        Duration::from_secs(env_or("SCALE_STEP_TIMEOUT_S", "900").parse().expect("SCALE_STEP_TIMEOUT_S"));
    assert!(per_node > 0 && steps.windows(2).all(|w| w[0] < w[1]), "SCALE_STEPS must grow");
    let (cpu, memory) =
        (format!("{}m", NODE_CPU_MILLI / per_node), format!("{}Mi", NODE_MEMORY_MI / per_node));

    let client = cluster::shared().client().await;
    objects::apply(&client, &flow_schema()).await.expect("applying the FlowSchema");
    let controller = setup::controller(NAME).envs(&fast_disruption_env()).start(&client).await;
    setup::class_and_pool_ready(&client, &controller, &manifests::node_class(NAME), &node_pool()).await;
    let pods = Tracker::default();
    let claims = Tracker::default();
    let watches = [
        pods.watch(Api::<Pod>::namespaced(client.clone(), NAME), watcher::Config::default(), "e2e scale"),
        claims.watch(
            nodeclaims(&client),
            watcher::Config::default().labels(&format!("{LABEL_NODEPOOL}={NAME}")),
            "e2e scale",
        ),
    ];
    println!(
        "e2e scale: steps {steps:?} nodes, {per_node} pods per node ({cpu} / {memory} each, {INSTANCE_TYPE} nodes), \
         {step_timeout:?} per step"
    );

    let mut rows: Vec<Row> = Vec::new();
    let mut stop: Option<Stop> = None;
    for &nodes in &steps {
        let step = Step {
            client: &client,
            controller: &controller,
            pods: &pods,
            claims: &claims,
            cpu: &cpu,
            memory: &memory,
        };
        match step.grow(nodes, nodes * per_node, rows.last().map_or(0, |r| r.pods), step_timeout).await {
            Ok(row) => {
                println!("{}\n{}", row_line(&row), cpu_line(&row));
                rows.push(row);
            }
            Err(reason) => {
                assert!(!rows.is_empty(), "the first step ({nodes} nodes) did not settle: {reason}");
                stop = Some(Stop { step: nodes, reason });
                break;
            }
        }
    }
    for watch in &watches {
        watch.abort();
    }

    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    println!("e2e scale: {per_node} pods per node, {INSTANCE_TYPE}; {profile} build of the controller and the fake ARM");
    println!("{}", header());
    for row in &rows {
        println!("{}", row_line(row));
    }
    for row in &rows {
        println!("{:>6} nodes: {}", row.nodes, cpu_line(row));
    }
    match &stop {
        Some(stop) => println!("e2e scale: growth stopped at the {}-node step: {}", stop.step, stop.reason),
        None => println!("e2e scale: every step settled"),
    }

    tear_down(&client, &controller).await;
    assert!(controller.exit_status().is_none(), "the controller exited");
}

/// What one step needs.
struct Step<'a> {
    client: &'a Client,
    controller: &'a Controller,
    pods: &'a Tracker,
    claims: &'a Tracker,
    cpu: &'a str,
    memory: &'a str,
}

impl Step<'_> {
    /// Grows the cluster from `from` to `to` pods (`nodes` nodes) and measures; `Err` says why the step
    /// did not settle.
    async fn grow(&self, nodes: usize, to: usize, from: usize, timeout: Duration) -> Result<Row, String> {
        let Step { client, controller, pods, claims, .. } = self;
        eprintln!("e2e scale: step {nodes} nodes: creating pods {from}..{to}");
        let dispatched_before = controller_requests(client).await?;
        let cpu_before = cpu_seconds(controller);
        let metrics_url = format!("http://127.0.0.1:{}/metrics", controller.metrics_port());
        let decisions_before = histogram(&scrape(&metrics_url).await?, DECISION_HISTOGRAM);
        let started = Instant::now();
        let deadline = started + timeout;
        self.create_pods(from, to).await.map_err(|err| format!("kube-apiserver refused pods: {err}"))?;
        let last_pod = Instant::now();
        let create_s = (last_pod - started).as_secs_f64();
        eprintln!("e2e scale: {} pods created in {create_s:.1} s", to - from);

        // Settled: every pod bound and no new NodeClaim for CLAIMS_STABLE.
        let claims_before = claims.snapshot().count;
        let settled = wait::within_every(
            deadline.saturating_duration_since(Instant::now()),
            Duration::from_secs(2),
            || async {
                if let Some(status) = controller.exit_status() {
                    panic!("the controller exited ({status}) while provisioning the {nodes}-node step");
                }
                let (p, c) = (pods.snapshot(), claims.snapshot());
                let quiet = c.last_arrival.is_some_and(|at| at.elapsed() >= CLAIMS_STABLE);
                if p.bound >= to && quiet {
                    Ok(())
                } else {
                    Err(format!(
                        "{} of {to} pods bound, {} NodeClaims (the last {} s ago)",
                        p.bound,
                        c.count,
                        c.last_arrival
                            .map_or("?".to_string(), |at| format!("{:.0}", at.elapsed().as_secs_f64()))
                    ))
                }
            },
        )
        .await;
        if let Err(seen) = settled {
            let progress = claims.snapshot().count - claims_before;
            assert!(
                progress > 0 || nodes == 0,
                "no NodeClaim created in {timeout:?} for {} pending pods: {seen}",
                to - from
            );
            return Err(format!(
                "not settled within {timeout:?} of the burst: {seen}; {}; controller: {}",
                control_plane_state(client).await,
                provisioning_state(&controller.log())
            ));
        }
        let settled_at = Instant::now();
        let dispatched_burst = controller_requests(client).await? - dispatched_before;
        let burst_cpu = cpu_used(&cpu_before, &cpu_seconds(controller));
        let decisions = histogram(&scrape(&metrics_url).await?, DECISION_HISTOGRAM).minus(&decisions_before);
        let (p, c) = (pods.snapshot(), claims.snapshot());
        let since_last_pod = |at: Option<Instant>| at.map_or(f64::NAN, |at| signed_seconds(last_pod, at));
        let marked_s = since_last_pod(p.last_marked);
        let decided_s = since_last_pod(c.last_arrival);
        let bound_s = since_last_pod(p.last_bound);
        let node_count = list_pool_nodes(client).await?;

        // Passes at rest, and the controller's requests meanwhile.
        let before = scrape(&metrics_url).await?;
        let rest_started = (Instant::now(), controller_requests(client).await?);
        let after = wait::within_every(PASSES_WITHIN, Duration::from_secs(1), || async {
            let now = scrape(&metrics_url).await?;
            let done = histogram(&now, PASS_HISTOGRAM).count - histogram(&before, PASS_HISTOGRAM).count;
            if done >= PASSES {
                Ok(now)
            } else {
                Err(format!("{done} passes"))
            }
        })
        .await
        .map_err(|seen| {
            format!("no {PASSES} consolidation passes within {PASSES_WITHIN:?} at {node_count} nodes: {seen}")
        })?;
        let rest_rps =
            (controller_requests(client).await? - rest_started.1) / rest_started.0.elapsed().as_secs_f64();
        let pass = histogram(&after, PASS_HISTOGRAM).minus(&histogram(&before, PASS_HISTOGRAM));
        let memory = controller.memory_kib()?;

        // Start-up at this size.
        controller.restart_with(&[]);
        let restarted = Instant::now();
        let ready = format!("http://127.0.0.1:{}/readyz", controller.health_probe_port());
        controller
            .wait_until("the restarted controller's /readyz to answer 200", STARTUP_WITHIN, || async {
                match prometheus::get(&ready).await? {
                    (200, _) => Ok(()),
                    (status, body) => Err(format!("{status}: {body}")),
                }
            })
            .await;
        let startup_s = restarted.elapsed().as_secs_f64();
        let startup_memory = controller.memory_kib()?;

        Ok(Row {
            nodes: node_count,
            pods: to,
            burst: to - from,
            create_s,
            marked_s,
            decided_s,
            decision_mean_s: decisions.sum / decisions.count.max(1.0),
            decision_max_s: decisions.max_bound(),
            bound_s,
            pass_mean_ms: 1000.0 * pass.sum / pass.count.max(1.0),
            pass_max_s: pass.max_bound(),
            passes: pass.count,
            startup_s,
            peak_rss_mib: memory.peak_rss as f64 / 1024.0,
            rss_mib: memory.rss as f64 / 1024.0,
            startup_peak_mib: startup_memory.peak_rss as f64 / 1024.0,
            rest_rps,
            burst_rps: dispatched_burst / (settled_at - started).as_secs_f64(),
            burst_cpu,
        })
    }

    /// Creates pods `from..to`, `CREATORS` at a time; each creation is tried three times.
    async fn create_pods(&self, from: usize, to: usize) -> Result<(), String> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NAME);
        let spec = manifests::pod_spec(NAME, self.cpu, self.memory);
        futures::stream::iter(from..to)
            .map(|i| {
                let (api, spec) = (api.clone(), spec.clone());
                async move {
                    let pod: Pod = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": format!("{APP}-{i}"), "namespace": NAME, "labels": {"app": APP}},
                        "spec": spec,
                    }))
                    .expect("a pod");
                    let mut last = String::new();
                    for attempt in 0..3u32 {
                        match api.create(&PostParams::default(), &pod).await {
                            Ok(_) => return Ok(()),
                            Err(kube::Error::Api(status)) if status.code == 409 => return Ok(()),
                            Err(err) => last = err.to_string(),
                        }
                        tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
                    }
                    Err(format!("creating pod {APP}-{i}: {last}"))
                }
            })
            .buffer_unordered(CREATORS)
            .try_collect::<Vec<()>>()
            .await
            .map(|_| ())
    }
}

/// A NodePool of Standard_D2s_v5 only, consolidating at once, so each step's nodes are known in
/// advance and every pass considers them all.
fn node_pool() -> Value {
    let mut pool = manifests::node_pool(NAME, None);
    pool["spec"]["template"]["spec"]["requirements"].as_array_mut().expect("requirements").push(
        json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]}),
    );
    pool["spec"]["disruption"] =
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"});
    pool
}

/// Every request of the controller's ServiceAccount, at the priority level it gets without this schema.
fn flow_schema() -> Value {
    json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
    "metadata": {"name": FLOW_SCHEMA},
    "spec": {
        "matchingPrecedence": 50,
        "priorityLevelConfiguration": {"name": PRIORITY_LEVEL},
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [{
            "subjects": [{"kind": "ServiceAccount",
                "serviceAccount": {"name": identity::SERVICE_ACCOUNT, "namespace": identity::NAMESPACE}}],
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                "clusterScope": true, "namespaces": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
        }]
    }})
}

/// The API server's count of the controller's requests so far.
async fn controller_requests(client: &Client) -> Result<f64, String> {
    let samples = apiserver_metrics(client).await?;
    Ok(prometheus::sum(&samples, DISPATCHED, &[("flow_schema", FLOW_SCHEMA)]).unwrap_or(0.0))
}

async fn apiserver_metrics(client: &Client) -> Result<Vec<Sample>, String> {
    let request = hyper::Request::get("/metrics").body(Vec::new()).expect("a request");
    let text = client.request_text(request).await.map_err(|err| format!("kube-apiserver /metrics: {err}"))?;
    prometheus::parse(&text)
}

async fn scrape(url: &str) -> Result<Vec<Sample>, String> {
    let (_, text) = prometheus::get(url).await?;
    prometheus::parse(&text)
}

async fn list_pool_nodes(client: &Client) -> Result<usize, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = ListParams::default().labels(&format!("{LABEL_NODEPOOL}={NAME}"));
    let list = nodes.list_metadata(&listed).await.map_err(|err| format!("listing nodes: {err}"))?;
    Ok(list.items.len())
}

/// The pass histogram summed over its label sets: observations, seconds, and per bucket bound.
#[derive(Clone, Debug, Default)]
struct Histogram {
    count: f64,
    sum: f64,
    buckets: Vec<(f64, f64)>,
}

impl Histogram {
    fn minus(&self, earlier: &Histogram) -> Histogram {
        let bucket = |le: f64| earlier.buckets.iter().find(|(l, _)| *l == le).map_or(0.0, |(_, v)| *v);
        Histogram {
            count: self.count - earlier.count,
            sum: self.sum - earlier.sum,
            buckets: self.buckets.iter().map(|&(le, v)| (le, v - bucket(le))).collect(),
        }
    }

    /// The smallest bucket bound holding every observation: a bound on the slowest one.
    fn max_bound(&self) -> f64 {
        self.buckets.iter().find(|(_, v)| *v >= self.count).map_or(f64::INFINITY, |(le, _)| *le)
    }
}

/// The histogram `name`, summed over its label sets.
fn histogram(samples: &[Sample], name: &str) -> Histogram {
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for s in samples.iter().filter(|s| s.name == format!("{name}_bucket")) {
        let Some(le) = s.labels.get("le").and_then(|le| le.parse::<f64>().ok()) else { continue };
        match buckets.iter_mut().find(|(l, _)| *l == le) {
            Some((_, total)) => *total += s.value,
            None => buckets.push((le, s.value)),
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    Histogram {
        count: prometheus::sum(samples, &format!("{name}_count"), &[]).unwrap_or(0.0),
        sum: prometheus::sum(samples, &format!("{name}_sum"), &[]).unwrap_or(0.0),
        buckets,
    }
}

/// Which control-plane processes still run, and how long the API server takes to answer `/readyz`.
async fn control_plane_state(client: &Client) -> String {
    let dir = &cluster::shared().dir;
    let mut parts: Vec<String> =
        ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
            .iter()
            .map(|component| {
                let pid = std::fs::read_to_string(dir.join(format!("{component}.pid"))).unwrap_or_default();
                let alive =
                    !pid.trim().is_empty() && std::path::Path::new(&format!("/proc/{}", pid.trim())).exists();
                format!("{component} {}", if alive { "running" } else { "EXITED" })
            })
            .collect();
    let asked = Instant::now();
    let request = hyper::Request::get("/readyz").body(Vec::new()).expect("a request");
    let answer = match tokio::time::timeout(Duration::from_secs(30), client.request_text(request)).await {
        Ok(Ok(body)) => body.trim().to_string(),
        Ok(Err(err)) => format!("error: {err}"),
        Err(_) => "no answer in 30 s".to_string(),
    };
    parts.push(format!("kube-apiserver /readyz: {answer} in {:.2?}", asked.elapsed()));
    parts.join(", ")
}

/// The controller's own account of its provisioning, from its log: its last scheduling plan (when, how
/// long its longest-waiting pod had waited, how long snapshot and solve took) and the last reason it gave
/// for waiting before the next one.
fn provisioning_state(log: &str) -> String {
    let mut plan = None;
    let mut waits = None;
    for line in log.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else { continue };
        match entry["message"].as_str() {
            Some("computed a scheduling plan") => plan = Some(entry),
            Some("provisioning waits for the cluster state") => waits = Some(entry),
            _ => {}
        }
    }
    let plan = plan.map_or("no scheduling plan logged".to_string(), |p| {
        format!(
            "last scheduling plan at {} ({} pods, {} newly decided, {} NodeClaims; its longest-waiting pod waited \
             {} ms; snapshot and solve {} ms)",
            p["time"].as_str().unwrap_or("?"),
            p["pods"],
            p["first_decided"],
            p["nodeclaims"],
            p["longest_decision_wait_ms"],
            p["elapsed_ms"]
        )
    });
    let waits = waits.map_or(String::new(), |w| {
        format!(
            "; last waited for the cluster state at {}: {}",
            w["time"].as_str().unwrap_or("?"),
            w["reason"]
        )
    });
    format!("{plan}{waits}")
}

fn header() -> String {
    let rss_target_mib = RSS_TARGET_MB * 1e6 / 1024.0 / 1024.0;
    let units = [
        String::new(),
        String::new(),
        "pods".to_string(),
        "s".to_string(),
        "s".to_string(),
        "s".to_string(),
        "s".to_string(),
        "s".to_string(),
        format!("s(≤{DECISION_TARGET_S})"),
        "ms".to_string(),
        format!("s (≤{PASS_TARGET_S})"),
        "s".to_string(),
        format!("MiB(≤{rss_target_mib:.0})"),
        "MiB".to_string(),
        "MiB".to_string(),
        "rest".to_string(),
        "burst".to_string(),
    ];
    let names = [
        "nodes",
        "pods",
        "burst",
        "create",
        "→marked",
        "→claims",
        "→bound",
        "wait mean",
        "wait max",
        "pass mean",
        "pass max",
        "startup",
        "peak RSS",
        "RSS",
        "start pk",
        "req/s",
        "req/s",
    ];
    let line = |cells: Vec<String>| {
        let widths = [6, 6, 6, 8, 8, 8, 8, 9, 11, 10, 9, 9, 10, 8, 9, 8, 9];
        cells.iter().zip(widths).map(|(c, w)| format!("{c:>w$}")).collect::<Vec<_>>().join(" ")
    };
    format!("{}\n{}", line(names.iter().map(|n| n.to_string()).collect()), line(units.to_vec()))
}

fn row_line(r: &Row) -> String {
    format!(
        "{:>6} {:>6} {:>6} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>11} {:>10.1} {:>9} {:>9.1} {:>10.0} {:>8.0} {:>9.0} {:>8.1} {:>9.1}   ({} passes)",
        r.nodes,
        r.pods,
        r.burst,
        r.create_s,
        r.marked_s,
        r.decided_s,
        r.bound_s,
        r.decision_mean_s,
        format!("≤{}", r.decision_max_s),
        r.pass_mean_ms,
        format!("≤{}", r.pass_max_s),
        r.startup_s,
        r.peak_rss_mib,
        r.rss_mib,
        r.startup_peak_mib,
        r.rest_rps,
        r.burst_rps,
        r.passes,
    )
}

/// Deletes the pods and waits for them to go, then the NodeClaims, NodePool, AKSNodeClass, namespace
/// and the FlowSchema.
async fn tear_down(client: &Client, controller: &Controller) {
    let started = Instant::now();
    let api: Api<Pod> = Api::namespaced(client.clone(), NAME);
    let listed = ListParams::default().labels(&format!("app={APP}"));
    // Each pod on its own and at once (grace period 0): one DeleteCollection of tens of thousands of
    // pods outlasts the API server's request timeout, and kwok confirms graceful deletions slowly.
    let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::background() };
    let left = wait::within_every(PODS_GONE, Duration::from_secs(2), || async {
        let names: Vec<String> = match api.list_metadata(&listed).await {
            Ok(list) => list.items.into_iter().filter_map(|p| p.metadata.name).collect(),
            Err(err) => return Err(err.to_string()),
        };
        if names.is_empty() {
            return Ok(());
        }
        let count = names.len();
        futures::stream::iter(names)
            .for_each_concurrent(CREATORS, |name| {
                let (api, now) = (api.clone(), now.clone());
                async move {
                    let _ = api.delete(&name, &now).await;
                }
            })
            .await;
        Err(format!("{count} pods were left"))
    })
    .await;
    if let Err(seen) = left {
        eprintln!("e2e scale: cleanup: {seen} after {PODS_GONE:?}");
    }
    cleanup::remove(client, NAME, &[], || controller.exit_status().is_none()).await;
    if let Ok(api) = objects::api_for(client, &flow_schema()).await {
        let _ = api.delete(FLOW_SCHEMA, &DeleteParams::background()).await;
    }
    eprintln!("e2e scale: cleanup took {:.0?}", started.elapsed());
}

/// The processes whose CPU time a row reports: the control plane's, as `hack/e2e-cluster.sh` records
/// their pids, then the controller and this test process (the fake ARM, the kwok Node registrations and
/// the pod creators).
const CONTROL_PLANE: [&str; 5] =
    ["kube-apiserver", "etcd", "kwok", "kube-scheduler", "kube-controller-manager"];

/// Each process's CPU seconds so far (user + system, from `/proc/<pid>/stat`); a process that cannot be
/// read is left out.
fn cpu_seconds(controller: &Controller) -> Vec<(&'static str, f64)> {
    let dir = &cluster::shared().dir;
    let recorded =
        |name: &str| std::fs::read_to_string(dir.join(format!("{name}.pid"))).ok()?.trim().parse().ok();
    let mut pids: Vec<(&'static str, Option<u32>)> =
        CONTROL_PLANE.iter().map(|&name| (name, recorded(name))).collect();
    pids.push(("controller", Some(controller.pid())));
    pids.push(("test+fake ARM", Some(std::process::id())));
    pids.into_iter().filter_map(|(name, pid)| Some((name, process_cpu_seconds(pid?)?))).collect()
}

/// utime + stime (fields 14 and 15 of `/proc/<pid>/stat`, after the parenthesised command name), in
/// the kernel's USER_HZ ticks, which are 1/100 s on Linux.
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // After the name, the state is field 3, so utime (14) and stime (15) are at indexes 11 and 12.
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// CPU seconds each process spent between two readings. A process restarted meanwhile (the controller
/// is, between steps) counts from zero.
fn cpu_used(before: &[(&'static str, f64)], after: &[(&'static str, f64)]) -> Vec<(&'static str, f64)> {
    after
        .iter()
        .map(|(name, now)| {
            let then = before.iter().find(|(b, _)| b == name).map_or(0.0, |(_, t)| *t);
            (*name, if *now >= then { now - then } else { *now })
        })
        .collect()
}

fn cpu_line(r: &Row) -> String {
    let total: f64 = r.burst_cpu.iter().map(|(_, s)| s).sum();
    let parts: Vec<String> = r.burst_cpu.iter().map(|(name, s)| format!("{name} {s:.0}")).collect();
    format!("CPU s during the burst: {} (total {total:.0})", parts.join(", "))
}

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}
