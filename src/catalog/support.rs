//! Which sizes AKS nodes can run, and for every size left out, why (upstream provider
//! `pkg/providers/instancetype/instancetypes.go` `isSupported` and `isInstanceTypeSupportedByFilters`,
//! `pkg/utils/gpu.go` with its `supported-gpus.yaml`, kept in sync with AgentBaker).
//!
//! - For every class: a size with a GPU that AKS does not know cannot initialize (no driver, no device
//!   plugin image), so it is never offered. NCC40ads_H100_v5, NG32ads_V620 and NV32as_v4 are such.
//! - Per AKSNodeClass: a GPU size whose GPU the image family's OS does not support; under
//!   `gpu.mode: Driver` (the default) a GPU size AKS installs no driver for (the AMD ones); with
//!   `artifactStreaming.enabled: true`, arm64 sizes (artifact streaming has no arm64 build); with LocalDNS
//!   on (`localDNS.mode: Required`), sizes with fewer than 4 vCPUs (LocalDNS's own minimum).

use std::fmt;

use crate::apis::aksnodeclass::{GpuMode, ImageFamily, LocalDnsMode};
use crate::apis::AKSNodeClass;

use super::sku::{Arch, SkuRecord};

/// The supported-GPU list, one `<size> <vendor> <os>...` per line.
const SUPPORTED_GPUS: &str = include_str!("data/supported-gpus.txt");

/// LocalDNS needs 4 vCPUs (upstream `isInstanceTypeSupportedByLocalDNS`; its 256 MB memory minimum is
/// below every size AKS offers).
const LOCAL_DNS_MIN_VCPUS: u32 = 4;

/// A size name as the list keys it: lower case, without the `_promo` suffix.
pub fn normalize_size(size: &str) -> String {
    let lower = size.to_ascii_lowercase();
    lower.strip_suffix("_promo").unwrap_or(&lower).to_string()
}

fn supported_entry(size: &str) -> Option<(&'static str, Vec<&'static str>)> {
    let size = normalize_size(size);
    SUPPORTED_GPUS.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next()? == size).then(|| (words.next().unwrap_or_default(), words.collect()))
    })
}

/// Whether AKS knows this size's GPU (gpu.go `IsGPUSKU`).
pub fn is_known_gpu_size(size: &str) -> bool {
    supported_entry(size).is_some()
}

/// Whether AKS installs the NVIDIA driver on this size (gpu.go `IsNvidiaEnabledSKU`).
pub fn is_nvidia_size(size: &str) -> bool {
    supported_entry(size).is_some_and(|(vendor, _)| vendor == "nvidia")
}

/// Whether the size's GPU is supported on the node OS (`ubuntu`, `azurelinux`, `azurelinux3`).
pub fn supported_on_os(size: &str, os: &str) -> bool {
    supported_entry(size).is_some_and(|(_, oses)| oses.contains(&os))
}

/// Why a size is not offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftOut {
    /// It has a GPU AKS does not know.
    UnsupportedGpu,
    /// Its GPU is not supported on the image family's OS.
    GpuNotOnImageFamily(ImageFamily),
    /// `gpu.mode: Driver` and AKS installs no driver for it.
    NoGpuDriver,
    /// `artifactStreaming.enabled: true` and it is arm64.
    Arm64ArtifactStreaming,
    /// LocalDNS is on and the size has fewer than 4 vCPUs.
    TooSmallForLocalDns,
}

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeftOut::UnsupportedGpu => write!(f, "its GPU is not one AKS supports"),
            LeftOut::GpuNotOnImageFamily(family) => {
                write!(f, "its GPU is not supported on imageFamily {}", family.as_str())
            }
            LeftOut::NoGpuDriver => write!(
                f,
                "gpu.mode is Driver and AKS installs no driver for its GPU (gpu.mode: None offers it without one)"
            ),
            LeftOut::Arm64ArtifactStreaming => {
                write!(f, "artifactStreaming is enabled and artifact streaming has no arm64 build")
            }
            LeftOut::TooSmallForLocalDns => {
                write!(f, "localDNS is Required and LocalDNS needs at least {LOCAL_DNS_MIN_VCPUS} vCPUs")
            }
        }
    }
}

/// Whether the size has a GPU at all (whole or partial), as the SKU's `GPUs` capability says.
fn has_gpu(sku: &SkuRecord) -> bool {
    sku.gpu_count > 0 || sku.gpu_fraction.is_some()
}

/// Why no class may offer the size; `None` when its GPU (if any) is one AKS knows.
pub fn global_reason(sku: &SkuRecord) -> Option<LeftOut> {
    (has_gpu(sku) && !is_known_gpu_size(&sku.name)).then_some(LeftOut::UnsupportedGpu)
}

/// What of an AKSNodeClass decides which sizes it may offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SizeRules {
    pub image_family: ImageFamily,
    pub gpu_driver: bool,
    pub artifact_streaming: bool,
    pub local_dns: bool,
}

impl Default for SizeRules {
    fn default() -> Self {
        SizeRules {
            image_family: ImageFamily::Ubuntu,
            gpu_driver: true,
            artifact_streaming: false,
            local_dns: false,
        }
    }
}

impl SizeRules {
    pub fn of(class: &AKSNodeClass) -> SizeRules {
        let spec = &class.spec;
        SizeRules {
            image_family: spec.image_family.unwrap_or(ImageFamily::Ubuntu),
            gpu_driver: spec.gpu.as_ref().is_none_or(|g| g.mode == GpuMode::Driver),
            artifact_streaming: spec.artifact_streaming.as_ref().and_then(|a| a.enabled).unwrap_or(false),
            local_dns: spec.local_dns.as_ref().is_some_and(|d| d.mode == LocalDnsMode::Required),
        }
    }

    /// Why a class with these rules may not offer the size.
    pub fn reason(&self, sku: &SkuRecord) -> Option<LeftOut> {
        if let Some(global) = global_reason(sku) {
            return Some(global);
        }
        if is_known_gpu_size(&sku.name) {
            let on_os = match self.image_family {
                ImageFamily::Ubuntu | ImageFamily::Ubuntu2204 | ImageFamily::Ubuntu2404 => {
                    supported_on_os(&sku.name, "ubuntu")
                }
                ImageFamily::AzureLinux => {
                    supported_on_os(&sku.name, "azurelinux") || supported_on_os(&sku.name, "azurelinux3")
                }
            };
            if !on_os {
                return Some(LeftOut::GpuNotOnImageFamily(self.image_family));
            }
            if self.gpu_driver && !is_nvidia_size(&sku.name) {
                return Some(LeftOut::NoGpuDriver);
            }
        }
        if self.artifact_streaming && sku.arch == Arch::Arm64 {
            return Some(LeftOut::Arm64ArtifactStreaming);
        }
        if self.local_dns && sku.vcpus < LOCAL_DNS_MIN_VCPUS {
            return Some(LeftOut::TooSmallForLocalDns);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::embedded_sku;

    fn rules(image_family: ImageFamily, gpu_driver: bool, artifact_streaming: bool) -> SizeRules {
        SizeRules { image_family, gpu_driver, artifact_streaming, local_dns: false }
    }

    /// Every rule, on the sizes it is about: `(size, rules, expected reason)`.
    #[test]
    fn each_size_rule_leaves_out_what_it_should_and_nothing_else() {
        use ImageFamily::*;
        let default = SizeRules::default();
        let none_mode = rules(Ubuntu, false, false);
        let cases: Vec<(&str, SizeRules, Option<LeftOut>)> = vec![
            // GPUs AKS does not know: never offered, whatever the class says.
            ("Standard_NCC40ads_H100_v5", default, Some(LeftOut::UnsupportedGpu)),
            ("Standard_NCC40ads_H100_v5", none_mode, Some(LeftOut::UnsupportedGpu)),
            ("Standard_NG32ads_V620_v1", default, Some(LeftOut::UnsupportedGpu)),
            ("Standard_NG32adms_V620_v1", none_mode, Some(LeftOut::UnsupportedGpu)),
            ("Standard_NV32as_v4", default, Some(LeftOut::UnsupportedGpu)),
            // A known NVIDIA size: offered with the driver, on Ubuntu and where Azure Linux supports it.
            ("Standard_NC24ads_A100_v4", default, None),
            ("Standard_NC24ads_A100_v4", rules(AzureLinux, true, false), None),
            (
                "Standard_NV12s_v3",
                rules(AzureLinux, true, false),
                Some(LeftOut::GpuNotOnImageFamily(AzureLinux)),
            ),
            ("Standard_NV12s_v3", rules(Ubuntu2204, true, false), None),
            // AMD sizes: AKS installs no driver, so only gpu.mode None offers them.
            ("Standard_NV4ads_V710_v5", default, Some(LeftOut::NoGpuDriver)),
            ("Standard_NV4ads_V710_v5", none_mode, None),
            ("Standard_ND96isr_MI300X_v5", default, Some(LeftOut::NoGpuDriver)),
            // Artifact streaming leaves arm64 out, and only arm64.
            ("Standard_D2ps_v5", rules(Ubuntu, true, true), Some(LeftOut::Arm64ArtifactStreaming)),
            ("Standard_D2ps_v5", default, None),
            ("Standard_D2s_v5", rules(Ubuntu, true, true), None),
            // LocalDNS needs 4 vCPUs.
            ("Standard_D2s_v5", SizeRules { local_dns: true, ..default }, Some(LeftOut::TooSmallForLocalDns)),
            ("Standard_D4s_v5", SizeRules { local_dns: true, ..default }, None),
            // CPU sizes pass every GPU rule.
            ("Standard_D2s_v5", rules(AzureLinux, true, false), None),
        ];
        let mut wrong = vec![];
        for (size, rules, want) in cases {
            let sku = embedded_sku(size).unwrap_or_else(|| panic!("{size} is in the embedded catalog"));
            let got = rules.reason(sku);
            if got != want {
                wrong.push(format!("{size} with {rules:?}: got {got:?}, want {want:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn the_class_decides_the_rules_and_gpu_mode_driver_is_the_default() {
        let class: AKSNodeClass = serde_yaml::from_str(
            "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {name: c}\nspec: {}\n",
        )
        .unwrap();
        assert_eq!(SizeRules::of(&class), SizeRules::default());
        let class: AKSNodeClass = serde_yaml::from_str(
            "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {name: c}\n\
             spec: {imageFamily: AzureLinux, gpu: {mode: None}, artifactStreaming: {enabled: true}}\n",
        )
        .unwrap();
        assert_eq!(SizeRules::of(&class), rules(ImageFamily::AzureLinux, false, true));
        assert!(LeftOut::NoGpuDriver.to_string().contains("gpu.mode: None"));
    }
}
