//! Tests of the settings as upstream's installs give them: the environment of upstream's self-hosted
//! values template, `MIN_VALUES_POLICY`, `NODE_OSDISK_DISKENCRYPTIONSET_ID`, and the upstream-only
//! settings that are accepted without effect, refused, or rejected for their form.

use std::collections::BTreeMap;

use super::*;

const SUBSCRIPTION: &str = "00000000-0000-0000-0000-000000000001";
const DES: &str = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/keys/providers/\
                   Microsoft.Compute/diskEncryptionSets/node-disks";

fn env_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The variables of upstream's karpenter-values-template.yaml (Azure/karpenter-provider-azure), filled
/// as hack/deploy/configure-values.sh fills them for an Azure CNI overlay cluster.
fn upstream_template_env() -> BTreeMap<String, String> {
    env_of(&[
        ("DISABLE_LEADER_ELECTION", "true"),
        ("CLUSTER_NAME", "prod"),
        ("CLUSTER_ENDPOINT", "https://prod-dns-1234.hcp.eastus.azmk8s.io:443"),
        ("KUBELET_BOOTSTRAP_TOKEN", "abcdef.0123456789abcdef"),
        ("SSH_PUBLIC_KEY", "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC0 me@host azureuser"),
        ("NETWORK_PLUGIN", "azure"),
        ("NETWORK_PLUGIN_MODE", "overlay"),
        ("NETWORK_POLICY", ""),
        ("NETWORK_DATAPLANE", "cilium"),
        (
            "VNET_SUBNET_ID",
            "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/MC_rg_prod_eastus/providers/\
             Microsoft.Network/virtualNetworks/aks-vnet-1234/subnets/aks-subnet",
        ),
        ("VNET_GUID", "a519e60a-cac0-40b2-b883-084477fe6f5c"),
        (
            "NODE_IDENTITIES",
            "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/MC_rg_prod_eastus/providers/\
             Microsoft.ManagedIdentity/userAssignedIdentities/prod-agentpool",
        ),
        ("AZURE_SUBSCRIPTION_ID", SUBSCRIPTION),
        ("LOCATION", "eastus"),
        ("KUBELET_IDENTITY_CLIENT_ID", "00000000-0000-0000-0000-00000000c1d1"),
        ("AZURE_NODE_RESOURCE_GROUP", "MC_rg_prod_eastus"),
        ("ENABLE_AZURE_SDK_LOGGING", "false"),
        ("USE_SIG", "false"),
        ("SIG_ACCESS_TOKEN_SERVER_URL", ""),
        ("SIG_ACCESS_TOKEN_SCOPE", ""),
        ("SIG_SUBSCRIPTION_ID", ""),
        ("PROVISION_MODE", "aksscriptless"),
        ("AKS_MACHINES_POOL_NAME", "testmpool"),
        ("ARM_RESOURCE_GROUP", "rg"),
    ])
}

fn validate(args: &[&str], env: &BTreeMap<String, String>) -> Result<Validated, OptionsError> {
    Options::parse_from(std::iter::once("karpenter-azure").chain(args.iter().copied()), env)?.validate()
}

fn with(mut env: BTreeMap<String, String>, key: &str, value: &str) -> BTreeMap<String, String> {
    env.insert(key.to_string(), value.to_string());
    env
}

#[test]
fn the_environment_of_upstreams_values_template_starts_the_controller() {
    let v = validate(&[], &upstream_template_env()).expect("upstream's settings validate");
    assert_eq!(v.cluster_name, "prod");
    assert!(v.leader_election.is_none(), "DISABLE_LEADER_ELECTION is read");
    assert_eq!(v.azure.resource_group.as_deref(), Some("rg"));
    assert_eq!(v.node_identities.len(), 1);
    // Only the values that differ from upstream's defaults are reported.
    let reported: Vec<&str> = v.without_effect.iter().map(|w| w.setting.env).collect();
    assert_eq!(reported, ["AKS_MACHINES_POOL_NAME", "ENABLE_AZURE_SDK_LOGGING"]);
    assert_eq!(v.without_effect[0].value, "testmpool");
    assert!(v.without_effect[1].reason.contains("Azure SDK"), "{:?}", v.without_effect[1]);
}

#[test]
fn upstream_only_settings_are_flags_too_and_go_booleans_need_no_value() {
    let v = validate(
        &["--use-sig=false", "--enable-azure-sdk-logging", "--kube-client-qps", "50"],
        &upstream_template_env(),
    )
    .expect("upstream's flags are accepted");
    let reported: Vec<&str> = v.without_effect.iter().map(|w| w.setting.flag).collect();
    assert_eq!(reported, ["aks-machines-pool-name", "kube-client-qps"], "a flag wins over its variable");
    let env = with(upstream_template_env(), "IGNORE_DRA_REQUESTS", "false");
    let v = validate(&[], &env).unwrap();
    assert!(v
        .without_effect
        .iter()
        .any(|w| w.setting.env == "IGNORE_DRA_REQUESTS" && w.reason.contains("Dynamic Resource Allocation")));
    assert!(upstream_only::env_names().any(|name| name == "WEBHOOK_PORT"));
}

#[test]
fn upstream_modes_this_controller_cannot_run_are_refused_with_the_fix() {
    let cases = [
        ("PROVISION_MODE", "aksmachineapi", "only aksscriptless is implemented"),
        ("USE_SIG", "true", "set false, or leave it unset"),
        ("ARM_CLOUD", "AzureUSGovernmentCloud", "set ARM_ENDPOINT and AZURE_AUTHORITY_HOST"),
        (
            "AZURE_ENVIRONMENT_FILEPATH",
            "/etc/kubernetes/akscustom.json",
            "set ARM_ENDPOINT and AZURE_AUTHORITY_HOST",
        ),
    ];
    for (name, value, fix) in cases {
        let err = validate(&[], &with(upstream_template_env(), name, value)).expect_err(name).to_string();
        assert!(err.contains(name) && err.contains(value) && err.contains(fix), "{name}: {err}");
    }
    // Upstream's defaults are silent.
    let env = with(with(upstream_template_env(), "ARM_CLOUD", "AZUREPUBLICCLOUD"), "WEBHOOK_PORT", "8443");
    assert_eq!(validate(&[], &env).unwrap().without_effect.len(), 2);
}

#[test]
fn malformed_upstream_only_values_are_rejected_naming_the_setting() {
    let cases = [
        ("USE_SIG", "maybe", "--use-sig (USE_SIG)"),
        ("KUBE_CLIENT_QPS", "fast", "--kube-client-qps (KUBE_CLIENT_QPS): must be a whole number"),
        (
            "PROVIDER_BATCH_IDLE_DURATION",
            "soon",
            "--provider-batch-idle-duration (PROVIDER_BATCH_IDLE_DURATION)",
        ),
        ("PROVISION_MODE", "scriptless", "must be one of \"aksscriptless\""),
        ("PREFERENCE_POLICY", "Sometimes", "--preference-policy (PREFERENCE_POLICY): must be one of"),
    ];
    for (name, value, message) in cases {
        let err = validate(&[], &with(upstream_template_env(), name, value)).expect_err(name).to_string();
        assert!(err.contains(message), "{name}={value}: expected {message:?} in {err}");
    }
}

#[test]
fn min_values_policy_is_strict_unless_best_effort_is_asked_for() {
    let env = upstream_template_env();
    assert_eq!(validate(&[], &env).unwrap().min_values_policy, MinValuesPolicy::Strict);
    let best = with(env.clone(), "MIN_VALUES_POLICY", "BestEffort");
    assert_eq!(validate(&[], &best).unwrap().min_values_policy, MinValuesPolicy::BestEffort);
    assert_eq!(
        validate(&["--min-values-policy", "Strict"], &best).unwrap().min_values_policy,
        MinValuesPolicy::Strict
    );
    let empty = with(env.clone(), "MIN_VALUES_POLICY", "");
    assert_eq!(validate(&[], &empty).unwrap().min_values_policy, MinValuesPolicy::Strict);
    let err = validate(&[], &with(env, "MIN_VALUES_POLICY", "besteffort")).unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid setting --min-values-policy (MIN_VALUES_POLICY): must be one of \"Strict\", \"BestEffort\", \
         got \"besteffort\""
    );
}

#[test]
fn preference_policy_is_respect_unless_ignore_is_asked_for() {
    let env = upstream_template_env();
    assert_eq!(validate(&[], &env).unwrap().preference_policy, PreferencePolicy::Respect);
    let ignore = with(env.clone(), "PREFERENCE_POLICY", "Ignore");
    assert_eq!(validate(&[], &ignore).unwrap().preference_policy, PreferencePolicy::Ignore);
    let empty = with(env, "PREFERENCE_POLICY", "");
    assert_eq!(validate(&[], &empty).unwrap().preference_policy, PreferencePolicy::Respect);
}

#[test]
fn the_os_disk_encryption_set_must_be_a_disk_encryption_set_id() {
    let env = upstream_template_env();
    assert_eq!(validate(&[], &env).unwrap().os_disk_encryption_set_id, None);
    let given = with(env.clone(), "NODE_OSDISK_DISKENCRYPTIONSET_ID", DES);
    assert_eq!(validate(&[], &given).unwrap().os_disk_encryption_set_id.as_deref(), Some(DES));
    // ARM compares the literal parts case-insensitively, as upstream's arm.ParseResourceID does.
    let lower = DES.replace("Microsoft.Compute/diskEncryptionSets", "microsoft.compute/diskencryptionsets");
    let given = with(env.clone(), "NODE_OSDISK_DISKENCRYPTIONSET_ID", &lower);
    assert!(validate(&[], &given).is_ok());
    for bad in [
        "node-disks",
        "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/keys/providers/Microsoft.KeyVault/vaults/kv",
        "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/keys/providers/Microsoft.Compute/diskEncryptionSets/",
        "/subscriptions//resourceGroups/keys/providers/Microsoft.Compute/diskEncryptionSets/node-disks",
    ] {
        let err = validate(&[], &with(env.clone(), "NODE_OSDISK_DISKENCRYPTIONSET_ID", bad)).unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with(
                "invalid setting --node-osdisk-diskencryptionset-id (NODE_OSDISK_DISKENCRYPTIONSET_ID): \
                 must be a disk encryption set ID like /subscriptions/<id>/resourceGroups/<group>/providers/\
                 Microsoft.Compute/diskEncryptionSets/<name>"
            ),
            "{bad}: {message}"
        );
    }
}
