//! Kubernetes Events: one pending pod gets a `Nominated` event naming its new NodeClaim, that NodeClaim
//! gets a `Launched` event, and its Node, which carries the NodePool template's annotation, gets
//! upstream's `Unconsolidatable` event because the pool's consolidation is off.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
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
const ANNOTATION: &str = "example.com/team";

fn node_class() -> Value {
    manifests::node_class(NAME)
}

/// consolidateAfter Never (the scenario default), and an annotation its nodes must carry.
fn node_pool() -> Value {
    let mut pool = manifests::node_pool(NAME, None);
    pool["spec"]["template"]["metadata"] = json!({"annotations": {ANNOTATION: "from-the-template"}});
    pool
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

    // The template's annotation reaches the Node; consolidation, off in this pool, says so on the Node.
    let nodes: Api<Node> = Api::all(client.clone());
    let node = controller
        .wait_until("the claim's Node with the template's annotation", STAGE, || async {
            let claim = nodeclaims(&client).get(&claim).await.map_err(|e| e.to_string())?;
            let name = claim.data["status"]["nodeName"].as_str().ok_or("no Node yet")?.to_string();
            let node = nodes.get(&name).await.map_err(|e| e.to_string())?;
            match node.metadata.annotations.as_ref().and_then(|a| a.get(ANNOTATION)) {
                Some(value) if value == "from-the-template" => Ok(name),
                other => Err(format!("annotation {ANNOTATION}: {other:?}")),
            }
        })
        .await;
    let unconsolidatable = controller
        .wait_until("an Unconsolidatable event on the Node", Duration::from_secs(90), || async {
            let found = events_about(&client, "default", "Node", &node, "Unconsolidatable").await?;
            found.into_iter().next().ok_or_else(|| "no Unconsolidatable event yet".to_string())
        })
        .await;
    assert_eq!(unconsolidatable, format!("Unconsolidatable: NodePool \"{NAME}\" has consolidation disabled"));

    cleanup::remove(&client, NAME, &[pod()], || controller.exit_status().is_none()).await;
}
