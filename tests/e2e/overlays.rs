//! NodeOverlay with the real controller (feature gate `NodeOverlay=true`): a `priceAdjustment: "-30%"`
//! on the F family changes the size of the next NodeClaim from the pool's cheapest family to an F size,
//! the overlay's status says it is applied (ValidationSucceeded and Ready True), and consolidation then
//! moves the pool's list-priced node onto the F family. Two overlays of the
//! same weight pricing the same sizes conflict: the one upstream's order takes second has
//! `ValidationSucceeded` False with reason `Conflict`, and so `Ready` False, until the other goes.

use std::time::Duration;

use serde_json::json;

use super::crds::{self, NODEOVERLAYS};
use super::disruption_watch::fast_disruption_env;
use super::lookups::claims_of;
use super::{cleanup, manifests, objects, setup};

const NAME: &str = "e2e-overlay";
const CONFLICT: &str = "e2e-overlay-conflict";
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
    let controller = setup::controller(NAME)
        .env("FEATURE_GATES", "NodeOverlay=true")
        .envs(&fast_disruption_env())
        .start(&client)
        .await;
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

    // The disruption decision follows the overlaid prices too: at list prices the first node is the
    // cheapest home for its pod, and two of it cost what one of twice the size does; with the F family
    // 30% off, consolidation replaces it (alone, or both nodes with one F size).
    let pools = objects::api_for(&client, &pool).await.expect("the NodePool API");
    let consolidate = json!({"spec": {"disruption": {"consolidateAfter": "0s"}}});
    pools
        .patch(NAME, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&consolidate))
        .await
        .expect("letting the pool consolidate");
    let after = controller
        .wait_until("consolidation onto the overlaid F family", STAGE, || {
            let client = client.clone();
            async move {
                let claims = claims_of(&client, NAME).await?;
                let types: Vec<String> = claims
                    .iter()
                    .filter_map(|c| c["metadata"]["labels"]["node.kubernetes.io/instance-type"].as_str())
                    .map(str::to_string)
                    .collect();
                if !types.is_empty() && types.iter().all(|t| family(t) == 'F') {
                    Ok(types)
                } else {
                    Err(format!("NodeClaims of sizes {types:?}"))
                }
            }
        })
        .await;
    assert!(!after.contains(&first[0]), "the list-priced node is replaced: {after:?}");

    let api = objects::api_for(&client, &overlay).await.expect("the NodeOverlay API");
    api.delete(NAME, &Default::default()).await.expect("deleting the NodeOverlay");
    pools.delete(NAME, &Default::default()).await.expect("deleting the NodePool");
    cleanup::remove(&client, NAME, &[two], || controller.exit_status().is_none()).await;
}

/// The stored `ValidationSucceeded` status and reason and `Ready` status of NodeOverlay `name`.
async fn overlay_conditions(client: &kube::Client, name: &str) -> (String, String, String) {
    let stored = objects::get(
        client,
        &json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name}
        }),
    )
    .await;
    let conditions = stored["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let field = |t: &str, f: &str| {
        conditions.iter().find(|c| c["type"] == t).and_then(|c| c[f].as_str()).unwrap_or_default().to_string()
    };
    (field("ValidationSucceeded", "status"), field("ValidationSucceeded", "reason"), field("Ready", "status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlay_pricing_what_one_of_the_same_weight_prices_is_not_ready_with_a_conflict() {
    let client = super::cluster::shared().client().await;
    crds::ensure_installed(&client, &[NODEOVERLAYS]).await;
    let controller =
        setup::controller(CONFLICT).env("FEATURE_GATES", "NodeOverlay=true").start(&client).await;
    let class = manifests::node_class(CONFLICT);
    let pool = manifests::node_pool(CONFLICT, None);
    setup::class_and_pool_ready(&client, &controller, &class, &pool).await;

    // Both price the D family of this test's pool at weight 10. At equal weight upstream takes the name
    // later in the alphabet first, so `-b` prices the offerings and `-a` conflicts.
    let overlay = |suffix: &str, price: &str| {
        json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": format!("{CONFLICT}-{suffix}")},
            "spec": {"weight": 10, "price": price, "requirements": [
                {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D"]},
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": [CONFLICT]}
            ]}
        })
    };
    let (first, second) = (overlay("a", "0.01"), overlay("b", "0.02"));
    objects::apply(&client, &first).await.expect("applying the first NodeOverlay");
    objects::apply(&client, &second).await.expect("applying the second NodeOverlay");
    let (a, b) = (format!("{CONFLICT}-a"), format!("{CONFLICT}-b"));
    controller
        .wait_until("one overlay Ready, the other False with reason Conflict", STAGE, || {
            let (client, a, b) = (client.clone(), a.clone(), b.clone());
            async move {
                let got = (overlay_conditions(&client, &a).await, overlay_conditions(&client, &b).await);
                let conflict = ("False".to_string(), "Conflict".to_string(), "False".to_string());
                let applied = ("True".to_string(), "ValidationSucceeded".to_string(), "True".to_string());
                if got == (conflict, applied) {
                    Ok(())
                } else {
                    Err(format!("(a, b) = {got:?}"))
                }
            }
        })
        .await;

    // With the overlay it conflicted with gone, the other applies.
    let api = objects::api_for(&client, &second).await.expect("the NodeOverlay API");
    api.delete(&b, &Default::default()).await.expect("deleting the second NodeOverlay");
    controller
        .wait_until("the first overlay Ready once the second is gone", STAGE, || {
            let (client, a) = (client.clone(), a.clone());
            async move {
                match overlay_conditions(&client, &a).await {
                    (v, _, r) if v == "True" && r == "True" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;

    api.delete(&a, &Default::default()).await.expect("deleting the first NodeOverlay");
    let pools = objects::api_for(&client, &pool).await.expect("the NodePool API");
    pools.delete(CONFLICT, &Default::default()).await.expect("deleting the NodePool");
    cleanup::remove(&client, CONFLICT, &[], || controller.exit_status().is_none()).await;
}
