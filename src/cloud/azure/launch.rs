//! The launch request of a NodeClaim on Azure: every size its requirements allow and an image of its
//! (Ready) AKSNodeClass boots, each with that image and the offerings its zone and capacity-type
//! requirements allow, in upstream's allocation order; with the class's bootstrap (image family,
//! Kubernetes version, GPU driver, OS configuration), kubelet flags, subnet, OS disk, tags and
//! security. Pure: the catalog's sizes and size facts are passed in.

use crate::apis::aksnodeclass::DEFAULT_OS_DISK_SIZE_GB;
use crate::apis::conditions::{self, Condition, ConditionStatus};
use crate::apis::{AKSNodeClass, NodeClaim};
use crate::catalog::{embedded_sku, NodeSecurity, SkuRecord};
use crate::cloud::azure::bootstrap::{kubelet_config_flags, NodeClassBootstrap};
use crate::cloud::azure::imagefamily::image_for;
use crate::cloud::azure::instancetypes::Catalog;
use crate::cloud::{
    allocation, InstanceTypeOption, KubeletSettings, LaunchRequest, LaunchRequestError, OfferingChoice,
};
use crate::model::labels::{LABEL_INSTANCE_TYPE, LABEL_NODEPOOL};
use crate::model::selection::{allowed_offerings, type_allowed};
use crate::model::InstanceType;

/// The kubelet's own default, used only if a catalog entry lacks a pod count.
const DEFAULT_MAX_PODS: u32 = 110;

/// The launch request for a claim: every instance type its requirements allow and an image of the
/// (Ready) class boots, each with its image and the offerings (priced by the catalog) its zone and
/// capacity-type requirements allow. The cloud picks among all of them by upstream's allocation rules
/// ([`crate::cloud::allocation`]); the options are listed in that order of their best offering, so the
/// first is the size a launch without capacity errors gets, whose kubelet values the request carries.
pub fn request(
    claim: &NodeClaim,
    class: Option<&AKSNodeClass>,
    types: &[InstanceType],
) -> Result<LaunchRequest, LaunchRequestError> {
    request_with(claim, class, types, &|name| embedded_sku(name).cloned())
}

/// [`request`] with the size facts (family, disks, generations) from `records`: the catalog's,
/// which knows the sizes the Resource SKUs API listed beyond the embedded data.
pub fn request_with(
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
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    Ok(LaunchRequest {
        claim_name: claim.metadata.name.clone().unwrap_or_default(),
        nodepool: labels.get(LABEL_NODEPOOL).cloned().unwrap_or_default(),
        options,
        labels: labels.clone(),
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

/// [`request_with`] from `catalog`: its sizes for the class and its size facts. The one body of every
/// provider's `CloudProvider::launch_request`.
pub fn request_from(
    catalog: &Catalog,
    claim: &NodeClaim,
    class: Option<&AKSNodeClass>,
) -> Result<LaunchRequest, LaunchRequestError> {
    let types = catalog.types_for(class);
    request_with(claim, class, &types, &|name| catalog.sku_record(name))
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

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;
