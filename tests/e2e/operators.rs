//! Requirement operators as upstream core v1.14 writes them: a NodePool whose requirements use `Gte`
//! and `Lte` provisions only sizes inside both bounds, and a NodeClaim stored in that form (as upstream
//! Karpenter leaves it behind when a cluster switches) is read, launched on a size its bounds admit, and
//! managed like any other.

use std::time::Duration;

use serde_json::{json, Value};

use super::lookups::{claims_of, get_json};
use super::{cleanup, manifests, objects, setup};

const NAME: &str = "e2e-operators";
const SKU_CPU: &str = "karpenter.azure.com/sku-cpu";
const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const STAGE: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gte_and_lte_bound_what_a_nodepool_provisions_and_a_stored_nodeclaim_launches() {
    let client = super::cluster::shared().client().await;
    let controller = setup::controller(NAME).start(&client).await;
    let class = manifests::node_class(NAME);
    let mut pool = manifests::node_pool(NAME, Some("D"));
    let requirements = pool["spec"]["template"]["spec"]["requirements"].as_array_mut().unwrap();
    requirements.push(json!({"key": SKU_CPU, "operator": "Gte", "values": ["8"]}));
    requirements.push(json!({"key": SKU_CPU, "operator": "Lte", "values": ["8"]}));
    setup::class_and_pool_ready(&client, &controller, &class, &pool).await;

    // Two small pods would fit a 2-vCPU size; the pool's bounds leave only 8-vCPU sizes.
    let deployment = manifests::deployment(NAME, "web", NAME, 2, "500m", "1Gi");
    objects::apply(&client, &deployment).await.expect("applying the Deployment");
    setup::running_pods(&client, NAME, "app=web", 2).within(STAGE).wait(&controller).await;
    let claims = claims_of(&client, NAME).await.expect("listing NodeClaims");
    assert!(!claims.is_empty(), "the pods got a node");
    for claim in &claims {
        assert_eq!(
            claim["metadata"]["labels"][SKU_CPU], "8",
            "every size has 8 vCPUs: {}",
            claim["metadata"]
        );
    }

    // A NodeClaim as upstream stores it, with Gte and Lte: of the three sizes it allows, only the
    // 4-vCPU one is inside both bounds.
    let stored = stored_claim(NAME, "e2e-operators-stored");
    objects::create(&client, &stored, false).await.expect("creating a NodeClaim with Gte and Lte");
    let launched = controller
        .wait_until("the stored NodeClaim to launch", STAGE, || async {
            let claim = get_json(&client, &stored).await?;
            if claim["status"]["providerID"].is_string() {
                Ok(claim)
            } else {
                Err(format!("{}", claim["status"]))
            }
        })
        .await;
    assert_eq!(
        launched["metadata"]["labels"][LABEL_INSTANCE_TYPE], "Standard_D4s_v5",
        "{}",
        launched["metadata"]
    );
    let vm = launched["status"]["providerID"].as_str().and_then(|id| id.rsplit('/').next()).unwrap();
    assert_eq!(controller.fake().vm(vm).map(|v| v.vm_size), Some("Standard_D4s_v5".to_string()));

    cleanup::remove(&client, NAME, &[deployment], || controller.exit_status().is_none()).await;
    assert!(controller.fake().vm(vm).is_none(), "deleting the stored NodeClaim deleted its VM");
}

/// A NodeClaim of pool `pool` allowing 2, 4 and 8 vCPU sizes, bounded to 3..=4 vCPUs by `Gte`/`Lte`.
fn stored_claim(pool: &str, name: &str) -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
    "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
    "spec": {
        "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": pool},
        "requirements": [
            {"key": LABEL_INSTANCE_TYPE, "operator": "In",
             "values": ["Standard_D2s_v5", "Standard_D4s_v5", "Standard_D8s_v5"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": SKU_CPU, "operator": "Gte", "values": ["3"]},
            {"key": SKU_CPU, "operator": "Lte", "values": ["4"]}
        ]
    }})
}
