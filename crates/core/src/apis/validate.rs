//! Rust-side validation of NodePools and AKSNodeClasses read from files (the `catalog` and `simulate`
//! commands), mirroring the checks the API server makes through the CRD schemas, so that a file the
//! API server would refuse is refused here too, with the field path in the message.

use crate::apis::duration;
use crate::apis::{AKSNodeClass, NodePool};
use crate::model::labels::restricted_label_reason;
use crate::model::requirements::Requirement;

/// A field of an object is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// The field path, such as `spec.template.spec.requirements[0].key`.
    pub field: String,
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ValidationError {
    ValidationError { field: field.into(), message: message.into() }
}

/// Checks a NodePool as the API server would.
pub fn nodepool(pool: &NodePool) -> Result<(), ValidationError> {
    let spec = &pool.spec;
    let template = &spec.template.spec;
    for (i, r) in template.requirements.iter().enumerate() {
        let field = format!("spec.template.spec.requirements[{i}]");
        if let Some(reason) = restricted_label_reason(&r.key) {
            return Err(invalid(format!("{field}.key"), reason));
        }
        if r.key == crate::model::labels::LABEL_NODEPOOL {
            return Err(invalid(format!("{field}.key"), "label \"karpenter.sh/nodepool\" is restricted"));
        }
        let min_values = r.min_values.map(|m| m.max(0) as u32);
        Requirement::from_operator(&r.key, r.operator, &r.values, min_values)
            .map_err(|e| invalid(field.clone(), e.to_string()))?;
        if let Some(m) = r.min_values {
            if !(1..=50).contains(&m) {
                return Err(invalid(format!("{field}.minValues"), "must be between 1 and 50"));
            }
            if r.operator == crate::apis::Operator::In && m as usize > r.values.len() {
                return Err(invalid(
                    format!("{field}.minValues"),
                    format!("minValues {m} is larger than the {} values listed", r.values.len()),
                ));
            }
        }
    }
    if let Some(metadata) = &spec.template.metadata {
        for key in metadata.labels.keys() {
            if let Some(reason) = restricted_label_reason(key) {
                return Err(invalid(format!("spec.template.metadata.labels[{key}]"), reason));
            }
        }
    }
    duration::parse_nillable(&template.expire_after)
        .map_err(|e| invalid("spec.template.spec.expireAfter", e.to_string()))?;
    if let Some(tgp) = &template.termination_grace_period {
        duration::parse(tgp)
            .map_err(|e| invalid("spec.template.spec.terminationGracePeriod", e.to_string()))?;
    }
    duration::parse_nillable(&spec.disruption.consolidate_after)
        .map_err(|e| invalid("spec.disruption.consolidateAfter", e.to_string()))?;
    for (i, b) in spec.disruption.budgets.iter().enumerate() {
        if b.schedule.is_some() != b.duration.is_some() {
            return Err(invalid(
                format!("spec.disruption.budgets[{i}]"),
                "'schedule' and 'duration' must be set together",
            ));
        }
        if !budget_nodes_valid(&b.nodes) {
            return Err(invalid(
                format!("spec.disruption.budgets[{i}].nodes"),
                format!("{:?} must be a whole number or a percentage from 0% to 100%", b.nodes),
            ));
        }
    }
    if let Some(w) = spec.weight {
        if !(1..=100).contains(&w) {
            return Err(invalid("spec.weight", format!("{w} must be between 1 and 100")));
        }
    }
    let reference = &template.node_class_ref;
    if reference.group != crate::apis::common::NODE_CLASS_GROUP
        || reference.kind != crate::apis::common::NODE_CLASS_KIND
    {
        return Err(invalid(
            "spec.template.spec.nodeClassRef",
            "must reference group karpenter.azure.com, kind AKSNodeClass (or leave both out)",
        ));
    }
    Ok(())
}

fn budget_nodes_valid(nodes: &str) -> bool {
    match nodes.strip_suffix('%') {
        Some(pct) => pct.len() <= 3 && pct.parse::<u32>().is_ok_and(|p| p <= 100),
        None => !nodes.is_empty() && nodes.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// Checks the AKSNodeClass fields the catalog and solver read.
pub fn aksnodeclass(class: &AKSNodeClass) -> Result<(), ValidationError> {
    if let Some(size) = class.spec.os_disk_size_gb {
        if !(30..=2048).contains(&size) {
            return Err(invalid("spec.osDiskSizeGB", format!("{size} must be between 30 and 2048")));
        }
    }
    if let Some(max_pods) = class.spec.max_pods {
        if !(10..=250).contains(&max_pods) {
            return Err(invalid("spec.maxPods", format!("{max_pods} must be between 10 and 250")));
        }
    }
    if let Some(kubelet) = &class.spec.kubelet {
        if let (Some(high), Some(low)) =
            (kubelet.image_gc_high_threshold_percent, kubelet.image_gc_low_threshold_percent)
        {
            if high <= low {
                return Err(invalid(
                    "spec.kubelet.imageGCHighThresholdPercent",
                    "must be greater than kubelet.imageGCLowThresholdPercent",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(yaml_spec: &str) -> NodePool {
        serde_yaml::from_str(&format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n{yaml_spec}"
        ))
        .unwrap()
    }

    #[test]
    fn accepts_a_plain_pool() {
        assert_eq!(nodepool(&pool("  template: {spec: {nodeClassRef: {name: default}}}")), Ok(()));
    }

    #[test]
    fn names_the_field_that_is_wrong() {
        let cases = [
            (
                "  template: {spec: {nodeClassRef: {name: d}, requirements: [{key: kubernetes.io/hostname, operator: In, values: [a]}]}}",
                "requirements[0].key",
            ),
            (
                "  template: {spec: {nodeClassRef: {name: d}, requirements: [{key: a, operator: In, values: [x], minValues: 2}]}}",
                "requirements[0].minValues",
            ),
            ("  template: {spec: {nodeClassRef: {name: d}, expireAfter: 5d}}", "expireAfter"),
            ("  template: {spec: {nodeClassRef: {name: d}}}\n  weight: 0", "spec.weight"),
            ("  template: {spec: {nodeClassRef: {name: d}}}\n  disruption: {budgets: [{nodes: 110%}]}", "nodes"),
            (
                "  template: {metadata: {labels: {karpenter.sh/custom: x}}, spec: {nodeClassRef: {name: d}}}",
                "labels[karpenter.sh/custom]",
            ),
        ];
        for (spec, field) in cases {
            let err = nodepool(&pool(spec)).unwrap_err();
            assert!(err.field.contains(field), "{spec}: {err}");
        }
    }
}
