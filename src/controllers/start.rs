//! What `karpenter-azure controller` builds from the validated settings before the controllers run:
//! the ARM clients and the Azure cloud provider, the catalog for the region, the controller settings.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Settings;
use crate::catalog::regions::FALLBACK_PRICE_REGION;
use crate::catalog::retail::REFRESH_INTERVAL;
use crate::catalog::{CatalogError, PriceTable, UnavailableOfferings};
use crate::cloud::azure::client::{http_client, ClientError, HttpTimeouts};
use crate::cloud::azure::credential::imds_endpoint;
use crate::cloud::azure::instancetypes::Catalog;
use crate::cloud::azure::retail::{RetailError, RetailPricesClient};
use crate::cloud::azure::{
    ArmClients, ArmSettings, AzureCloudProvider, BootstrapSettings, CredentialSource, LaunchSettings,
    RetrySettings, DEFAULT_MAX_CONCURRENT_CALLS, DEFAULT_MAX_POLLS, DEFAULT_POLL_INTERVAL,
};
use crate::cloud::metered::{self, Metered};
use crate::cloud::wall_clock;
use crate::operator::server::Ports;
use crate::operator::{Credential, NetworkDataplane, NetworkPlugin, NetworkPolicy, Validated};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("AZURE_POD_IDENTITY_AUTHORITY_HOST is not a URL: {0}")]
    MetadataHost(url::ParseError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// Nodes verify the API server with the cluster CA; without one they would never join.
    #[error("no cluster CA: the Kubernetes client configuration trusts no CA certificate; set --cluster-ca-bundle (CLUSTER_CA_BUNDLE) to the cluster's CA (PEM or base64 PEM)")]
    NoClusterCa,
    #[error(transparent)]
    RetailPrices(#[from] RetailError),
}

impl StartError {
    pub fn category(&self) -> &'static str {
        match self {
            StartError::MetadataHost(_) => "InvalidSetting",
            StartError::Client(e) => e.category(),
            StartError::Catalog(e) => e.category(),
            StartError::NoClusterCa => "ClusterCAMissing",
            StartError::RetailPrices(e) => e.category(),
        }
    }
}

/// ARM endpoint, authority and credential from the settings.
pub fn arm_settings(v: &Validated) -> Result<ArmSettings, StartError> {
    let (tenant_id, client_id, credential) = match &v.azure.credential {
        Credential::ClientSecret { tenant_id, client_id, secret } => {
            (tenant_id.clone(), client_id.clone(), CredentialSource::ClientSecret(secret.clone()))
        }
        Credential::WorkloadIdentity { tenant_id, client_id, token_file } => {
            (tenant_id.clone(), client_id.clone(), CredentialSource::FederatedTokenFile(token_file.clone()))
        }
        Credential::ManagedIdentity { client_id } => {
            // The instance metadata service's host, overridable as azidentity allows (Azure SDK for Go).
            let host = std::env::var(IMDS_HOST_ENV).ok();
            let endpoint = imds_endpoint(host.as_deref()).map_err(StartError::MetadataHost)?;
            let credential = CredentialSource::ManagedIdentity { client_id: client_id.clone(), endpoint };
            (String::new(), client_id.clone().unwrap_or_default(), credential)
        }
    };
    Ok(ArmSettings {
        arm_endpoint: v.azure.arm_endpoint.clone(),
        authority_host: v.azure.authority_host.clone(),
        subscription_id: v.azure.subscription_id.clone(),
        tenant_id,
        client_id,
        credential,
        retry: RetrySettings::default(),
        timeouts: HttpTimeouts::default(),
    })
}

/// The cluster CA the nodes get as `KUBE_CA_CRT` (base64 of the PEM): `CLUSTER_CA_BUNDLE`, else the
/// CA the controller's own client trusts (upstream operator.go getCABundle reads the REST config's).
pub fn cluster_ca_bundle(v: &Validated, client_roots: Option<&[Vec<u8>]>) -> Result<String, StartError> {
    if let Some(ca) = &v.cluster_ca_bundle {
        return Ok(ca.clone());
    }
    let roots = client_roots.filter(|r| !r.is_empty()).ok_or(StartError::NoClusterCa)?;
    let pem: String = roots.iter().map(|der| der_to_pem(der)).collect();
    Ok(azure_core::base64::encode(pem))
}

/// One DER certificate as PEM, 64 base64 characters a line.
fn der_to_pem(der: &[u8]) -> String {
    let body = azure_core::base64::encode(der);
    let lines: Vec<&str> =
        body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap_or_default()).collect();
    format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", lines.join("\n"))
}

/// Cluster-wide launch settings from the operator settings and the cluster CA (base64 PEM).
pub fn launch_settings(v: &Validated, ca_bundle_base64: &str) -> LaunchSettings {
    // The node image expects `none` under overlay, Cilium node subnet or bring-your-own CNI, else
    // `azure` (launchtemplate.go getAgentbakerNetworkPlugin).
    let cilium = v.network.dataplane == Some(NetworkDataplane::Cilium);
    let network_plugin = match (v.network.plugin, v.network.overlay, cilium) {
        (NetworkPlugin::Azure, false, false) => "azure",
        _ => "none",
    };
    let network_policy = match v.network.policy {
        NetworkPolicy::None => "",
        NetworkPolicy::Cilium => "cilium",
        NetworkPolicy::Calico => "calico",
    };
    let tenant_id = match &v.azure.credential {
        Credential::ClientSecret { tenant_id, .. } | Credential::WorkloadIdentity { tenant_id, .. } => {
            tenant_id.clone()
        }
        Credential::ManagedIdentity { .. } => String::new(),
    };
    LaunchSettings {
        cluster_name: v.cluster_name.clone(),
        location: v.azure.location.clone(),
        node_resource_group: v.azure.node_resource_group.clone(),
        subnet_id: v.network.vnet_subnet_id.clone(),
        ssh_public_key: v.ssh_public_key.clone(),
        admin_username: v.linux_admin_username.clone(),
        node_identities: v.node_identities.clone(),
        additional_tags: v.additional_tags.clone(),
        os_disk_encryption_set_id: v.os_disk_encryption_set_id.clone(),
        bootstrap: BootstrapSettings {
            cluster_endpoint: v.cluster_endpoint.as_str().trim_end_matches('/').to_string(),
            bootstrap_token: v.kubelet_bootstrap_token.clone(),
            ca_bundle_base64: ca_bundle_base64.to_string(),
            network_plugin: network_plugin.to_string(),
            network_policy: network_policy.to_string(),
            overlay: v.network.plugin == NetworkPlugin::Azure && v.network.overlay,
            cilium_dataplane: cilium,
            dns_service_ip: v.dns_service_ip.clone(),
            kubelet_identity_client_id: v.kubelet_identity_client_id.clone().unwrap_or_default(),
            vnet_guid: v.vnet_guid.clone().unwrap_or_default(),
            tenant_id,
            subscription_id: v.azure.subscription_id.clone(),
            location: v.azure.location.clone(),
            node_resource_group: v.azure.node_resource_group.clone(),
        },
        poll_interval: DEFAULT_POLL_INTERVAL,
        max_polls: DEFAULT_MAX_POLLS,
        max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
    }
}

/// The Azure provider, timed by the cloud-provider metrics, launching from its catalog of the region's
/// sizes (the two share one unavailable-offerings cache). The catalog's sizes and prices refresh in the background: sizes from the
/// Resource SKUs API, prices from the Retail Prices API at `RETAIL_PRICES_URL` (both at start, then
/// every 12 hours).
pub fn azure(v: &Validated, ca_bundle_base64: &str) -> Result<Arc<Metered<AzureCloudProvider>>, StartError> {
    let unavailable = Arc::new(Mutex::new(UnavailableOfferings::new()));
    let clock = wall_clock();
    let location = &v.azure.location;
    if PriceTable::static_for_region(location).is_empty() {
        tracing::warn!(region = %location, fallback = FALLBACK_PRICE_REGION, "the embedded price table has no prices for the region; using the fallback region's until the Retail Prices API answers");
    }
    let catalog = Catalog::new(
        location,
        v.capacity_options(),
        PriceTable::static_or_fallback(location),
        unavailable.clone(),
        clock.clone(),
    )?;
    // One credential and pipeline for the launcher and the SKU refresh.
    let clients = ArmClients::new(&arm_settings(v)?)?;
    catalog.spawn_sku_refresh(clients.clone());
    let retail_http = http_client(HttpTimeouts::default(), true).map_err(StartError::Client)?;
    let retail = RetailPricesClient::new(retail_http, v.retail_prices_url.as_str())?;
    catalog.spawn_price_refresh(retail, env_duration(PRICE_REFRESH_INTERVAL_ENV, REFRESH_INTERVAL));
    let provider = AzureCloudProvider::new(clients, launch_settings(v, ca_bundle_base64), Arc::new(catalog))
        .with_image_refresh(v.node_image_refresh_interval);
    Ok(Arc::new(Metered::new(provider, metered::AZURE)))
}

pub fn settings(v: &Validated) -> Settings {
    Settings {
        region: v.azure.location.clone(),
        min_values_policy: v.min_values_policy,
        preference_policy: v.preference_policy,
        batch_idle: v.batch_idle_duration,
        batch_max: v.batch_max_duration,
        gc_interval: env_duration(GC_INTERVAL_ENV, super::nodeclaim::gc::DEFAULT_INTERVAL),
        gc_grace: env_duration(GC_GRACE_ENV, super::nodeclaim::gc::DEFAULT_GRACE),
        ports: Ports { metrics: v.metrics_port, health: v.health_probe_port },
        registration_timeout: env_duration(
            REGISTRATION_TIMEOUT_ENV,
            super::nodeclaim::lifecycle::REGISTRATION_TIMEOUT,
        ),
        disruption: crate::disruption::Options {
            spot_to_spot_consolidation: v.feature_gates.spot_to_spot_consolidation,
            ..crate::disruption::Options::default()
        },
        disruption_interval: env_duration(DISRUPTION_INTERVAL_ENV, DISRUPTION_INTERVAL),
        disruption_validation_delay: env_duration(
            DISRUPTION_VALIDATION_DELAY_ENV,
            DISRUPTION_VALIDATION_DELAY,
        ),
        node_repair: v.feature_gates.node_repair,
        node_overlay: v.feature_gates.node_overlay,
        static_capacity: v.feature_gates.static_capacity,
        watch_stale_after: env_duration(WATCH_STALE_AFTER_ENV, super::watch_health::DEFAULT_STALE_AFTER),
        credential_restart_after: env_duration(CREDENTIAL_RESTART_AFTER_ENV, CREDENTIAL_RESTART_AFTER),
        system_namespace: v.system_namespace.clone(),
    }
}

/// Logs the feature gates in force, and warns about upstream gates that are on but do nothing here.
pub fn log_feature_gates(v: &Validated) {
    let gates = &v.feature_gates;
    tracing::info!(
        node_repair = gates.node_repair,
        spot_to_spot_consolidation = gates.spot_to_spot_consolidation,
        node_overlay = gates.node_overlay,
        static_capacity = gates.static_capacity,
        "feature gates"
    );
    for gate in &gates.enabled_unimplemented {
        tracing::warn!(gate = %gate, "feature gate is enabled but not implemented by this controller; it has no effect");
    }
}

/// Upstream's disruption poll period (`pkg/controllers/disruption/controller.go`).
pub const DISRUPTION_INTERVAL: Duration = Duration::from_secs(10);
/// Upstream's `commandValidationDelay` (`pkg/controllers/disruption/validation.go`).
pub const DISRUPTION_VALIDATION_DELAY: Duration = Duration::from_secs(15);
/// Hidden override of the disruption poll period, for tests.
pub const DISRUPTION_INTERVAL_ENV: &str = "KARPENTER_DISRUPTION_INTERVAL";
/// Hidden override of the validation delay, for tests.
pub const DISRUPTION_VALIDATION_DELAY_ENV: &str = "KARPENTER_DISRUPTION_VALIDATION_DELAY";

/// Hidden override of the garbage-collection interval (a duration such as `3s`), for tests.
pub const GC_INTERVAL_ENV: &str = "KARPENTER_GC_INTERVAL";
/// Hidden override of the Retail Prices refresh interval (upstream's is 12 hours), for tests.
pub const PRICE_REFRESH_INTERVAL_ENV: &str = "KARPENTER_PRICE_REFRESH_INTERVAL";
/// Hidden override of the garbage-collection grace period for unowned VMs, for tests.
pub const GC_GRACE_ENV: &str = "KARPENTER_GC_GRACE_PERIOD";

/// How long the Azure credential may keep failing before `/healthz` fails (a duration such as `5m`).
pub const CREDENTIAL_RESTART_AFTER_ENV: &str = "KARPENTER_CREDENTIAL_RESTART_AFTER";
/// Its default: long enough for Entra ID or IMDS trouble to pass, short enough that a rotated secret
/// (read at start) is picked up within the hour.
pub const CREDENTIAL_RESTART_AFTER: Duration = Duration::from_secs(15 * 60);

/// How long a watch may keep failing before `/readyz` fails (a duration such as `2m`).
pub const WATCH_STALE_AFTER_ENV: &str = "KARPENTER_WATCH_STALE_AFTER";

/// The host of the instance metadata service managed identity tokens come from (azidentity's name).
pub const IMDS_HOST_ENV: &str = "AZURE_POD_IDENTITY_AUTHORITY_HOST";

/// Hidden override of the registration timeout, so tests of nodes that never join need not wait 15 minutes.
pub const REGISTRATION_TIMEOUT_ENV: &str = "KARPENTER_REGISTRATION_TIMEOUT";
/// Hidden override of how long a node may be unhealthy before node repair replaces it (10 minutes).
pub const REPAIR_TOLERATION_ENV: &str = "KARPENTER_REPAIR_TOLERATION";
/// Hidden override of how often node repair looks at the nodes (30 seconds).
pub const REPAIR_INTERVAL_ENV: &str = "KARPENTER_REPAIR_INTERVAL";

/// A duration from a hidden test override; the default when unset, or (with a warning) when malformed.
pub(super) fn env_duration(name: &str, default: Duration) -> Duration {
    match std::env::var(name) {
        Err(_) => default,
        Ok(value) => match crate::apis::duration::parse(&value) {
            Ok(parsed) if !parsed.is_zero() => parsed,
            _ => {
                tracing::warn!(setting = name, value = %value, default_s = default.as_secs(), "ignoring a malformed duration override");
                default
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_ca_comes_from_the_setting_else_from_the_client() {
        let env: std::collections::BTreeMap<String, String> = [
            ("CLUSTER_NAME", "c"),
            ("CLUSTER_ENDPOINT", "https://c.hcp.eastus.azmk8s.io:443"),
            ("AZURE_SUBSCRIPTION_ID", "00000000-0000-0000-0000-000000000001"),
            ("LOCATION", "eastus"),
            ("AZURE_NODE_RESOURCE_GROUP", "MC_rg_c_eastus"),
            (
                "VNET_SUBNET_ID",
                "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/s",
            ),
            ("KUBELET_BOOTSTRAP_TOKEN", "abcdef.0123456789abcdef"),
            ("SSH_PUBLIC_KEY", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE azureuser@host"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let v = crate::operator::Options::parse_from(["karpenter-azure"], &env).unwrap().validate().unwrap();
        assert!(matches!(cluster_ca_bundle(&v, None), Err(StartError::NoClusterCa)));
        let der = vec![0x30u8; 100];
        let pem = String::from_utf8(
            azure_core::base64::decode(cluster_ca_bundle(&v, Some(&[der])).unwrap()).unwrap(),
        )
        .unwrap();
        assert!(
            pem.starts_with("-----BEGIN CERTIFICATE-----\n") && pem.ends_with("-----END CERTIFICATE-----\n")
        );
        assert!(pem.lines().all(|l| l.len() <= 64), "{pem}");
        let given = crate::operator::Validated { cluster_ca_bundle: Some("Q0E=".into()), ..v };
        assert_eq!(cluster_ca_bundle(&given, None).unwrap(), "Q0E=");
        // Overlay with Cilium: the node image gets plugin none and the policy.
        let s = launch_settings(&given, "Q0E=");
        assert_eq!(
            (s.bootstrap.network_plugin.as_str(), s.bootstrap.overlay, s.bootstrap.cilium_dataplane),
            ("none", true, true)
        );
    }
}
