//! The controller's settings as they arrive: one clap argument per setting, each also readable from an
//! environment variable under upstream's name (Azure provider options.go and auth config.go, Karpenter
//! core options.go).
//!
//! Every value is kept as text here, so that [`Options::validate`](super::settings) can reject a bad one
//! with a message naming both the flag and the environment variable; clap alone would name only the flag.
//! Required settings are optional at this level for the same reason: a missing one reads
//! `missing setting --cluster-name (CLUSTER_NAME)` rather than clap's usage text.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;

use clap::{Args, Command, FromArgMatches};

use super::upstream_only::UpstreamOnly;
use crate::catalog::retail::DEFAULT_RETAIL_PRICES_URL;

/// A value that must never be printed: the kubelet bootstrap token and the client secret.
///
/// It has no `Display`, and its `Debug` shows only that a value is present, so neither `{:?}` of the
/// options nor an error message can leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that sends it (custom data, the token request).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

/// A setting as users know it: its flag and its environment variable(s), for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The long flag without dashes.
    pub flag: &'static str,
    pub env: &'static str,
    /// A second variable read when the first is unset (upstream accepts `ARM_*` for `AZURE_*`).
    pub fallback_env: Option<&'static str>,
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.fallback_env {
            Some(fallback) => write!(f, "--{} ({} or {})", self.flag, self.env, fallback),
            None => write!(f, "--{} ({})", self.flag, self.env),
        }
    }
}

/// Why the settings were rejected. Messages never contain a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error("missing setting {0}")]
    Missing(Setting),
    #[error("invalid setting {setting}: {reason}")]
    Invalid { setting: Setting, reason: String },
    /// An unknown flag or a flag without its value; the first line of clap's message.
    #[error("{0}")]
    Usage(String),
}

impl OptionsError {
    /// A bounded label for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            OptionsError::Missing(_) => "MissingSetting",
            OptionsError::Invalid { .. } => "InvalidSetting",
            OptionsError::Usage(_) => "InvalidArguments",
        }
    }
}

/// Upstream's defaults, named so tests and the chart can refer to them.
pub mod defaults {
    /// Azure provider options.go.
    pub const NETWORK_PLUGIN: &str = "azure";
    pub const NETWORK_PLUGIN_MODE: &str = "overlay";
    pub const NETWORK_DATAPLANE: &str = "cilium";
    pub const VM_MEMORY_OVERHEAD_PERCENT: &str = "0.075";
    pub const LINUX_ADMIN_USERNAME: &str = "azureuser";
    /// Karpenter core options.go: the provisioning batch window.
    pub const BATCH_IDLE_DURATION: &str = "1s";
    pub const BATCH_MAX_DURATION: &str = "10s";
    pub const LOG_LEVEL: &str = "info";
    pub const LOG_FORMAT: &str = "json";
    /// Karpenter core options.go.
    pub const MIN_VALUES_POLICY: &str = "Strict";
    pub const PREFERENCE_POLICY: &str = "Respect";
    /// Ours: how often node image versions are looked up again
    /// (`crate::cloud::azure::nodeclass::checks::IMAGE_REFRESH`).
    pub const NODE_IMAGE_REFRESH_INTERVAL: &str = "6h";
    pub const METRICS_PORT: &str = "8080";
    pub const HEALTH_PROBE_PORT: &str = "8081";
    pub const LEADER_ELECTION_NAME: &str = "karpenter-leader-election";
    /// NAP runs the controller in kube-system; used when neither the lease namespace nor
    /// SYSTEM_NAMESPACE is set.
    pub const SYSTEM_NAMESPACE: &str = "kube-system";
    /// Public cloud; sovereign clouds and the test fake override these.
    pub const ARM_ENDPOINT: &str = "https://management.azure.com";
    pub const AUTHORITY_HOST: &str = "https://login.microsoftonline.com";
}

/// The controller's settings, unvalidated. Flatten it into a subcommand, or read it with
/// [`Options::parse_from`] and an explicit environment.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct Options {
    /// The AKS cluster's name; tags every VM Karpenter creates.
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: Option<String>,
    /// The API server URL (https) the nodes join.
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    pub cluster_endpoint: Option<String>,

    /// The subscription the nodes are created in.
    #[arg(long, env = "AZURE_SUBSCRIPTION_ID")]
    pub subscription_id: Option<String>,
    #[arg(long, env = "ARM_SUBSCRIPTION_ID", hide = true)]
    pub arm_subscription_id: Option<String>,
    /// The Entra ID tenant; needed for workload identity and client secrets.
    #[arg(long, env = "AZURE_TENANT_ID")]
    pub tenant_id: Option<String>,
    #[arg(long, env = "ARM_TENANT_ID", hide = true)]
    pub arm_tenant_id: Option<String>,
    /// The controller identity's client ID (workload identity, client secret or a user-assigned
    /// managed identity).
    #[arg(long, env = "AZURE_CLIENT_ID")]
    pub client_id: Option<String>,
    /// The projected service account token; its presence selects workload identity.
    #[arg(long, env = "AZURE_FEDERATED_TOKEN_FILE")]
    pub federated_token_file: Option<String>,
    /// A client secret; prefer the environment variable, since flags show in the process list.
    #[arg(long, env = "AZURE_CLIENT_SECRET", hide_env_values = true)]
    pub client_secret: Option<Secret>,
    /// The Azure region of the cluster, such as eastus.
    #[arg(long, env = "LOCATION")]
    pub location: Option<String>,
    /// The cluster's own resource group.
    #[arg(long, env = "ARM_RESOURCE_GROUP")]
    pub resource_group: Option<String>,
    /// The resource group the node VMs and NICs are created in (MC_...).
    #[arg(long, env = "AZURE_NODE_RESOURCE_GROUP")]
    pub node_resource_group: Option<String>,
    /// Resource Manager endpoint.
    #[arg(long, env = "ARM_ENDPOINT", default_value = defaults::ARM_ENDPOINT)]
    pub arm_endpoint: String,
    /// Entra ID authority host for tokens.
    #[arg(long, env = "AZURE_AUTHORITY_HOST", default_value = defaults::AUTHORITY_HOST)]
    pub authority_host: String,
    /// Azure Retail Prices API.
    #[arg(long, env = "RETAIL_PRICES_URL", default_value = DEFAULT_RETAIL_PRICES_URL)]
    pub retail_prices_url: String,

    /// The default subnet for node NICs (an ARM subnet ID).
    #[arg(long, env = "VNET_SUBNET_ID")]
    pub vnet_subnet_id: Option<String>,
    /// TLS bootstrap token the kubelet joins with, `<id>.<secret>`.
    #[arg(long, env = "KUBELET_BOOTSTRAP_TOKEN", hide_env_values = true)]
    pub kubelet_bootstrap_token: Option<Secret>,
    /// The admin user's SSH public key on every node.
    #[arg(long, env = "SSH_PUBLIC_KEY")]
    pub ssh_public_key: Option<String>,
    /// azure or none.
    #[arg(long, env = "NETWORK_PLUGIN", default_value = defaults::NETWORK_PLUGIN)]
    pub network_plugin: String,
    /// overlay or "" (must be "" when the plugin is none).
    #[arg(long, env = "NETWORK_PLUGIN_MODE", default_value = defaults::NETWORK_PLUGIN_MODE)]
    pub network_plugin_mode: String,
    /// "", cilium or calico.
    #[arg(long, env = "NETWORK_POLICY", default_value = "")]
    pub network_policy: String,
    /// azure, cilium or "".
    #[arg(long, env = "NETWORK_DATAPLANE", default_value = defaults::NETWORK_DATAPLANE)]
    pub network_dataplane: String,
    /// User-assigned identities attached to every node, comma separated ARM IDs.
    #[arg(long, env = "NODE_IDENTITIES")]
    pub node_identities: Option<String>,
    /// The kubelet identity's client ID.
    #[arg(long, env = "KUBELET_IDENTITY_CLIENT_ID")]
    pub kubelet_identity_client_id: Option<String>,
    /// The cluster CA the nodes trust the API server with (PEM or base64 PEM); defaults to the CA this
    /// controller's own Kubernetes client trusts.
    #[arg(long, env = "CLUSTER_CA_BUNDLE")]
    pub cluster_ca_bundle: Option<String>,
    /// The ARM ID of a disk encryption set that encrypts every node's OS disk with a customer-managed key
    /// (/subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.Compute/diskEncryptionSets/<name>).
    #[arg(long = "node-osdisk-diskencryptionset-id", env = "NODE_OSDISK_DISKENCRYPTIONSET_ID")]
    pub os_disk_encryption_set_id: Option<String>,
    /// The ClusterIP of the cluster DNS service (kube-dns); "" keeps AKS's default 10.0.0.10.
    #[arg(long, env = "DNS_SERVICE_IP")]
    pub dns_service_ip: Option<String>,
    /// The resource GUID of the cluster VNet, for the nodenetwork-vnetguid label under Azure CNI overlay.
    #[arg(long, env = "VNET_GUID")]
    pub vnet_guid: Option<String>,
    /// Share of VM memory the hypervisor keeps, in [0, 1).
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", default_value = defaults::VM_MEMORY_OVERHEAD_PERCENT)]
    pub vm_memory_overhead_percent: String,
    /// The nodes' admin user.
    #[arg(long, env = "LINUX_ADMIN_USERNAME", default_value = defaults::LINUX_ADMIN_USERNAME)]
    pub linux_admin_username: String,
    /// Tags added to every Azure resource, k=v,k=v.
    #[arg(long, env = "ADDITIONAL_TAGS")]
    pub additional_tags: Option<String>,

    /// Pending pods are batched until none arrives for this long.
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = defaults::BATCH_IDLE_DURATION)]
    pub batch_idle_duration: String,
    /// A batch closes after this long however fast pods arrive.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = defaults::BATCH_MAX_DURATION)]
    pub batch_max_duration: String,
    /// trace, debug, info, warn or error.
    #[arg(long, env = "LOG_LEVEL", default_value = defaults::LOG_LEVEL)]
    pub log_level: String,
    /// json (one object per line, upstream's keys) or text (for a terminal).
    #[arg(long, env = "LOG_FORMAT", default_value = defaults::LOG_FORMAT)]
    pub log_format: String,
    /// Port of the Prometheus metrics endpoint.
    #[arg(long, env = "METRICS_PORT", default_value = defaults::METRICS_PORT)]
    pub metrics_port: String,
    /// Port of the /healthz and /readyz endpoints.
    #[arg(long, env = "HEALTH_PROBE_PORT", default_value = defaults::HEALTH_PROBE_PORT)]
    pub health_probe_port: String,
    /// Run without a leader lease (a single replica only).
    #[arg(long, env = "DISABLE_LEADER_ELECTION", default_value = "false", num_args = 0..=1,
        default_missing_value = "true")]
    pub disable_leader_election: String,
    /// Name of the leader election Lease.
    #[arg(long, env = "LEADER_ELECTION_NAME", default_value = defaults::LEADER_ELECTION_NAME)]
    pub leader_election_name: String,
    /// Namespace of the Lease; defaults to the controller's namespace.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// The namespace the controller runs in.
    #[arg(long, env = "SYSTEM_NAMESPACE")]
    pub system_namespace: Option<String>,
    /// Optional features, upstream's format: NodeRepair=true,SpotToSpotConsolidation=false.
    #[arg(long, env = "FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
    /// Strict: a NodePool whose minValues the fitting sizes cannot meet launches nothing for the pods.
    /// BestEffort: the NodeClaim's minValues are lowered to what those sizes meet.
    #[arg(long, env = "MIN_VALUES_POLICY", default_value = defaults::MIN_VALUES_POLICY)]
    pub min_values_policy: String,
    /// Respect: preferred affinities, anti-affinities and ScheduleAnyway spreads are honoured while they
    /// can be. Ignore: they are given up from the start.
    #[arg(long, env = "PREFERENCE_POLICY", default_value = defaults::PREFERENCE_POLICY)]
    pub preference_policy: String,
    /// How often the newest node image versions are looked up in the community galleries (at least 1s).
    /// Not upstream's; shorter than the default only for tests.
    #[arg(long, env = "NODE_IMAGE_REFRESH_INTERVAL", default_value = defaults::NODE_IMAGE_REFRESH_INTERVAL)]
    pub node_image_refresh_interval: String,

    /// Upstream's settings that change nothing here.
    #[command(flatten)]
    pub upstream_only: UpstreamOnly,
}

impl Options {
    /// Reads the settings from `args` (the first item is the program name, as in `std::env::args`) and
    /// from `env` instead of the process environment, so tests need no global state.
    ///
    /// A flag wins over its environment variable, which wins over the default: the same order clap
    /// gives a flattened [`Options`].
    pub fn parse_from<I, T>(args: I, env: &BTreeMap<String, String>) -> Result<Options, OptionsError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        // clap reads env values when the command is built, with no way to supply them. So the env
        // lookups are switched off and the variables become flags placed before the real ones; with
        // args_override_self a later occurrence replaces an earlier one, so a real flag wins.
        let command = Options::augment_args(Command::new("controller"));
        let mut from_env: Vec<OsString> = Vec::new();
        let mut secrets: Vec<String> = Vec::new();
        for arg in command.get_arguments() {
            let (Some(long), Some(name)) = (arg.get_long(), arg.get_env()) else { continue };
            let Some(value) = name.to_str().and_then(|name| env.get(name)) else { continue };
            if arg.is_hide_env_values_set() {
                secrets.push(value.clone());
            }
            from_env.push(format!("--{long}={value}").into());
        }
        let command = command.mut_args(|arg| arg.env(None::<&'static str>)).args_override_self(true);
        let mut args = args.into_iter().map(Into::into);
        let program = args.next().unwrap_or_else(|| OsString::from("karpenter-azure"));
        let args: Vec<OsString> = args.collect();
        secrets.extend(secret_flag_values(&args));
        let argv = std::iter::once(program).chain(from_env).chain(args);
        let matches = command
            .try_get_matches_from(argv)
            .map_err(|e| OptionsError::Usage(first_line_redacted(&e.to_string(), &secrets)))?;
        Options::from_arg_matches(&matches)
            .map_err(|e| OptionsError::Usage(first_line_redacted(&e.to_string(), &secrets)))
    }

    /// [`Options::parse_from`] with the process's arguments and environment.
    pub fn from_process() -> Result<Options, OptionsError> {
        let env: BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Options::parse_from(std::env::args_os(), &env)
    }
}

/// The feature gates this controller implements, with upstream's defaults (core options.go).
pub const FEATURE_GATES: [(&str, bool); 4] = [
    ("NodeRepair", false),
    ("SpotToSpotConsolidation", false),
    ("NodeOverlay", false),
    ("StaticCapacity", false),
];
/// Upstream gates this controller does not implement. They are accepted, so a values file or
/// environment written for upstream's chart (which passes every gate) still starts the controller; one
/// that is enabled gets a warning at start, since it changes nothing here.
pub const UNIMPLEMENTED_FEATURE_GATES: [&str; 2] = ["ReservedCapacity", "CapacityBuffer"];

/// `--feature-gates` (FEATURE_GATES), parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `NodeRepair`: replace nodes that stay NotReady (upstream default off).
    pub node_repair: bool,
    /// `SpotToSpotConsolidation`: consolidation may replace spot nodes with cheaper spot nodes.
    pub spot_to_spot_consolidation: bool,
    /// `NodeOverlay`: NodeOverlays change the price and extended resources of instance types
    /// (upstream default off, core `pkg/operator/options/options.go`).
    pub node_overlay: bool,
    /// `StaticCapacity`: static NodePools (`spec.replicas`) launch and remove nodes to hold their count
    /// (upstream core default off; its static provisioning and deprovisioning run only with it on).
    pub static_capacity: bool,
    /// Upstream gates set to true that this controller does not implement, for a warning at start.
    pub enabled_unimplemented: Vec<String>,
}

impl FeatureGates {
    /// Reads `Gate=bool,Gate=bool` as upstream does (component-base `MapStringBool`: pairs separated
    /// by commas, spaces trimmed, Go's booleans; a later pair wins). Unlike upstream, which ignores a
    /// name it does not know, an unknown name is rejected: a misspelt gate would otherwise leave the
    /// feature silently off.
    pub fn parse(setting: Setting, value: &str) -> Result<FeatureGates, OptionsError> {
        let invalid = |reason: String| OptionsError::Invalid { setting, reason };
        let mut gates = FeatureGates::default();
        let mut unimplemented = BTreeMap::new();
        for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, enabled)) = pair.split_once('=') else {
                return Err(invalid(format!("{pair:?} is not of the form Gate=true or Gate=false")));
            };
            let name = name.trim();
            let enabled = match enabled.trim() {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
                "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
                other => {
                    return Err(invalid(format!("gate {name}: must be true or false, got {other:?}")));
                }
            };
            match name {
                "NodeRepair" => gates.node_repair = enabled,
                "SpotToSpotConsolidation" => gates.spot_to_spot_consolidation = enabled,
                "NodeOverlay" => gates.node_overlay = enabled,
                "StaticCapacity" => gates.static_capacity = enabled,
                _ if UNIMPLEMENTED_FEATURE_GATES.contains(&name) => {
                    unimplemented.insert(name.to_string(), enabled);
                }
                _ => {
                    let known: Vec<&str> = FEATURE_GATES.iter().map(|(gate, _)| *gate).collect();
                    return Err(invalid(format!(
                        "unknown gate {name:?}; known gates: {} (upstream's {} are accepted but not implemented)",
                        known.join(", "),
                        UNIMPLEMENTED_FEATURE_GATES.join(", ")
                    )));
                }
            }
        }
        gates.enabled_unimplemented =
            unimplemented.into_iter().filter(|(_, enabled)| *enabled).map(|(name, _)| name).collect();
        Ok(gates)
    }
}

/// Values given to secret flags on the command line, so a clap message that quotes them can be scrubbed.
fn secret_flag_values(args: &[OsString]) -> Vec<String> {
    const SECRET_FLAGS: [&str; 2] = ["--kubelet-bootstrap-token", "--client-secret"];
    let mut values = Vec::new();
    for (i, arg) in args.iter().enumerate() {
        let Some(arg) = arg.to_str() else { continue };
        for flag in SECRET_FLAGS {
            if arg == flag {
                if let Some(next) = args.get(i + 1).and_then(|v| v.to_str()) {
                    values.push(next.to_string());
                }
            } else if let Some(value) = arg.strip_prefix(flag).and_then(|v| v.strip_prefix('=')) {
                values.push(value.to_string());
            }
        }
    }
    values
}

/// One line, as main.rs prints errors, with any secret value replaced.
fn first_line_redacted(message: &str, secrets: &[String]) -> String {
    let mut line = message.lines().next().unwrap_or("invalid arguments").to_string();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        line = line.replace(secret.as_str(), "<redacted>");
    }
    line.trim_start_matches("error: ").to_string()
}
