use std::collections::BTreeMap;

use super::*;
use crate::apis::common::TaintEffect;
use crate::model::labels as wk;

pub(crate) fn settings() -> BootstrapSettings {
    BootstrapSettings {
        cluster_endpoint: "https://cluster-dns-abc.hcp.eastus.azmk8s.io:443".into(),
        bootstrap_token: Secret::new("abcdef.0123456789abcdef"),
        ca_bundle_base64: azure_core::base64::encode(
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        ),
        network_plugin: "none".into(),
        network_policy: "cilium".into(),
        overlay: true,
        cilium_dataplane: true,
        dns_service_ip: Some("10.0.0.10".into()),
        kubelet_identity_client_id: "11111111-2222-3333-4444-555555555555".into(),
        vnet_guid: "a519e60a-cac0-40b2-b883-084477fe6f5c".into(),
        tenant_id: "72f988bf-86f1-41af-91ab-2d7cd011db47".into(),
        subscription_id: "12345678-1234-1234-1234-123456789012".into(),
        location: "eastus".into(),
        node_resource_group: "MC_rg_cluster_eastus".into(),
    }
}

const SUBNET: &str = "/subscriptions/12345678-1234-1234-1234-123456789012/resourceGroups/net-rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes";

fn class() -> NodeClassBootstrap {
    NodeClassBootstrap {
        kubernetes_version: "1.33.2".into(),
        gpu_driver: true,
        ..NodeClassBootstrap::default()
    }
}

fn kubelet() -> KubeletSettings {
    KubeletSettings {
        max_pods: 250,
        kube_reserved: BTreeMap::from([
            ("cpu".to_string(), "140m".to_string()),
            ("memory".to_string(), "2662Mi".to_string()),
        ]),
        config_flags: vec!["--cpu-manager-policy=static".to_string()],
    }
}

fn node<'a>(
    labels: &'a BTreeMap<String, String>,
    taints: &'a [Taint],
    kubelet: &'a KubeletSettings,
    class: &'a NodeClassBootstrap,
) -> NodeBootstrap<'a> {
    NodeBootstrap {
        vm_size: "Standard_D4s_v5",
        arch: Arch::Amd64,
        subnet_id: SUBNET,
        network_security_group: Some("aks-agentpool-12345678-nsg"),
        labels,
        taints,
        startup_taints: &[],
        kubelet,
        class,
    }
}

/// `NAME` → value, quotes removed.
fn vars(script: &str) -> BTreeMap<String, String> {
    script
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect()
}

#[test]
fn secrets_do_not_leak_through_debug() {
    let rendered = format!("{:?}", settings());
    assert!(!rendered.contains("0123456789abcdef"), "{rendered}");
}

#[test]
fn script_matches_golden_file() {
    let node_labels = BTreeMap::from([
        (wk::LABEL_NODEPOOL.to_string(), "default".to_string()),
        (wk::LABEL_CAPACITY_TYPE.to_string(), "spot".to_string()),
        ("kubernetes.io/forbidden".to_string(), "x".to_string()),
    ]);
    let taints = [Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: TaintEffect::NoSchedule,
        time_added: None,
    }];
    let (kubelet, class) = (kubelet(), class());
    let node = node(&node_labels, &taints, &kubelet, &class);
    let script = render_script(&settings(), &node).unwrap();
    let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/src/cloud/azure/testdata/bootstrap.sh");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(golden, &script).unwrap();
    }
    let expected = std::fs::read_to_string(golden).expect("golden file (UPDATE_GOLDEN=1 writes it)");
    assert_eq!(script, expected);
    assert_eq!(
        azure_core::base64::decode(render_custom_data(&settings(), &node).unwrap()).unwrap(),
        script.as_bytes()
    );
}

#[test]
fn the_node_image_gets_what_it_joins_with() {
    let (kubelet, class) = (kubelet(), class());
    let labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
    let v = vars(&render_script(&settings(), &node(&labels, &[], &kubelet, &class)).unwrap());
    assert_eq!(v["API_SERVER_NAME"], "cluster-dns-abc.hcp.eastus.azmk8s.io");
    assert_eq!(v["TLS_BOOTSTRAP_TOKEN"], "abcdef.0123456789abcdef");
    assert_eq!(v["KUBE_CA_CRT"], settings().ca_bundle_base64);
    assert_eq!(v["KUBERNETES_VERSION"], "1.33.2");
    assert_eq!(v["KUBELET_NODE_LABELS"], "team=a");
    assert_eq!((v["SUBNET"].as_str(), v["VIRTUAL_NETWORK"].as_str()), ("nodes", "vnet"));
    assert_eq!(v["VIRTUAL_NETWORK_RESOURCE_GROUP"], "net-rg");
    assert_eq!(v["ROUTE_TABLE"], "aks-agentpool-12345678-routetable");
    assert_eq!(v["USER_ASSIGNED_IDENTITY_ID"], settings().kubelet_identity_client_id);
    assert_eq!((v["NETWORK_PLUGIN"].as_str(), v["NETWORK_POLICY"].as_str()), ("none", "cilium"));
    assert_eq!(v["GPU_NODE"], "false");
    assert!(v["KUBELET_FLAGS"].contains("--max-pods=250"));
    assert!(v["KUBELET_FLAGS"].contains("--kube-reserved=cpu=140m,memory=2662Mi"));
    assert!(v["KUBELET_FLAGS"].contains("--cpu-manager-policy=static"));
}

#[test]
fn nvidia_sizes_install_the_driver_unless_the_class_opts_out() {
    let (kubelet, class) = (kubelet(), class());
    let labels = BTreeMap::new();
    let gpu_node = NodeBootstrap { vm_size: "Standard_NC6s_v3", ..node(&labels, &[], &kubelet, &class) };
    let v = vars(&render_script(&settings(), &gpu_node).unwrap());
    assert_eq!((v["GPU_NODE"].as_str(), v["CONFIG_GPU_DRIVER_IF_NEEDED"].as_str()), ("true", "true"));
    assert_eq!(v["GPU_DRIVER_TYPE"], "cuda-lts");
    let containerd =
        String::from_utf8(azure_core::base64::decode(&v["CONTAINERD_CONFIG_CONTENT"]).unwrap()).unwrap();
    assert!(containerd.contains("nvidia-container-runtime"));
    let no_driver = NodeClassBootstrap { gpu_driver: false, ..class.clone() };
    let v = vars(&render_script(&settings(), &NodeBootstrap { class: &no_driver, ..gpu_node }).unwrap());
    assert_eq!((v["GPU_NODE"].as_str(), v["GPU_DRIVER_VERSION"].as_str()), ("false", ""));
}

#[test]
fn bad_inputs_are_refused_with_the_field_to_fix() {
    let (kubelet, labels) = (kubelet(), BTreeMap::new());
    let unresolved = NodeClassBootstrap { kubernetes_version: String::new(), ..class() };
    let err = render_script(&settings(), &node(&labels, &[], &kubelet, &unresolved)).unwrap_err();
    assert!(err.to_string().contains("status.kubernetesVersion"), "{err}");
    let required = NodeClassBootstrap { local_dns: Some(LocalDnsMode::Required), ..class() };
    let err = render_script(&settings(), &node(&labels, &[], &kubelet, &required)).unwrap_err();
    assert!(err.to_string().contains("spec.localDNS.mode"), "{err}");
    let class = class();
    let odd = BootstrapSettings { location: "east us".into(), ..settings() };
    let err = render_script(&odd, &node(&labels, &[], &kubelet, &class)).unwrap_err();
    assert!(err.to_string().contains("LOCATION"), "{err}");
    let quoted = BTreeMap::from([("a".to_string(), "x\"y".to_string())]);
    let err = render_script(&settings(), &node(&quoted, &[], &kubelet, &class)).unwrap_err();
    assert!(err.to_string().contains("KUBELET_NODE_LABELS"), "{err}");
}

#[test]
fn linux_os_config_reaches_the_node_image() {
    let (kubelet, labels) = (kubelet(), BTreeMap::new());
    let class = NodeClassBootstrap {
        linux_os_config: Some(LinuxOsConfig {
            swap_file_size: Some("1Gi".into()),
            transparent_huge_page_enabled: Some("never".into()),
            ..LinuxOsConfig::default()
        }),
        ..class()
    };
    let v = vars(&render_script(&settings(), &node(&labels, &[], &kubelet, &class)).unwrap());
    assert_eq!((v["SHOULD_CONFIG_SWAP_FILE"].as_str(), v["SWAP_FILE_SIZE_MB"].as_str()), ("true", "1024"));
    assert_eq!(
        (v["SHOULD_CONFIG_TRANSPARENT_HUGE_PAGE"].as_str(), v["THP_ENABLED"].as_str()),
        ("true", "never")
    );
    assert!(v["KUBELET_FLAGS"].contains("--fail-swap-on=false"));
}
