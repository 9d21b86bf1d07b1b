//! A fake Azure Resource Manager that speaks the real ARM wire format, for integration and e2e tests.
//!
//! The production clients (azure_mgmt_compute / azure_mgmt_network 0.21 built with `.endpoint(base_url)`,
//! azure_identity 0.21 credentials with the fake as authority host) work against it unchanged. It serves,
//! on `http://127.0.0.1:<free port>`:
//! - `POST /<tenant>/oauth2/v2.0/token` (`token`): client-secret and workload-identity grants;
//! - VMs as long-running operations (`compute`), NICs (`network`), operation status (`operations`),
//!   Resource SKUs from the embedded catalog (`skus`), community gallery image versions (`gallery`) and
//!   subnets (`subnets`);
//! - injected faults (`faults`) and an admin API (`admin`);
//! - boot simulation (`boot`, `node`): a succeeded VM registers a Node through a `NodeRegistrar`.
//!
//! Start it with `FakeArm::start(config).await`.

mod admin;
pub mod boot;
mod compute;
pub mod faults;
pub mod gallery;
pub mod kubelet;
mod lb;
mod network;
pub mod node;
mod operations;
mod osdisk;
mod security;
mod server;
pub mod skus;
mod state;
pub mod subnets;
mod token;
pub mod wire;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

// The public surface; any one test crate uses part of it.
#[allow(unused_imports)]
pub use boot::{BootedVm, NodeRegistrar};
#[allow(unused_imports)]
pub use faults::{CreateError, Delivery, Fault, QuotaScope, Target};
#[allow(unused_imports)]
pub use gallery::{GalleryImage, GalleryImageVersion};
#[allow(unused_imports)]
pub use kubelet::TlsBootstrapKubelet;
#[allow(unused_imports)]
pub use node::KubeNodeRegistrar;
#[allow(unused_imports)]
pub use state::{FakeArmConfig, RequestRecord};
#[allow(unused_imports)]
pub use subnets::FakeSubnet;
#[allow(unused_imports)]
pub use token::service_account_token;
#[allow(unused_imports)]
pub use wire::ArmError;

/// A running fake. Dropping it (or `shutdown`) stops the server.
pub struct FakeArm {
    shared: Arc<state::Shared>,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    server: Option<JoinHandle<()>>,
}

/// A VM as the fake holds it, for assertions.
#[derive(Debug, Clone, PartialEq)]
pub struct VmView {
    pub name: String,
    pub resource_group: String,
    pub provisioning_state: String,
    pub vm_size: String,
    /// Logical zone ("1"), None when regional.
    pub zone: Option<String>,
    pub spot: bool,
    /// The document GET returns.
    pub document: Value,
    /// The base64 custom data the VM was created with.
    pub custom_data: Option<String>,
}

impl FakeArm {
    /// Binds 127.0.0.1 on a free port and serves on the current tokio runtime.
    pub async fn start(config: FakeArmConfig) -> std::io::Result<FakeArm> {
        FakeArm::start_on(0, config).await
    }

    /// Binds 127.0.0.1:`port` (0: a free one) and serves on the current tokio runtime.
    pub async fn start_on(port: u16, config: FakeArmConfig) -> std::io::Result<FakeArm> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let state = state::State {
            gallery: config.gallery_images.clone(),
            subnets: config.subnets.clone(),
            ..state::State::default()
        };
        let shared =
            Arc::new(state::Shared { config, base_url: format!("http://{addr}"), state: Mutex::new(state) });
        let (stop, stopped) = watch::channel(false);
        let server = tokio::spawn(server::serve(listener, shared.clone(), stopped));
        Ok(FakeArm { shared, addr, stop, server: Some(server) })
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn base_url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// The ARM endpoint for the SDK builders' `.endpoint(..)`.
    pub fn endpoint(&self) -> url::Url {
        url::Url::parse(&self.shared.base_url).expect("the fake's base URL parses")
    }

    /// The authority host for azure_identity credentials (the token endpoint lives on the same server).
    pub fn authority_host(&self) -> url::Url {
        self.endpoint()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn config(&self) -> &FakeArmConfig {
        &self.shared.config
    }

    pub fn subscription_id(&self) -> &str {
        &self.shared.config.subscription_id
    }

    pub fn tenant_id(&self) -> &str {
        &self.shared.config.tenant_id
    }

    /// The first configured resource group (the node resource group).
    pub fn resource_group(&self) -> &str {
        self.shared.config.resource_groups.first().map(String::as_str).unwrap_or_default()
    }

    pub fn location(&self) -> &str {
        &self.shared.config.location
    }

    /// The first configured client id / secret pair.
    pub fn client_credentials(&self) -> (&str, &str) {
        self.shared.config.client_secrets.first().map(|(id, s)| (id.as_str(), s.as_str())).unwrap_or_default()
    }

    /// Settings for the production ARM clients that point them at this fake with its first client
    /// credential.
    pub fn arm_settings(
        &self,
        retry: karpenter_azure::cloud::azure::RetrySettings,
    ) -> karpenter_azure::cloud::azure::ArmSettings {
        use karpenter_azure::cloud::azure::{ArmSettings, CredentialSource, Secret};
        let (client_id, secret) = self.client_credentials();
        ArmSettings {
            arm_endpoint: self.endpoint(),
            authority_host: self.authority_host(),
            subscription_id: self.subscription_id().to_string(),
            tenant_id: self.tenant_id().to_string(),
            client_id: client_id.to_string(),
            credential: CredentialSource::ClientSecret(Secret::new(secret)),
            retry,
            timeouts: Default::default(),
        }
    }

    /// Launch settings for a provider against this fake: its region and node resource group, the
    /// default subnet `rg/vnet/nodes`, fast polling; tests override fields with struct update syntax.
    pub fn launch_settings(&self) -> karpenter_azure::cloud::azure::LaunchSettings {
        use karpenter_azure::cloud::azure::{BootstrapSettings, LaunchSettings, Secret};
        LaunchSettings {
            cluster_name: "test-cluster".into(),
            location: self.location().to_string(),
            node_resource_group: self.resource_group().to_string(),
            subnet_id: self.subnet_id(&FakeSubnet::new("rg", "vnet", "nodes", "")),
            ssh_public_key: "ssh-rsa AAAAB3Nza test".into(),
            admin_username: "azureuser".into(),
            node_identities: vec![],
            additional_tags: std::collections::BTreeMap::new(),
            os_disk_encryption_set_id: None,
            bootstrap: BootstrapSettings {
                network_plugin: "none".into(),
                overlay: true,
                cilium_dataplane: true,
                node_resource_group: self.resource_group().to_string(),
                location: self.location().to_string(),
                ..BootstrapSettings::new(
                    "https://cluster.example:443",
                    Secret::new("abcdef.0123456789abcdef"),
                    {
                        use base64::Engine as _;
                        base64::engine::general_purpose::STANDARD
                            .encode("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n")
                    },
                )
            },
            poll_interval: std::time::Duration::from_millis(30),
            max_polls: 200,
            max_concurrent_calls: 8,
        }
    }

    /// A bearer token the ARM endpoints accept, for hand-made requests.
    pub fn issue_token(&self) -> String {
        token::mint(&self.shared)
    }

    pub fn inject(&self, fault: Fault) {
        self.shared.lock().faults.push(fault);
    }

    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    pub fn faults(&self) -> Vec<Fault> {
        self.shared.lock().faults.clone()
    }

    /// Spot eviction: the VM disappears as if Azure deleted it. False when no VM has that name.
    pub fn evict(&self, vm_name: &str) -> bool {
        admin::evict(&self.shared, vm_name)
    }

    pub fn vms(&self) -> Vec<VmView> {
        let state = self.shared.lock();
        state
            .vms
            .values()
            .map(|vm| VmView {
                name: vm.name.clone(),
                resource_group: vm.resource_group.clone(),
                provisioning_state: vm.phase.provisioning_state().to_string(),
                vm_size: vm.vm_size.clone(),
                zone: vm.zone.clone(),
                spot: vm.spot,
                document: compute::render_vm(vm, false),
                custom_data: vm.custom_data.clone(),
            })
            .collect()
    }

    pub fn vm(&self, name: &str) -> Option<VmView> {
        self.vms().into_iter().find(|vm| vm.name.eq_ignore_ascii_case(name))
    }

    /// NIC documents as GET returns them.
    pub fn nics(&self) -> Vec<Value> {
        self.shared.lock().nics.values().map(|nic| nic.document.clone()).collect()
    }

    /// Deletes a backend pool of the `kubernetes` load balancer: NICs joining it are refused from now on.
    pub fn remove_backend_pool(&self, name: &str) {
        self.shared.lock().removed_pools.insert(name.to_string());
    }

    /// The name of the NSG AKS created in the node resource group.
    pub fn aks_nsg_name(&self) -> &'static str {
        lb::AKS_NSG
    }

    /// How many PUTs named this VM, refused ones included.
    pub fn vm_put_count(&self, name: &str) -> u32 {
        self.shared.lock().vm_puts.get(&wire::key(name)).copied().unwrap_or(0)
    }

    /// Every ARM and token request handled so far, in order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.lock().requests.clone()
    }

    /// Publishes a version of an existing community gallery image definition; false when the
    /// definition does not exist.
    pub fn publish_image_version(
        &self,
        gallery: &str,
        definition: &str,
        version: GalleryImageVersion,
    ) -> bool {
        gallery::publish(&mut self.shared.lock(), gallery, definition, version)
    }

    /// The ID of a subnet in this fake's subscription.
    pub fn subnet_id(&self, subnet: &FakeSubnet) -> String {
        subnet.id(self.subscription_id())
    }

    /// Makes a subnet exist.
    pub fn add_subnet(&self, subnet: FakeSubnet) {
        self.shared.lock().subnets.push(subnet);
    }

    /// Removes a subnet; false when there was none of that name.
    pub fn delete_subnet(&self, resource_group: &str, virtual_network: &str, name: &str) -> bool {
        let mut state = self.shared.lock();
        let before = state.subnets.len();
        state.subnets.retain(|s| {
            !(s.resource_group.eq_ignore_ascii_case(resource_group)
                && s.virtual_network.eq_ignore_ascii_case(virtual_network)
                && s.name.eq_ignore_ascii_case(name))
        });
        state.subnets.len() != before
    }

    /// The admin API's state dump.
    pub fn state_json(&self) -> Value {
        admin::dump(&self.shared)
    }

    /// Stops the server and waits for it to finish.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

impl Drop for FakeArm {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}
