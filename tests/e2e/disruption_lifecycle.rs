//! Disruption across time and failures, on a real control plane: NodeClaims past `expireAfter` are
//! replaced with the pods running again on new capacity; a controller killed in the middle of a
//! command leaves no node tainted and no replacement launched twice once it is back.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::controller::Controller;
use super::disruption::events;
use super::disruption_watch::{self as watch, fast_disruption_env, pool_nodes, simulate};
use super::lookups::{self, claims_of, condition_is_true, is_running};
use super::{cleanup, cluster, crds, manifests, objects, prometheus};

const APP: &str = "web";
const STAGE: Duration = Duration::from_secs(90);
const CONVERGE: Duration = Duration::from_secs(180);

fn deployment(name: &str, replicas: usize) -> Value {
    manifests::deployment(name, APP, name, replicas, "700m", "1Gi")
}

fn names(claims: &[Value]) -> BTreeSet<String> {
    claims.iter().filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string)).collect()
}

async fn running_count(client: &kube::Client, name: &str) -> usize {
    lookups::list_pods(client, name, APP)
        .await
        .map(|p| p.iter().filter(|p| is_running(p)).count())
        .unwrap_or(0)
}

async fn ready_pool(controller: &Controller, client: &kube::Client, pool: &Value) {
    controller
        .wait_until("the NodePool to be Ready", STAGE, || async {
            let stored = objects::get(client, pool).await;
            if condition_is_true(&stored, "Ready") {
                Ok(())
            } else {
                Err(format!("{}", stored["status"]))
            }
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_nodeclaims_are_replaced_and_their_pods_run_again() {
    const NAME: &str = "e2e-disr-expire";
    let cluster = cluster::shared();
    let client = cluster.client().await;
    crds::ensure_installed(&client, &[crds::NODEPOOLS, crds::NODECLAIMS, crds::AKSNODECLASSES]).await;
    objects::namespace(&client, NAME).await;
    let controller = Controller::start_with_env(cluster, &client, NAME, &fast_disruption_env()).await;
    let mut pool = manifests::node_pool(NAME, Some("D"));
    pool["spec"]["template"]["spec"]["expireAfter"] = json!("1m");
    objects::apply(&client, &manifests::node_class(NAME)).await.expect("applying the AKSNodeClass");
    objects::apply(&client, &pool).await.expect("applying the NodePool");
    ready_pool(&controller, &client, &pool).await;
    objects::apply(&client, &deployment(NAME, 2)).await.expect("applying the Deployment");
    controller
        .wait_until("2 pods Running", STAGE, || async {
            let n = running_count(&client, NAME).await;
            if n == 2 {
                Ok(())
            } else {
                Err(format!("{n} Running"))
            }
        })
        .await;
    let first = names(&claims_of(&client, NAME).await.expect("claims"));
    let started = Instant::now();
    let replaced_after = controller
        .wait_until("the first NodeClaims to expire and the pods to run on new ones", CONVERGE, || async {
            let claims = claims_of(&client, NAME).await?;
            let live = names(&claims);
            let n = running_count(&client, NAME).await;
            let fresh = live.iter().filter(|c| !first.contains(*c)).count();
            if live.is_disjoint(&first) && n == 2 && fresh > 0 {
                Ok(started.elapsed())
            } else {
                Err(format!("claims {live:?} (first {first:?}), {n} Running"))
            }
        })
        .await;
    let expired_events = events(&client, "NodeClaim", first.iter().next().expect("a claim"), "Expired").await;
    let (_, text) = prometheus::get(&format!("http://127.0.0.1:{}/metrics", controller.metrics_port()))
        .await
        .expect("metrics");
    let samples = prometheus::parse(&text).expect("the metrics parse");
    let expired = prometheus::sum(
        &samples,
        "karpenter_nodeclaims_disrupted_total",
        &[("reason", "expired"), ("nodepool", NAME)],
    );
    println!(
        "e2e expiration: {} claim(s) with expireAfter 1m replaced, pods Running again {replaced_after:.1?} after \
         they were first Running; events {expired_events:?}; nodeclaims_disrupted_total{{reason=expired}} = {expired:?}",
        first.len()
    );
    assert!(expired.is_some_and(|v| v >= first.len() as f64), "expired claims not counted: {expired:?}");
    assert!(expired_events.iter().any(|e| e.contains("expireAfter")), "{expired_events:?}");
    cleanup::remove(&client, NAME, &[deployment(NAME, 0)], || controller.exit_status().is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_mid_command_leaves_nothing_tainted_or_launched_twice() {
    const NAME: &str = "e2e-disr-kill";
    let cluster = cluster::shared();
    let client = cluster.client().await;
    crds::ensure_installed(&client, &[crds::NODEPOOLS, crds::NODECLAIMS, crds::AKSNODECLASSES]).await;
    objects::namespace(&client, NAME).await;
    let controller = Controller::start_with_env(cluster, &client, NAME, &fast_disruption_env()).await;
    let pool = watch::node_pool(NAME, "0s", json!([{"nodes": "100%"}]));
    objects::apply(&client, &manifests::node_class(NAME)).await.expect("applying the AKSNodeClass");
    objects::apply(&client, &pool).await.expect("applying the NodePool");
    ready_pool(&controller, &client, &pool).await;
    objects::apply(&client, &deployment(NAME, 12)).await.expect("applying the Deployment");
    controller
        .wait_until("12 pods Running", STAGE, || async {
            let n = running_count(&client, NAME).await;
            if n == 12 {
                Ok(())
            } else {
                Err(format!("{n} Running"))
            }
        })
        .await;
    objects::apply(&client, &deployment(NAME, 3)).await.expect("scaling down");
    // Kill the moment a command has tainted a node that is not yet being deleted.
    let tainted = controller
        .wait_until("a node tainted by a disruption command", STAGE, || async {
            let nodes = pool_nodes(&client, NAME).await?;
            nodes
                .iter()
                .find(|n| watch::is_tainted(n) && n.metadata.deletion_timestamp.is_none())
                .and_then(|n| n.metadata.name.clone())
                .ok_or_else(|| format!("{} nodes, none tainted", nodes.len()))
        })
        .await;
    let claims_at_kill = names(&claims_of(&client, NAME).await.expect("claims"));
    controller.kill_and_restart();
    let restarted = Instant::now();
    let region = controller.fake().location().to_string();
    let plan = simulate(vec![manifests::node_class(NAME), pool.clone(), deployment(NAME, 3)], &region);
    let planned = plan["price_per_hour"].as_f64().expect("a planned price");
    let planned_nodes = plan["nodeclaims"].as_array().map_or(0, Vec::len);
    let settled = controller
        .wait_until(
            "the pool to settle: no taint, no claim without a node, at most the plan's nodes + 1",
            CONVERGE,
            || async {
                let nodes = pool_nodes(&client, NAME).await?;
                let claims = claims_of(&client, NAME).await?;
                let busy = nodes.iter().filter(|n| watch::is_disrupting(n)).count();
                let unlaunched = claims.iter().filter(|c| c["status"]["nodeName"].as_str().is_none()).count();
                let n = running_count(&client, NAME).await;
                if busy == 0 && unlaunched == 0 && n == 3 && nodes.len() <= planned_nodes + 1 {
                    Ok(nodes.len())
                } else {
                    Err(format!(
                        "{} nodes ({busy} disrupting), {} claims ({unlaunched} without node), {n} Running",
                        nodes.len(),
                        claims.len()
                    ))
                }
            },
        )
        .await;
    let claims_after = names(&claims_of(&client, NAME).await.expect("claims"));
    let launched_since = claims_after.difference(&claims_at_kill).count();
    println!(
        "e2e leader kill: killed while {tainted} was tainted ({} claims); after restart settled in {:.1?} on {settled} \
         node(s) (plan: {planned_nodes} at ${planned:.3}/h), {launched_since} claim(s) launched since the kill",
        claims_at_kill.len(),
        restarted.elapsed()
    );
    assert!(launched_since <= planned_nodes, "more replacements than the plan needs: {claims_after:?}");
    cleanup::remove(&client, NAME, &[deployment(NAME, 0)], || controller.exit_status().is_none()).await;
}
