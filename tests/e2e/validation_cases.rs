//! The table of manifests the API server must refuse (with the message it must give) or accept.
//!
//! Each case is a small valid object with one change. Every refused case has an accepted neighbour
//! nearby (the same field at a valid value), so a rule that refuses everything fails the suite as surely
//! as a rule that refuses nothing. The messages are the ones in `crates/core/src/apis/` (CEL rules) or the API
//! server's own wording for OpenAPI patterns, enums and bounds.

use serde_json::{json, Value};

/// What the API server must do with a manifest.
pub enum Expect {
    /// Refused, with this text somewhere in the message.
    Refused(&'static str),
    Accepted,
}

pub struct Case {
    pub name: String,
    pub object: Value,
    pub expect: Expect,
}

fn refused(name: impl Into<String>, object: Value, message: &'static str) -> Case {
    Case { name: name.into(), object, expect: Expect::Refused(message) }
}

fn accepted(name: impl Into<String>, object: Value) -> Case {
    Case { name: name.into(), object, expect: Expect::Accepted }
}

/// Deep-merges `patch` into `base` (objects merge, everything else replaces), as a JSON merge patch does.
pub fn merged(mut base: Value, patch: Value) -> Value {
    fn merge(into: &mut Value, patch: Value) {
        match (into, patch) {
            (Value::Object(into), Value::Object(patch)) => {
                for (key, value) in patch {
                    merge(into.entry(key).or_insert(Value::Null), value);
                }
            }
            (into, patch) => *into = patch,
        }
    }
    merge(&mut base, patch);
    base
}

/// A valid NodePool with `spec` merged in.
pub fn pool(spec: Value) -> Value {
    let base = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "e2e-validation"},
        "spec": {"template": {"spec": {"nodeClassRef": {"name": "e2e-no-such-class"}}}}
    });
    merged(base, json!({"spec": spec}))
}

fn pool_requirement(requirement: Value) -> Value {
    pool(json!({"template": {"spec": {"requirements": [requirement]}}}))
}

fn pool_label(key: &str) -> Value {
    pool(json!({"template": {"metadata": {"labels": {key: "x"}}}}))
}

fn pool_budget(budget: Value) -> Value {
    pool(json!({"disruption": {"budgets": [budget]}}))
}

/// A valid AKSNodeClass with `spec` merged in.
pub fn class(spec: Value) -> Value {
    let base = json!({
        "apiVersion": "karpenter.azure.com/v1beta1", "kind": "AKSNodeClass",
        "metadata": {"name": "e2e-validation"}, "spec": {}
    });
    merged(base, json!({"spec": spec}))
}

/// A valid NodeClaim with `spec` merged in.
pub fn claim(name: &str, spec: Value) -> Value {
    let base = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name},
        "spec": {
            "nodeClassRef": {"name": "e2e-no-such-class"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                              "values": ["Standard_D2s_v5"]}]
        }
    });
    merged(base, json!({"spec": spec}))
}

fn dns_zone(zone: &str, destination: &str) -> Value {
    json!({
        "zone": zone, "queryLogging": "Error", "protocol": "PreferUDP", "forwardDestination": destination,
        "forwardPolicy": "Sequential", "maxConcurrent": 1000, "cacheDuration": "1h",
        "serveStaleDuration": "1h", "serveStale": "Verify"
    })
}

/// Label keys in restricted domains, with the message of the rule that refuses each in a NodePool.
const RESTRICTED_KEYS: &[(&str, &str)] = &[
    ("kubernetes.io/hostname", r#"label "kubernetes.io/hostname" is restricted"#),
    ("kubernetes.io/custom", r#"label domain "kubernetes.io" is restricted"#),
    ("k8s.io/custom", r#"label domain "k8s.io" is restricted"#),
    ("karpenter.sh/custom", r#"label domain "karpenter.sh" is restricted"#),
    ("karpenter.azure.com/custom", r#"label domain "karpenter.azure.com" is restricted"#),
    ("kubernetes.azure.com/custom", r#"label domain "kubernetes.azure.com" is restricted"#),
    ("karpenter.sh/nodepool", r#"label "karpenter.sh/nodepool" is restricted"#),
];

/// Keys users may set, one per restricted domain and one of their own.
const ALLOWED_KEYS: &[&str] = &[
    "topology.kubernetes.io/zone",
    "node.kubernetes.io/pool-role",
    "kops.k8s.io/instancegroup",
    "karpenter.sh/capacity-type",
    "karpenter.azure.com/sku-family",
    "kubernetes.azure.com/mode",
    "example.com/team",
];

/// Restricted and allowed label keys, both in requirements and in template labels.
pub fn label_domain_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (key, message) in RESTRICTED_KEYS {
        let requirement = json!({"key": key, "operator": "In", "values": ["x"]});
        cases.push(refused(format!("requirement key {key}"), pool_requirement(requirement), message));
        cases.push(refused(format!("template label {key}"), pool_label(key), message));
    }
    for key in ALLOWED_KEYS {
        let requirement = json!({"key": key, "operator": "In", "values": ["x"]});
        cases.push(accepted(format!("requirement key {key}"), pool_requirement(requirement)));
        cases.push(accepted(format!("template label {key}"), pool_label(key)));
    }
    // A NodeClaim carries its pool's name; only a NodePool may not set it.
    let nodepool_req = json!([{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["general"]}]);
    cases.push(accepted(
        "NodeClaim requirement karpenter.sh/nodepool",
        claim("e2e-validation", json!({"requirements": nodepool_req})),
    ));
    let custom_req = json!([{"key": "kubernetes.io/custom", "operator": "In", "values": ["x"]}]);
    cases.push(refused(
        "NodeClaim requirement kubernetes.io/custom",
        claim("e2e-validation", json!({"requirements": custom_req})),
        r#"label domain "kubernetes.io" is restricted"#,
    ));
    cases
}

const CPU_KEY: &str = "karpenter.azure.com/sku-cpu";
const SIZE_KEY: &str = "node.kubernetes.io/instance-type";

/// NodePool fields other than label keys.
pub fn nodepool_cases() -> Vec<Case> {
    let req = |op: &str, values: Value| json!({"key": CPU_KEY, "operator": op, "values": values});
    let sizes = json!(["Standard_D2s_v5", "Standard_D4s_v5"]);
    let instance_types =
        |min: i64| json!({"key": SIZE_KEY, "operator": "In", "values": sizes, "minValues": min});
    vec![
        refused(
            "In without values",
            pool_requirement(json!({"key": "example.com/a", "operator": "In"})),
            "operator 'In' must list at least one value",
        ),
        accepted("NotIn with a value", pool_requirement(req("NotIn", json!(["2"])))),
        refused(
            "Gt with a non-integer",
            pool_requirement(req("Gt", json!(["abc"]))),
            "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        ),
        refused(
            "Gte with a non-integer",
            pool_requirement(req("Gte", json!(["1.5"]))),
            "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        ),
        refused(
            "Lt with two values",
            pool_requirement(req("Lt", json!(["1", "2"]))),
            "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        ),
        accepted("Gt with an integer", pool_requirement(req("Gt", json!(["8"])))),
        accepted("Gte with an integer", pool_requirement(req("Gte", json!(["8"])))),
        accepted("Lte with an integer", pool_requirement(req("Lte", json!(["64"])))),
        refused(
            "a static pool with a cpu limit",
            pool(json!({"replicas": 2, "limits": {"cpu": "100"}})),
            "only 'limits.nodes' is supported on static NodePools",
        ),
        refused(
            "a static pool with a node and a cpu limit",
            pool(json!({"replicas": 2, "limits": {"nodes": "5", "cpu": "100"}})),
            "only 'limits.nodes' is supported on static NodePools",
        ),
        accepted("a static pool with a node limit", pool(json!({"replicas": 2, "limits": {"nodes": "5"}}))),
        refused(
            "a static pool with a weight",
            pool(json!({"replicas": 2, "weight": 10})),
            "'weight' is not supported on static NodePools",
        ),
        refused(
            "negative replicas",
            pool(json!({"replicas": -1})),
            "spec.replicas in body should be greater than or equal to 0",
        ),
        accepted("zero replicas", pool(json!({"replicas": 0}))),
        refused(
            "Exists with values",
            pool_requirement(req("Exists", json!(["2"]))),
            "operator 'Exists' or 'DoesNotExist' must not list 'values'",
        ),
        accepted(
            "DoesNotExist without values",
            pool_requirement(json!({"key": "example.com/a", "operator": "DoesNotExist"})),
        ),
        refused(
            "minValues above the values",
            pool_requirement(instance_types(3)),
            "'minValues' must not be larger than the number of 'values'",
        ),
        accepted("minValues equal to the values", pool_requirement(instance_types(2))),
        refused(
            "minValues 0",
            pool_requirement(instance_types(0)),
            "minValues in body should be greater than or equal to 1",
        ),
        refused(
            "minValues 51",
            pool_requirement(instance_types(51)),
            "minValues in body should be less than or equal to 50",
        ),
        refused("operator Foo", pool_requirement(req("Foo", json!(["2"]))), r#"Unsupported value: "Foo""#),
        refused("budget nodes 110%", pool_budget(json!({"nodes": "110%"})), "nodes in body should match"),
        refused("budget nodes abc", pool_budget(json!({"nodes": "abc"})), "nodes in body should match"),
        accepted("budget nodes 100%", pool_budget(json!({"nodes": "100%"}))),
        accepted("budget nodes 5", pool_budget(json!({"nodes": "5"}))),
        refused(
            "budget schedule without duration",
            pool_budget(json!({"nodes": "1", "schedule": "@daily"})),
            "'schedule' and 'duration' must be set together",
        ),
        accepted(
            "budget schedule with duration",
            pool_budget(json!({"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h",
                       "reasons": ["Drifted"]})),
        ),
        refused(
            "consolidateAfter 5d",
            pool(json!({"disruption": {"consolidateAfter": "5d"}})),
            "consolidateAfter in body should match",
        ),
        accepted(
            "consolidateAfter Never",
            pool(json!({"disruption": {"consolidateAfter": "Never", "consolidationPolicy": "WhenEmpty"}})),
        ),
        refused(
            "expireAfter forever",
            pool(json!({"template": {"spec": {"expireAfter": "forever"}}})),
            "expireAfter in body should match",
        ),
        accepted("expireAfter Never", pool(json!({"template": {"spec": {"expireAfter": "Never"}}}))),
        refused(
            "weight 0",
            pool(json!({"weight": 0})),
            "weight in body should be greater than or equal to 1",
        ),
        refused(
            "weight 101",
            pool(json!({"weight": 101})),
            "weight in body should be less than or equal to 100",
        ),
        accepted("weight 100", pool(json!({"weight": 100}))),
        refused(
            "nodeClassRef kind Other",
            pool(json!({"template": {"spec": {"nodeClassRef": {"kind": "Other"}}}})),
            "nodeClassRef must reference group karpenter.azure.com, kind AKSNodeClass",
        ),
        accepted(
            "nodeClassRef spelled out",
            pool(json!({"template": {"spec": {"nodeClassRef": {"group": "karpenter.azure.com",
                                                              "kind": "AKSNodeClass"}}}})),
        ),
    ]
}

/// AKSNodeClass fields.
pub fn aksnodeclass_cases() -> Vec<Case> {
    let sysctls = |s: Value| class(json!({"linuxOSConfig": {"sysctls": s}}));
    let trusted = json!({"trustedLaunch": {"vtpm": true}});
    vec![
        refused(
            "osDiskSizeGB 20",
            class(json!({"osDiskSizeGB": 20})),
            "osDiskSizeGB in body should be greater than or equal to 30",
        ),
        refused(
            "osDiskSizeGB 4096",
            class(json!({"osDiskSizeGB": 4096})),
            "osDiskSizeGB in body should be less than or equal to 2048",
        ),
        accepted("osDiskSizeGB 30", class(json!({"osDiskSizeGB": 30}))),
        refused(
            "imageFamily Windows",
            class(json!({"imageFamily": "Windows"})),
            r#"Unsupported value: "Windows""#,
        ),
        accepted("imageFamily AzureLinux", class(json!({"imageFamily": "AzureLinux"}))),
        refused(
            "maxPods 5",
            class(json!({"maxPods": 5})),
            "maxPods in body should be greater than or equal to 10",
        ),
        refused(
            "maxPods 300",
            class(json!({"maxPods": 300})),
            "maxPods in body should be less than or equal to 250",
        ),
        accepted("maxPods 250", class(json!({"maxPods": 250}))),
        refused(
            "imageGC high == low",
            class(json!({"kubelet": {"imageGCHighThresholdPercent": 80, "imageGCLowThresholdPercent": 80}})),
            "imageGCHighThresholdPercent must be greater than kubelet.imageGCLowThresholdPercent",
        ),
        accepted(
            "imageGC high > low",
            class(json!({"kubelet": {"imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80}})),
        ),
        refused("tags key with <", class(json!({"tags": {"a<b": "x"}})), "tags keys must not contain '<'"),
        accepted("tags with / and spaces", class(json!({"tags": {"team/area": "a b"}}))),
        refused(
            "sysctl vmSwappiness 101",
            sysctls(json!({"vmSwappiness": 101})),
            "vmSwappiness in body should be less than or equal to 100",
        ),
        refused(
            "rmem default > max",
            sysctls(json!({"netCoreRmemDefault": 300000, "netCoreRmemMax": 250000})),
            "sysctls.netCoreRmemDefault must not be larger than sysctls.netCoreRmemMax",
        ),
        accepted(
            "rmem default == max",
            sysctls(json!({"netCoreRmemDefault": 250000, "netCoreRmemMax": 250000})),
        ),
        refused(
            "ip_local_port_range 1000 70000",
            sysctls(json!({"netIPv4IPLocalPortRange": "1000 70000"})),
            "sysctls.netIPv4IPLocalPortRange must be \"first last\"",
        ),
        accepted(
            "ip_local_port_range 32768 60999",
            sysctls(json!({"netIPv4IPLocalPortRange": "32768 60999"})),
        ),
        refused(
            "FIPS with Ubuntu2404",
            class(json!({"fipsMode": "FIPS", "imageFamily": "Ubuntu2404"})),
            "fipsMode FIPS is not supported with imageFamily Ubuntu2404",
        ),
        refused(
            "FIPS with Ubuntu2204 without trusted launch",
            class(json!({"fipsMode": "FIPS", "imageFamily": "Ubuntu2204"})),
            "fipsMode FIPS with imageFamily Ubuntu2204 needs trusted launch",
        ),
        accepted(
            "FIPS with Ubuntu2204 and vTPM",
            class(json!({"fipsMode": "FIPS", "imageFamily": "Ubuntu2204", "security": trusted})),
        ),
        accepted("FIPS with AzureLinux", class(json!({"fipsMode": "FIPS", "imageFamily": "AzureLinux"}))),
        refused(
            "failSwapOn with swapFileSize",
            class(json!({"kubelet": {"failSwapOn": true}, "linuxOSConfig": {"swapFileSize": "2Gi"}})),
            "kubelet.failSwapOn must be false when linuxOSConfig.swapFileSize is set",
        ),
        accepted(
            "swapFileSize with failSwapOn false",
            class(json!({"kubelet": {"failSwapOn": false}, "linuxOSConfig": {"swapFileSize": "2Gi"}})),
        ),
        refused(
            "vnetDNSOverrides without cluster.local",
            class(json!({"localDNS": {"mode": "Preferred", "vnetDNSOverrides": [dns_zone(".", "VnetDNS")]}})),
            "vnetDNSOverrides must contain the zones '.' and 'cluster.local'",
        ),
        accepted(
            "vnetDNSOverrides with both zones",
            class(json!({"localDNS": {"mode": "Preferred", "vnetDNSOverrides": [
                    dns_zone(".", "VnetDNS"), dns_zone("cluster.local", "ClusterCoreDNS")]}})),
        ),
    ]
}

/// A NodeOverlay named after its case, with `spec` merged over a requirement on the D family.
pub fn overlay(name: &str, spec: Value) -> Value {
    let base = json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": {"requirements": [
            {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D"]}
        ]},
    });
    merged(base, json!({"spec": spec}))
}

/// NodeOverlay rules with upstream core's messages (`pkg/apis/crds/karpenter.sh_nodeoverlays.yaml`).
pub fn nodeoverlay_cases() -> Vec<Case> {
    let requirement = |r: Value| overlay("req", json!({"requirements": [r]}));
    vec![
        refused(
            "price and priceAdjustment",
            overlay("both", json!({"price": "0.5", "priceAdjustment": "-10%"})),
            "cannot set both 'price' and 'priceAdjustment'",
        ),
        accepted("price only", overlay("price", json!({"price": "0.5"}))),
        accepted("priceAdjustment -30%", overlay("minus30", json!({"priceAdjustment": "-30%"}))),
        accepted("priceAdjustment +0.5", overlay("plushalf", json!({"priceAdjustment": "+0.5"}))),
        accepted("priceAdjustment -100%", overlay("minus100", json!({"priceAdjustment": "-100%"}))),
        refused(
            "priceAdjustment without a sign",
            overlay("nosign", json!({"priceAdjustment": "30%"})),
            "spec.priceAdjustment in body should match",
        ),
        refused(
            "priceAdjustment -150%",
            overlay("minus150", json!({"priceAdjustment": "-150%"})),
            "spec.priceAdjustment in body should match",
        ),
        refused(
            "negative price",
            overlay("negprice", json!({"price": "-1"})),
            "spec.price in body should match",
        ),
        refused(
            "capacity cpu",
            overlay("cpu", json!({"capacity": {"cpu": "2"}})),
            "invalid resource restricted",
        ),
        accepted(
            "capacity extended resource",
            overlay("gpu", json!({"capacity": {"example.com/widget": 2}})),
        ),
        refused(
            "weight 0",
            overlay("w0", json!({"weight": 0})),
            "spec.weight in body should be greater than or equal to 1",
        ),
        accepted("weight 10000", overlay("w10000", json!({"weight": 10000}))),
        refused(
            "In without values",
            requirement(json!({"key": "karpenter.azure.com/sku-family", "operator": "In"})),
            "requirements with operator 'In' must have a value defined",
        ),
        refused(
            "NotIn without values",
            requirement(json!({"key": "karpenter.azure.com/sku-family", "operator": "NotIn"})),
            "requirements with operator 'NotIn' must have a value defined",
        ),
        refused(
            "Gte with a word",
            requirement(json!({"key": "karpenter.azure.com/sku-cpu", "operator": "Gte", "values": ["many"]})),
            "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
        ),
        accepted(
            "Lte 8",
            requirement(json!({"key": "karpenter.azure.com/sku-cpu", "operator": "Lte", "values": ["8"]})),
        ),
        refused(
            "karpenter.sh key",
            requirement(json!({"key": "karpenter.sh/unknown", "operator": "Exists"})),
            "label domain \"karpenter.sh\" is restricted",
        ),
        accepted(
            "karpenter.sh/nodepool key",
            requirement(json!({"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]})),
        ),
        refused(
            "hostname key",
            requirement(json!({"key": "kubernetes.io/hostname", "operator": "Exists"})),
            "label \"kubernetes.io/hostname\" is restricted",
        ),
    ]
}
