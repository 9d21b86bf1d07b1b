//! Types shared by NodePool and NodeClaim: requirements with minValues, taints, the node-class
//! reference and resource quantities written as integers or strings.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::apis::validation::{LABEL_VALUE_PATTERN, QUALIFIED_NAME_PATTERN, QUANTITY_PATTERN};

/// The API group of [`crate::apis::AKSNodeClass`], the default for `nodeClassRef.group`.
pub const NODE_CLASS_GROUP: &str = "karpenter.azure.com";
/// The kind of [`crate::apis::AKSNodeClass`], the default for `nodeClassRef.kind`.
pub const NODE_CLASS_KIND: &str = "AKSNodeClass";

/// The operator of a requirement is a field type of the CRDs, so it is part of this module's public
/// API even though it is defined with the requirements algebra it belongs to.
pub use crate::model::requirements::Operator;

/// A node selector requirement with an optional minimum number of distinct values
/// (`NodeSelectorRequirementWithMinValues` upstream).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key the requirement applies to.
    #[schemars(length(max = 316), pattern(QUALIFIED_NAME_PATTERN))]
    pub key: String,
    /// How the key relates to the values: In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte.
    pub operator: Operator,
    /// The values; one or more for In and NotIn, exactly one integer for Gt, Lt, Gte and Lte, none otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = 63), pattern(LABEL_VALUE_PATTERN)))]
    pub values: Vec<String>,
    /// The minimum number of distinct values of this key that the instance-type options of a node
    /// must span, so that the cloud has that much choice when it launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i32>,
}

/// The effect of a taint.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

/// A node taint, as in `corev1.Taint`, with the API server's patterns.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// The taint key, a qualified name such as `example.com/dedicated`.
    #[schemars(length(min = 1), pattern(QUALIFIED_NAME_PATTERN))]
    pub key: String,
    /// The taint value; empty or a label value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(LABEL_VALUE_PATTERN))]
    pub value: Option<String>,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: TaintEffect,
    /// When a NoExecute taint was added; set by the system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
}

fn default_node_class_group() -> String {
    NODE_CLASS_GROUP.to_string()
}

fn default_node_class_kind() -> String {
    NODE_CLASS_KIND.to_string()
}

/// Which AKSNodeClass a NodePool or NodeClaim uses.
///
/// Older manifests (and the NAP documentation) write only `nodeClassRef: {name: default}`; `group` and
/// `kind` then default to `karpenter.azure.com` / `AKSNodeClass`, which the API server fills in.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.group == 'karpenter.azure.com' && self.kind == 'AKSNodeClass'",
     "message": "nodeClassRef must reference group karpenter.azure.com, kind AKSNodeClass (or leave both out)"}
]))]
pub struct NodeClassReference {
    /// The API group of the node class; defaults to karpenter.azure.com.
    #[serde(default = "default_node_class_group")]
    pub group: String,
    /// The kind of the node class; defaults to AKSNodeClass.
    #[serde(default = "default_node_class_kind")]
    pub kind: String,
    /// The name of the AKSNodeClass.
    #[schemars(length(min = 1))]
    pub name: String,
}

impl NodeClassReference {
    pub fn named(name: &str) -> Self {
        Self { group: default_node_class_group(), kind: default_node_class_kind(), name: name.into() }
    }
}

/// A resource quantity as the API server stores it: `cpu: 200` and `cpu: "200"` are both valid.
///
/// It is kept as text; parsing into base units is done by [`crate::model::resources`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Quantity(pub String);

impl Quantity {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Quantity {
    fn from(s: &str) -> Self {
        Quantity(s.to_string())
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Int(i64),
            Float(f64),
        }
        Ok(Quantity(match Raw::deserialize(d)? {
            Raw::Text(s) => s,
            Raw::Int(i) => i.to_string(),
            Raw::Float(f) => f.to_string(),
        }))
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // No `type`: with x-kubernetes-int-or-string the API server accepts both an integer and a
        // string, and applies the pattern to strings only.
        Schema::try_from(json!({
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true
        }))
        .expect("static schema is an object")
    }
}

/// A list of resources by name (`cpu`, `memory`, `nvidia.com/gpu`, `nodes`, ...).
pub type ResourceList = BTreeMap<String, Quantity>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantity_accepts_numbers_and_strings() {
        let list: ResourceList =
            serde_json::from_str(r#"{"cpu": 200, "memory": "400Gi", "x": 1.5}"#).unwrap();
        assert_eq!(list["cpu"].as_str(), "200");
        assert_eq!(list["memory"].as_str(), "400Gi");
        assert_eq!(list["x"].as_str(), "1.5");
    }

    #[test]
    fn short_node_class_ref_defaults_group_and_kind() {
        let r: NodeClassReference = serde_json::from_str(r#"{"name": "default"}"#).unwrap();
        assert_eq!(r, NodeClassReference::named("default"));
    }
}
