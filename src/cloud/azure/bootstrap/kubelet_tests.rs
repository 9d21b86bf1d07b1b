use super::*;

fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
    Taint { key: key.into(), value: value.map(Into::into), effect, time_added: None }
}

fn node<'a>(minor: u64, reserved: &'a BTreeMap<String, String>, config: &'a [String]) -> NodeKubelet<'a> {
    NodeKubelet {
        minor,
        taints: &[],
        startup_taints: &[],
        max_pods: 250,
        kube_reserved: reserved,
        cluster_dns: None,
        config_flags: config,
        swap: false,
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
fn node_values_replace_the_base_flags() {
    let reserved = BTreeMap::from([("cpu".to_string(), "140m".to_string())]);
    let config = ["--image-gc-high-threshold=70".to_string()];
    let flags =
        kubelet_flags(&NodeKubelet { cluster_dns: Some("10.2.0.10"), ..node(33, &reserved, &config) });
    assert_eq!(flags["--max-pods"], "250");
    assert_eq!(flags["--eviction-hard"], EVICTION_HARD);
    assert_eq!(flags["--kube-reserved"], "cpu=140m");
    assert_eq!(flags["--cluster-dns"], "10.2.0.10");
    assert_eq!(flags["--image-gc-high-threshold"], "70");
    assert_eq!(flags["--register-with-taints"], "karpenter.sh/unregistered:NoExecute");
    assert!(!flags.contains_key("--system-reserved"), "AKS reserves nothing for the system");
    assert_eq!(kubelet_flags(&node(33, &BTreeMap::new(), &[]))["--cluster-dns"], DEFAULT_CLUSTER_DNS);
}

#[test]
fn flag_set_follows_the_kubernetes_minor() {
    let empty = BTreeMap::new();
    let old = kubelet_flags(&node(29, &empty, &[]));
    assert_eq!(old["--keep-terminated-pod-volumes"], "false");
    assert_eq!(old["--feature-gates"], "DisableKubeletCloudCredentialProviders=false");
    assert!(!old.contains_key("--image-credential-provider-config"));
    let v130 = kubelet_flags(&node(30, &empty, &[]));
    assert!(v130.contains_key("--image-credential-provider-bin-dir"));
    assert!(v130.contains_key("--keep-terminated-pod-volumes"));
    let v134 = kubelet_flags(&node(34, &empty, &[]));
    assert!(!v134.contains_key("--keep-terminated-pod-volumes"));
    assert!(!v134.contains_key("--cloud-config"));
    assert!(v134.contains_key("--pod-infra-container-image"));
    assert!(!kubelet_flags(&node(35, &empty, &[])).contains_key("--pod-infra-container-image"));
}

#[test]
fn swap_file_turns_fail_swap_on_off() {
    let empty = BTreeMap::new();
    assert!(!kubelet_flags(&node(33, &empty, &[])).contains_key("--fail-swap-on"));
    assert_eq!(
        kubelet_flags(&NodeKubelet { swap: true, ..node(33, &empty, &[]) })["--fail-swap-on"],
        "false"
    );
}
