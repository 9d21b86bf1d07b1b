//! `AKSNodeClass` (karpenter.azure.com/v1beta1, cluster-scoped): how the Azure side of a node is
//! configured (subnet, OS disk, image family, kubelet, security, DNS, GPU driver, OS settings).
//! Field-for-field compatible with the upstream Azure provider; the sysctl block is in
//! [`crate::apis::sysctls`].

use std::collections::BTreeMap;

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::apis::common::NodeSelectorRequirementWithMinValues;
use crate::apis::conditions::Condition;
use crate::apis::hash::{self, hash_value, HashError};
use crate::apis::sysctls::SysctlConfiguration;
use crate::apis::validation::{self, DURATION_PATTERN, QUANTITY_PATTERN};

/// Upstream default OS disk size in GB.
pub const DEFAULT_OS_DISK_SIZE_GB: i32 = 128;

/// Case-insensitive ARM ID of a subnet, as upstream validates it.
pub const SUBNET_ID_PATTERN: &str = r"(?i)^\/subscriptions\/[^\/]+\/resourceGroups\/[a-zA-Z0-9_\-().]{0,89}[a-zA-Z0-9_\-()]\/providers\/Microsoft\.Network\/virtualNetworks\/[^\/]+\/subnets\/[^\/]+$";

const TRUSTED_LAUNCH: &str = "(has(self.security) && has(self.security.trustedLaunch) && ((has(self.security.trustedLaunch.vtpm) && self.security.trustedLaunch.vtpm) || (has(self.security.trustedLaunch.secureBoot) && self.security.trustedLaunch.secureBoot)))";

/// The desired state of an AKSNodeClass.
// Each `printcolumn(...)` is its own column; clippy mistakes the repeated keys for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "karpenter.azure.com",
    version = "v1beta1",
    kind = "AKSNodeClass",
    plural = "aksnodeclasses",
    status = "AKSNodeClassStatus",
    shortname = "aksnc",
    shortname = "aksncs",
    category = "karpenter",
    derive = "PartialEq",
    category = "nap",
    doc = "AKSNodeClass is the Schema for the AKSNodeClass API: how the Azure VMs behind nodes are configured",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "ImageFamily", type_ = "string", json_path = ".spec.imageFamily", priority = 1)
)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!(has(self.fipsMode) && self.fipsMode == 'FIPS' && has(self.imageFamily) && self.imageFamily == 'Ubuntu2404')",
     "message": "fipsMode FIPS is not supported with imageFamily Ubuntu2404; use Ubuntu, Ubuntu2204 (with trusted launch) or AzureLinux"},
    {"rule": format!("!(has(self.fipsMode) && self.fipsMode == 'FIPS' && has(self.imageFamily) && self.imageFamily == 'Ubuntu2204') || {TRUSTED_LAUNCH}"),
     "message": "fipsMode FIPS with imageFamily Ubuntu2204 needs trusted launch: set security.trustedLaunch.vtpm or security.trustedLaunch.secureBoot to true"},
    {"rule": format!("!(has(self.fipsMode) && self.fipsMode == 'FIPS' && {TRUSTED_LAUNCH}) || !has(self.imageFamily) || self.imageFamily in ['Ubuntu', 'Ubuntu2204']"),
     "message": "fipsMode FIPS with trusted launch is only supported for imageFamily Ubuntu or Ubuntu2204"},
    {"rule": "!(has(self.linuxOSConfig) && has(self.linuxOSConfig.swapFileSize)) || !has(self.kubelet) || !has(self.kubelet.failSwapOn) || !self.kubelet.failSwapOn",
     "message": "kubelet.failSwapOn must be false when linuxOSConfig.swapFileSize is set"}
]))]
#[serde(rename_all = "camelCase")]
pub struct AKSNodeClassSpec {
    /// The subnet for the nodes' NICs; defaults to the controller's --vnet-subnet-id.
    #[serde(default, rename = "vnetSubnetID", skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(SUBNET_ID_PATTERN))]
    pub vnet_subnet_id: Option<String>,
    /// The size of the OS disk in GB, 30 to 2048.
    #[serde(default = "default_os_disk_size_gb", rename = "osDiskSizeGB")]
    #[schemars(range(min = 30, max = 2048))]
    pub os_disk_size_gb: Option<i32>,
    /// The image family: Ubuntu, Ubuntu2204, Ubuntu2404 or AzureLinux.
    #[serde(default = "default_image_family")]
    pub image_family: Option<ImageFamily>,
    /// FIPS or Disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fips_mode: Option<FipsMode>,
    /// Tags put on the Azure resources of each node (not a cause of drift).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = validation::azure_tags)]
    pub tags: BTreeMap<String, String>,
    /// Kubelet settings for the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// The most pods per node, 10 to 250; the default depends on the network plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 250))]
    pub max_pods: Option<i32>,
    /// Host encryption and trusted launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<Security>,
    /// The per-node local DNS cache and its overrides.
    #[serde(default, rename = "localDNS", skip_serializing_if = "Option::is_none")]
    pub local_dns: Option<LocalDns>,
    /// GPU driver installation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Gpu>,
    /// On-demand streaming of container images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_streaming: Option<ArtifactStreaming>,
    /// Linux OS settings: swap, transparent huge pages, sysctls.
    #[serde(default, rename = "linuxOSConfig", skip_serializing_if = "Option::is_none")]
    pub linux_os_config: Option<LinuxOsConfig>,
}

fn default_os_disk_size_gb() -> Option<i32> {
    Some(DEFAULT_OS_DISK_SIZE_GB)
}

fn default_image_family() -> Option<ImageFamily> {
    Some(ImageFamily::Ubuntu)
}

/// The node OS image family.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, JsonSchema,
)]
pub enum ImageFamily {
    /// Ubuntu 22.04 below Kubernetes 1.34, Ubuntu 24.04 from 1.34.
    #[default]
    Ubuntu,
    Ubuntu2204,
    Ubuntu2404,
    AzureLinux,
}

impl ImageFamily {
    /// The name as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageFamily::Ubuntu => "Ubuntu",
            ImageFamily::Ubuntu2204 => "Ubuntu2204",
            ImageFamily::Ubuntu2404 => "Ubuntu2404",
            ImageFamily::AzureLinux => "AzureLinux",
        }
    }
}

/// FIPS-compliant node images.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum FipsMode {
    #[serde(rename = "FIPS")]
    Fips,
    Disabled,
}

/// Kubelet settings (a subset of the upstream KubeletConfiguration, as AKS allows).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.imageGCHighThresholdPercent) || !has(self.imageGCLowThresholdPercent) || self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent",
     "message": "kubelet.imageGCHighThresholdPercent must be greater than kubelet.imageGCLowThresholdPercent"}
]))]
pub struct KubeletConfiguration {
    /// none or static.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["none", "static"], "default" = "none"))]
    pub cpu_manager_policy: Option<String>,
    /// Enforce CPU limits with CFS quota; defaults to true.
    #[serde(default, rename = "cpuCFSQuota", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub cpu_cfs_quota: Option<bool>,
    /// The CFS quota period such as 100ms.
    #[serde(default, rename = "cpuCFSQuotaPeriod", skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"), extend("default" = "100ms"))]
    pub cpu_cfs_quota_period: Option<String>,
    /// Disk usage percent above which image garbage collection always runs, 0 to 100.
    #[serde(default, rename = "imageGCHighThresholdPercent", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percent below which image garbage collection never runs, 0 to 100.
    #[serde(default, rename = "imageGCLowThresholdPercent", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// restricted, best-effort, none or single-numa-node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["restricted", "best-effort", "none", "single-numa-node"], "default" = "none"))]
    pub topology_manager_policy: Option<String>,
    /// Unsafe sysctls or patterns (ending in `*`) pods may set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Size at which a container log is rotated, such as 50Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^\d+(E|P|T|G|M|K|Ei|Pi|Ti|Gi|Mi|Ki)$"), extend("default" = "50Mi"))]
    pub container_log_max_size: Option<String>,
    /// How many rotated log files to keep per container, at least 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2), extend("default" = 5))]
    pub container_log_max_files: Option<i32>,
    /// The most process IDs in one pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_pids_limit: Option<i64>,
    /// Whether the kubelet refuses to start with swap on; must be false when a swap file is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_swap_on: Option<bool>,
}

/// Security settings of the nodes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Security {
    /// Encrypt the temp and cache disks on the host; only sizes that support it are chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_at_host: Option<bool>,
    /// Trusted launch; either setting enables it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_launch: Option<TrustedLaunch>,
}

/// Trusted launch settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrustedLaunch {
    /// A virtual TPM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtpm: Option<bool>,
    /// UEFI secure boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<bool>,
}

/// GPU driver handling.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct Gpu {
    /// Driver: AKS installs the NVIDIA driver (driver-capable sizes only); None: any GPU size, no driver.
    #[serde(default)]
    pub mode: GpuMode,
}

/// How GPU drivers are provided.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum GpuMode {
    #[default]
    Driver,
    None,
}

/// Artifact streaming settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct ArtifactStreaming {
    /// Stream container images on demand; arm64 sizes are left out when true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Linux OS settings of the nodes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinuxOsConfig {
    /// The size of a swap file to create, such as 2Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(QUANTITY_PATTERN))]
    pub swap_file_size: Option<String>,
    /// always, madvise or never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["always", "madvise", "never"]))]
    pub transparent_huge_page_enabled: Option<String>,
    /// always, defer, defer+madvise, madvise or never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["always", "defer", "defer+madvise", "madvise", "never"]))]
    pub transparent_huge_page_defrag: Option<String>,
    /// Kernel parameters within the ranges AKS allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysctls: Option<SysctlConfiguration>,
}

/// The per-node local DNS cache.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalDns {
    /// Preferred, Required or Disabled.
    pub mode: LocalDnsMode,
    /// Overrides for traffic from pods with dnsPolicy Default and from the kubelet.
    #[serde(default, rename = "vnetDNSOverrides", skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["zone"],
        "x-kubernetes-validations" = [
            {"rule": "['.', 'cluster.local'].all(z, self.exists(x, x.zone == z))", "message": "vnetDNSOverrides must contain the zones '.' and 'cluster.local'"},
            {"rule": "!self.exists(x, x.zone == '.' && x.forwardDestination == 'ClusterCoreDNS')", "message": "vnetDNSOverrides may not forward the root zone '.' to ClusterCoreDNS; use VnetDNS"},
            {"rule": "!self.exists(x, x.zone != '.' && !x.zone.endsWith('cluster.local') && x.forwardDestination == 'ClusterCoreDNS')", "message": "vnetDNSOverrides may not forward external domains to ClusterCoreDNS; use VnetDNS"}
        ]
    ))]
    pub vnet_dns_overrides: Vec<ZoneOverride>,
    /// Overrides for traffic from pods with dnsPolicy ClusterFirst.
    #[serde(default, rename = "kubeDNSOverrides", skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["zone"],
        "x-kubernetes-validations" = [
            {"rule": "['.', 'cluster.local'].all(z, self.exists(x, x.zone == z))", "message": "kubeDNSOverrides must contain the zones '.' and 'cluster.local'"}
        ]
    ))]
    pub kube_dns_overrides: Vec<ZoneOverride>,
}

/// Whether local DNS is used.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum LocalDnsMode {
    Preferred,
    Required,
    Disabled,
}

/// DNS handling for one zone.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!(self.zone.endsWith('cluster.local') && self.forwardDestination == 'VnetDNS')", "message": "'cluster.local' may not be forwarded to VnetDNS; use ClusterCoreDNS"},
    {"rule": "!(self.serveStale == 'Verify' && self.protocol == 'ForceTCP')", "message": "serveStale Verify cannot be used with protocol ForceTCP; use Immediate or Disable"}
]))]
pub struct ZoneOverride {
    /// The DNS zone, such as '.' or 'cluster.local'.
    #[schemars(length(min = 1, max = 254), pattern(r"^(\.|[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?)*\.?)$"))]
    pub zone: String,
    /// Error or Log.
    #[schemars(extend("enum" = ["Error", "Log"]))]
    pub query_logging: String,
    /// PreferUDP or ForceTCP.
    #[schemars(extend("enum" = ["PreferUDP", "ForceTCP"]))]
    pub protocol: String,
    /// ClusterCoreDNS or VnetDNS.
    #[schemars(extend("enum" = ["ClusterCoreDNS", "VnetDNS"]))]
    pub forward_destination: String,
    /// Sequential, RoundRobin or Random.
    #[schemars(extend("enum" = ["Sequential", "RoundRobin", "Random"]))]
    pub forward_policy: String,
    /// The most concurrent queries.
    #[schemars(range(min = 0))]
    pub max_concurrent: i32,
    /// The cache's maximum TTL, such as 1h.
    #[schemars(pattern(DURATION_PATTERN))]
    pub cache_duration: String,
    /// How long stale entries may be served, such as 1h.
    #[schemars(pattern(DURATION_PATTERN))]
    pub serve_stale_duration: String,
    /// Verify, Immediate or Disable.
    #[schemars(extend("enum" = ["Verify", "Immediate", "Disable"]))]
    pub serve_stale: String,
}

/// The observed state of an AKSNodeClass.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AKSNodeClassStatus {
    /// Resolved images in priority order, each with the requirements of the sizes it fits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<NodeImage>,
    /// The Kubernetes version of the cluster the nodes join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Ready, ImagesReady, KubernetesVersionReady, SubnetsReady, ValidationSucceeded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// An OS image and the sizes it may run on.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct NodeImage {
    /// The image's ARM or gallery ID.
    pub id: String,
    /// The requirements (arch, Hyper-V generation) a size must meet to use the image.
    #[serde(default)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
}

/// The format of `karpenter.azure.com/aksnodeclass-hash`; our own for the same reason (upstream
/// provider `pkg/apis/v1beta1/aksnodeclass.go` is at "v3" with a hashstructure hash).
pub const NODECLASS_HASH_VERSION: &str = "karpenter-azure-v1";

impl AKSNodeClass {
    /// The AKSNodeClass's hash: its spec without `tags`, which are reconciled on the VMs in place
    /// rather than by replacing nodes (upstream provider `AKSNodeClass.Hash`, drift.go).
    pub fn hash(&self) -> Result<String, HashError> {
        let object = format!("AKSNodeClass {}", self.metadata.name.as_deref().unwrap_or_default());
        let mut spec = hash::to_value(&self.spec, &object)?;
        if let Some(spec) = spec.as_object_mut() {
            spec.remove("tags");
        }
        Ok(hash_value(&spec))
    }
}
