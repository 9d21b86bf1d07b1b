//! A static NodePool (`spec.replicas`, upstream core v1.14) on the real control plane: it launches its
//! replicas with no pod asking, keeps that count when more pods come than its nodes hold, and follows a
//! change of `replicas` made through the scale subresource (`kubectl scale nodepool`), up and down.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::{json, Value};

use super::lookups::claims_of;
use super::{cleanup, manifests, objects, setup};

const NAME: &str = "e2e-static";
const STAGE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pool_holds_its_replica_count_across_pods_and_a_change_of_replicas() {
    let client = super::cluster::shared().client().await;
    let controller = setup::controller(NAME).env("FEATURE_GATES", "StaticCapacity=true").start(&client).await;
    let class = manifests::node_class(NAME);
    let mut pool = manifests::node_pool(NAME, Some("D"));
    pool["spec"]["replicas"] = json!(2);
    let requirements = pool["spec"]["template"]["spec"]["requirements"].as_array_mut().unwrap();
    requirements.push(json!({"key": "karpenter.azure.com/sku-cpu", "operator": "Lte", "values": ["2"]}));
    setup::class_and_pool_ready(&client, &controller, &class, &pool).await;

    let launched = |want: usize| {
        let client = client.clone();
        async move {
            let claims = claims_of(&client, NAME).await?;
            let live: Vec<&Value> =
                claims.iter().filter(|c| c["metadata"]["deletionTimestamp"].is_null()).collect();
            let up = live.iter().filter(|c| c["status"]["providerID"].is_string()).count();
            if live.len() == want && up == want && claims.len() == want {
                Ok(live
                    .iter()
                    .map(|c| c["metadata"]["labels"]["node.kubernetes.io/instance-type"].clone())
                    .collect::<Vec<_>>())
            } else {
                Err(format!("{} NodeClaims, {} live, {up} launched; want {want}", claims.len(), live.len()))
            }
        }
    };
    let sizes =
        controller.wait_until("the two replicas to launch with no pod asking", STAGE, || launched(2)).await;
    assert!(sizes.windows(2).all(|w| w[0] == w[1]), "one size, the cheapest the pool allows: {sizes:?}");

    // Four pods of 1.5 CPU: one fits a node, the other two stay pending; the pool does not grow.
    let deployment = manifests::deployment(NAME, "web", NAME, 4, "1500m", "1Gi");
    objects::apply(&client, &deployment).await.expect("applying the Deployment");
    setup::running_pods(&client, NAME, "app=web", 2).within(STAGE).wait(&controller).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let claims = claims_of(&client, NAME).await.expect("listing NodeClaims");
    assert_eq!(claims.len(), 2, "pending pods do not grow a static pool");

    // `kubectl scale nodepool e2e-static --replicas=3`, then down to one.
    let api = objects::api_for(&client, &pool).await.expect("the NodePool API");
    for (replicas, running) in [(3usize, 3usize), (1, 1)] {
        let scale = json!({"spec": {"replicas": replicas}});
        api.patch_scale(NAME, &PatchParams::default(), &Patch::Merge(&scale))
            .await
            .expect("scaling the NodePool");
        controller.wait_until(&format!("{replicas} replicas"), STAGE, || launched(replicas)).await;
        setup::running_pods(&client, NAME, "app=web", running).within(STAGE).wait(&controller).await;
    }
    let status = controller
        .wait_until("the NodePool's status to count one node", STAGE, || {
            let (client, pool) = (client.clone(), pool.clone());
            async move {
                let stored = objects::get(&client, &pool).await;
                match stored["status"]["nodes"].as_i64() {
                    Some(1) => Ok(stored),
                    other => Err(format!("status.nodes {other:?}")),
                }
            }
        })
        .await;
    assert_eq!(status["spec"]["replicas"], 1);

    // The pool first, so nothing launches its replicas again while cleanup deletes the claims.
    api.delete(NAME, &Default::default()).await.expect("deleting the NodePool");
    cleanup::remove(&client, NAME, &[deployment], || controller.exit_status().is_none()).await;
}
