use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::catalog::{CapacityOptions, PriceTable, UnavailableOfferings};
use crate::model::requirements::Requirements;
use crate::model::CapacityType;

fn pool() -> NodePool {
    serde_yaml::from_str(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general, uid: 1234}
spec:
  template:
    metadata:
      labels: {team: blue}
    spec:
      nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      taints: [{key: dedicated, value: blue, effect: NoSchedule}]
      startupTaints: [{key: example.com/agent, effect: NoSchedule}]
      expireAfter: 24h
      terminationGracePeriod: 1h
"#,
    )
    .unwrap()
}

fn class() -> AKSNodeClass {
    serde_yaml::from_str(
        r#"
apiVersion: karpenter.azure.com/v1beta1
kind: AKSNodeClass
metadata: {name: default}
spec: {osDiskSizeGB: 64, tags: {cost: "1"}}
"#,
    )
    .unwrap()
}

fn requirements(list: &str) -> Requirements {
    let api: Vec<crate::apis::NodeSelectorRequirementWithMinValues> = serde_yaml::from_str(list).unwrap();
    crate::apis::requirements::from_api(&api).unwrap()
}

fn planned() -> NewNodeClaim {
    NewNodeClaim {
        name: "general-0".into(),
        nodepool: "general".into(),
        instance_type: "Standard_D2s_v5".into(),
        instance_type_options: vec!["Standard_D2s_v5".into(), "Standard_D4s_v5".into()],
        zone: "eastus-1".into(),
        capacity_type: CapacityType::OnDemand,
        price_per_hour: 0.1,
        requirements: requirements(
            r#"
- {key: karpenter.sh/nodepool, operator: In, values: [general]}
- {key: team, operator: In, values: [blue]}
- {key: kubernetes.io/arch, operator: In, values: [amd64]}
- {key: node.kubernetes.io/instance-type, operator: In, values: [Standard_D4s_v5, Standard_D2s_v5]}
- {key: topology.kubernetes.io/zone, operator: In, values: [eastus-1, eastus-2]}
- {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
"#,
        ),
        labels: BTreeMap::from([("node.kubernetes.io/instance-type".into(), "Standard_D2s_v5".into())]),
        taints: vec![],
        startup_taints: vec![],
        allocatable: Resources::new(),
        requests: Resources::new().with("cpu", 1500).with("memory", 1 << 30).with("pods", 3),
        daemon_overhead: Resources::new(),
        pods: vec!["default/a".into()],
    }
}

#[test]
fn builds_the_nodeclaim_from_a_planned_claim() {
    let claim = build(&planned(), &pool(), Some(&class()));
    let meta = &claim.metadata;
    assert_eq!(meta.generate_name.as_deref(), Some("general-"));
    let labels = meta.labels.clone().unwrap();
    assert_eq!(labels.get("karpenter.sh/nodepool").map(String::as_str), Some("general"));
    assert_eq!(labels.get("team").map(String::as_str), Some("blue"));
    assert_eq!(labels.get("karpenter.sh/capacity-type").map(String::as_str), Some("on-demand"));
    // Multi-valued requirements are not labels: the launch decides them.
    assert!(!labels.contains_key("node.kubernetes.io/instance-type"));
    assert!(!labels.contains_key("topology.kubernetes.io/zone"));
    let owner = &meta.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("NodePool", "general", "1234")
    );
    assert_eq!(owner.api_version, "karpenter.sh/v1");
    let spec = &claim.spec;
    assert_eq!(spec.node_class_ref.name, "default");
    assert_eq!(spec.taints[0].key, "dedicated");
    assert_eq!(spec.startup_taints[0].key, "example.com/agent");
    assert_eq!(spec.expire_after, "24h");
    assert_eq!(spec.termination_grace_period.as_deref(), Some("1h"));
    assert_eq!(spec.resources.requests.get("cpu").map(|q| q.0.as_str()), Some("1500m"));
    assert_eq!(spec.resources.requests.get("memory").map(|q| q.0.as_str()), Some("1Gi"));
    let types: Vec<_> = spec
        .requirements
        .iter()
        .find(|r| r.key == "node.kubernetes.io/instance-type")
        .unwrap()
        .values
        .clone();
    assert_eq!(types.len(), 2);
}

#[test]
fn the_nodeclaim_carries_the_hashes_drift_compares() {
    use crate::model::labels::{
        ANNOTATION_NODECLASS_HASH, ANNOTATION_NODECLASS_HASH_VERSION, ANNOTATION_NODEPOOL_HASH,
        ANNOTATION_NODEPOOL_HASH_VERSION,
    };
    let claim = build(&planned(), &pool(), Some(&class()));
    let annotations = claim.metadata.annotations.unwrap();
    assert_eq!(annotations[ANNOTATION_NODEPOOL_HASH], pool().hash().unwrap());
    assert_eq!(annotations[ANNOTATION_NODEPOOL_HASH_VERSION], crate::apis::nodepool::NODEPOOL_HASH_VERSION);
    assert_eq!(annotations[ANNOTATION_NODECLASS_HASH], class().hash().unwrap());
    assert_eq!(
        annotations[ANNOTATION_NODECLASS_HASH_VERSION],
        crate::apis::aksnodeclass::NODECLASS_HASH_VERSION
    );
    let without_class = build(&planned(), &pool(), None).metadata.annotations.unwrap();
    assert_eq!(without_class.len(), 2, "only the NodePool's hash when the class is missing");
}

fn catalog() -> Vec<InstanceType> {
    crate::catalog::instance_types(
        "eastus",
        &CapacityOptions::default(),
        &PriceTable::static_for_region("eastus"),
        &UnavailableOfferings::new(),
        Duration::ZERO,
    )
    .unwrap()
}

#[test]
fn launched_labels_never_override_the_claims() {
    let types = catalog();
    let t = types.iter().find(|t| t.name == "Standard_D2s_v5");
    let claim_labels = BTreeMap::from([("karpenter.sh/capacity-type".to_string(), "on-demand".to_string())]);
    let labels = launched_labels(&claim_labels, t, Some("eastus-2"), CapacityType::Spot);
    assert_eq!(labels.get("node.kubernetes.io/instance-type").map(String::as_str), Some("Standard_D2s_v5"));
    assert_eq!(labels.get("topology.kubernetes.io/zone").map(String::as_str), Some("eastus-2"));
    assert!(!labels.contains_key("karpenter.sh/capacity-type"));
    let regional = launched_labels(&BTreeMap::new(), t, None, CapacityType::OnDemand);
    assert!(!regional.contains_key("topology.kubernetes.io/zone"));
}

#[test]
fn a_claim_of_a_pool_with_min_values_says_whether_the_solver_relaxed_them() {
    use crate::model::labels::ANNOTATION_MIN_VALUES_RELAXED;
    let mut pool = pool();
    pool.spec.template.spec.requirements =
        serde_yaml::from_str("[{key: node.kubernetes.io/instance-type, operator: Exists, minValues: 2}]")
            .unwrap();
    let annotation = |planned: &NewNodeClaim| {
        build(planned, &pool, None).metadata.annotations.unwrap().get(ANNOTATION_MIN_VALUES_RELAXED).cloned()
    };
    let with_min = |min: u32| {
        let mut planned = planned();
        let mut requirement = planned.requirements.get(LABEL_INSTANCE_TYPE).unwrap().clone();
        requirement = requirement.with_min_values(Some(min));
        let mut requirements = Requirements::new();
        for r in planned.requirements.iter().filter(|r| r.key() != LABEL_INSTANCE_TYPE) {
            requirements.add(r.clone());
        }
        requirements.add(requirement);
        planned.requirements = requirements;
        planned
    };
    assert_eq!(annotation(&with_min(2)).as_deref(), Some("false"));
    assert_eq!(annotation(&with_min(1)).as_deref(), Some("true"), "BestEffort lowered 2 to 1");
    assert_eq!(annotation(&planned()).as_deref(), Some("true"), "dropped altogether");
    // A pool without minValues: no annotation, as before.
    let plain = build(&planned(), &self::pool(), None);
    assert!(!plain.metadata.annotations.unwrap().contains_key(ANNOTATION_MIN_VALUES_RELAXED));
}
