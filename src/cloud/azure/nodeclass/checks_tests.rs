//! Tests of the AKSNodeClass lookups against the in-memory cloud, with time passed in.

use super::*;
use crate::apis::aksnodeclass::{AKSNodeClassStatus, NodeImage};
use crate::cloud::azure::imagefamily::{AZURE_LINUX_GALLERY, UBUNTU_GALLERY};
use crate::cloud::fake::FakeCloud;

const CLUSTER_SUBNET: &str =
    "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes";
const NODE_RG: &str = "mc_rg_cluster_eastus";

fn class(spec: &str) -> AKSNodeClass {
    serde_yaml::from_str(&format!(
        "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {{name: c}}\nspec: {spec}\n"
    ))
    .unwrap()
}

/// A cloud publishing `version` of every Ubuntu 22.04/24.04 and Azure Linux 3 definition.
fn cloud(version: &str) -> FakeCloud {
    let cloud = FakeCloud::new();
    publish(&cloud, version);
    cloud.add_subnet(CLUSTER_SUBNET);
    cloud
}

fn publish(cloud: &FakeCloud, version: &str) {
    for definition in ["2204gen2containerd", "2204containerd", "2204gen2arm64containerd"] {
        cloud.publish_image(UBUNTU_GALLERY, definition, version);
    }
    for definition in ["2404gen2containerd", "2404containerd", "2404gen2arm64containerd"] {
        cloud.publish_image(UBUNTU_GALLERY, definition, version);
    }
    for definition in ["V3gen2", "V3", "V3gen2arm64"] {
        cloud.publish_image(AZURE_LINUX_GALLERY, definition, version);
    }
}

fn ids(check: &ImagesCheck) -> Vec<String> {
    match check {
        ImagesCheck::Resolved(images) => images
            .iter()
            .map(|i| {
                let (_, definition, version) = imagefamily::parse_community_image_id(&i.id).unwrap();
                format!("{definition}@{version}")
            })
            .collect(),
        ImagesCheck::Unresolved { reason, message, .. } => panic!("unresolved: {reason}: {message}"),
    }
}

fn with_images(mut class: AKSNodeClass, images: Vec<NodeImage>) -> AKSNodeClass {
    class.status = Some(AKSNodeClassStatus { images, ..Default::default() });
    class
}

#[tokio::test]
async fn resolves_each_definition_of_the_family_and_refreshes_only_when_due() {
    let (cloud, t0) = (cloud("202506.02.0"), Instant::now());
    let mut checks = NodeClassChecks::new();
    let ubuntu = class("{}");
    let got = checks.images(&cloud, &ubuntu, "1.34.4", t0).await;
    assert_eq!(
        ids(&got),
        [
            "2404gen2containerd@202506.02.0",
            "2404containerd@202506.02.0",
            "2404gen2arm64containerd@202506.02.0"
        ]
    );
    assert_eq!(cloud.lookup_calls(), 3);
    // A second class of the same family shares the lookups.
    checks.images(&cloud, &class("{imageFamily: Ubuntu2404}"), "1.34.4", t0).await;
    assert_eq!(cloud.lookup_calls(), 3);
    publish(&cloud, "202507.01.0");
    let soon = checks.images(&cloud, &ubuntu, "1.34.4", t0 + IMAGE_REFRESH - Duration::from_secs(1)).await;
    assert_eq!(ids(&soon)[0], "2404gen2containerd@202506.02.0", "not due yet");
    let later = checks.images(&cloud, &ubuntu, "1.34.4", t0 + IMAGE_REFRESH).await;
    assert_eq!(ids(&later)[0], "2404gen2containerd@202507.01.0");
    let azl = checks.images(&cloud, &class("{imageFamily: AzureLinux}"), "1.34.4", t0).await;
    assert_eq!(ids(&azl), ["V3gen2@202507.01.0", "V3@202507.01.0", "V3gen2arm64@202507.01.0"]);
}

#[tokio::test]
async fn a_shorter_image_refresh_looks_up_again_sooner() {
    let (cloud, t0) = (cloud("1"), Instant::now());
    let every = Duration::from_secs(2);
    let mut checks = NodeClassChecks::with_image_refresh(every);
    let ubuntu = class("{}");
    assert_eq!(ids(&checks.images(&cloud, &ubuntu, "1.34.4", t0).await)[0], "2404gen2containerd@1");
    publish(&cloud, "2");
    let soon = checks.images(&cloud, &ubuntu, "1.34.4", t0 + every - Duration::from_millis(1)).await;
    assert_eq!(ids(&soon)[0], "2404gen2containerd@1", "not due yet");
    assert_eq!(ids(&checks.images(&cloud, &ubuntu, "1.34.4", t0 + every).await)[0], "2404gen2containerd@2");
}

#[tokio::test]
async fn a_kubernetes_upgrade_resolves_at_once() {
    let (cloud, t0) = (cloud("1"), Instant::now());
    let mut checks = NodeClassChecks::new();
    let ubuntu = class("{}");
    assert_eq!(ids(&checks.images(&cloud, &ubuntu, "1.33.9", t0).await)[0], "2204gen2containerd@1");
    publish(&cloud, "2");
    assert_eq!(ids(&checks.images(&cloud, &ubuntu, "1.33.10", t0).await)[0], "2204gen2containerd@2");
    assert_eq!(ids(&checks.images(&cloud, &ubuntu, "1.34.0", t0).await)[0], "2404gen2containerd@2");
    checks.forget_unused();
    assert_eq!(checks.images.len(), 9, "everything was used in this round");
    checks.images(&cloud, &ubuntu, "1.34.0", t0).await;
    checks.forget_unused();
    assert_eq!(checks.images.len(), 3, "only the 1.34.0 keys are used in the next");
}

#[tokio::test]
async fn a_failed_refresh_keeps_the_resolved_versions() {
    let (cloud, t0) = (cloud("1"), Instant::now());
    let mut checks = NodeClassChecks::new();
    let ubuntu = class("{}");
    checks.images(&cloud, &ubuntu, "1.34.4", t0).await;
    cloud.fail_lookups(Some(CloudError::Throttled("429".into())));
    let refresh = checks.images(&cloud, &ubuntu, "1.34.4", t0 + IMAGE_REFRESH).await;
    assert_eq!(ids(&refresh)[0], "2404gen2containerd@1");
    // Backing off: the next attempt waits FIRST_RETRY.
    let calls = cloud.lookup_calls();
    checks.images(&cloud, &ubuntu, "1.34.4", t0 + IMAGE_REFRESH + FIRST_RETRY / 2).await;
    assert_eq!(cloud.lookup_calls(), calls);
    checks.images(&cloud, &ubuntu, "1.34.4", t0 + IMAGE_REFRESH + FIRST_RETRY).await;
    assert_eq!(cloud.lookup_calls(), calls + 3);
}

#[tokio::test]
async fn after_a_restart_the_status_images_stand_in_for_failed_lookups() {
    let t0 = Instant::now();
    let resolved = {
        let mut checks = NodeClassChecks::new();
        match checks.images(&cloud("7"), &class("{}"), "1.34.4", t0).await {
            ImagesCheck::Resolved(images) => images,
            other => panic!("{other:?}"),
        }
    };
    let down = FakeCloud::new();
    down.fail_lookups(Some(CloudError::Transient("connection refused".into())));
    let mut checks = NodeClassChecks::new();
    let restarted = with_images(class("{}"), resolved);
    assert_eq!(ids(&checks.images(&down, &restarted, "1.34.4", t0).await)[0], "2404gen2containerd@7");
    // Nothing to stand in: not Ready, with ARM's answer; the status keeps whatever it has.
    match checks.images(&down, &class("{imageFamily: AzureLinux}"), "1.34.4", t0).await {
        ImagesCheck::Unresolved { reason, message, keep } => {
            assert_eq!(reason, "ImageLookupFailed");
            assert!(message.contains("connection refused"), "{message}");
            assert!(keep);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn missing_images_and_impossible_families_are_not_ready() {
    let (cloud, t0) = (FakeCloud::new(), Instant::now());
    cloud.publish_image(UBUNTU_GALLERY, "2404gen2containerd", "1");
    let mut checks = NodeClassChecks::new();
    match checks.images(&cloud, &class("{}"), "1.34.4", t0).await {
        ImagesCheck::Unresolved { reason, message, .. } => {
            assert_eq!(reason, "ImagesNotFound");
            assert!(message.contains("2404containerd"), "names the missing definition: {message}");
        }
        other => panic!("{other:?}"),
    }
    let fips = checks.images(&cloud, &class("{imageFamily: AzureLinux, fipsMode: FIPS}"), "1.34.4", t0).await;
    assert!(
        matches!(fips, ImagesCheck::Unresolved { reason: "SIGRequiredForFIPS", keep: false, .. }),
        "{fips:?}"
    );
}

#[tokio::test]
async fn a_missing_subnet_is_not_ready_until_it_exists() {
    let (cloud, t0) = (FakeCloud::new(), Instant::now());
    let mut checks = NodeClassChecks::new();
    let own = CLUSTER_SUBNET.replace("/subnets/nodes", "/subnets/batch");
    let class = class(&format!("{{vnetSubnetID: {own}}}"));
    match checks.subnet(&cloud, &class, CLUSTER_SUBNET, NODE_RG, t0).await {
        SubnetCheck::NotReady { reason, message } => {
            assert_eq!(reason, "SubnetNotFound");
            assert!(message.to_ascii_lowercase().contains(&own.to_ascii_lowercase()), "{message}");
        }
        SubnetCheck::Ready => panic!("the subnet does not exist"),
    }
    cloud.add_subnet(&own);
    let backing_off = checks.subnet(&cloud, &class, CLUSTER_SUBNET, NODE_RG, t0 + FIRST_RETRY / 2).await;
    assert!(matches!(backing_off, SubnetCheck::NotReady { .. }));
    let retried = checks.subnet(&cloud, &class, CLUSTER_SUBNET, NODE_RG, t0 + FIRST_RETRY).await;
    assert_eq!(retried, SubnetCheck::Ready);
}

#[tokio::test]
async fn a_subnet_that_existed_survives_throttling_but_not_a_refusal() {
    let (cloud, t0) = (cloud("1"), Instant::now());
    let mut checks = NodeClassChecks::new();
    let class = class("{}");
    assert_eq!(checks.subnet(&cloud, &class, CLUSTER_SUBNET, NODE_RG, t0).await, SubnetCheck::Ready);
    cloud.fail_lookups(Some(CloudError::Throttled("429".into())));
    let t1 = t0 + SUBNET_RECHECK;
    assert_eq!(checks.subnet(&cloud, &class, CLUSTER_SUBNET, NODE_RG, t1).await, SubnetCheck::Ready);
    cloud.fail_lookups(Some(CloudError::Unauthorized("403 AuthorizationFailed".into())));
    let refused = checks.subnet(&cloud, &class, CLUSTER_SUBNET, NODE_RG, t1 + MAX_RETRY).await;
    assert!(matches!(refused, SubnetCheck::NotReady { reason: "SubnetUnknownError", .. }), "{refused:?}");
}

#[tokio::test]
async fn a_subnet_outside_the_cluster_vnet_is_invalid_without_asking_azure() {
    let (cloud, t0) = (cloud("1"), Instant::now());
    let mut checks = NodeClassChecks::new();
    let other = CLUSTER_SUBNET.replace("/virtualNetworks/vnet/", "/virtualNetworks/other/");
    let class = class(&format!("{{vnetSubnetID: {other}}}"));
    let check = checks.subnet(&cloud, &class, CLUSTER_SUBNET, NODE_RG, t0).await;
    assert!(matches!(check, SubnetCheck::NotReady { reason: "SubnetIDInvalid", .. }), "{check:?}");
    assert_eq!(cloud.lookup_calls(), 0);
}
