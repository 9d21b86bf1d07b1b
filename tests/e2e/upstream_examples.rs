//! Upstream's own manifests, unchanged: the Azure provider's `examples/v1/*.yaml` (one of them at
//! AKSNodeClass `v1alpha2`) and its e2e default NodePool and AKSNodeClass, restated under
//! `tests/fixtures/upstream/` field for field. Each file applies to the real API server as it is, its classes
//! and pools become Ready, and a pod for each of its NodePools runs on a node launched for it.
//!
//! Several of them carry Cilium's startup taint (`node.cilium.io/agent-not-ready`); on AKS the Cilium
//! agent removes it once it runs on the node. There is no Cilium here, so the test plays its part.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};

use super::lookups::claims_of;
use super::{crds, manifests, objects, setup};

const NS: &str = "e2e-upstream";
const STAGE: Duration = Duration::from_secs(150);
const FIXTURES: [&str; 4] =
    ["general-purpose.yaml", "perftest.yaml", "system-surge.yaml", "e2e-defaults.yaml"];
const CILIUM_TAINT: &str = "node.cilium.io/agent-not-ready";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_example_manifests_apply_unchanged_and_each_nodepool_runs_a_pod() {
    // The files name their objects `default` and the like, as the seed example does.
    let _names = crds::DEFAULT_NAMES.lock().await;
    let client = super::cluster::shared().client().await;
    let controller = setup::controller(NS).start(&client).await;
    let cilium = tokio::spawn(play_cilium(client.clone()));
    // Classes stay from file to file: upstream's system-surge pool uses the `default` class of its
    // general-purpose example.
    let mut classes: BTreeMap<String, Value> = BTreeMap::new();
    for file in FIXTURES {
        let text = objects::repo_file(&format!("tests/fixtures/upstream/{file}"));
        let docs = objects::yaml_documents(&text);
        let of_kind = |kind: &str| docs.iter().filter(|d| d["kind"] == kind).cloned().collect::<Vec<_>>();
        let pools = of_kind("NodePool");
        assert!(!pools.is_empty(), "{file} has NodePools");
        objects::apply_yaml(&client, &text).await;
        for class in of_kind("AKSNodeClass") {
            classes.insert(class["metadata"]["name"].as_str().unwrap().to_string(), class);
        }
        for pool in &pools {
            let class_name = pool["spec"]["template"]["spec"]["nodeClassRef"]["name"].as_str().unwrap();
            let class = classes.get(class_name).unwrap_or_else(|| panic!("{file}: no class {class_name}"));
            setup::class_and_pool_ready(&client, &controller, class, pool).await;
        }
        let deployments: Vec<Value> = pools.iter().map(workload).collect();
        for d in &deployments {
            objects::apply(&client, d).await.unwrap_or_else(|e| panic!("{file}: applying a Deployment: {e}"));
        }
        for pool in &pools {
            let name = pool["metadata"]["name"].as_str().unwrap();
            setup::running_pods(&client, NS, &format!("app=upstream-{name}"), 1)
                .within(STAGE)
                .wait(&controller)
                .await;
            let claims = claims_of(&client, name).await.expect("listing NodeClaims");
            assert!(
                claims.iter().any(|c| c["status"]["providerID"].is_string()),
                "{file}: NodePool {name} launched a node: {claims:#?}"
            );
            // The template's labels reach the claim (and so the node), `kubernetes.azure.com/mode: system`
            // among them.
            let labels =
                pool["spec"]["template"]["metadata"]["labels"].as_object().cloned().unwrap_or_default();
            for claim in &claims {
                for (key, value) in &labels {
                    assert_eq!(&claim["metadata"]["labels"][key], value, "{file}: {name}: {key}");
                }
            }
        }
        remove(&client, &controller, &docs, &deployments).await;
    }
    cilium.abort();
    for class in classes.values() {
        let api = objects::api_for(&client, class).await.expect("an API");
        let _ = api.delete(class["metadata"]["name"].as_str().unwrap(), &DeleteParams::background()).await;
    }
}

/// One pod for `pool`: pinned to it by its nodepool label, tolerating its taints, small enough for any
/// size it allows.
fn workload(pool: &Value) -> Value {
    let name = pool["metadata"]["name"].as_str().unwrap();
    let mut deployment = manifests::deployment(NS, &format!("upstream-{name}"), name, 1, "100m", "128Mi");
    let taints = pool["spec"]["template"]["spec"]["taints"].as_array().cloned().unwrap_or_default();
    let tolerations: Vec<Value> = taints
        .iter()
        .map(|t| json!({"key": t["key"], "operator": "Equal", "value": t["value"], "effect": t["effect"]}))
        .collect();
    deployment["spec"]["template"]["spec"]["tolerations"] = json!(tolerations);
    deployment
}

/// Deletes a file's workloads, its NodePools (so nothing launches again) and their NodeClaims.
async fn remove(
    client: &Client,
    controller: &super::controller::Controller,
    docs: &[Value],
    deployments: &[Value],
) {
    let background = DeleteParams::background();
    for object in deployments.iter().chain(docs.iter().filter(|d| d["kind"] == "NodePool")) {
        let api = objects::api_for(client, object).await.expect("an API");
        let _ = api.delete(object["metadata"]["name"].as_str().unwrap(), &background).await;
    }
    let pools: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "NodePool")
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    controller
        .wait_until("the NodeClaims of the file's pools to go", STAGE, || async {
            let mut left = 0;
            for pool in &pools {
                for claim in claims_of(client, pool).await? {
                    left += 1;
                    let nodeclaims: Api<karpenter_azure::apis::NodeClaim> = Api::all(client.clone());
                    let _ = nodeclaims.delete(claim["metadata"]["name"].as_str().unwrap(), &background).await;
                }
            }
            if left == 0 {
                Ok(())
            } else {
                Err(format!("{left} NodeClaims left"))
            }
        })
        .await;
}

/// What the Cilium agent does on a new node: once running, it removes its startup taint.
async fn play_cilium(client: Client) {
    let nodes: Api<Node> = Api::all(client);
    loop {
        if let Ok(list) = nodes.list(&ListParams::default().labels("karpenter.sh/nodepool")).await {
            for node in list.items {
                let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
                if !taints.iter().any(|t| t.key == CILIUM_TAINT) {
                    continue;
                }
                let kept: Vec<_> = taints.into_iter().filter(|t| t.key != CILIUM_TAINT).collect();
                let patch = json!({"spec": {"taints": kept}});
                let _ = nodes.patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
