//! The checked-in CRDs equal what `karpenter-azure crdgen` produces, and the documented examples
//! (the seed article's AKSNodeClass and NodePool) deserialize into the API types with their defaults.

use std::path::Path;

use karpenter_azure::apis::aksnodeclass::ImageFamily;
use karpenter_azure::apis::crdgen::{render_all, OUTPUT_DIRS};
use karpenter_azure::apis::nodepool::ConsolidationPolicy;
use karpenter_azure::apis::{AKSNodeClass, NodeClaim, NodePool};

fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[test]
fn checked_in_crds_are_fresh() {
    for dir in OUTPUT_DIRS {
        for (name, yaml) in render_all() {
            let path = format!("{dir}/{name}");
            assert!(
                repo_file(&path) == yaml,
                "{path} is stale: run `cargo run -- crdgen` (or `make crds`) and commit the result"
            );
        }
    }
}

#[test]
fn seed_aksnodeclass_example_deserializes() {
    let class: AKSNodeClass = serde_yaml::from_str(&repo_file("examples/aksnodeclass-default.yaml")).unwrap();
    assert_eq!(class.metadata.name.as_deref(), Some("default"));
    assert_eq!(class.spec.image_family, Some(ImageFamily::Ubuntu));
    assert_eq!(class.spec.os_disk_size_gb, Some(128));
    assert_eq!(class.spec.tags.get("team").map(String::as_str), Some("platform"));
}

#[test]
fn seed_nodepool_example_deserializes_with_defaults() {
    let pool: NodePool = serde_yaml::from_str(&repo_file("examples/nodepool-general.yaml")).unwrap();
    let spec = &pool.spec.template.spec;
    assert_eq!(spec.node_class_ref.group, "karpenter.azure.com");
    assert_eq!(spec.node_class_ref.kind, "AKSNodeClass");
    assert_eq!(spec.node_class_ref.name, "default");
    assert_eq!(spec.expire_after, "720h");
    assert_eq!(pool.spec.disruption.consolidation_policy, ConsolidationPolicy::WhenEmptyOrUnderutilized);
    assert_eq!(pool.spec.disruption.budgets[0].nodes, "10%");
    let limits = pool.spec.limits.as_ref().unwrap();
    assert_eq!(limits["cpu"].as_str(), "200");
    assert_eq!(limits["memory"].as_str(), "400Gi");
    let reqs = karpenter_azure::apis::requirements::from_api(&spec.requirements).unwrap();
    assert!(reqs.get("karpenter.sh/capacity-type").unwrap().admits(Some("spot")));
    assert!(!reqs.get("kubernetes.io/arch").unwrap().admits(Some("arm64")));
}

#[test]
fn integer_limits_are_accepted() {
    let yaml = repo_file("examples/nodepool-general.yaml").replace("cpu: \"200\"", "cpu: 200");
    let pool: NodePool = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(pool.spec.limits.unwrap()["cpu"].as_str(), "200");
}

#[test]
fn nodeclaim_round_trips() {
    let yaml = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: general-abc12, labels: {karpenter.sh/nodepool: general}}
spec:
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [Standard_D2s_v5, Standard_D4s_v5], minValues: 2}
  resources: {requests: {cpu: 1500m, memory: 3Gi, pods: 3}}
  nodeClassRef: {name: default}
status:
  providerID: azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/aks-general-abc12
  conditions:
    - {type: Launched, status: "True", reason: Launched, lastTransitionTime: "2026-01-01T00:00:00Z"}
"#;
    let claim: NodeClaim = serde_yaml::from_str(yaml).unwrap();
    let again: NodeClaim = serde_json::from_value(serde_json::to_value(&claim).unwrap()).unwrap();
    assert_eq!(claim, again);
    assert_eq!(claim.spec.requirements[0].min_values, Some(2));
    assert!(claim.status.unwrap().provider_id.unwrap().starts_with("azure:///"));
}
