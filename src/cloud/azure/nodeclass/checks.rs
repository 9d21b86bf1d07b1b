//! What the AKSNodeClass status needs from Azure: the newest version of each image definition a class
//! needs, and whether its subnet exists. Answers are remembered per image definition and per subnet, so
//! Azure is asked again only when due — images every [`IMAGE_REFRESH`] (or the interval
//! `NODE_IMAGE_REFRESH_INTERVAL` sets), subnets every [`SUBNET_RECHECK`], failures after a backoff of
//! [`FIRST_RETRY`] doubling up to [`MAX_RETRY`] — and classes sharing a family or subnet share the
//! lookups.
//!
//! A lookup that fails does not take away what is known: an image definition keeps its last resolved
//! version (from this process, else from the class's own status, e.g. after a restart) and a subnet
//! that existed stays Ready through throttling or server errors. Only what never resolved, or an answer
//! that says "not there" (or "not allowed"), makes the class not Ready. Upstream likewise leaves
//! ImagesReady alone when a listing fails.
//!
//! Upstream moves a class to the newest image versions on a Kubernetes upgrade and inside the AKS node
//! OS maintenance window (provider `pkg/controllers/nodeclass/status/images.go`). Here the Kubernetes
//! version is part of the image key, so an upgrade resolves afresh; otherwise the newest versions are
//! looked up every [`IMAGE_REFRESH`], and [`NodeClassChecks::status`] keeps the versions a class already
//! has while the maintenance window (`crate::controllers::status::maintenance`) holds upgrades
//! ([`hold_versions`]). Once the class's status names a new version, its nodes on the old one drift
//! (`ImageDrift`) and are replaced.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::recheck::{Rechecks, Schedule};
use super::status::{hold_versions, nodeclass_status_with, ImagesCheck, SubnetCheck};
use crate::apis::AKSNodeClass;
use crate::cloud::azure::imagefamily::{self, class_definitions, node_image, ImageDefinition};
use crate::cloud::azure::subnet::{class_subnet, SubnetId};
use crate::cloud::{CloudError, ImageUpgrades};

/// The Azure reads behind the status. The Azure provider answers them from ARM, the in-memory cloud
/// from what a test published.
pub trait NodeClassLookups: Send + Sync {
    /// The version of a node image definition to launch with: the newest usable one `gallery`
    /// publishes in the region. [`CloudError::NotFound`] when the definition or every version is
    /// missing.
    fn latest_image_version(
        &self,
        gallery: &str,
        definition: &str,
    ) -> impl Future<Output = Result<String, CloudError>> + Send;
    /// Checks that a subnet exists; [`CloudError::NotFound`] when it does not.
    fn check_subnet(&self, subnet: &SubnetId) -> impl Future<Output = Result<(), CloudError>> + Send;
}

/// How often the newest image versions are looked up again. AKS publishes node images about weekly;
/// a few hours picks a new one up the same day for a handful of list calls.
pub const IMAGE_REFRESH: Duration = Duration::from_secs(6 * 3600);
/// How often a subnet that exists is read again (upstream's healthy requeue, 3 minutes).
pub const SUBNET_RECHECK: Duration = Duration::from_secs(180);
/// Wait after a first failed lookup.
pub const FIRST_RETRY: Duration = Duration::from_secs(5);
/// Longest wait between failed lookups (upstream requeues a missing subnet after a minute).
pub const MAX_RETRY: Duration = Duration::from_secs(60);

/// (gallery, definition, Kubernetes version).
type ImageKey = (String, String, String);

/// The remembered lookups of the status controller.
pub struct NodeClassChecks {
    images: Rechecks<ImageKey, String>,
    /// By lower-cased subnet ID.
    subnets: Rechecks<String, ()>,
    used_images: BTreeSet<ImageKey>,
    used_subnets: BTreeSet<String>,
}

impl Default for NodeClassChecks {
    fn default() -> Self {
        NodeClassChecks::with_image_refresh(IMAGE_REFRESH)
    }
}

impl NodeClassChecks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lookups that ask for the newest image versions again every `image_refresh`.
    pub fn with_image_refresh(image_refresh: Duration) -> Self {
        let schedule = |every| Schedule { every, first_retry: FIRST_RETRY, max_retry: MAX_RETRY };
        NodeClassChecks {
            images: Rechecks::new(schedule(image_refresh)),
            subnets: Rechecks::new(schedule(SUBNET_RECHECK)),
            used_images: BTreeSet::new(),
            used_subnets: BTreeSet::new(),
        }
    }

    /// The status to write for `class` on a cluster at Kubernetes `version` (None when what is stored
    /// is already right): its images and its subnet (its own, else the cluster's `(subnet, node resource
    /// group)`), each looked up through `cloud` when due at `now`; `time` stamps changed conditions.
    /// With image `upgrades` held, images the class already has keep their versions.
    #[allow(clippy::too_many_arguments)]
    pub async fn status<C: NodeClassLookups>(
        &mut self,
        cloud: &C,
        class: &AKSNodeClass,
        version: &str,
        (cluster_subnet_id, node_resource_group): (&str, &str),
        credentials_failing: Option<&str>,
        upgrades: ImageUpgrades,
        (now, time): (Instant, &Time),
    ) -> Option<serde_json::Value> {
        let images = match self.images(cloud, class, version, now).await {
            ImagesCheck::Resolved(found) => ImagesCheck::Resolved(hold_versions(class, found, upgrades)),
            other => other,
        };
        let subnet = self.subnet(cloud, class, cluster_subnet_id, node_resource_group, now).await;
        nodeclass_status_with(class, version, &images, &subnet, credentials_failing, time)
    }

    /// The class's images on a cluster at Kubernetes `version`.
    pub async fn images<C: NodeClassLookups>(
        &mut self,
        cloud: &C,
        class: &AKSNodeClass,
        version: &str,
        now: Instant,
    ) -> ImagesCheck {
        let definitions = match class_definitions(class, version) {
            Ok(definitions) => definitions,
            Err(e) => {
                return ImagesCheck::Unresolved { reason: e.category(), message: e.to_string(), keep: false }
            }
        };
        let mut images = Vec::new();
        let mut problem: Option<CloudError> = None;
        for definition in &definitions {
            let key =
                (definition.gallery.to_string(), definition.definition.to_string(), version.to_string());
            self.used_images.insert(key.clone());
            if self.images.due(&key, now) {
                self.look_up_image(cloud, definition, key.clone(), now).await;
            }
            let (resolved, error) = self.images.last(&key);
            match resolved.cloned().or_else(|| status_version(class, definition)) {
                Some(image_version) => images.push(node_image(definition, &image_version)),
                None => {
                    let error = error.cloned().unwrap_or_else(|| {
                        CloudError::Transient(format!("{} is not resolved yet", definition.definition))
                    });
                    problem = problem.or(Some(error));
                }
            }
        }
        match problem {
            None => ImagesCheck::Resolved(images),
            Some(error) => ImagesCheck::Unresolved {
                reason: match error {
                    CloudError::NotFound(_) => "ImagesNotFound",
                    CloudError::Unauthorized(_) => "ImageLookupUnauthorized",
                    _ => "ImageLookupFailed",
                },
                message: error.to_string(),
                keep: true,
            },
        }
    }

    async fn look_up_image<C: NodeClassLookups>(
        &mut self,
        cloud: &C,
        definition: &ImageDefinition,
        key: ImageKey,
        now: Instant,
    ) {
        match cloud.latest_image_version(definition.gallery, definition.definition).await {
            Ok(found) => {
                if self.images.last(&key).0 != Some(&found) {
                    let id =
                        imagefamily::community_image_id(definition.gallery, definition.definition, &found);
                    tracing::info!(image = %id, kubernetes_version = %key.2, "resolved node image version");
                }
                self.images.succeeded(key, found, now);
            }
            Err(error) => {
                let retry = self.images.failed(key, error.clone(), now);
                tracing::warn!(
                    definition = definition.definition,
                    category = error.category(),
                    %error,
                    retry_s = retry.as_secs(),
                    "looking up the node image version failed"
                );
            }
        }
    }

    /// Whether the class's subnet (its own `vnetSubnetID`, else `cluster_subnet_id`) can take nodes.
    pub async fn subnet<C: NodeClassLookups>(
        &mut self,
        cloud: &C,
        class: &AKSNodeClass,
        cluster_subnet_id: &str,
        node_resource_group: &str,
        now: Instant,
    ) -> SubnetCheck {
        let own = class.spec.vnet_subnet_id.as_deref();
        let subnet = match class_subnet(own, cluster_subnet_id, node_resource_group) {
            Ok(subnet) => subnet,
            Err(e) => return SubnetCheck::NotReady { reason: e.category(), message: e.to_string() },
        };
        let key = format!("{}/subnets/{}", subnet.vnet_id(), subnet.subnet).to_ascii_lowercase();
        self.used_subnets.insert(key.clone());
        if self.subnets.due(&key, now) {
            match cloud.check_subnet(&subnet).await {
                Ok(()) => self.subnets.succeeded(key.clone(), (), now),
                Err(error) => {
                    let retry = self.subnets.failed(key.clone(), error.clone(), now);
                    tracing::warn!(category = error.category(), %error, retry_s = retry.as_secs(), "checking the subnet failed");
                }
            }
        }
        match self.subnets.last(&key) {
            (_, None) => SubnetCheck::Ready,
            // It existed; throttling or a server error does not say it is gone.
            (Some(()), Some(error)) if error.is_retryable() => SubnetCheck::Ready,
            (_, Some(error)) => SubnetCheck::NotReady {
                reason: match error {
                    CloudError::NotFound(_) => "SubnetNotFound",
                    _ => "SubnetUnknownError",
                },
                message: error.to_string(),
            },
        }
    }

    /// Forgets the lookups no class used since the last call (deleted classes, superseded Kubernetes
    /// versions), so memory stays bounded by what the classes need.
    pub fn forget_unused(&mut self) {
        let (images, subnets) =
            (std::mem::take(&mut self.used_images), std::mem::take(&mut self.used_subnets));
        self.images.retain(|k| images.contains(k));
        self.subnets.retain(|k| subnets.contains(k));
    }
}

/// The version of `definition` the class's status already names, if any.
fn status_version(class: &AKSNodeClass, definition: &ImageDefinition) -> Option<String> {
    let images = class.status.as_ref().map(|s| s.images.as_slice()).unwrap_or_default();
    images.iter().find_map(|image| {
        let (gallery, name, version) = imagefamily::parse_community_image_id(&image.id)?;
        (gallery.eq_ignore_ascii_case(definition.gallery) && name.eq_ignore_ascii_case(definition.definition))
            .then(|| version.to_string())
    })
}

#[cfg(test)]
#[path = "checks_tests.rs"]
mod tests;
