//! The `kubernetes.azure.com` labels an AKS node carries, as the Azure provider sets them at bootstrap
//! (pkg/providers/labels/labels.go Get). AKS's own DaemonSets select on them: the Cilium agent on
//! `ebpf-dataplane=cilium`, Azure CNI overlay on `azure-cni-overlay` and `podnetwork-type`, so a node
//! without them never gets a working pod network.

use std::collections::BTreeMap;

use super::{BootstrapSettings, NodeClassBootstrap};
use crate::apis::aksnodeclass::{ImageFamily, LocalDnsMode};
use crate::catalog::Arch;
use crate::cloud::azure::imagefamily::{distro, minor_version, Distro};
use crate::cloud::azure::subnet::SubnetId;
use crate::model::labels;

pub const LABEL_OS_SKU_REQUESTED: &str = "kubernetes.azure.com/os-sku-requested";
pub const LABEL_OS_SKU_EFFECTIVE: &str = "kubernetes.azure.com/os-sku-effective";
pub use crate::model::labels::LABEL_KUBELET_IDENTITY;
pub const LABEL_EBPF_DATAPLANE: &str = "kubernetes.azure.com/ebpf-dataplane";
pub const LABEL_AZURE_CNI_OVERLAY: &str = "kubernetes.azure.com/azure-cni-overlay";
pub const LABEL_PODNETWORK_TYPE: &str = "kubernetes.azure.com/podnetwork-type";
pub const LABEL_NETWORK_SUBNET: &str = "kubernetes.azure.com/network-subnet";
pub const LABEL_VNET_GUID: &str = "kubernetes.azure.com/nodenetwork-vnetguid";
pub const LABEL_STATELESS_CNI: &str = "kubernetes.azure.com/network-stateless-cni";
pub const LABEL_LOCALDNS_STATE: &str = "kubernetes.azure.com/localdns-state";
pub const LABEL_ARTIFACT_STREAMING: &str = "kubernetes.azure.com/artifactstreaming-enabled";

/// Stateless CNI starts with Kubernetes 1.34 (labels.go).
const STATELESS_CNI_FROM_MINOR: u64 = 34;

/// The AKS labels of a node of `class` on a size of `arch` in `subnet_id`. The claim's own labels are
/// laid over these by the caller, as upstream's launch template does.
pub fn aks_labels(
    settings: &BootstrapSettings,
    class: &NodeClassBootstrap,
    arch: Arch,
    subnet_id: &str,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut set = |k: &str, v: &str| out.insert(k.to_string(), v.to_string());
    set(labels::LABEL_AKS_ROLE, "agent");
    set(labels::LABEL_AKS_CLUSTER, &cluster_label(&settings.node_resource_group));
    set(LABEL_KUBELET_IDENTITY, &settings.kubelet_identity_client_id);
    set(labels::LABEL_AKS_MODE, "user");
    // Core Karpenter must not copy the claim's taints onto the Node: startup taints would race
    // (karpenter#1772).
    set(labels::LABEL_DO_NOT_SYNC_TAINTS, "true");
    set(labels::LABEL_AKS_OS_SKU, os_sku(class.image_family));
    if class.fips {
        set(labels::LABEL_AKS_FIPS_ENABLED, "true");
    }
    set(LABEL_OS_SKU_REQUESTED, image_family_name(class.image_family));
    set(LABEL_OS_SKU_EFFECTIVE, effective_name(distro(class.image_family, &class.kubernetes_version)));
    if settings.overlay {
        if let Ok(subnet) = SubnetId::parse(subnet_id) {
            set(LABEL_NETWORK_SUBNET, &subnet.subnet);
        }
        set(LABEL_VNET_GUID, &settings.vnet_guid);
        set(LABEL_AZURE_CNI_OVERLAY, "true");
        set(LABEL_PODNETWORK_TYPE, "overlay");
        let stateless =
            minor_version(&class.kubernetes_version).is_some_and(|m| m >= STATELESS_CNI_FROM_MINOR);
        set(LABEL_STATELESS_CNI, if stateless { "true" } else { "false" });
    }
    if settings.cilium_dataplane {
        set(LABEL_EBPF_DATAPLANE, "cilium");
    }
    // The scriptless bootstrap cannot configure local DNS, so a node of a Preferred class runs without
    // it (a Required class is refused before rendering).
    let local_dns = matches!(class.local_dns, Some(LocalDnsMode::Required));
    set(LABEL_LOCALDNS_STATE, if local_dns { "enabled" } else { "disabled" });
    // aksnodeclass.go IsArtifactStreamingEnabled: never on arm64.
    if class.artifact_streaming && arch != Arch::Arm64 {
        set(LABEL_ARTIFACT_STREAMING, "true");
    }
    out
}

/// The labels every node of a class carries whatever its size, as instance type requirements
/// (instancetype.go computeRequirements: os-sku, fips_enabled only when FIPS; the mode is the pool's).
pub fn class_labels(class: &NodeClassBootstrap) -> BTreeMap<String, String> {
    // No AKS mode: every size can be a system or a user node, so the pool decides it.
    let mut out =
        BTreeMap::from([(labels::LABEL_AKS_OS_SKU.to_string(), os_sku(class.image_family).to_string())]);
    if class.fips {
        out.insert(labels::LABEL_AKS_FIPS_ENABLED.to_string(), "true".to_string());
    }
    out
}

/// The `kubernetes.azure.com/os-sku` value (v1beta1 labels.go imageFamilyToOSSKU).
pub fn os_sku(family: ImageFamily) -> &'static str {
    match family {
        ImageFamily::Ubuntu | ImageFamily::Ubuntu2204 | ImageFamily::Ubuntu2404 => "Ubuntu",
        ImageFamily::AzureLinux => "AzureLinux",
    }
}

fn image_family_name(family: ImageFamily) -> &'static str {
    match family {
        ImageFamily::Ubuntu => "Ubuntu",
        ImageFamily::Ubuntu2204 => "Ubuntu2204",
        ImageFamily::Ubuntu2404 => "Ubuntu2404",
        ImageFamily::AzureLinux => "AzureLinux",
    }
}

/// The image family's Name() upstream (imagefamily/*.go).
fn effective_name(distro: Distro) -> &'static str {
    match distro {
        Distro::Ubuntu2204 => "Ubuntu2204",
        Distro::Ubuntu2404 => "Ubuntu2404",
        Distro::AzureLinux2 => "AzureLinux2",
        Distro::AzureLinux3 => "AzureLinux3",
    }
}

/// `kubernetes.azure.com/cluster`: the node resource group made a valid label value, as AgentBaker
/// does (parentheses become dashes, at most 63 characters, a trailing `-`, `_` or `.` gets a `z`).
pub fn cluster_label(node_resource_group: &str) -> String {
    let mut value: String = node_resource_group.replace(['(', ')'], "-");
    value.truncate(63);
    if value.ends_with(['-', '_', '.']) {
        if value.len() > 62 {
            value.pop();
        }
        value.push('z');
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::azure::bootstrap::tests::settings;

    #[test]
    fn cluster_label_is_a_valid_label_value() {
        assert_eq!(cluster_label("MC_rg_cluster_eastus"), "MC_rg_cluster_eastus");
        assert_eq!(cluster_label("MC_rg(x)"), "MC_rg-x-z");
        let long = "a".repeat(62) + "_b";
        assert_eq!(cluster_label(&long), "a".repeat(62) + "z");
    }

    #[test]
    fn overlay_and_cilium_labels_select_the_network_daemonsets() {
        let class =
            NodeClassBootstrap { kubernetes_version: "1.34.1".into(), ..NodeClassBootstrap::default() };
        let s = settings();
        let subnet = "/subscriptions/x/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes";
        let l = aks_labels(&s, &class, Arch::Amd64, subnet);
        assert_eq!(l[LABEL_EBPF_DATAPLANE], "cilium");
        assert_eq!(l[LABEL_AZURE_CNI_OVERLAY], "true");
        assert_eq!(l[LABEL_PODNETWORK_TYPE], "overlay");
        assert_eq!(l[LABEL_NETWORK_SUBNET], "nodes");
        assert_eq!(l[LABEL_STATELESS_CNI], "true");
        assert_eq!(l[LABEL_OS_SKU_EFFECTIVE], "Ubuntu2404");
        assert_eq!(l[labels::LABEL_AKS_MODE], "user");
        let older = NodeClassBootstrap { kubernetes_version: "1.33.2".into(), ..class.clone() };
        assert_eq!(aks_labels(&s, &older, Arch::Amd64, subnet)[LABEL_STATELESS_CNI], "false");
        let node_subnet = BootstrapSettings { overlay: false, cilium_dataplane: false, ..s };
        let l = aks_labels(&node_subnet, &class, Arch::Amd64, subnet);
        assert!(!l.contains_key(LABEL_AZURE_CNI_OVERLAY) && !l.contains_key(LABEL_EBPF_DATAPLANE));
    }

    #[test]
    fn node_class_fields_show_on_the_node() {
        let class = NodeClassBootstrap {
            image_family: ImageFamily::AzureLinux,
            kubernetes_version: "1.33.0".into(),
            fips: true,
            artifact_streaming: true,
            ..NodeClassBootstrap::default()
        };
        let l = aks_labels(&settings(), &class, Arch::Amd64, "");
        assert_eq!(l[labels::LABEL_AKS_OS_SKU], "AzureLinux");
        assert_eq!(l[LABEL_OS_SKU_REQUESTED], "AzureLinux");
        assert_eq!(l[LABEL_OS_SKU_EFFECTIVE], "AzureLinux3");
        assert_eq!(l[labels::LABEL_AKS_FIPS_ENABLED], "true");
        assert_eq!(l[LABEL_ARTIFACT_STREAMING], "true");
        assert!(!aks_labels(&settings(), &class, Arch::Arm64, "").contains_key(LABEL_ARTIFACT_STREAMING));
    }
}
