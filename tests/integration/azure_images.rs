//! Node images and subnets through the production code against the fake ARM: the newest community
//! gallery version of each definition (paged, excluded versions skipped, faults retried), subnet reads,
//! the AKSNodeClass checks built on them, and launches that boot the image each size needs in the
//! class's subnet — the fake refuses an image a size cannot boot, as Azure does.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_azure::arm::gallery::{AZURE_LINUX_GALLERY, DEFAULT_NEWEST_VERSION, UBUNTU_GALLERY};
use fake_azure::arm::{FakeArm, FakeArmConfig, FakeSubnet, Fault, GalleryImageVersion};
use karpenter_azure::apis::{AKSNodeClass, NodeClaim};
use karpenter_azure::catalog::{CapacityOptions, PriceTable, UnavailableOfferings};
use karpenter_azure::cloud::azure::instancetypes::Catalog;
use karpenter_azure::cloud::azure::launch::request as launch_request;
use karpenter_azure::cloud::azure::nodeclass::checks::{NodeClassChecks, NodeClassLookups};
use karpenter_azure::cloud::azure::nodeclass::status::{nodeclass_status, ImagesCheck, SubnetCheck};
use karpenter_azure::cloud::azure::subnet::SubnetId;
use karpenter_azure::cloud::azure::{ArmClients, AzureCloudProvider, RetrySettings};
use karpenter_azure::cloud::{CloudError, CloudProvider};
use karpenter_azure::model::InstanceType;

async fn harness(config: FakeArmConfig) -> (FakeArm, AzureCloudProvider) {
    let fake = FakeArm::start(config).await.expect("fake ARM starts");
    let arm = fake.arm_settings(RetrySettings {
        max_retries: 3,
        initial_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(100),
        max_total_elapsed: Duration::from_secs(10),
    });
    let launch = fake.launch_settings();
    let clients = ArmClients::new(&arm).expect("clients build");
    let unavailable = Arc::new(Mutex::new(UnavailableOfferings::new()));
    let catalog = Catalog::for_region(&launch.location, unavailable, Arc::new(|| Duration::ZERO)).unwrap();
    let provider = AzureCloudProvider::new(clients, launch, Arc::new(catalog));
    (fake, provider)
}

/// The fake's default subnet, `rg/vnet/nodes`.
fn cluster_subnet(fake: &FakeArm) -> String {
    fake.subnet_id(&FakeSubnet::new("rg", "vnet", "nodes", ""))
}

fn version(name: &str, published: &str, exclude_from_latest: bool) -> GalleryImageVersion {
    GalleryImageVersion { name: name.into(), published: published.into(), exclude_from_latest }
}

fn class(spec: &str) -> AKSNodeClass {
    serde_yaml::from_str(&format!(
        "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {{name: images}}\nspec: {spec}\n"
    ))
    .unwrap()
}

#[tokio::test]
async fn the_newest_version_is_picked_across_pages() {
    let config = FakeArmConfig { list_page_size: Some(1), ..FakeArmConfig::default() };
    let (fake, provider) = harness(config).await;
    for definition in ["2204gen2containerd", "2404gen2arm64containerd"] {
        let got = provider.latest_image_version(UBUNTU_GALLERY, definition).await.unwrap();
        assert_eq!(got, DEFAULT_NEWEST_VERSION, "{definition}");
    }
    assert_eq!(
        provider.latest_image_version(AZURE_LINUX_GALLERY, "V3").await.unwrap(),
        DEFAULT_NEWEST_VERSION
    );
    let requests = fake.requests();
    let pages: Vec<_> =
        requests.iter().filter(|r| r.path.ends_with("/images/2204gen2containerd/versions")).collect();
    assert_eq!(pages.len(), 3, "one version per page: {requests:?}");
    assert!(pages.iter().all(|r| r.query.contains("api-version=2023-07-03")), "{pages:?}");
}

#[tokio::test]
async fn versions_excluded_from_latest_are_skipped_and_new_ones_win() {
    let (fake, provider) = harness(FakeArmConfig::default()).await;
    let excluded = version("202507.01.0", "2025-07-01T00:00:00+00:00", true);
    assert!(fake.publish_image_version(UBUNTU_GALLERY, "2404containerd", excluded));
    // The publish date decides, not the version number.
    let old_line = version("202599.01.0", "2024-12-01T00:00:00.5+00:00", false);
    assert!(fake.publish_image_version(UBUNTU_GALLERY, "2404containerd", old_line));
    assert_eq!(
        provider.latest_image_version(UBUNTU_GALLERY, "2404containerd").await.unwrap(),
        DEFAULT_NEWEST_VERSION
    );
    let newer = version("202507.08.0", "2025-07-08T00:00:00Z", false);
    assert!(fake.publish_image_version(UBUNTU_GALLERY, "2404containerd", newer));
    assert_eq!(provider.latest_image_version(UBUNTU_GALLERY, "2404containerd").await.unwrap(), "202507.08.0");
}

#[tokio::test]
async fn missing_definitions_and_failing_listings_are_cloud_errors() {
    let (fake, provider) = harness(FakeArmConfig::default()).await;
    let err = provider.latest_image_version(UBUNTU_GALLERY, "2004gen2fipscontainerd").await.unwrap_err();
    assert!(matches!(err, CloudError::NotFound(_)), "{err}");
    assert!(err.to_string().contains("2004gen2fipscontainerd"), "{err}");
    assert!(err.to_string().contains("The entity was not found in this Azure location."), "{err}");
    let prefix = format!("/subscriptions/{}/providers/Microsoft.Compute/locations", fake.subscription_id());
    // Fewer 500s than the retry budget: retried away.
    fake.inject(Fault::ServerError { requests: 2, path_prefix: Some(prefix.clone()) });
    assert_eq!(
        provider.latest_image_version(UBUNTU_GALLERY, "2204containerd").await.unwrap(),
        DEFAULT_NEWEST_VERSION
    );
    fake.inject(Fault::ServerError { requests: 10, path_prefix: Some(prefix) });
    let err = provider.latest_image_version(UBUNTU_GALLERY, "2204containerd").await.unwrap_err();
    assert_eq!(err.category(), "Transient", "{err}");
}

#[tokio::test]
async fn subnets_are_read_and_missing_ones_say_which() {
    let (fake, provider) = harness(FakeArmConfig::default()).await;
    let cluster = SubnetId::parse(&cluster_subnet(&fake)).unwrap();
    provider.check_subnet(&cluster).await.unwrap();
    let missing_id = cluster_subnet(&fake).replace("/subnets/nodes", "/subnets/missing");
    let err = provider.check_subnet(&SubnetId::parse(&missing_id).unwrap()).await.unwrap_err();
    assert!(matches!(err, CloudError::NotFound(_)), "{err}");
    assert!(err.to_string().contains(&format!("Resource {missing_id} not found.")), "{err}");
    let other_vnet = cluster_subnet(&fake).replace("/virtualNetworks/vnet/", "/virtualNetworks/nope/");
    let err = provider.check_subnet(&SubnetId::parse(&other_vnet).unwrap()).await.unwrap_err();
    assert!(err.to_string().contains("ResourceNotFound"), "{err}");
    assert!(fake.delete_subnet("rg", "vnet", "nodes"));
    assert_eq!(provider.check_subnet(&cluster).await.unwrap_err().category(), "NotFound");
}

/// Instance types as the controller's catalog has them for eastus.
fn catalog() -> Vec<InstanceType> {
    karpenter_azure::catalog::instance_types(
        "eastus",
        &CapacityOptions::default(),
        &PriceTable::static_for_region("eastus"),
        &UnavailableOfferings::new(),
        Duration::ZERO,
    )
    .unwrap()
}

fn claim(name: &str, size: &str) -> NodeClaim {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {{name: {name}, labels: {{karpenter.sh/nodepool: images}}}}
spec:
  nodeClassRef: {{group: karpenter.azure.com, kind: AKSNodeClass, name: images}}
  requirements:
    - {{key: node.kubernetes.io/instance-type, operator: In, values: [{size}]}}
    - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
    - {{key: topology.kubernetes.io/zone, operator: In, values: [eastus-1]}}
"#
    ))
    .unwrap()
}

/// The class with the status the controller would write from these checks.
async fn resolved_class(provider: &AzureCloudProvider, spec: &str, cluster_subnet: &str) -> AKSNodeClass {
    let mut class = class(spec);
    let mut checks = NodeClassChecks::new();
    let now = Instant::now();
    let images = checks.images(provider, &class, "1.34.4", now).await;
    let subnet = checks.subnet(provider, &class, cluster_subnet, "mc_rg_cluster_eastus", now).await;
    assert_eq!(subnet, SubnetCheck::Ready);
    let ImagesCheck::Resolved(resolved) = &images else { panic!("{images:?}") };
    assert_eq!(resolved.len(), 3);
    let time = serde_json::from_value(serde_json::json!("2025-06-01T00:00:00Z")).unwrap();
    let status = nodeclass_status(&class, "1.34.4", &images, &subnet, &time).unwrap();
    class.status = Some(serde_json::from_value(status).unwrap());
    class
}

#[tokio::test]
async fn each_size_boots_the_resolved_image_of_its_arch_and_generation() {
    let (fake, provider) = harness(FakeArmConfig::default()).await;
    let class = resolved_class(&provider, "{imageFamily: AzureLinux}", &cluster_subnet(&fake)).await;
    let types = catalog();
    for (claim_name, size, definition) in [
        ("images-gen2", "Standard_D2s_v5", "V3gen2"),
        ("images-gen1", "Standard_D2_v2", "V3"),
        ("images-arm", "Standard_D2ps_v5", "V3gen2arm64"),
    ] {
        let request = launch_request(&claim(claim_name, size), Some(&class), &types).unwrap();
        provider.create(&request).await.unwrap_or_else(|e| panic!("{size}: {e}"));
        let vm = fake.vm(&format!("aks-{claim_name}")).unwrap();
        let image = &vm.document["properties"]["storageProfile"]["imageReference"]["communityGalleryImageId"];
        let expected = format!(
            "/CommunityGalleries/{AZURE_LINUX_GALLERY}/images/{definition}/versions/{DEFAULT_NEWEST_VERSION}"
        );
        assert_eq!(image, &serde_json::json!(expected), "{size}");
    }
}

#[tokio::test]
async fn the_fake_refuses_an_image_the_size_cannot_boot() {
    let (fake, provider) = harness(FakeArmConfig::default()).await;
    let class = resolved_class(&provider, "{}", &cluster_subnet(&fake)).await;
    let mut request =
        launch_request(&claim("images-wrong", "Standard_D2_v2"), Some(&class), &catalog()).unwrap();
    let gen2 = &class.status.as_ref().unwrap().images[0].id;
    request.options[0].image_id = gen2.clone();
    let err = provider.create(&request).await.unwrap_err();
    assert!(err.to_string().contains("cannot boot Hypervisor Generation '2'"), "{err}");
    request.options[0].image_id = gen2.replace(DEFAULT_NEWEST_VERSION, "209901.01.0");
    let err = provider.create(&request).await.unwrap_err();
    assert!(err.to_string().contains("GalleryImageNotFound"), "{err}");
    assert!(fake.vms().is_empty(), "nothing launched");
}

#[tokio::test]
async fn a_class_subnet_is_checked_and_its_nics_go_in_it() {
    let (fake, provider) = harness(FakeArmConfig::default()).await;
    let batch = FakeSubnet::new("rg", "vnet", "batch", "10.225.0.0/16");
    let batch_id = fake.subnet_id(&batch);
    let spec = format!("{{vnetSubnetID: {batch_id}}}");
    let mut checks = NodeClassChecks::new();
    let missing =
        checks.subnet(&provider, &class(&spec), &cluster_subnet(&fake), "mc_rg", Instant::now()).await;
    let SubnetCheck::NotReady { reason, message } = missing else { panic!("the subnet does not exist yet") };
    assert_eq!(reason, "SubnetNotFound");
    assert!(message.contains(&batch_id), "{message}");
    fake.add_subnet(batch);
    let class = resolved_class(&provider, &spec, &cluster_subnet(&fake)).await;
    let request =
        launch_request(&claim("images-batch", "Standard_D2s_v5"), Some(&class), &catalog()).unwrap();
    provider.create(&request).await.unwrap();
    let nic = fake.nics().into_iter().find(|n| n["name"] == "aks-images-batch").unwrap();
    assert_eq!(
        nic["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"],
        serde_json::json!(batch_id)
    );
}
