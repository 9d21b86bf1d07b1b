//! Removing what a controller test created, in the order finalizers need: the workloads, then the
//! NodeClaims (the controller, while still `alive`, drains them and removes their finalizers), then the
//! NodePool, AKSNodeClass and namespace. Best effort: the assertions have already run, and what is left
//! is reported, never fatal.

use std::time::Duration;

use kube::api::{Api, DeleteParams};
use kube::Client;
use serde_json::Value;

use super::lookups::{claims_of, nodeclaims};
use super::{manifests, objects, wait};

/// How long the NodeClaims may take to go.
const CLAIMS_GONE: Duration = Duration::from_secs(60);

/// Deletes `workloads` (namespaced objects with apiVersion, kind, name and namespace), the NodeClaims of
/// NodePool `name`, the NodePool and AKSNodeClass `name` and the namespace `name`.
pub async fn remove(client: &Client, name: &str, workloads: &[Value], mut alive: impl FnMut() -> bool) {
    let background = DeleteParams::background();
    for object in workloads {
        if let Ok(api) = objects::api_for(client, object).await {
            let _ = api.delete(object["metadata"]["name"].as_str().unwrap_or_default(), &background).await;
        }
    }
    for claim in claims_of(client, name).await.unwrap_or_default() {
        let claim_name = claim["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let _ = nodeclaims(client).delete(&claim_name, &background).await;
    }
    // Without a controller nobody removes the finalizers: no point waiting then.
    let _ = wait::within(CLAIMS_GONE, || {
        let alive = alive();
        async move {
            match claims_of(client, name).await {
                Ok(left) if left.is_empty() || !alive => Ok(()),
                Ok(left) => Err(format!("{} NodeClaims left", left.len())),
                Err(err) => Err(err),
            }
        }
    })
    .await;
    let left = claims_of(client, name).await.unwrap_or_default();
    if !left.is_empty() {
        eprintln!("e2e: cleanup of {name}: {} NodeClaims still there", left.len());
    }
    for object in [manifests::node_pool(name, None), manifests::node_class(name)] {
        if let Ok(api) = objects::api_for(client, &object).await {
            let _ = api.delete(name, &background).await;
        }
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(name, &background).await;
}
