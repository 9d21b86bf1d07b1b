//! The controller's settings after validation: typed values the controllers use directly.
//!
//! [`Options::validate`] checks every setting the way upstream does (Azure provider
//! options_validation.go, Karpenter core options validation) and stops at the first problem, naming the
//! flag and the environment variable and saying what is allowed. Secrets stay wrapped in [`Secret`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use super::checks::{self, setting};
use super::options::{FeatureGates, Options, OptionsError, Secret, Setting};
use super::upstream_only::WithoutEffect;
use crate::catalog::{self, CapacityOptions};
/// `MIN_VALUES_POLICY` (Karpenter core options.go): the solver's own knob.
pub use crate::scheduling::{MinValuesPolicy, PreferencePolicy};

/// `LOG_FORMAT`: how log lines are written ([`super::logging`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line, upstream's keys (the default).
    Json,
    /// Human-readable lines, coloured at a terminal.
    Text,
}

/// The shortest `NODE_IMAGE_REFRESH_INTERVAL`.
pub const MIN_NODE_IMAGE_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// How the controller authenticates to Azure, in the order azure-identity's default credential tries
/// them: a client secret, then workload identity, then a managed identity.
#[derive(Debug, Clone, PartialEq)]
pub enum Credential {
    ClientSecret {
        tenant_id: String,
        client_id: String,
        secret: Secret,
    },
    WorkloadIdentity {
        tenant_id: String,
        client_id: String,
        token_file: PathBuf,
    },
    /// The VM or pod's managed identity; a client ID picks a user-assigned one.
    ManagedIdentity {
        client_id: Option<String>,
    },
}

/// Where and as whom Azure is called.
#[derive(Debug, Clone, PartialEq)]
pub struct AzureSettings {
    pub subscription_id: String,
    pub location: String,
    /// The cluster's resource group (ARM_RESOURCE_GROUP), when given.
    pub resource_group: Option<String>,
    pub node_resource_group: String,
    pub credential: Credential,
    pub arm_endpoint: Url,
    pub authority_host: Url,
}

/// The cluster's network plugin. kubenet is not offered: NAP supports Azure CNI and bring-your-own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkPlugin {
    Azure,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkPolicy {
    None,
    Cilium,
    Calico,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkDataplane {
    Azure,
    Cilium,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NetworkSettings {
    pub plugin: NetworkPlugin,
    /// `--network-plugin-mode overlay`: pod IPs come from an overlay, not the subnet.
    pub overlay: bool,
    pub policy: NetworkPolicy,
    pub dataplane: Option<NetworkDataplane>,
    pub vnet_subnet_id: String,
}

/// The Lease that makes one replica the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    pub lease_name: String,
    pub lease_namespace: String,
}

/// Valid settings, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Validated {
    pub cluster_name: String,
    pub cluster_endpoint: Url,
    pub azure: AzureSettings,
    pub network: NetworkSettings,
    pub kubelet_bootstrap_token: Secret,
    pub ssh_public_key: String,
    pub linux_admin_username: String,
    /// ARM IDs of user-assigned identities for every node.
    pub node_identities: Vec<String>,
    pub kubelet_identity_client_id: Option<String>,
    /// `CLUSTER_CA_BUNDLE` as base64 of the PEM; None means the controller's own client CA.
    pub cluster_ca_bundle: Option<String>,
    /// `DNS_SERVICE_IP`; None keeps the node image's default.
    pub dns_service_ip: Option<String>,
    /// `VNET_GUID`.
    pub vnet_guid: Option<String>,
    pub vm_memory_overhead_percent: f64,
    pub additional_tags: BTreeMap<String, String>,
    pub batch_idle_duration: Duration,
    pub batch_max_duration: Duration,
    pub retail_prices_url: Url,
    pub log_level: String,
    pub log_format: LogFormat,
    pub metrics_port: u16,
    pub health_probe_port: u16,
    /// None when leader election is disabled.
    pub leader_election: Option<LeaderElection>,
    pub system_namespace: String,
    /// `FEATURE_GATES`.
    pub feature_gates: FeatureGates,
    /// `MIN_VALUES_POLICY`.
    pub min_values_policy: MinValuesPolicy,
    /// `PREFERENCE_POLICY`.
    pub preference_policy: PreferencePolicy,
    /// `NODE_OSDISK_DISKENCRYPTIONSET_ID`: the OS disks' disk encryption set, when given.
    pub os_disk_encryption_set_id: Option<String>,
    /// `NODE_IMAGE_REFRESH_INTERVAL`: how often node image versions are looked up again.
    pub node_image_refresh_interval: Duration,
    /// Upstream-only settings given a value that changes nothing here, for a warning at start.
    pub without_effect: Vec<WithoutEffect>,
}

impl Validated {
    /// The host name of the API server, as upstream derives APIServerName from the endpoint.
    pub fn api_server_host(&self) -> &str {
        self.cluster_endpoint.host_str().unwrap_or_default()
    }

    /// The operator half of the capacity formulas; the NodeClass fills in maxPods and the OS disk.
    pub fn capacity_options(&self) -> CapacityOptions {
        CapacityOptions {
            network_plugin: match self.network.plugin {
                NetworkPlugin::Azure => catalog::NetworkPlugin::Azure,
                NetworkPlugin::None => catalog::NetworkPlugin::None,
            },
            overlay: self.network.overlay,
            vm_memory_overhead_percent: self.vm_memory_overhead_percent,
            ..CapacityOptions::default()
        }
    }
}

impl Options {
    /// Checks every setting and returns them typed, or the first problem.
    pub fn validate(&self) -> Result<Validated, OptionsError> {
        let cluster_endpoint = checks::https_url(
            setting::CLUSTER_ENDPOINT,
            required(setting::CLUSTER_ENDPOINT, &self.cluster_endpoint)?,
        )?;
        let batch_idle_duration = checks::duration(setting::BATCH_IDLE_DURATION, &self.batch_idle_duration)?;
        let batch_max_duration = checks::duration(setting::BATCH_MAX_DURATION, &self.batch_max_duration)?;
        if batch_idle_duration > batch_max_duration {
            return Err(invalid(setting::BATCH_IDLE_DURATION, "must not be longer than BATCH_MAX_DURATION"));
        }
        let metrics_port = checks::port(setting::METRICS_PORT, &self.metrics_port)?;
        let health_probe_port = checks::port(setting::HEALTH_PROBE_PORT, &self.health_probe_port)?;
        if metrics_port == health_probe_port {
            return Err(invalid(setting::HEALTH_PROBE_PORT, "must differ from the metrics port"));
        }
        let system_namespace = match present(&self.system_namespace) {
            Some(ns) => checks::dns_label(setting::SYSTEM_NAMESPACE, ns)?,
            None => super::options::defaults::SYSTEM_NAMESPACE.to_string(),
        };
        let leader_election =
            if checks::go_bool(setting::DISABLE_LEADER_ELECTION, &self.disable_leader_election)? {
                None
            } else {
                let lease_namespace = match present(&self.leader_election_namespace) {
                    Some(ns) => checks::dns_label(setting::LEADER_ELECTION_NAMESPACE, ns)?,
                    None => system_namespace.clone(),
                };
                let lease_name =
                    checks::dns_subdomain(setting::LEADER_ELECTION_NAME, &self.leader_election_name)?;
                Some(LeaderElection { lease_name, lease_namespace })
            };
        let kubelet_bootstrap_token = self.bootstrap_token()?;
        Ok(Validated {
            cluster_name: required(setting::CLUSTER_NAME, &self.cluster_name)?.to_string(),
            cluster_endpoint,
            azure: self.azure()?,
            network: self.network()?,
            kubelet_bootstrap_token,
            ssh_public_key: checks::ssh_public_key(
                setting::SSH_PUBLIC_KEY,
                required(setting::SSH_PUBLIC_KEY, &self.ssh_public_key)?,
            )?,
            linux_admin_username: checks::admin_username(
                setting::LINUX_ADMIN_USERNAME,
                &self.linux_admin_username,
            )?,
            node_identities: match present(&self.node_identities) {
                Some(list) => checks::identity_ids(setting::NODE_IDENTITIES, list)?,
                None => Vec::new(),
            },
            kubelet_identity_client_id: present(&self.kubelet_identity_client_id)
                .map(|id| checks::guid(setting::KUBELET_IDENTITY_CLIENT_ID, id))
                .transpose()?,
            cluster_ca_bundle: present(&self.cluster_ca_bundle)
                .map(|ca| checks::ca_bundle(setting::CLUSTER_CA_BUNDLE, ca))
                .transpose()?,
            dns_service_ip: present(&self.dns_service_ip)
                .map(|ip| checks::ip_address(setting::DNS_SERVICE_IP, ip))
                .transpose()?,
            vnet_guid: present(&self.vnet_guid).map(|g| checks::guid(setting::VNET_GUID, g)).transpose()?,
            vm_memory_overhead_percent: checks::fraction(
                setting::VM_MEMORY_OVERHEAD_PERCENT,
                &self.vm_memory_overhead_percent,
            )?,
            additional_tags: match present(&self.additional_tags) {
                Some(tags) => checks::tags(setting::ADDITIONAL_TAGS, tags)?,
                None => BTreeMap::new(),
            },
            batch_idle_duration,
            batch_max_duration,
            retail_prices_url: checks::endpoint_url(setting::RETAIL_PRICES_URL, &self.retail_prices_url)?,
            log_level: checks::one_of(
                setting::LOG_LEVEL,
                &self.log_level,
                &["trace", "debug", "info", "warn", "error"],
            )?
            .to_string(),
            log_format: match checks::one_of(setting::LOG_FORMAT, &self.log_format, &["json", "text"])? {
                "text" => LogFormat::Text,
                _ => LogFormat::Json,
            },
            metrics_port,
            health_probe_port,
            leader_election,
            system_namespace,
            feature_gates: FeatureGates::parse(setting::FEATURE_GATES, &self.feature_gates)?,
            min_values_policy: match checks::one_of(
                setting::MIN_VALUES_POLICY,
                // Empty counts as unset, as for the other settings.
                present(&Some(self.min_values_policy.clone())).unwrap_or("Strict"),
                &["Strict", "BestEffort"],
            )? {
                "BestEffort" => MinValuesPolicy::BestEffort,
                _ => MinValuesPolicy::Strict,
            },
            preference_policy: match checks::one_of(
                setting::PREFERENCE_POLICY,
                present(&Some(self.preference_policy.clone())).unwrap_or("Respect"),
                &["Respect", "Ignore"],
            )? {
                "Ignore" => PreferencePolicy::Ignore,
                _ => PreferencePolicy::Respect,
            },
            os_disk_encryption_set_id: present(&self.os_disk_encryption_set_id)
                .map(|id| checks::disk_encryption_set_id(setting::OS_DISK_ENCRYPTION_SET_ID, id))
                .transpose()?,
            node_image_refresh_interval: self.node_image_refresh_interval()?,
            without_effect: self.upstream_only.check()?,
        })
    }

    /// At least [`MIN_NODE_IMAGE_REFRESH_INTERVAL`]: every refresh lists the versions of each image
    /// definition in use from ARM. Empty counts as unset, as for the other settings.
    fn node_image_refresh_interval(&self) -> Result<Duration, OptionsError> {
        let setting = setting::NODE_IMAGE_REFRESH_INTERVAL;
        let value = match self.node_image_refresh_interval.trim() {
            "" => super::options::defaults::NODE_IMAGE_REFRESH_INTERVAL,
            value => value,
        };
        let every = checks::duration(setting, value)?;
        if every < MIN_NODE_IMAGE_REFRESH_INTERVAL {
            return Err(invalid(setting, format!("must be at least 1s, got {value:?}")));
        }
        Ok(every)
    }

    fn bootstrap_token(&self) -> Result<Secret, OptionsError> {
        let token = self.kubelet_bootstrap_token.as_ref().filter(|t| !t.expose().is_empty());
        let token = token.ok_or(OptionsError::Missing(setting::KUBELET_BOOTSTRAP_TOKEN))?;
        if !checks::is_bootstrap_token(token.expose()) {
            // The value is a secret: say what it should look like, never what it is.
            return Err(invalid(setting::KUBELET_BOOTSTRAP_TOKEN, "must look like abcdef.0123456789abcdef"));
        }
        Ok(token.clone())
    }

    fn azure(&self) -> Result<AzureSettings, OptionsError> {
        let subscription = present(&self.subscription_id).or(present(&self.arm_subscription_id));
        let subscription_id = subscription.ok_or(OptionsError::Missing(setting::SUBSCRIPTION_ID))?;
        let tenant = present(&self.tenant_id).or(present(&self.arm_tenant_id));
        let tenant_id = tenant.map(|t| checks::tenant(setting::TENANT_ID, t)).transpose()?;
        let client_id =
            present(&self.client_id).map(|id| checks::guid(setting::CLIENT_ID, id)).transpose()?;
        let secret = self.client_secret.as_ref().filter(|s| !s.expose().is_empty());
        let token_file = present(&self.federated_token_file);
        let credential = if secret.is_some() || token_file.is_some() {
            let tenant_id = tenant_id.ok_or(OptionsError::Missing(setting::TENANT_ID))?;
            let client_id = client_id.ok_or(OptionsError::Missing(setting::CLIENT_ID))?;
            match (secret, token_file) {
                (Some(secret), _) => {
                    Credential::ClientSecret { tenant_id, client_id, secret: secret.clone() }
                }
                (None, Some(file)) => {
                    Credential::WorkloadIdentity { tenant_id, client_id, token_file: PathBuf::from(file) }
                }
                (None, None) => unreachable!("one of them is present"),
            }
        } else {
            Credential::ManagedIdentity { client_id }
        };
        Ok(AzureSettings {
            subscription_id: checks::guid(setting::SUBSCRIPTION_ID, subscription_id)?,
            location: checks::location(setting::LOCATION, required(setting::LOCATION, &self.location)?)?,
            resource_group: present(&self.resource_group)
                .map(|rg| checks::resource_group(setting::RESOURCE_GROUP, rg))
                .transpose()?,
            node_resource_group: checks::resource_group(
                setting::NODE_RESOURCE_GROUP,
                required(setting::NODE_RESOURCE_GROUP, &self.node_resource_group)?,
            )?,
            credential,
            arm_endpoint: checks::endpoint_url(setting::ARM_ENDPOINT, &self.arm_endpoint)?,
            authority_host: checks::endpoint_url(setting::AUTHORITY_HOST, &self.authority_host)?,
        })
    }

    fn network(&self) -> Result<NetworkSettings, OptionsError> {
        let plugin = match checks::one_of(setting::NETWORK_PLUGIN, &self.network_plugin, &["azure", "none"])?
        {
            "azure" => NetworkPlugin::Azure,
            _ => NetworkPlugin::None,
        };
        let overlay =
            checks::one_of(setting::NETWORK_PLUGIN_MODE, &self.network_plugin_mode, &["overlay", ""])?
                == "overlay";
        // Bring-your-own CNI has no Azure overlay (options_validation.go).
        if plugin == NetworkPlugin::None && overlay {
            return Err(invalid(setting::NETWORK_PLUGIN_MODE, "must be \"\" when --network-plugin is none"));
        }
        let policy =
            match checks::one_of(setting::NETWORK_POLICY, &self.network_policy, &["", "cilium", "calico"])? {
                "cilium" => NetworkPolicy::Cilium,
                "calico" => NetworkPolicy::Calico,
                _ => NetworkPolicy::None,
            };
        let dataplane = match checks::one_of(
            setting::NETWORK_DATAPLANE,
            &self.network_dataplane,
            &["azure", "cilium", ""],
        )? {
            "azure" => Some(NetworkDataplane::Azure),
            "cilium" => Some(NetworkDataplane::Cilium),
            _ => None,
        };
        let subnet = required(setting::VNET_SUBNET_ID, &self.vnet_subnet_id)?;
        if !checks::is_subnet_id(subnet) {
            return Err(invalid(
                setting::VNET_SUBNET_ID,
                format!(
                    "must be a subnet ID like /subscriptions/<id>/resourceGroups/<group>/providers/\
                     Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>, got {subnet:?}"
                ),
            ));
        }
        Ok(NetworkSettings { plugin, overlay, policy, dataplane, vnet_subnet_id: subnet.to_string() })
    }
}

/// A value that is set and not empty; an empty variable counts as unset, as `os.Getenv` does upstream.
fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn required(setting: Setting, value: &Option<String>) -> Result<&str, OptionsError> {
    present(value).ok_or(OptionsError::Missing(setting))
}

fn invalid(setting: Setting, reason: impl Into<String>) -> OptionsError {
    OptionsError::Invalid { setting, reason: reason.into() }
}
