//! The cloud-provider boundary: what the NodeClaim controllers ask of a cloud, in plain data.
//!
//! Owns the [`CloudProvider`] trait, the request and result types ([`LaunchRequest`], [`Instance`]) and
//! the one error enum [`CloudError`] whose static [`CloudError::category`] is used as a metric label and
//! an event reason. Implementations: `azure` (production, ARM) and `fake` (in memory, for unit tests and
//! the simulator); `metered` wraps either with the cloud-provider metrics.

pub mod allocation;
pub mod azure;
pub mod fake;
pub mod metered;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::apis::common::Taint;
use crate::apis::{AKSNodeClass, NodeClaim};
use crate::catalog::{NodeSecurity, PriceSource, SkuRecord, Timestamp};
use crate::disruption::repair::{not_ready_policies, RepairPolicy};
use crate::model::{CapacityType, InstanceType};

/// Reads "now" for the unavailable-offerings cache; injected so tests and the simulator control time.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Wall time since the Unix epoch.
pub fn wall_clock() -> Clock {
    Arc::new(|| SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO))
}

/// Launches, finds and removes the machines behind NodeClaims.
///
/// Every method is idempotent: create reuses what an earlier, interrupted create left behind, delete of
/// something already gone succeeds.
/// Whether the node image versions a class already resolved may move to newer ones now: not outside
/// the cluster's node OS maintenance window (upstream provider `pkg/controllers/nodeclass/status/images.go`).
/// A new class, a Kubernetes upgrade and a change of the class's image selection resolve anew either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageUpgrades {
    Allowed,
    Held,
}

pub trait CloudProvider: Send + Sync {
    /// Launches a machine for the claim, trying the request's offerings in order.
    fn create(&self, request: &LaunchRequest) -> impl Future<Output = Result<Instance, CloudError>> + Send;
    /// The machine behind a providerID; [`CloudError::NotFound`] when it is gone (e.g. spot eviction).
    fn get(&self, provider_id: &str) -> impl Future<Output = Result<Instance, CloudError>> + Send;
    /// Every machine this cluster owns (found by its cluster tag).
    fn list(&self) -> impl Future<Output = Result<Vec<Instance>, CloudError>> + Send;
    /// Removes the machine and what belongs to it; success when it is already gone.
    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// Names of the network interfaces this cluster owns (found by its cluster tag), for garbage
    /// collection of NICs whose VM never came. Clouds without separate NICs have none.
    fn list_nics(&self) -> impl Future<Output = Result<Vec<String>, CloudError>> + Send {
        async { Ok(Vec::new()) }
    }
    /// Removes one network interface by name; success when it is already gone.
    fn delete_nic(&self, name: &str) -> impl Future<Output = Result<(), CloudError>> + Send {
        let _ = name;
        async { Ok(()) }
    }
    /// What a running machine of `nodepool` whose AKSNodeClass has `node_class_tags` should carry and
    /// can be changed without replacing it (upstream's in-place update): its tags and its identities.
    /// Clouds without either have nothing to update.
    fn desired_in_place(&self, nodepool: &str, node_class_tags: &BTreeMap<String, String>) -> InPlace {
        let _ = (nodepool, node_class_tags);
        InPlace::default()
    }
    /// Brings the machine (and what belongs to it, such as its NIC) to `desired`: tags replaced,
    /// missing identities added; [`CloudError::NotFound`] when the machine is gone.
    fn update_in_place(
        &self,
        provider_id: &str,
        desired: &InPlace,
    ) -> impl Future<Output = Result<(), CloudError>> + Send {
        let _ = (provider_id, desired);
        async { Ok(()) }
    }
    /// The AKSNodeClass status for `class` on a cluster at Kubernetes `version` (its images and whether
    /// it can launch), or None when what is stored is already right; `now` stamps changed conditions.
    /// The provider remembers what it looked up and asks the cloud again only when due.
    fn node_class_status(
        &self,
        class: &AKSNodeClass,
        version: &str,
        upgrades: ImageUpgrades,
        now: &Time,
    ) -> impl Future<Output = Option<serde_json::Value>> + Send;
    /// How long the cloud credential has failed to get tokens without a success in between, and the
    /// last failure; None while it works. Clouds without credentials never fail.
    fn credentials_failing(&self) -> Option<(Duration, String)> {
        None
    }
    /// Forgets the lookups no class asked for since the last call (deleted classes, superseded
    /// Kubernetes versions), so what is remembered stays bounded by what the classes need.
    fn forget_unused_node_class_lookups(&self);
    /// The instance types a NodePool whose AKSNodeClass is `class` can launch now (the cloud's
    /// defaults when the class is unknown): priced, with the offerings the cloud refused recently
    /// marked unavailable (upstream `CloudProvider.GetInstanceTypes`). The solver and the launch see
    /// the same list.
    fn instance_types(&self, class: Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>>;
    /// What launching `claim` asks of the cloud, from the claim and its AKSNodeClass (`None` when the
    /// class is not known): the sizes, offerings and images to try and how the machine boots.
    fn launch_request(
        &self,
        claim: &NodeClaim,
        class: Option<&AKSNodeClass>,
    ) -> Result<LaunchRequest, LaunchRequestError>;
    /// Where the prices in effect come from and how old they are at `now` (time since the Unix epoch).
    fn price_age(&self, now: Duration) -> (PriceSource, Duration);
    /// The NodeClaim a machine or network interface was made for, read from its name (what lets a
    /// retried create find an earlier attempt's resources); None for a name this provider never gives.
    fn claim_of_resource(&self, resource_name: &str) -> Option<String>;
    /// The NodeClaim a machine was made for, read from its providerID (a Node's `spec.providerID`);
    /// None when the ID is not one of this provider's machines named for a claim.
    fn claim_of_provider_id(&self, provider_id: &str) -> Option<String>;
    /// The node conditions that make node repair replace a node, and after how long (upstream
    /// `CloudProvider.RepairPolicies`); `not_ready` is the toleration of `Ready` False or Unknown.
    fn repair_policies(&self, not_ready: Duration) -> Vec<RepairPolicy> {
        not_ready_policies(not_ready)
    }
    /// The client ID of the kubelet identity new nodes are launched with, when the provider labels
    /// nodes with it (`kubernetes.azure.com/kubelet-identity-client-id`): a node with another one has
    /// drifted (`KubeletIdentityDrift`).
    fn kubelet_identity(&self) -> Option<String> {
        None
    }
}

/// The part of a running machine that changes in place rather than by replacement.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct InPlace {
    pub tags: BTreeMap<String, String>,
    /// User-assigned identity resource IDs the machine must have (others it has are kept).
    pub identities: Vec<String>,
}

/// Everything a launch needs, resolved by the controller from the NodeClaim, its NodePool and its
/// AKSNodeClass.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchRequest {
    /// The NodeClaim name; the VM, NIC and OS disk are named `aks-<claim>`.
    pub claim_name: String,
    /// Empty for a standalone claim.
    pub nodepool: String,
    /// The sizes the claim allows, the solver's ranking first. Which offering is tried is decided by
    /// [`allocation::ranked`] over all of them: the cheapest one the unavailable cache does not block.
    pub options: Vec<InstanceTypeOption>,
    /// Node labels from the claim (single-valued requirements and template labels). The provider keeps
    /// only those the kubelet may set and adds the chosen offering's zone, capacity type and size.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// The AKSNodeClass's own subnet (`vnetSubnetID`); None puts the node in the cluster subnet.
    pub subnet_id: Option<String>,
    pub os_disk_size_gb: u32,
    /// AKSNodeClass `spec.tags` (keys may contain '/').
    pub tags: BTreeMap<String, String>,
    pub kubelet: KubeletSettings,
    /// AKSNodeClass `spec.security`: encryption at host and trusted launch. The options are sizes that
    /// honour it (the catalog filters by class) and, for trusted launch, trusted-launch images.
    pub security: NodeSecurity,
    /// What the AKSNodeClass decides about the bootstrap: image family, Kubernetes version, GPU driver,
    /// `linuxOSConfig`, local DNS, artifact streaming.
    pub node_class: azure::bootstrap::NodeClassBootstrap,
}

#[cfg(test)]
impl LaunchRequest {
    /// A request for `claim` in `nodepool` with `options` and nothing else set: no labels, taints or
    /// tags, the default kubelet and a 128 GiB OS disk. The unit tests' one builder.
    pub(crate) fn for_test(claim: &str, nodepool: &str, options: Vec<InstanceTypeOption>) -> LaunchRequest {
        LaunchRequest {
            claim_name: claim.into(),
            nodepool: nodepool.into(),
            options,
            labels: BTreeMap::new(),
            taints: vec![],
            startup_taints: vec![],
            subnet_id: None,
            os_disk_size_gb: 128,
            tags: BTreeMap::new(),
            kubelet: KubeletSettings::default(),
            security: Default::default(),
            node_class: Default::default(),
        }
    }
}

/// Per-node kubelet values the bootstrap script passes as flags.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KubeletSettings {
    pub max_pods: u32,
    /// e.g. `cpu=100m`, `memory=1843Mi`.
    pub kube_reserved: BTreeMap<String, String>,
    /// Flags from the AKSNodeClass `spec.kubelet` ([`crate::cloud::azure::bootstrap::kubelet_config_flags`]).
    pub config_flags: Vec<String>,
}

/// One VM size the claim may run on, with the offerings to try in ranked order.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceTypeOption {
    pub name: String,
    /// Resource SKU family (e.g. `standardDSv5Family`), for family-wide quota marks.
    pub family: Option<String>,
    pub vcpus: u32,
    pub accelerated_networking: bool,
    /// Where an ephemeral OS disk can live on this size, if anywhere.
    pub ephemeral_os_disk: Option<EphemeralOsDisk>,
    /// The image this size boots (a community gallery or SIG image version ID): the first AKSNodeClass
    /// status image whose arch and Hyper-V generation the size meets.
    pub image_id: String,
    pub offerings: Vec<OfferingChoice>,
}

impl InstanceTypeOption {
    /// The facts of a catalog size, booting `image_id`, with the given offerings.
    pub fn from_sku(sku: &SkuRecord, image_id: &str, offerings: Vec<OfferingChoice>) -> Self {
        InstanceTypeOption {
            image_id: image_id.to_string(),
            name: sku.name.clone(),
            family: sku.family.clone(),
            vcpus: sku.vcpus,
            accelerated_networking: sku.accelerated_networking == Some(true),
            ephemeral_os_disk: EphemeralOsDisk::for_sku(sku),
            offerings,
        }
    }
}

/// A zone (`<region>-<n>`, or `""`/`"0"` for regional), a capacity type and the catalog's price.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferingChoice {
    pub zone: String,
    pub capacity_type: CapacityType,
    /// USD per hour, as the catalog (and so the solver) priced it; orders the launch attempts.
    pub price: f64,
}

/// The local disk an ephemeral OS disk is placed on (ARM `diffDiskSettings.placement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EphemeralPlacement {
    NvmeDisk,
    CacheDisk,
    ResourceDisk,
}

impl EphemeralPlacement {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NvmeDisk => "NvmeDisk",
            Self::CacheDisk => "CacheDisk",
            Self::ResourceDisk => "ResourceDisk",
        }
    }
}

/// Ephemeral OS disk capability of a size: the placement and its size in GB (the
/// `sku-storage-ephemeralos-maxsize` label value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EphemeralOsDisk {
    pub placement: EphemeralPlacement,
    pub max_size_gb: u64,
}

impl EphemeralOsDisk {
    /// Upstream preference NVMe > cache > resource disk (upstream provider `instancetype.go`), among placements the SKU lists.
    pub fn for_sku(sku: &SkuRecord) -> Option<Self> {
        let max_size_gb = sku.ephemeral_os_disk_max_gb()?;
        let listed = |p: &str| {
            sku.ephemeral_os_disk_placements
                .as_ref()
                .is_none_or(|ps| ps.iter().any(|x| x.eq_ignore_ascii_case(p)))
        };
        let has = |gib: Option<f64>| gib.is_some_and(|g| g > 0.0);
        let placement =
            if sku.ephemeral_os_disk_placements.is_some() && listed("NvmeDisk") && has(sku.nvme_disk_gib) {
                EphemeralPlacement::NvmeDisk
            } else if listed("CacheDisk") && has(sku.cache_disk_gib) {
                EphemeralPlacement::CacheDisk
            } else {
                EphemeralPlacement::ResourceDisk
            };
        Some(EphemeralOsDisk { placement, max_size_gb })
    }
}

/// A launched machine as the controllers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// The VM name (`aks-<claim>`).
    pub name: String,
    pub provider_id: String,
    pub instance_type: String,
    /// `<region>-<n>`, None when regional.
    pub zone: Option<String>,
    pub capacity_type: CapacityType,
    /// From the `karpenter.sh_nodepool` tag.
    pub nodepool: Option<String>,
    pub image_id: Option<String>,
    /// ARM provisioning state (`Creating`, `Succeeded`, `Deleting`, ...).
    pub state: String,
    /// RFC 3339, from the VM's `timeCreated`.
    pub created: Option<String>,
    pub tags: BTreeMap<String, String>,
}

/// One offering Azure refused during a create, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedOffering {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    /// The unavailable-reason category (`ZonalAllocationFailed`, ...) or the ARM code.
    pub reason: String,
}

/// Why a NodeClaim cannot be turned into a launch request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchRequestError {
    #[error("AKSNodeClass {0} not found")]
    NodeClassMissing(String),
    #[error("AKSNodeClass {class} is not Ready: {why}")]
    NodeClassNotReady { class: String, why: String },
    #[error("AKSNodeClass {0} has no resolved image yet")]
    NoImage(String),
    #[error("no image of AKSNodeClass {class} boots any of the NodeClaim's sizes ({sizes})")]
    NoCompatibleImage { class: String, sizes: String },
    #[error("invalid requirements: {0}")]
    Requirements(String),
    #[error("no instance type in the catalog meets the NodeClaim's requirements")]
    NoInstanceType,
}

impl LaunchRequestError {
    /// Static category for events and metrics. Every node-class problem is `NodeClassNotReady`: the
    /// claim cannot launch until the class changes, so the lifecycle deletes it, as upstream does.
    pub fn category(&self) -> &'static str {
        match self {
            LaunchRequestError::NodeClassMissing(_) => "NodeClassNotFound",
            LaunchRequestError::NodeClassNotReady { .. }
            | LaunchRequestError::NoImage(_)
            | LaunchRequestError::NoCompatibleImage { .. } => "NodeClassNotReady",
            LaunchRequestError::Requirements(_) => "InvalidRequirements",
            LaunchRequestError::NoInstanceType => "NoInstanceType",
        }
    }
}

/// Why a cloud call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    /// No offering could be launched; the claim should be deleted so the next solve picks another.
    #[error("insufficient capacity: {}", describe_refused(refused))]
    InsufficientCapacity { refused: Vec<RefusedOffering> },
    #[error("node class not ready: {0}")]
    NodeClassNotReady(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// ARM throttled us past the retry budget.
    #[error("throttled by Azure: {0}")]
    Throttled(String),
    /// A server error, a timeout or an operation that ended badly; retry later.
    #[error("transient Azure error: {0}")]
    Transient(String),
    /// The request was rejected as invalid; retrying the same request will not help.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The credential was refused or no token could be obtained.
    #[error("authentication failed: {0}")]
    Unauthorized(String),
}

fn describe_refused(refused: &[RefusedOffering]) -> String {
    if refused.is_empty() {
        return "every offering is marked unavailable".to_string();
    }
    let parts: Vec<String> = refused
        .iter()
        .map(|r| format!("{}/{}/{}: {}", r.instance_type, r.zone, r.capacity_type.as_str(), r.reason))
        .collect();
    parts.join("; ")
}

impl CloudError {
    /// Static category for metric labels and event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            CloudError::InsufficientCapacity { .. } => "InsufficientCapacity",
            CloudError::NodeClassNotReady(_) => "NodeClassNotReady",
            CloudError::NotFound(_) => "NotFound",
            CloudError::Throttled(_) => "Throttled",
            CloudError::Transient(_) => "Transient",
            CloudError::Invalid(_) => "Invalid",
            CloudError::Unauthorized(_) => "Unauthorized",
        }
    }

    /// Whether the same call may succeed later without changing the request.
    pub fn is_retryable(&self) -> bool {
        matches!(self, CloudError::Throttled(_) | CloudError::Transient(_))
    }
}

/// The logical Azure zone ("1") of a Kubernetes zone label (`eastus-1`); None when regional.
pub fn logical_zone(zone: &str) -> Option<&str> {
    let (_, n) = zone.rsplit_once('-')?;
    (!n.is_empty() && n != "0" && n.bytes().all(|b| b.is_ascii_digit())).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_zones() {
        assert_eq!(logical_zone("eastus-1"), Some("1"));
        assert_eq!(logical_zone("0"), None);
        assert_eq!(logical_zone(""), None);
        assert_eq!(logical_zone("eastus"), None);
    }

    #[test]
    fn categories_are_static_and_messages_name_offerings() {
        let err = CloudError::InsufficientCapacity {
            refused: vec![RefusedOffering {
                instance_type: "Standard_D4s_v5".into(),
                zone: "eastus-1".into(),
                capacity_type: CapacityType::Spot,
                reason: "ZonalAllocationFailed".into(),
            }],
        };
        assert_eq!(err.category(), "InsufficientCapacity");
        assert!(err.to_string().contains("Standard_D4s_v5/eastus-1/spot: ZonalAllocationFailed"));
        assert!(CloudError::Throttled("x".into()).is_retryable());
        assert!(!CloudError::Invalid("x".into()).is_retryable());
    }
}
