//! Which instance types and offerings a set of requirements (a NodePool's, or a NodePool's and a
//! pod's together) allows. Pure: requirements in, a filtered copy of the catalog out.

use std::collections::BTreeMap;

use crate::model::labels::{
    self, LABEL_AKS_PRIORITY, LABEL_AKS_SCALESET_PRIORITY, LABEL_CAPACITY_TYPE, LABEL_ZONE,
};
use crate::model::requirements::{MinValuesError, Requirements};
use crate::model::CapacityType;
use crate::model::{InstanceType, Offering};

/// The labels an offering adds to its instance type's labels.
pub fn offering_labels(offering: &Offering) -> [(&'static str, &str); 4] {
    let (capacity_type, priority) = match offering.capacity_type {
        CapacityType::OnDemand => (labels::CAPACITY_TYPE_ON_DEMAND, "regular"),
        CapacityType::Spot => (labels::CAPACITY_TYPE_SPOT, "spot"),
    };
    [
        (LABEL_ZONE, offering.zone.as_str()),
        (LABEL_CAPACITY_TYPE, capacity_type),
        (LABEL_AKS_SCALESET_PRIORITY, priority),
        (LABEL_AKS_PRIORITY, priority),
    ]
}

/// Whether an instance type's own labels meet `requirements`.
///
/// Only well-known keys are checked: other keys are labels the NodePool itself puts on its nodes,
/// which no instance type defines. Offering keys (zone, capacity type) are left to [`allowed_offerings`].
pub fn type_allowed(instance_type: &InstanceType, requirements: &Requirements) -> bool {
    requirements.iter().all(|r| {
        let key = r.key();
        if !labels::is_well_known(key) || is_offering_key(key) || labels::is_pool_decided(key) {
            return true;
        }
        r.admits(instance_type.labels.get(key).map(String::as_str))
    })
}

fn is_offering_key(key: &str) -> bool {
    [LABEL_ZONE, LABEL_CAPACITY_TYPE, LABEL_AKS_SCALESET_PRIORITY, LABEL_AKS_PRIORITY].contains(&key)
}

/// The topology domains of `key` that a node of `instance_type` can be in under `requirements` (a
/// NodePool's together with a pod's), for a key other than the zone and capacity type (decided per
/// offering) and the hostname: the type's own label when it has one, otherwise the values a
/// requirement on the key lists (`In`, as NodePool labels become). A key nothing defines has no domain.
/// Upstream builds the same domain groups from the NodePools' requirements and the instance types'
/// (`pkg/controllers/provisioning/scheduling/topology.go`, `buildDomainGroups`).
pub fn label_domains(key: &str, instance_type: &InstanceType, requirements: &Requirements) -> Vec<String> {
    let requirement = requirements.get(key);
    if let Some(value) = instance_type.labels.get(key) {
        return match requirement.is_none_or(|r| r.admits(Some(value))) {
            true => vec![value.clone()],
            false => vec![],
        };
    }
    let values = requirement.and_then(|r| r.finite_values()).unwrap_or_default();
    values.into_iter().map(str::to_string).collect()
}

/// The offerings of a type whose zone and capacity type meet `requirements`.
pub fn allowed_offerings<'a>(
    instance_type: &'a InstanceType,
    requirements: &'a Requirements,
) -> impl Iterator<Item = &'a Offering> + 'a {
    instance_type.offerings.iter().filter(move |o| {
        offering_labels(o).iter().all(|(k, v)| requirements.get(k).is_none_or(|r| r.admits(Some(v))))
    })
}

/// The instance types `requirements` allow, each keeping only its allowed offerings; types left with
/// no offering are dropped. minValues is checked over the result (zone and capacity-type minValues
/// count the offerings' values).
pub fn select(
    types: &[InstanceType],
    requirements: &Requirements,
) -> Result<Vec<InstanceType>, MinValuesError> {
    let selected: Vec<InstanceType> = types
        .iter()
        .filter(|t| type_allowed(t, requirements))
        .filter_map(|t| {
            let offerings: Vec<Offering> = allowed_offerings(t, requirements).cloned().collect();
            (!offerings.is_empty()).then(|| InstanceType { offerings, ..t.clone() })
        })
        .collect();
    let label_sets: Vec<BTreeMap<String, String>> = selected
        .iter()
        .flat_map(|t| {
            t.offerings.iter().map(move |o| {
                let mut all = t.labels.clone();
                all.extend(offering_labels(o).iter().map(|(k, v)| (k.to_string(), v.to_string())));
                all
            })
        })
        .collect();
    requirements.check_min_values(label_sets.iter())?;
    Ok(selected)
}
