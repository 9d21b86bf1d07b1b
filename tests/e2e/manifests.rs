//! The manifests the controller tests share: an AKSNodeClass, an on-demand amd64 NodePool that never
//! consolidates (so the NodeClaims a test inspects stay put), and Deployments or Pods that only that
//! NodePool can take.

use serde_json::{json, Value};

pub const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";
const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// An AKSNodeClass with the default image family.
pub fn node_class(name: &str) -> Value {
    json!({"apiVersion": "karpenter.azure.com/v1beta1", "kind": "AKSNodeClass",
           "metadata": {"name": name}, "spec": {"imageFamily": "Ubuntu"}})
}

/// An on-demand amd64 NodePool on the class of the same name, optionally limited to `sku_family`;
/// consolidation is off.
pub fn node_pool(name: &str, sku_family: Option<&str>) -> Value {
    let mut requirements = vec![
        json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}),
        json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}),
    ];
    if let Some(family) = sku_family {
        requirements
            .push(json!({"key": "karpenter.azure.com/sku-family", "operator": "In", "values": [family]}));
    }
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
    "spec": {
        "template": {"spec": {
            "requirements": requirements,
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": name}
        }},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "Never"}
    }})
}

/// The pod spec of a pause container with these requests, pinned to `pool` by its nodepool label.
/// No toleration for `karpenter.sh/unregistered`: the controller removes that taint at registration.
pub fn pod_spec(pool: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "nodeSelector": {LABEL_NODEPOOL: pool},
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "pause", "image": PAUSE_IMAGE,
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
    })
}

/// A Deployment `app` in `namespace` of pods labelled `app=<app>` for `pool`.
pub fn deployment(namespace: &str, app: &str, pool: &str, replicas: usize, cpu: &str, memory: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": app, "namespace": namespace},
    "spec": {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": app}},
        "template": {"metadata": {"labels": {"app": app}}, "spec": pod_spec(pool, cpu, memory)}
    }})
}

/// One test's objects, all named `name`: namespace, AKSNodeClass, NodePool; the Deployment is `web`.
pub struct Scenario {
    pub name: &'static str,
}

impl Scenario {
    pub fn node_class(&self) -> Value {
        node_class(self.name)
    }

    /// amd64, on-demand, D family. Consolidation is off so the claims the test inspects stay put.
    pub fn node_pool(&self) -> Value {
        node_pool(self.name, Some("D"))
    }

    /// Pods of 500m CPU / 1Gi that only this scenario's NodePool can take.
    pub fn deployment(&self, replicas: u32) -> Value {
        deployment(self.name, SCENARIO_APP, self.name, replicas as usize, "500m", "1Gi")
    }
}

/// The app label and name of a [`Scenario`]'s Deployment.
pub const SCENARIO_APP: &str = "web";
