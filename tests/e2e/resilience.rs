//! The controller under failure: capacity errors fall back to another offering
//! without leaking, a SIGKILL mid-create is recovered without a duplicate VM, unowned VMs are garbage
//! collected, and bursts of 429 and 500 from ARM do not stop convergence.
//!
//! As in `provisioning`, each test has its own namespace, AKSNodeClass and NodePool (named after the test),
//! its own controller and fake ARM, and removes what it created.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use karpenter_azure::catalog::{embedded_sku, UnavailableOfferings};
use karpenter_azure::cloud::azure::instancetypes::Catalog;
use karpenter_azure::cloud::azure::{ArmClients, AzureCloudProvider, LaunchSettings, RetrySettings};
use karpenter_azure::cloud::{
    wall_clock, CloudProvider, InstanceTypeOption, KubeletSettings, LaunchRequest, OfferingChoice,
};
use karpenter_azure::model::CapacityType;
use kube::{Api, Client};
use serde_json::Value;

use super::controller::{Controller, CLUSTER_NAME};
use super::lookups::{claims_of, condition_is_true, is_running, list_pods};
use super::manifests::Scenario;
use super::{cleanup, cluster, objects, setup};
use fake_azure::arm::{CreateError, Delivery, FakeArm, Fault, Target};

/// How long the Deployment's pods may take to run, faults included. Generous: azure_core's exponential
/// retry policy backs off past Retry-After, so a call hit by a whole burst waits tens of seconds.
const CONVERGE: Duration = Duration::from_secs(180);
const TAG_NODEPOOL: &str = "karpenter.sh_nodepool";
const APP: &str = super::manifests::SCENARIO_APP;
const IMAGE_ID: &str = "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/2204gen2containerd/versions/202501.01.0";

/// Test 2: every on-demand create in zones 1 and 2 is refused with ZonalAllocationFailed; the claims
/// fall back to other offerings, every pod runs, and nothing is leaked. Offerings of equal price are
/// ranked per claim (upstream's shuffled ties), so which zone a claim tries first is not fixed: with
/// two of three zones refused, most runs exercise the fallback, and every run must end with VMs only in
/// zone 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zonal_capacity_error_falls_back_to_another_offering_without_leaking() {
    let scenario = Scenario { name: "e2e-res-capacity" };
    let client = cluster::shared().client().await;
    let controller = set_up(&client, &scenario, &[]).await;
    let fake = controller.fake();
    for zone in ["1", "2"] {
        fake.inject(Fault::Capacity {
            error: CreateError::ZonalAllocationFailed,
            target: Target { sku: None, zone: Some(zone.into()), priority: Some("Regular".into()) },
            delivery: Delivery::Sync,
            times: None,
        });
    }
    let started = Instant::now();
    let replicas = 6;
    objects::apply(&client, &scenario.deployment(replicas)).await.expect("applying the Deployment");
    wait_running(&client, &controller, &scenario, replicas as usize).await;
    let running_after = started.elapsed();

    let refused: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path.contains("/virtualMachines/") && r.status == 409)
        .map(|r| r.path.rsplit('/').next().unwrap_or_default().to_string())
        .collect();
    let in_refused_zones: Vec<String> = fake
        .vms()
        .iter()
        .filter(|vm| vm.zone.as_deref() != Some("3"))
        .map(|vm| format!("{} in zone {:?}", vm.name, vm.zone))
        .collect();
    assert!(
        in_refused_zones.is_empty(),
        "VMs outside the one zone that accepts creates: {in_refused_zones:?}"
    );
    let claims = wait_claims_settled(&client, &controller, &scenario).await;
    assert_no_leaks(fake, &claims, &scenario);
    println!(
        "e2e capacity fallback: {replicas} pods Running {running_after:.1?} after the Deployment; {} refused \
         creates {refused:?}; {} NodeClaims, zones {:?}",
        refused.len(),
        claims.len(),
        fake.vms().iter().map(|vm| vm.zone.clone().unwrap_or_default()).collect::<Vec<_>>()
    );
    cleanup::remove(&client, scenario.name, &[scenario.deployment(0)], || controller.exit_status().is_none())
        .await;
}

/// Test 4: the controller is SIGKILLed while VMs are being created and restarted: the claims complete with
/// one VM each and no second PUT; then a VM tagged for the cluster without a NodeClaim is collected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_mid_create_leaves_no_duplicate_and_unowned_vms_are_garbage_collected() {
    let scenario = Scenario { name: "e2e-res-restart" };
    let client = cluster::shared().client().await;
    let gc_env =
        [("KARPENTER_GC_INTERVAL", "2s".to_string()), ("KARPENTER_GC_GRACE_PERIOD", "5s".to_string())];
    let controller = set_up(&client, &scenario, &gc_env).await;
    let fake = controller.fake();
    fake.inject(Fault::SlowProvisioning { delay_ms: 8_000, target: Target::default() });
    let started = Instant::now();
    let replicas = 4;
    objects::apply(&client, &scenario.deployment(replicas)).await.expect("applying the Deployment");
    controller
        .wait_until("a VM of the scenario to be Creating", Duration::from_secs(60), || async {
            let creating = fake.vms().iter().any(|vm| {
                vm.provisioning_state == "Creating" && vm.document["tags"][TAG_NODEPOOL] == scenario.name
            });
            if creating {
                Ok(())
            } else {
                Err(format!("VMs: {:?}", fake.vms().iter().map(|v| &v.name).collect::<Vec<_>>()))
            }
        })
        .await;
    let creating: Vec<String> = fake
        .vms()
        .iter()
        .filter(|vm| vm.provisioning_state == "Creating")
        .map(|vm| vm.name.clone())
        .collect();
    controller.kill_and_restart();
    let killed_after = started.elapsed();
    fake.clear_faults();
    wait_running(&client, &controller, &scenario, replicas as usize).await;
    let claims = wait_claims_settled(&client, &controller, &scenario).await;
    assert_no_leaks(fake, &claims, &scenario);
    let puts: BTreeMap<String, u32> =
        pool_vms(fake, &scenario).into_iter().map(|vm| (vm.clone(), fake.vm_put_count(&vm))).collect();
    assert!(puts.values().all(|n| *n == 1), "each VM should have been PUT once: {puts:?}");
    for vm in &creating {
        assert!(
            puts.contains_key(&vm.to_ascii_lowercase()) || fake.vm(vm).is_some(),
            "VM {vm} being created at the kill is gone"
        );
    }
    let converged_after = started.elapsed();

    // A VM (and NIC) tagged for this cluster that no NodeClaim owns, made by hand.
    let orphan = "e2e-res-orphan";
    let vm_name = format!("aks-{orphan}");
    let provider = provider_for(fake);
    provider.create(&orphan_request(orphan)).await.expect("creating the unowned VM directly");
    assert!(fake.vm(&vm_name).is_some());
    let orphan_made = Instant::now();
    let nodes: Api<Node> = Api::all(client.clone());
    controller
        .wait_until("GC to delete the unowned VM, its NIC and its Node", Duration::from_secs(60), || async {
            let vm = fake.vm(&vm_name).map(|vm| vm.provisioning_state);
            let nic = fake
                .nics()
                .iter()
                .any(|n| n["name"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(&vm_name)));
            let node = nodes.get_opt(&vm_name).await.map_err(|e| e.to_string())?.is_some();
            if vm.is_none() && !nic && !node {
                Ok(())
            } else {
                Err(format!("VM {vm:?}, NIC present {nic}, Node present {node}"))
            }
        })
        .await;
    println!(
        "e2e restart: killed {killed_after:.1?} after the Deployment with {creating:?} Creating; {replicas} pods \
         Running and claims settled {converged_after:.1?} after it; VM PUTs {puts:?}; unowned VM collected \
         {:.1?} after it was made (GC every 2 s, grace 5 s)",
        orphan_made.elapsed()
    );
    cleanup::remove(&client, scenario.name, &[scenario.deployment(0)], || controller.exit_status().is_none())
        .await;
}

/// Test 5: bursts of 429 (Retry-After 1) and 500 on ARM while provisioning; everything converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_of_429_and_500_from_arm_still_converge() {
    let scenario = Scenario { name: "e2e-res-throttle" };
    let client = cluster::shared().client().await;
    let controller = set_up(&client, &scenario, &[]).await;
    let fake = controller.fake();
    let burst = |fake: &FakeArm| {
        fake.inject(Fault::Throttle { requests: 3, retry_after_secs: 1, path_prefix: None });
        fake.inject(Fault::ServerError { requests: 2, path_prefix: None });
    };
    burst(fake);
    let started = Instant::now();
    let replicas = 8;
    objects::apply(&client, &scenario.deployment(replicas)).await.expect("applying the Deployment");
    // More bursts while claims launch, spread over the launches: the spacing is the point, there is no
    // state to wait for (a burst nobody hits is harmless).
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        burst(fake);
    }
    wait_running(&client, &controller, &scenario, replicas as usize).await;
    let running_after = started.elapsed();
    let claims = wait_claims_settled(&client, &controller, &scenario).await;
    assert_no_leaks(fake, &claims, &scenario);
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    let (throttled, failed) =
        (statuses.iter().filter(|s| **s == 429).count(), statuses.iter().filter(|s| **s == 500).count());
    assert!(throttled > 0 && failed > 0, "the faults were never hit: {throttled} 429s, {failed} 500s");
    println!(
        "e2e throttling: {replicas} pods Running {running_after:.1?} after the Deployment through {throttled} \
         429s and {failed} 500s; {} NodeClaims",
        claims.len()
    );
    cleanup::remove(&client, scenario.name, &[scenario.deployment(0)], || controller.exit_status().is_none())
        .await;
}

/// The controller with `env`, then the scenario's AKSNodeClass and NodePool, Ready.
async fn set_up(client: &Client, scenario: &Scenario, env: &[(&'static str, String)]) -> Controller {
    let controller = setup::controller(scenario.name).envs(env).start(client).await;
    setup::class_and_pool_ready(client, &controller, &scenario.node_class(), &scenario.node_pool()).await;
    controller
}

async fn wait_running(client: &Client, controller: &Controller, scenario: &Scenario, replicas: usize) {
    let what = format!("all {replicas} pods of {} to be Running", scenario.name);
    controller
        .wait_until(&what, CONVERGE, || async {
            let pods = list_pods(client, scenario.name, APP).await?;
            let running = pods.iter().filter(|pod| is_running(pod)).count();
            if running == replicas && pods.len() == replicas {
                return Ok(());
            }
            let claims = claims_of(client, scenario.name).await?;
            Err(format!("{running} of {} pods Running; NodeClaims: {}", pods.len(), summaries(&claims)))
        })
        .await;
}

/// The scenario's NodeClaims once none is deleting and each has Launched and Registered True.
async fn wait_claims_settled(client: &Client, controller: &Controller, scenario: &Scenario) -> Vec<Value> {
    controller
        .wait_until("every NodeClaim to be Launched and Registered", Duration::from_secs(30), || async {
            let claims = claims_of(client, scenario.name).await?;
            let settled = claims.iter().all(|c| {
                c["metadata"]["deletionTimestamp"].is_null()
                    && condition_is_true(c, "Launched")
                    && condition_is_true(c, "Registered")
            });
            if settled && !claims.is_empty() {
                Ok(claims)
            } else {
                Err(summaries(&claims))
            }
        })
        .await
}

/// Every VM tagged with the scenario's pool belongs to one of its NodeClaims and vice versa, and every NIC
/// in the fake belongs to a VM.
fn assert_no_leaks(fake: &FakeArm, claims: &[Value], scenario: &Scenario) {
    let expected: BTreeSet<String> = claims.iter().filter_map(vm_name_of).collect();
    let vms = pool_vms(fake, scenario);
    assert_eq!(vms, expected, "the pool's VMs should be exactly its NodeClaims' VMs");
    let all_vms: BTreeSet<String> = fake.vms().iter().map(|vm| vm.name.to_ascii_lowercase()).collect();
    let stray: Vec<String> = fake
        .nics()
        .iter()
        .filter_map(|nic| nic["name"].as_str().map(str::to_ascii_lowercase))
        .filter(|nic| !all_vms.contains(nic))
        .collect();
    assert!(stray.is_empty(), "NICs without a VM: {stray:?}");
}

/// Lower-cased names of the VMs tagged with the scenario's NodePool.
fn pool_vms(fake: &FakeArm, scenario: &Scenario) -> BTreeSet<String> {
    fake.vms()
        .iter()
        .filter(|vm| vm.document["tags"][TAG_NODEPOOL] == scenario.name)
        .map(|vm| vm.name.to_ascii_lowercase())
        .collect()
}

/// An Azure provider of our own against the controller's fake ARM, with the controller's cluster name.
fn provider_for(fake: &FakeArm) -> AzureCloudProvider {
    let arm = fake.arm_settings(RetrySettings::default());
    let launch = LaunchSettings {
        cluster_name: CLUSTER_NAME.into(),
        poll_interval: Duration::from_millis(100),
        max_concurrent_calls: 4,
        ..fake.launch_settings()
    };
    let clients = ArmClients::new(&arm).expect("ARM clients build");
    let unavailable = Arc::new(Mutex::new(UnavailableOfferings::new()));
    let catalog = Catalog::for_region(&launch.location, unavailable, wall_clock())
        .expect("the fake's region is in the catalog");
    AzureCloudProvider::new(clients, launch, Arc::new(catalog))
}

fn orphan_request(claim: &str) -> LaunchRequest {
    let sku = embedded_sku("Standard_D2s_v5").expect("Standard_D2s_v5 is in the catalog");
    let offering =
        OfferingChoice { zone: "eastus-2".into(), capacity_type: CapacityType::OnDemand, price: 0.096 };
    LaunchRequest {
        claim_name: claim.into(),
        nodepool: "e2e-res-no-such-pool".into(),
        options: vec![InstanceTypeOption::from_sku(sku, IMAGE_ID, vec![offering])],
        labels: BTreeMap::new(),
        taints: vec![],
        startup_taints: vec![],
        subnet_id: None,
        os_disk_size_gb: 128,
        tags: BTreeMap::new(),
        kubelet: KubeletSettings { max_pods: 110, kube_reserved: BTreeMap::new(), config_flags: vec![] },
        security: Default::default(),
        node_class: karpenter_azure::cloud::azure::NodeClassBootstrap {
            kubernetes_version: "1.33.2".into(),
            gpu_driver: true,
            ..Default::default()
        },
    }
}

fn object_name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// The lower-cased VM name: the last segment of `status.providerID`.
fn vm_name_of(claim: &Value) -> Option<String> {
    let provider_id = claim["status"]["providerID"].as_str().filter(|id| !id.is_empty())?;
    provider_id.rsplit('/').next().map(str::to_ascii_lowercase)
}

fn summaries(claims: &[Value]) -> String {
    let parts: Vec<String> = claims
        .iter()
        .map(|c| {
            let conditions: Vec<String> = c["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|c| {
                    format!("{}={}", c["type"].as_str().unwrap_or("?"), c["status"].as_str().unwrap_or("?"))
                })
                .collect();
            format!(
                "{} providerID {} deleting {} [{}]",
                object_name(c),
                c["status"]["providerID"].as_str().unwrap_or("-"),
                !c["metadata"]["deletionTimestamp"].is_null(),
                conditions.join(", ")
            )
        })
        .collect();
    format!("[{}]", parts.join("; "))
}
