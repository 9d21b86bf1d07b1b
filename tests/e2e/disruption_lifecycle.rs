//! Disruption across time and failures, on a real control plane: NodeClaims past `expireAfter` are
//! replaced with the pods running again on new capacity; a controller killed in the middle of a
//! command leaves no node tainted and no replacement launched twice once it is back.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::disruption::events;
use super::disruption_watch::{self as watch, fast_disruption_env, pool_nodes};
use super::lookups::{self, claims_of, is_running};
use super::{cleanup, cluster, manifests, objects, prometheus, setup};
use fake_azure::arm::{Fault, Target};

const APP: &str = "web";
const REPLACEMENT_FOR: &str = "karpenter.azure.com/replacement-for";
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_nodeclaims_are_replaced_and_their_pods_run_again() {
    const NAME: &str = "e2e-disr-expire";
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).envs(&fast_disruption_env()).start(&client).await;
    let mut pool = manifests::node_pool(NAME, Some("D"));
    pool["spec"]["template"]["spec"]["expireAfter"] = json!("1m");
    setup::class_and_pool_ready(&client, &controller, &manifests::node_class(NAME), &pool).await;
    objects::apply(&client, &deployment(NAME, 2)).await.expect("applying the Deployment");
    setup::running_pods(&client, NAME, &format!("app={APP}"), 2).within(STAGE).wait(&controller).await;
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
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).envs(&fast_disruption_env()).start(&client).await;
    let pool = watch::node_pool(NAME, "0s", json!([{"nodes": "100%"}]));
    setup::class_and_pool_ready(&client, &controller, &manifests::node_class(NAME), &pool).await;
    objects::apply(&client, &deployment(NAME, 8)).await.expect("applying the Deployment");
    setup::running_pods(&client, NAME, &format!("app={APP}"), 8).within(STAGE).wait(&controller).await;
    // From now on a VM takes 20 s to come up, so a replacement keeps its command in flight.
    controller.fake().inject(Fault::SlowProvisioning { delay_ms: 20_000, target: Target::default() });
    objects::apply(&client, &deployment(NAME, 1)).await.expect("scaling down");
    // Kill while a command waits for its replacement: a candidate tainted, a replacement launching.
    let tainted = controller
        .wait_until("a candidate tainted while its replacement launches", CONVERGE, || async {
            let nodes = pool_nodes(&client, NAME).await?;
            let claims = claims_of(&client, NAME).await?;
            let launching = claims.iter().any(|c| {
                c["metadata"]["annotations"][REPLACEMENT_FOR].is_string() && c["status"]["nodeName"].is_null()
            });
            let candidate = nodes
                .iter()
                .find(|n| watch::is_tainted(n) && n.metadata.deletion_timestamp.is_none())
                .and_then(|n| n.metadata.name.clone());
            match candidate {
                Some(node) if launching => Ok(node),
                _ => Err(format!(
                    "{} nodes, {} claims, replacement launching: {launching}",
                    nodes.len(),
                    claims.len()
                )),
            }
        })
        .await;
    let claims_at_kill = names(&claims_of(&client, NAME).await.expect("claims"));
    controller.kill_and_restart();
    let restarted = Instant::now();
    let settled = controller
        .wait_until("the command to finish: candidate gone, no taint, the pod Running", CONVERGE, || async {
            let nodes = pool_nodes(&client, NAME).await?;
            let busy = nodes.iter().filter(|n| watch::is_disrupting(n)).count();
            let candidate_left = nodes.iter().any(|n| n.metadata.name.as_deref() == Some(tainted.as_str()));
            let n = running_count(&client, NAME).await;
            if busy == 0 && !candidate_left && n == 1 {
                Ok(nodes.len())
            } else {
                Err(format!(
                    "{} nodes ({busy} disrupting, candidate left: {candidate_left}), {n} Running",
                    nodes.len()
                ))
            }
        })
        .await;
    controller.fake().clear_faults();
    let claims_after = names(&claims_of(&client, NAME).await.expect("claims"));
    let launched_since: Vec<_> = claims_after.difference(&claims_at_kill).collect();
    println!(
        "e2e leader kill: killed while {tainted} was tainted and its replacement launching ({} claims); the \
         restarted controller resumed the command: candidate gone and the pod Running {:.1?} after the restart, \
         {settled} node(s) left, {} claim(s) launched since the kill",
        claims_at_kill.len(),
        restarted.elapsed(),
        launched_since.len()
    );
    assert!(launched_since.is_empty(), "replacements launched again after the restart: {launched_since:?}");

    // A disrupted taint no command owns (left by a crash before any replacement existed) is removed.
    let node = pool_nodes(&client, NAME).await.expect("nodes")[0].metadata.name.clone().expect("named");
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let taint = json!({"spec": {"taints": [{"key": watch::TAINT_DISRUPTED, "effect": "NoSchedule"}]}});
    let params = kube::api::PatchParams::default();
    nodes.patch(&node, &params, &kube::api::Patch::Merge(taint)).await.expect("tainting by hand");
    let tainted_at = Instant::now();
    controller
        .wait_until("the unowned disrupted taint to be removed", STAGE, || async {
            let n = nodes.get(&node).await.map_err(|e| e.to_string())?;
            if watch::is_tainted(&n) {
                Err("still tainted".to_string())
            } else {
                Ok(())
            }
        })
        .await;
    println!(
        "e2e leader kill: an unowned disrupted taint was removed {:.1?} after it was set",
        tainted_at.elapsed()
    );
    cleanup::remove(&client, NAME, &[deployment(NAME, 0)], || controller.exit_status().is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_node_class_replaces_every_node_within_the_budget_and_the_pdb() {
    const NAME: &str = "e2e-disr-drift";
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).envs(&fast_disruption_env()).start(&client).await;
    // Consolidation off: only drift may replace nodes, one at a time.
    let pool = watch::node_pool(NAME, "Never", json!([{"nodes": "1"}]));
    setup::class_and_pool_ready(&client, &controller, &manifests::node_class(NAME), &pool).await;
    let budgets: kube::Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        kube::Api::namespaced(client.clone(), NAME);
    let pdb = serde_json::from_value(json!({"metadata": {"name": APP},
        "spec": {"minAvailable": 5, "selector": {"matchLabels": {"app": APP}}}}))
    .expect("a PDB");
    budgets.create(&kube::api::PostParams::default(), &pdb).await.expect("creating the PDB");
    objects::apply(&client, &deployment(NAME, 6)).await.expect("applying the Deployment");
    setup::running_pods(&client, NAME, &format!("app={APP}"), 6).within(STAGE).wait(&controller).await;
    let original: BTreeSet<String> = pool_nodes(&client, NAME)
        .await
        .expect("nodes")
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let watcher = watch::Watcher::start(&client, NAME, NAME, APP);
    let mut class = manifests::node_class(NAME);
    class["spec"]["osDiskSizeGB"] = json!(64);
    objects::apply(&client, &class).await.expect("changing osDiskSizeGB");
    let changed = Instant::now();
    let replaced = controller
        .wait_until(
            "every original node to be replaced, 6 pods Running",
            Duration::from_secs(300),
            || async {
                let nodes = pool_nodes(&client, NAME).await?;
                let left: Vec<_> = nodes
                    .iter()
                    .filter_map(|n| n.metadata.name.clone())
                    .filter(|n| original.contains(n))
                    .collect();
                let n = running_count(&client, NAME).await;
                if left.is_empty() && n == 6 {
                    Ok(changed.elapsed())
                } else {
                    Err(format!("original nodes left {left:?}, {n} Running"))
                }
            },
        )
        .await;
    let seen = watcher.stop().await;
    println!(
        "e2e drift: osDiskSizeGB changed → {} node(s) replaced in {replaced:.1?}; at most {} disrupting at once \
         (budget 1); at least {:?} of 6 pods Running (PDB minAvailable 5)",
        original.len(),
        seen.max_disrupting,
        seen.min_running
    );
    assert!(seen.max_disrupting <= 1, "budget exceeded: {seen:?}");
    assert!(seen.min_running.is_some_and(|m| m >= 5), "the PDB's minAvailable was broken: {seen:?}");
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": APP, "namespace": NAME}});
    cleanup::remove(&client, NAME, &[deployment(NAME, 0), pdb], || controller.exit_status().is_none()).await;
}
