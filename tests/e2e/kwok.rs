//! Nodes and pods on kwok: Nodes are registered the way a booted VM's kubelet registers (through the fake
//! ARM's `KubeNodeRegistrar`), kwok plays their kubelet (Ready nodes, Running pods), and these helpers wait
//! for it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{json, Value};

use super::wait;
use fake_azure::arm::{BootedVm, KubeNodeRegistrar, NodeRegistrar};

/// How long kwok and the controllers get for one step; generous for a loaded 2-core machine.
pub const STEP: Duration = Duration::from_secs(60);

/// The providerID of a VM of the fake ARM's default subscription and node resource group, without its name.
const PROVIDER_ID_PREFIX: &str = "azure:///subscriptions/00000000-0000-0000-0000-000000000001\
    /resourceGroups/mc_rg_cluster_eastus/providers/Microsoft.Compute/virtualMachines";

/// A VM of 4 vCPU / 16 GiB as the fake ARM would report it booted, without going through ARM.
pub fn booted_vm(name: &str) -> BootedVm {
    let resources = BTreeMap::from([
        ("cpu".to_string(), "4".to_string()),
        ("memory".to_string(), "16Gi".to_string()),
        ("pods".to_string(), "110".to_string()),
        ("ephemeral-storage".to_string(), "128G".to_string()),
    ]);
    BootedVm {
        name: name.to_string(),
        provider_id: format!("{PROVIDER_ID_PREFIX}/{name}"),
        zone: Some("eastus-1".to_string()),
        vm_size: "Standard_D4s_v5".to_string(),
        labels: BTreeMap::from([
            ("kubernetes.io/hostname".to_string(), name.to_string()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
            ("kubernetes.io/arch".to_string(), "amd64".to_string()),
            ("node.kubernetes.io/instance-type".to_string(), "Standard_D4s_v5".to_string()),
            ("topology.kubernetes.io/zone".to_string(), "eastus-1".to_string()),
        ]),
        taints: vec![],
        capacity: resources.clone(),
        allocatable: resources,
        join: None,
    }
}

/// Registers the node through `KubeNodeRegistrar`, as the fake ARM does when a VM boots.
pub async fn register(client: &Client, vm: BootedVm) {
    let name = vm.name.clone();
    KubeNodeRegistrar::new(client.clone())
        .register(vm)
        .await
        .unwrap_or_else(|err| panic!("registering {name}: {err}"));
}

/// Waits until the node exists and kwok reports it Ready; returns it.
pub async fn ready_node(client: &Client, name: &str) -> Node {
    let nodes: Api<Node> = Api::all(client.clone());
    wait::until(&format!("node {name} to be Ready"), STEP, || async {
        let node = nodes.get_opt(name).await.map_err(|err| err.to_string())?.ok_or("no such node")?;
        let conditions = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        match conditions.iter().find(|c| c.type_ == "Ready") {
            Some(c) if c.status == "True" => Ok(node),
            other => Err(format!("Ready condition {other:?}")),
        }
    })
    .await
}

/// A pod of one pause container (kwok never runs it), with `spec` merged over the defaults.
pub fn pod(name: &str, labels: Value, spec: Value) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
            "terminationGracePeriodSeconds": 0
        }
    });
    if let (Some(into), Value::Object(extra)) = (pod["spec"].as_object_mut(), spec) {
        into.extend(extra);
    }
    serde_json::from_value(pod).expect("pod manifest")
}

pub async fn create_pod(client: &Client, namespace: &str, pod: &Pod) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.create(&PostParams::default(), pod).await.unwrap_or_else(|err| panic!("creating pod: {err}"));
}

/// Waits until the pod is Running and Ready (kwok's pod-ready stage); returns it.
pub async fn running_pod(client: &Client, namespace: &str, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait::until(&format!("pod {namespace}/{name} to be Running and Ready"), STEP, || async {
        let pod = pods.get(name).await.map_err(|err| err.to_string())?;
        let status = pod.status.clone().unwrap_or_default();
        let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
        if status.phase.as_deref() == Some("Running") && ready {
            Ok(pod)
        } else {
            Err(format!("phase {:?}, conditions {:?}", status.phase, status.conditions))
        }
    })
    .await
}
