//! AKSNodeClass status end to end: the controller resolves the class's images from the fake ARM's
//! community galleries and checks its subnet; each launched size boots the resolved image of its
//! architecture and Hyper-V generation; a class whose subnet does not exist stays not Ready, its
//! NodePool gets no NodeClaims and a claim of it is deleted with a NodeClassNotReady launch failure,
//! until the class names a subnet that exists, whose NICs then go in it; a class asking for encryption
//! at host and trusted launch becomes Ready with the trusted-launch image and its pod lands on a VM with
//! that image and the security profile, on a size the fake's SKU list says can take both.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::{json, Value};

use super::lookups::{claims_of, get_json};
use super::{cleanup, cluster, manifests, objects, setup};
use fake_azure::arm::gallery::{DEFAULT_NEWEST_VERSION, UBUNTU_GALLERY};
use fake_azure::arm::FakeSubnet;

const STAGE: Duration = Duration::from_secs(60);
const READY: Duration = Duration::from_secs(30);
/// Long enough for the batch window (1 s idle) and a solve, had the pool been provisioned.
const NO_CLAIMS_FOR: Duration = Duration::from_secs(5);
const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// Sizes of each kind, and the Ubuntu 24.04 definition (Kubernetes 1.34) each must boot.
const SIZES: &[(&str, &str)] = &[
    ("Standard_D2s_v5", "2404gen2containerd"),
    ("Standard_D2_v2", "2404containerd"),
    ("Standard_D2ps_v5", "2404gen2arm64containerd"),
];

fn image_id(definition: &str) -> String {
    format!("/CommunityGalleries/{UBUNTU_GALLERY}/images/{definition}/versions/{DEFAULT_NEWEST_VERSION}")
}

/// A NodePool of exactly `sizes`, on-demand, any architecture.
fn node_pool(name: &str, sizes: &[&str]) -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
    "spec": {
        "template": {"spec": {
            "requirements": [
                {"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": sizes},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
            ],
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": name}
        }},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "Never"}
    }})
}

/// A small pod for the pool, on `size` when given.
fn pod(namespace: &str, name: &str, size: Option<&str>) -> Value {
    let mut spec = manifests::pod_spec(namespace, "100m", "128Mi");
    if let Some(size) = size {
        spec["nodeSelector"][LABEL_INSTANCE_TYPE] = json!(size);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec})
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

fn is_true(object: &Value, type_: &str) -> bool {
    condition(object, type_).is_some_and(|c| c["status"] == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_class_lists_the_newest_gallery_images_and_each_size_launches_with_its_own() {
    const NAME: &str = "e2e-nc-images";
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).start(&client).await;
    let class = manifests::node_class(NAME);
    let sizes: Vec<&str> = SIZES.iter().map(|(size, _)| *size).collect();
    let pool = node_pool(NAME, &sizes);
    objects::apply(&client, &class).await.expect("applying the AKSNodeClass");
    objects::apply(&client, &pool).await.expect("applying the NodePool");

    let status = controller
        .wait_until("the AKSNodeClass to be Ready", READY, || async {
            let class = get_json(&client, &class).await?;
            is_true(&class, "Ready")
                .then(|| class["status"].clone())
                .ok_or_else(|| format!("{}", class["status"]))
        })
        .await;
    for type_ in ["KubernetesVersionReady", "ImagesReady", "SubnetsReady"] {
        assert!(is_true(&json!({ "status": status }), type_), "{type_} in {status}");
    }
    let expected: Vec<Value> = [("amd64", "2"), ("amd64", "1"), ("arm64", "2")]
        .iter()
        .zip(SIZES)
        .map(|((arch, generation), (_, definition))| {
            json!({"id": image_id(definition), "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": [arch]},
                {"key": "karpenter.azure.com/sku-hyperv-generation", "operator": "In", "values": [generation]}
            ]})
        })
        .collect();
    assert_eq!(status["images"], json!(expected), "status.images, newest version first match order");

    controller
        .wait_until("the NodePool to be Ready", READY, || async {
            let pool = get_json(&client, &pool).await?;
            if is_true(&pool, "Ready") {
                Ok(())
            } else {
                Err(format!("{}", pool["status"]))
            }
        })
        .await;
    for (i, (size, _)) in SIZES.iter().enumerate() {
        objects::apply(&client, &pod(NAME, &format!("p{i}"), Some(size))).await.expect("creating a pod");
    }
    let claims = controller
        .wait_until("a launched NodeClaim per size", STAGE, || async {
            let claims = claims_of(&client, NAME).await?;
            let launched = claims.iter().filter(|c| c["status"]["providerID"].is_string()).count();
            if launched == SIZES.len() {
                Ok(claims)
            } else {
                Err(format!("{launched} launched of {}", claims.len()))
            }
        })
        .await;
    for claim in &claims {
        let size = claim["metadata"]["labels"][LABEL_INSTANCE_TYPE].as_str().unwrap_or_default();
        let definition = SIZES.iter().find(|(s, _)| *s == size).map(|(_, d)| *d);
        let definition = definition.unwrap_or_else(|| panic!("claim on unexpected size {size}: {claim}"));
        let vm_name = claim["status"]["providerID"].as_str().and_then(|id| id.rsplit('/').next()).unwrap();
        let vm = controller.fake().vm(vm_name).unwrap_or_else(|| panic!("VM {vm_name} in the fake ARM"));
        let image = &vm.document["properties"]["storageProfile"]["imageReference"]["communityGalleryImageId"];
        assert_eq!(image, &json!(image_id(definition)), "the image of VM {vm_name} ({size})");
        assert_eq!(claim["status"]["imageID"], json!(image_id(definition)), "status.imageID of {size}");
    }

    let pods: Vec<Value> = (0..SIZES.len()).map(|i| pod(NAME, &format!("p{i}"), None)).collect();
    cleanup::remove(&client, NAME, &pods, || controller.exit_status().is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_with_encryption_at_host_and_trusted_launch_launches_secure_vms() {
    const NAME: &str = "e2e-nc-secure";
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).start(&client).await;
    let mut class = manifests::node_class(NAME);
    class["spec"]["security"] =
        json!({"encryptionAtHost": true, "trustedLaunch": {"vtpm": true, "secureBoot": true}});
    // Any amd64 size: the cheapest ones (B-series, `_v2`) have no encryption at host in the fake's list.
    let pool = manifests::node_pool(NAME, None);
    objects::apply(&client, &class).await.expect("applying the AKSNodeClass");
    objects::apply(&client, &pool).await.expect("applying the NodePool");
    let status = controller
        .wait_until("the AKSNodeClass to be Ready", READY, || async {
            let class = get_json(&client, &class).await?;
            is_true(&class, "Ready")
                .then(|| class["status"].clone())
                .ok_or_else(|| format!("{}", class["status"]))
        })
        .await;
    // Ubuntu stays on 22.04 for trusted launch (upstream); the image is gen2 amd64 only.
    let tl_image = image_id("2204gen2TLcontainerd");
    let expected = json!([{"id": tl_image, "requirements": [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.azure.com/sku-hyperv-generation", "operator": "In", "values": ["2"]}
    ]}]);
    assert_eq!(status["images"], expected);

    objects::apply(&client, &pod(NAME, "secure", None)).await.expect("creating a pod");
    let claim = controller
        .wait_until("a launched NodeClaim", STAGE, || async {
            let claims = claims_of(&client, NAME).await?;
            claims
                .into_iter()
                .find(|c| c["status"]["providerID"].is_string())
                .ok_or_else(|| "no launched NodeClaim yet".to_string())
        })
        .await;
    let vm_name = claim["status"]["providerID"].as_str().and_then(|id| id.rsplit('/').next()).unwrap();
    let vm = controller.fake().vm(vm_name).unwrap_or_else(|| panic!("VM {vm_name} in the fake ARM"));
    let sku = karpenter_azure::catalog::embedded_sku(&vm.vm_size).unwrap();
    assert!(
        fake_azure::arm::skus::encryption_at_host_supported(sku),
        "{} supports encryption at host",
        vm.vm_size
    );
    assert!(!fake_azure::arm::skus::trusted_launch_disabled(sku), "{} allows trusted launch", vm.vm_size);
    let props = &vm.document["properties"];
    assert_eq!(
        props["securityProfile"],
        json!({"encryptionAtHost": true, "securityType": "TrustedLaunch",
               "uefiSettings": {"secureBootEnabled": true, "vTpmEnabled": true}})
    );
    assert_eq!(props["storageProfile"]["imageReference"]["communityGalleryImageId"], json!(tl_image));
    assert_eq!(claim["status"]["imageID"], json!(tl_image));

    cleanup::remove(&client, NAME, &[pod(NAME, "secure", None)], || controller.exit_status().is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_subnet_keeps_the_class_not_ready_and_its_pool_gets_no_nodeclaims() {
    const NAME: &str = "e2e-nc-subnet";
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).start(&client).await;
    let fake = controller.fake();
    let missing = fake.subnet_id(&FakeSubnet::new("rg", "vnet", "e2e-missing", ""));
    let mut class = manifests::node_class(NAME);
    class["spec"]["vnetSubnetID"] = json!(missing);
    let pool = manifests::node_pool(NAME, Some("D"));
    objects::apply(&client, &class).await.expect("applying the AKSNodeClass");
    objects::apply(&client, &pool).await.expect("applying the NodePool");

    let stored = controller
        .wait_until("SubnetsReady=False on the AKSNodeClass", READY, || async {
            let class = get_json(&client, &class).await?;
            match condition(&class, "SubnetsReady") {
                Some(c) if c["status"] == "False" => Ok(class.clone()),
                _ => Err(format!("{}", class["status"])),
            }
        })
        .await;
    let subnets = condition(&stored, "SubnetsReady").unwrap();
    assert_eq!(subnets["reason"], "SubnetNotFound", "{subnets}");
    let message = subnets["message"].as_str().unwrap_or_default();
    assert!(message.contains(&missing), "the message names the subnet: {message}");
    assert!(message.contains("not found"), "and what ARM said: {message}");
    let ready = condition(&stored, "Ready").unwrap();
    assert_eq!((&ready["status"], &ready["reason"]), (&json!("False"), &json!("UnhealthyDependents")));
    assert!(is_true(&stored, "ImagesReady"), "{}", stored["status"]);
    controller
        .wait_until("NodeClassReady=False on the NodePool", READY, || async {
            let pool = get_json(&client, &pool).await?;
            match condition(&pool, "NodeClassReady") {
                Some(c) if c["status"] == "False" && c["reason"] == "NodeClassNotReady" => Ok(()),
                _ => Err(format!("{}", pool["status"])),
            }
        })
        .await;

    let waiting = pod(NAME, "waiting", None);
    objects::apply(&client, &waiting).await.expect("creating the pod");
    controller
        .wait_until("the scheduler to mark the pod unschedulable", READY, || async {
            let pod = get_json(&client, &waiting).await?;
            let unschedulable =
                condition(&pod, "PodScheduled").is_some_and(|c| c["reason"] == "Unschedulable");
            if unschedulable {
                Ok(())
            } else {
                Err(format!("{}", pod["status"]))
            }
        })
        .await;
    // Nothing is expected to happen: waiting out the time a provisioning would take is the check.
    tokio::time::sleep(NO_CLAIMS_FOR).await;
    let claims = claims_of(&client, NAME).await.expect("listing NodeClaims");
    assert!(claims.is_empty(), "no NodeClaims for a pool whose class is not Ready: {claims:?}");

    // A NodeClaim of the class (made while it was Ready, say) cannot launch: it goes, with an event.
    let manual = standalone_claim(NAME, "e2e-nc-subnet-manual");
    objects::create(&client, &manual, false).await.expect("creating a NodeClaim");
    controller
        .wait_until("the NodeClaim of the not-Ready class to be deleted", STAGE, || async {
            match get_json(&client, &manual).await {
                Err(err) if err.contains("NotFound") || err.contains("not found") => Ok(()),
                Err(err) => Err(err),
                Ok(claim) => Err(format!("still there: {}", claim["status"])),
            }
        })
        .await;
    let failed = launch_failures(&client, "e2e-nc-subnet-manual").await;
    assert!(
        failed
            .iter()
            .any(|note| note.starts_with("NodeClassNotReady: AKSNodeClass e2e-nc-subnet is not Ready")),
        "a LaunchFailed event says why: {failed:?}"
    );

    // Pointing the class at a subnet that exists makes it Ready and the pod gets its node there.
    let late = FakeSubnet::new("rg", "vnet", "e2e-late", "10.226.0.0/16");
    let late_id = fake.subnet_id(&late);
    fake.add_subnet(late);
    objects::merge_patch(&client, &class, &json!({"spec": {"vnetSubnetID": late_id}}))
        .await
        .expect("patching the AKSNodeClass");
    let claim = controller
        .wait_until("a launched NodeClaim once the subnet exists", STAGE, || async {
            let claims = claims_of(&client, NAME).await?;
            claims
                .into_iter()
                .find(|c| c["status"]["providerID"].is_string())
                .ok_or_else(|| "none yet".into())
        })
        .await;
    let vm_name = claim["status"]["providerID"].as_str().and_then(|id| id.rsplit('/').next()).unwrap();
    let nic = fake.nics().into_iter().find(|n| n["name"] == vm_name).expect("the VM's NIC");
    let subnet = &nic["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"];
    assert_eq!(subnet, &json!(late_id), "the NIC is in the class's subnet");

    cleanup::remove(&client, NAME, &[waiting], || controller.exit_status().is_none()).await;
}

/// A NodeClaim for `Standard_D2s_v5` on the class `class`, labelled with the pool of the same name.
fn standalone_claim(class: &str, name: &str) -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
    "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": class}},
    "spec": {
        "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": class},
        "requirements": [
            {"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": ["Standard_D2s_v5"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
        ]
    }})
}

/// The notes of the LaunchFailed events about a NodeClaim.
async fn launch_failures(client: &Client, claim: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.expect("listing events");
    list.items
        .into_iter()
        .filter(|e| {
            let regarding = e.regarding.as_ref();
            regarding.and_then(|r| r.kind.as_deref()) == Some("NodeClaim")
                && regarding.and_then(|r| r.name.as_deref()) == Some(claim)
                && e.reason.as_deref() == Some("LaunchFailed")
        })
        .filter_map(|e| e.note)
        .collect()
}

/// The termination finalizer: a class in use outlives its deletion until its last NodeClaim is gone,
/// its NodePool stops launching meanwhile, and the class says which claims it waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_in_use_is_deleted_only_after_its_last_nodeclaim() {
    const NAME: &str = "e2e-class-finalizer";
    let client = cluster::shared().client().await;
    let controller = setup::controller(NAME).start(&client).await;
    let (class, pool) = (manifests::node_class(NAME), manifests::node_pool(NAME, Some("D")));
    setup::class_and_pool_ready(&client, &controller, &class, &pool).await;
    let finalizers = get_json(&client, &class).await.expect("the class")["metadata"]["finalizers"].clone();
    assert_eq!(finalizers, json!(["karpenter.azure.com/termination"]));
    let deployment = manifests::deployment(NAME, "web", NAME, 1, "500m", "1Gi");
    objects::apply(&client, &deployment).await.expect("applying the Deployment");
    setup::running_pods(&client, NAME, "app=web", 1).within(STAGE).wait(&controller).await;

    let classes = objects::api_for(&client, &class).await.expect("the AKSNodeClass API");
    classes.delete(NAME, &Default::default()).await.expect("deleting the class");
    controller
        .wait_until("the class to wait for its NodeClaim", STAGE, || async {
            let stored = get_json(&client, &class).await?;
            let pool = get_json(&client, &pool).await?;
            let terminating =
                condition(&pool, "NodeClassReady").is_some_and(|c| c["reason"] == "NodeClassTerminating");
            let events: Api<Event> = Api::namespaced(client.clone(), "default");
            let list = events.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
            let waiting = list.items.iter().any(|e| {
                e.reason.as_deref() == Some("WaitingOnNodeClaimTermination")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NAME)
            });
            match (stored["metadata"]["deletionTimestamp"].is_string(), terminating, waiting) {
                (true, true, true) => Ok(()),
                state => Err(format!("deleting, pool NodeClassTerminating, event: {state:?}")),
            }
        })
        .await;

    // The pool goes first, so nothing launches again; then the claim, and with it the class.
    let pools = objects::api_for(&client, &pool).await.expect("the NodePool API");
    let _ = pools.delete(NAME, &Default::default()).await;
    cleanup::remove(&client, NAME, &[deployment], || controller.exit_status().is_none()).await;
    controller
        .wait_until("the class to go once its NodeClaim is gone", STAGE, || async {
            match get_json(&client, &class).await {
                Err(_) => Ok(()),
                Ok(stored) => Err(format!("still there: {}", stored["metadata"])),
            }
        })
        .await;
}
