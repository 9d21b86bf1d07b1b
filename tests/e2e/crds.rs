//! Installs the checked-in CRDs (`crds/`) once per test binary and proves they are real: each becomes
//! Established, and the seed examples apply and read back with the defaults the API server fills in.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};
use serde_json::{json, Value};
use tokio::sync::OnceCell;

use super::{cluster, objects, wait};

/// The CRD names, as `ensure_installed` takes them.
pub const NODEPOOLS: &str = "nodepools.karpenter.sh";
pub const NODECLAIMS: &str = "nodeclaims.karpenter.sh";
pub const AKSNODECLASSES: &str = "aksnodeclasses.karpenter.azure.com";
pub const NODEOVERLAYS: &str = "nodeoverlays.karpenter.sh";

/// The outcome of the one installation, per CRD name: Established, or the API server's refusal (which
/// names the failing rule). Kept per CRD so that one broken CRD fails only the tests that need it.
static INSTALLED: OnceCell<BTreeMap<String, Result<(), String>>> = OnceCell::const_new();

/// Installs every CRD of `crds/` (only the first call does the work) and panics unless each of `needed`
/// is Established, quoting the API server's refusal.
pub async fn ensure_installed(client: &Client, needed: &[&str]) {
    let outcome = INSTALLED.get_or_init(|| install(client.clone())).await;
    let failures: Vec<String> = needed
        .iter()
        .filter_map(|name| match outcome.get(*name) {
            Some(Ok(())) => None,
            Some(Err(refusal)) => Some(format!("{name}: {refusal}")),
            None => Some(format!("{name}: not in crds/")),
        })
        .collect();
    assert!(failures.is_empty(), "CRDs of crds/ did not install:\n{}", failures.join("\n"));
}

/// Like `ensure_installed` for every CRD in `crds/`; returns their names.
pub async fn ensure_all_installed(client: &Client) -> Vec<String> {
    let outcome = INSTALLED.get_or_init(|| install(client.clone())).await;
    let names: Vec<&str> = outcome.keys().map(String::as_str).collect();
    ensure_installed(client, &names).await;
    outcome.keys().cloned().collect()
}

/// The YAML files under `crds/`, sorted.
fn crd_files() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    files.sort();
    files
}

async fn install(client: Client) -> BTreeMap<String, Result<(), String>> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut outcome = BTreeMap::new();
    for file in crd_files() {
        for doc in objects::yaml_documents(&objects::repo_file(&format!("crds/{file}"))) {
            let name = doc["metadata"]["name"].as_str().unwrap_or(&file).to_string();
            let result = match objects::apply(&client, &doc).await {
                Ok(_) => {
                    established(&crds, &name).await;
                    Ok(())
                }
                Err(err) => Err(format!("crds/{file} refused: {err}")),
            };
            outcome.insert(name, result);
        }
    }
    outcome
}

async fn established(crds: &Api<CustomResourceDefinition>, name: &str) {
    wait::until(&format!("CRD {name} to be Established"), Duration::from_secs(30), || async {
        let crd = crds.get(name).await.map_err(|err| err.to_string())?;
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        match conditions.iter().find(|c| c.type_ == "Established") {
            Some(c) if c.status == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

fn aksnodeclass(name: &str, spec: Value) -> Value {
    let api_version = "karpenter.azure.com/v1beta1";
    json!({"apiVersion": api_version, "kind": "AKSNodeClass", "metadata": {"name": name}, "spec": spec})
}

fn at<'a>(object: &'a Value, pointer: &str) -> &'a Value {
    object.pointer(pointer).unwrap_or_else(|| panic!("{pointer} missing in {object:#}"))
}

/// Held by tests that apply objects with the names users' examples give them (`default`, `general`):
/// they would overwrite each other's.
pub static DEFAULT_NAMES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn every_crd_installs_and_the_seed_examples_read_back_with_server_defaults() {
    let _names = DEFAULT_NAMES.lock().await;
    let client = cluster::shared().client().await;
    let names = ensure_all_installed(&client).await;
    assert_eq!(names, [AKSNODECLASSES, NODECLAIMS, NODEOVERLAYS, NODEPOOLS], "the CRDs in crds/");

    let applied =
        objects::apply_yaml(&client, &objects::repo_file("examples/aksnodeclass-default.yaml")).await;
    assert_eq!(applied.len(), 1);
    objects::apply_yaml(&client, &objects::repo_file("examples/nodepool-general.yaml")).await;

    // Read back as raw JSON: our own types would fill the same defaults client-side and so hide a CRD
    // that lacks them.
    let pool = objects::get(
        &client,
        &json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"}}),
    )
    .await;
    assert_eq!(
        at(&pool, "/spec/template/spec/nodeClassRef"),
        &json!({"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"})
    );
    assert_eq!(at(&pool, "/spec/template/spec/expireAfter"), "720h");
    assert_eq!(at(&pool, "/spec/disruption/budgets"), &json!([{"nodes": "10%"}]));
    assert_eq!(at(&pool, "/spec/disruption/consolidationPolicy"), "WhenEmptyOrUnderutilized");
    assert_eq!(at(&pool, "/spec/disruption/consolidateAfter"), "0s");
    assert_eq!(at(&pool, "/spec/limits"), &json!({"cpu": "200", "memory": "400Gi"}));

    let class_ref = aksnodeclass("default", json!({}));
    let class = objects::get(&client, &class_ref).await;
    assert_eq!(at(&class, "/spec/imageFamily"), "Ubuntu");
    assert_eq!(at(&class, "/spec/osDiskSizeGB"), 128);
    assert_eq!(at(&class, "/spec/tags"), &json!({"team": "platform"}));

    // The example sets osDiskSizeGB itself; an empty spec shows the server's own defaults.
    let bare = aksnodeclass("e2e-bare", json!({}));
    let stored =
        serde_json::to_value(objects::apply(&client, &bare).await.expect("empty AKSNodeClass applies"))
            .unwrap();
    assert_eq!(at(&stored, "/spec/osDiskSizeGB"), 128);
    assert_eq!(at(&stored, "/spec/imageFamily"), "Ubuntu");
}
