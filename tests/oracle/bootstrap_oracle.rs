//! Our custom data against upstream's own generator.
//!
//! For each case of a matrix (Ubuntu 22.04 / 24.04 / Azure Linux, amd64 / arm64, GPU sizes, Azure CNI
//! overlay + Cilium, Azure CNI node subnet, bring-your-own CNI, every kubelet field, labels and taints,
//! max pods, `linuxOSConfig`) this renders our custom data and asks upstream's renderer for the same
//! inputs: `bootstrap.AKS.Script()` of github.com/Azure/karpenter-provider-azure at the version pinned
//! in hack/aks-bootstrap/go.mod, built by hack/aks-bootstrap.sh. Both scripts are compared variable by
//! variable; `KUBELET_FLAGS` and `KUBELET_NODE_LABELS` flag by flag and label by label (upstream's order
//! is a Go map's), the base64 files line by line.
//!
//! Upstream's current template (main) has moved on from the pinned release, and we follow main. Every
//! such difference is listed in [`intended_variable`] and [`intended_flag`] with its reason, and only
//! in the direction and the cases it applies to; any other difference fails the test.
//!
//! The helper is built on first use when Go is installed (hack/deps.sh installs it with the control
//! plane); without Go the test says so and which command to run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use base64::Engine as _;
use karpenter_azure::apis::aksnodeclass::{ImageFamily, KubeletConfiguration, LinuxOsConfig};
use karpenter_azure::apis::common::{Taint, TaintEffect};
use karpenter_azure::apis::sysctls::SysctlConfiguration;
use karpenter_azure::catalog::{embedded_sku, Arch};
use karpenter_azure::cloud::azure::bootstrap::{
    gpu, kubelet_config_flags, kubelet_may_set, labels::aks_labels, render_script, BootstrapSettings,
    NodeBootstrap, NodeClassBootstrap, Secret,
};
use karpenter_azure::cloud::KubeletSettings;
use serde_json::{json, Value};

const SUBNET: &str = "/subscriptions/12345678-1234-1234-1234-123456789012/resourceGroups/net-rg/providers/Microsoft.Network/virtualNetworks/aks-vnet/subnets/nodes";
const NSG: &str = "aks-agentpool-31415926-nsg";

/// One row of the matrix.
#[derive(Clone)]
struct Case {
    name: &'static str,
    size: &'static str,
    version: &'static str,
    family: ImageFamily,
    /// `NETWORK_PLUGIN` as the node image gets it, overlay, Cilium dataplane, policy.
    plugin: &'static str,
    overlay: bool,
    cilium: bool,
    policy: &'static str,
    max_pods: u32,
    dns_service_ip: Option<&'static str>,
    gpu_driver: bool,
    kubelet: Option<KubeletConfiguration>,
    linux_os_config: Option<LinuxOsConfig>,
    labels: Vec<(&'static str, &'static str)>,
    taints: Vec<Taint>,
    startup_taints: Vec<Taint>,
}

fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
    Taint { key: key.into(), value: value.map(Into::into), effect, time_added: None }
}

fn base(name: &'static str, size: &'static str, version: &'static str) -> Case {
    Case {
        name,
        size,
        version,
        family: ImageFamily::Ubuntu,
        plugin: "none",
        overlay: true,
        cilium: true,
        policy: "cilium",
        max_pods: 250,
        dns_service_ip: None,
        gpu_driver: true,
        kubelet: None,
        linux_os_config: None,
        labels: vec![("karpenter.sh/nodepool", "default"), ("karpenter.sh/capacity-type", "on-demand")],
        taints: vec![],
        startup_taints: vec![],
    }
}

fn matrix() -> Vec<Case> {
    vec![
        Case {
            family: ImageFamily::Ubuntu2204,
            labels: vec![
                ("karpenter.sh/nodepool", "default"),
                ("team", "payments"),
                ("node.kubernetes.io/pool", "a"),
                ("kubernetes.io/forbidden", "dropped"),
            ],
            taints: vec![taint("dedicated", Some("payments"), TaintEffect::NoSchedule)],
            startup_taints: vec![taint(
                "node.cilium.io/agent-not-ready",
                Some("true"),
                TaintEffect::NoExecute,
            )],
            ..base("ubuntu2204-amd64-overlay-cilium", "Standard_D4s_v5", "1.33.2")
        },
        Case {
            family: ImageFamily::Ubuntu2404,
            ..base("ubuntu2404-arm64-overlay-cilium", "Standard_D4ps_v5", "1.34.1")
        },
        Case {
            family: ImageFamily::AzureLinux,
            plugin: "azure",
            overlay: false,
            cilium: false,
            policy: "calico",
            max_pods: 30,
            ..base("azurelinux-amd64-node-subnet", "Standard_D8s_v5", "1.32.4")
        },
        Case {
            family: ImageFamily::AzureLinux,
            ..base("azurelinux-arm64-overlay", "Standard_D8ps_v5", "1.31.3")
        },
        Case {
            taints: vec![taint("nvidia.com/gpu", Some("true"), TaintEffect::NoSchedule)],
            ..base("gpu-nc6s-v3", "Standard_NC6s_v3", "1.33.2")
        },
        Case { gpu_driver: false, ..base("gpu-driver-none", "Standard_NC24ads_A100_v4", "1.33.2") },
        Case {
            plugin: "none",
            overlay: false,
            cilium: false,
            policy: "",
            max_pods: 110,
            ..base("byo-cni-1.29", "Standard_D2s_v5", "1.29.9")
        },
        Case {
            dns_service_ip: Some("10.2.0.10"),
            kubelet: Some(KubeletConfiguration {
                cpu_manager_policy: Some("static".into()),
                cpu_cfs_quota: Some(false),
                cpu_cfs_quota_period: Some("200ms".into()),
                image_gc_high_threshold_percent: Some(70),
                image_gc_low_threshold_percent: Some(60),
                topology_manager_policy: Some("best-effort".into()),
                allowed_unsafe_sysctls: vec!["net.core.somaxconn".into(), "kernel.msg*".into()],
                container_log_max_size: Some("100Mi".into()),
                container_log_max_files: Some(3),
                pod_pids_limit: Some(4096),
                ..KubeletConfiguration::default()
            }),
            max_pods: 60,
            ..base("every-kubelet-field", "Standard_E16s_v5", "1.33.2")
        },
        Case {
            linux_os_config: Some(LinuxOsConfig {
                swap_file_size: Some("1500Mi".into()),
                transparent_huge_page_enabled: Some("madvise".into()),
                transparent_huge_page_defrag: Some("defer+madvise".into()),
                sysctls: Some(SysctlConfiguration {
                    vm_max_map_count: Some(262144),
                    net_core_somaxconn: Some(32768),
                    ..SysctlConfiguration::default()
                }),
            }),
            ..base("linux-os-config-1.35", "Standard_D4s_v5", "1.35.0")
        },
    ]
}

fn settings(case: &Case) -> BootstrapSettings {
    BootstrapSettings {
        network_plugin: case.plugin.into(),
        network_policy: case.policy.into(),
        overlay: case.overlay,
        cilium_dataplane: case.cilium,
        dns_service_ip: case.dns_service_ip.map(Into::into),
        kubelet_identity_client_id: "11111111-2222-3333-4444-555555555555".into(),
        vnet_guid: "a519e60a-cac0-40b2-b883-084477fe6f5c".into(),
        tenant_id: "72f988bf-86f1-41af-91ab-2d7cd011db47".into(),
        subscription_id: "12345678-1234-1234-1234-123456789012".into(),
        location: "eastus2".into(),
        node_resource_group: "MC_rg_cluster_eastus2".into(),
        ..BootstrapSettings::new(
            "https://cluster-abc123.hcp.eastus2.azmk8s.io:443",
            Secret::new("abcdef.0123456789abcdef"),
            base64::engine::general_purpose::STANDARD
                .encode("-----BEGIN CERTIFICATE-----\nMIIBfakeCA\n-----END CERTIFICATE-----\n"),
        )
    }
}

/// Ours, and the case as upstream's `bootstrap.AKS` takes it (hack/aks-bootstrap/main.go).
fn render_both(case: &Case) -> (String, Value) {
    let settings = settings(case);
    let sku = embedded_sku(case.size).unwrap_or_else(|| panic!("{} is not in the catalog", case.size));
    let class = NodeClassBootstrap {
        image_family: case.family,
        kubernetes_version: case.version.into(),
        gpu_driver: case.gpu_driver,
        linux_os_config: case.linux_os_config.clone(),
        ..NodeClassBootstrap::default()
    };
    let mut labels = aks_labels(&settings, &class, sku.arch, SUBNET);
    labels.extend(case.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let kubelet = KubeletSettings {
        max_pods: case.max_pods,
        kube_reserved: BTreeMap::from([("cpu".into(), "180m".into()), ("memory".into(), "3277Mi".into())]),
        config_flags: kubelet_config_flags(case.kubelet.as_ref()),
    };
    let node = NodeBootstrap {
        vm_size: case.size,
        arch: sku.arch,
        subnet_id: SUBNET,
        network_security_group: Some(NSG),
        labels: &labels,
        taints: &case.taints,
        startup_taints: &case.startup_taints,
        kubelet: &kubelet,
        class: &class,
    };
    let ours = render_script(&settings, &node).unwrap_or_else(|e| panic!("{}: {e}", case.name));

    // Upstream's caller keeps only the labels the kubelet may set (launchtemplate.go) and adds the
    // unregistered taint (utils.ExtractTaints).
    let kubelet_labels: BTreeMap<&String, &String> =
        labels.iter().filter(|(k, _)| kubelet_may_set(k)).collect();
    let mut taints: Vec<Value> = case
        .taints
        .iter()
        .chain(&case.startup_taints)
        .map(|t| json!({"key": t.key, "value": t.value.clone().unwrap_or_default(), "effect": format!("{:?}", t.effect)}))
        .collect();
    taints.push(json!({"key": "karpenter.sh/unregistered", "value": "", "effect": "NoExecute"}));
    let nvidia = case.gpu_driver && gpu::is_nvidia_size(case.size);
    let driver = gpu::driver_for(case.size);
    let k = case.kubelet.clone().unwrap_or_default();
    let input = json!({
        "name": case.name,
        "arch": sku.arch.as_str(),
        "tenantID": settings.tenant_id,
        "subscriptionID": settings.subscription_id,
        "kubeletIdentityClientID": settings.kubelet_identity_client_id,
        "location": settings.location,
        "resourceGroup": settings.node_resource_group,
        "clusterID": NSG.trim_start_matches("aks-agentpool-").trim_end_matches("-nsg"),
        "apiServerName": "cluster-abc123.hcp.eastus2.azmk8s.io",
        "bootstrapToken": settings.bootstrap_token.expose(),
        "networkPlugin": settings.network_plugin,
        "networkPolicy": settings.network_policy,
        "kubernetesVersion": case.version,
        "caBundle": settings.ca_bundle_base64,
        "labels": kubelet_labels,
        "taints": taints,
        "gpuNode": nvidia,
        "gpuDriverVersion": if nvidia { driver.version } else { "" },
        "gpuImageSHA": if nvidia { driver.image_sha } else { "" },
        "subnetID": SUBNET,
        "kubelet": {
            "maxPods": case.max_pods,
            "kubeReserved": kubelet.kube_reserved,
            "evictionHard": {"memory.available": "750Mi"},
            "cpuManagerPolicy": k.cpu_manager_policy.unwrap_or_default(),
            "cpuCFSQuota": k.cpu_cfs_quota,
            "cpuCFSQuotaPeriod": k.cpu_cfs_quota_period.unwrap_or_default(),
            "imageGCHighThresholdPercent": k.image_gc_high_threshold_percent,
            "imageGCLowThresholdPercent": k.image_gc_low_threshold_percent,
            "topologyManagerPolicy": k.topology_manager_policy.unwrap_or_default(),
            "allowedUnsafeSysctls": k.allowed_unsafe_sysctls,
        },
    });
    (ours, input)
}

/// The helper's path, built if needed; None (with the reason printed) when Go is missing.
fn helper() -> Option<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/aks-bootstrap.sh");
    if Command::new("go").arg("version").stdout(Stdio::null()).status().is_err() {
        let built = Command::new(&script).arg("path").output().ok().filter(|o| o.status.success());
        if built.is_none() {
            eprintln!(
                "SKIPPED: upstream's renderer is not built and Go is missing; run hack/deps.sh \
                 (or install Go and run hack/aks-bootstrap.sh build), then rerun this test"
            );
            return None;
        }
    }
    let out = Command::new(&script).arg("build").output().expect("running hack/aks-bootstrap.sh build");
    assert!(
        out.status.success(),
        "hack/aks-bootstrap.sh build failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap().trim().to_string())
}

/// Upstream's script for one case. One process per case: the pinned release changes its package-level
/// base flags as it renders, so a second case in the same process would inherit the first's.
fn upstream(helper: &str, input: &Value) -> String {
    let mut child = Command::new(helper)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the helper");
    let cases = serde_json::to_vec(&json!([input])).unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), &cases).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "helper failed: {}", String::from_utf8_lossy(&out.stderr));
    let rendered: BTreeMap<String, String> = serde_json::from_slice(&out.stdout).unwrap();
    rendered.into_values().next().unwrap()
}

/// `NAME` → value (quotes removed), for every assignment line of a script.
fn variables(script: &str) -> BTreeMap<String, String> {
    script
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect()
}

fn flags(value: &str) -> BTreeMap<String, String> {
    value
        .split_whitespace()
        .map(|f| {
            f.split_once('=').map_or((f.to_string(), String::new()), |(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

fn sorted_list(value: &str) -> Vec<String> {
    let mut items: Vec<String> = value.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
    items.sort();
    items
}

/// A base64 file's settings: its lines without comments and blank lines, trailing spaces dropped (the
/// pinned templates leave some). Comments carry no setting, and ours are our own words.
fn file_lines(value: &str) -> Vec<String> {
    let text = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(value).unwrap()).unwrap();
    text.lines().map(|l| l.trim_end().to_string()).filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}

fn minor(case: &Case) -> u64 {
    case.version.split('.').nth(1).unwrap().parse().unwrap()
}

/// Why a variable may differ from the pinned release in this case, or None when it must match.
fn intended_variable(
    case: &Case,
    name: &str,
    ours: Option<&str>,
    theirs: Option<&str>,
) -> Option<&'static str> {
    let nvidia = case.gpu_driver && gpu::is_nvidia_size(case.size);
    match (name, ours, theirs) {
        // Added to the template after the release; current main sets them.
        (
            "ENABLE_KUBELET_SERVING_CERTIFICATE_ROTATION"
            | "GPU_DRIVER_TYPE"
            | "MCR_REPOSITORY_BASE"
            | "CSE_TIMEOUT",
            Some(_),
            None,
        ) => Some("added to cse_cmd.sh.gtpl after the pinned release"),
        ("VM_TYPE", Some("standard"), Some("vmss")) => {
            Some("staticvalues.go: standalone VMs are `standard`, not a scale set")
        }
        ("CONFIG_GPU_DRIVER_IF_NEEDED", Some("false"), Some("true")) if !nvidia => {
            Some("main sets it only with the driver: AgentBaker needs false to skip the NVIDIA install")
        }
        ("CREDENTIAL_PROVIDER_DOWNLOAD_URL", Some(o), Some(t)) if minor(case) >= 30 && o != t => {
            Some("main pins a newer ACR credential provider release per Kubernetes minor")
        }
        ("KUBE_BINARY_URL", Some(""), Some(_)) if minor(case) >= 34 => {
            Some("from 1.34 the node image has the kubelet baked in and main sends no URL")
        }
        (
            "SYSCTL_CONTENT"
            | "SHOULD_CONFIG_SWAP_FILE"
            | "SWAP_FILE_SIZE_MB"
            | "SHOULD_CONFIG_TRANSPARENT_HUGE_PAGE"
            | "THP_ENABLED"
            | "THP_DEFRAG",
            _,
            _,
        ) if case.linux_os_config.is_some() => {
            Some("AKSNodeClass linuxOSConfig reaches the node image; the pinned release ignores it")
        }
        _ => None,
    }
}

/// Why a kubelet flag may differ from the pinned release in this case, or None when it must match.
fn intended_flag(case: &Case, flag: &str, ours: Option<&str>, theirs: Option<&str>) -> Option<&'static str> {
    match (flag, ours, theirs) {
        ("--cpu-manager-policy" | "--topology-manager-policy" | "--allowed-unsafe-sysctls" | "--container-log-max-size" | "--container-log-max-files", Some(_), None)
            if case.kubelet.is_some() =>
        {
            Some("main's kubeletConfigToMap passes these AKSNodeClass fields; the pinned release drops them")
        }
        ("--pod-max-pids", Some(_), Some("-1")) if case.kubelet.as_ref().is_some_and(|k| k.pod_pids_limit.is_some()) => {
            Some("main passes AKSNodeClass kubelet.podPidsLimit")
        }
        ("--cpu-cfs-quota-period", Some(_), None) => {
            Some("every accepted AKSNodeClass kubelet field reaches the node; upstream's scriptless path drops this one")
        }
        ("--fail-swap-on", Some("false"), None) if case.linux_os_config.is_some() => {
            Some("a swap file needs the kubelet to accept swap")
        }
        ("--cluster-dns", Some(o), Some("10.0.0.10")) if case.dns_service_ip == Some(o) => {
            Some("main passes DNS_SERVICE_IP; the pinned release always uses AKS's default")
        }
        ("--cloud-config", None, Some(_)) if minor(case) >= 34 => Some("main drops --cloud-config from 1.34"),
        ("--pod-infra-container-image", None, Some(_)) if minor(case) >= 35 => {
            Some("main drops --pod-infra-container-image from 1.35 (removed from the kubelet)")
        }
        _ => None,
    }
}

#[test]
fn custom_data_matches_upstream_variable_by_variable() {
    let Some(helper) = helper() else { return };
    let mut problems = Vec::new();
    let mut intended = BTreeMap::<String, usize>::new();
    let mut note = |reason: &str| *intended.entry(reason.to_string()).or_default() += 1;
    for case in matrix() {
        let (ours, input) = render_both(&case);
        let theirs = upstream(&helper, &input);
        let (ours_vars, theirs_vars) = (variables(&ours), variables(&theirs));
        assert!(
            theirs_vars.len() > 100,
            "{}: upstream rendered only {} variables",
            case.name,
            theirs_vars.len()
        );
        let names: std::collections::BTreeSet<&String> = ours_vars.keys().chain(theirs_vars.keys()).collect();
        for name in names {
            let (o, t) = (ours_vars.get(name).map(String::as_str), theirs_vars.get(name).map(String::as_str));
            let same = match (name.as_str(), o, t) {
                ("KUBELET_FLAGS", Some(o), Some(t)) => {
                    let (of, tf) = (flags(o), flags(t));
                    for flag in of.keys().chain(tf.keys()).collect::<std::collections::BTreeSet<_>>() {
                        let (ov, tv) = (of.get(flag).map(String::as_str), tf.get(flag).map(String::as_str));
                        let equal = match flag.as_str() {
                            "--kube-reserved" | "--register-with-taints" => {
                                ov.map(sorted_list) == tv.map(sorted_list)
                            }
                            _ => ov == tv,
                        };
                        if equal {
                            continue;
                        }
                        match intended_flag(&case, flag, ov, tv) {
                            Some(reason) => note(reason),
                            None => {
                                problems.push(format!("{}: {flag}: ours {ov:?}, upstream {tv:?}", case.name))
                            }
                        }
                    }
                    true
                }
                ("KUBELET_NODE_LABELS", Some(o), Some(t)) => sorted_list(o) == sorted_list(t),
                ("CONTAINERD_CONFIG_CONTENT" | "SYSCTL_CONTENT", Some(o), Some(t)) => {
                    file_lines(o) == file_lines(t)
                }
                _ => o == t,
            };
            if same {
                continue;
            }
            match intended_variable(&case, name, o, t) {
                Some(reason) => note(reason),
                None => problems.push(format!("{}: {name}: ours {o:?}, upstream {t:?}", case.name)),
            }
        }
        // The command that starts the node image's provisioning is the same.
        assert_eq!(ours.lines().last(), theirs.lines().last(), "{}", case.name);
    }
    eprintln!("intended differences from the pinned release (reason: occurrences):");
    for (reason, n) in &intended {
        eprintln!("  {reason}: {n}");
    }
    assert!(problems.is_empty(), "differences from upstream that are not intended:\n{}", problems.join("\n"));
}

#[test]
fn matrix_covers_what_the_contract_varies_on() {
    let cases = matrix();
    let arches: std::collections::BTreeSet<&str> =
        cases.iter().map(|c| embedded_sku(c.size).unwrap().arch.as_str()).collect();
    assert_eq!(arches.len(), 2, "amd64 and arm64");
    assert!(cases.iter().any(|c| gpu::is_nvidia_size(c.size) && c.gpu_driver));
    assert!(cases.iter().any(|c| c.plugin == "azure" && !c.overlay));
    assert!(cases.iter().any(|c| c.kubelet.is_some() && c.dns_service_ip.is_some()));
    for family in [ImageFamily::Ubuntu2204, ImageFamily::Ubuntu2404, ImageFamily::AzureLinux] {
        assert!(cases.iter().any(|c| c.family == family), "{family:?}");
    }
    assert!(cases.iter().any(|c| embedded_sku(c.size).unwrap().arch == Arch::Arm64));
}
