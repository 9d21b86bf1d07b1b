//! Reads the controller tests share: NodeClaims of a pool, pods of an app, an object as JSON, and
//! whether a pod runs.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::Client;
use serde_json::Value;

use super::manifests::LABEL_NODEPOOL;
use super::objects;

/// The cluster-scoped NodeClaim API, without discovery.
pub fn nodeclaims(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "nodeclaims"))
}

/// The NodeClaims labelled with the NodePool, as JSON.
pub async fn claims_of(client: &Client, pool: &str) -> Result<Vec<Value>, String> {
    let selector = ListParams::default().labels(&format!("{LABEL_NODEPOOL}={pool}"));
    let list =
        nodeclaims(client).list(&selector).await.map_err(|err| format!("listing NodeClaims: {err}"))?;
    Ok(list.items.iter().map(|claim| serde_json::to_value(claim).expect("a NodeClaim serializes")).collect())
}

/// The stored object, as JSON.
pub async fn get_json(client: &Client, object: &Value) -> Result<Value, String> {
    let api = objects::api_for(client, object).await.map_err(|err| err.to_string())?;
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let stored = api.get(name).await.map_err(|err| format!("reading {name}: {err}"))?;
    serde_json::to_value(stored).map_err(|err| err.to_string())
}

/// The pods labelled `app=<app>` in `namespace`.
pub async fn list_pods(client: &Client, namespace: &str, app: &str) -> Result<Vec<Pod>, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods.list(&ListParams::default().labels(&format!("app={app}"))).await;
    Ok(list.map_err(|err| format!("listing pods: {err}"))?.items)
}

/// Bound, Running and not being deleted.
pub fn is_running(pod: &Pod) -> bool {
    let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    bound && phase == Some("Running") && pod.metadata.deletion_timestamp.is_none()
}

/// Whether `status.conditions` has `type_` with status True.
pub fn condition_is_true(object: &Value, type_: &str) -> bool {
    let conditions = object["status"]["conditions"].as_array().cloned().unwrap_or_default();
    conditions.iter().any(|c| c["type"] == type_ && c["status"] == "True")
}
