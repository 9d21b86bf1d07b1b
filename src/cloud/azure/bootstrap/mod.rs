//! The custom data that joins a VM to the cluster (ARM `osProfile.customData`, base64): the Azure
//! provider's self-hosted `aksscriptless` contract with the AKS node image.
//!
//! The node image (VHD) ships `/opt/azure/containers/provision_start.sh`, which reads about a hundred
//! shell variables. The custom data sets them all and starts it, as the Azure provider's
//! pkg/providers/imagefamily/bootstrap/cse_cmd.sh.gtpl does, with the values of its aksbootstrap.go and
//! staticvalues.go. `tests/oracle/bootstrap_oracle.rs` compares this renderer, variable by variable, with
//! upstream's own generator (hack/aks-bootstrap.sh).
//!
//! - [`kubelet`]: `KUBELET_FLAGS` and `KUBELET_NODE_LABELS`;
//! - [`labels`]: the `kubernetes.azure.com` labels of a node;
//! - [`oscontent`]: containerd's config, the sysctls and `linuxOSConfig`;
//! - [`gpu`]: which sizes install the NVIDIA driver, and which driver;
//! - [`template`]: the variables in the template's order.
//!
//! The bootstrap token is a secret: it is only ever inside the rendered script, never in `Debug` output.

use std::collections::BTreeMap;

use crate::apis::aksnodeclass::{AKSNodeClass, GpuMode, ImageFamily, LinuxOsConfig, LocalDnsMode};
use crate::apis::common::Taint;
use crate::catalog::Arch;
use crate::cloud::KubeletSettings;

pub mod gpu;
pub mod kubelet;
pub mod labels;
pub mod oscontent;
pub mod template;

/// Secrets (the bootstrap token) use the settings' redacting type.
pub use crate::operator::Secret;
pub use kubelet::{kubelet_config_flags, kubelet_may_set, node_labels_flag, register_taints_flag};

/// Cluster-wide bootstrap inputs (operator settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapSettings {
    /// `CLUSTER_ENDPOINT`, the API server URL; its host is `API_SERVER_NAME`.
    pub cluster_endpoint: String,
    /// `KUBELET_BOOTSTRAP_TOKEN` → `TLS_BOOTSTRAP_TOKEN`.
    pub bootstrap_token: Secret,
    /// `KUBE_CA_CRT`: the cluster CA bundle (PEM), base64.
    pub ca_bundle_base64: String,
    /// `NETWORK_PLUGIN` as the node image expects it: `none` under overlay, Cilium node subnet or
    /// bring-your-own CNI, else `azure` (launchtemplate.go getAgentbakerNetworkPlugin).
    pub network_plugin: String,
    /// `NETWORK_POLICY`: "", `cilium` or `calico`.
    pub network_policy: String,
    /// Azure CNI overlay (`NETWORK_PLUGIN=azure`, `NETWORK_PLUGIN_MODE=overlay`).
    pub overlay: bool,
    /// `NETWORK_DATAPLANE=cilium`.
    pub cilium_dataplane: bool,
    /// `DNS_SERVICE_IP`; None keeps AKS's default 10.0.0.10.
    pub dns_service_ip: Option<String>,
    /// `KUBELET_IDENTITY_CLIENT_ID` → `USER_ASSIGNED_IDENTITY_ID` and its label.
    pub kubelet_identity_client_id: String,
    /// `VNET_GUID`, for the `nodenetwork-vnetguid` label under overlay.
    pub vnet_guid: String,
    pub tenant_id: String,
    pub subscription_id: String,
    pub location: String,
    /// `AZURE_NODE_RESOURCE_GROUP` → `RESOURCE_GROUP` and the `kubernetes.azure.com/cluster` label.
    pub node_resource_group: String,
}

impl BootstrapSettings {
    /// Settings for a cluster on Azure CNI without overlay and without an identity, DNS or VNet
    /// override; callers set the rest with struct update syntax.
    pub fn new(
        cluster_endpoint: impl Into<String>,
        bootstrap_token: Secret,
        ca_bundle_base64: impl Into<String>,
    ) -> Self {
        BootstrapSettings {
            cluster_endpoint: cluster_endpoint.into(),
            bootstrap_token,
            ca_bundle_base64: ca_bundle_base64.into(),
            network_plugin: "azure".into(),
            network_policy: String::new(),
            overlay: false,
            cilium_dataplane: false,
            dns_service_ip: None,
            kubelet_identity_client_id: String::new(),
            vnet_guid: String::new(),
            tenant_id: String::new(),
            subscription_id: String::new(),
            location: String::new(),
            node_resource_group: String::new(),
        }
    }
}

/// What an AKSNodeClass decides about its nodes' bootstrap, resolved by the controller.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeClassBootstrap {
    pub image_family: ImageFamily,
    pub fips: bool,
    /// `status.kubernetesVersion`, the API server's version (`1.33.2`).
    pub kubernetes_version: String,
    /// `gpu.mode: Driver` (the default): AKS installs the NVIDIA driver on NVIDIA sizes.
    pub gpu_driver: bool,
    pub artifact_streaming: bool,
    pub local_dns: Option<LocalDnsMode>,
    pub linux_os_config: Option<LinuxOsConfig>,
}

impl NodeClassBootstrap {
    pub fn from_class(class: &AKSNodeClass) -> NodeClassBootstrap {
        let spec = &class.spec;
        NodeClassBootstrap {
            image_family: spec.image_family.unwrap_or_default(),
            fips: spec.fips_mode == Some(crate::apis::aksnodeclass::FipsMode::Fips),
            kubernetes_version: class
                .status
                .as_ref()
                .and_then(|s| s.kubernetes_version.clone())
                .unwrap_or_default(),
            gpu_driver: spec.gpu.as_ref().is_none_or(|g| g.mode == GpuMode::Driver),
            artifact_streaming: spec.artifact_streaming.as_ref().and_then(|a| a.enabled).unwrap_or(false),
            local_dns: spec.local_dns.as_ref().map(|l| l.mode),
            linux_os_config: spec.linux_os_config.clone(),
        }
    }
}

/// Per-node inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeBootstrap<'a> {
    pub vm_size: &'a str,
    pub arch: Arch,
    /// The NIC's subnet (`SUBNET`, `VIRTUAL_NETWORK`, `VIRTUAL_NETWORK_RESOURCE_GROUP`).
    pub subnet_id: &'a str,
    /// The cluster NSG's name (`aks-agentpool-<id>-nsg`), when one was found; the route table is named
    /// after the same id.
    pub network_security_group: Option<&'a str>,
    /// Every label of the node; only those the kubelet may set are rendered.
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
    pub startup_taints: &'a [Taint],
    pub kubelet: &'a KubeletSettings,
    pub class: &'a NodeClassBootstrap,
}

/// Why no custom data could be rendered for a node. Each message names the setting or field to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootstrapError {
    #[error("AKSNodeClass status.kubernetesVersion {0:?} is not a version like 1.33.2; the node image needs it as KUBERNETES_VERSION (wait for the class to be Ready)")]
    KubernetesVersion(String),
    #[error(transparent)]
    OsConfig(#[from] oscontent::OsConfigError),
    #[error("AKSNodeClass spec.localDNS.mode Required is not supported by the self-hosted (aksscriptless) bootstrap, which cannot configure local DNS; use Preferred or Disabled")]
    LocalDnsRequired,
    #[error("{variable} would contain {value:?}, which cannot be written into the bootstrap script; fix {source_setting}")]
    UnsafeValue { variable: &'static str, value: String, source_setting: &'static str },
}

impl BootstrapError {
    /// Static category for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            BootstrapError::KubernetesVersion(_) => "KubernetesVersionUnknown",
            BootstrapError::OsConfig(_) => "InvalidLinuxOSConfig",
            BootstrapError::LocalDnsRequired => "LocalDNSNotSupported",
            BootstrapError::UnsafeValue { .. } => "InvalidBootstrapValue",
        }
    }
}

/// Why the bootstrap cannot serve a class whatever the node, or None: checked when the class's status
/// is written, so such a class is not Ready and launches nothing.
pub fn class_problem(class: &NodeClassBootstrap) -> Option<BootstrapError> {
    if class.local_dns == Some(LocalDnsMode::Required) {
        return Some(BootstrapError::LocalDnsRequired);
    }
    oscontent::os_settings(class.linux_os_config.as_ref()).err().map(BootstrapError::from)
}

/// The bootstrap script, in clear text (tests and golden files use this form).
pub fn render_script(
    settings: &BootstrapSettings,
    node: &NodeBootstrap<'_>,
) -> Result<String, BootstrapError> {
    template::render(&template::variables(settings, node)?)
}

/// The script base64-encoded, as `osProfile.customData` wants it.
pub fn render_custom_data(
    settings: &BootstrapSettings,
    node: &NodeBootstrap<'_>,
) -> Result<String, BootstrapError> {
    Ok(azure_core::base64::encode(render_script(settings, node)?))
}

#[cfg(test)]
pub(crate) mod tests;
