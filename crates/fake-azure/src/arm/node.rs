//! The `NodeRegistrar` for a real API server: creates the booted VM's Node through a kube client, the way a
//! kubelet registers, and marks it for kwok so simulated kubelets keep it Ready.
//!
//! The Node: name = VM name, `spec.providerID`, labels and taints from the boot contract (see `boot`),
//! `status.capacity`/`allocatable` from the SKU, `status.nodeInfo.kubeletVersion` from the custom data's
//! `KUBERNETES_VERSION`, and the annotation `kwok.x-k8s.io/node: fake` that kwok
//! selects on. The kubelet sends status with its create, and the API server keeps it for Nodes.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::Api;

use super::boot::{BootedVm, NodeRegistrar};

/// kwok manages Nodes carrying this annotation (its `--manage-nodes-with-annotation-selector`).
pub const KWOK_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// Registers booted VMs as Nodes in the cluster behind `client`.
#[derive(Clone)]
pub struct KubeNodeRegistrar {
    client: kube::Client,
}

impl KubeNodeRegistrar {
    pub fn new(client: kube::Client) -> KubeNodeRegistrar {
        KubeNodeRegistrar { client }
    }
}

impl NodeRegistrar for KubeNodeRegistrar {
    fn register(&self, vm: BootedVm) -> BoxFuture<'static, Result<(), String>> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        Box::pin(async move {
            match nodes.create(&PostParams::default(), &node_for(&vm)).await {
                Ok(_) => Ok(()),
                // A kubelet restarting finds its Node already registered.
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
                Err(err) => Err(format!("creating node {}: {err}", vm.name)),
            }
        })
    }

    fn deregister(&self, vm_name: String) -> BoxFuture<'static, Result<(), String>> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        Box::pin(async move {
            match nodes.delete(&vm_name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(err) => Err(format!("deleting node {vm_name}: {err}")),
            }
        })
    }
}

/// What the VM's kubelet reports as its version (`v1.34.4`): the version its custom data installs, as a
/// real node image's kubelet would (kwok keeps what the Node registered with).
fn kubelet_version(vm: &BootedVm) -> Option<String> {
    let version = vm.join.as_ref()?.kubernetes_version.as_deref()?.trim_start_matches('v');
    (!version.is_empty()).then(|| format!("v{version}"))
}

/// The Node object a booted VM registers.
pub fn node_for(vm: &BootedVm) -> Node {
    let quantities = |list: &BTreeMap<String, String>| {
        list.iter().map(|(k, v)| (k.clone(), Quantity(v.clone()))).collect()
    };
    Node {
        metadata: ObjectMeta {
            name: Some(vm.name.clone()),
            labels: Some(vm.labels.clone()),
            annotations: Some(BTreeMap::from([(
                KWOK_ANNOTATION.0.to_string(),
                KWOK_ANNOTATION.1.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(vm.provider_id.clone()),
            taints: (!vm.taints.is_empty()).then(|| vm.taints.clone()),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(quantities(&vm.capacity)),
            allocatable: Some(quantities(&vm.allocatable)),
            node_info: kubelet_version(vm).map(|version| NodeSystemInfo {
                kubelet_version: version,
                operating_system: "linux".to_string(),
                architecture: vm.labels.get("kubernetes.io/arch").cloned().unwrap_or_else(|| "amd64".into()),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
    }
}
