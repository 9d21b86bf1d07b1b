//! kube-controller-manager's disruption controller computes a PodDisruptionBudget's status, and the
//! Eviction API (what Karpenter's termination controller drains nodes with) enforces it: 429 while an
//! eviction would break the budget, success once a second healthy pod makes room.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{EvictParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::{cluster, kwok, objects, wait};

const NAMESPACE: &str = "e2e-eviction";
const NODE: &str = "aks-e2e-evict-1";

/// Waits until the disruption controller has processed the budget's current generation and allows
/// exactly `allowed` disruptions.
async fn budget_allows(client: &Client, allowed: i32) {
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NAMESPACE);
    wait::until(&format!("PDB web to allow {allowed} disruption(s)"), kwok::STEP, || async {
        let pdb = budgets.get("web").await.map_err(|err| err.to_string())?;
        let status = pdb.status.clone().unwrap_or_default();
        let current =
            status.observed_generation.is_some() && status.observed_generation == pdb.metadata.generation;
        if current && status.disruptions_allowed == allowed {
            Ok(())
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
}

fn web_pod(name: &str) -> Pod {
    // Bound directly: this test is about the budget, not about scheduling.
    kwok::pod(name, json!({"app": "web"}), json!({"nodeName": NODE}))
}

#[tokio::test]
async fn the_eviction_api_refuses_to_break_a_pdb_and_allows_it_once_the_pdb_has_room() {
    let client = cluster::shared().client().await;
    objects::namespace(&client, NAMESPACE).await;
    kwok::register(&client, kwok::booted_vm(NODE)).await;
    kwok::ready_node(&client, NODE).await;

    kwok::create_pod(&client, NAMESPACE, &web_pod("web-1")).await;
    kwok::running_pod(&client, NAMESPACE, "web-1").await;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NAMESPACE);
    let pdb = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    budgets.create(&PostParams::default(), &pdb).await.expect("PDB created");
    budget_allows(&client, 0).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    match pods.evict("web-1", &EvictParams::default()).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 429, "{status:?}");
            assert!(status.message.contains("disruption budget"), "{}", status.message);
        }
        other => panic!("evicting the only healthy pod must be refused with 429, got {other:?}"),
    }

    kwok::create_pod(&client, NAMESPACE, &web_pod("web-2")).await;
    kwok::running_pod(&client, NAMESPACE, "web-2").await;
    budget_allows(&client, 1).await;
    pods.evict("web-1", &EvictParams::default()).await.expect("the eviction the budget allows succeeds");

    // kwok deletes the evicted pod, and the budget is back to no room.
    wait::until("pod web-1 to be gone after its eviction", Duration::from_secs(30), || async {
        match pods.get_opt("web-1").await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.map(|p| p.metadata.deletion_timestamp)))),
        }
    })
    .await;
    budget_allows(&client, 0).await;
}
