//! What the drain, repair and interruption tests share: the nodes of their pods, a counter read from the
//! controller's metrics, and a Node whose kubelet "stops".
//!
//! kwok plays every Node's kubelet and sets a Node that is not Ready back to Ready at once. The
//! cluster starts kwok with `--disregard-status-with-annotation-selector` on
//! [`KUBELET_STOPPED`] (see `hack/e2e-cluster.sh`), so a Node carrying that annotation keeps the
//! status a test writes, as a Node whose kubelet stopped would; kwok still renews its Lease, so
//! kube-controller-manager leaves the status alone too.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use super::controller::Controller;
use super::prometheus;

/// The annotation kwok is told to disregard (`hack/e2e-cluster.sh`, `E2E_KWOK_DISREGARD`).
pub const KUBELET_STOPPED: (&str, &str) = ("e2e.karpenter-azure.io/kubelet-stopped", "true");

/// The node each pod runs on, sorted and deduplicated.
pub fn nodes_of(pods: &[Pod]) -> Vec<String> {
    let mut nodes: Vec<String> = pods.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

/// The sum of the controller's `name` samples carrying `labels`, 0 when there is none.
pub async fn counter(controller: &Controller, name: &str, labels: &[(&str, &str)]) -> f64 {
    let url = format!("http://127.0.0.1:{}/metrics", controller.metrics_port());
    let (_, text) = prometheus::get(&url).await.expect("scraping the controller");
    let samples = prometheus::parse(&text).expect("parsing the metrics");
    prometheus::sum(&samples, name, labels).unwrap_or(0.0)
}

/// Marks the Node so kwok leaves its status alone, as if its kubelet had stopped.
pub async fn stop_kubelet(client: &Client, node: &str) {
    let patch = json!({"metadata": {"annotations": {KUBELET_STOPPED.0: KUBELET_STOPPED.1}}});
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|err| panic!("annotating node {node}: {err}"));
}

/// Gives the Node back to kwok, which reports it Ready again.
pub async fn start_kubelet(client: &Client, node: &str) {
    set_ready(client, node, "True").await;
    let patch = json!({"metadata": {"annotations": {KUBELET_STOPPED.0: null}}});
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|err| panic!("annotating node {node}: {err}"));
}

/// Writes the Node's Ready condition (`True`, `False` or `Unknown`), transitioning now.
pub async fn set_ready(client: &Client, node: &str, status: &str) {
    set_condition(client, node, "Ready", status).await;
}

/// Writes the condition `type_` with `status`, transitioned now, on the Node (a node agent's report).
pub async fn set_condition(client: &Client, node: &str, type_: &str, status: &str) {
    let now = Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [{
        "type": type_, "status": status, "reason": "E2E", "message": "set by the e2e test",
        "lastHeartbeatTime": now, "lastTransitionTime": now
    }]}});
    Api::<Node>::all(client.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap_or_else(|err| panic!("setting {type_}={status} on node {node}: {err}"));
}

/// The name of a NodeClaim as JSON.
pub fn name_of(object: &Value) -> String {
    object["metadata"]["name"].as_str().unwrap_or_default().to_string()
}

/// The VM name at the end of a NodeClaim's providerID.
pub fn vm_of(claim: &Value) -> Option<String> {
    let provider_id = claim["status"]["providerID"].as_str().filter(|id| !id.is_empty())?;
    provider_id.rsplit('/').next().map(str::to_string)
}
