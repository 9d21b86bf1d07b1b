//! Boot simulation: a VM that reached `Succeeded` "boots" and its kubelet registers a Node.
//!
//! # Contract with the launcher
//!
//! The VM's `osProfile.customData` is base64 text (the bootstrap script). The fake decodes it and reads two
//! kubelet settings from anywhere in the text, as a kubelet would receive them:
//! - `KUBELET_NODE_LABELS="k1=v1,k2=v2"` (the AKS node image's variable) or `--node-labels=...` → Node
//!   labels;
//! - `--register-with-taints=key=value:Effect,key2:NoExecute` → Node taints (effects `NoSchedule`,
//!   `PreferNoSchedule`, `NoExecute`);
//! - optionally `--max-pods=N` → pods capacity (else the AKS default for Azure CNI overlay, 250).
//!
//! A value ends at whitespace or a closing quote, so `KUBELET_FLAGS="... --node-labels=a=b"` works; when a
//! flag repeats the last one wins, as with the kubelet. A VM without custom data, or whose flags do not
//! parse, never registers (a real node would not join either); the reason is printed to stderr.
//!
//! The booted node also gets the labels the kubelet and the Azure cloud-node-manager set themselves:
//! `kubernetes.io/hostname`, `kubernetes.io/os`, `kubernetes.io/arch` (overridable by `--node-labels`, as
//! with the kubelet), then `node.kubernetes.io/instance-type`, `topology.kubernetes.io/region` and
//! `topology.kubernetes.io/zone` (`eastus-1`, or `0` for a regional VM, as AKS labels it). Capacity and
//! allocatable come from the SKU through the crate's AKS formulas (OS disk size from
//! `storageProfile.osDisk.diskSizeGB`, default 128 GB).
//!
//! `NodeRegistrar` receives the `BootedVm`; `node::KubeNodeRegistrar` creates the Node through a kube client.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Taint;
use karpenter_azure::catalog::allocatable::{allocatable, capacity, overhead, CapacityOptions};
use karpenter_azure::catalog::embedded_sku;
use serde_json::Value;
use tokio::time::Instant;

use super::state::{Shared, VmPhase, VmRecord};

/// What the simulated kubelet registers for one VM.
#[derive(Debug, Clone, PartialEq)]
pub struct BootedVm {
    pub name: String,
    /// `azure:///subscriptions/<sub>/resourceGroups/<rg lower-cased>/providers/Microsoft.Compute/virtualMachines/<name>`
    pub provider_id: String,
    /// `topology.kubernetes.io/zone` form (`eastus-1`), None when regional.
    pub zone: Option<String>,
    pub vm_size: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Quantities such as `{"cpu":"4","memory":"...","pods":"250","ephemeral-storage":"128G"}`.
    pub capacity: BTreeMap<String, String>,
    pub allocatable: BTreeMap<String, String>,
    /// What the kubelet joins with, read from the custom data (`kubelet::TlsBootstrapKubelet` uses it);
    /// None for VMs made up by tests.
    pub join: Option<JoinVars>,
}

/// NVIDIA GPUs appear as `nvidia.com/gpu` only once the driver is in: the node image installs it when
/// the custom data says `GPU_NODE=true`; otherwise (AKSNodeClass `gpu.mode: None`, or a size AKS does not
/// know) the node has none until the user installs a driver.
pub fn drop_undriven_gpus(custom_data: &str, resources: &mut BTreeMap<String, String>) {
    if variable(custom_data, "GPU_NODE") != Some("true") {
        resources.remove("nvidia.com/gpu");
    }
}

/// The custom data's bootstrap kubeconfig inputs, each as found (None when the variable is absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinVars {
    pub kube_ca_crt: Option<String>,
    pub api_server_name: Option<String>,
    pub tls_bootstrap_token: Option<String>,
    /// `KUBERNETES_VERSION` (`1.34.4`): the version the node image's kubelet runs and reports.
    pub kubernetes_version: Option<String>,
}

/// The bootstrap variables of decoded custom data.
pub fn join_vars(text: &str) -> JoinVars {
    JoinVars {
        kube_ca_crt: variable(text, "KUBE_CA_CRT").map(str::to_string),
        api_server_name: variable(text, "API_SERVER_NAME").map(str::to_string),
        tls_bootstrap_token: variable(text, "TLS_BOOTSTRAP_TOKEN").map(str::to_string),
        kubernetes_version: variable(text, "KUBERNETES_VERSION").map(str::to_string),
    }
}

/// Receives booted VMs (and platform-removed ones). Implementations must be cheap to share.
pub trait NodeRegistrar: Send + Sync + 'static {
    /// The VM's kubelet registers its Node.
    fn register(&self, vm: BootedVm) -> BoxFuture<'static, Result<(), String>>;

    /// Azure removed the VM behind the user's back (spot eviction); the cloud node lifecycle controller
    /// would delete its Node. The default does nothing.
    fn deregister(&self, vm_name: String) -> BoxFuture<'static, Result<(), String>> {
        let _ = vm_name;
        Box::pin(async { Ok(()) })
    }
}

/// The kubelet flags the fake understands.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KubeletFlags {
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub max_pods: Option<u32>,
}

/// Decodes base64 custom data and parses the kubelet flags out of it.
pub fn parse_custom_data(custom_data_base64: &str) -> Result<KubeletFlags, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(custom_data_base64.trim())
        .map_err(|err| format!("custom data is not base64: {err}"))?;
    let text = String::from_utf8(bytes).map_err(|err| format!("custom data is not UTF-8: {err}"))?;
    parse_kubelet_flags(&text)
}

/// Parses `--node-labels`, `--register-with-taints` and `--max-pods` from decoded bootstrap text.
pub fn parse_kubelet_flags(text: &str) -> Result<KubeletFlags, String> {
    let mut flags = KubeletFlags::default();
    // The AKS node image passes KUBELET_NODE_LABELS to the kubelet as --node-labels.
    if let Some(value) =
        variable(text, "KUBELET_NODE_LABELS").or_else(|| last_flag_value(text, "--node-labels"))
    {
        flags.labels = parse_labels(value)?;
    }
    if let Some(value) = last_flag_value(text, "--register-with-taints") {
        flags.taints = parse_taints(value)?;
    }
    if let Some(value) = last_flag_value(text, "--max-pods") {
        flags.max_pods = Some(value.parse().map_err(|_| format!("--max-pods={value:?} is not a number"))?);
    }
    Ok(flags)
}

/// The value of a `NAME=value` or `NAME="value"` line of the script.
fn variable<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .rev()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
        .map(|v| v.trim_matches('"'))
}

/// The value of the last `--flag=value` (or `--flag value`) in `text`, without surrounding quotes.
fn last_flag_value<'a>(text: &'a str, flag: &str) -> Option<&'a str> {
    let mut found = None;
    let mut rest = text;
    while let Some(at) = rest.find(flag) {
        let after = &rest[at + flag.len()..];
        rest = after;
        // `--node-labels-extra` is another flag, not this one.
        let Some(sep) = after.chars().next().filter(|c| *c == '=' || *c == ' ') else { continue };
        let value = after[sep.len_utf8()..].trim_start_matches(['"', '\'']);
        let end = value
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == '\\')
            .unwrap_or(value.len());
        found = Some(&value[..end]);
    }
    found
}

fn parse_labels(value: &str) -> Result<BTreeMap<String, String>, String> {
    value
        .split(',')
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (key, val) =
                entry.split_once('=').ok_or_else(|| format!("node label {entry:?} is not key=value"))?;
            if key.is_empty() {
                return Err(format!("node label {entry:?} has an empty key"));
            }
            Ok((key.to_string(), val.to_string()))
        })
        .collect()
}

fn parse_taints(value: &str) -> Result<Vec<Taint>, String> {
    value
        .split(',')
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (key_value, effect) =
                entry.rsplit_once(':').ok_or_else(|| format!("taint {entry:?} has no effect"))?;
            if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                return Err(format!("taint {entry:?} has an unknown effect {effect:?}"));
            }
            let (key, value) = match key_value.split_once('=') {
                Some((key, value)) => (key, Some(value.to_string())),
                None => (key_value, None),
            };
            if key.is_empty() {
                return Err(format!("taint {entry:?} has an empty key"));
            }
            Ok(Taint { key: key.to_string(), value, effect: effect.to_string(), time_added: None })
        })
        .collect()
}

/// The node a VM boots into, or why it would not join.
pub fn booted_vm(vm: &VmRecord, subscription: &str, location: &str) -> Result<BootedVm, String> {
    let custom_data = vm.custom_data.as_deref().ok_or("the VM has no custom data, so no kubelet starts")?;
    let flags = parse_custom_data(custom_data)?;
    let text = base64::engine::general_purpose::STANDARD
        .decode(custom_data.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default();
    let sku = embedded_sku(&vm.vm_size).ok_or_else(|| format!("unknown VM size {}", vm.vm_size))?;
    let os_disk_gb =
        vm.document.pointer("/properties/storageProfile/osDisk/diskSizeGB").and_then(Value::as_u64);
    let options = CapacityOptions {
        max_pods: flags.max_pods,
        os_disk_size_gb: os_disk_gb.map(|gb| gb as u32),
        ..CapacityOptions::default()
    };
    let node_capacity = capacity(sku, &options);
    let node_allocatable = allocatable(&node_capacity, &overhead(sku));
    let zone = vm.zone.as_ref().map(|z| format!("{location}-{z}"));

    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), vm.name.to_ascii_lowercase()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), sku.arch.as_str().to_string()),
    ]);
    labels.extend(flags.labels);
    labels.insert("node.kubernetes.io/instance-type".to_string(), vm.vm_size.clone());
    labels.insert("topology.kubernetes.io/region".to_string(), location.to_string());
    labels.insert("topology.kubernetes.io/zone".to_string(), zone.clone().unwrap_or_else(|| "0".to_string()));

    let (mut node_capacity, mut node_allocatable) =
        (node_capacity.to_quantities(), node_allocatable.to_quantities());
    drop_undriven_gpus(&text, &mut node_capacity);
    drop_undriven_gpus(&text, &mut node_allocatable);

    Ok(BootedVm {
        name: vm.name.clone(),
        provider_id: format!(
            "azure:///subscriptions/{subscription}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachines/{}",
            vm.resource_group.to_ascii_lowercase(),
            vm.name
        ),
        zone,
        vm_size: vm.vm_size.clone(),
        labels,
        taints: flags.taints,
        capacity: node_capacity,
        allocatable: node_allocatable,
        join: Some(join_vars(&text)),
    })
}

/// Boots the VM at `at` if it is still the same VM (`vm_id`) and has succeeded by then.
pub fn schedule(shared: Arc<Shared>, key: (String, String), vm_id: String, at: Instant) {
    let Some(registrar) = shared.config.registrar.clone() else { return };
    tokio::spawn(async move {
        tokio::time::sleep_until(at).await;
        let booted = {
            let state = shared.lock();
            match state.vms.get(&key) {
                Some(vm) if vm.vm_id == vm_id && vm.phase == VmPhase::Succeeded => {
                    Some(booted_vm(vm, &shared.config.subscription_id, &shared.config.location))
                }
                _ => None,
            }
        };
        match booted {
            Some(Ok(vm)) => {
                let name = vm.name.clone();
                if let Err(err) = registrar.register(vm).await {
                    eprintln!("fake-arm: registering node {name} failed: {err}");
                }
            }
            Some(Err(reason)) => eprintln!("fake-arm: VM {} does not join the cluster: {reason}", key.1),
            None => {}
        }
    });
}
