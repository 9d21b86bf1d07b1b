//! What `karpenter-azure controller` builds from the validated settings before the controllers run:
//! the ARM clients and the Azure cloud provider, the catalog for the region, the controller settings.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Catalog, Settings};
use crate::catalog::regions::FALLBACK_PRICE_REGION;
use crate::catalog::retail::REFRESH_INTERVAL;
use crate::catalog::{CatalogError, PriceTable, RetailError, RetailPricesClient, UnavailableOfferings};
use crate::cloud::azure::client::ClientError;
use crate::cloud::azure::{
    ArmClients, ArmSettings, AzureCloudProvider, BootstrapSettings, CredentialSource, LaunchSettings,
    RetrySettings, DEFAULT_MAX_CONCURRENT_CALLS, DEFAULT_MAX_POLLS, DEFAULT_POLL_INTERVAL,
};
use crate::cloud::metered::{self, Metered};
use crate::cloud::wall_clock;
use crate::operator::server::Ports;
use crate::operator::{Credential, NetworkPlugin, Validated};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("managed identity credentials are not supported yet; use a client secret or workload identity")]
    ManagedIdentityUnsupported,
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    RetailPrices(#[from] RetailError),
}

impl StartError {
    pub fn category(&self) -> &'static str {
        match self {
            StartError::ManagedIdentityUnsupported => "CredentialUnsupported",
            StartError::Client(e) => e.category(),
            StartError::Catalog(e) => e.category(),
            StartError::RetailPrices(e) => e.category(),
        }
    }
}

/// ARM endpoint, authority and credential from the settings.
pub fn arm_settings(v: &Validated) -> Result<ArmSettings, StartError> {
    let (tenant_id, client_id, credential) = match &v.azure.credential {
        Credential::ClientSecret { tenant_id, client_id, secret } => {
            (tenant_id, client_id, CredentialSource::ClientSecret(secret.clone()))
        }
        Credential::WorkloadIdentity { tenant_id, client_id, token_file } => {
            (tenant_id, client_id, CredentialSource::FederatedTokenFile(token_file.clone()))
        }
        Credential::ManagedIdentity { .. } => return Err(StartError::ManagedIdentityUnsupported),
    };
    Ok(ArmSettings {
        arm_endpoint: v.azure.arm_endpoint.clone(),
        authority_host: v.azure.authority_host.clone(),
        subscription_id: v.azure.subscription_id.clone(),
        tenant_id: tenant_id.clone(),
        client_id: client_id.clone(),
        credential,
        retry: RetrySettings::default(),
    })
}

/// Cluster-wide launch settings from the operator settings.
pub fn launch_settings(v: &Validated) -> LaunchSettings {
    // The node image expects `none` under overlay (pod IPs do not come from the subnet), else `azure`.
    let network_plugin = match (v.network.plugin, v.network.overlay) {
        (NetworkPlugin::Azure, false) => "azure",
        _ => "none",
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
        bootstrap: BootstrapSettings {
            cluster_endpoint: v.cluster_endpoint.as_str().trim_end_matches('/').to_string(),
            bootstrap_token: v.kubelet_bootstrap_token.clone(),
            network_plugin: network_plugin.to_string(),
        },
        poll_interval: DEFAULT_POLL_INTERVAL,
        max_polls: DEFAULT_MAX_POLLS,
        max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
    }
}

/// The Azure provider, timed by the cloud-provider metrics, and the catalog, sharing one
/// unavailable-offerings cache. The catalog's sizes and prices refresh in the background: sizes from the
/// Resource SKUs API, prices from the Retail Prices API at `RETAIL_PRICES_URL` (both at start, then
/// every 12 hours).
pub fn azure(v: &Validated) -> Result<(Arc<Metered<AzureCloudProvider>>, Catalog), StartError> {
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
    let retail = RetailPricesClient::new(reqwest::Client::new(), v.retail_prices_url.as_str())?;
    catalog.spawn_price_refresh(retail, env_duration(PRICE_REFRESH_INTERVAL_ENV, REFRESH_INTERVAL));
    let provider = AzureCloudProvider::new(clients, launch_settings(v), unavailable, clock);
    Ok((Arc::new(Metered::new(provider, metered::AZURE)), catalog))
}

pub fn settings(v: &Validated) -> Settings {
    Settings {
        region: v.azure.location.clone(),
        batch_idle: v.batch_idle_duration,
        batch_max: v.batch_max_duration,
        gc_interval: env_duration(GC_INTERVAL_ENV, super::gc::DEFAULT_INTERVAL),
        gc_grace: env_duration(GC_GRACE_ENV, super::gc::DEFAULT_GRACE),
        ports: Ports { metrics: v.metrics_port, health: v.health_probe_port },
        cluster_subnet_id: v.network.vnet_subnet_id.clone(),
        node_resource_group: v.azure.node_resource_group.clone(),
    }
}

/// Hidden override of the garbage-collection interval (a duration such as `3s`), for tests.
pub const GC_INTERVAL_ENV: &str = "KARPENTER_GC_INTERVAL";
/// Hidden override of the Retail Prices refresh interval (upstream's is 12 hours), for tests.
pub const PRICE_REFRESH_INTERVAL_ENV: &str = "KARPENTER_PRICE_REFRESH_INTERVAL";
/// Hidden override of the garbage-collection grace period for unowned VMs, for tests.
pub const GC_GRACE_ENV: &str = "KARPENTER_GC_GRACE_PERIOD";

/// A duration from a hidden test override; the default when unset, or (with a warning) when malformed.
fn env_duration(name: &str, default: Duration) -> Duration {
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
