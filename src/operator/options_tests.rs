//! Tests of the operator settings: names, defaults, each required and each malformed setting, and that
//! secrets never show. Every test passes its own environment map; none touches the process environment.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::catalog;

const SUBNET: &str = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/net-rg/providers/\
                      Microsoft.Network/virtualNetworks/vnet/subnets/nodes";
const IDENTITY: &str = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/id-rg/providers/\
                        Microsoft.ManagedIdentity/userAssignedIdentities/node-id";
const TOKEN: &str = "abcdef.0123456789abcdef";
const CLIENT_SECRET: &str = "sUp3r~s3cret-Value";

/// The least environment that validates: every required setting.
fn required_env() -> BTreeMap<String, String> {
    [
        ("CLUSTER_NAME", "prod"),
        ("CLUSTER_ENDPOINT", "https://prod-dns-1234.hcp.eastus.azmk8s.io:443"),
        ("AZURE_SUBSCRIPTION_ID", "00000000-0000-0000-0000-000000000001"),
        ("LOCATION", "eastus"),
        ("AZURE_NODE_RESOURCE_GROUP", "MC_rg_prod_eastus"),
        ("VNET_SUBNET_ID", SUBNET),
        ("KUBELET_BOOTSTRAP_TOKEN", TOKEN),
        ("SSH_PUBLIC_KEY", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE azureuser@host"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn with(mut env: BTreeMap<String, String>, key: &str, value: &str) -> BTreeMap<String, String> {
    env.insert(key.to_string(), value.to_string());
    env
}

fn parse(args: &[&str], env: &BTreeMap<String, String>) -> Result<Options, OptionsError> {
    Options::parse_from(std::iter::once("karpenter-azure").chain(args.iter().copied()), env)
}

fn validate(args: &[&str], env: &BTreeMap<String, String>) -> Result<Validated, OptionsError> {
    parse(args, env)?.validate()
}

fn error_of(args: &[&str], env: &BTreeMap<String, String>) -> String {
    validate(args, env).expect_err("should be rejected").to_string()
}

#[test]
fn upstream_defaults_apply() {
    let v = validate(&[], &required_env()).unwrap();
    assert_eq!(v.network.plugin, NetworkPlugin::Azure);
    assert!(v.network.overlay);
    assert_eq!(v.network.policy, NetworkPolicy::None);
    assert_eq!(v.network.dataplane, Some(NetworkDataplane::Cilium));
    assert_eq!(v.vm_memory_overhead_percent, 0.075);
    assert_eq!(v.linux_admin_username, "azureuser");
    assert_eq!(v.batch_idle_duration, Duration::from_secs(1));
    assert_eq!(v.batch_max_duration, Duration::from_secs(10));
    assert_eq!(v.node_image_refresh_interval, Duration::from_secs(6 * 3600));
    assert_eq!(v.log_level, "info");
    assert_eq!(v.log_format, super::settings::LogFormat::Json);
    assert_eq!((v.metrics_port, v.health_probe_port), (8080, 8081));
    let lease = v.leader_election.clone().unwrap();
    assert_eq!(
        (lease.lease_name.as_str(), lease.lease_namespace.as_str()),
        ("karpenter-leader-election", "kube-system")
    );
    assert_eq!(v.azure.arm_endpoint.as_str(), "https://management.azure.com/");
    assert_eq!(v.azure.authority_host.as_str(), "https://login.microsoftonline.com/");
    assert_eq!(v.retail_prices_url.as_str(), catalog::retail::DEFAULT_RETAIL_PRICES_URL);
    assert_eq!(v.azure.credential, Credential::ManagedIdentity { client_id: None });
    assert!(v.node_identities.is_empty() && v.additional_tags.is_empty());
    assert_eq!(v.api_server_host(), "prod-dns-1234.hcp.eastus.azmk8s.io");
    assert_eq!(v.capacity_options(), catalog::CapacityOptions::default());
}

#[test]
fn every_required_setting_has_its_own_message() {
    let cases = [
        ("CLUSTER_NAME", "missing setting --cluster-name (CLUSTER_NAME)"),
        ("CLUSTER_ENDPOINT", "missing setting --cluster-endpoint (CLUSTER_ENDPOINT)"),
        (
            "AZURE_SUBSCRIPTION_ID",
            "missing setting --subscription-id (AZURE_SUBSCRIPTION_ID or ARM_SUBSCRIPTION_ID)",
        ),
        ("LOCATION", "missing setting --location (LOCATION)"),
        ("AZURE_NODE_RESOURCE_GROUP", "missing setting --node-resource-group (AZURE_NODE_RESOURCE_GROUP)"),
        ("VNET_SUBNET_ID", "missing setting --vnet-subnet-id (VNET_SUBNET_ID)"),
        ("KUBELET_BOOTSTRAP_TOKEN", "missing setting --kubelet-bootstrap-token (KUBELET_BOOTSTRAP_TOKEN)"),
        ("SSH_PUBLIC_KEY", "missing setting --ssh-public-key (SSH_PUBLIC_KEY)"),
    ];
    for (key, message) in cases {
        let mut env = required_env();
        env.remove(key);
        assert_eq!(error_of(&[], &env), message, "without {key}");
        // An empty variable counts as unset, as upstream's os.Getenv reads it.
        assert_eq!(error_of(&[], &with(required_env(), key, "")), message, "with empty {key}");
    }
}

#[test]
fn every_malformed_value_names_its_setting() {
    let cases = [
        ("CLUSTER_ENDPOINT", "http://api.example.com", "--cluster-endpoint (CLUSTER_ENDPOINT)"),
        ("CLUSTER_ENDPOINT", "not a url", "--cluster-endpoint (CLUSTER_ENDPOINT)"),
        (
            "AZURE_SUBSCRIPTION_ID",
            "sub-1",
            "--subscription-id (AZURE_SUBSCRIPTION_ID or ARM_SUBSCRIPTION_ID)",
        ),
        ("AZURE_TENANT_ID", "not a tenant", "--tenant-id (AZURE_TENANT_ID or ARM_TENANT_ID)"),
        ("AZURE_CLIENT_ID", "client", "--client-id (AZURE_CLIENT_ID)"),
        ("LOCATION", "East US", "--location (LOCATION)"),
        ("ARM_RESOURCE_GROUP", "bad/rg", "--resource-group (ARM_RESOURCE_GROUP)"),
        ("AZURE_NODE_RESOURCE_GROUP", "ends.with.dot.", "--node-resource-group (AZURE_NODE_RESOURCE_GROUP)"),
        ("ARM_ENDPOINT", "http://management.example.com", "--arm-endpoint (ARM_ENDPOINT)"),
        ("AZURE_AUTHORITY_HOST", "ftp://login", "--authority-host (AZURE_AUTHORITY_HOST)"),
        ("RETAIL_PRICES_URL", "prices", "--retail-prices-url (RETAIL_PRICES_URL)"),
        (
            "VNET_SUBNET_ID",
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v",
            "--vnet-subnet-id (VNET_SUBNET_ID)",
        ),
        (
            "KUBELET_BOOTSTRAP_TOKEN",
            "ABCDEF.0123456789abcdef",
            "--kubelet-bootstrap-token (KUBELET_BOOTSTRAP_TOKEN)",
        ),
        ("SSH_PUBLIC_KEY", "not-a-key", "--ssh-public-key (SSH_PUBLIC_KEY)"),
        ("NETWORK_PLUGIN", "kubenet", "--network-plugin (NETWORK_PLUGIN)"),
        ("NETWORK_PLUGIN_MODE", "dynamic", "--network-plugin-mode (NETWORK_PLUGIN_MODE)"),
        ("NETWORK_POLICY", "azure-npm", "--network-policy (NETWORK_POLICY)"),
        ("NETWORK_DATAPLANE", "ebpf", "--network-dataplane (NETWORK_DATAPLANE)"),
        ("NODE_IDENTITIES", "/subscriptions/s/resourceGroups/rg", "--node-identities (NODE_IDENTITIES)"),
        (
            "KUBELET_IDENTITY_CLIENT_ID",
            "kubelet",
            "--kubelet-identity-client-id (KUBELET_IDENTITY_CLIENT_ID)",
        ),
        ("VM_MEMORY_OVERHEAD_PERCENT", "1", "--vm-memory-overhead-percent (VM_MEMORY_OVERHEAD_PERCENT)"),
        ("VM_MEMORY_OVERHEAD_PERCENT", "-0.1", "--vm-memory-overhead-percent (VM_MEMORY_OVERHEAD_PERCENT)"),
        ("VM_MEMORY_OVERHEAD_PERCENT", "7.5%", "--vm-memory-overhead-percent (VM_MEMORY_OVERHEAD_PERCENT)"),
        ("LINUX_ADMIN_USERNAME", "1admin", "--linux-admin-username (LINUX_ADMIN_USERNAME)"),
        ("LINUX_ADMIN_USERNAME", &"a".repeat(33), "--linux-admin-username (LINUX_ADMIN_USERNAME)"),
        ("ADDITIONAL_TAGS", "team", "--additional-tags (ADDITIONAL_TAGS)"),
        ("ADDITIONAL_TAGS", "a/b=c", "--additional-tags (ADDITIONAL_TAGS)"),
        ("ADDITIONAL_TAGS", "a=1,a=2", "--additional-tags (ADDITIONAL_TAGS)"),
        ("BATCH_IDLE_DURATION", "1.5s", "--batch-idle-duration (BATCH_IDLE_DURATION)"),
        ("BATCH_IDLE_DURATION", "0s", "--batch-idle-duration (BATCH_IDLE_DURATION)"),
        ("BATCH_IDLE_DURATION", "11s", "--batch-idle-duration (BATCH_IDLE_DURATION)"),
        ("BATCH_MAX_DURATION", "ten", "--batch-max-duration (BATCH_MAX_DURATION)"),
        ("NODE_IMAGE_REFRESH_INTERVAL", "0s", "--node-image-refresh-interval (NODE_IMAGE_REFRESH_INTERVAL)"),
        (
            "NODE_IMAGE_REFRESH_INTERVAL",
            "soon",
            "--node-image-refresh-interval (NODE_IMAGE_REFRESH_INTERVAL)",
        ),
        (
            "NODE_IMAGE_REFRESH_INTERVAL",
            "500ms",
            "--node-image-refresh-interval (NODE_IMAGE_REFRESH_INTERVAL)",
        ),
        ("LOG_LEVEL", "verbose", "--log-level (LOG_LEVEL)"),
        ("LOG_FORMAT", "logfmt", "--log-format (LOG_FORMAT)"),
        ("METRICS_PORT", "70000", "--metrics-port (METRICS_PORT)"),
        ("HEALTH_PROBE_PORT", "8080", "--health-probe-port (HEALTH_PROBE_PORT)"),
        ("DISABLE_LEADER_ELECTION", "maybe", "--disable-leader-election (DISABLE_LEADER_ELECTION)"),
        ("LEADER_ELECTION_NAME", "Leader_Lease", "--leader-election-name (LEADER_ELECTION_NAME)"),
        (
            "LEADER_ELECTION_NAMESPACE",
            "Kube-System",
            "--leader-election-namespace (LEADER_ELECTION_NAMESPACE)",
        ),
        ("SYSTEM_NAMESPACE", "-ns", "--system-namespace (SYSTEM_NAMESPACE)"),
        ("FEATURE_GATES", "NodeRepair", "--feature-gates (FEATURE_GATES)"),
    ];
    for (key, value, setting) in cases {
        let message = error_of(&[], &with(required_env(), key, value));
        assert!(message.starts_with(&format!("invalid setting {setting}: ")), "{key}={value:?}: {message}");
    }
}

#[test]
fn plugin_none_needs_an_empty_mode() {
    let env = with(required_env(), "NETWORK_PLUGIN", "none");
    assert_eq!(
        error_of(&[], &env),
        "invalid setting --network-plugin-mode (NETWORK_PLUGIN_MODE): must be \"\" when --network-plugin is none"
    );
    let v = validate(&[], &with(env, "NETWORK_PLUGIN_MODE", "")).unwrap();
    assert_eq!((v.network.plugin, v.network.overlay), (NetworkPlugin::None, false));
    assert_eq!(v.capacity_options().network_plugin, catalog::NetworkPlugin::None);
    assert_eq!(v.capacity_options().max_pods(), 250);
    let node_subnet = validate(&["--network-plugin-mode="], &required_env()).unwrap();
    assert_eq!(node_subnet.capacity_options().max_pods(), 30);
}

#[test]
fn flags_and_env_both_work_and_a_flag_wins() {
    let mut env = required_env();
    env.remove("CLUSTER_NAME");
    let v = validate(&["--cluster-name", "from-flag"], &env).unwrap();
    assert_eq!(v.cluster_name, "from-flag");
    let v = validate(&["--cluster-name=from-flag"], &with(env.clone(), "CLUSTER_NAME", "from-env")).unwrap();
    assert_eq!(v.cluster_name, "from-flag");
    let v = validate(&[], &with(env, "CLUSTER_NAME", "from-env")).unwrap();
    assert_eq!(v.cluster_name, "from-env");

    let all_flags = [
        "--cluster-name=c",
        "--cluster-endpoint=https://api.example.com",
        "--subscription-id=00000000-0000-0000-0000-000000000002",
        "--location=westus2",
        "--node-resource-group=nodes",
        &format!("--vnet-subnet-id={SUBNET}"),
        &format!("--kubelet-bootstrap-token={TOKEN}"),
        "--ssh-public-key=ssh-rsa AAAAB3NzaC1yc2E=",
        "--network-plugin-mode=",
        "--network-dataplane=azure",
        "--network-policy=calico",
        &format!("--node-identities={IDENTITY}, {IDENTITY}"),
        "--additional-tags=team=infra, cost-center=42",
        "--vm-memory-overhead-percent=0",
        "--batch-idle-duration=500ms",
        "--batch-max-duration=1m",
        "--node-image-refresh-interval=90s",
        "--metrics-port=9090",
        "--disable-leader-election",
    ];
    let v = validate(&all_flags, &BTreeMap::new()).unwrap();
    assert_eq!(v.azure.location, "westus2");
    assert!(!v.network.overlay);
    assert_eq!(v.network.dataplane, Some(NetworkDataplane::Azure));
    assert_eq!(v.network.policy, NetworkPolicy::Calico);
    assert_eq!(v.node_identities, vec![IDENTITY.to_string(), IDENTITY.to_string()]);
    let tags: Vec<(&str, &str)> = v.additional_tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(tags, [("cost-center", "42"), ("team", "infra")]);
    assert_eq!(v.vm_memory_overhead_percent, 0.0);
    assert_eq!(
        (v.batch_idle_duration, v.batch_max_duration),
        (Duration::from_millis(500), Duration::from_secs(60))
    );
    assert_eq!(v.node_image_refresh_interval, Duration::from_secs(90));
    assert_eq!(v.metrics_port, 9090);
    assert_eq!(v.leader_election, None);
}

#[test]
fn arm_names_are_fallbacks_for_azure_names() {
    let mut env = required_env();
    env.remove("AZURE_SUBSCRIPTION_ID");
    env.insert("ARM_SUBSCRIPTION_ID".into(), "00000000-0000-0000-0000-00000000000a".into());
    env.insert("ARM_TENANT_ID".into(), "contoso.onmicrosoft.com".into());
    env.insert("AZURE_CLIENT_ID".into(), "11111111-1111-1111-1111-111111111111".into());
    env.insert(
        "AZURE_FEDERATED_TOKEN_FILE".into(),
        "/var/run/secrets/azure/tokens/azure-identity-token".into(),
    );
    let v = validate(&[], &env).unwrap();
    assert_eq!(v.azure.subscription_id, "00000000-0000-0000-0000-00000000000a");
    assert!(matches!(v.azure.credential, Credential::WorkloadIdentity { ref tenant_id, .. }
        if tenant_id == "contoso.onmicrosoft.com"));
    let v =
        validate(&[], &with(env, "AZURE_SUBSCRIPTION_ID", "00000000-0000-0000-0000-00000000000b")).unwrap();
    assert_eq!(v.azure.subscription_id, "00000000-0000-0000-0000-00000000000b");
}

#[test]
fn credentials_follow_the_default_credential_order() {
    let client = "11111111-1111-1111-1111-111111111111";
    let tenant = "22222222-2222-2222-2222-222222222222";
    let env = with(required_env(), "AZURE_FEDERATED_TOKEN_FILE", "/token");
    assert_eq!(error_of(&[], &env), "missing setting --tenant-id (AZURE_TENANT_ID or ARM_TENANT_ID)");
    let env = with(env, "AZURE_TENANT_ID", tenant);
    assert_eq!(error_of(&[], &env), "missing setting --client-id (AZURE_CLIENT_ID)");
    let env = with(env, "AZURE_CLIENT_ID", client);
    assert!(matches!(validate(&[], &env).unwrap().azure.credential, Credential::WorkloadIdentity { .. }));
    let env = with(env, "AZURE_CLIENT_SECRET", CLIENT_SECRET);
    match validate(&[], &env).unwrap().azure.credential {
        Credential::ClientSecret { secret, .. } => assert_eq!(secret.expose(), CLIENT_SECRET),
        other => panic!("expected a client secret, got {other:?}"),
    }
    let managed = validate(&[], &with(required_env(), "AZURE_CLIENT_ID", client)).unwrap();
    assert_eq!(managed.azure.credential, Credential::ManagedIdentity { client_id: Some(client.into()) });
}

#[test]
fn secrets_never_show_in_debug_or_errors() {
    let env = with(required_env(), "AZURE_CLIENT_SECRET", CLIENT_SECRET);
    let env = with(env, "AZURE_TENANT_ID", "22222222-2222-2222-2222-222222222222");
    let env = with(env, "AZURE_CLIENT_ID", "11111111-1111-1111-1111-111111111111");
    let options = parse(&[], &env).unwrap();
    let validated = options.validate().unwrap();
    for text in [format!("{options:?}"), format!("{validated:?}"), format!("{validated:#?}")] {
        assert!(!text.contains(TOKEN) && !text.contains(CLIENT_SECRET), "{text}");
        assert!(text.contains("<redacted>"));
    }
    let bad_token = "ABCDEF.secretsecretsecre";
    let message = error_of(&[], &with(env.clone(), "KUBELET_BOOTSTRAP_TOKEN", bad_token));
    assert_eq!(
        message,
        "invalid setting --kubelet-bootstrap-token (KUBELET_BOOTSTRAP_TOKEN): must look like abcdef.0123456789abcdef"
    );
    // Usage errors quote arguments; secret values are scrubbed from them too.
    let err = parse(&[&format!("--kubelet-bootstrap-token={TOKEN}"), TOKEN], &env).unwrap_err();
    assert_eq!(err.category(), "InvalidArguments");
    assert!(!err.to_string().contains(TOKEN), "{err}");
}

#[test]
fn usage_errors_are_one_line() {
    let err = parse(&["--no-such-flag"], &required_env()).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("--no-such-flag") && !message.contains('\n'), "{message}");
    assert!(!message.starts_with("error:"));
}

#[test]
fn setting_names_match_the_clap_arguments() {
    use clap::Args;
    let command = Options::augment_args(clap::Command::new("controller"));
    let settings = [
        setting::CLUSTER_NAME,
        setting::CLUSTER_ENDPOINT,
        setting::SUBSCRIPTION_ID,
        setting::TENANT_ID,
        setting::CLIENT_ID,
        setting::LOCATION,
        setting::RESOURCE_GROUP,
        setting::NODE_RESOURCE_GROUP,
        setting::ARM_ENDPOINT,
        setting::AUTHORITY_HOST,
        setting::RETAIL_PRICES_URL,
        setting::VNET_SUBNET_ID,
        setting::KUBELET_BOOTSTRAP_TOKEN,
        setting::SSH_PUBLIC_KEY,
        setting::NETWORK_PLUGIN,
        setting::NETWORK_PLUGIN_MODE,
        setting::NETWORK_POLICY,
        setting::NETWORK_DATAPLANE,
        setting::NODE_IDENTITIES,
        setting::KUBELET_IDENTITY_CLIENT_ID,
        setting::VM_MEMORY_OVERHEAD_PERCENT,
        setting::LINUX_ADMIN_USERNAME,
        setting::ADDITIONAL_TAGS,
        setting::BATCH_IDLE_DURATION,
        setting::BATCH_MAX_DURATION,
        setting::LOG_LEVEL,
        setting::LOG_FORMAT,
        setting::METRICS_PORT,
        setting::HEALTH_PROBE_PORT,
        setting::DISABLE_LEADER_ELECTION,
        setting::LEADER_ELECTION_NAME,
        setting::LEADER_ELECTION_NAMESPACE,
        setting::SYSTEM_NAMESPACE,
        setting::FEATURE_GATES,
        setting::NODE_IMAGE_REFRESH_INTERVAL,
    ];
    for s in settings {
        let arg =
            command.get_arguments().find(|a| a.get_long() == Some(s.flag)).unwrap_or_else(|| panic!("{s}"));
        assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(s.env), "{s}");
        if let Some(fallback) = s.fallback_env {
            assert!(command.get_arguments().any(|a| a.get_env().and_then(|e| e.to_str()) == Some(fallback)));
        }
    }
    // Secret values stay out of --help even when clap reads them from the environment itself.
    for flag in ["kubelet-bootstrap-token", "client-secret"] {
        let arg = command.get_arguments().find(|a| a.get_long() == Some(flag)).unwrap();
        assert!(arg.is_hide_env_values_set(), "{flag}");
    }
}

#[test]
fn subnet_check_agrees_with_the_crd_pattern() {
    // checks::is_subnet_id is a hand translation of this pattern; change both together.
    assert_eq!(
        crate::apis::aksnodeclass::SUBNET_ID_PATTERN,
        r"(?i)^\/subscriptions\/[^\/]+\/resourceGroups\/[a-zA-Z0-9_\-().]{0,89}[a-zA-Z0-9_\-()]\/providers\/Microsoft\.Network\/virtualNetworks\/[^\/]+\/subnets\/[^\/]+$"
    );
    let accepted = [
        SUBNET,
        "/SUBSCRIPTIONS/s/RESOURCEGROUPS/My_RG-(1).x/PROVIDERS/microsoft.network/VIRTUALNETWORKS/v/SUBNETS/n",
    ];
    let rejected = [
        "subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/n",
        "/subscriptions//resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/n",
        "/subscriptions/s/resourceGroups/rg./providers/Microsoft.Network/virtualNetworks/v/subnets/n",
        "/subscriptions/s/resourceGroups/r g/providers/Microsoft.Network/virtualNetworks/v/subnets/n",
        "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/n/extra",
        "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualNetworks/v/subnets/n",
        "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/",
    ];
    for id in accepted {
        assert!(super::checks::is_subnet_id(id), "{id}");
    }
    for id in rejected {
        assert!(!super::checks::is_subnet_id(id), "{id}");
    }
    let long_rg = format!(
        "/subscriptions/s/resourceGroups/{}/providers/Microsoft.Network/virtualNetworks/v/subnets/n",
        "r".repeat(91)
    );
    assert!(!super::checks::is_subnet_id(&long_rg));
}

#[test]
fn node_bootstrap_settings_are_checked_and_normalised() {
    let v = validate(&[], &required_env()).unwrap();
    assert_eq!((v.cluster_ca_bundle, v.dns_service_ip, v.vnet_guid), (None, None, None));
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let env = with(required_env(), "CLUSTER_CA_BUNDLE", pem);
    let env = with(env, "DNS_SERVICE_IP", "10.2.0.10");
    let env = with(env, "VNET_GUID", "a519e60a-cac0-40b2-b883-084477fe6f5c");
    let v = validate(&[], &env).unwrap();
    // PEM or base64 of it: the node image gets base64.
    let encoded = azure_core::base64::encode(pem);
    assert_eq!(v.cluster_ca_bundle.as_deref(), Some(encoded.as_str()));
    let v2 = validate(&[], &with(required_env(), "CLUSTER_CA_BUNDLE", &encoded)).unwrap();
    assert_eq!(v2.cluster_ca_bundle, v.cluster_ca_bundle);
    assert_eq!(v.dns_service_ip.as_deref(), Some("10.2.0.10"));
    assert_eq!(v.vnet_guid.as_deref(), Some("a519e60a-cac0-40b2-b883-084477fe6f5c"));

    let err = error_of(&[], &with(required_env(), "DNS_SERVICE_IP", "kube-dns"));
    assert!(err.contains("--dns-service-ip (DNS_SERVICE_IP)") && err.contains("not an IP address"), "{err}");
    let err = error_of(&[], &with(required_env(), "CLUSTER_CA_BUNDLE", "bm90IGEgY2VydA=="));
    assert!(
        err.contains("--cluster-ca-bundle (CLUSTER_CA_BUNDLE)") && err.contains("no PEM certificate"),
        "{err}"
    );
    let err = error_of(&[], &with(required_env(), "CLUSTER_CA_BUNDLE", "%%%"));
    assert!(err.contains("base64"), "{err}");
    let err = error_of(&[], &with(required_env(), "VNET_GUID", "vnet"));
    assert!(err.contains("--vnet-guid (VNET_GUID)"), "{err}");
}

#[test]
fn feature_gates_default_off_and_parse_upstreams_format() {
    let v = validate(&[], &required_env()).unwrap();
    assert_eq!(v.feature_gates, FeatureGates::default());
    assert!(!v.feature_gates.node_repair && !v.feature_gates.spot_to_spot_consolidation);
    // (value, node repair, spot-to-spot, enabled but unimplemented)
    let cases: [(&str, bool, bool, &[&str]); 8] = [
        ("", false, false, &[]),
        ("NodeRepair=true", true, false, &[]),
        ("NodeRepair=true,SpotToSpotConsolidation=false", true, false, &[]),
        (" SpotToSpotConsolidation = True , NodeRepair=0 ", false, true, &[]),
        ("NodeRepair=true,NodeRepair=false", false, false, &[]),
        ("NodeRepair=t,", true, false, &[]),
        // Upstream's chart passes every gate; those not implemented are accepted.
        (
            "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false",
            false,
            false,
            &["ReservedCapacity"],
        ),
        ("StaticCapacity=true,NodeOverlay=1", false, false, &[]),
    ];
    for (value, repair, spot, unimplemented) in cases {
        let gates = validate(&[], &with(required_env(), "FEATURE_GATES", value)).unwrap().feature_gates;
        assert_eq!(
            (gates.node_repair, gates.spot_to_spot_consolidation, gates.enabled_unimplemented.clone()),
            (repair, spot, unimplemented.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            "{value:?}"
        );
    }
    let gates =
        validate(&[], &with(required_env(), "FEATURE_GATES", "StaticCapacity=true")).unwrap().feature_gates;
    assert!(gates.static_capacity, "StaticCapacity is implemented");
    let flag =
        validate(&["--feature-gates=NodeRepair=true"], &with(required_env(), "FEATURE_GATES", "")).unwrap();
    assert!(flag.feature_gates.node_repair, "the flag wins over the environment");
    assert!(!v.feature_gates.node_overlay, "NodeOverlay is off by default, as upstream");
    let overlay = validate(&[], &with(required_env(), "FEATURE_GATES", "NodeOverlay=true")).unwrap();
    assert!(overlay.feature_gates.node_overlay && overlay.feature_gates.enabled_unimplemented.is_empty());
}

#[test]
fn a_bad_feature_gate_names_the_gate_and_the_known_ones() {
    let err = error_of(&[], &with(required_env(), "FEATURE_GATES", "NodeRepiar=true"));
    assert_eq!(
        err,
        "invalid setting --feature-gates (FEATURE_GATES): unknown gate \"NodeRepiar\"; known gates: NodeRepair, \
         SpotToSpotConsolidation, NodeOverlay, StaticCapacity (upstream's ReservedCapacity, CapacityBuffer are \
         accepted but not implemented)"
    );
    let err = error_of(&[], &with(required_env(), "FEATURE_GATES", "NodeRepair=yes"));
    assert_eq!(
        err,
        "invalid setting --feature-gates (FEATURE_GATES): gate NodeRepair: must be true or false, got \"yes\""
    );
    let err =
        error_of(&[], &with(required_env(), "FEATURE_GATES", "NodeRepair=true;SpotToSpotConsolidation=true"));
    assert!(err.contains("gate NodeRepair: must be true or false"), "{err}");
    let err = error_of(&[], &with(required_env(), "FEATURE_GATES", "NodeRepair"));
    assert!(err.ends_with("\"NodeRepair\" is not of the form Gate=true or Gate=false"), "{err}");
}

#[test]
fn the_node_image_refresh_interval_is_a_duration_of_at_least_a_second() {
    let env = |value: &str| with(required_env(), "NODE_IMAGE_REFRESH_INTERVAL", value);
    assert_eq!(
        error_of(&[], &env("500ms")),
        "invalid setting --node-image-refresh-interval (NODE_IMAGE_REFRESH_INTERVAL): must be at least 1s, got \"500ms\""
    );
    assert!(error_of(&[], &env("6 hours")).contains("must be a positive duration"));
    assert_eq!(validate(&[], &env("2s")).unwrap().node_image_refresh_interval, Duration::from_secs(2));
    assert_eq!(validate(&[], &env("")).unwrap().node_image_refresh_interval, Duration::from_secs(6 * 3600));
}
