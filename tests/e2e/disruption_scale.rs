//! Disruption at scale: a 200-node cluster (kwok nodes, VMs in the fake ARM) scaled down by half. Prints
//! the controller's decision time per pass, from `karpenter_voluntary_disruption_decision_evaluation_duration_seconds`
//! (the slowest pass is bounded by the first histogram bucket holding every observation), against the
//! target of 1 s (this is the debug build the tests run; the time is reported, not asserted), and
//! checks its peak resident memory against 240 MB: the debug build with the per-node and per-pod
//! metric series upstream's dashboards need (measured at 205 MiB).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::disruption_watch::{fast_disruption_env, pool_nodes};
use super::prometheus::{self, Sample};
use super::{cleanup, cluster, manifests, objects, setup};

const NAME: &str = "e2e-disr-200";
const APP: &str = "web";
const NODES: usize = 200;
const PASS_TARGET_S: f64 = 1.0;
const RSS_TARGET_KIB: u64 = 240 * 1000 * 1000 / 1024;
/// Passes measured on the settled cluster (one every 2 s with `fast_disruption_env`).
const SETTLED_PASSES: f64 = 5.0;

fn deployment(replicas: usize) -> Value {
    // One pod per 2-vCPU node.
    manifests::deployment(NAME, APP, NAME, replicas, "1200m", "1Gi")
}

/// (observations, sum of seconds, the smallest bucket bound holding every observation).
fn pass_times(samples: &[Sample]) -> (f64, f64, f64) {
    let name = "karpenter_voluntary_disruption_decision_evaluation_duration_seconds";
    let count = prometheus::sum(samples, &format!("{name}_count"), &[]).unwrap_or(0.0);
    let total = prometheus::sum(samples, &format!("{name}_sum"), &[]).unwrap_or(0.0);
    let mut bounds: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.name == format!("{name}_bucket"))
        .filter_map(|s| Some((s.labels.get("le")?.parse::<f64>().ok()?, s.value)))
        .collect();
    bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Buckets are per label set; sum them per bound.
    let mut merged: Vec<(f64, f64)> = vec![];
    for (le, v) in bounds {
        match merged.last_mut() {
            Some((l, total)) if *l == le => *total += v,
            _ => merged.push((le, v)),
        }
    }
    let max = merged.iter().find(|(_, v)| *v >= count).map_or(f64::INFINITY, |(le, _)| *le);
    (count, total, max)
}

async fn scrape(url: &str) -> Result<Vec<Sample>, String> {
    let (_, text) = prometheus::get(url).await?;
    prometheus::parse(&text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_node_cluster_is_scaled_down_with_passes_under_a_second_and_240_mb() {
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).envs(&fast_disruption_env()).start(&client).await;
    let mut pool = manifests::node_pool(NAME, Some("D"));
    pool["spec"]["template"]["spec"]["requirements"]
        .as_array_mut()
        .expect("requirements")
        .push(json!({"key": "karpenter.azure.com/sku-cpu", "operator": "In", "values": ["2"]}));
    pool["spec"]["disruption"] =
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"});
    setup::class_and_pool_ready(&client, &controller, &manifests::node_class(NAME), &pool).await;
    let started = Instant::now();
    objects::apply(&client, &deployment(NODES)).await.expect("applying the Deployment");
    let app = format!("app={APP}");
    setup::running_pods(&client, NAME, &app, NODES).within(Duration::from_secs(600)).wait(&controller).await;
    let provisioned = started.elapsed();
    let metrics_url = format!("http://127.0.0.1:{}/metrics", controller.metrics_port());
    let samples = scrape(&metrics_url).await.expect("the metrics");
    let launched = prometheus::sum(&samples, "karpenter_nodeclaims_created_total", &[("nodepool", NAME)])
        .unwrap_or(0.0) as usize;
    let nodes_before = pool_nodes(&client, NAME).await.expect("nodes").len();

    let scaled = Instant::now();
    objects::apply(&client, &deployment(NODES / 2)).await.expect("scaling down");
    let after = controller
        .wait_until("the empty half of the nodes to go", Duration::from_secs(600), || async {
            let nodes = pool_nodes(&client, NAME).await?;
            let live = nodes.iter().filter(|n| n.metadata.deletion_timestamp.is_none()).count();
            if live <= NODES / 2 && nodes.len() == live {
                Ok(live)
            } else {
                Err(format!("{} nodes, {live} not being deleted", nodes.len()))
            }
        })
        .await;
    let converged = scaled.elapsed();
    // A few passes on the settled cluster, which find nothing (the slowest kind).
    let passes_at_convergence = pass_times(&scrape(&metrics_url).await.expect("the metrics")).0;
    let samples = controller
        .wait_until(
            &format!("{SETTLED_PASSES} disruption passes on the settled cluster"),
            Duration::from_secs(60),
            || async {
                let samples = scrape(&metrics_url).await?;
                let passes = pass_times(&samples).0 - passes_at_convergence;
                if passes >= SETTLED_PASSES {
                    Ok(samples)
                } else {
                    Err(format!("{passes} passes"))
                }
            },
        )
        .await;
    let (passes, total_s, max_s) = pass_times(&samples);
    let memory = controller.memory_kib().expect("the controller's memory");
    println!(
        "e2e disruption at scale: {nodes_before} nodes ({launched} claims launched) for {NODES} pods in {provisioned:.1?}; scaled to {} pods → \
         {after} nodes in {converged:.1?}; {passes} passes, mean {:.1} ms, slowest ≤ {max_s} s (target \
         {PASS_TARGET_S} s); peak RSS {} MiB (target 240 MB), RSS now {} MiB",
        NODES / 2,
        1000.0 * total_s / passes.max(1.0),
        memory.peak_rss / 1024,
        memory.rss / 1024
    );
    // Cleaned up before the checks, so a miss does not leave 100 pods for the next test's controller.
    cleanup::remove(&client, NAME, &[deployment(0)], || controller.exit_status().is_none()).await;
    assert!(nodes_before >= NODES, "expected one node per pod, got {nodes_before}");
    assert!(launched <= NODES + NODES / 20, "{launched} NodeClaims launched for {NODES} one-pod nodes");
    assert!(memory.peak_rss <= RSS_TARGET_KIB, "peak RSS {} KiB over the target", memory.peak_rss);
}
