//! AKSNodeClass `spec.security` through the production code against the fake ARM: the capabilities the
//! Resource SKUs list reports narrow the class's instance types, a trusted-launch class resolves the
//! trusted-launch image and becomes Ready, its VMs carry `securityProfile`, and the fake refuses what
//! Azure refuses (encryption at host on a size without it, trusted launch on a size that disables it, a
//! trusted-launch VM on a standard image and a trusted-launch image on a standard VM). The OS disk of
//! every VM is encrypted with the disk encryption set of NODE_OSDISK_DISKENCRYPTIONSET_ID, when given.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_azure::arm::gallery::{DEFAULT_NEWEST_VERSION, UBUNTU_GALLERY};
use fake_azure::arm::{FakeArm, FakeArmConfig, FakeSubnet};
use karpenter_azure::apis::conditions::{self, ConditionStatus};
use karpenter_azure::apis::{AKSNodeClass, NodeClaim};
use karpenter_azure::catalog::{
    embedded_sku, CapacityOptions, NodeSecurity, PriceTable, UnavailableOfferings,
};
use karpenter_azure::cloud::azure::instancetypes::Catalog;
use karpenter_azure::cloud::azure::launch::request as launch_request;
use karpenter_azure::cloud::azure::nodeclass::checks::NodeClassChecks;
use karpenter_azure::cloud::azure::nodeclass::status::{nodeclass_status, ImagesCheck};
use karpenter_azure::cloud::azure::{ArmClients, AzureCloudProvider, LaunchSettings, RetrySettings};
use karpenter_azure::cloud::{CloudProvider, LaunchRequest};
use karpenter_azure::model::InstanceType;

const KUBERNETES_VERSION: &str = "1.34.4";
const SECURE: &str = "{security: {encryptionAtHost: true, trustedLaunch: {vtpm: true}}}";

struct Harness {
    fake: FakeArm,
    provider: AzureCloudProvider,
    catalog: Arc<Catalog>,
}

/// The provider and a controller catalog whose SKU list comes from the fake's Resource SKUs API.
async fn harness() -> Harness {
    harness_with(|launch| launch).await
}

/// [`harness`] with the launch settings changed by `settings`.
async fn harness_with(settings: impl FnOnce(LaunchSettings) -> LaunchSettings) -> Harness {
    let fake = FakeArm::start(FakeArmConfig::default()).await.expect("fake ARM starts");
    let arm = fake.arm_settings(RetrySettings {
        max_retries: 3,
        initial_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(100),
        max_total_elapsed: Duration::from_secs(10),
    });
    let launch = settings(fake.launch_settings());
    let unavailable = Arc::new(Mutex::new(UnavailableOfferings::new()));
    let clock: Arc<dyn Fn() -> Duration + Send + Sync> = Arc::new(|| Duration::ZERO);
    let clients = ArmClients::new(&arm).expect("clients build");
    let pricing = PriceTable::static_for_region("eastus");
    let catalog =
        Arc::new(Catalog::new("eastus", CapacityOptions::default(), pricing, unavailable, clock).unwrap());
    let provider = AzureCloudProvider::new(clients.clone(), launch, catalog.clone());
    Harness { fake, provider, catalog }.with_live_skus(clients).await
}

impl Harness {
    /// Starts the SKU refresh and waits for its first listing: before it, no size is known to support
    /// encryption at host, so an encryption-at-host class has no instance types at all.
    async fn with_live_skus(self, clients: ArmClients) -> Harness {
        let probe = class("probe", "{security: {encryptionAtHost: true}}");
        assert!(self.catalog.types_for(Some(&probe)).is_empty(), "embedded data: support unknown");
        let refresh = self.catalog.spawn_sku_refresh(clients);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.catalog.types_for(Some(&probe)).is_empty() {
            assert!(Instant::now() < deadline, "the live SKU list never arrived");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        refresh.abort();
        self
    }

    /// The class with the status the controller writes from its image and subnet checks.
    async fn resolved(&self, name: &str, spec: &str) -> AKSNodeClass {
        let mut class = class(name, spec);
        let mut checks = NodeClassChecks::new();
        let now = Instant::now();
        let images = checks.images(&self.provider, &class, KUBERNETES_VERSION, now).await;
        let subnet_id = self.fake.subnet_id(&FakeSubnet::new("rg", "vnet", "nodes", ""));
        let subnet = checks.subnet(&self.provider, &class, &subnet_id, "mc_rg_cluster_eastus", now).await;
        assert!(matches!(images, ImagesCheck::Resolved(_)), "{images:?}");
        let time = serde_json::from_value(serde_json::json!("2025-06-01T00:00:00Z")).unwrap();
        let status = nodeclass_status(&class, KUBERNETES_VERSION, &images, &subnet, &time).unwrap();
        class.status = Some(serde_json::from_value(status).unwrap());
        class
    }

    /// The launch request for a claim on `class` that allows `sizes`, with the catalog's types for it.
    fn request(&self, class: &AKSNodeClass, claim_name: &str, sizes: &[&str]) -> LaunchRequest {
        let types: Arc<Vec<InstanceType>> = self.catalog.types_for(Some(class));
        launch_request(&claim(claim_name, class, sizes), Some(class), &types).unwrap()
    }
}

fn class(name: &str, spec: &str) -> AKSNodeClass {
    serde_yaml::from_str(&format!(
        "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {{name: {name}}}\nspec: {spec}\n"
    ))
    .unwrap()
}

fn claim(name: &str, class: &AKSNodeClass, sizes: &[&str]) -> NodeClaim {
    let class_name = class.metadata.name.as_deref().unwrap();
    serde_yaml::from_str(&format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {{name: {name}, labels: {{karpenter.sh/nodepool: secure}}}}
spec:
  nodeClassRef: {{group: karpenter.azure.com, kind: AKSNodeClass, name: {class_name}}}
  requirements:
    - {{key: node.kubernetes.io/instance-type, operator: In, values: [{}]}}
    - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
    - {{key: topology.kubernetes.io/zone, operator: In, values: [eastus-1]}}
"#,
        sizes.join(", ")
    ))
    .unwrap()
}

fn tl_image(definition: &str) -> String {
    format!("/CommunityGalleries/{UBUNTU_GALLERY}/images/{definition}/versions/{DEFAULT_NEWEST_VERSION}")
}

#[tokio::test]
async fn a_secure_class_is_ready_and_launches_trusted_with_encryption_at_host() {
    let h = harness().await;
    let class = h.resolved("secure", SECURE).await;
    let status = class.status.as_ref().unwrap();
    let ready = conditions::get(&status.conditions, conditions::READY).unwrap();
    assert_eq!(ready.status, ConditionStatus::True, "{ready:?}");
    let ids: Vec<&str> = status.images.iter().map(|i| i.id.as_str()).collect();
    // The default family stays on 22.04 for trusted launch, as upstream.
    assert_eq!(ids, [tl_image("2204gen2TLcontainerd")]);

    // Only sizes that support encryption at host and allow trusted launch (gen2 amd64) remain.
    let types = h.catalog.types_for(Some(&class));
    let has = |name: &str| types.iter().any(|t| t.name == name);
    assert!(has("Standard_D2s_v5"));
    assert!(!has("Standard_F2s_v2"), "no encryption at host in the fake's SKU list");
    assert!(!has("Standard_M8ms"), "trusted launch disabled");
    assert!(!has("Standard_D2ps_v5"), "arm64: no trusted-launch image");
    for t in types.iter() {
        let sku = embedded_sku(&t.name).unwrap();
        assert!(fake_azure::arm::skus::encryption_at_host_supported(sku), "{}", t.name);
        assert!(!fake_azure::arm::skus::trusted_launch_disabled(sku), "{}", t.name);
    }

    let request = h.request(&class, "secure-1", &["Standard_F2s_v2", "Standard_D2s_v5"]);
    let sizes: Vec<&str> = request.options.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(sizes, ["Standard_D2s_v5"], "the size the class cannot launch is not an option");
    h.provider.create(&request).await.unwrap();
    let vm = h.fake.vm("aks-secure-1").unwrap();
    let props = &vm.document["properties"];
    assert_eq!(
        props["securityProfile"],
        serde_json::json!({
            "encryptionAtHost": true,
            "securityType": "TrustedLaunch",
            "uefiSettings": { "secureBootEnabled": false, "vTpmEnabled": true }
        })
    );
    let image = &props["storageProfile"]["imageReference"]["communityGalleryImageId"];
    assert_eq!(image, &serde_json::json!(tl_image("2204gen2TLcontainerd")));
}

#[tokio::test]
async fn the_fake_refuses_what_the_size_or_image_cannot_take() {
    let h = harness().await;
    let plain = h.resolved("plain", "{}").await;
    let secure = h.resolved("secure", SECURE).await;
    let eah = NodeSecurity { encryption_at_host: true, trusted_launch: None };
    let tl = NodeSecurity::from_spec(secure.spec.security.as_ref());

    let mut request = h.request(&plain, "refused-eah", &["Standard_F2s_v2"]);
    request.security = eah;
    let err = h.provider.create(&request).await.unwrap_err();
    assert_eq!(err.category(), "Invalid");
    assert!(err.to_string().contains("securityProfile.encryptionAtHost"), "{err}");

    let mut request = h.request(&plain, "refused-standard-image", &["Standard_D2s_v5"]);
    request.security = tl;
    let err = h.provider.create(&request).await.unwrap_err();
    assert!(
        err.to_string().contains("TrustedLaunch setting is not supported for the provided image"),
        "{err}"
    );

    let mut request = h.request(&secure, "refused-standard-vm", &["Standard_D2s_v5"]);
    request.security = eah;
    let err = h.provider.create(&request).await.unwrap_err();
    assert!(err.to_string().contains("has security type 'TrustedLaunch'"), "{err}");

    let mut request = h.request(&secure, "refused-m-series", &["Standard_D2s_v5"]);
    request.options[0] = karpenter_azure::cloud::InstanceTypeOption::from_sku(
        embedded_sku("Standard_M8ms").unwrap(),
        &tl_image("2204gen2TLcontainerd"),
        request.options[0].offerings.clone(),
    );
    request.security = NodeSecurity { encryption_at_host: false, ..tl };
    let err = h.provider.create(&request).await.unwrap_err();
    assert!(err.to_string().contains("not supported for the security type 'TrustedLaunch'"), "{err}");
    assert!(h.fake.vms().is_empty(), "nothing launched");

    // Encryption at host alone on a size that supports it, from a standard image, goes through.
    let mut request = h.request(&plain, "accepted-eah", &["Standard_D2s_v5"]);
    request.security = eah;
    h.provider.create(&request).await.unwrap();
    let vm = h.fake.vm("aks-accepted-eah").unwrap();
    assert_eq!(vm.document["properties"]["securityProfile"], serde_json::json!({ "encryptionAtHost": true }));
}

#[tokio::test]
async fn the_os_disk_is_encrypted_with_the_configured_disk_encryption_set() {
    const DES: &str = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/keys/providers/\
                       Microsoft.Compute/diskEncryptionSets/node-disks";
    let h =
        harness_with(|launch| LaunchSettings { os_disk_encryption_set_id: Some(DES.into()), ..launch }).await;
    let plain = h.resolved("plain", "{}").await;
    h.provider.create(&h.request(&plain, "byok", &["Standard_D2s_v5"])).await.unwrap();
    let vm = h.fake.vm("aks-byok").unwrap();
    let managed = &vm.document["properties"]["storageProfile"]["osDisk"]["managedDisk"];
    assert_eq!(managed["diskEncryptionSet"], serde_json::json!({ "id": DES }));
    let disk = managed["id"].as_str().expect("Compute names the OS disk resource");
    assert!(disk.ends_with("/providers/Microsoft.Compute/disks/aks-byok"), "{disk}");

    // Without the setting the OS disk uses platform-managed keys: no encryption set is sent.
    let h = harness().await;
    let plain = h.resolved("plain", "{}").await;
    h.provider.create(&h.request(&plain, "pmk", &["Standard_D2s_v5"])).await.unwrap();
    let vm = h.fake.vm("aks-pmk").unwrap();
    assert!(vm.document["properties"]["storageProfile"]["osDisk"]["managedDisk"]
        .get("diskEncryptionSet")
        .is_none());

    // ARM refuses an ID that is not a resource ID (the controller's validation stops it before).
    let h = harness_with(|launch| LaunchSettings {
        os_disk_encryption_set_id: Some("node-disks".into()),
        ..launch
    })
    .await;
    let plain = h.resolved("plain", "{}").await;
    let err = h.provider.create(&h.request(&plain, "bad-des", &["Standard_D2s_v5"])).await.unwrap_err();
    assert!(err.to_string().contains("diskEncryptionSet.id' is invalid"), "{err}");
    assert!(h.fake.vms().is_empty(), "nothing launched");
}
