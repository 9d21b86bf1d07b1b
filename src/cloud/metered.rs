//! [`Metered`]: a [`CloudProvider`] that times every call of the one it wraps and counts its errors
//! (upstream core `cloudprovider/metrics.Decorate`): `karpenter_cloudprovider_duration_seconds` and
//! `karpenter_cloudprovider_errors_total`, labelled with the calling controller
//! ([`metrics::in_controller`]), the method and the provider.
//!
//! Wrap a provider once: a provider wrapped twice would count every call twice.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{CloudError, CloudProvider, InPlace, Instance, LaunchRequest, LaunchRequestError};
use crate::apis::{AKSNodeClass, NodeClaim};
use crate::catalog::PriceSource;
use crate::model::InstanceType;
use crate::operator::metrics::{self, Metrics};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The `provider` label of the Azure provider (upstream `CloudProvider.Name()`).
pub const AZURE: &str = "azure";

pub struct Metered<C> {
    inner: C,
    provider: &'static str,
    metrics: &'static Metrics,
}

impl<C> Metered<C> {
    /// Records into the process's metrics.
    pub fn new(inner: C, provider: &'static str) -> Self {
        Metered::with_metrics(inner, provider, metrics::get())
    }

    pub fn with_metrics(inner: C, provider: &'static str, metrics: &'static Metrics) -> Self {
        Metered { inner, provider, metrics }
    }

    pub fn inner(&self) -> &C {
        &self.inner
    }

    async fn observe<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<T, CloudError>>,
    ) -> Result<T, CloudError> {
        let started = Instant::now();
        let result = call.await;
        self.metrics.cloud_call(
            method,
            self.provider,
            started.elapsed(),
            result.as_ref().err().map(error_label),
        );
        result
    }
}

/// The `error` label: upstream's names for the errors core knows, our static category for the rest
/// (upstream leaves those empty).
pub fn error_label(error: &CloudError) -> &'static str {
    match error {
        CloudError::InsufficientCapacity { .. } => "InsufficientCapacityError",
        CloudError::NotFound(_) => "NodeClaimNotFoundError",
        CloudError::NodeClassNotReady(_) => "NodeClassNotReadyError",
        other => other.category(),
    }
}

// Method names as upstream's CloudProvider interface names them; the NIC calls are ours.
impl<C: CloudProvider> CloudProvider for Metered<C> {
    async fn create(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        self.observe("Create", self.inner.create(request)).await
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.observe("Get", self.inner.get(provider_id)).await
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.observe("List", self.inner.list()).await
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        self.observe("Delete", self.inner.delete(provider_id)).await
    }

    async fn list_nics(&self) -> Result<Vec<String>, CloudError> {
        self.observe("ListNICs", self.inner.list_nics()).await
    }

    async fn delete_nic(&self, name: &str) -> Result<(), CloudError> {
        self.observe("DeleteNIC", self.inner.delete_nic(name)).await
    }

    fn desired_in_place(
        &self,
        nodepool: &str,
        node_class_tags: &std::collections::BTreeMap<String, String>,
    ) -> InPlace {
        self.inner.desired_in_place(nodepool, node_class_tags)
    }

    async fn update_in_place(&self, provider_id: &str, desired: &InPlace) -> Result<(), CloudError> {
        self.observe("UpdateInPlace", self.inner.update_in_place(provider_id, desired)).await
    }

    async fn node_class_status(
        &self,
        class: &AKSNodeClass,
        version: &str,
        upgrades: super::ImageUpgrades,
        now: &Time,
    ) -> Option<serde_json::Value> {
        self.inner.node_class_status(class, version, upgrades, now).await
    }

    fn forget_unused_node_class_lookups(&self) {
        self.inner.forget_unused_node_class_lookups()
    }

    fn credentials_failing(&self) -> Option<(Duration, String)> {
        self.inner.credentials_failing()
    }

    fn instance_types(&self, class: Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>> {
        self.inner.instance_types(class)
    }

    fn launch_request(
        &self,
        claim: &NodeClaim,
        class: Option<&AKSNodeClass>,
    ) -> Result<LaunchRequest, LaunchRequestError> {
        self.inner.launch_request(claim, class)
    }

    fn price_age(&self, now: Duration) -> (PriceSource, Duration) {
        self.inner.price_age(now)
    }

    fn claim_of_resource(&self, resource_name: &str) -> Option<String> {
        self.inner.claim_of_resource(resource_name)
    }

    fn repair_policies(&self, not_ready: Duration) -> Vec<crate::disruption::repair::RepairPolicy> {
        self.inner.repair_policies(not_ready)
    }

    fn kubelet_identity(&self) -> Option<String> {
        self.inner.kubelet_identity()
    }

    fn claim_of_provider_id(&self, provider_id: &str) -> Option<String> {
        self.inner.claim_of_provider_id(provider_id)
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::cloud::fake::FakeCloud;
    use crate::cloud::{InstanceTypeOption, OfferingChoice};
    use crate::model::CapacityType;
    use crate::operator::metrics::controller;

    fn request(claim: &str) -> LaunchRequest {
        let option = InstanceTypeOption {
            name: "Standard_D2s_v5".into(),
            family: None,
            vcpus: 2,
            accelerated_networking: false,
            ephemeral_os_disk: None,
            image_id: "img".into(),
            offerings: vec![OfferingChoice {
                zone: "eastus-1".into(),
                capacity_type: CapacityType::OnDemand,
                price: 0.096,
            }],
        };
        LaunchRequest {
            node_class: crate::cloud::azure::NodeClassBootstrap {
                kubernetes_version: "1.33.2".into(),
                gpu_driver: true,
                ..Default::default()
            },
            ..LaunchRequest::for_test(claim, "general", vec![option])
        }
    }

    fn count(m: &Metrics, labels: &[&str]) -> u64 {
        m.scheduler.cloudprovider_duration.with_label_values(labels).get_sample_count()
    }

    #[tokio::test]
    async fn every_call_is_timed_and_errors_are_counted_by_category() {
        let m: &'static Metrics = Box::leak(Box::new(Metrics::new()));
        let cloud = Metered::with_metrics(FakeCloud::new(), AZURE, m);
        cloud.inner().refuse("Standard_D2s_v5", "eastus-1", CapacityType::OnDemand, "ZonalAllocationFailed");
        metrics::in_controller(controller::NODECLAIM_LIFECYCLE, async {
            let err = cloud.create(&request("a")).await.unwrap_err();
            assert_eq!(err.category(), "InsufficientCapacity");
            let gone = crate::cloud::azure::naming::provider_id("s", "rg", "aks-gone");
            let err = cloud.get(&gone).await.unwrap_err();
            assert_eq!(err.category(), "NotFound");
        })
        .await;
        metrics::in_controller(controller::NODECLAIM_GC, async {
            cloud.list().await.unwrap();
            cloud.list_nics().await.unwrap();
        })
        .await;
        let lifecycle = controller::NODECLAIM_LIFECYCLE;
        assert_eq!(count(m, &[lifecycle, "Create", AZURE]), 1);
        assert_eq!(count(m, &[lifecycle, "Get", AZURE]), 1);
        assert_eq!(count(m, &[controller::NODECLAIM_GC, "List", AZURE]), 1);
        assert_eq!(count(m, &[controller::NODECLAIM_GC, "ListNICs", AZURE]), 1);
        assert_eq!(count(m, &[lifecycle, "List", AZURE]), 0);
        let errors = |method, error| {
            m.scheduler.cloudprovider_errors.with_label_values(&[lifecycle, method, AZURE, error]).get()
        };
        assert_eq!(errors("Create", "InsufficientCapacityError"), 1);
        assert_eq!(errors("Get", "NodeClaimNotFoundError"), 1);
        let text = m.render().unwrap();
        assert!(
            !text.contains("method=\"List\",provider=\"azure\",error="),
            "a success counts no error:\n{text}"
        );
    }

    #[test]
    fn error_labels_are_static_and_bounded() {
        let all = [
            CloudError::InsufficientCapacity { refused: vec![] },
            CloudError::NodeClassNotReady("x".into()),
            CloudError::NotFound("vm aks-secret-name".into()),
            CloudError::Throttled("x".into()),
            CloudError::Transient("x".into()),
            CloudError::Invalid("x".into()),
            CloudError::Unauthorized("x".into()),
        ];
        let labels: Vec<&str> = all.iter().map(error_label).collect();
        assert_eq!(
            labels,
            [
                "InsufficientCapacityError",
                "NodeClassNotReadyError",
                "NodeClaimNotFoundError",
                "Throttled",
                "Transient",
                "Invalid",
                "Unauthorized"
            ]
        );
    }
}
