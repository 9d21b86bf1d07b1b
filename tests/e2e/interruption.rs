//! Spot interruption end to end: Azure evicts the spot VM under a Deployment's pods (the fake ARM
//! deletes it, and its Node goes as Azure's node manager would delete it); the NodeClaim and Node go,
//! the pods run again on new spot capacity, and `karpenter_nodeclaims_disrupted_total` counts the claim
//! with reason `interruption`. Garbage collection sweeps every 2 s here, so whichever of it and the
//! lifecycle notices first, the claim is deleted without waiting for the Node to go NotReady.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::json;

use super::health::{counter, name_of, nodes_of, vm_of};
use super::lookups::{self, nodeclaims};
use super::{cleanup, cluster, manifests, objects, setup};

const NAME: &str = "e2e-interruption";
const APP: &str = "web";
const REPLICAS: usize = 2;
const STAGE: Duration = Duration::from_secs(90);

/// The scenario's pool, spot only.
fn spot_pool() -> serde_json::Value {
    let mut pool = manifests::node_pool(NAME, Some("D"));
    pool["spec"]["template"]["spec"]["requirements"][1] =
        json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]});
    pool
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interruption_of_a_spot_vm_replaces_its_claim_and_the_pods_run_again() {
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).env("KARPENTER_GC_INTERVAL", "2s").start(&client).await;
    setup::class_and_pool_ready(&client, &controller, &manifests::node_class(NAME), &spot_pool()).await;
    let deployment = manifests::deployment(NAME, APP, NAME, REPLICAS, "500m", "1Gi");
    objects::apply(&client, &deployment).await.expect("applying the Deployment");
    let app = format!("app={APP}");
    let pods = setup::running_pods(&client, NAME, &app, REPLICAS).within(STAGE).wait(&controller).await;
    let old_nodes = nodes_of(&pods);
    let claims = lookups::claims_of(&client, NAME).await.expect("listing NodeClaims");
    let old_claims: Vec<String> = claims.iter().map(name_of).collect();
    for claim in &claims {
        assert_eq!(claim["metadata"]["labels"]["karpenter.sh/capacity-type"], "spot", "{claim:#}");
    }
    let vms: Vec<String> = claims.iter().filter_map(vm_of).collect();
    assert_eq!(vms.len(), old_claims.len(), "every claim launched: {claims:#?}");
    let counted_before =
        counter(&controller, "karpenter_nodeclaims_disrupted_total", &[("reason", "interruption")]).await;

    let evicted = Instant::now();
    for vm in &vms {
        assert!(controller.fake().evict(vm), "evicting VM {vm}");
    }
    let nodes_api: Api<Node> = Api::all(client.clone());
    controller
        .wait_until("the evicted claims and their Nodes to be gone", STAGE, || async {
            let mut left = Vec::new();
            for claim in &old_claims {
                if nodeclaims(&client).get_opt(claim).await.map_err(|err| err.to_string())?.is_some() {
                    left.push(format!("NodeClaim {claim}"));
                }
            }
            for node in &old_nodes {
                if nodes_api.get_opt(node).await.map_err(|err| err.to_string())?.is_some() {
                    left.push(format!("Node {node}"));
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(left.join(", "))
            }
        })
        .await;
    let gone_after = evicted.elapsed();
    let replaced = setup::running_pods(&client, NAME, &app, REPLICAS)
        .avoiding(&old_nodes)
        .within(STAGE)
        .wait(&controller)
        .await;
    let running_after = evicted.elapsed();
    let new_claims = lookups::claims_of(&client, NAME).await.expect("listing NodeClaims");
    assert!(new_claims.iter().all(|c| !old_claims.contains(&name_of(c))), "{new_claims:#?}");
    let counted =
        counter(&controller, "karpenter_nodeclaims_disrupted_total", &[("reason", "interruption")]).await;
    assert_eq!(
        counted - counted_before,
        old_claims.len() as f64,
        "karpenter_nodeclaims_disrupted_total{{reason=\"interruption\"}}"
    );
    println!(
        "e2e interruption: {} spot VM(s) evicted; claims and nodes gone {gone_after:.1?} later, {REPLICAS} pods \
         Running on new spot capacity ({:?}) {running_after:.1?} after the eviction",
        vms.len(),
        nodes_of(&replaced)
    );
    cleanup::remove(&client, NAME, &[manifests::deployment(NAME, APP, NAME, 0, "500m", "1Gi")], || {
        controller.exit_status().is_none()
    })
    .await;
}
