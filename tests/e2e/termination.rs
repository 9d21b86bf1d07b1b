//! Termination end to end: a PodDisruptionBudget blocks the drain of a deleted
//! NodeClaim's Node; the controller waits (Node tainted, pods and VM kept, claim held by its finalizer)
//! and finishes once the budget allows the evictions.
//!
//! Like the provisioning tests: its own namespace, AKSNodeClass and NodePool, its own controller and fake
//! ARM; the Deployment's pods select the NodePool, so they land only on nodes launched for them.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use super::controller::Controller;
use super::lookups::{self, nodeclaims};
use super::{cleanup, cluster, manifests, objects, setup};

const NAME: &str = "e2e-term-pdb";
const APP: &str = "web";
const REPLICAS: usize = 2;
const TAINT_DISRUPTED: &str = "karpenter.sh/disrupted";
/// How long each stage may take.
const STAGE: Duration = Duration::from_secs(60);
/// How long the test watches the blocked drain make no progress.
const HOLD: Duration = Duration::from_secs(10);

fn node_class() -> Value {
    manifests::node_class(NAME)
}

fn node_pool() -> Value {
    manifests::node_pool(NAME, Some("D"))
}

fn deployment(replicas: usize) -> Value {
    manifests::deployment(NAME, APP, NAME, replicas, "500m", "1Gi")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_blocks_the_drain_until_it_allows_the_evictions_then_termination_finishes() {
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).start(&client).await;
    setup::class_and_pool_ready(&client, &controller, &node_class(), &node_pool()).await;

    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NAME);
    let pdb = serde_json::from_value(json!({
        "metadata": {"name": APP},
        "spec": {"minAvailable": REPLICAS, "selector": {"matchLabels": {"app": APP}}}
    }))
    .expect("a PDB");
    budgets.create(&PostParams::default(), &pdb).await.expect("creating the PDB");
    let started = Instant::now();
    objects::apply(&client, &deployment(REPLICAS)).await.expect("applying the Deployment");
    let pods = setup::running_pods(&client, NAME, &format!("app={APP}"), REPLICAS)
        .within(STAGE)
        .wait(&controller)
        .await;
    let provisioned_after = started.elapsed();
    budget_allows(&controller, &budgets, 0).await;

    let claims = lookups::claims_of(&client, NAME).await.expect("listing NodeClaims");
    let claim_names: Vec<String> = claims.iter().map(|c| name_of(c).to_string()).collect();
    let vm_names: BTreeSet<String> =
        claims.iter().filter_map(vm_name_of).map(str::to_ascii_lowercase).collect();
    let node_names: BTreeSet<String> =
        pods.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
    let pod_uids: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    assert!(!claim_names.is_empty() && vm_names.len() == claim_names.len(), "claims {claims:#?}");

    let claims_api = nodeclaims(&client);
    for claim in &claim_names {
        claims_api.delete(claim, &DeleteParams::default()).await.expect("deleting a NodeClaim");
    }
    let deleted = Instant::now();
    let nodes_api: Api<Node> = Api::all(client.clone());
    controller
        .wait_until("the Nodes to get the karpenter.sh/disrupted:NoSchedule taint", STAGE, || async {
            let mut untainted = Vec::new();
            for node in &node_names {
                let found = nodes_api.get(node).await.map_err(|err| format!("{node}: {err}"))?;
                let taints = found.spec.and_then(|s| s.taints).unwrap_or_default();
                if !taints.iter().any(|t| t.key == TAINT_DISRUPTED && t.effect == "NoSchedule") {
                    untainted.push(format!("{node} {taints:?}"));
                }
            }
            if untainted.is_empty() {
                Ok(())
            } else {
                Err(untainted.join("; "))
            }
        })
        .await;
    let tainted_after = deleted.elapsed();

    // The budget allows nothing: for a while, nothing may move.
    let hold_until = Instant::now() + HOLD;
    while Instant::now() < hold_until {
        if let Some(status) = controller.exit_status() {
            panic!("the controller exited ({status}) while the PDB blocked the drain");
        }
        let live: BTreeSet<String> = lookups::list_pods(&client, NAME, APP)
            .await
            .expect("listing pods")
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        assert!(
            pod_uids.is_subset(&live),
            "pods were removed while the PDB forbade it: {pod_uids:?} vs {live:?}"
        );
        for vm in &vm_names {
            assert!(controller.fake().vm(vm).is_some(), "VM {vm} was deleted before its node was drained");
        }
        for claim in &claim_names {
            let found = claims_api.get_opt(claim).await.expect("reading a NodeClaim");
            let found =
                found.unwrap_or_else(|| panic!("NodeClaim {claim} is gone while its drain is blocked"));
            assert!(found.metadata.deletion_timestamp.is_some(), "NodeClaim {claim} is not being deleted");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    let relaxed = Instant::now();
    budgets
        .patch(APP, &PatchParams::default(), &Patch::Merge(json!({"spec": {"minAvailable": 0}})))
        .await
        .expect("relaxing the PDB");
    let fake = controller.fake();
    controller
        .wait_until("the original pods to be evicted", STAGE, || async {
            let left: Vec<String> = lookups::list_pods(&client, NAME, APP)
                .await?
                .iter()
                .filter(|p| p.metadata.uid.as_ref().is_some_and(|u| pod_uids.contains(u)))
                .map(|p| p.metadata.name.clone().unwrap_or_default())
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still there: {left:?}"))
            }
        })
        .await;
    let evicted_after = relaxed.elapsed();
    controller
        .wait_until("the VMs and NICs to be gone", STAGE, || async {
            let vms = fake.vms().into_iter().filter(|vm| vm_names.contains(&vm.name.to_ascii_lowercase()));
            let nics = fake.nics();
            let nics = nics
                .iter()
                .filter_map(|nic| nic["name"].as_str())
                .filter(|nic| vm_names.contains(&nic.to_ascii_lowercase()));
            let left: Vec<String> =
                vms.map(|vm| format!("VM {}", vm.name)).chain(nics.map(|n| format!("NIC {n}"))).collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(left.join(", "))
            }
        })
        .await;
    controller
        .wait_until("the Nodes and NodeClaims to be gone", STAGE, || async {
            let mut left = Vec::new();
            for node in &node_names {
                if nodes_api.get_opt(node).await.map_err(|err| err.to_string())?.is_some() {
                    left.push(format!("Node {node}"));
                }
            }
            for claim in &claim_names {
                if let Some(found) = claims_api.get_opt(claim).await.map_err(|err| err.to_string())? {
                    left.push(format!("NodeClaim {claim} (finalizers {:?})", found.metadata.finalizers));
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(left.join(", "))
            }
        })
        .await;
    println!(
        "e2e termination: {} NodeClaim(s) for {REPLICAS} pods (Running {provisioned_after:.1?} after the \
         Deployment); tainted {tainted_after:.1?} after deletion; held {HOLD:?} by the PDB; after relaxing it: \
         pods evicted {evicted_after:.1?}, everything gone {:.1?}",
        claim_names.len(),
        relaxed.elapsed()
    );
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": APP, "namespace": NAME}});
    cleanup::remove(&client, NAME, &[deployment(0), pdb], || controller.exit_status().is_none()).await;
}

/// Waits until the disruption controller has processed the budget and allows exactly `allowed`.
async fn budget_allows(controller: &Controller, budgets: &Api<PodDisruptionBudget>, allowed: i32) {
    controller
        .wait_until(&format!("the PDB to allow {allowed} disruption(s)"), STAGE, || async {
            let pdb = budgets.get(APP).await.map_err(|err| err.to_string())?;
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

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

fn vm_name_of(claim: &Value) -> Option<&str> {
    let provider_id = claim["status"]["providerID"].as_str().filter(|id| !id.is_empty())?;
    provider_id.rsplit('/').next()
}
