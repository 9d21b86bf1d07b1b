//! The production Azure provider against the fake ARM: NIC + VM creation, restart safety, get/list/delete,
//! capacity errors → InsufficientCapacity + unavailable-offerings marks with nothing leaked, throttling and
//! server errors, slow operations and spot eviction.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use fake_azure::arm::{CreateError, Delivery, FakeArm, FakeArmConfig, Fault, QuotaScope, Target};
use karpenter_azure::apis::common::{Taint, TaintEffect};
use karpenter_azure::catalog::unavailable::OfferingRef;
use karpenter_azure::catalog::{embedded_sku, Timestamp, UnavailableOfferings};
use karpenter_azure::cloud::azure::instancetypes::Catalog;
use karpenter_azure::cloud::azure::naming;
use karpenter_azure::cloud::azure::{
    ArmClients, ArmSettings, AzureCloudProvider, HttpTimeouts, LaunchSettings, RetrySettings,
};
use karpenter_azure::cloud::{
    CloudError, CloudProvider, InstanceTypeOption, KubeletSettings, LaunchRequest, OfferingChoice,
};
use karpenter_azure::model::CapacityType;

const NOW: Timestamp = Duration::from_secs(1_000_000);
/// A version the fake's default gallery publishes, bootable by the gen2 amd64 sizes these tests use.
const IMAGE_ID: &str = "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/2204gen2containerd/versions/202501.01.0";

struct Harness {
    fake: FakeArm,
    provider: AzureCloudProvider,
    cache: Arc<Mutex<UnavailableOfferings>>,
    arm: ArmSettings,
}

async fn harness(config: FakeArmConfig) -> Harness {
    let fake = FakeArm::start(config).await.expect("fake ARM starts");
    let arm = fake.arm_settings(RetrySettings {
        max_retries: 4,
        initial_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(200),
        max_total_elapsed: Duration::from_secs(20),
    });
    let launch = LaunchSettings {
        additional_tags: BTreeMap::from([("cost/center".to_string(), "42".to_string())]),
        ..fake.launch_settings()
    };
    let cache = Arc::new(Mutex::new(UnavailableOfferings::new()));
    let clients = ArmClients::new(&arm).expect("clients build");
    let catalog = Catalog::for_region(&launch.location, cache.clone(), Arc::new(|| NOW)).unwrap();
    let provider = AzureCloudProvider::new(clients, launch, Arc::new(catalog));
    Harness { fake, provider, cache, arm }
}

/// A size with the given offerings, each a cent dearer than the one before, so the listed order is
/// the allocation order.
fn option(size: &str, offerings: &[(&str, CapacityType)]) -> InstanceTypeOption {
    let sku = embedded_sku(size).expect("size in catalog");
    let offerings = offerings
        .iter()
        .enumerate()
        .map(|(i, (zone, ct))| OfferingChoice {
            zone: zone.to_string(),
            capacity_type: *ct,
            price: 0.1 + 0.01 * i as f64,
        })
        .collect();
    InstanceTypeOption::from_sku(sku, IMAGE_ID, offerings)
}

fn request(claim: &str, options: Vec<InstanceTypeOption>) -> LaunchRequest {
    LaunchRequest {
        claim_name: claim.into(),
        nodepool: "default".into(),
        options,
        labels: BTreeMap::from([
            ("team".to_string(), "a".to_string()),
            ("kubernetes.io/forbidden".to_string(), "x".to_string()),
        ]),
        taints: vec![Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: TaintEffect::NoSchedule,
            time_added: None,
        }],
        startup_taints: vec![],
        subnet_id: None,
        os_disk_size_gb: 128,
        tags: BTreeMap::from([("team/owner".to_string(), "blue".to_string())]),
        kubelet: KubeletSettings { max_pods: 110, kube_reserved: BTreeMap::new(), config_flags: vec![] },
        security: Default::default(),
        node_class: karpenter_azure::cloud::azure::NodeClassBootstrap {
            kubernetes_version: "1.33.2".into(),
            gpu_driver: true,
            ..Default::default()
        },
    }
}

fn on_demand(zone: &str) -> (&str, CapacityType) {
    (zone, CapacityType::OnDemand)
}

fn blocked(h: &Harness, size: &str, zone: &str, ct: CapacityType) -> bool {
    let sku = embedded_sku(size).unwrap();
    let key =
        OfferingRef { capacity_type: ct, sku: size, zone, family: sku.family.as_deref(), vcpus: sku.vcpus };
    h.cache.lock().unwrap().is_unavailable(&key, NOW)
}

fn assert_nothing_leaked(h: &Harness) {
    assert!(
        h.fake.vms().is_empty(),
        "VMs left: {:?}",
        h.fake.vms().iter().map(|v| &v.name).collect::<Vec<_>>()
    );
    assert!(h.fake.nics().is_empty(), "NICs left: {:?}", h.fake.nics());
}

#[tokio::test]
async fn a_class_the_bootstrap_cannot_serve_is_refused_before_anything_is_created() {
    use karpenter_azure::apis::aksnodeclass::LocalDnsMode;
    let h = harness(FakeArmConfig::default()).await;
    let mut req =
        request("default-dns", vec![option("Standard_D4s_v5", &[("eastus-1", CapacityType::OnDemand)])]);
    req.node_class.local_dns = Some(LocalDnsMode::Required);
    let err = h.provider.create(&req).await.unwrap_err();
    assert!(matches!(err, CloudError::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("spec.localDNS.mode"), "{err}");
    assert!(h.fake.vms().is_empty() && h.fake.nics().is_empty(), "nothing is created in Azure");

    let mut req =
        request("default-nover", vec![option("Standard_D4s_v5", &[("eastus-1", CapacityType::OnDemand)])]);
    req.node_class.kubernetes_version = String::new();
    let err = h.provider.create(&req).await.unwrap_err();
    assert!(err.to_string().contains("status.kubernetesVersion"), "{err}");
}

#[tokio::test]
async fn the_custom_data_carries_the_aks_join_contract() {
    let h = harness(FakeArmConfig::default()).await;
    let on_demand = [("eastus-1", CapacityType::OnDemand)];
    h.provider.create(&request("default-aks", vec![option("Standard_D4s_v5", &on_demand)])).await.unwrap();
    let vm = h.fake.vm("aks-default-aks").expect("VM exists");
    let text = String::from_utf8(
        base64::engine::general_purpose::STANDARD.decode(vm.custom_data.as_deref().unwrap()).unwrap(),
    )
    .unwrap();
    let join = fake_azure::arm::boot::join_vars(&text);
    assert_eq!(join.api_server_name.as_deref(), Some("cluster.example"));
    assert_eq!(join.tls_bootstrap_token.as_deref(), Some("abcdef.0123456789abcdef"));
    assert!(fake_azure::arm::kubelet::bootstrap_inputs(&join).is_ok(), "{join:?}");
    for line in ["KUBERNETES_VERSION=1.33.2", "NETWORK_PLUGIN=none", "SUBNET=nodes", "VIRTUAL_NETWORK=vnet"] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    let flags = fake_azure::arm::boot::parse_custom_data(vm.custom_data.as_deref().unwrap()).unwrap();
    assert_eq!(flags.labels["kubernetes.azure.com/ebpf-dataplane"], "cilium");
    assert_eq!(flags.labels["kubernetes.azure.com/podnetwork-type"], "overlay");
    assert_eq!(flags.labels["kubernetes.azure.com/network-subnet"], "nodes");
    assert_eq!(flags.labels["kubernetes.azure.com/os-sku-effective"], "Ubuntu2204");
    assert_eq!(flags.labels["kubernetes.azure.com/role"], "agent");
}

#[tokio::test]
async fn create_makes_nic_and_vm_with_size_zone_tags_and_custom_data() {
    let h = harness(FakeArmConfig::default()).await;
    let spot = [("eastus-2", CapacityType::Spot)];
    let instance =
        h.provider.create(&request("default-a1", vec![option("Standard_D4s_v5", &spot)])).await.unwrap();
    assert_eq!(instance.name, "aks-default-a1");
    assert_eq!(instance.zone.as_deref(), Some("eastus-2"));
    assert_eq!(instance.capacity_type, CapacityType::Spot);
    assert_eq!(instance.state, "Succeeded");
    assert!(
        instance.provider_id.contains("/resourceGroups/mc_rg_cluster_eastus/"),
        "{}",
        instance.provider_id
    );

    let vm = h.fake.vm("aks-default-a1").expect("VM exists");
    assert_eq!((vm.vm_size.as_str(), vm.zone.as_deref(), vm.spot), ("Standard_D4s_v5", Some("2"), true));
    let doc = &vm.document;
    assert_eq!(doc["properties"]["evictionPolicy"], "Delete");
    assert_eq!(doc["properties"]["billingProfile"]["maxPrice"], -1.0);
    let tags = &doc["tags"];
    assert_eq!(tags["karpenter.azure.com_cluster"], "test-cluster");
    assert_eq!(tags["karpenter.sh_nodepool"], "default");
    assert_eq!(tags["compute.aks.billing"], "linux");
    assert_eq!(tags["team_owner"], "blue");
    assert_eq!(tags["cost_center"], "42");
    assert_eq!(doc["properties"]["storageProfile"]["osDisk"]["name"], "aks-default-a1");
    assert_eq!(h.fake.nics().len(), 1);
    assert_eq!(h.fake.nics()[0]["name"], "aks-default-a1");

    let flags = fake_azure::arm::boot::parse_custom_data(vm.custom_data.as_deref().unwrap()).unwrap();
    assert_eq!(flags.labels["team"], "a");
    assert_eq!(flags.labels["karpenter.sh/capacity-type"], "spot");
    assert_eq!(flags.labels["topology.kubernetes.io/zone"], "eastus-2");
    assert!(!flags.labels.contains_key("kubernetes.io/forbidden"));
    assert_eq!(flags.max_pods, Some(110));
    let taints: Vec<String> = flags.taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect();
    assert_eq!(taints, ["dedicated:NoSchedule", "karpenter.sh/unregistered:NoExecute"]);
}

/// The NIC joins the cluster load balancer's IPv4 pools and carries the AKS NSG (the subnet is the
/// user's own); a pool deleted after it was listed makes ARM refuse the NIC once, then the launcher
/// lists the load balancer again and succeeds.
#[tokio::test]
async fn the_nic_joins_the_cluster_load_balancer_pools_and_nsg_and_survives_a_stale_pool() {
    let h = harness(FakeArmConfig::default()).await;
    let req = request("default-n1", vec![option("Standard_D2s_v5", &[on_demand("eastus-1")])]);
    h.provider.create(&req).await.unwrap();
    let nic = h.fake.nics()[0].clone();
    let pools: Vec<String> = nic["properties"]["ipConfigurations"][0]["properties"]
        ["loadBalancerBackendAddressPools"]
        .as_array()
        .expect("the primary IP configuration joins backend pools")
        .iter()
        .map(|p| p["id"].as_str().unwrap().rsplit('/').next().unwrap().to_string())
        .collect();
    assert_eq!(pools, ["aksOutboundBackendPool", "kubernetes"], "IPv4 pools of the kubernetes LB");
    let nsg = nic["properties"]["networkSecurityGroup"]["id"].as_str().expect("the NIC carries the NSG");
    assert!(nsg.ends_with(h.fake.aks_nsg_name()), "{nsg}");
    assert_eq!(nic["properties"]["ipConfigurations"].as_array().unwrap().len(), 1, "no secondary IPs");

    // The cached pool list still names aksOutboundBackendPool.
    h.fake.remove_backend_pool("aksOutboundBackendPool");
    let req = request("default-n2", vec![option("Standard_D2s_v5", &[on_demand("eastus-1")])]);
    h.provider.create(&req).await.expect("the launcher recovers from a stale pool list");
    let refused = h.fake.requests().iter().filter(|r| r.status == 400).count();
    assert_eq!(refused, 1, "one refused NIC PUT, then a fresh list and a good one");
    let nic = h.fake.nics().into_iter().find(|n| n["name"] == "aks-default-n2").expect("second NIC");
    let joined = nic["properties"]["ipConfigurations"][0]["properties"]["loadBalancerBackendAddressPools"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(joined, 1);
}

#[tokio::test]
async fn create_twice_reuses_the_vm() {
    let h = harness(FakeArmConfig::default()).await;
    let req = request("default-r1", vec![option("Standard_D2s_v5", &[on_demand("eastus-1")])]);
    let first = h.provider.create(&req).await.unwrap();
    let second = h.provider.create(&req).await.unwrap();
    assert_eq!(first.provider_id, second.provider_id);
    assert_eq!(h.fake.vms().len(), 1);
    assert_eq!(h.fake.vm_put_count("aks-default-r1"), 1);
}

#[tokio::test]
async fn get_list_delete() {
    let h = harness(FakeArmConfig::default()).await;
    let a = h
        .provider
        .create(&request("default-g1", vec![option("Standard_D2s_v5", &[on_demand("eastus-1")])]))
        .await
        .unwrap();
    h.provider
        .create(&request("default-g2", vec![option("Standard_D2s_v5", &[on_demand("eastus-3")])]))
        .await
        .unwrap();
    assert_eq!(h.provider.get(&a.provider_id).await.unwrap().instance_type, "Standard_D2s_v5");
    let mut names: Vec<String> = h.provider.list().await.unwrap().into_iter().map(|i| i.name).collect();
    names.sort();
    assert_eq!(names, ["aks-default-g1", "aks-default-g2"]);

    h.provider.delete(&a.provider_id).await.unwrap();
    assert!(h.fake.vm("aks-default-g1").is_none());
    assert!(h.fake.nics().iter().all(|n| n["name"] != "aks-default-g1"));
    assert!(matches!(h.provider.get(&a.provider_id).await, Err(CloudError::NotFound(_))));
    h.provider.delete(&a.provider_id).await.expect("deleting twice is fine");
    assert_eq!(h.provider.list().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_paged_listing_reads_every_vm_as_a_get_does_and_every_nic() {
    // ARM pages a listing with `nextLink`; each VM and NIC is read from its page's text as it is parsed.
    // A page ARM fails (500) or throttles (429) is asked for again, as the SDK retries its calls.
    let h = harness(FakeArmConfig { list_page_size: Some(2), ..FakeArmConfig::default() }).await;
    let zones = ["eastus-1", "eastus-2", "eastus-3"];
    let mut launched = vec![];
    for i in 0..5 {
        let zone = zones[i % zones.len()];
        let name = format!("default-p{i}");
        let size = if i % 2 == 0 { "Standard_D2s_v5" } else { "Standard_D4s_v5" };
        launched
            .push(h.provider.create(&request(&name, vec![option(size, &[on_demand(zone)])])).await.unwrap());
    }
    let group =
        format!("/subscriptions/{}/resourceGroups/{}", h.fake.subscription_id(), h.fake.resource_group());
    let vm_collection = format!("{group}/providers/Microsoft.Compute/virtualMachines");
    let nic_collection = format!("{group}/providers/Microsoft.Network/networkInterfaces");
    h.fake.inject(Fault::ServerError { requests: 1, path_prefix: Some(vm_collection.clone()) });
    h.fake.inject(Fault::Throttle {
        requests: 1,
        retry_after_secs: 1,
        path_prefix: Some(nic_collection.clone()),
    });
    let mut listed = h.provider.list().await.unwrap();
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(listed.len(), 5, "{listed:#?}");
    for instance in &listed {
        assert_eq!(instance, &h.provider.get(&instance.provider_id).await.unwrap());
        assert!(launched.iter().any(|l| l.provider_id == instance.provider_id));
    }
    let page_statuses = |collection: &str| -> Vec<u16> {
        let requests = h.fake.requests().into_iter();
        requests.filter(|r| r.method == "GET" && r.path == collection).map(|r| r.status).collect()
    };
    assert_eq!(
        page_statuses(&vm_collection),
        [500, 200, 200, 200],
        "five VMs, two a page, the first asked twice"
    );

    let mut nics = h.provider.list_nics().await.unwrap();
    nics.sort();
    let names: Vec<String> = listed.iter().map(|i| i.name.clone()).collect();
    assert_eq!(nics, names, "each VM's NIC has the VM's name");
    assert_eq!(
        page_statuses(&nic_collection),
        [429, 200, 200, 200],
        "five NICs, two a page, the first asked twice"
    );
}

async fn capacity_case(fault: Fault, size: &str, ct: CapacityType) -> (Harness, CloudError) {
    let h = harness(FakeArmConfig::default()).await;
    h.fake.inject(fault);
    let err =
        h.provider.create(&request("default-c1", vec![option(size, &[("eastus-1", ct)])])).await.unwrap_err();
    assert_eq!(err.category(), "InsufficientCapacity", "{err}");
    assert_nothing_leaked(&h);
    (h, err)
}

#[tokio::test]
async fn the_nic_of_a_failed_create_is_collected_once_network_releases_it() {
    // Network keeps the NIC of a refused create reserved for its VM (180 s in Azure, a second here):
    // the clean-up after the failure cannot delete it, a delete meanwhile is refused as retryable,
    // and the same delete succeeds once the reservation is over. (A create that fails later leaves a
    // VM whose deletion takes the NIC with it.)
    let h =
        harness(FakeArmConfig { nic_reservation: Duration::from_secs(1), ..FakeArmConfig::default() }).await;
    h.fake.inject(Fault::Capacity {
        error: CreateError::ZonalAllocationFailed,
        target: Target::default(),
        delivery: Delivery::Sync,
        times: None,
    });
    let req = request("default-r1", vec![option("Standard_D2s_v5", &[on_demand("eastus-1")])]);
    let err = h.provider.create(&req).await.unwrap_err();
    assert_eq!(err.category(), "InsufficientCapacity", "{err}");
    assert!(h.fake.vms().is_empty(), "no VM was made");
    assert_eq!(h.provider.list_nics().await.unwrap(), ["aks-default-r1"], "the NIC stays");
    let refused = h.provider.delete_nic("aks-default-r1").await.unwrap_err();
    assert!(refused.is_retryable(), "{refused}");
    assert!(refused.to_string().contains("NicReservedForAnotherVm"), "{refused}");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    h.provider.delete_nic("aks-default-r1").await.expect("released after the reservation");
    assert_nothing_leaked(&h);
}

#[tokio::test]
async fn zonal_allocation_failure_marks_the_zone_for_both_capacity_types() {
    for delivery in [Delivery::Sync, Delivery::Async] {
        let fault = Fault::Capacity {
            error: CreateError::ZonalAllocationFailed,
            target: Target::default(),
            delivery,
            times: None,
        };
        let (h, err) = capacity_case(fault, "Standard_D4s_v5", CapacityType::OnDemand).await;
        assert!(err.to_string().contains("ZonalAllocationFailed"), "{err}");
        assert!(blocked(&h, "Standard_D4s_v5", "eastus-1", CapacityType::OnDemand));
        assert!(blocked(&h, "Standard_D4s_v5", "eastus-1", CapacityType::Spot));
        assert!(!blocked(&h, "Standard_D4s_v5", "eastus-2", CapacityType::OnDemand));
        // The next create skips the blocked offering and uses the next one.
        h.fake.clear_faults();
        let req = request(
            "default-c2",
            vec![option("Standard_D4s_v5", &[on_demand("eastus-1"), on_demand("eastus-2")])],
        );
        assert_eq!(h.provider.create(&req).await.unwrap().zone.as_deref(), Some("eastus-2"));
    }
}

#[tokio::test]
async fn sku_not_available_marks_every_zone_of_the_capacity_type() {
    let fault = Fault::Capacity {
        error: CreateError::SkuNotAvailable,
        target: Target::default(),
        delivery: Delivery::Sync,
        times: None,
    };
    let (h, _) = capacity_case(fault, "Standard_D4s_v5", CapacityType::Spot).await;
    assert!(blocked(&h, "Standard_D4s_v5", "eastus-3", CapacityType::Spot));
    assert!(!blocked(&h, "Standard_D4s_v5", "eastus-3", CapacityType::OnDemand));
    // Everything blocked: InsufficientCapacity without calling ARM.
    let puts_before = h.fake.requests().iter().filter(|r| r.method == "PUT").count();
    let err = h
        .provider
        .create(&request("default-c3", vec![option("Standard_D4s_v5", &[("eastus-2", CapacityType::Spot)])]))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "InsufficientCapacity");
    assert_eq!(h.fake.requests().iter().filter(|r| r.method == "PUT").count(), puts_before);
}

#[tokio::test]
async fn family_quota_marks_the_size_in_every_zone() {
    let fault =
        Fault::Quota { scope: QuotaScope::Family { family: None }, limit: 0, delivery: Delivery::Sync };
    let (h, err) = capacity_case(fault, "Standard_D4s_v5", CapacityType::OnDemand).await;
    assert!(err.to_string().contains("SKUFamilyQuotaReached"), "{err}");
    assert!(blocked(&h, "Standard_D4s_v5", "eastus-2", CapacityType::OnDemand));
    assert!(!blocked(&h, "Standard_D4s_v5", "eastus-2", CapacityType::Spot));
}

#[tokio::test]
async fn regional_quota_leaves_out_the_sizes_larger_than_the_quota_left_until_it_expires() {
    // 6 regular cores in the region: a 4-core VM runs, an 8-core one is refused with the quota left (2).
    let h = harness(FakeArmConfig::default()).await;
    h.fake.inject(Fault::Quota { scope: QuotaScope::Regional, limit: 6, delivery: Delivery::Sync });
    let first = request("default-q1", vec![option("Standard_D4s_v5", &[on_demand("eastus-1")])]);
    h.provider.create(&first).await.expect("4 of 6 cores");
    let big = request("default-q2", vec![option("Standard_D8s_v5", &[on_demand("eastus-1")])]);
    let err = h.provider.create(&big).await.unwrap_err();
    assert!(err.to_string().contains("RegionalQuotaReached"), "{err}");
    assert!(blocked(&h, "Standard_D8s_v5", "eastus-2", CapacityType::OnDemand), "every zone");
    assert!(blocked(&h, "Standard_E4s_v5", "eastus-3", CapacityType::OnDemand), "every family over 2 cores");
    assert!(!blocked(&h, "Standard_D2s_v5", "eastus-1", CapacityType::OnDemand), "2 cores still fit");
    assert!(!blocked(&h, "Standard_D8s_v5", "eastus-1", CapacityType::Spot), "spot has its own quota");
    // The next launch of a blocked size is not even tried: no second PUT.
    let puts = h.fake.vm_put_count("aks-default-q3");
    let again = request("default-q3", vec![option("Standard_D8s_v5", &[on_demand("eastus-2")])]);
    assert_eq!(h.provider.create(&again).await.unwrap_err().category(), "InsufficientCapacity");
    assert_eq!(h.fake.vm_put_count("aks-default-q3"), puts);
    let later = NOW + Duration::from_secs(11 * 60);
    let sku = embedded_sku("Standard_D8s_v5").unwrap();
    let key = OfferingRef {
        capacity_type: CapacityType::OnDemand,
        sku: "Standard_D8s_v5",
        zone: "eastus-1",
        family: sku.family.as_deref(),
        vcpus: sku.vcpus,
    };
    assert!(!h.cache.lock().unwrap().is_unavailable(&key, later), "the quota may have freed up: tried again");
}

#[tokio::test]
async fn low_priority_quota_blocks_all_spot() {
    let fault = Fault::Quota { scope: QuotaScope::LowPriority, limit: 2, delivery: Delivery::Async };
    let (h, _) = capacity_case(fault, "Standard_D4s_v5", CapacityType::Spot).await;
    assert!(blocked(&h, "Standard_E8s_v5", "eastus-3", CapacityType::Spot));
    assert!(!blocked(&h, "Standard_D4s_v5", "eastus-1", CapacityType::OnDemand));
}

#[tokio::test]
async fn throttling_and_server_errors_are_retried() {
    let h = harness(FakeArmConfig::default()).await;
    h.fake.inject(Fault::Throttle { requests: 2, retry_after_secs: 1, path_prefix: None });
    h.fake.inject(Fault::ServerError { requests: 2, path_prefix: None });
    let req = request("default-t1", vec![option("Standard_D2s_v5", &[on_demand("eastus-1")])]);
    let instance = h.provider.create(&req).await.expect("succeeds after retries");
    assert_eq!(instance.state, "Succeeded");
    let statuses: Vec<u16> = h.fake.requests().iter().map(|r| r.status).collect();
    assert!(statuses.contains(&429) && statuses.contains(&500), "{statuses:?}");
}

#[tokio::test]
async fn slow_provisioning_is_waited_for() {
    let h = harness(FakeArmConfig::default()).await;
    h.fake.inject(Fault::SlowProvisioning { delay_ms: 1500, target: Target::default() });
    let started = std::time::Instant::now();
    let req = request("default-s1", vec![option("Standard_D2s_v5", &[on_demand("eastus-1")])]);
    let instance = h.provider.create(&req).await.unwrap();
    assert_eq!(instance.state, "Succeeded");
    assert!(started.elapsed() >= Duration::from_millis(1400), "{:?}", started.elapsed());
}

/// The operation-status reads of VM creates so far.
fn status_polls(h: &Harness) -> usize {
    h.fake.requests().iter().filter(|r| r.method == "GET" && r.path.contains("/operations/")).count()
}

/// A provider of `h`'s fake that polls at most every `interval`, for at most `max_polls` intervals.
fn polling_provider(h: &Harness, interval: Duration, max_polls: u32) -> AzureCloudProvider {
    let launch = LaunchSettings { poll_interval: interval, max_polls, ..h.fake.launch_settings() };
    let clients = ArmClients::new(&h.arm).expect("clients build");
    let catalog = Catalog::for_region(&launch.location, h.cache.clone(), Arc::new(|| NOW)).unwrap();
    AzureCloudProvider::new(clients, launch, Arc::new(catalog))
}

#[tokio::test]
async fn a_create_is_polled_as_often_as_arm_advises_within_the_interval() {
    // ARM advises 1 s; the production interval is 3 s: a 1.5 s create is seen done at the advised poll
    // at 2 s, not at the first 3 s poll.
    let h = harness(FakeArmConfig {
        lro_retry_after: Duration::from_secs(1),
        provisioning_delay: Duration::from_millis(1500),
        ..FakeArmConfig::default()
    })
    .await;
    let provider = polling_provider(&h, Duration::from_secs(3), 200);
    let started = std::time::Instant::now();
    let req = request("default-p1", vec![option("Standard_D2s_v5", &[on_demand("eastus-1")])]);
    let instance = provider.create(&req).await.expect("the create succeeds");
    assert_eq!(instance.state, "Succeeded");
    assert!(status_polls(&h) >= 3, "{} status polls for a 1.5 s create advised every 1 s", status_polls(&h));
    assert!(started.elapsed() < Duration::from_millis(2900), "took {:?}", started.elapsed());

    // ARM advises 10 s; the interval is 200 ms (below the floor, as tests run): the interval wins.
    let h = harness(FakeArmConfig {
        lro_retry_after: Duration::from_secs(10),
        provisioning_delay: Duration::from_millis(1000),
        ..FakeArmConfig::default()
    })
    .await;
    let provider = polling_provider(&h, Duration::from_millis(200), 200);
    let started = std::time::Instant::now();
    provider.create(&request("default-p2", req.options.clone())).await.expect("the create succeeds");
    assert!(status_polls(&h) >= 3, "{} status polls for a 1 s create at a 200 ms interval", status_polls(&h));
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_create_running_past_the_deadline_is_given_up_and_leaves_nothing() {
    // 10 polls at 50 ms: given up after 500 ms however often ARM advises a poll.
    let h = harness(FakeArmConfig { lro_retry_after: Duration::from_millis(10), ..FakeArmConfig::default() })
        .await;
    h.fake.inject(Fault::SlowProvisioning { delay_ms: 5_000, target: Target::default() });
    let provider = polling_provider(&h, Duration::from_millis(50), 10);
    let req = request("default-t1", vec![option("Standard_D2s_v5", &[on_demand("eastus-1")])]);
    let started = std::time::Instant::now();
    let error = provider.create(&req).await.expect_err("the create is given up");
    assert!(error.to_string().contains("did not finish"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
    h.fake.clear_faults();
    assert_nothing_leaked(&h);
}

#[tokio::test]
async fn spot_eviction_reads_as_not_found() {
    let h = harness(FakeArmConfig::default()).await;
    let req = request("default-e1", vec![option("Standard_D2s_v5", &[("eastus-1", CapacityType::Spot)])]);
    let instance = h.provider.create(&req).await.unwrap();
    assert!(h.fake.evict("aks-default-e1"));
    let err = h.provider.get(&instance.provider_id).await.unwrap_err();
    assert_eq!(err.category(), "NotFound");
}

#[tokio::test]
async fn the_region_sizes_come_from_the_resource_skus_api() {
    let h = harness(FakeArmConfig::default()).await;
    let clients = ArmClients::new(&h.arm).expect("clients build");
    let skus = karpenter_azure::cloud::azure::skus::list_region_skus(&clients, h.fake.location())
        .await
        .expect("the SKU list is read");
    assert!(skus.len() > 500, "{}", skus.len());
    let d4 = skus.iter().find(|s| s.record.name == "Standard_D4s_v5").expect("D4s_v5 listed");
    assert_eq!((d4.record.vcpus, d4.record.memory_mib), (4, 16 * 1024));
    assert_eq!(d4.zones, ["1", "2", "3"]);
    assert_eq!(d4.record.low_priority_capable, Some(true));
}

#[tokio::test]
async fn vm_creates_are_counted_with_the_phase_their_failure_came_in() {
    use karpenter_azure::operator::metrics;
    let image = IMAGE_ID.to_string();
    // Each case has its own nodepool label, so the other tests of this binary cannot touch its series.
    for (delivery, pool, phase) in
        [(Delivery::Sync, "metrics-sync", "sync"), (Delivery::Async, "metrics-async", "async")]
    {
        let h = harness(FakeArmConfig::default()).await;
        h.fake.inject(Fault::Capacity {
            error: CreateError::ZonalAllocationFailed,
            target: Target::default(),
            delivery,
            times: Some(1),
        });
        let options = vec![option("Standard_D2s_v5", &[on_demand("eastus-1"), on_demand("eastus-2")])];
        let req = LaunchRequest { nodepool: pool.into(), ..request(&format!("{pool}-1"), options) };
        h.provider.create(&req).await.unwrap_err();
        h.provider.create(&req).await.expect("the next zone launches");
        let m = metrics::get();
        let started = |zone: &str| {
            m.scheduler
                .vm_create_start
                .with_label_values(&[image.as_str(), "Standard_D2s_v5", zone, "on-demand", pool])
                .get()
        };
        assert_eq!((started("eastus-1"), started("eastus-2")), (1, 1), "{pool}");
        let failed = |zone: &str, phase: &str| {
            let labels =
                [image.as_str(), "Standard_D2s_v5", zone, "on-demand", pool, phase, "ZonalAllocationFailed"];
            m.scheduler.vm_create_failure.with_label_values(&labels).get()
        };
        assert_eq!(failed("eastus-1", phase), 1, "{pool}");
        assert_eq!(failed("eastus-2", phase), 0, "the second create succeeded");
        let other = if phase == "sync" { "async" } else { "sync" };
        assert_eq!(failed("eastus-1", other), 0, "{pool}: counted in one phase only");
    }
}

#[tokio::test]
async fn tags_and_identities_change_in_place_on_the_vm_and_its_nic() {
    let h = harness(FakeArmConfig::default()).await;
    let req = request("default-inplace", vec![option("Standard_D4s_v5", &[on_demand("eastus-1")])]);
    let instance = h.provider.create(&req).await.expect("launched");
    let class_tags = BTreeMap::from([("team/name".to_string(), "blue".to_string())]);
    let mut desired = h.provider.desired_in_place("default", &class_tags);
    assert_eq!(
        desired.tags.get("team_name").map(String::as_str),
        Some("blue"),
        "'/' becomes '_' as at launch"
    );
    assert_eq!(desired.tags.get("cost_center").map(String::as_str), Some("42"), "ADDITIONAL_TAGS stay");
    let identity = "/subscriptions/s/resourceGroups/r/providers/Microsoft.ManagedIdentity/userAssignedIdentities/kubelet";
    desired.identities = vec![identity.to_string()];
    h.provider.update_in_place(&instance.provider_id, &desired).await.expect("updated in place");

    let vm = h.fake.vm(&instance.name).expect("the same VM, not a new one");
    assert_eq!(vm.document["tags"]["team_name"], "blue");
    assert!(vm.document["identity"]["userAssignedIdentities"][identity].is_object(), "{:#}", vm.document);
    assert_eq!(h.fake.vm_put_count(&instance.name), 1, "no second create");
    let nic = h.fake.nics().into_iter().find(|n| n["name"] == instance.name.as_str()).expect("its NIC");
    assert_eq!(nic["tags"]["team_name"], "blue");

    h.provider.delete(&instance.provider_id).await.expect("deleted");
    let gone = h.provider.update_in_place(&instance.provider_id, &desired).await;
    assert!(matches!(gone, Err(CloudError::NotFound(_))), "{gone:?}");
}

#[tokio::test]
async fn a_hung_arm_request_is_cut_off_at_its_time_limit_and_retried() {
    let fake = FakeArm::start(FakeArmConfig::default()).await.expect("fake ARM starts");
    let timeouts = HttpTimeouts { connect: Duration::from_secs(1), request: Duration::from_millis(500) };
    let arm = ArmSettings {
        timeouts,
        ..fake.arm_settings(RetrySettings {
            max_retries: 2,
            initial_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(100),
            max_total_elapsed: Duration::from_secs(10),
        })
    };
    let clients = ArmClients::new(&arm).expect("clients build");
    let launch = fake.launch_settings();
    let cache = Arc::new(Mutex::new(UnavailableOfferings::new()));
    let catalog = Catalog::for_region(&launch.location, cache, Arc::new(|| NOW)).unwrap();
    let provider = AzureCloudProvider::new(clients.clone(), launch, Arc::new(catalog));
    let arm_paths = format!("/subscriptions/{}/resourceGroups", fake.subscription_id());

    // A listing (its pages are read outside the SDK, retried as the SDK retries its calls): the hung
    // attempt is cut off and the retry answers.
    fake.inject(Fault::Hang { requests: 1, secs: 60, path_prefix: Some(arm_paths.clone()) });
    let started = std::time::Instant::now();
    assert_eq!(provider.list_nics().await.expect("the retry answers"), Vec::<String>::new());
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());

    // The SDK's calls: the same, through its retry policy.
    fake.inject(Fault::Hang { requests: 1, secs: 60, path_prefix: Some(arm_paths) });
    let started = std::time::Instant::now();
    let missing = naming::provider_id(fake.subscription_id(), fake.resource_group(), "aks-missing");
    let err = provider.get(&missing).await.expect_err("the retry answers: no such VM");
    assert!(matches!(err, CloudError::NotFound(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());

    // Operation polls go outside the SDK: a hung one fails at the limit instead of waiting.
    let operations =
        format!("/subscriptions/{}/providers/Microsoft.Compute/locations", fake.subscription_id());
    fake.inject(Fault::Hang { requests: 1, secs: 60, path_prefix: Some(operations.clone()) });
    let url = format!("{}{operations}/eastus/operations/hung?api-version=2024-07-01", fake.base_url());
    let started = std::time::Instant::now();
    let failure = clients.get_json_polled(&url).await.expect_err("cut off");
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    assert_eq!(failure.status, 0, "no answer: {failure:?}");
}

#[tokio::test]
async fn a_wait_for_a_long_running_operation_holds_no_call_permit_while_it_sleeps() {
    // One call at a time, and VM deletes that take 3 s: a create issued while a delete is waiting
    // finishes long before the delete, because the delete holds the permit only for each request.
    let h =
        harness(FakeArmConfig { deletion_delay: Duration::from_secs(3), ..FakeArmConfig::default() }).await;
    let launch = LaunchSettings {
        max_concurrent_calls: 1,
        poll_interval: Duration::from_millis(100),
        ..h.fake.launch_settings()
    };
    let catalog = Catalog::for_region(&launch.location, h.cache.clone(), Arc::new(|| NOW)).unwrap();
    let clients = ArmClients::new(&h.arm).expect("clients build");
    let provider = Arc::new(AzureCloudProvider::new(clients, launch, Arc::new(catalog)));
    let options = vec![option("Standard_D2s_v5", &[on_demand("eastus-1")])];
    let first = provider.create(&request("default-w1", options.clone())).await.expect("the first create");

    let deleting = {
        let provider = provider.clone();
        tokio::spawn(async move {
            provider.delete(&first.provider_id).await.expect("the delete ends");
            std::time::Instant::now()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    provider.create(&request("default-w2", options)).await.expect("the second create");
    let created = std::time::Instant::now();
    let deleted = deleting.await.unwrap();
    assert!(
        created < deleted,
        "the create waited for the whole delete: it ended {:?} after it",
        created - deleted
    );
}
