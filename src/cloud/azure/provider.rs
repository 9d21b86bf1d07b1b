//! [`AzureCloudProvider`]: the [`CloudProvider`] over ARM.
//!
//! Owns the create flow (upstream `pkg/providers/instance/vminstance.go`): reuse an existing VM, else
//! pick the best offering by the allocation rules ([`crate::cloud::allocation`]) that the
//! unavailable-offerings cache does not block, create the NIC then the VM, wait, and on failure delete
//! what this attempt created so nothing leaks. A capacity error marks the cache and, as upstream, ends
//! the attempt with `InsufficientCapacity` so the claim is deleted and the next solve picks another
//! offering. Get, list (by the cluster tag in the node resource group) and delete (VM with force, then
//! NIC; NotFound is success). ARM calls in flight are bounded by a semaphore.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use tokio::sync::Semaphore;

use super::bootstrap::{self, labels::aks_labels, NodeBootstrap};
use super::client::ArmClients;
use super::errors::{self, ArmFailure, CapacityClass};
use super::instancetypes::Catalog;
use super::nodeclass::checks::{NodeClassChecks, NodeClassLookups};
use super::subnet::SubnetId;
use super::{imagefamily, launch, lookups, lro, naming, network, nic, vm, LaunchSettings};
use crate::apis::{AKSNodeClass, NodeClaim};
use crate::catalog::unavailable::OfferingRef;
use crate::catalog::{PriceSource, UnavailableOfferings, UnavailableReason};
use crate::cloud::{
    allocation, logical_zone, Clock, CloudError, CloudProvider, InPlace, Instance, InstanceTypeOption,
    LaunchRequest, LaunchRequestError, OfferingChoice, RefusedOffering,
};
use crate::model::{labels, InstanceType};
use crate::operator::metrics::{self, VmCreate};

/// How long the credential must keep failing before the AKSNodeClasses say so.
pub const CREDENTIAL_CONDITION_AFTER: Duration = Duration::from_secs(60);

/// Reason reported for an offering refused because the region's vCPU quota is exhausted.
const REGIONAL_QUOTA: &str = "RegionalQuotaReached";

/// Reason reported for offerings skipped because the cache already blocks them.
const CACHED_REASON: &str = "MarkedUnavailable";

/// The production provider. Clone-cheap parts are shared behind `Arc`s.
pub struct AzureCloudProvider {
    clients: ArmClients,
    settings: LaunchSettings,
    unavailable: Arc<Mutex<UnavailableOfferings>>,
    clock: Clock,
    limiter: Arc<Semaphore>,
    /// The load-balancer pools and NSG every NIC joins, cached.
    network: network::Attachments,
    /// The sizes each AKSNodeClass can launch, sharing `unavailable` and `clock`.
    catalog: Arc<Catalog>,
    /// The image and subnet lookups behind the AKSNodeClass status, remembered between passes.
    node_class_checks: tokio::sync::Mutex<NodeClassChecks>,
}

impl AzureCloudProvider {
    /// The provider launches from `catalog`'s sizes and marks the offerings Azure refuses in the
    /// catalog's unavailable-offerings cache (which the solver reads), stamped by its clock.
    pub fn new(clients: ArmClients, settings: LaunchSettings, catalog: Arc<Catalog>) -> Self {
        let limiter = Arc::new(Semaphore::new(settings.max_concurrent_calls.max(1)));
        let network = network::Attachments::default();
        let (unavailable, clock) = (catalog.unavailable(), catalog.clock());
        let node_class_checks = tokio::sync::Mutex::new(NodeClassChecks::new());
        AzureCloudProvider {
            clients,
            settings,
            unavailable,
            clock,
            limiter,
            network,
            catalog,
            node_class_checks,
        }
    }

    /// The provider with the newest node image versions looked up again every `every` instead of
    /// every [`IMAGE_REFRESH`](super::nodeclass::checks::IMAGE_REFRESH).
    pub fn with_image_refresh(self, every: Duration) -> Self {
        AzureCloudProvider {
            node_class_checks: tokio::sync::Mutex::new(NodeClassChecks::with_image_refresh(every)),
            ..self
        }
    }

    pub fn settings(&self) -> &LaunchSettings {
        &self.settings
    }

    fn rg(&self) -> &str {
        &self.settings.node_resource_group
    }

    /// Runs one ARM call under the concurrency limit.
    async fn limited<T>(&self, call: impl Future<Output = T>) -> T {
        self.polling().call(call).await
    }

    /// How the provider waits for a long-running operation: each request under the concurrency limit,
    /// none while it sleeps.
    fn polling(&self) -> lro::Polling<'_> {
        let s = &self.settings;
        lro::Polling { limiter: &self.limiter, interval: s.poll_interval, max_polls: s.max_polls }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, UnavailableOfferings> {
        self.unavailable.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn instance(&self, doc: &serde_json::Value) -> Instance {
        vm::instance(doc, &self.clients.subscription_id, self.rg(), &self.settings.location)
    }

    /// The best offering by upstream's allocation rules ([`allocation::ranked`]) that the cache does
    /// not block, with the better ones it skipped.
    fn pick<'r>(
        &self,
        request: &'r LaunchRequest,
    ) -> (Option<(&'r InstanceTypeOption, &'r OfferingChoice)>, Vec<RefusedOffering>) {
        let now = (self.clock)();
        let cache = self.cache();
        let mut skipped = Vec::new();
        for (option, offering) in allocation::ranked(request) {
            let key = OfferingRef {
                capacity_type: offering.capacity_type,
                sku: &option.name,
                zone: &offering.zone,
                family: option.family.as_deref(),
                vcpus: option.vcpus,
            };
            if !cache.is_unavailable(&key, now) {
                return (Some((option, offering)), skipped);
            }
            skipped.push(refused(option, offering, CACHED_REASON));
        }
        (None, skipped)
    }

    /// Reuses a VM an earlier attempt created; None when there is none.
    async fn reuse_existing(&self, name: &str) -> Result<Option<Instance>, CloudError> {
        let Some(doc) = self
            .limited(vm::get_vm(&self.clients, self.rg(), name))
            .await
            .map_err(|f| errors::cloud_error(&f, "reading VM"))?
        else {
            return Ok(None);
        };
        match vm::provisioning_state(&doc) {
            "Succeeded" => Ok(Some(self.instance(&doc))),
            "Failed" | "Canceled" | "Deleting" => {
                // The earlier attempt's failure detail is gone; remove it so the next create starts clean.
                self.cleanup(name).await;
                Err(CloudError::Transient(format!("an earlier create of VM {name} failed; it was removed")))
            }
            _ => {
                let submitted = vm::SubmittedCreate::default();
                let doc = vm::wait_for_create(&self.clients, self.rg(), name, &submitted, &self.polling())
                    .await
                    .map_err(|f| errors::cloud_error(&f, "waiting for VM"))?;
                Ok(Some(self.instance(&doc)))
            }
        }
    }

    /// Deletes the VM and NIC of `name`, best effort: GC finds anything left by its tags.
    async fn cleanup(&self, name: &str) {
        if let Err(failure) = vm::delete_vm(&self.clients, self.rg(), name, &self.polling()).await {
            tracing::warn!(vm = name, code = %failure.code, "cleaning up a failed create: VM delete failed");
        }
        if let Err(failure) = nic::delete_nic(&self.clients, self.rg(), name, &self.polling()).await {
            tracing::warn!(nic = name, code = %failure.code, "cleaning up a failed create: NIC delete failed");
        }
    }

    /// The NIC's ID, creating it when missing. A backend pool deleted since the attachments were listed
    /// makes ARM refuse the NIC: the attachments are listed again and the create retried once.
    async fn ensure_nic(
        &self,
        name: &str,
        subnet_id: &str,
        option: &InstanceTypeOption,
        tags: &BTreeMap<String, String>,
        max_pods: u32,
    ) -> Result<String, ArmFailure> {
        let s = &self.settings;
        let mut retried = false;
        loop {
            let attachments = self.limited(self.network.get(&self.clients, self.rg())).await?;
            let nic =
                nic::NicSpec { subnet_id, accelerated_networking: option.accelerated_networking, max_pods };
            let body = nic::nic_body(s, &nic, tags, &attachments);
            match self.limited(nic::ensure_nic(&self.clients, self.rg(), name, body)).await {
                Ok((id, _)) => return Ok(id),
                Err(failure) if !retried && failure.message.contains("backendAddressPools") => {
                    tracing::info!(nic = name, code = %failure.code, "a backend pool is gone; listing the load balancers again");
                    self.network.invalidate();
                    retried = true;
                }
                Err(failure) => return Err(failure),
            }
        }
    }

    /// NIC then VM for one offering, waiting for the VM.
    async fn launch(
        &self,
        request: &LaunchRequest,
        option: &InstanceTypeOption,
        offering: &OfferingChoice,
    ) -> Result<Instance, ArmFailure> {
        let s = &self.settings;
        let name = naming::resource_name(&request.claim_name);
        let tags = vm::tags(s, &request.tags, &request.nodepool);
        let subnet_id = request.subnet_id.as_deref().unwrap_or(&s.subnet_id);
        // The custom data first: a class it cannot serve (e.g. local DNS Required) creates nothing in Azure.
        let arch =
            crate::catalog::embedded_sku(&option.name).map_or(crate::catalog::Arch::Amd64, |sku| sku.arch);
        let node_labels = self.node_labels(request, option, offering, subnet_id, arch);
        let attachments = self.limited(self.network.get(&self.clients, self.rg())).await?;
        let nsg_name = attachments.nsg_id.as_deref().and_then(|id| id.rsplit('/').next());
        let custom_data = bootstrap::render_custom_data(
            &s.bootstrap,
            &NodeBootstrap {
                vm_size: &option.name,
                arch,
                subnet_id,
                network_security_group: nsg_name,
                labels: &node_labels,
                taints: &request.taints,
                startup_taints: &request.startup_taints,
                kubelet: &request.kubelet,
                class: &request.node_class,
            },
        )
        .map_err(|e| ArmFailure {
            status: 400,
            code: e.category().to_string(),
            message: e.to_string(),
        })?;
        let nic_id = self.ensure_nic(&name, subnet_id, option, &tags, request.kubelet.max_pods).await?;
        let spec = vm::VmSpec {
            name: &name,
            size: &option.name,
            zone: logical_zone(&offering.zone),
            capacity_type: offering.capacity_type,
            image_id: &option.image_id,
            os_disk_size_gb: request.os_disk_size_gb,
            ephemeral_os_disk: option.ephemeral_os_disk,
            nic_id: &nic_id,
            tags: &tags,
            custom_data: &custom_data,
            security: request.security,
        };
        let m = metrics::get();
        let labels = VmCreate {
            image: &option.image_id,
            size: &option.name,
            zone: &offering.zone,
            capacity_type: offering.capacity_type.as_str(),
            nodepool: &request.nodepool,
        };
        m.vm_create_started(&labels);
        // Upstream's phases: `sync` when the PUT is refused, `async` when the operation fails.
        let submitted = self
            .limited(vm::submit_create(&self.clients, self.rg(), &name, vm::vm_body(s, &spec)))
            .await
            .inspect_err(|f| m.vm_create_failed(&labels, "sync", errors::failure_label(f)))?;
        let doc = vm::wait_for_create(&self.clients, self.rg(), &name, &submitted, &self.polling())
            .await
            .inspect_err(|f| m.vm_create_failed(&labels, "async", errors::failure_label(f)))?;
        Ok(self.instance(&doc))
    }

    /// The claim's labels plus what the chosen offering decides.
    fn node_labels(
        &self,
        request: &LaunchRequest,
        option: &InstanceTypeOption,
        offering: &OfferingChoice,
        subnet_id: &str,
        arch: crate::catalog::Arch,
    ) -> BTreeMap<String, String> {
        // AKS's labels first; the claim's own labels win, as in upstream's launch template.
        let mut node_labels = aks_labels(&self.settings.bootstrap, &request.node_class, arch, subnet_id);
        node_labels.extend(request.labels.clone());
        let mut set = |k: &str, v: &str| node_labels.insert(k.to_string(), v.to_string());
        set(labels::LABEL_INSTANCE_TYPE, &option.name);
        set(labels::LABEL_CAPACITY_TYPE, offering.capacity_type.as_str());
        if logical_zone(&offering.zone).is_some() {
            set(labels::LABEL_ZONE, &offering.zone);
        }
        if !request.nodepool.is_empty() {
            set(labels::LABEL_NODEPOOL, &request.nodepool);
        }
        node_labels
    }

    /// Records a capacity failure in the cache and says what was refused.
    fn mark(
        &self,
        class: CapacityClass,
        option: &InstanceTypeOption,
        offering: &OfferingChoice,
        code: &str,
    ) -> RefusedOffering {
        match class {
            CapacityClass::Unavailable(reason) => {
                let now = (self.clock)();
                self.cache().mark(reason, offering.capacity_type, &option.name, &offering.zone, now);
                refused(option, offering, reason.category())
            }
            CapacityClass::RegionalQuota { headroom, limit_zero } => {
                // Cached, unlike upstream: otherwise every launch fails the same way and its claim is
                // created and deleted again every few seconds.
                let now = (self.clock)();
                let ttl = UnavailableReason::SkuFamilyQuota { limit_zero }.ttl(offering.capacity_type);
                self.cache().mark_regional_quota(offering.capacity_type, headroom, ttl, now);
                tracing::warn!(capacity_type = offering.capacity_type.as_str(), headroom_vcpus = ?headroom, ttl_s = ttl.as_secs(), code, "the region's vCPU quota is exhausted; larger sizes are left out until it frees up");
                refused(option, offering, REGIONAL_QUOTA)
            }
        }
    }
}

fn refused(option: &InstanceTypeOption, offering: &OfferingChoice, reason: &str) -> RefusedOffering {
    RefusedOffering {
        instance_type: option.name.clone(),
        zone: offering.zone.clone(),
        capacity_type: offering.capacity_type,
        reason: reason.to_string(),
    }
}

/// AKS's node problem detector condition (upstream provider `RepairPolicies`).
pub const CONDITION_NODE_HEALTHY: &str = "kubernetes.azure.com/NodeHealthy";
/// Set by a node agent when Azure schedules a spot VM's eviction (upstream provider
/// `SpotConditionPreemptionScheduled`).
pub const CONDITION_PREEMPTION_SCHEDULED: &str = "PreemptionScheduled";

impl CloudProvider for AzureCloudProvider {
    async fn create(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        let name = naming::resource_name(&request.claim_name);
        if let Some(existing) = self.reuse_existing(&name).await? {
            return Ok(existing);
        }
        let (choice, mut skipped) = self.pick(request);
        let Some((option, offering)) = choice else {
            return Err(CloudError::InsufficientCapacity { refused: skipped });
        };
        match self.launch(request, option, offering).await {
            Ok(instance) => Ok(instance),
            Err(failure) => {
                // Whatever this attempt made (NIC, a Failed VM) goes, so a refused create leaks nothing.
                self.cleanup(&name).await;
                match errors::capacity_class(&failure) {
                    Some(class) => {
                        skipped.push(self.mark(class, option, offering, &failure.code));
                        tracing::info!(vm = %name, sku = %option.name, zone = %offering.zone, code = %failure.code, "offering refused");
                        Err(CloudError::InsufficientCapacity { refused: skipped })
                    }
                    None => Err(errors::cloud_error(&failure, "creating VM")),
                }
            }
        }
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        let vm_ref =
            naming::parse_provider_id(provider_id).map_err(|e| CloudError::Invalid(e.to_string()))?;
        let doc = self
            .limited(vm::get_vm(&self.clients, &vm_ref.resource_group, &vm_ref.vm_name))
            .await
            .map_err(|f| errors::cloud_error(&f, "reading VM"))?
            .ok_or_else(|| CloudError::NotFound(format!("VM {}", vm_ref.vm_name)))?;
        Ok(self.instance(&doc))
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        let listing =
            vm::list_tagged(&self.clients, self.rg(), vm::TAG_CLUSTER, &self.settings.cluster_name, |doc| {
                self.instance(doc)
            });
        self.limited(listing).await.map_err(|f| errors::cloud_error(&f, "listing VMs"))
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        let vm_ref =
            naming::parse_provider_id(provider_id).map_err(|e| CloudError::Invalid(e.to_string()))?;
        let (rg, name) = (&vm_ref.resource_group, &vm_ref.vm_name);
        vm::delete_vm(&self.clients, rg, name, &self.polling())
            .await
            .map_err(|f| errors::cloud_error(&f, "deleting VM"))?;
        nic::delete_nic(&self.clients, rg, name, &self.polling())
            .await
            .map_err(|f| errors::cloud_error(&f, "deleting NIC"))
    }

    fn desired_in_place(&self, nodepool: &str, node_class_tags: &BTreeMap<String, String>) -> InPlace {
        InPlace {
            tags: vm::tags(&self.settings, node_class_tags, nodepool),
            identities: self.settings.node_identities.clone(),
        }
    }

    async fn update_in_place(&self, provider_id: &str, desired: &InPlace) -> Result<(), CloudError> {
        let vm_ref =
            naming::parse_provider_id(provider_id).map_err(|e| CloudError::Invalid(e.to_string()))?;
        let (rg, name) = (&vm_ref.resource_group, &vm_ref.vm_name);
        self.limited(vm::update_in_place(&self.clients, rg, name, desired))
            .await
            .map_err(|f| errors::cloud_error(&f, "updating VM in place"))?;
        self.limited(nic::update_tags(&self.clients, rg, name, &desired.tags))
            .await
            .map_err(|f| errors::cloud_error(&f, "updating NIC tags"))
    }

    async fn list_nics(&self) -> Result<Vec<String>, CloudError> {
        self.limited(list_cluster_nics(self)).await
    }

    async fn delete_nic(&self, name: &str) -> Result<(), CloudError> {
        nic::delete_nic(&self.clients, self.rg(), name, &self.polling())
            .await
            .map_err(|f| errors::cloud_error(&f, "deleting NIC"))
    }

    async fn node_class_status(
        &self,
        class: &AKSNodeClass,
        version: &str,
        upgrades: crate::cloud::ImageUpgrades,
        now: &Time,
    ) -> Option<serde_json::Value> {
        let mut checks = self.node_class_checks.lock().await;
        let (subnet, node_resource_group) = (&self.settings.subnet_id, &self.settings.node_resource_group);
        // A token failure that a retry fixes is no news; one that lasts is the class's first problem.
        let credentials =
            self.credentials_failing().filter(|(failing, _)| *failing >= CREDENTIAL_CONDITION_AFTER);
        let credentials = credentials.map(|(_, why)| why);
        checks
            .status(
                self,
                class,
                version,
                (subnet, node_resource_group),
                credentials.as_deref(),
                upgrades,
                (Instant::now(), now),
            )
            .await
    }

    fn credentials_failing(&self) -> Option<(Duration, String)> {
        self.clients.credential_health().failing(std::time::Instant::now())
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
        let request = launch::request_from(&self.catalog, claim, class);
        if let Err(LaunchRequestError::NoImage(_) | LaunchRequestError::NoCompatibleImage { .. }) = &request {
            let family = class.and_then(|c| c.spec.image_family).unwrap_or_default();
            metrics::get().image_selection_failed(family.as_str());
        }
        request
    }

    fn price_age(&self, now: Duration) -> (PriceSource, Duration) {
        self.catalog.pricing().age(now)
    }

    fn claim_of_resource(&self, resource_name: &str) -> Option<String> {
        naming::claim_name(resource_name).map(str::to_string)
    }

    fn kubelet_identity(&self) -> Option<String> {
        Some(self.settings.bootstrap.kubelet_identity_client_id.clone()).filter(|id| !id.is_empty())
    }

    /// NotReady for `not_ready`, then two signals acted on at once: AKS's node problem detector reporting
    /// `kubernetes.azure.com/NodeHealthy` False, and a spot VM's `PreemptionScheduled` True (Azure
    /// gives about 30 s notice of an eviction; the replacement should start now, not after the NotReady
    /// backstop). Upstream provider `pkg/cloudprovider/cloudprovider.go` `RepairPolicies`.
    fn repair_policies(&self, not_ready: Duration) -> Vec<crate::disruption::repair::RepairPolicy> {
        use crate::disruption::repair::{not_ready_policies, RepairPolicy};
        let mut policies = not_ready_policies(not_ready);
        policies.push(RepairPolicy::new(CONDITION_NODE_HEALTHY, "False", Duration::ZERO));
        policies.push(RepairPolicy::new(CONDITION_PREEMPTION_SCHEDULED, "True", Duration::ZERO));
        policies
    }

    fn claim_of_provider_id(&self, provider_id: &str) -> Option<String> {
        naming::claim_of_provider_id(provider_id)
    }
}

impl NodeClassLookups for AzureCloudProvider {
    async fn latest_image_version(&self, gallery: &str, definition: &str) -> Result<String, CloudError> {
        let location = &self.settings.location;
        let what =
            format!("listing versions of community gallery image {gallery}/{definition} in {location}");
        let versions = self
            .limited(lookups::image_versions(&self.clients, location, gallery, definition))
            .await
            .map_err(|f| errors::cloud_error(&f, &what))?;
        imagefamily::newest(&versions).map(|v| v.name.clone()).ok_or_else(|| {
            let why = match versions.len() {
                0 => "the gallery lists no version".to_string(),
                n => format!("all {n} versions are excluded from latest"),
            };
            CloudError::NotFound(format!("{what}: {why}"))
        })
    }

    async fn check_subnet(&self, subnet: &SubnetId) -> Result<(), CloudError> {
        let what = format!("reading subnet {}/subnets/{}", subnet.vnet_id(), subnet.subnet);
        self.limited(lookups::get_subnet(&self.clients, subnet))
            .await
            .map_err(|f| errors::cloud_error(&f, &what))
    }
}

/// NIC names of this cluster, for garbage collection of NICs whose VM never came.
pub async fn list_cluster_nics(provider: &AzureCloudProvider) -> Result<Vec<String>, CloudError> {
    nic::list_tagged(&provider.clients, provider.rg(), vm::TAG_CLUSTER, &provider.settings.cluster_name)
        .await
        .map_err(|f| errors::cloud_error(&f, "listing NICs"))
}
