//! CRD validation that the API server enforces: patterns, enums and CEL rules (`x-kubernetes-validations`).
//!
//! The rules are written once here and attached to the schemas through `#[schemars(transform = ...)]`
//! and `#[schemars(extend(...))]` on the API types, so that invalid objects are rejected by the API
//! server itself with a message that names the field and what is allowed. Label-domain rules are
//! generated from the lists in [`crate::model::labels`], so the CEL rules and the Rust check
//! [`crate::model::labels::restricted_label_reason`] cannot drift apart.

use schemars::Schema;
use serde_json::{json, Value};

use crate::model::labels::{
    ALLOWED_K8S_IO_SUBDOMAINS, ALLOWED_KARPENTER_AZURE_LABELS, ALLOWED_KARPENTER_SH_LABELS,
    ALLOWED_KUBERNETES_AZURE_LABELS, ALLOWED_KUBERNETES_IO_LABELS, ALLOWED_KUBERNETES_IO_SUBDOMAINS,
    LABEL_HOSTNAME, LABEL_NODEPOOL,
};

/// A Kubernetes qualified name with an optional DNS-subdomain prefix (label keys, taint keys).
pub const QUALIFIED_NAME_PATTERN: &str = r"^(([a-zA-Z0-9]|[a-zA-Z0-9][-a-zA-Z0-9]*[a-zA-Z0-9])(\.([a-zA-Z0-9]|[a-zA-Z0-9][-a-zA-Z0-9]*[a-zA-Z0-9]))*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$";
/// A label value: empty, or alphanumerics with `-_.` inside, at most 63 characters.
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// A Kubernetes resource quantity such as `100m`, `2Gi` or `1e3`.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// A Go-style duration of whole seconds, minutes and hours (`720h`, `1h30m`), or `Never`.
pub const DURATION_OR_NEVER_PATTERN: &str = r"^(([0-9]+(s|m|h))+|Never)$";
/// A Go-style duration of whole seconds, minutes and hours.
pub const DURATION_PATTERN: &str = r"^([0-9]+(s|m|h))+$";
/// A disruption-budget window: hours and/or minutes (upstream forbids seconds here).
pub const BUDGET_DURATION_PATTERN: &str = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";
/// A cron schedule of five fields or a macro such as `@daily`.
pub const CRON_PATTERN: &str =
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$";
/// A budget's node count: a whole number or a percentage from 0% to 100%.
pub const BUDGET_NODES_PATTERN: &str = r"^((100|[0-9]{1,2})%|[0-9]+)$";

/// Where a label key is being validated; NodeClaims may carry `karpenter.sh/nodepool`, NodePools may not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum KeyContext {
    NodePool,
    NodeClaim,
}

fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// CEL boolean expressions, each with its message, that a label key held in `var` must satisfy.
fn label_key_rules(var: &str, context: KeyContext) -> Vec<(String, String)> {
    let domain = format!(r#"{var}.find("^([^/]+)")"#);
    let ends_with_any = |subs: &[&str]| -> String {
        subs.iter().map(|s| format!("{domain}.endsWith({s:?})")).collect::<Vec<_>>().join(" || ")
    };
    let mut rules = vec![
        (
            format!("{var} != {LABEL_HOSTNAME:?}"),
            format!("label {LABEL_HOSTNAME:?} is restricted: it is set by each node; use topology spread or pod anti-affinity to control placement per host"),
        ),
        (
            format!(
                "{var} in {} || {} || !{domain}.endsWith(\"kubernetes.io\")",
                quoted_list(ALLOWED_KUBERNETES_IO_LABELS),
                ends_with_any(ALLOWED_KUBERNETES_IO_SUBDOMAINS)
            ),
            format!(
                "label domain \"kubernetes.io\" is restricted; allowed are {} and keys under node.kubernetes.io or node-restriction.kubernetes.io",
                ALLOWED_KUBERNETES_IO_LABELS.join(", ")
            ),
        ),
        (
            format!("{} || !{domain}.endsWith(\"k8s.io\")", ends_with_any(ALLOWED_K8S_IO_SUBDOMAINS)),
            "label domain \"k8s.io\" is restricted; only keys under kops.k8s.io are allowed".to_string(),
        ),
        (
            format!(
                "{var} in {} || !{domain}.endsWith(\"karpenter.sh\")",
                quoted_list(ALLOWED_KARPENTER_SH_LABELS)
            ),
            format!(
                "label domain \"karpenter.sh\" is restricted; allowed are {}",
                ALLOWED_KARPENTER_SH_LABELS.join(", ")
            ),
        ),
        (
            format!(
                "{var} in {} || !{domain}.endsWith(\"karpenter.azure.com\")",
                quoted_list(ALLOWED_KARPENTER_AZURE_LABELS)
            ),
            format!(
                "label domain \"karpenter.azure.com\" is restricted; allowed are {}",
                ALLOWED_KARPENTER_AZURE_LABELS.join(", ")
            ),
        ),
        (
            format!(
                "{var} in {} || !{domain}.endsWith(\"kubernetes.azure.com\")",
                quoted_list(ALLOWED_KUBERNETES_AZURE_LABELS)
            ),
            format!(
                "label domain \"kubernetes.azure.com\" is restricted; allowed are {}",
                ALLOWED_KUBERNETES_AZURE_LABELS.join(", ")
            ),
        ),
    ];
    if context == KeyContext::NodePool {
        rules.push((
            format!("{var} != {LABEL_NODEPOOL:?}"),
            format!("label {LABEL_NODEPOOL:?} is restricted: it is set to the NodePool's name on every node"),
        ));
    }
    rules
}

fn rules_value(rules: Vec<(String, String)>) -> Value {
    Value::Array(rules.into_iter().map(|(rule, message)| json!({"rule": rule, "message": message})).collect())
}

/// Appends CEL rules to a schema's `x-kubernetes-validations`.
pub fn add_rules(schema: &mut Schema, rules: Value) {
    let Some(obj) = schema.as_object_mut() else { return };
    let list = obj.entry("x-kubernetes-validations").or_insert_with(|| Value::Array(vec![]));
    if let (Value::Array(list), Value::Array(new)) = (list, rules) {
        list.extend(new);
    }
}

/// Finds the object schema under `path` (property names; `[]` steps into array items).
fn descend<'a>(
    mut at: &'a mut serde_json::Map<String, Value>,
    path: &[&str],
) -> Option<&'a mut serde_json::Map<String, Value>> {
    for step in path {
        let next =
            if *step == "[]" { at.get_mut("items")? } else { at.get_mut("properties")?.get_mut(*step)? };
        at = next.as_object_mut()?;
    }
    Some(at)
}

fn add_rules_at(schema: &mut Schema, path: &[&str], rules: Value) {
    let Some(target) = descend(schema.ensure_object(), path) else {
        panic!("validation: no schema at {path:?}; the API type and its rules are out of step");
    };
    let list = target.entry("x-kubernetes-validations").or_insert_with(|| Value::Array(vec![]));
    if let (Value::Array(list), Value::Array(new)) = (list, rules) {
        list.extend(new);
    }
}

/// Rules on one requirement (operator/values agreement, minValues bound); `self` is the requirement.
fn requirement_item_rules() -> Value {
    json!([
        {
            "rule": "self.operator != 'In' || (has(self.values) && size(self.values) > 0)",
            "message": "requirements with operator 'In' must list at least one value in 'values'"
        },
        {
            // Upstream's message (core v1.14 `nodepool.go`); its rule, `int(values[0]) >= 0`, also
            // admits exactly the non-negative integers.
            "rule": "!(self.operator in ['Gt', 'Lt', 'Gte', 'Lte']) || (has(self.values) && size(self.values) == 1 && self.values[0].matches('^[0-9]+$'))",
            "message": "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"
        },
        {
            "rule": "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0",
            "message": "requirements with operator 'Exists' or 'DoesNotExist' must not list 'values'"
        },
        {
            "rule": "!has(self.minValues) || self.operator != 'In' || (has(self.values) && self.minValues <= size(self.values))",
            "message": "'minValues' must not be larger than the number of 'values' of an 'In' requirement"
        }
    ])
}

/// Schema transform for a `requirements` list on a NodePool template.
pub fn nodepool_requirements(schema: &mut Schema) {
    requirements_for(schema, KeyContext::NodePool);
}

/// Schema transform for a `requirements` list on a NodeClaim.
pub fn nodeclaim_requirements(schema: &mut Schema) {
    requirements_for(schema, KeyContext::NodeClaim);
}

fn requirements_for(schema: &mut Schema, context: KeyContext) {
    add_rules_at(schema, &["[]"], requirement_item_rules());
    add_rules_at(schema, &["[]", "key"], rules_value(label_key_rules("self", context)));
}

/// Schema transform for a NodePool template's `labels` map: every key must be a key users may set,
/// every value a label value, and at most 100 labels (which also bounds the CEL cost).
pub fn template_labels(schema: &mut Schema) {
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("maxProperties".into(), json!(100));
        obj.insert(
            "additionalProperties".into(),
            json!({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN}),
        );
    }
    let rules = label_key_rules("x", KeyContext::NodePool)
        .into_iter()
        .map(|(rule, message)| (format!("self.all(x, {rule})"), message))
        .collect();
    add_rules(schema, rules_value(rules));
}

/// Schema transform for budgets: a schedule needs a duration and the other way round.
pub fn budgets(schema: &mut Schema) {
    add_rules(
        schema,
        json!([{
            "rule": "self.all(x, has(x.schedule) == has(x.duration))",
            "message": "a budget's 'schedule' and 'duration' must be set together (for example schedule: \"0 9 * * mon-fri\" with duration: 8h)"
        }]),
    );
}

/// Schema transform for the AKSNodeClass `tags` map, as Azure accepts them.
pub fn azure_tags(schema: &mut Schema) {
    add_rules(
        schema,
        json!([
            {"rule": "self.all(k, size(k) <= 512)", "message": "tags keys must be at most 512 characters"},
            {"rule": "self.all(k, !k.matches('[<>%&?]'))", "message": "tags keys must not contain '<', '>', '%', '&' or '?'"},
            {"rule": "self.all(k, !k.contains('\\\\'))", "message": "tags keys must not contain a backslash"},
            {"rule": "self.all(k, size(self[k]) <= 256)", "message": "tags values must be at most 256 characters"}
        ]),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_rules_cover_every_restricted_domain() {
        let rules = label_key_rules("self", KeyContext::NodePool);
        let messages: Vec<&str> = rules.iter().map(|(_, m)| m.as_str()).collect();
        for domain in
            ["kubernetes.io", "k8s.io", "karpenter.sh", "karpenter.azure.com", "kubernetes.azure.com"]
        {
            assert!(messages.iter().any(|m| m.contains(&format!("\"{domain}\""))), "{domain}");
        }
        assert!(messages.iter().any(|m| m.contains(LABEL_NODEPOOL)));
        let claim_rules = label_key_rules("self", KeyContext::NodeClaim);
        assert_eq!(claim_rules.len() + 1, rules.len());
    }

    #[test]
    fn patterns_compile_shape() {
        // The API server compiles these with RE2; here we only check they are anchored.
        for p in [QUALIFIED_NAME_PATTERN, LABEL_VALUE_PATTERN, QUANTITY_PATTERN, DURATION_PATTERN] {
            assert!(p.starts_with('^') && p.ends_with('$'), "{p}");
        }
    }
}
