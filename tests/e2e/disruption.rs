//! Disruption end to end, on a real control plane: scaling a Deployment down leaves empty and
//! under-used nodes that the controller removes or consolidates, within the NodePool's budget and
//! without taking the app down; a PodDisruptionBudget or a pod's `karpenter.sh/do-not-disrupt` blocks
//! it, with an event that names the blocker.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use super::controller::Controller;
use super::disruption_watch::{self as watch, as_input, fast_disruption_env, pool_nodes, simulate, Watcher};
use super::lookups::{self, condition_is_true, is_running};
use super::{cleanup, cluster, manifests, objects, setup};

const APP: &str = "web";
const STAGE: Duration = Duration::from_secs(90);
/// How long consolidation may take to converge after the scale-down.
const CONVERGE: Duration = Duration::from_secs(180);

fn deployment(name: &str, replicas: usize) -> Value {
    manifests::deployment(name, APP, name, replicas, "700m", "1Gi")
}

async fn start(name: &str, pool: &Value) -> (Client, Controller) {
    let client = cluster::shared().client().await;
    let controller = setup::controller(name).envs(&fast_disruption_env()).start(&client).await;
    setup::class_and_pool_ready(&client, &controller, &manifests::node_class(name), pool).await;
    (client, controller)
}

/// Exactly `replicas` pods of the app, all Running.
async fn running(controller: &Controller, client: &Client, name: &str, replicas: usize) -> Vec<Pod> {
    let app = format!("app={APP}");
    setup::running_pods(client, name, &app, replicas).and_no_others().within(STAGE).wait(controller).await
}

/// The cluster's $/h for the pool's nodes and the app's pods, priced by `simulate` from a snapshot.
async fn cluster_price(client: &Client, name: &str, pool: &Value, region: &str) -> f64 {
    let mut input = vec![manifests::node_class(name), pool.clone()];
    input.extend(pool_nodes(client, name).await.expect("nodes").iter().map(as_input));
    let pods = lookups::list_pods(client, name, APP).await.expect("pods");
    input.extend(pods.iter().filter(|p| is_running(p)).map(as_input));
    let out = simulate(input, region);
    out["disruption"]["cluster_price_per_hour"]
        .as_f64()
        .unwrap_or_else(|| panic!("no disruption price: {out}"))
}

/// Events with `reason` about `kind`/`name` (any namespace), as their notes.
pub async fn events(client: &Client, kind: &str, name: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    list.into_iter()
        .filter(|e| {
            let r = e.regarding.as_ref();
            r.and_then(|r| r.kind.as_deref()) == Some(kind)
                && r.and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_down_removes_empty_nodes_and_consolidates_the_rest_within_the_budget() {
    const NAME: &str = "e2e-disr-scale";
    let pool = watch::node_pool(NAME, "0s", json!([{"nodes": "1"}]));
    let (client, controller) = start(NAME, &pool).await;
    let region = controller.fake().location().to_string();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NAME);
    let pdb = serde_json::from_value(json!({"metadata": {"name": APP},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": APP}}}}))
    .expect("a PDB");
    budgets.create(&PostParams::default(), &pdb).await.expect("creating the PDB");
    objects::apply(&client, &deployment(NAME, 30)).await.expect("applying the Deployment");
    running(&controller, &client, NAME, 30).await;
    let before = pool_nodes(&client, NAME).await.expect("nodes").len();
    let price_before = cluster_price(&client, NAME, &pool, &region).await;

    let watcher = Watcher::start(&client, NAME, NAME, APP);
    let scaled = Instant::now();
    objects::apply(&client, &deployment(NAME, 3)).await.expect("scaling down");
    let plan = simulate(vec![manifests::node_class(NAME), pool.clone(), deployment(NAME, 3)], &region);
    let planned = plan["price_per_hour"].as_f64().expect("a planned price");
    let converged = controller
        .wait_until("the pool to cost at most 1.1 × the solver's plan for 3 pods", CONVERGE, || async {
            let nodes = pool_nodes(&client, NAME).await?;
            if nodes.iter().any(watch::is_disrupting) {
                return Err(format!("{} nodes, some still disrupting", nodes.len()));
            }
            let price = cluster_price(&client, NAME, &pool, &region).await;
            if price <= planned * 1.1 + 1e-9 {
                Ok(price)
            } else {
                Err(format!("{} nodes at ${price:.3}/h, plan ${planned:.3}/h", nodes.len()))
            }
        })
        .await;
    let took = scaled.elapsed();
    running(&controller, &client, NAME, 3).await;
    let seen = watcher.stop().await;
    let after = pool_nodes(&client, NAME).await.expect("nodes").len();
    println!(
        "e2e disruption scale-down: {before} nodes (${price_before:.3}/h) for 30 pods → {after} node(s) at \
         ${converged:.3}/h for 3 pods in {took:.1?} (plan ${planned:.3}/h); at most {} node(s) disrupting at \
         once (budget 1), at least {:?} pods Running (PDB maxUnavailable 1), {} samples",
        seen.max_disrupting, seen.min_running, seen.samples
    );
    assert!(seen.max_disrupting <= 1, "the budget nodes: 1 was exceeded: {seen:?}");
    assert!(seen.min_running.is_some_and(|m| m >= 2), "the app lost more than one pod at once: {seen:?}");
    let disrupted = events(&client, "Node", seen.nodes.iter().next().expect("a node"), "Disrupting").await;
    println!("e2e disruption: a Disrupting event: {disrupted:?}");
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": APP, "namespace": NAME}});
    cleanup::remove(&client, NAME, &[deployment(NAME, 0), pdb], || controller.exit_status().is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_and_a_do_not_disrupt_pod_block_consolidation_with_an_event_naming_them() {
    const NAME: &str = "e2e-disr-block";
    let pool = watch::node_pool(NAME, "0s", json!([{"nodes": "100%"}]));
    let (client, controller) = start(NAME, &pool).await;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NAME);
    let pdb = serde_json::from_value(json!({"metadata": {"name": APP},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": APP}}}}))
    .expect("a PDB");
    budgets.create(&PostParams::default(), &pdb).await.expect("creating the PDB");
    // 10 pods fill several nodes; scaling to 2 leaves under-used nodes consolidation would merge.
    objects::apply(&client, &deployment(NAME, 10)).await.expect("applying the Deployment");
    running(&controller, &client, NAME, 10).await;
    objects::apply(&client, &deployment(NAME, 2)).await.expect("scaling down");
    let pods = running(&controller, &client, NAME, 2).await;
    // Empty nodes go (no pod to protect); the nodes running the two pods stay while the PDB allows 0.
    let blocked_node = pods[0].spec.as_ref().and_then(|s| s.node_name.clone()).expect("bound");
    let note = controller
        .wait_until("a DisruptionBlocked event naming the PDB", STAGE, || async {
            let notes = events(&client, "Node", &blocked_node, "DisruptionBlocked").await;
            notes.into_iter().find(|n| n.contains(&format!("PDB {NAME}/{APP}"))).ok_or("none yet".to_string())
        })
        .await;
    // Watched for 10 s, several disruption passes: the point is that nothing happens meanwhile.
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(10) {
        let nodes = pool_nodes(&client, NAME).await.expect("nodes");
        let hosting: Vec<_> = pods.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
        for node in &hosting {
            let n = nodes.iter().find(|n| n.metadata.name.as_deref() == Some(node.as_str()));
            assert!(n.is_some_and(|n| !watch::is_disrupting(n)), "node {node} was disrupted despite the PDB");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Protect one pod by annotation, then relax the PDB: only the other pod's node may go.
    let protected = pods[0].metadata.name.clone().expect("named");
    let protected_uid = pods[0].metadata.uid.clone();
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NAME);
    let annotate = json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}});
    pod_api.patch(&protected, &PatchParams::default(), &Patch::Merge(annotate)).await.expect("annotating");
    let relax = json!({"spec": {"maxUnavailable": 1}});
    budgets.patch(APP, &PatchParams::default(), &Patch::Merge(relax)).await.expect("relaxing the PDB");
    let relaxed = Instant::now();
    let dnd_note = controller
        .wait_until("a DisruptionBlocked event naming the do-not-disrupt pod", STAGE, || async {
            let notes = events(&client, "Node", &blocked_node, "DisruptionBlocked").await;
            notes.into_iter().find(|n| n.contains("do-not-disrupt")).ok_or("none yet".to_string())
        })
        .await;
    let other_node = pods[1].spec.as_ref().and_then(|s| s.node_name.clone()).expect("bound");
    let two_nodes = other_node != blocked_node;
    if two_nodes {
        controller
            .wait_until("the unprotected pod's node to be consolidated away", CONVERGE, || async {
                let nodes = pool_nodes(&client, NAME).await?;
                let live: Vec<String> = nodes
                    .iter()
                    .filter(|n| !watch::is_disrupting(n))
                    .filter_map(|n| n.metadata.name.clone())
                    .collect();
                if live.contains(&blocked_node) && !live.contains(&other_node) {
                    Ok(())
                } else {
                    Err(format!("nodes {live:?}"))
                }
            })
            .await;
    }
    running(&controller, &client, NAME, 2).await;
    let still = pod_api.get(&protected).await.expect("the protected pod");
    assert_eq!(still.metadata.uid, protected_uid, "the do-not-disrupt pod was replaced");
    assert!(is_running(&still));
    println!(
        "e2e disruption blocks: {note:?}; then {dnd_note:?}; the 2 pods on {} node(s); converged {:.1?} after relaxing the PDB",
        if two_nodes { 2 } else { 1 },
        relaxed.elapsed()
    );
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": APP, "namespace": NAME}});
    cleanup::remove(&client, NAME, &[deployment(NAME, 0), pdb], || controller.exit_status().is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_budget_of_zero_blocks_until_its_window_ends() {
    const NAME: &str = "e2e-disr-window";
    let (client, controller) = start(NAME, &watch::node_pool(NAME, "0s", json!([{"nodes": "100%"}]))).await;
    // The window is set only now: starting waits for the other tests' controllers, which can take
    // minutes. It opened this minute and lasts 3 minutes: between 120 and 180 s are left, enough for
    // the Deployment to run, scale down and be blocked on a busy machine.
    let now = k8s_openapi::jiff::Timestamp::now();
    let (minute, hour) = ((now.as_second() / 60) % 60, (now.as_second() / 3600) % 24);
    let budgets = json!([{"nodes": "0", "schedule": format!("{minute} {hour} * * *"), "duration": "3m"}, {"nodes": "100%"}]);
    let window_end = Instant::now() + Duration::from_secs(180 - (now.as_second() % 60) as u64);
    objects::apply(&client, &watch::node_pool(NAME, "0s", budgets)).await.expect("setting the budget window");
    objects::apply(&client, &deployment(NAME, 6)).await.expect("applying the Deployment");
    running(&controller, &client, NAME, 6).await;
    let nodes_before = pool_nodes(&client, NAME).await.expect("nodes").len();
    objects::apply(&client, &deployment(NAME, 1)).await.expect("scaling down");
    running(&controller, &client, NAME, 1).await;
    let node = pool_nodes(&client, NAME).await.expect("nodes")[0].metadata.name.clone().expect("named");
    let note = controller
        .wait_until("a DisruptionBlocked event naming the budget", STAGE, || async {
            let notes = events(&client, "Node", &node, "DisruptionBlocked").await;
            notes.into_iter().find(|n| n.contains("budget")).ok_or("none yet".to_string())
        })
        .await;
    // Waiting out the window is the test: no node may be disrupted until it ends.
    while Instant::now() + Duration::from_secs(3) < window_end {
        let nodes = pool_nodes(&client, NAME).await.expect("nodes");
        assert!(
            !nodes.iter().any(watch::is_disrupting),
            "a node was disrupted inside the window of budget 0"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let released = controller
        .wait_until("the empty nodes to go once the window ended", CONVERGE, || async {
            let nodes = pool_nodes(&client, NAME).await?;
            let live = nodes.iter().filter(|n| !watch::is_disrupting(n)).count();
            if live < nodes_before {
                Ok(Instant::now().saturating_duration_since(window_end))
            } else {
                Err(format!("{live} of {nodes_before} nodes live"))
            }
        })
        .await;
    println!(
        "e2e disruption window: {nodes_before} nodes, scaled 6 → 1 pods; blocked inside the window ({note:?}); \
         first node disrupted {released:.1?} after the window ended"
    );
    cleanup::remove(&client, NAME, &[deployment(NAME, 0)], || controller.exit_status().is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_underutilized_node_is_replaced_by_a_cheaper_one_initialized_before_any_eviction() {
    const NAME: &str = "e2e-disr-replace";
    const REPLACEMENT_FOR: &str = "karpenter.azure.com/replacement-for";
    let pool = watch::node_pool(NAME, "0s", json!([{"nodes": "100%"}]));
    let (client, controller) = start(NAME, &pool).await;
    // A second pool with cheaper sizes: the pods select the first by its label, so a move must stay there.
    let mut other = manifests::node_pool(&format!("{NAME}-other"), None);
    other["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!(NAME);
    objects::apply(&client, &other).await.expect("applying the other NodePool");
    // Five pods fill a 4-vCPU node; with one left, a 2-vCPU node is cheaper.
    objects::apply(&client, &deployment(NAME, 5)).await.expect("applying the Deployment");
    running(&controller, &client, NAME, 5).await;
    objects::apply(&client, &deployment(NAME, 1)).await.expect("scaling down");
    let pods = running(&controller, &client, NAME, 1).await;
    let pod_uid = pods[0].metadata.uid.clone();
    let old_node = pods[0].spec.as_ref().and_then(|s| s.node_name.clone()).expect("bound");
    let scaled = Instant::now();
    // Sample every 200 ms: when the replacement is Initialized, and when the pod starts to go.
    let mut replacement_ready: Option<Duration> = None;
    let mut evicted: Option<Duration> = None;
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NAME);
    while evicted.is_none() && scaled.elapsed() < CONVERGE {
        let claims = lookups::claims_of(&client, NAME).await.expect("claims");
        let ready = claims.iter().any(|c| {
            c["metadata"]["annotations"][REPLACEMENT_FOR].as_str() == Some(old_node.as_str())
                && condition_is_true(c, "Initialized")
        });
        let strays = lookups::claims_of(&client, &format!("{NAME}-other")).await.expect("claims");
        assert!(
            strays.is_empty(),
            "a replacement was launched in the pool the pod does not select: {strays:?}"
        );
        if ready && replacement_ready.is_none() {
            replacement_ready = Some(scaled.elapsed());
        }
        let pod =
            pod_api.get_opt(pods[0].metadata.name.as_deref().expect("named")).await.expect("reading the pod");
        if pod.is_none_or(|p| p.metadata.deletion_timestamp.is_some() || p.metadata.uid != pod_uid) {
            evicted = Some(scaled.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let evicted = evicted.expect("the pod of the under-used node was never evicted");
    let ready = replacement_ready.expect("the pod was evicted before any replacement was Initialized");
    running(&controller, &client, NAME, 1).await;
    let nodes = pool_nodes(&client, NAME).await.expect("nodes");
    let types: Vec<String> = nodes
        .iter()
        .filter(|n| !watch::is_disrupting(n))
        .filter_map(|n| n.metadata.labels.as_ref()?.get("node.kubernetes.io/instance-type").cloned())
        .collect();
    println!(
        "e2e replace: the 1-pod node {old_node} was replaced by {types:?}: replacement Initialized {ready:.1?} and \
         the pod evicted {evicted:.1?} after the scale-down"
    );
    assert!(ready <= evicted, "evicted at {evicted:?} before the replacement was Initialized at {ready:?}");
    let _ = objects::api_for(&client, &other)
        .await
        .expect("NodePool API")
        .delete(&format!("{NAME}-other"), &Default::default())
        .await;
    cleanup::remove(&client, NAME, &[deployment(NAME, 0)], || controller.exit_status().is_none()).await;
}
