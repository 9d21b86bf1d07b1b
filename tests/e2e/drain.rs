//! The drain end to end, each test with its own namespace, class, pool and controller:
//! - tiers: ordinary pods go first, then DaemonSet pods, then critical pods, then critical DaemonSet
//!   pods, each tier once the one before is gone; a pod under `karpenter.sh/do-not-disrupt: 20s` holds
//!   the first tier until 20 s after it started;
//! - VolumeAttachments: the drained Node's VM is kept while a VolumeAttachment for the Node remains, and
//!   deleted soon after it goes. No CSI driver runs here; the test creates the VolumeAttachment itself,
//!   as the attach-detach controller would for a pod's persistent volume, and deletes it as that
//!   controller would once the pod is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::Api;
use serde_json::{json, Value};

use super::health::{name_of, nodes_of, vm_of};
use super::lookups::{self, nodeclaims};
use super::{cleanup, cluster, manifests, objects, setup};

const NAME: &str = "e2e-drain-volumes";
const APP: &str = "web";
const STAGE: Duration = Duration::from_secs(60);
/// How long the test watches the VM being kept for the attachment.
const HOLD: Duration = Duration::from_secs(8);
/// How soon after the attachment goes the VM must be deleted.
const AFTER_DETACH: Duration = Duration::from_secs(20);

fn attachment(node: &str) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
           "metadata": {"name": format!("csi-{NAME}")},
           "spec": {"attacher": "disk.csi.azure.com", "nodeName": node,
                    "source": {"persistentVolumeName": format!("pv-{NAME}")}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_keeps_the_vm_until_the_nodes_volume_attachments_are_gone() {
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).start(&client).await;
    let (class, pool) = (manifests::node_class(NAME), manifests::node_pool(NAME, Some("D")));
    setup::class_and_pool_ready(&client, &controller, &class, &pool).await;
    let deployment = manifests::deployment(NAME, APP, NAME, 1, "500m", "1Gi");
    objects::apply(&client, &deployment).await.expect("applying the Deployment");
    let pods =
        setup::running_pods(&client, NAME, &format!("app={APP}"), 1).within(STAGE).wait(&controller).await;
    let node = nodes_of(&pods).pop().expect("the pod's node");
    let claims = lookups::claims_of(&client, NAME).await.expect("listing NodeClaims");
    assert_eq!(claims.len(), 1, "{claims:#?}");
    let (claim, vm) = (name_of(&claims[0]), vm_of(&claims[0]).expect("a launched claim"));
    let uids: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();

    let va = attachment(&node);
    objects::apply(&client, &va).await.expect("creating the VolumeAttachment");
    nodeclaims(&client).delete(&claim, &DeleteParams::default()).await.expect("deleting the NodeClaim");
    let deleted = Instant::now();
    controller
        .wait_until("the pod to be evicted", STAGE, || async {
            let pods = lookups::list_pods(&client, NAME, APP).await?;
            let left: Vec<_> =
                pods.iter().filter(|p| p.metadata.uid.as_ref().is_some_and(|u| uids.contains(u))).collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{} still there", left.len()))
            }
        })
        .await;
    let drained_after = deleted.elapsed();

    // Drained, but the attachment remains: the VM stays.
    let hold_until = Instant::now() + HOLD;
    while Instant::now() < hold_until {
        assert!(controller.fake().vm(&vm).is_some(), "VM {vm} was deleted while a VolumeAttachment remained");
        assert!(nodeclaims(&client).get_opt(&claim).await.expect("reading the NodeClaim").is_some());
        lookups::get_json(&client, &va)
            .await
            .unwrap_or_else(|err| panic!("the VolumeAttachment went: {err}"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let api = objects::api_for(&client, &va).await.expect("the VolumeAttachment API");
    api.delete(&name_of(&va), &DeleteParams::default()).await.expect("deleting the VolumeAttachment");
    let detached = Instant::now();
    controller
        .wait_until("the VM to be deleted once the attachment is gone", AFTER_DETACH, || async {
            match controller.fake().vm(&vm) {
                None => Ok(()),
                Some(found) => Err(format!("VM {} still there", found.name)),
            }
        })
        .await;
    let vm_gone_after = detached.elapsed();
    controller
        .wait_until("the NodeClaim to be gone", STAGE, || async {
            match nodeclaims(&client).get_opt(&claim).await.map_err(|err| err.to_string())? {
                None => Ok(()),
                Some(found) => Err(format!("finalizers {:?}", found.metadata.finalizers)),
            }
        })
        .await;
    println!(
        "e2e drain: pod evicted {drained_after:.1?} after the claim's deletion; VM kept {:.1?} for the \
         VolumeAttachment, deleted {vm_gone_after:.1?} after it went",
        detached.duration_since(deleted + drained_after)
    );
    cleanup::remove(&client, NAME, &[manifests::deployment(NAME, APP, NAME, 0, "500m", "1Gi")], || {
        controller.exit_status().is_none()
    })
    .await;
}

const TIERS: &str = "e2e-drain-tiers";
/// The do-not-disrupt duration of the protected pod.
const PROTECTED_FOR: Duration = Duration::from_secs(20);

/// A workload of `kind` (Deployment, DaemonSet or a bare Pod) `app` for the tiers test, small enough
/// that all share one node.
fn workload(kind: &str, app: &str, priority_class: Option<&str>, annotations: Value) -> Value {
    let mut spec = manifests::pod_spec(TIERS, "100m", "64Mi");
    if let Some(class) = priority_class {
        spec["priorityClassName"] = json!(class);
    }
    let metadata = json!({"labels": {"app": app, "tiers": "yes"}, "annotations": annotations});
    let template = json!({"metadata": metadata, "spec": spec});
    match kind {
        "Pod" => json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": app, "namespace": TIERS, "labels": template["metadata"]["labels"],
                         "annotations": annotations},
            "spec": spec}),
        _ => {
            let mut object = json!({"apiVersion": "apps/v1", "kind": kind,
                "metadata": {"name": app, "namespace": TIERS},
                "spec": {"selector": {"matchLabels": {"app": app}}, "template": template}});
            if kind == "Deployment" {
                object["spec"]["replicas"] = json!(1);
            }
            object
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_goes_tier_by_tier_and_waits_out_a_do_not_disrupt_duration() {
    let client = cluster::shared().client().await;
    let controller = setup::controller(TIERS).start(&client).await;
    let (class, pool) = (manifests::node_class(TIERS), manifests::node_pool(TIERS, Some("D")));
    setup::class_and_pool_ready(&client, &controller, &class, &pool).await;
    let protected = format!("{}s", PROTECTED_FOR.as_secs());
    let workloads = [
        workload("Deployment", "web", None, json!({})),
        workload("Pod", "batch", None, json!({"karpenter.sh/do-not-disrupt": protected})),
        workload("DaemonSet", "agent", None, json!({})),
        workload("Deployment", "critical", Some("system-cluster-critical"), json!({})),
        workload("DaemonSet", "critical-agent", Some("system-node-critical"), json!({})),
    ];
    for object in &workloads {
        objects::apply(&client, object).await.expect("applying a workload");
    }
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), TIERS);
    let all = ListParams::default().labels("tiers=yes");
    let pods = controller
        .wait_until("the five pods to run on one node", STAGE, || async {
            let pods = pods_api.list(&all).await.map_err(|err| err.to_string())?.items;
            let running: Vec<Pod> = pods.into_iter().filter(lookups::is_running).collect();
            if running.len() == workloads.len() && nodes_of(&running).len() == 1 {
                Ok(running)
            } else {
                Err(format!("{} Running on {:?}", running.len(), nodes_of(&running)))
            }
        })
        .await;
    let app_of = |p: &Pod| p.metadata.labels.as_ref().and_then(|l| l.get("app").cloned()).unwrap_or_default();
    let uids: BTreeMap<String, String> =
        pods.iter().map(|p| (p.metadata.uid.clone().unwrap_or_default(), app_of(p))).collect();
    let batch_started = pods
        .iter()
        .find(|p| app_of(p) == "batch")
        .and_then(|p| p.status.as_ref()?.start_time.clone())
        .expect("the protected pod's startTime")
        .0;

    let claims = lookups::claims_of(&client, TIERS).await.expect("listing NodeClaims");
    assert_eq!(claims.len(), 1, "{claims:#?}");
    nodeclaims(&client)
        .delete(&name_of(&claims[0]), &DeleteParams::default())
        .await
        .expect("deleting the claim");
    let deleted = Instant::now();
    // When each original pod was first seen being deleted or gone.
    let mut gone: BTreeMap<String, Duration> = BTreeMap::new();
    let deadline = Instant::now() + STAGE;
    while gone.len() < uids.len() {
        assert!(Instant::now() < deadline, "not every pod was drained: {gone:?}");
        let live = pods_api.list(&all).await.expect("listing pods").items;
        for (uid, app) in &uids {
            let found = live.iter().find(|p| p.metadata.uid.as_ref() == Some(uid));
            if found.is_none_or(|p| p.metadata.deletion_timestamp.is_some()) {
                gone.entry(app.clone()).or_insert_with(|| deleted.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let at = |app: &str| gone[app];
    let order = ["web", "agent", "critical", "critical-agent"];
    for pair in order.windows(2) {
        assert!(at(pair[0]) < at(pair[1]), "{} went before {}: {gone:?}", pair[1], pair[0]);
    }
    assert!(at("batch") < at("agent"), "the DaemonSet tier started while the protected pod ran: {gone:?}");
    let protected_until = batch_started + PROTECTED_FOR;
    let batch_went = k8s_openapi::jiff::Timestamp::now() - (deleted.elapsed() - at("batch"));
    assert!(
        batch_went >= protected_until,
        "the protected pod was evicted at {batch_went}, before {protected_until}: {gone:?}"
    );
    println!("e2e drain tiers: seconds after the claim's deletion each pod went: {gone:.1?}");
    let mut left: Vec<Value> = workloads.to_vec();
    for object in &mut left {
        if object["kind"] == "Deployment" {
            object["spec"]["replicas"] = json!(0);
        }
    }
    cleanup::remove(&client, TIERS, &left, || controller.exit_status().is_none()).await;
}
