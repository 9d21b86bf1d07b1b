//! The bootstrap script a VM runs on first boot (ARM `osProfile.customData`, base64).
//!
//! Owns which labels the kubelet may set on its own Node, the taints it registers with (always including
//! `karpenter.sh/unregistered:NoExecute`, upstream core utils/taints.go), and the kubelet flags that make
//! the node's allocatable match what the solver assumed (`--max-pods`, `--kube-reserved`,
//! `--eviction-hard`). The script then runs the node image's provisioning entry point with the API server
//! endpoint and the TLS bootstrap token. The token is a secret: it is only ever inside the rendered
//! script, never in `Debug` output or logs.

use std::collections::BTreeMap;

use crate::apis::aksnodeclass::KubeletConfiguration;
use crate::apis::common::{Taint, TaintEffect};
use crate::model::labels;

/// Hard eviction threshold the allocatable computation reserves (reference §6: 750Mi).
pub const EVICTION_HARD: &str = "memory.available<750Mi";
/// The provisioning entry point the AKS node images ship (upstream bootstrap cse_cmd.sh.gtpl waits for
/// it before running the CSE).
pub const PROVISION_SCRIPT: &str = "/opt/azure/containers/provision.sh";

/// Secrets (the bootstrap token) use the settings' redacting type.
pub use crate::operator::Secret;

/// Cluster-wide bootstrap inputs (operator settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapSettings {
    /// `CLUSTER_ENDPOINT`, the API server URL.
    pub cluster_endpoint: String,
    /// `KUBELET_BOOTSTRAP_TOKEN`.
    pub bootstrap_token: Secret,
    /// `NETWORK_PLUGIN` as the node image expects it (`none` under overlay, else `azure`).
    pub network_plugin: String,
}

/// Per-node inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeBootstrap<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
    pub startup_taints: &'a [Taint],
    pub max_pods: u32,
    pub kube_reserved: &'a BTreeMap<String, String>,
    /// From the AKSNodeClass `spec.kubelet` ([`kubelet_config_flags`]).
    pub config_flags: &'a [String],
}

/// Whether the kubelet may set this label on its own Node. The NodeRestriction admission plugin refuses
/// `kubernetes.io`/`k8s.io` keys except this list and the `kubelet.kubernetes.io` and
/// `node.kubernetes.io` namespaces; everything else is free.
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

/// `k=v,...` of the labels the kubelet may set, sorted by key.
pub fn node_labels_flag(node_labels: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> =
        node_labels.iter().filter(|(k, _)| kubelet_may_set(k)).map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(",")
}

/// `key=value:Effect,...`: the claim's taints, its startup taints, then the unregistered taint, without
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

/// The kubelet flags of one node.
pub fn kubelet_flags(node: &NodeBootstrap<'_>) -> String {
    let mut flags = vec![
        format!("--max-pods={}", node.max_pods),
        format!("--node-labels={}", node_labels_flag(node.labels)),
        format!("--register-with-taints={}", register_taints_flag(node.taints, node.startup_taints)),
        format!("--eviction-hard={EVICTION_HARD}"),
    ];
    if !node.kube_reserved.is_empty() {
        let reserved: Vec<String> = node.kube_reserved.iter().map(|(k, v)| format!("{k}={v}")).collect();
        flags.push(format!("--kube-reserved={}", reserved.join(",")));
    }
    flags.extend(node.config_flags.iter().cloned());
    flags.join(" ")
}

/// The kubelet flags for the AKSNodeClass `spec.kubelet` settings that are set; unset ones keep the
/// node image's defaults (which are the defaults the CRD documents).
pub fn kubelet_config_flags(config: Option<&KubeletConfiguration>) -> Vec<String> {
    let Some(c) = config else { return Vec::new() };
    let mut flags = Vec::new();
    let mut push = |flag: &str, value: Option<String>| {
        if let Some(value) = value {
            flags.push(format!("--{flag}={value}"));
        }
    };
    push("cpu-manager-policy", c.cpu_manager_policy.clone());
    push("cpu-cfs-quota", c.cpu_cfs_quota.map(|b| b.to_string()));
    push("cpu-cfs-quota-period", c.cpu_cfs_quota_period.clone());
    push("image-gc-high-threshold", c.image_gc_high_threshold_percent.map(|p| p.to_string()));
    push("image-gc-low-threshold", c.image_gc_low_threshold_percent.map(|p| p.to_string()));
    push("topology-manager-policy", c.topology_manager_policy.clone());
    let sysctls = (!c.allowed_unsafe_sysctls.is_empty()).then(|| c.allowed_unsafe_sysctls.join(","));
    push("allowed-unsafe-sysctls", sysctls);
    push("container-log-max-size", c.container_log_max_size.clone());
    push("container-log-max-files", c.container_log_max_files.map(|n| n.to_string()));
    push("pod-max-pids", c.pod_pids_limit.map(|n| n.to_string()));
    push("fail-swap-on", c.fail_swap_on.map(|b| b.to_string()));
    flags
}

/// The bootstrap script, in clear text (tests and golden files use this form).
pub fn render_script(settings: &BootstrapSettings, node: &NodeBootstrap<'_>) -> String {
    format!(
        r#"#!/bin/bash
# Rendered by karpenter-azure: joins this VM to the cluster as a node.
set -o errexit -o nounset -o pipefail
export API_SERVER_URL={endpoint}
export TLS_BOOTSTRAP_TOKEN={token}
export NETWORK_PLUGIN={plugin}
export KUBELET_FLAGS={flags}
# The node image ships the provisioning script; it may still be unpacking on first boot.
for _ in $(seq 1 120); do
  [ -x {provision} ] && break
  sleep 1
done
exec {provision}
"#,
        endpoint = shell_quote(&settings.cluster_endpoint),
        token = shell_quote(settings.bootstrap_token.expose()),
        plugin = shell_quote(&settings.network_plugin),
        flags = shell_quote(&kubelet_flags(node)),
        provision = PROVISION_SCRIPT,
    )
}

/// The script base64-encoded, as `osProfile.customData` wants it.
pub fn render_custom_data(settings: &BootstrapSettings, node: &NodeBootstrap<'_>) -> String {
    azure_core::base64::encode(render_script(settings, node))
}

/// Single-quotes a value for bash.
fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
        Taint { key: key.into(), value: value.map(Into::into), effect, time_added: None }
    }

    fn settings() -> BootstrapSettings {
        BootstrapSettings {
            cluster_endpoint: "https://cluster-dns-abc.hcp.eastus.azmk8s.io:443".into(),
            bootstrap_token: Secret::new("abcdef.0123456789abcdef"),
            network_plugin: "none".into(),
        }
    }

    #[test]
    fn only_kubelet_settable_labels_are_passed_sorted() {
        let node_labels = BTreeMap::from([
            ("team".to_string(), "a".to_string()),
            (labels::LABEL_NODEPOOL.to_string(), "default".to_string()),
            (labels::LABEL_ZONE.to_string(), "eastus-1".to_string()),
            ("kubernetes.io/custom".to_string(), "no".to_string()),
            ("node-restriction.kubernetes.io/x".to_string(), "no".to_string()),
            ("node.kubernetes.io/pool".to_string(), "yes".to_string()),
        ]);
        assert_eq!(
            node_labels_flag(&node_labels),
            "karpenter.sh/nodepool=default,node.kubernetes.io/pool=yes,team=a,topology.kubernetes.io/zone=eastus-1"
        );
    }

    #[test]
    fn unregistered_taint_is_always_last_and_once() {
        let taints = [taint("dedicated", Some("gpu"), TaintEffect::NoSchedule)];
        let startup = [taint("cilium", None, TaintEffect::NoExecute)];
        assert_eq!(
            register_taints_flag(&taints, &startup),
            "dedicated=gpu:NoSchedule,cilium:NoExecute,karpenter.sh/unregistered:NoExecute"
        );
        let already = [taint(labels::TAINT_UNREGISTERED, None, TaintEffect::NoExecute)];
        assert_eq!(register_taints_flag(&already, &[]), "karpenter.sh/unregistered:NoExecute");
    }

    #[test]
    fn node_class_kubelet_settings_become_flags_and_unset_ones_stay_out() {
        assert!(kubelet_config_flags(None).is_empty());
        assert!(kubelet_config_flags(Some(&KubeletConfiguration::default())).is_empty());
        let config = KubeletConfiguration {
            cpu_manager_policy: Some("static".into()),
            cpu_cfs_quota: Some(false),
            image_gc_high_threshold_percent: Some(85),
            image_gc_low_threshold_percent: Some(70),
            allowed_unsafe_sysctls: vec!["net.core.somaxconn".into(), "kernel.msg*".into()],
            container_log_max_files: Some(3),
            pod_pids_limit: Some(4096),
            fail_swap_on: Some(false),
            ..KubeletConfiguration::default()
        };
        assert_eq!(
            kubelet_config_flags(Some(&config)),
            [
                "--cpu-manager-policy=static",
                "--cpu-cfs-quota=false",
                "--image-gc-high-threshold=85",
                "--image-gc-low-threshold=70",
                "--allowed-unsafe-sysctls=net.core.somaxconn,kernel.msg*",
                "--container-log-max-files=3",
                "--pod-max-pids=4096",
                "--fail-swap-on=false",
            ]
        );
    }

    #[test]
    fn secrets_do_not_leak_through_debug() {
        let rendered = format!("{:?}", settings());
        assert!(!rendered.contains("0123456789abcdef"), "{rendered}");
    }

    #[test]
    fn script_matches_golden_file() {
        let node_labels = BTreeMap::from([
            (labels::LABEL_NODEPOOL.to_string(), "default".to_string()),
            (labels::LABEL_CAPACITY_TYPE.to_string(), "spot".to_string()),
            ("kubernetes.io/forbidden".to_string(), "x".to_string()),
        ]);
        let reserved = BTreeMap::from([
            ("cpu".to_string(), "140m".to_string()),
            ("memory".to_string(), "2662Mi".to_string()),
        ]);
        let taints = [taint("dedicated", Some("gpu"), TaintEffect::NoSchedule)];
        let node = NodeBootstrap {
            labels: &node_labels,
            taints: &taints,
            startup_taints: &[],
            max_pods: 250,
            kube_reserved: &reserved,
            config_flags: &["--cpu-manager-policy=static".to_string()],
        };
        let script = render_script(&settings(), &node);
        let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/src/cloud/azure/testdata/bootstrap.sh");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(golden, &script).unwrap();
        }
        let expected = std::fs::read_to_string(golden).expect("golden file (UPDATE_GOLDEN=1 writes it)");
        assert_eq!(script, expected);
        assert_eq!(
            azure_core::base64::decode(render_custom_data(&settings(), &node)).unwrap(),
            script.as_bytes()
        );
    }
}
