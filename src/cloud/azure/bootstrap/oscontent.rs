//! Files the node image writes from the custom data: containerd's config (`CONTAINERD_CONFIG_CONTENT`)
//! and the kernel parameters (`SYSCTL_CONTENT`), both base64, and the AKSNodeClass `linuxOSConfig`
//! (sysctls, swap file, transparent huge pages) that reaches them.
//!
//! The containerd config follows the Azure provider's bootstrap/containerd.toml.gtpl: runc by default,
//! the NVIDIA runtime when the node installs the GPU driver, systemd cgroups (cgroup v2 images). The
//! sysctl defaults are its bootstrap/sysctl.conf; a node class value for the same key replaces the
//! default, others are appended.

use std::collections::BTreeMap;

use crate::apis::aksnodeclass::LinuxOsConfig;
use crate::model::resources::parse_resource_quantity;

/// bootstrap/sysctl.conf: AKS's defaults (tcp_retries2 is a partial workaround for kubernetes#41916).
const DEFAULT_SYSCTLS: &[(&str, &str)] = &[
    ("net.ipv4.tcp_retries2", "8"),
    ("net.core.message_burst", "80"),
    ("net.core.message_cost", "40"),
    ("net.core.somaxconn", "16384"),
    ("net.ipv4.tcp_max_syn_backlog", "16384"),
    ("net.ipv4.neigh.default.gc_thresh1", "4096"),
    ("net.ipv4.neigh.default.gc_thresh2", "8192"),
    ("net.ipv4.neigh.default.gc_thresh3", "16384"),
];

/// The `linuxOSConfig.sysctls` field names and the kernel parameter each sets (AKS custom node
/// configuration).
const SYSCTL_KEYS: &[(&str, &str)] = &[
    ("fsAioMaxNr", "fs.aio-max-nr"),
    ("fsFileMax", "fs.file-max"),
    ("fsInotifyMaxUserWatches", "fs.inotify.max_user_watches"),
    ("fsNrOpen", "fs.nr_open"),
    ("kernelThreadsMax", "kernel.threads-max"),
    ("netCoreNetdevMaxBacklog", "net.core.netdev_max_backlog"),
    ("netCoreOptmemMax", "net.core.optmem_max"),
    ("netCoreRmemDefault", "net.core.rmem_default"),
    ("netCoreRmemMax", "net.core.rmem_max"),
    ("netCoreSomaxconn", "net.core.somaxconn"),
    ("netCoreWmemDefault", "net.core.wmem_default"),
    ("netCoreWmemMax", "net.core.wmem_max"),
    ("netIPv4NeighDefaultGcThresh1", "net.ipv4.neigh.default.gc_thresh1"),
    ("netIPv4NeighDefaultGcThresh2", "net.ipv4.neigh.default.gc_thresh2"),
    ("netIPv4NeighDefaultGcThresh3", "net.ipv4.neigh.default.gc_thresh3"),
    ("netIPv4TCPFinTimeout", "net.ipv4.tcp_fin_timeout"),
    ("netIPv4TCPKeepaliveProbes", "net.ipv4.tcp_keepalive_probes"),
    ("netIPv4TCPKeepaliveTime", "net.ipv4.tcp_keepalive_time"),
    ("netIPv4TCPMaxSynBacklog", "net.ipv4.tcp_max_syn_backlog"),
    ("netIPv4TCPMaxTwBuckets", "net.ipv4.tcp_max_tw_buckets"),
    ("netIPv4TCPKeepaliveIntvl", "net.ipv4.tcp_keepalive_intvl"),
    ("netNetfilterNfConntrackBuckets", "net.netfilter.nf_conntrack_buckets"),
    ("netNetfilterNfConntrackMax", "net.netfilter.nf_conntrack_max"),
    ("vmMaxMapCount", "vm.max_map_count"),
    ("vmSwappiness", "vm.swappiness"),
    ("vmVfsCachePressure", "vm.vfs_cache_pressure"),
    ("netIPv4IPLocalPortRange", "net.ipv4.ip_local_port_range"),
    ("netIPv4TCPTwReuse", "net.ipv4.tcp_tw_reuse"),
];

/// What `linuxOSConfig` asks of the node image.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OsSettings {
    /// `SWAP_FILE_SIZE_MB`, when a swap file is wanted.
    pub swap_file_mb: Option<u64>,
    /// `THP_ENABLED` and `THP_DEFRAG` (empty keeps the image's default).
    pub thp_enabled: String,
    pub thp_defrag: String,
    /// The sysctl file, in clear text.
    pub sysctl_conf: String,
}

/// Why a `linuxOSConfig` cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OsConfigError {
    #[error("AKSNodeClass spec.linuxOSConfig.swapFileSize {0:?} is not a size such as 2Gi or 1500Mi")]
    SwapSize(String),
    #[error("AKSNodeClass spec.linuxOSConfig.sysctls.{0} has a value the node cannot take: {1}")]
    Sysctl(String, String),
}

/// The node image's view of a node class's `linuxOSConfig`.
pub fn os_settings(config: Option<&LinuxOsConfig>) -> Result<OsSettings, OsConfigError> {
    let mut sysctls: Vec<(String, String)> =
        DEFAULT_SYSCTLS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let mut settings = OsSettings::default();
    if let Some(config) = config {
        if let Some(size) = config.swap_file_size.as_deref() {
            let bytes = parse_resource_quantity("memory", size)
                .ok()
                .filter(|b| *b >= 1 << 20)
                .ok_or_else(|| OsConfigError::SwapSize(size.to_string()))?;
            settings.swap_file_mb = Some(bytes as u64 >> 20);
        }
        settings.thp_enabled = config.transparent_huge_page_enabled.clone().unwrap_or_default();
        settings.thp_defrag = config.transparent_huge_page_defrag.clone().unwrap_or_default();
        for (field, value) in user_sysctls(config)? {
            match sysctls.iter_mut().find(|(k, _)| *k == field) {
                Some(existing) => existing.1 = value,
                None => sysctls.push((field, value)),
            }
        }
    }
    settings.sysctl_conf = sysctls.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    Ok(settings)
}

/// The node class's sysctls as kernel parameter → value, in the table's order.
fn user_sysctls(config: &LinuxOsConfig) -> Result<Vec<(String, String)>, OsConfigError> {
    let Some(sysctls) = &config.sysctls else { return Ok(Vec::new()) };
    let fields: BTreeMap<String, serde_json::Value> =
        serde_json::from_value(serde_json::to_value(sysctls).unwrap_or_default()).unwrap_or_default();
    let mut out = Vec::new();
    for (field, key) in SYSCTL_KEYS {
        let Some(value) = fields.get(*field) else { continue };
        let text = match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if text.contains(['\n', '=', '"', '\\']) {
            return Err(OsConfigError::Sysctl(field.to_string(), text));
        }
        out.push((key.to_string(), text));
    }
    Ok(out)
}

/// containerd's config.toml (containerd.toml.gtpl); `nvidia` when the node installs the GPU driver.
pub fn containerd_config(nvidia: bool) -> String {
    let (runtime, binary) = if nvidia {
        ("nvidia-container-runtime", "/usr/bin/nvidia-container-runtime")
    } else {
        ("runc", "/usr/bin/runc")
    };
    let cri = r#"plugins."io.containerd.grpc.v1.cri""#;
    format!(
        r#"version = 2
oom_score = 0
[{cri}]
  sandbox_image = "mcr.microsoft.com/oss/kubernetes/pause:3.6"
  [{cri}.containerd]
    default_runtime_name = "{runtime}"
    [{cri}.containerd.runtimes.{runtime}]
      runtime_type = "io.containerd.runc.v2"
    [{cri}.containerd.runtimes.{runtime}.options]
      BinaryName = "{binary}"
      SystemdCgroup = true
    [{cri}.containerd.runtimes.untrusted]
      runtime_type = "io.containerd.runc.v2"
    [{cri}.containerd.runtimes.untrusted.options]
      BinaryName = "{binary}"
  [{cri}.registry]
    config_path = "/etc/containerd/certs.d"
  [{cri}.registry.headers]
    X-Meta-Source-Client = ["azure/aks"]
[metrics]
  address = "0.0.0.0:10257"
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::sysctls::SysctlConfiguration;

    #[test]
    fn defaults_without_a_linux_os_config() {
        let s = os_settings(None).unwrap();
        assert_eq!(s.swap_file_mb, None);
        assert!(s.sysctl_conf.starts_with("net.ipv4.tcp_retries2=8\n"), "{}", s.sysctl_conf);
        assert_eq!(s.sysctl_conf.lines().count(), DEFAULT_SYSCTLS.len());
    }

    #[test]
    fn node_class_sysctls_replace_or_extend_the_defaults_and_swap_is_in_mib() {
        let config = LinuxOsConfig {
            swap_file_size: Some("2Gi".into()),
            transparent_huge_page_enabled: Some("madvise".into()),
            transparent_huge_page_defrag: Some("defer".into()),
            sysctls: Some(SysctlConfiguration {
                net_core_somaxconn: Some(4096),
                vm_max_map_count: Some(262144),
                net_ipv4_ip_local_port_range: Some("32000 60000".into()),
                ..SysctlConfiguration::default()
            }),
        };
        let s = os_settings(Some(&config)).unwrap();
        assert_eq!(s.swap_file_mb, Some(2048));
        assert_eq!((s.thp_enabled.as_str(), s.thp_defrag.as_str()), ("madvise", "defer"));
        assert!(s.sysctl_conf.contains("net.core.somaxconn=4096\n"));
        assert!(!s.sysctl_conf.contains("net.core.somaxconn=16384"));
        assert!(s.sysctl_conf.contains("vm.max_map_count=262144\n"));
        assert!(s.sysctl_conf.contains("net.ipv4.ip_local_port_range=32000 60000\n"));
    }

    #[test]
    fn a_bad_swap_size_names_the_field() {
        let config = LinuxOsConfig { swap_file_size: Some("lots".into()), ..LinuxOsConfig::default() };
        let err = os_settings(Some(&config)).unwrap_err().to_string();
        assert!(err.contains("spec.linuxOSConfig.swapFileSize"), "{err}");
    }

    #[test]
    fn every_sysctl_field_has_a_kernel_parameter() {
        let schema = serde_json::to_value(schemars::schema_for!(SysctlConfiguration)).unwrap();
        let fields: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        for field in fields {
            assert!(SYSCTL_KEYS.iter().any(|(f, _)| f == field), "{field} has no kernel parameter");
        }
    }

    #[test]
    fn gpu_nodes_run_the_nvidia_runtime() {
        assert!(containerd_config(true).contains(r#"default_runtime_name = "nvidia-container-runtime""#));
        assert!(containerd_config(false).contains(r#"default_runtime_name = "runc""#));
    }
}
