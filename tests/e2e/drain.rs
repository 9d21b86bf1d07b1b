//! The drain waits for VolumeAttachments: a deleted NodeClaim's Node is drained, then its VM is kept
//! while a VolumeAttachment for the Node remains, and deleted soon after the attachment goes.
//!
//! No CSI driver runs here; the test creates the VolumeAttachment itself, as the attach-detach
//! controller would for a pod's persistent volume, and deletes it as that controller would once the pod
//! is gone. Its own namespace, class, pool and controller, as the termination test.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kube::api::DeleteParams;
use serde_json::{json, Value};

use super::controller::Controller;
use super::health::{name_of, nodes_of, ready_pool, running, vm_of};
use super::lookups::{self, nodeclaims};
use super::{cleanup, cluster, manifests, objects};

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
    let cluster = cluster::shared();
    let client = cluster.client().await;
    let controller = Controller::start(cluster, &client, NAME).await;
    let (class, pool) = (manifests::node_class(NAME), manifests::node_pool(NAME, Some("D")));
    ready_pool(&client, &controller, NAME, &class, &pool).await;
    let deployment = manifests::deployment(NAME, APP, NAME, 1, "500m", "1Gi");
    objects::apply(&client, &deployment).await.expect("applying the Deployment");
    let pods = running(&controller, &client, NAME, APP, 1, &[], STAGE).await;
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
