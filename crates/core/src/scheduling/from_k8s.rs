//! Pure conversion from Kubernetes objects (k8s-openapi types, our CRDs) to the solver's input types:
//! Nodes to [`ExistingNode`]s, NodePools to [`NodePoolInput`]s, and the shared pieces (resource lists,
//! label selectors, taints). Pods and pod templates are in [`pod`]. No I/O: the controller and the
//! simulator read the objects; this module only translates them, and every error names the field.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};

use crate::apis::{NodePool, Operator, Taint, TaintEffect};
use crate::model::labels::{AKS_MODE_DEFAULT, LABEL_AKS_MODE, LABEL_NODEPOOL};
use crate::model::requirements::{Requirement, RequirementError, Requirements};
use crate::model::resources::{Resources, ResourcesError, NODES};
use crate::model::InstanceType;
use crate::scheduling::input::{ExistingNode, NodePoolInput};

mod pod;
#[cfg(test)]
mod tests;
pub mod volumes;

pub use pod::{from_pod, pod, pod_limits, pod_requests, template_pods, PodContext, PodSource};
pub use volumes::{pod_claims, VolumeIndex};

/// The taint the node lifecycle controller puts on cordoned nodes (`kubectl cordon`).
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// A field of a Kubernetes object cannot be turned into solver input.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FromK8sError {
    #[error("{field}: {source}")]
    Quantity { field: String, source: ResourcesError },
    #[error("{field}: {source}")]
    Requirement { field: String, source: RequirementError },
    #[error("{field}: {message} is not supported")]
    Unsupported { field: String, message: String },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The object does not fit this version's API types (a field or value it does not know).
    #[error("cannot be read: {message}")]
    Undecodable { message: String },
}

impl FromK8sError {
    /// Static category, usable as a metric label or event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Quantity { .. } => "InvalidQuantity",
            Self::Requirement { .. } => "InvalidRequirement",
            Self::Unsupported { .. } => "Unsupported",
            Self::Invalid { .. } => "Invalid",
            Self::Undecodable { .. } => "Undecodable",
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), message: message.into() }
    }
}

/// Parses a Kubernetes resource list (`{cpu: 500m, memory: 1Gi}`) into base units.
pub fn resource_list(
    field: &str,
    list: Option<&BTreeMap<String, K8sQuantity>>,
) -> Result<Resources, FromK8sError> {
    let text: BTreeMap<String, String> =
        list.into_iter().flatten().map(|(k, v)| (k.clone(), v.0.clone())).collect();
    Resources::parse(&text).map_err(|source| FromK8sError::Quantity { field: field.to_string(), source })
}

/// Parses an operator name as the API writes it (`In`, `NotIn`, ...).
pub fn operator(field: &str, name: &str) -> Result<Operator, FromK8sError> {
    Ok(match name {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::Gt,
        "Lt" => Operator::Lt,
        "Gte" => Operator::Gte,
        "Lte" => Operator::Lte,
        other => return Err(FromK8sError::invalid(field, format!("unknown operator {other:?}"))),
    })
}

/// A label selector as requirements on pod labels: `matchLabels` as `In [value]`, `matchExpressions`
/// as written. An empty selector (`{}`) selects every pod.
pub fn label_selector(field: &str, selector: &LabelSelector) -> Result<Requirements, FromK8sError> {
    let mut out = Requirements::from_labels(selector.match_labels.iter().flatten());
    for (i, e) in selector.match_expressions.iter().flatten().enumerate() {
        let field = format!("{field}.matchExpressions[{i}]");
        let op = operator(&format!("{field}.operator"), &e.operator)?;
        if matches!(op, Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte) {
            return Err(FromK8sError::invalid(
                format!("{field}.operator"),
                "a label selector allows In, NotIn, Exists and DoesNotExist only",
            ));
        }
        let values = e.values.clone().unwrap_or_default();
        let requirement = Requirement::from_operator(&e.key, op, &values, None)
            .map_err(|source| FromK8sError::Requirement { field, source })?;
        out.add(requirement);
    }
    Ok(out)
}

/// A core taint as the API type of our CRDs.
pub fn taint(field: &str, t: &core::Taint) -> Result<Taint, FromK8sError> {
    let effect = match t.effect.as_str() {
        "NoSchedule" => TaintEffect::NoSchedule,
        "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
        "NoExecute" => TaintEffect::NoExecute,
        other => {
            return Err(FromK8sError::invalid(format!("{field}.effect"), format!("unknown effect {other:?}")))
        }
    };
    Ok(Taint {
        key: t.key.clone(),
        value: t.value.clone().filter(|v| !v.is_empty()),
        effect,
        time_added: None,
    })
}

/// `Kind/name` of the controller among `refs` (the first reference when none is marked controller).
pub fn owner_of(refs: Option<&Vec<OwnerReference>>) -> Option<String> {
    let refs = refs?;
    let owner = refs.iter().find(|r| r.controller == Some(true)).or_else(|| refs.first())?;
    Some(format!("{}/{}", owner.kind, owner.name))
}

/// What a node has for pods: `status.allocatable`, or `status.capacity` when allocatable is missing
/// (hand-written scenarios often give only one of them).
pub fn node_allocatable(node: &core::Node) -> Result<Resources, FromK8sError> {
    let status = node.status.as_ref();
    match status.and_then(|s| s.allocatable.as_ref()) {
        Some(list) => resource_list("status.allocatable", Some(list)),
        None => resource_list("status.capacity", status.and_then(|s| s.capacity.as_ref())),
    }
}

/// What a node counts against its NodePool's limits: `status.capacity` (upstream sums NodeClaim
/// capacity), or allocatable when capacity is missing, plus `nodes: 1`.
pub fn node_capacity(node: &core::Node) -> Result<Resources, FromK8sError> {
    let status = node.status.as_ref();
    let used = match status.and_then(|s| s.capacity.as_ref()) {
        Some(list) => resource_list("status.capacity", Some(list))?,
        None => node_allocatable(node)?,
    };
    Ok(used.with(NODES, 1))
}

/// A Node as existing capacity. A cordoned node (`spec.unschedulable`) gets the unschedulable taint
/// when it does not carry it yet, as the node lifecycle controller would add it.
pub fn node(node: &core::Node) -> Result<ExistingNode, FromK8sError> {
    node_sharing_labels(node, |s: &str| Arc::from(s))
}

/// [`node`], with each label key and value made by `share`: a caller that holds the strings other
/// nodes carry hands out its copy instead of a new one.
pub fn node_sharing_labels(
    node: &core::Node,
    mut share: impl FnMut(&str) -> Arc<str>,
) -> Result<ExistingNode, FromK8sError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let labels = node.metadata.labels.as_ref();
    let spec = node.spec.as_ref();
    let mut taints = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| taint(&format!("spec.taints[{i}]"), t))
        .collect::<Result<Vec<_>, _>>()?;
    let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    if cordoned && !taints.iter().any(|t| t.key == TAINT_UNSCHEDULABLE) {
        taints.push(Taint {
            key: TAINT_UNSCHEDULABLE.to_string(),
            value: None,
            effect: TaintEffect::NoSchedule,
            time_added: None,
        });
    }
    Ok(ExistingNode {
        nodepool: labels.and_then(|l| l.get(LABEL_NODEPOOL)).cloned(),
        name,
        labels: labels.into_iter().flatten().map(|(key, value)| (share(key), share(value))).collect(),
        taints,
        allocatable: node_allocatable(node)?,
        in_flight: false,
        startup_taints: vec![],
    })
}

/// A NodePool ready for the solver.
///
/// Requirements are the template's, intersected with `karpenter.sh/nodepool In [name]` and each
/// template label as `In [value]` (a node of the pool will carry them). `remaining` is each limit minus
/// `used` (what the pool's nodes already have, see [`node_capacity`]), floored at zero; only the limited
/// resources appear in it. A missing weight is 0, as upstream orders pools.
pub fn nodepool(
    pool: &NodePool,
    used: &Resources,
    instance_types: Arc<Vec<InstanceType>>,
) -> Result<NodePoolInput, FromK8sError> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let template = &pool.spec.template;
    let template_labels = template.metadata.as_ref().map(|m| m.labels.clone()).unwrap_or_default();
    let mut requirements =
        crate::apis::requirements::from_api(&template.spec.requirements).map_err(|source| {
            FromK8sError::Requirement { field: "spec.template.spec.requirements".into(), source }
        })?;
    requirements.add(Requirement::is_in(LABEL_NODEPOOL, [name.clone()]));
    for (key, value) in &template_labels {
        requirements.add(Requirement::is_in(key, [value.clone()]));
    }
    let mut labels = template_labels;
    labels.insert(LABEL_NODEPOOL.to_string(), name.clone());
    // A pool that leaves the AKS mode open launches `user` nodes, as upstream's provider labels them.
    if !labels.contains_key(LABEL_AKS_MODE) && requirements.get(LABEL_AKS_MODE).is_none() {
        labels.insert(LABEL_AKS_MODE.to_string(), AKS_MODE_DEFAULT.to_string());
        requirements.add(Requirement::is_in(LABEL_AKS_MODE, [AKS_MODE_DEFAULT.to_string()]));
    }
    let remaining = match &pool.spec.limits {
        None => None,
        Some(limits) => {
            let text: BTreeMap<String, String> =
                limits.iter().map(|(k, v)| (k.clone(), v.as_str().to_string())).collect();
            let limits = Resources::parse(&text)
                .map_err(|source| FromK8sError::Quantity { field: "spec.limits".into(), source })?;
            Some(limits.iter().map(|(k, v)| (k.to_string(), (v - used.get(k)).max(0))).collect())
        }
    };
    Ok(NodePoolInput {
        name,
        weight: pool.spec.weight.unwrap_or(0),
        requirements,
        labels,
        taints: template.spec.taints.clone(),
        startup_taints: template.spec.startup_taints.clone(),
        remaining,
        instance_types,
        replicas: pool.spec.replicas,
    })
}
