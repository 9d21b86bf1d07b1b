//! Node repair end to end (feature gate NodeRepair on, toleration 5 s): three nodes, one pod each.
//! With two of them NotReady (more than 20 % of the NodePool) nothing is repaired; once one of them is
//! Ready again, the other's NodeClaim is deleted at once (the drain does not wait) and replaced, and
//! the pods run on three Ready nodes again. `karpenter_nodeclaims_unhealthy_disrupted_total` counts it.
//! A node reporting `kubernetes.azure.com/NodeHealthy=False` is then replaced at once.
//!
//! A node goes NotReady as a stopped kubelet's would: kwok is told to leave its status alone (see
//! `health`) and the test writes `Ready=False`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::health::{name_of, nodes_of, set_condition, set_ready, start_kubelet, stop_kubelet};
use super::lookups::{self, nodeclaims};
use super::{cleanup, cluster, manifests, objects, setup};

const NAME: &str = "e2e-repair";
const APP: &str = "web";
const REPLICAS: usize = 3;
const STAGE: Duration = Duration::from_secs(90);
/// How long two unhealthy nodes of three are watched not being repaired: past the toleration and
/// several repair passes.
const HOLD: Duration = Duration::from_secs(12);

/// One pod per node: each pod keeps the others off its node.
fn deployment(replicas: usize) -> Value {
    let mut deployment = manifests::deployment(NAME, APP, NAME, replicas, "500m", "1Gi");
    deployment["spec"]["template"]["spec"]["affinity"] = json!({"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": APP}}, "topologyKey": "kubernetes.io/hostname"}]}});
    deployment
}

/// NodeClaims of the pool by name, with whether each is being deleted.
async fn claims(client: &kube::Client) -> Vec<(String, bool)> {
    let claims = lookups::claims_of(client, NAME).await.expect("listing NodeClaims");
    claims.iter().map(|c| (name_of(c), !c["metadata"]["deletionTimestamp"].is_null())).collect()
}

/// The NodeClaim whose Node is `node`.
fn claim_of(claims: &[Value], node: &str) -> String {
    let found = claims.iter().find(|c| c["status"]["nodeName"] == node);
    name_of(found.unwrap_or_else(|| panic!("no NodeClaim for node {node}: {claims:#?}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_replaces_a_notready_node_unless_too_much_of_its_pool_is_unhealthy() {
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME)
        .env("FEATURE_GATES", "NodeRepair=true")
        .env("KARPENTER_REPAIR_TOLERATION", "5s")
        .env("KARPENTER_REPAIR_INTERVAL", "1s")
        .start(&client)
        .await;
    let (class, pool) = (manifests::node_class(NAME), manifests::node_pool(NAME, Some("D")));
    setup::class_and_pool_ready(&client, &controller, &class, &pool).await;
    objects::apply(&client, &deployment(REPLICAS)).await.expect("applying the Deployment");
    let app = format!("app={APP}");
    let pods = setup::running_pods(&client, NAME, &app, REPLICAS).within(STAGE).wait(&controller).await;
    let nodes = nodes_of(&pods);
    assert_eq!(nodes.len(), REPLICAS, "one pod per node: {nodes:?}");
    let all = lookups::claims_of(&client, NAME).await.expect("listing NodeClaims");
    let (sick, flaky) = (nodes[0].clone(), nodes[1].clone());
    let sick_claim = claim_of(&all, &sick);

    // Two of three unhealthy: more than 20 % of the pool, so nothing is repaired.
    for node in [&sick, &flaky] {
        stop_kubelet(&client, node).await;
    }
    for node in [&sick, &flaky] {
        set_ready(&client, node, "False").await;
    }
    let before = claims(&client).await;
    let hold_until = Instant::now() + HOLD;
    while Instant::now() < hold_until {
        let now = claims(&client).await;
        assert_eq!(now, before, "a NodeClaim changed while 2 of 3 nodes were unhealthy");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // One of three: repaired.
    start_kubelet(&client, &flaky).await;
    let healed = Instant::now();
    controller
        .wait_until("the NotReady node's NodeClaim to be deleted", STAGE, || async {
            match nodeclaims(&client).get_opt(&sick_claim).await.map_err(|err| err.to_string())? {
                None => Ok(()),
                Some(found) if found.metadata.deletion_timestamp.is_some() => Ok(()),
                Some(_) => Err(format!("{sick_claim} is not being deleted")),
            }
        })
        .await;
    let repaired_after = healed.elapsed();
    let replaced = setup::running_pods(&client, NAME, &app, REPLICAS)
        .avoiding(std::slice::from_ref(&sick))
        .within(STAGE)
        .wait(&controller)
        .await;
    let replaced_after = healed.elapsed();
    controller
        .wait_until("the repaired NodeClaim to be gone", STAGE, || async {
            match nodeclaims(&client).get_opt(&sick_claim).await.map_err(|err| err.to_string())? {
                None => Ok(()),
                Some(found) => Err(format!("finalizers {:?}", found.metadata.finalizers)),
            }
        })
        .await;
    let now = claims(&client).await;
    assert_eq!(now.len(), REPLICAS, "a replacement NodeClaim: {now:?}");
    assert!(!now.iter().any(|(c, _)| *c == sick_claim));
    assert!(!nodes_of(&replaced).contains(&sick));
    let unhealthy = super::health::counter(
        &controller,
        "karpenter_nodeclaims_unhealthy_disrupted_total",
        &[("condition", "ready"), ("nodepool", NAME)],
    )
    .await;
    assert_eq!(unhealthy, 1.0, "karpenter_nodeclaims_unhealthy_disrupted_total");

    // AKS's node problem detector reports the node broken: replaced at once, no toleration.
    let broken = nodes_of(&replaced)[0].clone();
    let broken_claim = claim_of(&lookups::claims_of(&client, NAME).await.expect("listing"), &broken);
    stop_kubelet(&client, &broken).await;
    set_condition(&client, &broken, "kubernetes.azure.com/NodeHealthy", "False").await;
    let reported = Instant::now();
    controller
        .wait_until("the broken node's NodeClaim to be deleted", STAGE, || async {
            match nodeclaims(&client).get_opt(&broken_claim).await.map_err(|err| err.to_string())? {
                None => Ok(()),
                Some(found) if found.metadata.deletion_timestamp.is_some() => Ok(()),
                Some(_) => Err(format!("{broken_claim} is not being deleted")),
            }
        })
        .await;
    let broken_after = reported.elapsed();
    let by_condition = super::health::counter(
        &controller,
        "karpenter_nodeclaims_unhealthy_disrupted_total",
        &[("condition", "kubernetes_azure_com/node_healthy"), ("nodepool", NAME)],
    )
    .await;
    assert_eq!(by_condition, 1.0, "the NodeHealthy repair is counted under its condition");
    println!(
        "e2e repair: 2 of 3 NotReady held {HOLD:?} without repair; after one recovered the other's claim was \
         deleted in {repaired_after:.1?} and its pod ran on new capacity in {replaced_after:.1?}; \
         NodeHealthy=False was acted on in {broken_after:.1?}"
    );
    cleanup::remove(&client, NAME, &[deployment(0)], || controller.exit_status().is_none()).await;
}
