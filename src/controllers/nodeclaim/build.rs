//! Pure conversions at the NodeClaim boundary: a planned claim into the NodeClaim object provisioning
//! creates, and a NodeClaim (with its AKSNodeClass and the catalog) into the cloud's launch request.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::apis::aksnodeclass::DEFAULT_OS_DISK_SIZE_GB;
use crate::apis::common::{Operator, Quantity, ResourceList};
use crate::apis::conditions::{self, Condition, ConditionStatus};
use crate::apis::hash;
use crate::apis::nodeclaim::ResourceRequirements;
use crate::apis::{AKSNodeClass, NodeClaim, NodeClaimSpec, NodePool};
use crate::catalog::{embedded_sku, NodeSecurity, SkuRecord};
use crate::cloud::azure::bootstrap::{kubelet_config_flags, NodeClassBootstrap};
use crate::cloud::azure::imagefamily::image_for;
use crate::cloud::{allocation, InstanceTypeOption, KubeletSettings, LaunchRequest, OfferingChoice};
use crate::model::labels::{self, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL};
use crate::model::resources::Resources;
use crate::model::selection::{allowed_offerings, offering_labels, type_allowed};
use crate::model::InstanceType;
use crate::scheduling::NewNodeClaim;

/// The kubelet's own default, used only if a catalog entry lacks a pod count.
const DEFAULT_MAX_PODS: u32 = 110;

/// A resource vector in the API's quantity form.
pub fn resource_list(resources: &Resources) -> ResourceList {
    resources.to_quantities().into_iter().map(|(k, v)| (k, Quantity(v))).collect()
}

/// The NodeClaim provisioning creates for a planned claim: named by the API server from
/// `<nodepool>-` (five random characters, as upstream), labelled with its NodePool and every
/// single-valued requirement, owned by the NodePool so it goes when the pool goes, and stamped with
/// the hashes of the NodePool's template and of `class` (its AKSNodeClass, when it exists) that
/// drift is judged against. A hash that cannot be computed is left out; the drift sweep reports it.
pub fn build(planned: &NewNodeClaim, pool: &NodePool, class: Option<&AKSNodeClass>) -> NodeClaim {
    let template = &pool.spec.template;
    let mut labels: BTreeMap<String, String> = planned
        .requirements
        .iter()
        .filter_map(|r| r.single_value().map(|v| (r.key().to_string(), v.to_string())))
        .collect();
    if let Some(meta) = &template.metadata {
        labels.extend(meta.labels.clone());
    }
    labels.insert(LABEL_NODEPOOL.to_string(), planned.nodepool.clone());
    let mut annotations = template.metadata.as_ref().map(|m| m.annotations.clone()).unwrap_or_default();
    annotations.extend(hash::annotations(pool, class).unwrap_or_default());
    let annotations = Some(annotations).filter(|a| !a.is_empty());
    let owner = OwnerReference {
        api_version: NodePool::api_version(&()).to_string(),
        kind: NodePool::kind(&()).to_string(),
        name: planned.nodepool.clone(),
        uid: pool.metadata.uid.clone().unwrap_or_default(),
        block_owner_deletion: Some(true),
        controller: None,
    };
    let mut requirements = crate::apis::requirements::to_api(&planned.requirements);
    for r in requirements.iter_mut().filter(|r| r.key == LABEL_INSTANCE_TYPE && r.operator == Operator::In) {
        r.values = ranked(&r.values, &planned.instance_type_options);
    }
    let spec = NodeClaimSpec {
        requirements,
        resources: ResourceRequirements { requests: resource_list(&planned.requests) },
        node_class_ref: template.spec.node_class_ref.clone(),
        taints: template.spec.taints.clone(),
        startup_taints: template.spec.startup_taints.clone(),
        expire_after: template.spec.expire_after.clone(),
        termination_grace_period: template.spec.termination_grace_period.clone(),
    };
    let mut claim = NodeClaim::new("", spec);
    claim.metadata = ObjectMeta {
        generate_name: Some(format!("{}-", planned.nodepool)),
        labels: Some(labels),
        annotations,
        owner_references: Some(vec![owner]),
        ..ObjectMeta::default()
    };
    claim
}

/// The instance-type values in the solver's order (best first), then any others in their given order:
/// `In` is a set to the API server, so the order is free to carry the ranking to the launch.
fn ranked(values: &[String], preference: &[String]) -> Vec<String> {
    let mut out: Vec<String> = preference.iter().filter(|p| values.contains(p)).cloned().collect();
    out.extend(values.iter().filter(|v| !preference.contains(v)).cloned());
    out
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

/// The launch request for a claim: every instance type its requirements allow and an image of the
/// (Ready) class boots, each with its image and the offerings (priced by the catalog) its zone and
/// capacity-type requirements allow. The cloud picks among all of them by upstream's allocation rules
/// ([`crate::cloud::allocation`]); the options are listed in that order of their best offering, so the
/// first is the size a launch without capacity errors gets, whose kubelet values the request carries.
pub fn launch_request(
    claim: &NodeClaim,
    class: Option<&AKSNodeClass>,
    types: &[InstanceType],
) -> Result<LaunchRequest, LaunchRequestError> {
    launch_request_with(claim, class, types, &|name| embedded_sku(name).cloned())
}

/// [`launch_request`] with the size facts (family, disks, generations) from `records`: the catalog's,
/// which knows the sizes the Resource SKUs API listed beyond the embedded data.
pub fn launch_request_with(
    claim: &NodeClaim,
    class: Option<&AKSNodeClass>,
    types: &[InstanceType],
    records: &dyn Fn(&str) -> Option<SkuRecord>,
) -> Result<LaunchRequest, LaunchRequestError> {
    let class_name = &claim.spec.node_class_ref.name;
    let class = class.ok_or_else(|| LaunchRequestError::NodeClassMissing(class_name.clone()))?;
    let status = class.status.clone().unwrap_or_default();
    if let Some(why) = not_ready(&status.conditions) {
        return Err(LaunchRequestError::NodeClassNotReady { class: class_name.clone(), why });
    }
    if status.images.is_empty() {
        return Err(LaunchRequestError::NoImage(class_name.clone()));
    }
    let requirements = crate::apis::requirements::from_api(&claim.spec.requirements)
        .map_err(|e| LaunchRequestError::Requirements(e.to_string()))?;
    let mut ranked: Vec<(&InstanceType, Vec<OfferingChoice>)> = types
        .iter()
        .filter(|t| {
            requirements.get(LABEL_INSTANCE_TYPE).is_none_or(|r| r.admits(Some(&t.name)))
                && type_allowed(t, &requirements)
        })
        .map(|t| {
            let choices: Vec<OfferingChoice> = allowed_offerings(t, &requirements)
                .map(|o| OfferingChoice {
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type,
                    price: o.price,
                })
                .collect();
            (t, choices)
        })
        .filter(|(_, choices)| !choices.is_empty())
        .collect();
    ranked.sort_by(|(a, a_offerings), (b, b_offerings)| {
        match (allocation::best(a_offerings), allocation::best(b_offerings)) {
            (Some(x), Some(y)) => allocation::cheaper(x, y),
            _ => std::cmp::Ordering::Equal,
        }
        .then_with(|| a.name.cmp(&b.name))
    });
    let mut without_image = Vec::new();
    let options: Vec<InstanceTypeOption> = ranked
        .into_iter()
        .filter_map(|(t, offerings)| {
            let sku = records(&t.name)?;
            let Some(image) = image_for(&status.images, &sku) else {
                without_image.push(t.name.as_str());
                return None;
            };
            Some(InstanceTypeOption::from_sku(&sku, &image.id, offerings))
        })
        .collect();
    if options.is_empty() && !without_image.is_empty() {
        let sizes = without_image.join(", ");
        return Err(LaunchRequestError::NoCompatibleImage { class: class_name.clone(), sizes });
    }
    // kube-reserved depends on the size; the request carries one value, so it is the first option's.
    // Falling back to a bigger size reserves a little less than upstream would.
    let first = options
        .first()
        .and_then(|o| types.iter().find(|t| t.name == o.name))
        .ok_or(LaunchRequestError::NoInstanceType)?;
    Ok(LaunchRequest {
        claim_name: claim.metadata.name.clone().unwrap_or_default(),
        nodepool: claim.labels_map().get(LABEL_NODEPOOL).cloned().unwrap_or_default(),
        options,
        labels: claim.labels_map().clone(),
        taints: claim.spec.taints.clone(),
        startup_taints: claim.spec.startup_taints.clone(),
        subnet_id: class.spec.vnet_subnet_id.clone(),
        os_disk_size_gb: class.spec.os_disk_size_gb.unwrap_or(DEFAULT_OS_DISK_SIZE_GB).max(0) as u32,
        tags: class.spec.tags.clone(),
        kubelet: KubeletSettings {
            // The catalog is shaped by the class's maxPods and the operator's network plugin.
            max_pods: u32::try_from(first.capacity.get("pods")).unwrap_or(DEFAULT_MAX_PODS),
            kube_reserved: first.overhead.kube_reserved.to_quantities(),
            config_flags: kubelet_config_flags(class.spec.kubelet.as_ref()),
        },
        security: NodeSecurity::from_spec(class.spec.security.as_ref()),
        node_class: NodeClassBootstrap::from_class(class),
    })
}

/// Why a class's conditions do not allow launches (upstream launches only from a Ready class); None
/// when Ready is True.
fn not_ready(conditions: &[Condition]) -> Option<String> {
    match conditions::get(conditions, conditions::READY) {
        Some(c) if c.status == ConditionStatus::True => None,
        Some(c) if c.message.is_empty() => Some(c.reason.clone()),
        Some(c) => Some(format!("{}: {}", c.reason, c.message)),
        None => Some("its status has not been written yet".to_string()),
    }
}

/// Labels the launched instance decides, for the claim (and through it the Node): the size's labels,
/// its zone and capacity type. Labels the claim already has win, as upstream.
pub fn launched_labels(
    claim_labels: &BTreeMap<String, String>,
    instance_type: Option<&InstanceType>,
    zone: Option<&str>,
    capacity_type: crate::model::CapacityType,
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    if let Some(t) = instance_type {
        out.extend(t.labels.clone());
        let offering = crate::model::Offering {
            zone: zone.unwrap_or_default().to_string(),
            capacity_type,
            price: 0.0,
            available: true,
        };
        for (k, v) in offering_labels(&offering) {
            if k != labels::LABEL_ZONE || zone.is_some() {
                out.insert(k.to_string(), v.to_string());
            }
        }
    }
    out.retain(|k, _| !claim_labels.contains_key(k));
    out
}

/// Convenience for `metadata.labels` as a map.
trait LabelsMap {
    fn labels_map(&self) -> &BTreeMap<String, String>;
}

impl LabelsMap for NodeClaim {
    fn labels_map(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }
}

#[cfg(test)]
#[path = "build_tests.rs"]
mod tests;
