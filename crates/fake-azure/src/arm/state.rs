//! The fake's in-memory world: configuration, VMs, NICs, operations, gallery images, subnets, issued
//! tokens, faults and the request log, all behind one `Mutex`.
//!
//! Time-driven transitions (Creating → Succeeded/Failed, Deleting → gone) are applied lazily by `settle`,
//! which every request calls first, so no background task is needed to keep the state honest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::boot::NodeRegistrar;
use super::faults::Fault;
use super::gallery::{self, GalleryImage};
use super::subnets::{self, FakeSubnet};
use super::wire::ArmError;

/// How the fake behaves; `Default` gives a fast, error-free eastus subscription.
#[derive(Clone)]
pub struct FakeArmConfig {
    pub subscription_id: String,
    pub tenant_id: String,
    /// Resource groups that exist; requests to others get `ResourceGroupNotFound`.
    pub resource_groups: Vec<String>,
    pub location: String,
    /// Client-credential pairs the token endpoint accepts.
    pub client_secrets: Vec<(String, String)>,
    /// Federated (workload identity) assertion the token endpoint accepts; None accepts any. Either way
    /// the assertion must be a JWT that has not expired, as Entra ID requires.
    pub federated_token: Option<String>,
    /// Client IDs of the user-assigned managed identities the instance metadata service serves tokens
    /// for (`GET /metadata/identity/oauth2/token`); the system-assigned identity is always served.
    pub managed_identities: Vec<String>,
    /// How long an access token the token endpoint issues is accepted (Entra ID's app tokens: about an
    /// hour); ARM refuses it after that with `ExpiredAuthenticationToken`.
    pub token_lifetime: Duration,
    /// How long a VM create stays `Creating`.
    pub provisioning_delay: Duration,
    /// How long a VM delete stays `Deleting`.
    pub deletion_delay: Duration,
    /// The poll interval advertised by `Retry-After` on LRO responses.
    pub lro_retry_after: Duration,
    /// Page size of list responses (`nextLink` paging); None returns everything in one page.
    pub list_page_size: Option<usize>,
    /// Delay between a VM reaching `Succeeded` and its node registering.
    pub boot_delay: Duration,
    /// Called when a VM has booted; None disables boot simulation.
    pub registrar: Option<Arc<dyn NodeRegistrar>>,
    /// Community gallery image definitions and their versions (changeable later with
    /// `FakeArm::publish_image_version`).
    pub gallery_images: Vec<GalleryImage>,
    /// Subnets that exist, in this subscription (changeable later with `FakeArm::add_subnet` /
    /// `delete_subnet`).
    pub subnets: Vec<FakeSubnet>,
    /// How long Network keeps a NIC reserved for a VM whose create failed: deleting it meanwhile is
    /// refused with `NicReservedForAnotherVm`. Azure's is 180 s; zero (the default) leaves it out for
    /// tests that do not model it.
    pub nic_reservation: Duration,
}

impl Default for FakeArmConfig {
    fn default() -> Self {
        FakeArmConfig {
            subscription_id: "00000000-0000-0000-0000-000000000001".to_string(),
            tenant_id: "00000000-0000-0000-0000-0000000000aa".to_string(),
            resource_groups: vec!["MC_rg_cluster_eastus".to_string()],
            location: "eastus".to_string(),
            client_secrets: vec![("karpenter-client".to_string(), "karpenter-secret".to_string())],
            federated_token: None,
            token_lifetime: Duration::from_secs(3599),
            managed_identities: vec![],
            provisioning_delay: Duration::from_millis(300),
            deletion_delay: Duration::from_millis(200),
            lro_retry_after: Duration::from_millis(100),
            list_page_size: None,
            boot_delay: Duration::from_millis(100),
            registrar: None,
            gallery_images: gallery::default_images(),
            subnets: subnets::default_subnets(),
            nic_reservation: Duration::ZERO,
        }
    }
}

impl std::fmt::Debug for FakeArmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeArmConfig")
            .field("subscription_id", &self.subscription_id)
            .field("resource_groups", &self.resource_groups)
            .field("location", &self.location)
            .field("registrar", &self.registrar.is_some())
            .finish_non_exhaustive()
    }
}

/// Where a VM is in its lifecycle.
#[derive(Debug, Clone, PartialEq)]
pub enum VmPhase {
    Creating { until: Instant, outcome: Result<(), ArmError> },
    Succeeded,
    Failed(ArmError),
    Deleting { until: Instant },
}

impl VmPhase {
    pub fn provisioning_state(&self) -> &'static str {
        match self {
            VmPhase::Creating { .. } => "Creating",
            VmPhase::Succeeded => "Succeeded",
            VmPhase::Failed(_) => "Failed",
            VmPhase::Deleting { .. } => "Deleting",
        }
    }
}

/// One VM: the stored ARM document plus what the fake needs to simulate it.
#[derive(Debug, Clone)]
pub struct VmRecord {
    pub name: String,
    pub resource_group: String,
    /// The GET document without `properties.provisioningState`, which is derived from `phase`.
    pub document: Value,
    /// The base64 custom data as sent; Azure never returns it on GET.
    pub custom_data: Option<String>,
    pub phase: VmPhase,
    pub vm_id: String,
    pub vm_size: String,
    pub family: String,
    pub vcpus: u32,
    /// Logical zone ("1"), None when regional.
    pub zone: Option<String>,
    pub spot: bool,
    /// IDs (lower-cased) of the NICs the VM references, with whether they are deleted along with it.
    pub nics: Vec<(String, bool)>,
}

/// One NIC as stored (the GET document) and the VM it is attached to.
#[derive(Debug, Clone)]
pub struct NicRecord {
    pub name: String,
    pub resource_group: String,
    pub document: Value,
    pub attached_vm: Option<String>,
    /// The VM (its ARM ID) whose failed create holds the NIC, and until when.
    pub reserved_for: Option<(String, Instant)>,
}

/// A long-running operation; its status is derived from the clock.
#[derive(Debug, Clone)]
pub struct Operation {
    pub start_time: String,
    pub until: Instant,
    pub outcome: Result<(), ArmError>,
    /// The VM (resource group, name keys) whose document the `Location` poll returns on success.
    pub vm: Option<(String, String)>,
}

/// One handled request, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    pub query: String,
    pub status: u16,
}

#[derive(Debug, Default)]
pub struct State {
    /// Keyed by (lower-cased resource group, lower-cased name).
    pub vms: BTreeMap<(String, String), VmRecord>,
    pub nics: BTreeMap<(String, String), NicRecord>,
    pub operations: BTreeMap<String, Operation>,
    /// Issued access tokens and when each expires.
    pub tokens: BTreeMap<String, Instant>,
    pub faults: Vec<Fault>,
    /// PUTs per lower-cased VM name, including refused ones.
    pub vm_puts: BTreeMap<String, u32>,
    pub requests: Vec<RequestRecord>,
    /// Monotonic counter for IDs, tokens and IP addresses.
    pub counter: u64,
    /// VMs removed by the platform (spot eviction) or deletion, for the boot simulator's deregistration.
    pub removed_vms: Vec<String>,
    /// Backend pools of the `kubernetes` load balancer deleted by a test (see `lb`).
    pub removed_pools: BTreeSet<String>,
    pub gallery: Vec<GalleryImage>,
    pub subnets: Vec<FakeSubnet>,
}

impl State {
    pub fn next_id(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// Applies every transition that is due at `now`: finished creates and finished deletes.
    pub fn settle(&mut self, now: Instant) {
        let mut gone = Vec::new();
        for (key, vm) in self.vms.iter_mut() {
            match &vm.phase {
                VmPhase::Creating { until, outcome } if *until <= now => {
                    vm.phase = match outcome {
                        Ok(()) => VmPhase::Succeeded,
                        Err(err) => VmPhase::Failed(err.clone()),
                    };
                }
                VmPhase::Deleting { until } if *until <= now => gone.push(key.clone()),
                _ => {}
            }
        }
        for key in gone {
            self.remove_vm(&key);
        }
    }

    /// Removes a VM as Azure does: NICs referenced with `deleteOption: Delete` go with it, the others are
    /// detached.
    pub fn remove_vm(&mut self, key: &(String, String)) {
        let Some(vm) = self.vms.remove(key) else { return };
        for (nic_id, delete_with_vm) in &vm.nics {
            let nic_key = self.nics.iter().find(|(_, nic)| nic_id_of(nic) == *nic_id).map(|(k, _)| k.clone());
            let Some(nic_key) = nic_key else { continue };
            if *delete_with_vm {
                self.nics.remove(&nic_key);
            } else if let Some(nic) = self.nics.get_mut(&nic_key) {
                nic.attached_vm = None;
                if let Some(props) = nic.document.get_mut("properties").and_then(Value::as_object_mut) {
                    props.remove("virtualMachine");
                }
            }
        }
        self.removed_vms.push(vm.name);
    }
}

/// The lower-cased ARM ID of a stored NIC.
pub fn nic_id_of(nic: &NicRecord) -> String {
    nic.document.get("id").and_then(Value::as_str).unwrap_or_default().to_ascii_lowercase()
}

/// Everything a request handler needs: the immutable config, the base URL and the state.
pub struct Shared {
    pub config: FakeArmConfig,
    pub base_url: String,
    pub state: Mutex<State>,
}

impl Shared {
    /// Locks and settles the state. A poisoned lock means a handler panicked; the state is still the best
    /// record of what happened, so keep serving.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        state.settle(Instant::now());
        state
    }

    pub fn has_resource_group(&self, name: &str) -> Option<&str> {
        self.config.resource_groups.iter().find(|rg| rg.eq_ignore_ascii_case(name)).map(String::as_str)
    }
}
