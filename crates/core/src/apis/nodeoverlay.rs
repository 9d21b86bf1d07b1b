//! `NodeOverlay` (karpenter.sh/v1alpha1, cluster-scoped): changes the price of, or adds extended
//! resources to, the instance types whose labels meet its requirements, before any scheduling or
//! consolidation decision reads them. Field-for-field compatible with upstream core
//! (`pkg/apis/v1alpha1/nodeoverlay.go`), with its CRD's validation rules and messages
//! (`pkg/apis/crds/karpenter.sh_nodeoverlays.yaml`). How an overlay is applied is
//! [`crate::scheduling::overlay`]'s.

use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::apis::common::{Operator, ResourceList};
use crate::apis::conditions::Condition;
use crate::apis::validation::{add_rules, LABEL_VALUE_PATTERN, QUALIFIED_NAME_PATTERN};

/// An absolute price in USD per hour (upstream `Price` pattern).
pub const PRICE_PATTERN: &str = r"^\d+(\.\d+)?$";
/// A signed amount (`+0.5`, `-0.1`), an increase in percent (`+10%`) or a decrease of less than 100
/// percent or exactly 100 percent (`-30%`, `-100%`) (upstream `PriceAdjustment` pattern).
pub const PRICE_ADJUSTMENT_PATTERN: &str =
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$";

/// The resources an overlay's `capacity` may not name: upstream's `WellKnownResources`
/// (core `pkg/apis/v1/labels.go`), which the node's size decides.
pub const RESTRICTED_CAPACITY: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

/// The desired state of a NodeOverlay.
// Each `printcolumn(...)` is its own column; clippy mistakes the repeated keys for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    status = "NodeOverlayStatus",
    shortname = "overlays",
    category = "karpenter",
    derive = "PartialEq",
    doc = "NodeOverlay changes the price or adds extended resources to the instance types that meet its requirements",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Weight", type_ = "integer", json_path = ".spec.weight", priority = 1)
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.price) || !has(self.priceAdjustment)",
        "message": "cannot set both 'price' and 'priceAdjustment'"
    }
]))]
pub struct NodeOverlaySpec {
    /// Which instance types and offerings the overlay applies to: well-known labels (instance type,
    /// zone, capacity type, karpenter.sh/nodepool, ...) and the NodePool's template labels.
    #[schemars(length(max = 100), transform = overlay_requirements)]
    pub requirements: Vec<OverlayRequirement>,
    /// A change to the price of the matching offerings: a signed amount such as -0.5 or +1.2, or a
    /// percentage such as +10% or -15%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(PRICE_ADJUSTMENT_PATTERN))]
    pub price_adjustment: Option<String>,
    /// The price of the matching offerings, in USD per hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(PRICE_PATTERN))]
    pub price: Option<String>,
    /// Extended resources added to the matching instance types' capacity; cpu, memory,
    /// ephemeral-storage and pods cannot be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = capacity_rules)]
    pub capacity: Option<ResourceList>,
    /// Priority among overlays: a higher weight takes precedence; unset counts as 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// A node selector requirement without minValues (upstream v1alpha1 `NodeSelectorRequirement`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct OverlayRequirement {
    /// The label key the requirement applies to.
    #[schemars(length(max = 316), pattern(QUALIFIED_NAME_PATTERN), transform = overlay_key_rules)]
    pub key: String,
    /// In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte.
    pub operator: Operator,
    /// One or more values for In and NotIn, exactly one integer for Gt, Lt, Gte and Lte, none otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = 63), pattern(LABEL_VALUE_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub values: Vec<String>,
}

/// The observed state of a NodeOverlay.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct NodeOverlayStatus {
    /// ValidationSucceeded and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The list-level rules upstream's CRD puts on `requirements`, with its messages.
fn overlay_requirements(schema: &mut Schema) {
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("x-kubernetes-list-type".into(), json!("atomic"));
    }
    add_rules(
        schema,
        json!([
            {
                "rule": "self.all(x, x.operator == 'NotIn' ? (has(x.values) && x.values.size() != 0) : true)",
                "message": "requirements with operator 'NotIn' must have a value defined"
            },
            {
                "rule": "self.all(x, x.operator == 'In' ? (has(x.values) && x.values.size() != 0) : true)",
                "message": "requirements with operator 'In' must have a value defined"
            },
            {
                // Upstream's rule, `int(values[0]) >= 0`, admits exactly the non-negative integers.
                "rule": "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (has(x.values) && x.values.size() == 1 && x.values[0].matches('^[0-9]+$')) : true)",
                "message": "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value"
            }
        ]),
    );
}

/// The key rules of upstream's CRD: only two karpenter.sh keys, and never the hostname.
fn overlay_key_rules(schema: &mut Schema) {
    add_rules(
        schema,
        json!([
            {
                "rule": "self in [\"karpenter.sh/capacity-type\", \"karpenter.sh/nodepool\"] || !self.find(\"^([^/]+)\").endsWith(\"karpenter.sh\")",
                "message": "label domain \"karpenter.sh\" is restricted"
            },
            {
                "rule": "self != \"kubernetes.io/hostname\"",
                "message": "label \"kubernetes.io/hostname\" is restricted"
            }
        ]),
    );
}

fn capacity_rules(schema: &mut Schema) {
    let restricted: Vec<String> = RESTRICTED_CAPACITY.iter().map(|r| format!("'{r}'")).collect();
    add_rules(
        schema,
        json!([{
            "rule": format!("self.all(x, !(x in [{}]))", restricted.join(", ")),
            "message": "invalid resource restricted"
        }]),
    );
}

impl NodeOverlay {
    /// The overlay's name.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The weight, 0 when unset (upstream `OrderByWeight` reads a missing weight as 0).
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_core::CustomResourceExt;

    #[test]
    fn crd_carries_upstream_rules() {
        let crd = serde_json::to_string(&NodeOverlay::crd()).unwrap();
        for message in [
            "cannot set both 'price' and 'priceAdjustment'",
            "invalid resource restricted",
            "requirements with operator 'In' must have a value defined",
            "label domain \\\"karpenter.sh\\\" is restricted",
        ] {
            assert!(crd.contains(message), "{message}");
        }
    }

    #[test]
    fn reads_upstream_manifest() {
        let overlay: NodeOverlay = serde_yaml::from_str(
            "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: cheaper-d}\n\
             spec:\n  weight: 10\n  priceAdjustment: \"-30%\"\n  requirements:\n  - key: karpenter.azure.com/sku-family\n    operator: In\n    values: [D]\n  capacity:\n    example.com/widget: 2\n",
        )
        .unwrap();
        assert_eq!(overlay.weight(), 10);
        assert_eq!(overlay.spec.price_adjustment.as_deref(), Some("-30%"));
        assert_eq!(overlay.spec.capacity.unwrap()["example.com/widget"].as_str(), "2");
    }
}
