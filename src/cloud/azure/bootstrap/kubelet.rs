//! The kubelet's command line on an AKS node: `KUBELET_FLAGS` and `KUBELET_NODE_LABELS`.
//!
//! Follows the Azure provider's aksscriptless bootstrap (pkg/providers/imagefamily/bootstrap/
//! staticvalues.go getBaseKubeletFlags, aksbootstrap.go applyOptions and kubeletConfigToMap, and
//! imagefamily/resolver.go prepareKubeletConfiguration): a base set the node image expects, adjusted by
//! Kubernetes minor version, then the node's own values (taints, max pods, reservations, eviction, DNS)
//! and the AKSNodeClass `spec.kubelet` settings, a later value replacing an earlier one of the same flag.
//! Flags are kept by name, so the rendered order is sorted and stable (upstream's is a Go map's).

use std::collections::BTreeMap;

use crate::apis::aksnodeclass::KubeletConfiguration;
use crate::apis::common::{Taint, TaintEffect};
use crate::model::labels;

/// Hard eviction threshold the allocatable computation reserves (instancetype.go
/// EvictionThreshold: `memory.available` 750Mi); it replaces the base set's three thresholds.
pub const EVICTION_HARD: &str = "memory.available<750Mi";

/// The cluster DNS service IP the base flags assume when `DNS_SERVICE_IP` is unset
/// (staticvalues.go, AKS's default service CIDR 10.0.0.0/16).
pub const DEFAULT_CLUSTER_DNS: &str = "10.0.0.10";

/// staticvalues.go getBaseKubeletFlags: what every AKS node image's kubelet runs with.
const BASE_FLAGS: &[(&str, &str)] = &[
    ("--address", "0.0.0.0"),
    ("--anonymous-auth", "false"),
    ("--authentication-token-webhook", "true"),
    ("--authorization-mode", "Webhook"),
    ("--cgroups-per-qos", "true"),
    ("--client-ca-file", "/etc/kubernetes/certs/ca.crt"),
    ("--cloud-config", "/etc/kubernetes/azure.json"),
    ("--cloud-provider", "external"),
    ("--cluster-dns", DEFAULT_CLUSTER_DNS),
    ("--cluster-domain", "cluster.local"),
    ("--enforce-node-allocatable", "pods"),
    ("--event-qps", "0"),
    ("--eviction-hard", "memory.available<750Mi,nodefs.available<10%,nodefs.inodesFree<5%"),
    ("--image-gc-high-threshold", "85"),
    ("--image-gc-low-threshold", "80"),
    ("--kubeconfig", "/var/lib/kubelet/kubeconfig"),
    ("--max-pods", "110"),
    ("--node-status-update-frequency", "10s"),
    ("--pod-infra-container-image", "mcr.microsoft.com/oss/kubernetes/pause:3.6"),
    ("--pod-manifest-path", "/etc/kubernetes/manifests"),
    ("--pod-max-pids", "-1"),
    ("--protect-kernel-defaults", "true"),
    ("--read-only-port", "0"),
    ("--resolv-conf", "/run/systemd/resolve/resolv.conf"),
    ("--rotate-certificates", "true"),
    ("--streaming-connection-idle-timeout", "4h"),
    ("--tls-cert-file", "/etc/kubernetes/certs/kubeletserver.crt"),
    (
        "--tls-cipher-suites",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,\
         TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,\
         TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,\
         TLS_RSA_WITH_AES_256_GCM_SHA384,TLS_RSA_WITH_AES_128_GCM_SHA256",
    ),
    ("--tls-private-key-file", "/etc/kubernetes/certs/kubeletserver.key"),
];

/// The per-node values the flags carry besides the node class's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeKubelet<'a> {
    /// The Kubernetes minor version (the flag set changes at 1.30, 1.31, 1.34 and 1.35).
    pub minor: u64,
    pub taints: &'a [Taint],
    pub startup_taints: &'a [Taint],
    pub max_pods: u32,
    pub kube_reserved: &'a BTreeMap<String, String>,
    /// `DNS_SERVICE_IP`; None keeps the base flags' cluster DNS.
    pub cluster_dns: Option<&'a str>,
    /// Flags from the AKSNodeClass `spec.kubelet` ([`kubelet_config_flags`]), `--name=value`.
    pub config_flags: &'a [String],
    /// A swap file is configured (`linuxOSConfig.swapFileSize`): the kubelet must not refuse swap.
    pub swap: bool,
}

/// The kubelet's flags by name.
pub fn kubelet_flags(node: &NodeKubelet<'_>) -> BTreeMap<String, String> {
    let mut flags: BTreeMap<String, String> =
        BASE_FLAGS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let mut set = |k: &str, v: String| flags.insert(k.to_string(), v);
    // aksbootstrap.go: flags removed from the kubelet over time.
    if node.minor < 31 {
        set("--keep-terminated-pod-volumes", "false".into());
    }
    if node.minor >= 30 {
        // The out-of-tree ACR credential provider (CREDENTIAL_PROVIDER_DOWNLOAD_URL).
        set("--image-credential-provider-config", "/var/lib/kubelet/credential-provider-config.yaml".into());
        set("--image-credential-provider-bin-dir", "/var/lib/kubelet/credential-provider".into());
    } else {
        set("--feature-gates", "DisableKubeletCloudCredentialProviders=false".into());
        set("--azure-container-registry-config", "/etc/kubernetes/azure.json".into());
    }
    set("--register-with-taints", register_taints_flag(node.taints, node.startup_taints));
    set("--max-pods", node.max_pods.to_string());
    if !node.kube_reserved.is_empty() {
        set("--kube-reserved", join_pairs(node.kube_reserved));
    }
    set("--eviction-hard", EVICTION_HARD.to_string());
    if let Some(dns) = node.cluster_dns {
        set("--cluster-dns", dns.to_string());
    }
    if node.swap {
        set("--fail-swap-on", "false".into());
    }
    for flag in node.config_flags {
        let (name, value) = flag.split_once('=').unwrap_or((flag, ""));
        set(name, value.to_string());
    }
    if node.minor >= 34 {
        flags.remove("--cloud-config");
    }
    if node.minor >= 35 {
        flags.remove("--pod-infra-container-image");
    }
    flags
}

/// `--a=1 --b=2`, the form of `KUBELET_FLAGS`.
pub fn render_flags(flags: &BTreeMap<String, String>) -> String {
    flags.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

fn join_pairs(map: &BTreeMap<String, String>) -> String {
    map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// The kubelet flags for the AKSNodeClass `spec.kubelet` settings that are set; unset ones keep the
/// base flags (aksbootstrap.go kubeletConfigToMap). `cpuCFSQuotaPeriod` and `failSwapOn` go further
/// than upstream's scriptless path, which drops them: here every accepted field reaches the node.
pub fn kubelet_config_flags(config: Option<&KubeletConfiguration>) -> Vec<String> {
    let Some(c) = config else { return Vec::new() };
    let mut flags = Vec::new();
    let mut push = |flag: &str, value: Option<String>| {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            flags.push(format!("--{flag}={value}"));
        }
    };
    push("cpu-manager-policy", c.cpu_manager_policy.clone());
    push("cpu-cfs-quota", c.cpu_cfs_quota.map(|b| b.to_string()));
    push("cpu-cfs-quota-period", c.cpu_cfs_quota_period.clone());
    push("image-gc-high-threshold", c.image_gc_high_threshold_percent.map(|p| p.to_string()));
    push("image-gc-low-threshold", c.image_gc_low_threshold_percent.map(|p| p.to_string()));
    push("topology-manager-policy", c.topology_manager_policy.clone());
    push("allowed-unsafe-sysctls", Some(c.allowed_unsafe_sysctls.join(",")));
    push("container-log-max-size", c.container_log_max_size.clone());
    push("container-log-max-files", c.container_log_max_files.map(|n| n.to_string()));
    push("pod-max-pids", c.pod_pids_limit.map(|n| n.to_string()));
    push("fail-swap-on", c.fail_swap_on.map(|b| b.to_string()));
    flags
}

/// Whether the kubelet may set this label on its own Node (labels.go CanKubeletSetLabel, after the
/// NodeRestriction admission plugin): `kubernetes.io`/`k8s.io` keys only from an allowlist and the
/// `kubelet.kubernetes.io` and `node.kubernetes.io` namespaces; everything else is free.
pub fn kubelet_may_set(key: &str) -> bool {
    const KUBELET_ALLOWED: &[&str] = &[
        labels::LABEL_HOSTNAME,
        labels::LABEL_ARCH,
        labels::LABEL_OS,
        labels::LABEL_INSTANCE_TYPE,
        labels::LABEL_ZONE,
        labels::LABEL_REGION,
        "beta.kubernetes.io/instance-type",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    ];
    let Some((domain, _)) = key.split_once('/') else { return true };
    let in_domain = |d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    if !(in_domain("kubernetes.io") || in_domain("k8s.io")) {
        return true;
    }
    KUBELET_ALLOWED.contains(&key) || in_domain("kubelet.kubernetes.io") || in_domain("node.kubernetes.io")
}

/// `k=v,...` of the labels the kubelet may set, sorted by key: `KUBELET_NODE_LABELS`.
pub fn node_labels_flag(node_labels: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> =
        node_labels.iter().filter(|(k, _)| kubelet_may_set(k)).map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(",")
}

/// `key=value:Effect,...`: the claim's taints, its startup taints, then the unregistered taint
/// (core utils/taints.go: every node registers with `karpenter.sh/unregistered:NoExecute`), without
/// duplicates.
pub fn register_taints_flag(taints: &[Taint], startup_taints: &[Taint]) -> String {
    let unregistered = Taint {
        key: labels::TAINT_UNREGISTERED.to_string(),
        value: None,
        effect: TaintEffect::NoExecute,
        time_added: None,
    };
    let mut seen = Vec::new();
    for taint in taints.iter().chain(startup_taints).chain(std::iter::once(&unregistered)) {
        let rendered = match &taint.value {
            Some(value) if !value.is_empty() => format!("{}={value}:{:?}", taint.key, taint.effect),
            _ => format!("{}:{:?}", taint.key, taint.effect),
        };
        if !seen.contains(&rendered) {
            seen.push(rendered);
        }
    }
    seen.join(",")
}

#[cfg(test)]
#[path = "kubelet_tests.rs"]
mod tests;
