//! The chart's `settings` as the controller's environment (`helm template`, no cluster): every value
//! becomes the variable of `src/operator/options.rs` that the controller actually reads, a missing
//! required value or a bootstrap token in the wrong place fails with a message naming it, and the schema
//! rejects values of the wrong type or form before anything renders.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

use super::chart::{pod_spec, render, render_result};
use super::helm::find;

/// The controller container's environment: a literal value as is, a Secret as `secret:<name>/<key>`,
/// a field as `field:<path>`.
pub fn env(docs: &[Value]) -> BTreeMap<String, String> {
    let list = pod_spec(docs)["containers"][0]["env"].as_array().expect("env list").clone();
    let mut env = BTreeMap::new();
    for var in list {
        let name = var["name"].as_str().expect("env name").to_string();
        let value = if let Some(value) = var["value"].as_str() {
            value.to_string()
        } else if let Some(secret) = var["valueFrom"].get("secretKeyRef") {
            format!("secret:{}/{}", secret["name"].as_str().unwrap(), secret["key"].as_str().unwrap())
        } else if let Some(field) = var["valueFrom"].get("fieldRef") {
            format!("field:{}", field["fieldPath"].as_str().unwrap())
        } else {
            panic!("env {name}: neither a value nor a reference: {var}");
        };
        assert!(env.insert(name.clone(), value).is_none(), "env {name} is set twice");
    }
    env
}

/// Every environment variable `karpenter-azure controller` reads, from its `--help` (`[env: NAME=]`).
pub fn controller_env_names() -> BTreeSet<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter-azure"))
        .args(["controller", "--help"])
        .output()
        .expect("running karpenter-azure controller --help");
    let help = String::from_utf8_lossy(&output.stdout);
    help.split("[env: ")
        .skip(1)
        .map(|rest| rest.split(['=', ']']).next().unwrap_or_default().to_string())
        .collect()
}

/// The subnet of the CI values.
const SUBNET: &str = concat!(
    "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg",
    "/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
);
const IDENTITY: &str = concat!(
    "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg",
    "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/nodes"
);

#[test]
fn every_setting_reaches_the_controller_as_the_variable_it_reads() {
    // The CI values with every optional setting given and every default changed.
    let docs = render(&[
        "settings.clientId=00000000-0000-0000-0000-000000000003",
        "settings.clientSecretRef.name=azure-credentials",
        "settings.clientSecretRef.key=client-secret",
        "settings.networkPlugin=none",
        "settings.networkPluginMode=",
        "settings.networkPolicy=calico",
        "settings.networkDataplane=azure",
        "settings.linuxAdminUsername=ops",
        &format!("settings.nodeIdentities={{{IDENTITY},{IDENTITY}2}}"),
        "settings.kubeletIdentityClientId=00000000-0000-0000-0000-000000000004",
        "settings.clusterCaBundle=LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t",
        "settings.dnsServiceIp=10.2.0.10",
        "settings.vnetGuid=a519e60a-cac0-40b2-b883-084477fe6f5c",
        "--set-json=settings.vmMemoryOverheadPercent=0.05",
        "settings.tags.team=platform",
        "--set-string=settings.tags.cost-center=42",
        "settings.batchIdleDuration=500ms",
        "settings.batchMaxDuration=1m30s",
        "settings.armEndpoint=https://management.usgovcloudapi.net",
        "settings.authorityHost=https://login.microsoftonline.us",
        "settings.retailPricesUrl=https://prices.example.com/api/retail/prices",
        "settings.featureGates.nodeRepair=true",
        "settings.featureGates.reservedCapacity=false",
        "logLevel=debug",
        "logFormat=text",
        "controller.metrics.port=9090",
        "controller.healthProbe.port=9091",
        "controller.env[0].name=KUBE_EXTRA",
        "--set-string=controller.env[0].value=1",
    ]);
    let expected: BTreeMap<String, String> = [
        ("CLUSTER_NAME", "e2e-cluster"),
        ("CLUSTER_ENDPOINT", "https://e2e-cluster-dns.hcp.eastus.azmk8s.io:443"),
        ("AZURE_SUBSCRIPTION_ID", "00000000-0000-0000-0000-000000000001"),
        ("AZURE_TENANT_ID", "00000000-0000-0000-0000-000000000002"),
        ("AZURE_CLIENT_ID", "00000000-0000-0000-0000-000000000003"),
        ("AZURE_CLIENT_SECRET", "secret:azure-credentials/client-secret"),
        ("LOCATION", "eastus"),
        ("ARM_RESOURCE_GROUP", "rg"),
        ("AZURE_NODE_RESOURCE_GROUP", "MC_rg_e2e-cluster_eastus"),
        ("VNET_SUBNET_ID", SUBNET),
        ("KUBELET_BOOTSTRAP_TOKEN", "secret:karpenter-bootstrap-token/token"),
        (
            "SSH_PUBLIC_KEY",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEe2ee2ee2ee2ee2ee2ee2ee2ee2ee2ee2ee2ee2ee2e e2e",
        ),
        ("LINUX_ADMIN_USERNAME", "ops"),
        ("NETWORK_PLUGIN", "none"),
        ("NETWORK_PLUGIN_MODE", ""),
        ("NETWORK_POLICY", "calico"),
        ("NETWORK_DATAPLANE", "azure"),
        ("NODE_IDENTITIES", &format!("{IDENTITY},{IDENTITY}2")),
        ("KUBELET_IDENTITY_CLIENT_ID", "00000000-0000-0000-0000-000000000004"),
        ("CLUSTER_CA_BUNDLE", "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"),
        ("DNS_SERVICE_IP", "10.2.0.10"),
        ("VNET_GUID", "a519e60a-cac0-40b2-b883-084477fe6f5c"),
        ("VM_MEMORY_OVERHEAD_PERCENT", "0.05"),
        ("ADDITIONAL_TAGS", "cost-center=42,team=platform"),
        ("BATCH_IDLE_DURATION", "500ms"),
        ("BATCH_MAX_DURATION", "1m30s"),
        ("ARM_ENDPOINT", "https://management.usgovcloudapi.net"),
        ("AZURE_AUTHORITY_HOST", "https://login.microsoftonline.us"),
        ("RETAIL_PRICES_URL", "https://prices.example.com/api/retail/prices"),
        (
            "FEATURE_GATES",
            "NodeRepair=true,ReservedCapacity=false,SpotToSpotConsolidation=false,StaticCapacity=false",
        ),
        ("LOG_LEVEL", "debug"),
        ("LOG_FORMAT", "text"),
        ("METRICS_PORT", "9090"),
        ("HEALTH_PROBE_PORT", "9091"),
        ("LEADER_ELECTION_NAME", "karpenter-leader-election"),
        ("LEADER_ELECTION_NAMESPACE", "field:metadata.namespace"),
        ("SYSTEM_NAMESPACE", "field:metadata.namespace"),
        ("KUBE_EXTRA", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let rendered = env(&docs);
    assert_eq!(rendered, expected);

    // Every variable of the chart (but the user's own) is one the controller reads: a typo in a name
    // would otherwise leave a setting silently at its default.
    let known = controller_env_names();
    assert!(known.contains("CLUSTER_NAME") && known.len() > 30, "--help lists the variables: {known:?}");
    let unknown: Vec<&String> =
        rendered.keys().filter(|k| *k != "KUBE_EXTRA" && !known.contains(*k)).collect();
    assert!(unknown.is_empty(), "the chart sets variables the controller does not read: {unknown:?}");
}

#[test]
fn optional_settings_left_empty_are_not_set_so_the_controller_defaults_apply() {
    let rendered = env(&render(&[]));
    let names: Vec<&str> = rendered.keys().map(String::as_str).collect();
    let mut expected = vec![
        "AZURE_NODE_RESOURCE_GROUP",
        "AZURE_SUBSCRIPTION_ID",
        "AZURE_TENANT_ID",
        "ARM_RESOURCE_GROUP",
        "BATCH_IDLE_DURATION",
        "BATCH_MAX_DURATION",
        "CLUSTER_ENDPOINT",
        "CLUSTER_NAME",
        "FEATURE_GATES",
        "HEALTH_PROBE_PORT",
        "KUBELET_BOOTSTRAP_TOKEN",
        "LEADER_ELECTION_NAME",
        "LEADER_ELECTION_NAMESPACE",
        "LINUX_ADMIN_USERNAME",
        "LOCATION",
        "LOG_FORMAT",
        "LOG_LEVEL",
        "METRICS_PORT",
        "NETWORK_DATAPLANE",
        "NETWORK_PLUGIN",
        "NETWORK_PLUGIN_MODE",
        "NETWORK_POLICY",
        "SSH_PUBLIC_KEY",
        "SYSTEM_NAMESPACE",
        "VM_MEMORY_OVERHEAD_PERCENT",
        "VNET_SUBNET_ID",
    ];
    expected.sort();
    assert_eq!(names, expected);
    // The chart's defaults are the controller's (operator::defaults).
    for (name, value) in [
        ("BATCH_IDLE_DURATION", "1s"),
        ("BATCH_MAX_DURATION", "10s"),
        ("LOG_LEVEL", "info"),
        ("LOG_FORMAT", "json"),
        ("METRICS_PORT", "8080"),
        ("HEALTH_PROBE_PORT", "8081"),
        ("NETWORK_PLUGIN", "azure"),
        ("NETWORK_PLUGIN_MODE", "overlay"),
        ("NETWORK_POLICY", ""),
        ("NETWORK_DATAPLANE", "cilium"),
        ("VM_MEMORY_OVERHEAD_PERCENT", "0.075"),
        ("LINUX_ADMIN_USERNAME", "azureuser"),
        ("FEATURE_GATES", "NodeRepair=false,SpotToSpotConsolidation=false,StaticCapacity=false"),
    ] {
        assert_eq!(rendered[name], value, "{name}");
    }
}

#[test]
fn an_ssh_key_read_from_a_file_loses_its_trailing_newline() {
    // `--set-file settings.sshPublicKey=~/.ssh/id_ed25519.pub`, as the chart's README suggests.
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEe2ee2ee2ee2ee me@host";
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    std::io::Write::write_all(&mut file, format!("{key}\n").as_bytes()).expect("writing the key");
    let set = format!("--set-file=settings.sshPublicKey={}", file.path().display());
    assert_eq!(env(&render(&[&set]))["SSH_PUBLIC_KEY"], key);
}

#[test]
fn a_missing_required_value_fails_with_a_message_naming_it() {
    let cases = [
        ("settings.clusterName=", "settings.clusterName is required (CLUSTER_NAME)"),
        ("settings.clusterEndpoint=", "settings.clusterEndpoint is required (CLUSTER_ENDPOINT)"),
        ("settings.subscriptionId=", "settings.subscriptionId is required (AZURE_SUBSCRIPTION_ID)"),
        ("settings.location=", "settings.location is required (LOCATION)"),
        ("settings.nodeResourceGroup=", "settings.nodeResourceGroup is required (AZURE_NODE_RESOURCE_GROUP)"),
        ("settings.vnetSubnetId=", "settings.vnetSubnetId is required (VNET_SUBNET_ID)"),
        ("settings.sshPublicKey=", "settings.sshPublicKey is required (SSH_PUBLIC_KEY)"),
        (
            "settings.kubeletBootstrapTokenSecret.name=",
            "settings.kubeletBootstrapTokenSecret {name, key} or settings.kubeletBootstrapToken is required \
             (KUBELET_BOOTSTRAP_TOKEN)",
        ),
        ("settings.kubeletBootstrapTokenSecret.key=", "settings.kubeletBootstrapTokenSecret.key is required"),
        ("settings.clientSecretRef.name=creds", "settings.clientSecretRef.key is required"),
        ("image.repository=", "image.repository (or controller.image.repository) is required"),
        ("serviceAccount.create=false", "serviceAccount.name is required when serviceAccount.create"),
    ];
    for (set, message) in cases {
        let err = render_result(&[set]).err().unwrap_or_else(|| panic!("--set {set} rendered"));
        assert!(err.contains(message), "--set {set}: expected {message:?} in:\n{err}");
    }
    // Checks across values that a schema cannot express.
    let cases: [(&[&str], &str); 3] = [
        (
            &["settings.networkPlugin=none"],
            "settings.networkPluginMode must be \"\" when settings.networkPlugin is none",
        ),
        (
            &["controller.healthProbe.port=8080"],
            "controller.metrics.port and controller.healthProbe.port must differ",
        ),
        (&["settings.kubeletBootstrapToken=abcdef.0123456789abcdef"], "not both"),
    ];
    for (sets, message) in cases {
        let err = render_result(sets).err().unwrap_or_else(|| panic!("{sets:?} rendered"));
        assert!(err.contains(message), "{sets:?}: expected {message:?} in:\n{err}");
    }
}

#[test]
fn the_schema_rejects_values_of_the_wrong_type_or_form_with_the_path_and_the_reason() {
    let cases = [
        ("replicas=two", "at '/replicas': got string, want integer"),
        ("replicas=-1", "at '/replicas': minimum: got -1, want 0"),
        (
            "logLevel=verbose",
            "at '/logLevel': value must be one of 'trace', 'debug', 'info', 'warn', 'error'",
        ),
        ("logFormat=logfmt", "at '/logFormat': value must be one of 'json', 'text'"),
        (
            "settings.networkPlugin=kubenet",
            "at '/settings/networkPlugin': value must be one of 'azure', 'none'",
        ),
        (
            "settings.batchIdleDuration=1.5s",
            "at '/settings/batchIdleDuration': '1.5s' does not match pattern",
        ),
        (
            "settings.subscriptionId=my-subscription",
            "at '/settings/subscriptionId': 'my-subscription' does not match pattern",
        ),
        ("settings.vnetSubnetId=nodes", "at '/settings/vnetSubnetId': 'nodes' does not match pattern"),
        ("settings.kubeletBootstrapToken=secret", "at '/settings/kubeletBootstrapToken'"),
        ("settings.vmMemoryOverheadPercent=1", "at '/settings/vmMemoryOverheadPercent'"),
        ("settings.dnsServiceIp=kube-dns", "at '/settings/dnsServiceIp': 'kube-dns' does not match pattern"),
        ("settings.vnetGuid=vnet", "at '/settings/vnetGuid': 'vnet' does not match pattern"),
        ("controller.metrics.port=0", "at '/controller/metrics/port': minimum: got 0, want 1"),
        ("settings.clustername=typo", "at '/settings': additional properties 'clustername' not allowed"),
        ("replica=2", "additional properties 'replica' not allowed"),
        (
            "settings.featureGates.nodeRepiar=true",
            "at '/settings/featureGates': additional properties 'nodeRepiar' not allowed",
        ),
        (
            "settings.featureGates.nodeRepair=yes",
            "at '/settings/featureGates/nodeRepair': got string, want boolean",
        ),
        // The API server would refuse the Deployment: env values are strings.
        (
            "controller.env[0].name=X,controller.env[0].value=1",
            "at '/controller/env/0/value': got number, want string",
        ),
    ];
    for (set, message) in cases {
        let err = render_result(&[set]).err().unwrap_or_else(|| panic!("--set {set} rendered"));
        assert!(err.contains("values don't meet the specifications of the schema"), "--set {set}:\n{err}");
        assert!(err.contains(message), "--set {set}: expected {message:?} in:\n{err}");
    }
}

#[test]
fn a_bootstrap_token_given_as_a_value_is_kept_in_a_secret_and_rolls_the_pods_when_it_changes() {
    const TOKEN: &str = "abcdef.0123456789abcdef";
    let with_token = |token: &str| {
        render(&[
            "settings.kubeletBootstrapTokenSecret.name=",
            &format!("settings.kubeletBootstrapToken={token}"),
        ])
    };
    let docs = with_token(TOKEN);
    let secret = find(&docs, "Secret", Some("karpenter-azure-bootstrap-token"));
    use base64::Engine as _;
    let stored =
        base64::engine::general_purpose::STANDARD.decode(secret["data"]["token"].as_str().unwrap()).unwrap();
    assert_eq!(stored, TOKEN.as_bytes());
    assert_eq!(env(&docs)["KUBELET_BOOTSTRAP_TOKEN"], "secret:karpenter-azure-bootstrap-token/token");
    let deployment = serde_json::to_string(find(&docs, "Deployment", None)).unwrap();
    assert!(!deployment.contains(TOKEN), "the token is in the Deployment");

    let checksum = |docs: &[Value]| {
        find(docs, "Deployment", None)["spec"]["template"]["metadata"]["annotations"]
            ["checksum/bootstrap-token"]
            .as_str()
            .expect("checksum annotation")
            .to_string()
    };
    assert_ne!(checksum(&docs), checksum(&with_token("ghijkl.0123456789abcdef")));
    // With a Secret of the user's, the chart makes none.
    assert!(!render(&[]).iter().any(|d| d["kind"] == "Secret"));
}
