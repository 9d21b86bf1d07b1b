//! Drift detection, pure: the reason a launched NodeClaim no longer matches what its NodePool and
//! AKSNodeClass ask for now (judged partly on the hashes it was stamped with at creation,
//! [`crate::apis::hash`]), and whether a NodeClaim is `Consolidatable`.
//!
//! The checks run in upstream's order and the first hit wins: core's static, requirements and
//! instance-type checks (upstream `pkg/controllers/nodeclaim/disruption/drift.go`), then the Azure
//! provider's node-class, Kubernetes-version and image checks (upstream provider
//! `pkg/cloudprovider/drift.go`). The controller (`controllers/nodeclaim/disruption.rs`) and the
//! simulator (`sim/timeline/snapshot.rs`) both call these functions, so they agree on what drifted.
//! No I/O, no clock: `now` is passed in.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::apis::aksnodeclass::NODECLASS_HASH_VERSION;
use crate::apis::conditions;
use crate::apis::duration::NillableDuration;
use crate::apis::hash::HashError;
use crate::apis::nodepool::NODEPOOL_HASH_VERSION;
use crate::apis::{AKSNodeClass, NodePool};
use crate::model::labels::{
    ANNOTATION_NODECLASS_HASH, ANNOTATION_NODECLASS_HASH_VERSION, ANNOTATION_NODEPOOL_HASH,
    ANNOTATION_NODEPOOL_HASH_VERSION, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE,
};
use crate::model::requirements::Requirements;
use crate::model::InstanceType;

/// Instance-type drift is only looked for once a claim is this old: the offerings come from the
/// provider, not the user, so a late answer is fine (upstream drift.go: one hour).
pub const INSTANCE_TYPE_CHECK_AFTER: Duration = Duration::from_secs(60 * 60);

/// Why a NodeClaim is drifted; [`DriftReason::as_str`] is the `Drifted` condition's reason, spelled
/// as upstream spells it (core's `…Drifted`/`InstanceTypeNotFound`, the provider's `…Drift`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DriftReason {
    NodePoolDrifted,
    RequirementsDrifted,
    InstanceTypeNotFound,
    NodeClassDrift,
    K8sVersionDrift,
    KubeletIdentityDrift,
    ImageDrift,
}

impl DriftReason {
    pub const ALL: [DriftReason; 7] = [
        DriftReason::NodePoolDrifted,
        DriftReason::RequirementsDrifted,
        DriftReason::InstanceTypeNotFound,
        DriftReason::NodeClassDrift,
        DriftReason::K8sVersionDrift,
        DriftReason::KubeletIdentityDrift,
        DriftReason::ImageDrift,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DriftReason::NodePoolDrifted => "NodePoolDrifted",
            DriftReason::RequirementsDrifted => "RequirementsDrifted",
            DriftReason::InstanceTypeNotFound => "InstanceTypeNotFound",
            DriftReason::NodeClassDrift => "NodeClassDrift",
            DriftReason::K8sVersionDrift => "K8sVersionDrift",
            DriftReason::KubeletIdentityDrift => "KubeletIdentityDrift",
            DriftReason::ImageDrift => "ImageDrift",
        }
    }

    /// The reason a condition carries, back to the enum; `None` for a reason we do not set.
    pub fn parse(reason: &str) -> Option<DriftReason> {
        DriftReason::ALL.into_iter().find(|r| r.as_str() == reason)
    }

    /// A sentence for the condition's message and the event.
    pub fn message(self) -> &'static str {
        match self {
            DriftReason::NodePoolDrifted => "the NodePool's template changed since the node was launched",
            DriftReason::RequirementsDrifted => {
                "the node's labels no longer meet the NodePool's requirements"
            }
            DriftReason::InstanceTypeNotFound => {
                "the node's instance type, or an offering in its zone and capacity type, is no longer offered"
            }
            DriftReason::NodeClassDrift => "the AKSNodeClass's spec changed since the node was launched",
            DriftReason::K8sVersionDrift => "the node's kubelet is not at the cluster's Kubernetes version",
            DriftReason::KubeletIdentityDrift => {
                "the node's kubelet identity is not the one new nodes get (the kubelet identity setting changed)"
            }
            DriftReason::ImageDrift => "the node's image is no longer among the AKSNodeClass's images",
        }
    }
}

impl std::fmt::Display for DriftReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A NodePool or AKSNodeClass drift cannot be judged against.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriftError {
    #[error(transparent)]
    Hash(#[from] HashError),
    #[error("NodePool {pool}: spec.template.spec.requirements: {message}")]
    Requirements { pool: String, message: String },
}

impl DriftError {
    pub fn category(&self) -> &'static str {
        match self {
            DriftError::Hash(_) => "Hash",
            DriftError::Requirements { .. } => "InvalidRequirements",
        }
    }
}

// --- Inputs --------------------------------------------------------------------------------------

/// What drift compares claims of one NodePool with; built once per pool per pass.
#[derive(Clone, Debug)]
pub struct PoolDrift {
    pub hash: String,
    /// `spec.template.spec.requirements` alone (not the template labels), as upstream compares.
    pub requirements: Requirements,
}

impl PoolDrift {
    pub fn new(pool: &NodePool) -> Result<PoolDrift, DriftError> {
        let requirements = crate::apis::requirements::from_api(&pool.spec.template.spec.requirements)
            .map_err(|e| DriftError::Requirements {
                pool: pool.metadata.name.clone().unwrap_or_default(),
                message: e.to_string(),
            })?;
        Ok(PoolDrift { hash: pool.hash()?, requirements })
    }
}

/// What drift compares claims of one AKSNodeClass with; built once per class per pass.
#[derive(Clone, Debug)]
pub struct ClassDrift {
    pub hash: String,
    /// `status.kubernetesVersion`, only while `KubernetesVersionReady` is True (upstream skips the
    /// check otherwise rather than drift on a version it does not trust).
    pub kubernetes_version: Option<String>,
    /// `status.images[].id`, only while `ImagesReady` is True and there are some.
    pub images: Option<Vec<String>>,
    /// The kubelet identity's client ID new nodes are launched with (an operator setting, the same for
    /// every class); `None` skips the check.
    pub kubelet_identity: Option<String>,
}

impl ClassDrift {
    pub fn new(class: &AKSNodeClass) -> Result<ClassDrift, DriftError> {
        let status = class.status.clone().unwrap_or_default();
        let ready = |t: &str| conditions::is_true(&status.conditions, t);
        let kubernetes_version = status
            .kubernetes_version
            .filter(|v| !v.is_empty() && ready(conditions::KUBERNETES_VERSION_READY));
        let images: Vec<String> = status.images.iter().map(|i| i.id.clone()).collect();
        let images = (ready(conditions::IMAGES_READY) && !images.is_empty()).then_some(images);
        Ok(ClassDrift { hash: class.hash()?, kubernetes_version, images, kubelet_identity: None })
    }
}

/// The NodeClaim facts drift reads.
#[derive(Clone, Copy, Debug)]
pub struct ClaimFacts<'a> {
    pub annotations: &'a BTreeMap<String, String>,
    pub labels: &'a BTreeMap<String, String>,
    pub created: Option<Timestamp>,
    /// `status.imageID`.
    pub image_id: Option<&'a str>,
}

/// The facts of the claim's Node drift reads.
#[derive(Clone, Copy, Debug)]
pub struct NodeFacts<'a> {
    /// `status.nodeInfo.kubeletVersion`, such as `v1.34.4`.
    pub kubelet_version: Option<&'a str>,
    /// The `kubernetes.azure.com/kubelet-identity-client-id` label.
    pub kubelet_identity: Option<&'a str>,
    pub ready: bool,
    pub deleting: bool,
}

// --- Decisions -----------------------------------------------------------------------------------

/// Why the launched claim is drifted now, if it is. `class` is `None` when the AKSNodeClass is gone
/// (the provider's checks are then skipped), `node` when no Node registered yet, `instance_types`
/// when the pool's instance types are not known (an empty list counts as not known: a catalog that
/// has not loaded must not drift every node).
pub fn drift_reason(
    claim: &ClaimFacts<'_>,
    pool: &PoolDrift,
    class: Option<&ClassDrift>,
    node: Option<&NodeFacts<'_>>,
    instance_types: Option<&[InstanceType]>,
    now: Timestamp,
) -> Option<DriftReason> {
    if hash_differs(
        claim.annotations,
        ANNOTATION_NODEPOOL_HASH,
        ANNOTATION_NODEPOOL_HASH_VERSION,
        NODEPOOL_HASH_VERSION,
        &pool.hash,
    ) {
        return Some(DriftReason::NodePoolDrifted);
    }
    if Requirements::from_labels(claim.labels).compatible(&pool.requirements, false).is_err() {
        return Some(DriftReason::RequirementsDrifted);
    }
    let old_enough = claim.created.is_some_and(|c| {
        now.as_second().saturating_sub(c.as_second()) >= INSTANCE_TYPE_CHECK_AFTER.as_secs() as i64
    });
    if let Some(types) = instance_types.filter(|t| !t.is_empty() && old_enough) {
        if !instance_type_offered(claim.labels, types) {
            return Some(DriftReason::InstanceTypeNotFound);
        }
    }
    let class = class?;
    if hash_differs(
        claim.annotations,
        ANNOTATION_NODECLASS_HASH,
        ANNOTATION_NODECLASS_HASH_VERSION,
        NODECLASS_HASH_VERSION,
        &class.hash,
    ) {
        return Some(DriftReason::NodeClassDrift);
    }
    // A node that is missing, not Ready or going away says nothing reliable about its version.
    if let (Some(want), Some(node)) = (&class.kubernetes_version, node.filter(|n| n.ready && !n.deleting)) {
        let have = node.kubelet_version.unwrap_or_default();
        if have.trim_start_matches('v') != want.trim_start_matches('v') {
            return Some(DriftReason::K8sVersionDrift);
        }
    }
    // Nodes launched before the label existed carry none: they are not drifted for it (upstream
    // provider `pkg/cloudprovider/drift.go` `isKubeletIdentityDrifted`).
    if let (Some(want), Some(have)) = (&class.kubelet_identity, node.and_then(|n| n.kubelet_identity)) {
        if !have.is_empty() && have != want {
            return Some(DriftReason::KubeletIdentityDrift);
        }
    }
    // ARM resource IDs are case-insensitive, and Azure may echo one back in another case.
    if let (Some(images), Some(image)) = (&class.images, claim.image_id.filter(|i| !i.is_empty())) {
        if !images.iter().any(|i| i.eq_ignore_ascii_case(image)) {
            return Some(DriftReason::ImageDrift);
        }
    }
    None
}

/// Whether the claim's hash annotation differs from `current`; judged only when the claim carries
/// both annotations and its version is ours (a claim of another format is re-stamped, not drifted).
fn hash_differs(
    annotations: &BTreeMap<String, String>,
    hash_key: &str,
    version_key: &str,
    version: &str,
    current: &str,
) -> bool {
    match (annotations.get(hash_key), annotations.get(version_key)) {
        (Some(hash), Some(v)) if v == version => hash != current,
        _ => false,
    }
}

/// Upstream `instanceTypeNotFound`: the claim's instance type is in the list and has an offering
/// in the claim's zone and capacity type, whatever its current availability.
fn instance_type_offered(labels: &BTreeMap<String, String>, types: &[InstanceType]) -> bool {
    let Some(name) = labels.get(LABEL_INSTANCE_TYPE) else { return false };
    let Some(t) = types.iter().find(|t| &t.name == name) else { return false };
    let zone = labels.get(LABEL_ZONE);
    let capacity_type = labels.get(LABEL_CAPACITY_TYPE);
    t.offerings.iter().any(|o| {
        zone.is_none_or(|z| *z == o.zone) && capacity_type.is_none_or(|c| c == o.capacity_type.as_str())
    })
}

/// Whether hash annotations should be re-stamped, and with what: when a claim's version annotation
/// is not the current one, the version is updated, and the hash too unless the claim is drifted (a
/// drifted claim stays drifted: the old hash cannot say whether it still is; upstream core
/// `pkg/controllers/nodepool/hash/controller.go` and the provider's hash controller).
pub fn restamp(
    annotations: &BTreeMap<String, String>,
    pool_hash: &str,
    class_hash: Option<&str>,
    drifted: bool,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stamp = |hash_key: &str, version_key: &str, version: &str, hash: &str| {
        if annotations.get(version_key).map(String::as_str) != Some(version) {
            out.insert(version_key.to_string(), version.to_string());
            if !drifted {
                out.insert(hash_key.to_string(), hash.to_string());
            }
        }
    };
    stamp(ANNOTATION_NODEPOOL_HASH, ANNOTATION_NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION, pool_hash);
    if let Some(hash) = class_hash {
        stamp(ANNOTATION_NODECLASS_HASH, ANNOTATION_NODECLASS_HASH_VERSION, NODECLASS_HASH_VERSION, hash);
    }
    out
}

/// Upstream `Consolidatable` (core `nodeclaim/disruption/consolidation.go`): an initialized claim
/// whose last pod event (or, without one, its initialization) is at least `consolidate_after` ago.
/// The later of the two counts, so a stale pod event from before initialization cannot shorten the
/// wait. `Never` disables consolidation; an uninitialized claim is never consolidatable.
pub fn consolidatable(
    initialized_at: Option<Timestamp>,
    last_pod_event: Option<Timestamp>,
    consolidate_after: NillableDuration,
    now: Timestamp,
) -> bool {
    let NillableDuration::After(after) = consolidate_after else { return false };
    let Some(initialized) = initialized_at else { return false };
    let since = last_pod_event.map_or(initialized, |p| p.max(initialized));
    let elapsed_ms = now.as_millisecond().saturating_sub(since.as_millisecond());
    after.is_zero() || (elapsed_ms >= 0 && elapsed_ms as u128 >= after.as_millis())
}

#[cfg(test)]
#[path = "drift_tests.rs"]
mod tests;
