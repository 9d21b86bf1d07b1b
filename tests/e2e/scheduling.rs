//! A VM created through the fake Azure Resource Manager boots into a Node of the real API server (the fake's
//! `KubeNodeRegistrar`), kwok makes it Ready, kube-scheduler binds a pod to it, and kwok runs the pod.
//! This is the path a NodeClaim's VM takes in the full e2e flow, minus the controller.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::{json, Value};

use super::{cluster, kwok, objects, wait};
use fake_azure::arm::{FakeArm, FakeArmConfig, KubeNodeRegistrar};

const NAMESPACE: &str = "e2e-scheduling";
const VM: &str = "aks-e2e-sched-1";

/// The bootstrap script the launcher would send: the kubelet flags the fake's boot simulation reads.
fn custom_data() -> String {
    let script = "#!/bin/bash\nKUBELET_FLAGS=\"--max-pods=30 \
        --node-labels=karpenter.sh/nodepool=e2e,karpenter.sh/capacity-type=on-demand \
        --register-with-taints=example.com/dedicated=e2e:NoSchedule\"\n";
    base64::engine::general_purpose::STANDARD.encode(script)
}

/// PUTs an ARM resource with the fake's token; panics unless ARM accepts it.
async fn arm_put(fake: &FakeArm, path: &str, api_version: &str, body: Value) {
    let url = format!(
        "{}/subscriptions/{}/resourceGroups/{}/providers/{path}?api-version={api_version}",
        fake.base_url(),
        fake.subscription_id(),
        fake.resource_group()
    );
    let response =
        reqwest::Client::new().put(&url).bearer_auth(fake.issue_token()).json(&body).send().await.unwrap();
    let status = response.status();
    assert!(status.is_success(), "PUT {path}: {status} {}", response.text().await.unwrap_or_default());
}

async fn create_vm(fake: &FakeArm) {
    let subnet = format!(
        "/subscriptions/{}/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes",
        fake.subscription_id()
    );
    let ip_config =
        json!({"primary": true, "privateIPAllocationMethod": "Dynamic", "subnet": {"id": subnet}});
    let nic = json!({"location": fake.location(),
        "properties": {"ipConfigurations": [{"name": "ipconfig1", "properties": ip_config}]}});
    arm_put(fake, &format!("Microsoft.Network/networkInterfaces/{VM}"), "2024-03-01", nic).await;
    let nic_id = format!(
        "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/networkInterfaces/{VM}",
        fake.subscription_id(),
        fake.resource_group()
    );
    let vm = json!({"location": fake.location(), "zones": ["2"], "properties": {
        "hardwareProfile": {"vmSize": "Standard_D4s_v5"},
        "storageProfile": {"osDisk": {"name": VM, "createOption": "FromImage", "deleteOption": "Delete",
                                      "diskSizeGB": 128}},
        "osProfile": {"computerName": VM, "adminUsername": "azureuser", "customData": custom_data()},
        "networkProfile": {"networkInterfaces": [
            {"id": nic_id, "properties": {"primary": true, "deleteOption": "Delete"}}]},
        "priority": "Regular"
    }});
    arm_put(fake, &format!("Microsoft.Compute/virtualMachines/{VM}"), "2024-07-01", vm).await;
}

#[tokio::test]
async fn kube_scheduler_binds_a_pod_to_a_node_booted_by_the_fake_arm_and_kwok_runs_it() {
    let cluster = cluster::shared();
    let client = cluster.client().await;
    objects::namespace(&client, NAMESPACE).await;

    let registrar = Arc::new(KubeNodeRegistrar::new(client.clone()));
    let config = FakeArmConfig { registrar: Some(registrar), ..FakeArmConfig::default() };
    let fake = FakeArm::start(config).await.expect("fake ARM starts");
    create_vm(&fake).await;

    let node = kwok::ready_node(&client, VM).await;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("karpenter.sh/nodepool").map(String::as_str), Some("e2e"));
    assert_eq!(labels.get("topology.kubernetes.io/zone").map(String::as_str), Some("eastus-2"));
    assert_eq!(labels.get("node.kubernetes.io/instance-type").map(String::as_str), Some("Standard_D4s_v5"));
    let spec = node.spec.clone().unwrap_or_default();
    let rg = "mc_rg_cluster_eastus"; // the node resource group, lower-cased as AKS writes providerIDs
    let expected_id = format!(
        "azure:///subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{VM}",
        fake.subscription_id()
    );
    assert_eq!(spec.provider_id.as_deref(), Some(expected_id.as_str()));
    assert!(spec.taints.iter().flatten().any(|t| t.key == "example.com/dedicated"), "{:?}", spec.taints);
    let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
    assert_eq!(allocatable.get("pods").map(|q| q.0.as_str()), Some("30"), "--max-pods reaches the Node");

    // Not bound by us: only kube-scheduler sets spec.nodeName for a pod created without one.
    let pod = kwok::pod(
        "web",
        json!({"app": "web"}),
        json!({
            "nodeSelector": {"karpenter.sh/nodepool": "e2e"},
            "tolerations": [{"key": "example.com/dedicated", "operator": "Equal", "value": "e2e",
                             "effect": "NoSchedule"}]
        }),
    );
    kwok::create_pod(&client, NAMESPACE, &pod).await;
    let running = kwok::running_pod(&client, NAMESPACE, "web").await;
    assert_eq!(running.spec.and_then(|s| s.node_name).as_deref(), Some(VM));
    let scheduled = running.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(scheduled.iter().any(|c| c.type_ == "PodScheduled" && c.status == "True"), "{scheduled:?}");

    // A pod the node cannot take (no toleration) stays Pending with the scheduler's reason.
    let untolerated =
        kwok::pod("stray", json!({}), json!({"nodeSelector": {"karpenter.sh/nodepool": "e2e"}}));
    kwok::create_pod(&client, NAMESPACE, &untolerated).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let message = wait::until("pod stray to be marked Unschedulable", Duration::from_secs(30), || async {
        let pod = pods.get("stray").await.map_err(|err| err.to_string())?;
        let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
        match conditions.iter().find(|c| c.type_ == "PodScheduled") {
            Some(c) if c.reason.as_deref() == Some("Unschedulable") => {
                Ok(c.message.clone().unwrap_or_default())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(message.contains("untolerated taint"), "{message}");
    fake.shutdown().await;
}
