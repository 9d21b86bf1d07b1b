//! Kubernetes Events: one pending
//! pod gets a `Nominated` event naming its new NodeClaim, and that NodeClaim gets a `Launched` event.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::{json, Value};

use super::lookups::nodeclaims;
use super::{cleanup, cluster, manifests, objects, setup};

const NAME: &str = "e2e-events";
const POD: &str = "pending";
const STAGE: Duration = Duration::from_secs(60);
const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";

fn node_class() -> Value {
    manifests::node_class(NAME)
}

fn node_pool() -> Value {
    manifests::node_pool(NAME, None)
}

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": NAME},
    "spec": {
        "nodeSelector": {LABEL_NODEPOOL: NAME},
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]
    }})
}

async fn claim_names(client: &Client) -> Result<Vec<String>, String> {
    let list = nodeclaims(client)
        .list(&ListParams::default().labels(&format!("{LABEL_NODEPOOL}={NAME}")))
        .await
        .map_err(|e| format!("listing NodeClaims: {e}"))?;
    Ok(list.items.into_iter().filter_map(|c| c.metadata.name).collect())
}

/// Events in `namespace` about `kind`/`name` with `reason`, as "reason: note".
async fn events_about(
    client: &Client,
    namespace: &str,
    kind: &str,
    name: &str,
    reason: &str,
) -> Result<Vec<String>, String> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = events.list(&ListParams::default()).await.map_err(|e| format!("listing events: {e}"))?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| {
            let r = e.regarding.as_ref();
            r.and_then(|r| r.kind.as_deref()) == Some(kind)
                && r.and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .map(|e| format!("{reason}: {}", e.note.unwrap_or_default()))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_pod_is_nominated_and_its_nodeclaim_reports_launched() {
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).start(&client).await;
    setup::class_and_pool_ready(&client, &controller, &node_class(), &node_pool()).await;

    objects::apply(&client, &pod()).await.expect("creating the pod");
    let claim = controller
        .wait_until("a NodeClaim for the pod", STAGE, || async {
            claim_names(&client).await?.into_iter().next().ok_or_else(|| "no NodeClaim yet".to_string())
        })
        .await;
    let nominated = controller
        .wait_until("a Nominated event on the pod", STAGE, || async {
            let found = events_about(&client, NAME, "Pod", POD, "Nominated").await?;
            found.into_iter().next().ok_or_else(|| "no Nominated event yet".to_string())
        })
        .await;
    assert_eq!(nominated, format!("Nominated: Pod should schedule on: nodeclaim/{claim}"));
    let launched = controller
        .wait_until("a Launched event on the NodeClaim", STAGE, || async {
            let found = events_about(&client, "default", "NodeClaim", &claim, "Launched").await?;
            found.into_iter().next().ok_or_else(|| "no Launched event yet".to_string())
        })
        .await;
    assert!(launched.starts_with("Launched: Launched Standard_"), "{launched}");

    cleanup::remove(&client, NAME, &[pod()], || controller.exit_status().is_none()).await;
}
