//! An in-memory [`CloudProvider`] for unit tests and the simulator.
//!
//! Owns a map of launched instances, a list of offerings to refuse, the published image versions and
//! the subnets that exist. It mirrors the production provider's contract: offerings are tried in the
//! request's order, refused ones give `InsufficientCapacity`, create is idempotent per claim, delete of a
//! missing instance succeeds, an evicted instance reads as `NotFound`, and an image definition without a
//! published version or a subnet not added reads as `NotFound`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::azure::instancetypes::Catalog;
use super::azure::nodeclass::checks::{NodeClassChecks, NodeClassLookups};
use super::azure::subnet::SubnetId;
use super::azure::{launch, naming};
use super::{
    CloudError, CloudProvider, InPlace, Instance, LaunchRequest, LaunchRequestError, RefusedOffering,
};
use crate::apis::{AKSNodeClass, NodeClaim};
use crate::catalog::{CapacityOptions, PriceSource, PriceTable, UnavailableOfferings};
use crate::model::{CapacityType, InstanceType};

/// The fake's subscription and resource group, used in provider IDs.
const FAKE_SUBSCRIPTION: &str = "00000000-0000-0000-0000-000000000000";
const FAKE_RESOURCE_GROUP: &str = "mc_fake";

/// The subnet of AKSNodeClasses without their own; it exists once added ([`FakeCloud::add_subnet`]).
pub const FAKE_CLUSTER_SUBNET: &str = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes";

/// The fake's region: its instance types are the embedded catalog's for it, at the static prices.
const FAKE_REGION: &str = "eastus";

/// In-memory cloud. Cheap to create; share it behind an `Arc`.
pub struct FakeCloud {
    inner: Mutex<Inner>,
    catalog: Catalog,
    node_class_checks: tokio::sync::Mutex<NodeClassChecks>,
}

impl Default for FakeCloud {
    fn default() -> Self {
        let unavailable = Arc::new(Mutex::new(UnavailableOfferings::new()));
        let prices = PriceTable::static_for_region(FAKE_REGION);
        let catalog = Catalog::new(
            FAKE_REGION,
            CapacityOptions::default(),
            prices,
            unavailable,
            Arc::new(|| Duration::ZERO),
        )
        .expect("the embedded catalog has the fake's region");
        let node_class_checks = tokio::sync::Mutex::new(NodeClassChecks::new());
        FakeCloud { inner: Mutex::new(Inner::default()), catalog, node_class_checks }
    }
}

#[derive(Debug, Default)]
struct Inner {
    instances: BTreeMap<String, Instance>,
    /// (size, zone, capacity type) that creates refuse, with the reason reported.
    refusals: Vec<(String, String, CapacityType, String)>,
    create_calls: u32,
    /// (gallery, definition) → the version `latest_image_version` answers.
    image_versions: BTreeMap<(String, String), String>,
    /// Lower-cased IDs of the subnets that exist.
    subnets: Vec<String>,
    /// When set, image and subnet lookups fail with it.
    lookup_error: Option<CloudError>,
    lookup_calls: u32,
    /// Network interfaces left without a VM (a refused create's, made by hand).
    nics: BTreeSet<String>,
    /// VM and NIC names whose deletes fail, with the error.
    refused_deletes: BTreeMap<String, CloudError>,
}

impl FakeCloud {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes creates of this offering fail with `reason` (e.g. `ZonalAllocationFailed`).
    pub fn refuse(&self, instance_type: &str, zone: &str, capacity_type: CapacityType, reason: &str) {
        self.lock().refusals.push((instance_type.into(), zone.into(), capacity_type, reason.into()));
    }

    /// Removes an instance as a spot eviction would; false when there was none.
    pub fn evict(&self, name: &str) -> bool {
        self.lock().instances.remove(name).is_some()
    }

    pub fn instances(&self) -> Vec<Instance> {
        self.lock().instances.values().cloned().collect()
    }

    pub fn create_calls(&self) -> u32 {
        self.lock().create_calls
    }

    /// Makes `version` the newest usable version of an image definition.
    pub fn publish_image(&self, gallery: &str, definition: &str, version: &str) {
        self.lock().image_versions.insert((gallery.into(), definition.into()), version.into());
    }

    /// Makes a subnet exist.
    pub fn add_subnet(&self, subnet_id: &str) {
        self.lock().subnets.push(subnet_id.to_ascii_lowercase());
    }

    /// Leaves a network interface without a VM, as a refused create can.
    pub fn add_nic(&self, name: &str) {
        self.lock().nics.insert(name.to_string());
    }

    /// Makes deletes of the VM or NIC `name` fail with `error` (None: succeed again).
    pub fn refuse_delete(&self, name: &str, error: Option<CloudError>) {
        let mut inner = self.lock();
        match error {
            Some(error) => inner.refused_deletes.insert(name.to_string(), error),
            None => inner.refused_deletes.remove(name),
        };
    }

    /// Makes image and subnet lookups fail with `error` (None: answer again).
    pub fn fail_lookups(&self, error: Option<CloudError>) {
        self.lock().lookup_error = error;
    }

    /// Image and subnet lookups so far.
    pub fn lookup_calls(&self) -> u32 {
        self.lock().lookup_calls
    }
}

impl CloudProvider for FakeCloud {
    async fn create(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        let mut inner = self.lock();
        inner.create_calls += 1;
        let name = naming::resource_name(&request.claim_name);
        if let Some(existing) = inner.instances.get(&name) {
            return Ok(existing.clone());
        }
        let mut refused = Vec::new();
        for (option, offering) in super::allocation::ranked(request) {
            let refusal = inner.refusals.iter().find(|(sku, zone, ct, _)| {
                *sku == option.name && *zone == offering.zone && *ct == offering.capacity_type
            });
            if let Some((_, _, _, reason)) = refusal {
                refused.push(RefusedOffering {
                    instance_type: option.name.clone(),
                    zone: offering.zone.clone(),
                    capacity_type: offering.capacity_type,
                    reason: reason.clone(),
                });
                continue;
            }
            let instance = Instance {
                name: name.clone(),
                provider_id: naming::provider_id(FAKE_SUBSCRIPTION, FAKE_RESOURCE_GROUP, &name),
                instance_type: option.name.clone(),
                zone: super::logical_zone(&offering.zone).map(|_| offering.zone.clone()),
                capacity_type: offering.capacity_type,
                nodepool: (!request.nodepool.is_empty()).then(|| request.nodepool.clone()),
                image_id: Some(option.image_id.clone()),
                state: "Succeeded".to_string(),
                created: None,
                tags: request.tags.clone(),
            };
            inner.instances.insert(name, instance.clone());
            return Ok(instance);
        }
        Err(CloudError::InsufficientCapacity { refused })
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        let name =
            naming::parse_provider_id(provider_id).map_err(|e| CloudError::Invalid(e.to_string()))?.vm_name;
        self.lock().instances.get(&name).cloned().ok_or(CloudError::NotFound(name))
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(self.instances())
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        let name =
            naming::parse_provider_id(provider_id).map_err(|e| CloudError::Invalid(e.to_string()))?.vm_name;
        let mut inner = self.lock();
        if let Some(error) = inner.refused_deletes.get(&name) {
            return Err(error.clone());
        }
        inner.instances.remove(&name);
        Ok(())
    }

    async fn list_nics(&self) -> Result<Vec<String>, CloudError> {
        Ok(self.lock().nics.iter().cloned().collect())
    }

    async fn delete_nic(&self, name: &str) -> Result<(), CloudError> {
        let mut inner = self.lock();
        if let Some(error) = inner.refused_deletes.get(name) {
            return Err(error.clone());
        }
        inner.nics.remove(name);
        Ok(())
    }

    fn desired_in_place(&self, nodepool: &str, node_class_tags: &BTreeMap<String, String>) -> InPlace {
        let mut tags = node_class_tags.clone();
        tags.insert("karpenter.sh_nodepool".into(), nodepool.into());
        InPlace { tags, identities: vec![] }
    }

    async fn update_in_place(&self, provider_id: &str, desired: &InPlace) -> Result<(), CloudError> {
        let name =
            naming::parse_provider_id(provider_id).map_err(|e| CloudError::Invalid(e.to_string()))?.vm_name;
        let mut inner = self.lock();
        let instance = inner.instances.get_mut(&name).ok_or(CloudError::NotFound(name))?;
        instance.tags = desired.tags.clone();
        Ok(())
    }

    async fn node_class_status(
        &self,
        class: &AKSNodeClass,
        version: &str,
        upgrades: super::ImageUpgrades,
        now: &Time,
    ) -> Option<serde_json::Value> {
        let mut checks = self.node_class_checks.lock().await;
        let (subnet, node_resource_group) = (FAKE_CLUSTER_SUBNET, FAKE_RESOURCE_GROUP);
        let (cluster, time) = ((subnet, node_resource_group), (Instant::now(), now));
        checks.status(self, class, version, cluster, None, upgrades, time).await
    }

    fn forget_unused_node_class_lookups(&self) {
        // Only the status loop asks, between its passes; were a pass running, the next call forgets.
        if let Ok(mut checks) = self.node_class_checks.try_lock() {
            checks.forget_unused();
        }
    }

    fn instance_types(&self, class: Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>> {
        self.catalog.types_for(class)
    }

    fn launch_request(
        &self,
        claim: &NodeClaim,
        class: Option<&AKSNodeClass>,
    ) -> Result<LaunchRequest, LaunchRequestError> {
        launch::request_from(&self.catalog, claim, class)
    }

    fn price_age(&self, now: Duration) -> (PriceSource, Duration) {
        self.catalog.pricing().age(now)
    }

    fn claim_of_resource(&self, resource_name: &str) -> Option<String> {
        naming::claim_name(resource_name).map(str::to_string)
    }

    fn claim_of_provider_id(&self, provider_id: &str) -> Option<String> {
        naming::claim_of_provider_id(provider_id)
    }
}

impl NodeClassLookups for FakeCloud {
    async fn latest_image_version(&self, gallery: &str, definition: &str) -> Result<String, CloudError> {
        let mut inner = self.lock();
        inner.lookup_calls += 1;
        if let Some(error) = inner.lookup_error.clone() {
            return Err(error);
        }
        let key = (gallery.to_string(), definition.to_string());
        inner
            .image_versions
            .get(&key)
            .cloned()
            .ok_or_else(|| CloudError::NotFound(format!("image {gallery}/{definition} has no version")))
    }

    async fn check_subnet(&self, subnet: &SubnetId) -> Result<(), CloudError> {
        let id = format!("{}/subnets/{}", subnet.vnet_id(), subnet.subnet).to_ascii_lowercase();
        let mut inner = self.lock();
        inner.lookup_calls += 1;
        if let Some(error) = inner.lookup_error.clone() {
            return Err(error);
        }
        if inner.subnets.contains(&id) {
            Ok(())
        } else {
            Err(CloudError::NotFound(format!("subnet {id}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::{InstanceTypeOption, OfferingChoice};

    fn request() -> LaunchRequest {
        let offering = |zone: &str| OfferingChoice {
            zone: zone.into(),
            capacity_type: CapacityType::OnDemand,
            price: 0.1,
        };
        let option = InstanceTypeOption {
            name: "Standard_D2s_v5".into(),
            family: None,
            vcpus: 2,
            accelerated_networking: true,
            ephemeral_os_disk: None,
            image_id: "/CommunityGalleries/g/images/d/versions/1".into(),
            offerings: vec![offering("eastus-1"), offering("eastus-2")],
        };
        LaunchRequest {
            node_class: crate::cloud::azure::NodeClassBootstrap {
                kubernetes_version: "1.33.2".into(),
                gpu_driver: true,
                ..Default::default()
            },
            ..LaunchRequest::for_test("default-abc", "default", vec![option])
        }
    }

    #[tokio::test]
    async fn create_skips_refused_offerings_and_is_idempotent() {
        let cloud = FakeCloud::new();
        cloud.refuse("Standard_D2s_v5", "eastus-1", CapacityType::OnDemand, "ZonalAllocationFailed");
        let created = cloud.create(&request()).await.unwrap();
        assert_eq!(created.zone.as_deref(), Some("eastus-2"));
        assert_eq!(cloud.create(&request()).await.unwrap(), created);
        assert_eq!(cloud.list().await.unwrap().len(), 1);
        assert!(cloud.evict("aks-default-abc"));
        assert!(matches!(cloud.get(&created.provider_id).await, Err(CloudError::NotFound(_))));
        cloud.delete(&created.provider_id).await.unwrap();
    }

    #[tokio::test]
    async fn images_and_subnets_exist_once_added() {
        let cloud = FakeCloud::new();
        assert!(matches!(cloud.latest_image_version("g", "d").await, Err(CloudError::NotFound(_))));
        cloud.publish_image("g", "d", "202506.02.0");
        assert_eq!(cloud.latest_image_version("g", "d").await.unwrap(), "202506.02.0");
        let id = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/n";
        let subnet = SubnetId::parse(id).unwrap();
        assert!(matches!(cloud.check_subnet(&subnet).await, Err(CloudError::NotFound(_))));
        cloud.add_subnet(id);
        cloud.check_subnet(&subnet).await.unwrap();
    }

    #[tokio::test]
    async fn all_refused_is_insufficient_capacity() {
        let cloud = FakeCloud::new();
        for zone in ["eastus-1", "eastus-2"] {
            cloud.refuse("Standard_D2s_v5", zone, CapacityType::OnDemand, "SKUNotAvailable");
        }
        let Err(CloudError::InsufficientCapacity { refused }) = cloud.create(&request()).await else {
            panic!("expected insufficient capacity")
        };
        assert_eq!(refused.len(), 2);
    }
}
