//! Disruption at scale: a 200-node cluster (kwok nodes, VMs in the fake ARM) scaled down by half. Prints
//! the controller's decision time per pass, from `karpenter_voluntary_disruption_decision_evaluation_duration_seconds`
//! (the slowest pass is bounded by the first histogram bucket holding every observation), against the
//! target of 1 s (this is the debug build the tests run; the time is reported, not asserted), and
//! checks its peak resident memory against 200 MB.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::controller::Controller;
use super::disruption_watch::{fast_disruption_env, pool_nodes};
use super::lookups::{self, condition_is_true, is_running};
use super::prometheus::{self, Sample};
use super::{cleanup, cluster, crds, manifests, objects};

const NAME: &str = "e2e-disr-200";
const APP: &str = "web";
const NODES: usize = 200;
const PASS_TARGET_S: f64 = 1.0;
const RSS_TARGET_KIB: u64 = 200 * 1000 * 1000 / 1024;

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

async fn running(client: &kube::Client, n: usize) -> Result<(), String> {
    let pods = lookups::list_pods(client, NAME, APP).await?;
    let up = pods.iter().filter(|p| is_running(p)).count();
    if up == n {
        Ok(())
    } else {
        Err(format!("{up} of {n} Running"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_node_cluster_is_scaled_down_with_passes_under_a_second_and_200_mb() {
    let cluster = cluster::shared();
    let client = cluster.client().await;
    crds::ensure_installed(&client, &[crds::NODEPOOLS, crds::NODECLAIMS, crds::AKSNODECLASSES]).await;
    objects::namespace(&client, NAME).await;
    let controller = Controller::start_with_env(cluster, &client, NAME, &fast_disruption_env()).await;
    let mut pool = manifests::node_pool(NAME, Some("D"));
    pool["spec"]["template"]["spec"]["requirements"]
        .as_array_mut()
        .expect("requirements")
        .push(json!({"key": "karpenter.azure.com/sku-cpu", "operator": "In", "values": ["2"]}));
    pool["spec"]["disruption"] =
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"});
    objects::apply(&client, &manifests::node_class(NAME)).await.expect("applying the AKSNodeClass");
    objects::apply(&client, &pool).await.expect("applying the NodePool");
    controller
        .wait_until("the NodePool to be Ready", Duration::from_secs(90), || async {
            let stored = objects::get(&client, &pool).await;
            if condition_is_true(&stored, "Ready") {
                Ok(())
            } else {
                Err(format!("{}", stored["status"]))
            }
        })
        .await;
    let started = Instant::now();
    objects::apply(&client, &deployment(NODES)).await.expect("applying the Deployment");
    controller.wait_until("200 pods Running", Duration::from_secs(600), || running(&client, NODES)).await;
    let provisioned = started.elapsed();
    let launched = prometheus::sum(
        &prometheus::parse(
            &prometheus::get(&format!("http://127.0.0.1:{}/metrics", controller.metrics_port()))
                .await
                .expect("metrics")
                .1,
        )
        .expect("the metrics parse"),
        "karpenter_nodeclaims_created_total",
        &[("nodepool", NAME)],
    )
    .unwrap_or(0.0) as usize;
    let nodes_before = pool_nodes(&client, NAME).await.expect("nodes").len();
    let metrics_url = format!("http://127.0.0.1:{}/metrics", controller.metrics_port());

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
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (_, text) = prometheus::get(&metrics_url).await.expect("metrics");
    let samples = prometheus::parse(&text).expect("the metrics parse");
    let (passes, total_s, max_s) = pass_times(&samples);
    let memory = controller.memory_kib().expect("the controller's memory");
    println!(
        "e2e disruption at scale: {nodes_before} nodes ({launched} claims launched) for {NODES} pods in {provisioned:.1?}; scaled to {} pods → \
         {after} nodes in {converged:.1?}; {passes} passes, mean {:.1} ms, slowest ≤ {max_s} s (target \
         {PASS_TARGET_S} s); peak RSS {} MiB (target 200 MB), RSS now {} MiB",
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
