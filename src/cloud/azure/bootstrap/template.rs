//! The bootstrap script itself: every variable of the Azure provider's cse_cmd.sh.gtpl, in its order
//! and with its quoting, followed by the node image's provisioning entry point.
//!
//! Values are written into a shell script, so each is checked: an unquoted value may not contain
//! whitespace or shell syntax, a quoted one no `"`, `\`, `$`, backquote or newline. Everything that
//! comes from users is validated long before, so a refusal here names the setting that let it through.

use super::kubelet::{self, NodeKubelet};
use super::oscontent::{containerd_config, os_settings};
use super::{gpu, BootstrapError, BootstrapSettings, NodeBootstrap};
use crate::apis::aksnodeclass::LocalDnsMode;
use crate::cloud::azure::imagefamily::minor_version;
use crate::cloud::azure::subnet::SubnetId;

/// AKS's binary mirror (aksbootstrap.go globalAKSMirror).
const AKS_MIRROR: &str = "https://acs-mirror.azureedge.net";
/// Azure CNI and the reference CNI plugins the node image installs (aksbootstrap.go applyOptions).
const AZURE_CNI_VERSION: &str = "v1.4.32";
const CNI_PLUGINS_VERSION: &str = "v1.1.1";
/// The first minor whose node image has the kubelet baked in: no `KUBE_BINARY_URL` (aksbootstrap.go).
const BAKED_KUBELET_FROM_MINOR: u64 = 34;
/// The first minor on the out-of-tree ACR credential provider (aksbootstrap.go CredentialProviderURL).
const CREDENTIAL_PROVIDER_FROM_MINOR: u64 = 30;

/// The script's opening: wait for the node image to finish unpacking its provisioning scripts.
const PROLOGUE: &str = r#"#!/bin/bash

set -o allexport # export all variables to subshells
echo '#EOF' >> /opt/azure/manifest.json # wait_for_file looks for this
mkdir -p /var/log/azure/Microsoft.Azure.Extensions.CustomScript/events # expected, but not created w/o CSE

echo $(date),$(hostname) > /var/log/azure/cluster-provision-cse-output.log;
for i in $(seq 1 1200); do
grep -Fq "EOF" /opt/azure/containers/provision.sh && break;
if [ $i -eq 1200 ]; then exit 100; else sleep 1; fi;
done;
"#;
/// The node image's entry point, detached so cloud-init finishes.
pub const PROVISION_START: &str = "/opt/azure/containers/provision_start.sh";

/// One `NAME=value` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Var {
    pub name: &'static str,
    pub quoted: bool,
    pub value: String,
}

/// The script from its variables.
pub fn render(vars: &[Var]) -> Result<String, BootstrapError> {
    let mut script = String::from(PROLOGUE);
    for var in vars {
        check(var)?;
        if var.quoted {
            script.push_str(&format!("{}=\"{}\"\n", var.name, var.value));
        } else {
            script.push_str(&format!("{}={}\n", var.name, var.value));
        }
    }
    script.push_str(&format!("/usr/bin/nohup /bin/bash -c \"/bin/bash {PROVISION_START}\"\n"));
    Ok(script)
}

fn check(var: &Var) -> Result<(), BootstrapError> {
    let bad = |c: char| matches!(c, '"' | '\\' | '$' | '`' | '\n' | '\r');
    let unsafe_unquoted = |c: char| {
        c.is_whitespace() || matches!(c, ';' | '&' | '|' | '<' | '>' | '(' | ')' | '\'' | '*' | '?')
    };
    if var.value.contains(bad) || (!var.quoted && var.value.contains(unsafe_unquoted)) {
        return Err(BootstrapError::UnsafeValue {
            variable: var.name,
            value: var.value.clone(),
            source_setting: source_of(var.name),
        });
    }
    Ok(())
}

/// Where a variable's value comes from, for the error that refuses it.
fn source_of(variable: &str) -> &'static str {
    match variable {
        "API_SERVER_NAME" => "--cluster-endpoint (CLUSTER_ENDPOINT)",
        "TENANT_ID" => "--tenant-id (AZURE_TENANT_ID)",
        "SUBSCRIPTION_ID" => "--subscription-id (AZURE_SUBSCRIPTION_ID)",
        "LOCATION" => "--location (LOCATION)",
        "RESOURCE_GROUP" => "--node-resource-group (AZURE_NODE_RESOURCE_GROUP)",
        "USER_ASSIGNED_IDENTITY_ID" => "--kubelet-identity-client-id (KUBELET_IDENTITY_CLIENT_ID)",
        "KUBE_CA_CRT" => "--cluster-ca-bundle (CLUSTER_CA_BUNDLE)",
        "TLS_BOOTSTRAP_TOKEN" => "--kubelet-bootstrap-token (KUBELET_BOOTSTRAP_TOKEN)",
        "SUBNET" | "VIRTUAL_NETWORK" | "VIRTUAL_NETWORK_RESOURCE_GROUP" => {
            "--vnet-subnet-id (VNET_SUBNET_ID) or AKSNodeClass spec.vnetSubnetID"
        }
        "KUBELET_FLAGS" => "the NodePool taints or the AKSNodeClass spec.kubelet",
        "KUBELET_NODE_LABELS" => "the NodePool labels",
        _ => "the operator settings",
    }
}

/// Every variable of the template, in its order.
pub fn variables(settings: &BootstrapSettings, node: &NodeBootstrap<'_>) -> Result<Vec<Var>, BootstrapError> {
    let class = node.class;
    let version = class.kubernetes_version.trim().trim_start_matches('v');
    let minor = minor_version(version)
        .filter(|_| version.split('.').count() == 3)
        .ok_or_else(|| BootstrapError::KubernetesVersion(class.kubernetes_version.clone()))?;
    if class.local_dns == Some(LocalDnsMode::Required) {
        return Err(BootstrapError::LocalDnsRequired);
    }
    let arch = node.arch.as_str();
    let os = os_settings(class.linux_os_config.as_ref())?;
    let nvidia = class.gpu_driver && gpu::is_nvidia_size(node.vm_size);
    let driver = nvidia.then(|| gpu::driver_for(node.vm_size));
    let subnet = SubnetId::parse(node.subnet_id).ok();
    let nsg = node.network_security_group.unwrap_or_default();
    let route_table = nsg
        .strip_prefix("aks-agentpool-")
        .and_then(|rest| rest.strip_suffix("-nsg"))
        .map(|id| format!("aks-agentpool-{id}-routetable"))
        .unwrap_or_default();
    let flags = kubelet::kubelet_flags(&NodeKubelet {
        minor,
        taints: node.taints,
        startup_taints: node.startup_taints,
        max_pods: node.kubelet.max_pods,
        kube_reserved: &node.kubelet.kube_reserved,
        cluster_dns: settings.dns_service_ip.as_deref(),
        config_flags: &node.kubelet.config_flags,
        swap: os.swap_file_mb.is_some(),
    });
    let kube_binary_url = if minor >= BAKED_KUBELET_FROM_MINOR {
        String::new()
    } else {
        format!("{AKS_MIRROR}/kubernetes/v{version}/binaries/kubernetes-node-linux-{arch}.tar.gz")
    };
    let credential_provider_url = if minor >= CREDENTIAL_PROVIDER_FROM_MINOR {
        let v = credential_provider_version(minor);
        format!("{AKS_MIRROR}/cloud-provider-azure/v{v}/binaries/azure-acr-credential-provider-linux-{arch}-v{v}.tar.gz")
    } else {
        String::new()
    };
    let api_server = settings
        .cluster_endpoint
        .split("://")
        .nth(1)
        .unwrap_or(&settings.cluster_endpoint)
        .split(['/', ':'])
        .next()
        .unwrap_or_default()
        .to_string();
    let b64 = |text: &str| azure_core::base64::encode(text);
    let t = |b: bool| b.to_string();

    let mut vars = Vars::default();
    vars.u("ADMINUSER", "azureuser".into());
    vars.u("MOBY_VERSION", String::new());
    vars.u("TENANT_ID", settings.tenant_id.clone());
    vars.u("KUBERNETES_VERSION", version.to_string());
    vars.u("HYPERKUBE_URL", String::new());
    vars.u("KUBE_BINARY_URL", kube_binary_url.clone());
    vars.u("CUSTOM_KUBE_BINARY_URL", String::new());
    vars.u("CREDENTIAL_PROVIDER_DOWNLOAD_URL", credential_provider_url);
    vars.u("KUBEPROXY_URL", String::new());
    vars.u("APISERVER_PUBLIC_KEY", String::new());
    vars.u("SUBSCRIPTION_ID", settings.subscription_id.clone());
    vars.u("RESOURCE_GROUP", settings.node_resource_group.clone());
    vars.u("LOCATION", settings.location.clone());
    // Only the cloud provider config reads these; standalone VMs are `standard` (staticvalues.go).
    vars.u("VM_TYPE", "standard".into());
    vars.u("SUBNET", subnet.as_ref().map(|s| s.subnet.clone()).unwrap_or_else(|| "aks-subnet".into()));
    vars.u("NETWORK_SECURITY_GROUP", nsg.to_string());
    vars.u("VIRTUAL_NETWORK", subnet.as_ref().map(|s| s.virtual_network.clone()).unwrap_or_default());
    vars.u(
        "VIRTUAL_NETWORK_RESOURCE_GROUP",
        subnet.as_ref().map(|s| s.resource_group.clone()).unwrap_or_default(),
    );
    vars.u("ROUTE_TABLE", route_table);
    vars.u("PRIMARY_AVAILABILITY_SET", String::new());
    vars.u("PRIMARY_SCALE_SET", String::new());
    vars.u("SERVICE_PRINCIPAL_CLIENT_ID", "msi".into());
    vars.u("NETWORK_PLUGIN", settings.network_plugin.clone());
    vars.q("NETWORK_POLICY", settings.network_policy.clone());
    vars.u(
        "VNET_CNI_PLUGINS_URL",
        format!("{AKS_MIRROR}/azure-cni/{AZURE_CNI_VERSION}/binaries/azure-vnet-cni-linux-{arch}-{AZURE_CNI_VERSION}.tgz"),
    );
    vars.u(
        "CNI_PLUGINS_URL",
        format!("{AKS_MIRROR}/cni-plugins/{CNI_PLUGINS_VERSION}/binaries/cni-plugins-linux-{arch}-{CNI_PLUGINS_VERSION}.tgz"),
    );
    // The Azure cloud provider's rate limits and backoff (staticvalues.go).
    for (name, value) in [
        ("CLOUDPROVIDER_BACKOFF", "true"),
        ("CLOUDPROVIDER_BACKOFF_MODE", "v2"),
        ("CLOUDPROVIDER_BACKOFF_RETRIES", "6"),
        ("CLOUDPROVIDER_BACKOFF_EXPONENT", "0"),
        ("CLOUDPROVIDER_BACKOFF_DURATION", "5"),
        ("CLOUDPROVIDER_BACKOFF_JITTER", "0"),
        ("CLOUDPROVIDER_RATELIMIT", "true"),
        ("CLOUDPROVIDER_RATELIMIT_QPS", "10"),
        ("CLOUDPROVIDER_RATELIMIT_QPS_WRITE", "10"),
        ("CLOUDPROVIDER_RATELIMIT_BUCKET", "100"),
        ("CLOUDPROVIDER_RATELIMIT_BUCKET_WRITE", "100"),
        ("LOAD_BALANCER_DISABLE_OUTBOUND_SNAT", "false"),
        ("USE_MANAGED_IDENTITY_EXTENSION", "true"),
        ("USE_INSTANCE_METADATA", "true"),
        ("LOAD_BALANCER_SKU", "Standard"),
        ("EXCLUDE_MASTER_FROM_STANDARD_LB", "true"),
        ("MAXIMUM_LOADBALANCER_RULE_COUNT", "250"),
        ("CONTAINER_RUNTIME", "containerd"),
        ("CLI_TOOL", "ctr"),
        ("CONTAINERD_DOWNLOAD_URL_BASE", ""),
        ("NETWORK_MODE", ""),
    ] {
        vars.u(name, value.into());
    }
    vars.u("KUBE_BINARY_URL", kube_binary_url);
    vars.u("USER_ASSIGNED_IDENTITY_ID", settings.kubelet_identity_client_id.clone());
    vars.u("API_SERVER_NAME", api_server);
    vars.u("IS_VHD", "true".into());
    vars.u("GPU_NODE", t(nvidia));
    vars.u("SGX_NODE", "false".into());
    vars.u("MIG_NODE", "false".into());
    vars.u("CONFIG_GPU_DRIVER_IF_NEEDED", t(nvidia));
    // AKS's managed device plugin is off in self-hosted mode (staticvalues.go); the NVIDIA device plugin
    // DaemonSet advertises nvidia.com/gpu once the driver is in.
    vars.u("ENABLE_GPU_DEVICE_PLUGIN_IF_NEEDED", "false".into());
    for name in [
        "TELEPORTD_PLUGIN_DOWNLOAD_URL",
        "CONTAINERD_VERSION",
        "CONTAINERD_PACKAGE_URL",
        "RUNC_VERSION",
        "RUNC_PACKAGE_URL",
    ] {
        vars.u(name, String::new());
    }
    vars.q("ENABLE_HOSTS_CONFIG_AGENT", "false".into());
    vars.q("DISABLE_SSH", "false".into());
    vars.q("NEEDS_CONTAINERD", "true".into());
    vars.q("TELEPORT_ENABLED", "false".into());
    vars.q("SHOULD_CONFIGURE_HTTP_PROXY", "false".into());
    vars.q("SHOULD_CONFIGURE_HTTP_PROXY_CA", "false".into());
    vars.q("HTTP_PROXY_TRUSTED_CA", String::new());
    vars.q("SHOULD_CONFIGURE_CUSTOM_CA_TRUST", "false".into());
    vars.q("CUSTOM_CA_TRUST_COUNT", "0".into());
    vars.q("IS_KRUSTLET", "false".into());
    vars.q("GPU_NEEDS_FABRIC_MANAGER", "false".into());
    vars.q("NEEDS_DOCKER_LOGIN", "false".into());
    vars.q("IPV6_DUAL_STACK_ENABLED", "false".into());
    vars.q("OUTBOUND_COMMAND", "curl -v --insecure --proxy-insecure https://mcr.microsoft.com/v2/".into());
    vars.q("ENABLE_UNATTENDED_UPGRADES", "false".into());
    // Karpenter does not support kubenet, whose bridge this guards (staticvalues.go).
    vars.q("ENSURE_NO_DUPE_PROMISCUOUS_BRIDGE", "false".into());
    vars.q("SHOULD_CONFIG_SWAP_FILE", t(os.swap_file_mb.is_some()));
    vars.q("SHOULD_CONFIG_TRANSPARENT_HUGE_PAGE", t(!os.thp_enabled.is_empty() || !os.thp_defrag.is_empty()));
    vars.q("TARGET_CLOUD", "AzurePublicCloud".into());
    vars.q("TARGET_ENVIRONMENT", "AzurePublicCloud".into());
    vars.q("CUSTOM_ENV_JSON", String::new());
    vars.q("IS_CUSTOM_CLOUD", "false".into());
    vars.q("CSE_HELPERS_FILEPATH", "/opt/azure/containers/provision_source.sh".into());
    vars.q("CSE_DISTRO_HELPERS_FILEPATH", "/opt/azure/containers/provision_source_distro.sh".into());
    vars.q("CSE_INSTALL_FILEPATH", "/opt/azure/containers/provision_installs.sh".into());
    vars.q("CSE_DISTRO_INSTALL_FILEPATH", "/opt/azure/containers/provision_installs_distro.sh".into());
    vars.q("CSE_CONFIG_FILEPATH", "/opt/azure/containers/provision_configs.sh".into());
    vars.q("AZURE_PRIVATE_REGISTRY_SERVER", String::new());
    vars.q("HAS_CUSTOM_SEARCH_DOMAIN", "false".into());
    vars.q("CUSTOM_SEARCH_DOMAIN_FILEPATH", "/opt/azure/containers/setup-custom-search-domains.sh".into());
    vars.q("HTTP_PROXY_URLS", String::new());
    vars.q("HTTPS_PROXY_URLS", String::new());
    vars.q("NO_PROXY_URLS", String::new());
    // The kubelet joins with the bootstrap token and gets its client certificate through a CSR.
    vars.q("ENABLE_TLS_BOOTSTRAPPING", "true".into());
    vars.q("ENABLE_SECURE_TLS_BOOTSTRAPPING", "false".into());
    vars.q("ENABLE_KUBELET_SERVING_CERTIFICATE_ROTATION", "false".into());
    vars.q("DHCPV6_SERVICE_FILEPATH", String::new());
    vars.q("DHCPV6_CONFIG_FILEPATH", String::new());
    vars.q("THP_ENABLED", os.thp_enabled.clone());
    vars.q("THP_DEFRAG", os.thp_defrag.clone());
    vars.q("SERVICE_PRINCIPAL_FILE_CONTENT", b64("msi"));
    vars.q("KUBELET_CLIENT_CONTENT", String::new());
    vars.q("KUBELET_CLIENT_CERT_CONTENT", String::new());
    vars.q("KUBELET_CONFIG_FILE_ENABLED", "false".into());
    vars.q("KUBELET_CONFIG_FILE_CONTENT", String::new());
    vars.q("SWAP_FILE_SIZE_MB", os.swap_file_mb.unwrap_or(0).to_string());
    vars.q("GPU_IMAGE_SHA", driver.map(|d| d.image_sha).unwrap_or_default().into());
    vars.q("GPU_DRIVER_VERSION", driver.map(|d| d.version).unwrap_or_default().into());
    vars.q("GPU_DRIVER_TYPE", driver.map(|d| d.driver_type).unwrap_or_default().into());
    vars.q("GPU_INSTANCE_PROFILE", String::new());
    vars.q("CUSTOM_SEARCH_DOMAIN_NAME", String::new());
    vars.q("CUSTOM_SEARCH_REALM_USER", String::new());
    vars.q("CUSTOM_SEARCH_REALM_PASSWORD", String::new());
    vars.q("MESSAGE_OF_THE_DAY", String::new());
    vars.q("HAS_KUBELET_DISK_TYPE", "false".into());
    vars.q("NEEDS_CGROUPV2", "true".into());
    vars.q("SYSCTL_CONTENT", b64(&os.sysctl_conf));
    vars.q("TLS_BOOTSTRAP_TOKEN", settings.bootstrap_token.expose().to_string());
    vars.q("KUBELET_FLAGS", kubelet::render_flags(&flags));
    vars.q("KUBELET_NODE_LABELS", kubelet::node_labels_flag(node.labels));
    vars.q("AZURE_ENVIRONMENT_FILEPATH", String::new());
    vars.q("KUBE_CA_CRT", settings.ca_bundle_base64.clone());
    vars.q("CONTAINERD_CONFIG_CONTENT", b64(&containerd_config(nvidia)));
    vars.q("IS_KATA", "false".into());
    vars.q("MCR_REPOSITORY_BASE", "mcr.microsoft.com".into());
    vars.u("ENABLE_IMDS_RESTRICTION", "false".into());
    vars.u("INSERT_IMDS_RESTRICTION_RULE_TO_MANGLE_TABLE", "false".into());
    vars.u("CSE_TIMEOUT", "15m".into());
    Ok(vars.0)
}

/// The variables in the order they are added.
#[derive(Default)]
struct Vars(Vec<Var>);

impl Vars {
    /// `NAME=value`.
    fn u(&mut self, name: &'static str, value: String) {
        self.0.push(Var { name, quoted: false, value });
    }

    /// `NAME="value"`.
    fn q(&mut self, name: &'static str, value: String) {
        self.0.push(Var { name, quoted: true, value });
    }
}

/// The ACR credential provider release of a Kubernetes minor (aksbootstrap.go CredentialProviderURL).
fn credential_provider_version(minor: u64) -> &'static str {
    match minor {
        ..=30 => "1.30.12",
        31 => "1.31.6",
        32 => "1.32.5",
        _ => "1.33.0",
    }
}
