//! Writing arbitrary manifests (YAML or JSON) to the API server: server-side apply, create (optionally as a
//! dry run, which runs every validation and admission step without storing), namespaces, and the API
//! server's refusal as text.
//!
//! Objects are handled as `DynamicObject`s found through discovery, so a manifest of any kind, CRDs and
//! custom resources included, goes through the same path and nothing is re-serialized by our own types
//! (which would hide what the API server itself defaults or refuses).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::{json, Value};

use super::wait;

/// The field manager of everything the suite applies.
pub const FIELD_MANAGER: &str = "karpenter-azure-e2e";

/// Every document of a (multi-document) YAML text, skipping empty ones.
pub fn yaml_documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|err| panic!("bad YAML document: {err}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// A file of the repository, by its path from the crate root.
pub fn repo_file(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|err| panic!("{}: {err}", full.display()))
}

/// The API for the object's kind, in its namespace when the kind is namespaced.
pub async fn api_for(client: &Client, object: &Value) -> Result<Api<DynamicObject>, kube::Error> {
    let api_version = object["apiVersion"].as_str().expect("manifest has apiVersion");
    let kind = object["kind"].as_str().expect("manifest has kind");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let (resource, caps) =
        discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind)).await?;
    Ok(match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let namespace = object["metadata"]["namespace"].as_str().unwrap_or("default");
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
    })
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().expect("manifest has metadata.name")
}

/// Server-side apply, forcing ownership of conflicting fields (the suite is the only writer).
pub async fn apply(client: &Client, object: &Value) -> Result<DynamicObject, kube::Error> {
    let api = api_for(client, object).await?;
    api.patch(name_of(object), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(object)).await
}

/// Applies every document of a YAML text, in order.
pub async fn apply_yaml(client: &Client, text: &str) -> Vec<DynamicObject> {
    let mut applied = Vec::new();
    for doc in yaml_documents(text) {
        let name = format!("{} {}", doc["kind"].as_str().unwrap_or("?"), name_of(&doc));
        applied.push(apply(client, &doc).await.unwrap_or_else(|err| panic!("applying {name}: {err}")));
    }
    applied
}

/// Creates the object; with `dry_run` the API server validates and admits it but stores nothing.
pub async fn create(client: &Client, object: &Value, dry_run: bool) -> Result<DynamicObject, kube::Error> {
    let api = api_for(client, object).await?;
    let data: DynamicObject = serde_json::from_value(object.clone()).expect("manifest is an object");
    api.create(&PostParams { dry_run, field_manager: Some(FIELD_MANAGER.into()) }, &data).await
}

/// JSON-merge-patches an object: no resourceVersion, so a controller updating it meanwhile does not
/// turn the request into a conflict.
pub async fn merge_patch(
    client: &Client,
    object: &Value,
    patch: &Value,
) -> Result<DynamicObject, kube::Error> {
    let api = api_for(client, object).await?;
    api.patch(name_of(object), &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await
}

pub async fn get(client: &Client, object: &Value) -> Value {
    let api = api_for(client, object).await.expect("discovery");
    let stored =
        api.get(name_of(object)).await.unwrap_or_else(|err| panic!("reading {}: {err}", name_of(object)));
    serde_json::to_value(stored).expect("stored object serializes")
}

/// The API server's message for a refused request (`Status.message`), or what else went wrong.
pub fn refusal(result: Result<DynamicObject, kube::Error>) -> Result<String, String> {
    match result {
        Err(kube::Error::Api(status)) => Ok(status.message.clone()),
        Err(other) => Err(format!("not an API refusal: {other}")),
        Ok(_) => Err("accepted".to_string()),
    }
}

/// Creates a namespace and waits for its `default` ServiceAccount, which pod admission requires.
pub async fn namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => panic!("creating namespace {name}: {err}"),
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait::until(
        &format!("the default ServiceAccount of namespace {name}"),
        Duration::from_secs(30),
        || async {
            match accounts.get_opt("default").await {
                Ok(Some(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}
