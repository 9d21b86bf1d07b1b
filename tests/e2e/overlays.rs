//! NodeOverlay with the real controller (feature gate `NodeOverlay=true`): a `priceAdjustment: "-30%"`
//! on the F family changes the size of the next NodeClaim from the pool's cheapest family to an F size,
//! and the overlay's status says it is applied (ValidationSucceeded and Ready True).

use std::time::Duration;

use serde_json::json;

use super::crds::{self, NODEOVERLAYS};
use super::lookups::claims_of;
use super::{cleanup, manifests, objects, setup};

const NAME: &str = "e2e-overlay";
const STAGE: Duration = Duration::from_secs(120);

/// The instance types of the pool's launched claims.
async fn launched(client: &kube::Client, want: usize) -> Result<Vec<String>, String> {
    let claims = claims_of(client, NAME).await?;
    let types: Vec<String> = claims
        .iter()
        .filter(|c| c["status"]["providerID"].is_string())
        .filter_map(|c| c["metadata"]["labels"]["node.kubernetes.io/instance-type"].as_str())
        .map(str::to_string)
        .collect();
    if types.len() == want {
        Ok(types)
    } else {
        Err(format!("{} NodeClaims, {} launched; want {want}", claims.len(), types.len()))
    }
}

fn family(instance_type: &str) -> char {
    instance_type.trim_start_matches("Standard_").chars().next().unwrap_or('?')
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minus_30_percent_overlay_changes_the_size_of_the_next_nodeclaim() {
    let client = super::cluster::shared().client().await;
    crds::ensure_installed(&client, &[NODEOVERLAYS]).await;
    let controller = setup::controller(NAME).env("FEATURE_GATES", "NodeOverlay=true").start(&client).await;
    let class = manifests::node_class(NAME);
    let mut pool = manifests::node_pool(NAME, None);
    let requirements = pool["spec"]["template"]["spec"]["requirements"].as_array_mut().unwrap();
    requirements
        .push(json!({"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D", "F"]}));
    setup::class_and_pool_ready(&client, &controller, &class, &pool).await;

    // One pod of 3 CPU fills a 4-vCPU node: the pool's cheapest such size at list prices.
    let one = manifests::deployment(NAME, "web", NAME, 1, "3", "2Gi");
    objects::apply(&client, &one).await.expect("applying the Deployment");
    let first = controller.wait_until("the first NodeClaim", STAGE, || launched(&client, 1)).await;
    assert_ne!(family(&first[0]), 'F', "the F family is not the cheapest before the overlay: {first:?}");

    // Only this test's pool: other tests' controllers share the cluster (and run with the gate off).
    let overlay = json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": NAME},
        "spec": {"weight": 10, "priceAdjustment": "-30%", "requirements": [
            {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["F"]},
            {"key": "karpenter.sh/nodepool", "operator": "In", "values": [NAME]}
        ]}
    });
    objects::apply(&client, &overlay).await.expect("applying the NodeOverlay");
    let ready = controller
        .wait_until("the NodeOverlay to be Ready", STAGE, || {
            let (client, overlay) = (client.clone(), overlay.clone());
            async move {
                let stored = objects::get(&client, &overlay).await;
                let conditions = stored["status"]["conditions"].as_array().cloned().unwrap_or_default();
                let status =
                    |t: &str| conditions.iter().find(|c| c["type"] == t).map(|c| c["status"].clone());
                match (status("ValidationSucceeded"), status("Ready")) {
                    (Some(v), Some(r)) if v == "True" && r == "True" => Ok(stored),
                    other => Err(format!("conditions {other:?}")),
                }
            }
        })
        .await;
    assert_eq!(ready["spec"]["priceAdjustment"], "-30%");

    // A second pod does not fit the first node: the next NodeClaim is an F size.
    let mut two = one.clone();
    two["spec"]["replicas"] = json!(2);
    objects::apply(&client, &two).await.expect("scaling the Deployment");
    let both = controller.wait_until("the second NodeClaim", STAGE, || launched(&client, 2)).await;
    let new: Vec<&String> = both.iter().filter(|t| **t != first[0]).collect();
    assert!(new.len() == 1 && family(new[0]) == 'F', "the next NodeClaim is an F size: {both:?}");
    let claims = claims_of(&client, NAME).await.expect("listing NodeClaims");
    let marked =
        |c: &&serde_json::Value| c["metadata"]["annotations"]["karpenter.sh/price-overlay-applied"] == "true";
    let annotated: Vec<&str> = claims
        .iter()
        .filter(marked)
        .filter_map(|c| c["metadata"]["labels"]["node.kubernetes.io/instance-type"].as_str())
        .collect();
    assert_eq!(annotated, [new[0].as_str()], "upstream's annotation marks the claim an overlay priced");

    let api = objects::api_for(&client, &overlay).await.expect("the NodeOverlay API");
    api.delete(NAME, &Default::default()).await.expect("deleting the NodeOverlay");
    let pools = objects::api_for(&client, &pool).await.expect("the NodePool API");
    pools.delete(NAME, &Default::default()).await.expect("deleting the NodePool");
    cleanup::remove(&client, NAME, &[two], || controller.exit_status().is_none()).await;
}
