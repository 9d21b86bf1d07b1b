//! Pure conversions at the NodeClaim boundary: a planned claim into the NodeClaim object provisioning
//! creates, and a launched instance into the labels its claim gains. The launch request itself is the
//! cloud provider's ([`crate::cloud::CloudProvider::launch_request`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::apis::common::{Operator, Quantity, ResourceList};
use crate::apis::hash;
use crate::apis::nodeclaim::ResourceRequirements;
use crate::apis::{AKSNodeClass, NodeClaim, NodeClaimSpec, NodePool};
use crate::model::labels::{self, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL};
use crate::model::resources::Resources;
use crate::model::selection::offering_labels;
use crate::model::InstanceType;
use crate::scheduling::NewNodeClaim;

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
    if let Some(relaxed) = min_values_relaxed(planned, pool) {
        annotations.insert(labels::ANNOTATION_MIN_VALUES_RELAXED.to_string(), relaxed.to_string());
    }
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

/// Whether the planned claim's minValues are lower than its NodePool's (the solver lowered them under
/// MinValuesPolicy BestEffort), as upstream core's scheduler compares them (scheduler.go); None for a
/// NodePool without minValues. Upstream annotates every claim; here only those of NodePools with
/// minValues, the only ones it can be true of.
pub fn min_values_relaxed(planned: &NewNodeClaim, pool: &NodePool) -> Option<bool> {
    let wanted: Vec<(&str, i32)> = pool
        .spec
        .template
        .spec
        .requirements
        .iter()
        .filter_map(|r| Some((r.key.as_str(), r.min_values?)))
        .collect();
    if wanted.is_empty() {
        return None;
    }
    Some(wanted.iter().any(|&(key, min)| {
        let planned_min = planned.requirements.get(key).and_then(|r| r.min_values());
        planned_min.map_or(0, i64::from) < i64::from(min)
    }))
}

/// The instance-type values in the solver's order (best first), then any others in their given order:
/// `In` is a set to the API server, so the order is free to carry the ranking to the launch.
fn ranked(values: &[String], preference: &[String]) -> Vec<String> {
    let mut out: Vec<String> = preference.iter().filter(|p| values.contains(p)).cloned().collect();
    out.extend(values.iter().filter(|v| !preference.contains(v)).cloned());
    out
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

#[cfg(test)]
#[path = "build_tests.rs"]
mod tests;
