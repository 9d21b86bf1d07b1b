//! Node image versions and the AKS node OS maintenance window end to end. With the ConfigMap
//! `upcoming-maintenance-window` (in the controller's SYSTEM_NAMESPACE, as AKS writes it) naming a
//! window that has not begun, a new AKSNodeClass still resolves the newest images and its node launches
//! with them; a newer version published in the fake ARM's gallery is then looked up again several times
//! (NODE_IMAGE_REFRESH_INTERVAL is 2 s here) without changing the class's `status.images` or drifting
//! the NodeClaim. Once the ConfigMap says the window is open, the class takes the new version, the
//! NodeClaim becomes `Drifted` with reason `ImageDrift`, and drift replaces it with a node on the new
//! image that runs the workload again.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::DeleteParams;
use kube::Client;
use serde_json::{json, Value};

use super::lookups::{claims_of, get_json};
use super::{cleanup, cluster, identity, manifests, objects, setup};
use fake_azure::arm::{FakeArm, GalleryImageVersion};

const NAME: &str = "e2e-maintenance";
const APP: &str = "web";
/// The version published while the window is closed, newer than every default one.
const NEW_VERSION: &str = "202507.01.0";
const NEW_PUBLISHED: &str = "2025-07-01T00:00:00.0000000+00:00";
/// Image lookups are due this often, so every status pass (each 10 s) lists the gallery again.
const IMAGE_REFRESH: &str = "2s";
/// Listings of every image definition a closed window must sit through after the publication: the
/// first may have read the gallery before it, the second saw the new version, and by the third the
/// status pass that held the class at the second has written (or left) its status.
const LISTINGS: usize = 3;
const STAGE: Duration = Duration::from_secs(90);
const CONFIG_MAP: &str = "upcoming-maintenance-window";

/// The ConfigMap AKS writes, with the next `aksManagedNodeOSUpgradeSchedule` window.
fn maintenance_window(start: Timestamp, end: Timestamp) -> Value {
    let rfc3339 = |t: Timestamp| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    json!({"apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": CONFIG_MAP, "namespace": identity::NAMESPACE},
    "data": {
        "aksManagedNodeOSUpgradeSchedule-start": rfc3339(start),
        "aksManagedNodeOSUpgradeSchedule-end": rfc3339(end),
    }})
}

async fn delete_maintenance_window(client: &Client) {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), identity::NAMESPACE);
    let _ = api.delete(CONFIG_MAP, &DeleteParams::default()).await;
}

/// The image IDs of the class's `status.images`.
fn image_ids(class: &Value) -> Vec<String> {
    let images = class["status"]["images"].as_array().cloned().unwrap_or_default();
    images.iter().filter_map(|i| i["id"].as_str().map(str::to_string)).collect()
}

/// `(gallery, definition)` of a community gallery image ID
/// (`/CommunityGalleries/<gallery>/images/<definition>/versions/<version>`).
fn definition_of(id: &str) -> (String, String) {
    let parts: Vec<&str> = id.split('/').collect();
    match parts.as_slice() {
        ["", _, gallery, _, definition, _, _] => (gallery.to_string(), definition.to_string()),
        _ => panic!("not a community gallery image ID: {id}"),
    }
}

/// How many times the controller has listed the versions of `definition` (first pages only).
fn listings(fake: &FakeArm, definition: &str) -> usize {
    let suffix = format!("/images/{}/versions", definition.to_ascii_lowercase());
    fake.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.status == 200 && !r.query.contains("skiptoken"))
        .filter(|r| r.path.to_ascii_lowercase().ends_with(&suffix))
        .count()
}

fn drifted(claim: &Value) -> Option<&Value> {
    let conditions = claim["status"]["conditions"].as_array()?;
    conditions.iter().find(|c| c["type"] == "Drifted" && c["status"] == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_image_waits_for_the_maintenance_window_then_drifts_and_replaces_the_node() {
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME)
        .env("NODE_IMAGE_REFRESH_INTERVAL", IMAGE_REFRESH)
        .env("KARPENTER_DISRUPTION_INTERVAL", "2s")
        .env("KARPENTER_DISRUPTION_VALIDATION_DELAY", "2s")
        .start(&client)
        .await;
    let now = Timestamp::now();
    let closed =
        maintenance_window(now + SignedDuration::from_hours(24), now + SignedDuration::from_hours(28));
    objects::apply(&client, &closed).await.expect("applying the closed maintenance window");

    // A new class resolves its images whatever the window says; its node launches with them.
    let class = manifests::node_class(NAME);
    setup::class_and_pool_ready(&client, &controller, &class, &manifests::node_pool(NAME, Some("D"))).await;
    let resolved = image_ids(&get_json(&client, &class).await.expect("the AKSNodeClass"));
    assert!(!resolved.is_empty() && resolved.iter().all(|id| !id.ends_with(NEW_VERSION)), "{resolved:?}");
    let deployment = manifests::deployment(NAME, APP, NAME, 1, "500m", "1Gi");
    objects::apply(&client, &deployment).await.expect("applying the Deployment");
    setup::running_pods(&client, NAME, &format!("app={APP}"), 1).within(STAGE).wait(&controller).await;
    let claims = claims_of(&client, NAME).await.expect("the NodeClaims");
    let [claim] = claims.as_slice() else { panic!("one NodeClaim, got {claims:#?}") };
    let claim_name = claim["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let old_image = claim["status"]["imageID"].as_str().unwrap_or_default().to_string();
    assert!(resolved.contains(&old_image), "the node runs one of the class's images: {old_image}");

    // A newer version of every definition of the class, published while the window is closed.
    let definitions: Vec<(String, String)> = resolved.iter().map(|id| definition_of(id)).collect();
    let before: Vec<usize> = definitions.iter().map(|(_, d)| listings(controller.fake(), d)).collect();
    for (gallery, definition) in &definitions {
        let version = GalleryImageVersion {
            name: NEW_VERSION.into(),
            published: NEW_PUBLISHED.into(),
            exclude_from_latest: false,
        };
        assert!(controller.fake().publish_image_version(gallery, definition, version), "{definition}");
    }
    controller
        .wait_until("the gallery looked up again with the window closed", STAGE, || async {
            let class = get_json(&client, &class).await?;
            assert_eq!(image_ids(&class), resolved, "the closed window holds the versions");
            for claim in claims_of(&client, NAME).await? {
                assert!(drifted(&claim).is_none(), "nothing drifts while the window is closed: {claim:#}");
            }
            let seen: Vec<usize> = definitions
                .iter()
                .zip(&before)
                .map(|((_, definition), before)| listings(controller.fake(), definition) - before)
                .collect();
            if seen.iter().all(|n| *n >= LISTINGS) {
                Ok(())
            } else {
                Err(format!("listings since the publication: {seen:?}"))
            }
        })
        .await;
    let (gallery, definition) = &definitions[0];
    let new_id = format!("/CommunityGalleries/{gallery}/images/{definition}/versions/{NEW_VERSION}");
    assert!(controller.log().contains(&new_id), "the lookups found {new_id} while the window held it");

    // The window opens: the class takes the new versions, and the node on the old one drifts.
    let now = Timestamp::now();
    let open = maintenance_window(now - SignedDuration::from_hours(1), now + SignedDuration::from_hours(3));
    objects::apply(&client, &open).await.expect("opening the maintenance window");
    let upgraded = controller
        .wait_until("the AKSNodeClass on the new versions", STAGE, || async {
            let ids = image_ids(&get_json(&client, &class).await?);
            ids.iter().all(|id| id.ends_with(NEW_VERSION)).then_some(ids.clone()).ok_or(format!("{ids:?}"))
        })
        .await;
    assert_eq!(upgraded.len(), resolved.len(), "the same definitions: {upgraded:?}");
    let reason = controller
        .wait_until("the NodeClaim Drifted", STAGE, || async {
            let claims = claims_of(&client, NAME).await?;
            let claim = claims
                .iter()
                .find(|c| c["metadata"]["name"] == claim_name.as_str())
                .ok_or("the NodeClaim is gone before it was seen Drifted")?;
            drifted(claim).map(|c| c["reason"].clone()).ok_or(format!("{:#}", claim["status"]["conditions"]))
        })
        .await;
    assert_eq!(reason, "ImageDrift");

    // Drift replaces it: the workload runs on a node with the new image.
    controller
        .wait_until("the drifted node replaced by one on the new image", STAGE, || async {
            let claims = claims_of(&client, NAME).await?;
            let images: Vec<(&str, &str)> = claims
                .iter()
                .map(|c| {
                    let name = c["metadata"]["name"].as_str().unwrap_or_default();
                    (name, c["status"]["imageID"].as_str().unwrap_or_default())
                })
                .collect();
            match images.as_slice() {
                [(name, image)] if *name != claim_name && image.ends_with(NEW_VERSION) => Ok(()),
                _ => Err(format!("NodeClaims (name, imageID): {images:?}")),
            }
        })
        .await;
    setup::running_pods(&client, NAME, &format!("app={APP}"), 1).within(STAGE).wait(&controller).await;

    delete_maintenance_window(&client).await;
    cleanup::remove(&client, NAME, &[deployment], || controller.exit_status().is_none()).await;
}
