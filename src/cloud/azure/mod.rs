//! The production cloud provider: NodeClaims as Azure VMs through Azure Resource Manager.
//!
//! - `client`: ARM clients and credential from settings; `credential`: workload identity that re-reads
//!   its rotated token file.
//! - `naming`: `aks-<claim>` names and provider IDs.
//! - `bootstrap`: the custom data that joins a VM to the cluster (the AKS node-bootstrap contract).
//! - `network`: the load-balancer backend pools and NSG a NIC joins (listed, cached 2 h).
//! - `nic`, `vm`: resource bodies, GET-before-PUT, polling of long-running operations; `lro`: when to
//!   poll again (ARM's `Retry-After` within the configured interval) and when to give up.
//! - `errors`: ARM errors → unavailable-offerings marks and [`crate::cloud::CloudError`].
//! - `imagefamily`: which gallery images a node class needs and which version of each (pure);
//!   `subnet`: subnet IDs and the class-subnet rules (pure); `lookups`: the ARM reads behind them.
//! - `provider`: the [`crate::cloud::CloudProvider`] implementation.
//! - `nodeclass`: the image and subnet lookups behind the AKSNodeClass status, and the status.
//! - `launch`: the launch request of a NodeClaim (sizes, offerings, image, bootstrap, kubelet flags).
//! - `instancetypes`: the sizes each AKSNodeClass can launch, from the Resource SKUs API (`skus`) and
//!   priced by the Retail Prices API (`retail`), as the solver and the launcher both see them.

pub mod bootstrap;
pub mod client;
pub mod credential;
pub mod errors;
pub mod imagefamily;
pub mod instancetypes;
pub mod launch;
pub mod list_page;
pub mod lookups;
pub mod lro;
pub mod naming;
pub mod network;
pub mod nic;
pub mod nodeclass;
pub mod provider;
pub mod retail;
pub mod skus;
pub mod subnet;
pub mod vm;

use std::collections::BTreeMap;
use std::time::Duration;

pub use bootstrap::{BootstrapSettings, NodeClassBootstrap, Secret};
pub use client::{ArmClients, ArmSettings, CredentialSource, HttpTimeouts, RetrySettings};
pub use provider::AzureCloudProvider;

/// Upstream polls VM creates every 3 s (instance/poller.go); ours poll sooner when ARM advises it
/// (`lro`).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(3);
/// 200 polls × 3 s = 10 min: how long a create may run, longer than any Azure lets run before failing it.
pub const DEFAULT_MAX_POLLS: u32 = 200;
/// ARM allows roughly 1200 writes per hour per subscription and principal; a small in-flight limit keeps
/// a burst of launches from turning into a throttling storm.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 32;

/// Cluster-wide launch settings (upstream `pkg/operator/options/options.go`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSettings {
    /// `CLUSTER_NAME`, the value of the `karpenter.azure.com_cluster` tag.
    pub cluster_name: String,
    /// `LOCATION`.
    pub location: String,
    /// `AZURE_NODE_RESOURCE_GROUP`.
    pub node_resource_group: String,
    /// `VNET_SUBNET_ID`.
    pub subnet_id: String,
    /// `SSH_PUBLIC_KEY`.
    pub ssh_public_key: String,
    /// `LINUX_ADMIN_USERNAME`.
    pub admin_username: String,
    /// `NODE_IDENTITIES`: user-assigned identity IDs.
    pub node_identities: Vec<String>,
    /// `ADDITIONAL_TAGS`.
    pub additional_tags: BTreeMap<String, String>,
    /// `NODE_OSDISK_DISKENCRYPTIONSET_ID`: the disk encryption set of every OS disk, when given.
    pub os_disk_encryption_set_id: Option<String>,
    pub bootstrap: BootstrapSettings,
    /// Interval between polls of a long-running operation.
    pub poll_interval: Duration,
    /// With `poll_interval`, how long a long-running operation may run: `poll_interval × max_polls`.
    pub max_polls: u32,
    /// ARM calls in flight at once.
    pub max_concurrent_calls: usize,
}
