//! Drift and consolidatability detection end to end: a NodeClaim launched for a pod carries the
//! NodePool and AKSNodeClass hash annotations; it gets `lastPodEventTime` when its pod binds and
//! `Consolidatable=True` once the NodePool's consolidateAfter (5 s) has passed; a change of the
//! AKSNodeClass's tags only leaves it alone, a change of its osDiskSizeGB makes it `Drifted=True`
//! with reason `NodeClassDrift` and a `Drifted` event.
//!
//! A disruption loop may replace drifted or consolidatable nodes, so the test asserts on the
//! conditions appearing, not on the node staying. Its own namespace, AKSNodeClass, NodePool,
//! controller and fake ARM, as the other controller tests.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use super::lookups::{self, condition_is_true};
use super::{cleanup, cluster, manifests, objects, setup};

const NAME: &str = "e2e-drift";
const POD: &str = "drift-probe";
/// How long each stage may take.
const STAGE: Duration = Duration::from_secs(60);
/// How long a tags-only change is watched for a wrong Drifted: three sweeps and then some.
const QUIET: Duration = Duration::from_secs(20);
const ANNOTATIONS: [&str; 4] = [
    "karpenter.sh/nodepool-hash",
    "karpenter.sh/nodepool-hash-version",
    "karpenter.azure.com/aksnodeclass-hash",
    "karpenter.azure.com/aksnodeclass-hash-version",
];

/// The shared on-demand D-family NodePool, with consolidateAfter 5s.
fn node_pool() -> Value {
    let mut pool = manifests::node_pool(NAME, Some("D"));
    pool["spec"]["disruption"] = json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5s"});
    pool
}

fn condition<'a>(claim: &'a Value, type_: &str) -> Option<&'a Value> {
    claim["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

/// The one NodeClaim of the pool.
async fn the_claim(client: &kube::Client) -> Result<Value, String> {
    let claims = lookups::claims_of(client, NAME).await?;
    match claims.as_slice() {
        [claim] => Ok(claim.clone()),
        other => Err(format!("{} NodeClaims", other.len())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_carry_hashes_become_consolidatable_and_drift_on_a_nodeclass_change_but_not_on_tags() {
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).start(&client).await;
    let class = manifests::node_class(NAME);
    setup::class_and_pool_ready(&client, &controller, &class, &node_pool()).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAME);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": POD, "labels": {"app": POD}},
        "spec": manifests::pod_spec(NAME, "500m", "1Gi")
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &pod).await.expect("creating the pod");
    let started = Instant::now();
    setup::running_pods(&client, NAME, &format!("app={POD}"), 1).within(STAGE).wait(&controller).await;
    eprintln!("e2e drift: pod running after {:?}", started.elapsed());

    // (a) The four hash annotations, stamped at creation.
    let claim = the_claim(&client).await.expect("the NodeClaim");
    let claim_name = claim["metadata"]["name"].as_str().unwrap_or_default().to_string();
    for key in ANNOTATIONS {
        let value = claim["metadata"]["annotations"][key].as_str().unwrap_or_default();
        assert!(!value.is_empty(), "annotation {key} missing on {claim_name}: {:#}", claim["metadata"]);
    }

    // (d) The pod's binding is a pod event; 5 s later the claim is Consolidatable.
    let initialized = Instant::now();
    let claim = controller
        .wait_until("Consolidatable=True with a lastPodEventTime", STAGE, || async {
            let claim = the_claim(&client).await?;
            let has_event = claim["status"]["lastPodEventTime"].is_string();
            (has_event && condition_is_true(&claim, "Consolidatable"))
                .then_some(claim.clone())
                .ok_or_else(|| format!("{:#}", claim["status"]))
        })
        .await;
    eprintln!("e2e drift: Consolidatable=True {:?} after the pod ran", initialized.elapsed());
    assert!(condition(&claim, "Drifted").is_none(), "a fresh claim is not drifted: {:#}", claim["status"]);

    // (c) Tags are applied in place, not by replacing nodes: no drift, and the VM and its NIC carry them.
    objects::merge_patch(&client, &class, &json!({"spec": {"tags": {"team": "drift-e2e"}}}))
        .await
        .expect("patching the tags");
    let tagged = Instant::now();
    let vm_name = format!("aks-{claim_name}");
    controller
        .wait_until("the VM and NIC to carry the new tag in place", STAGE, || async {
            let vm = controller.fake().vm(&vm_name).ok_or("no VM")?;
            let nic = controller
                .fake()
                .nics()
                .into_iter()
                .find(|n| n["name"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(&vm_name)))
                .ok_or("no NIC")?;
            let has = |doc: &serde_json::Value| doc["tags"]["team"] == "drift-e2e";
            if has(&vm.document) && has(&nic) {
                Ok(())
            } else {
                Err(format!("VM tags {}, NIC tags {}", vm.document["tags"], nic["tags"]))
            }
        })
        .await;
    eprintln!(
        "e2e drift: the new tag reached the VM and NIC in place {:?} after the change",
        tagged.elapsed()
    );
    let quiet_until = Instant::now() + QUIET;
    while Instant::now() < quiet_until {
        let claim = the_claim(&client).await.expect("the NodeClaim");
        assert!(
            condition(&claim, "Drifted").is_none(),
            "a tags-only change drifted {claim_name}: {:#}",
            claim["status"]
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // (b) The OS disk size is part of the class's hash: the claim drifts.
    objects::merge_patch(&client, &class, &json!({"spec": {"osDiskSizeGB": 256}}))
        .await
        .expect("patching osDiskSizeGB");
    let changed = Instant::now();
    let drifted = controller
        .wait_until("Drifted=True with reason NodeClassDrift", STAGE, || async {
            let claims = lookups::claims_of(&client, NAME).await?;
            let claim = claims
                .iter()
                .find(|c| c["metadata"]["name"] == claim_name.as_str())
                .ok_or_else(|| "the claim is gone before it was seen drifted".to_string())?;
            match condition(claim, "Drifted") {
                Some(c) if c["status"] == "True" => Ok(c.clone()),
                other => Err(format!("Drifted: {other:?}")),
            }
        })
        .await;
    eprintln!("e2e drift: Drifted=True {:?} after the AKSNodeClass change", changed.elapsed());
    assert_eq!(drifted["reason"], "NodeClassDrift", "{drifted:#}");
    // NodeClaims are cluster-scoped: their events are in "default".
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let note = controller
        .wait_until("a Drifted event on the NodeClaim", STAGE, || async {
            let list =
                events.list(&ListParams::default()).await.map_err(|e| format!("listing events: {e}"))?;
            list.items
                .into_iter()
                .find(|e| {
                    let about = e.regarding.as_ref().and_then(|r| r.name.as_deref());
                    about == Some(claim_name.as_str()) && e.reason.as_deref() == Some("Drifted")
                })
                .map(|e| e.note.unwrap_or_default())
                .ok_or_else(|| "no Drifted event yet".to_string())
        })
        .await;
    assert!(note.contains("NodeClassDrift"), "{note}");

    cleanup::remove(
        &client,
        NAME,
        &[json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": NAME}})],
        || controller.exit_status().is_none(),
    )
    .await;
}
