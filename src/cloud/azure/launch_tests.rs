//! The launch request from a NodeClaim and its AKSNodeClass: sizes, offerings and their order, images,
//! the class's settings, and the class problems that stop a launch.

use std::collections::BTreeMap;
use std::time::Duration;

use super::request as launch_request;
use super::*;
use crate::apis::aksnodeclass::AKSNodeClassStatus;
use crate::apis::conditions::{Condition, ConditionStatus};
use crate::catalog::{CapacityOptions, PriceTable, UnavailableOfferings};
use crate::cloud::azure::imagefamily::{distro_definitions, node_image, Distro};
use crate::model::CapacityType;

fn class() -> AKSNodeClass {
    let mut class: AKSNodeClass = serde_yaml::from_str(
        r#"
apiVersion: karpenter.azure.com/v1beta1
kind: AKSNodeClass
metadata: {name: default}
spec: {osDiskSizeGB: 64, tags: {cost: "1"}}
"#,
    )
    .unwrap();
    class.status = Some(AKSNodeClassStatus {
        images: distro_definitions(Distro::Ubuntu2204).iter().map(|d| node_image(d, "202506.02.0")).collect(),
        conditions: vec![ready(ConditionStatus::True, "Ready", "")],
        ..Default::default()
    });
    class
}

fn ready(status: ConditionStatus, reason: &str, message: &str) -> Condition {
    Condition {
        type_: "Ready".into(),
        status,
        observed_generation: None,
        last_transition_time: serde_json::from_value(serde_json::json!("2025-06-01T00:00:00Z")).unwrap(),
        reason: reason.into(),
        message: message.into(),
    }
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

/// A NodeClaim as provisioning builds it for a general-purpose pool (labels from its single-valued
/// requirements and the template, the template's taints), named by the API server.
fn build_named() -> NodeClaim {
    serde_yaml::from_str(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: general-abcde
  labels: {karpenter.sh/nodepool: general, team: blue, kubernetes.io/arch: amd64, karpenter.sh/capacity-type: on-demand}
spec:
  nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default}
  requirements:
    - {key: karpenter.sh/nodepool, operator: In, values: [general]}
    - {key: team, operator: In, values: [blue]}
    - {key: kubernetes.io/arch, operator: In, values: [amd64]}
    - {key: node.kubernetes.io/instance-type, operator: In, values: [Standard_D2s_v5, Standard_D4s_v5]}
    - {key: topology.kubernetes.io/zone, operator: In, values: [eastus-1, eastus-2]}
    - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  taints: [{key: dedicated, value: blue, effect: NoSchedule}]
  startupTaints: [{key: example.com/agent, effect: NoSchedule}]
  resources: {requests: {cpu: 1500m, memory: 1Gi, pods: "3"}}
"#,
    )
    .unwrap()
}

#[test]
fn builds_the_launch_request_from_a_nodeclaim() {
    let mut claim = build_named();
    let types = catalog();
    let request = launch_request(&claim, Some(&class()), &types).unwrap();
    assert_eq!(request.claim_name, "general-abcde");
    assert_eq!(request.nodepool, "general");
    let names: Vec<&str> = request.options.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["Standard_D2s_v5", "Standard_D4s_v5"], "cheapest best offering first");
    // Price decides the order, as upstream's allocation, whatever order the claim lists the values in.
    for r in claim.spec.requirements.iter_mut().filter(|r| r.key == "node.kubernetes.io/instance-type") {
        r.values.reverse();
    }
    let request = launch_request(&claim, Some(&class()), &types).unwrap();
    let names: Vec<&str> = request.options.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["Standard_D2s_v5", "Standard_D4s_v5"]);
    let d2 = types.iter().find(|t| t.name == "Standard_D2s_v5").unwrap();
    let catalog_price = d2.price(CapacityType::OnDemand).unwrap();
    assert!(request.options[0].offerings.iter().all(|o| o.price == catalog_price), "the catalog's price");
    let request = launch_request(&build_named(), Some(&class()), &types).unwrap();
    for option in &request.options {
        assert!(!option.offerings.is_empty());
        for o in &option.offerings {
            assert!(o.zone == "eastus-1" || o.zone == "eastus-2", "{}", o.zone);
            assert_eq!(o.capacity_type, CapacityType::OnDemand);
        }
    }
    for option in &request.options {
        assert!(option.image_id.ends_with("/images/2204gen2containerd/versions/202506.02.0"), "{option:?}");
    }
    assert_eq!(request.subnet_id, None, "the class has no subnet of its own");
    assert_eq!(request.os_disk_size_gb, 64);
    assert_eq!(request.tags.get("cost").map(String::as_str), Some("1"));
    assert_eq!(request.taints[0].key, "dedicated");
    assert_eq!(request.startup_taints[0].key, "example.com/agent");
    assert_eq!(request.kubelet.max_pods, 250, "Azure CNI overlay");
    assert!(request.kubelet.kube_reserved.contains_key("cpu"));
    assert_eq!(request.labels.get("team").map(String::as_str), Some("blue"));
    assert!(request.kubelet.config_flags.is_empty());
    assert_eq!(request.subnet_id, None, "the cluster's subnet");

    // The class's kubelet settings and subnet reach the launch.
    let mut custom = class();
    let subnet =
        "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/gpu";
    custom.spec.vnet_subnet_id = Some(subnet.into());
    custom.spec.kubelet =
        Some(serde_json::from_value(serde_json::json!({"cpuManagerPolicy": "static"})).unwrap());
    let request = launch_request(&claim, Some(&custom), &types).unwrap();
    assert_eq!(request.kubelet.config_flags, ["--cpu-manager-policy=static"]);
    assert_eq!(request.subnet_id.as_deref(), Some(subnet));
}

#[test]
fn a_launch_needs_a_ready_class_with_images() {
    let claim = build_named();
    let types = catalog();
    assert_eq!(
        launch_request(&claim, None, &types).unwrap_err(),
        LaunchRequestError::NodeClassMissing("default".into())
    );
    let mut unwritten = class();
    unwritten.status = None;
    let err = launch_request(&claim, Some(&unwritten), &types).unwrap_err();
    assert!(matches!(err, LaunchRequestError::NodeClassNotReady { .. }), "{err}");
    assert_eq!(err.category(), "NodeClassNotReady");
    let mut not_ready = class();
    not_ready.status.as_mut().unwrap().conditions =
        vec![ready(ConditionStatus::False, "UnhealthyDependents", "SubnetsReady=False")];
    let err = launch_request(&claim, Some(&not_ready), &types).unwrap_err();
    assert_eq!(err.to_string(), "AKSNodeClass default is not Ready: UnhealthyDependents: SubnetsReady=False");
    let mut no_images = class();
    no_images.status.as_mut().unwrap().images.clear();
    let err = launch_request(&claim, Some(&no_images), &types).unwrap_err();
    assert_eq!(err, LaunchRequestError::NoImage("default".into()));
    assert_eq!(err.category(), "NodeClassNotReady");
}

/// The built claim allowed to run on exactly `sizes`, of any architecture.
fn claim_for(sizes: &[&str]) -> NodeClaim {
    let mut claim = build_named();
    claim.spec.requirements.retain(|r| r.key != "kubernetes.io/arch");
    for r in claim.spec.requirements.iter_mut().filter(|r| r.key == "node.kubernetes.io/instance-type") {
        r.values = sizes.iter().map(|s| s.to_string()).collect();
    }
    claim
}

#[test]
fn each_size_launches_with_the_image_it_boots() {
    let claim = claim_for(&["Standard_D2ps_v5", "Standard_D2_v2", "Standard_D2s_v5"]);
    let mut class = class();
    class.spec.vnet_subnet_id = Some(
        "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/own".into(),
    );
    let request = launch_request(&claim, Some(&class), &catalog()).unwrap();
    let chosen: BTreeMap<&str, &str> = request
        .options
        .iter()
        .map(|o| (o.name.as_str(), o.image_id.split('/').nth(4).unwrap_or_default()))
        .collect();
    assert_eq!(
        chosen,
        BTreeMap::from([
            ("Standard_D2ps_v5", "2204gen2arm64containerd"),
            ("Standard_D2_v2", "2204containerd"),
            ("Standard_D2s_v5", "2204gen2containerd")
        ])
    );
    assert_eq!(request.subnet_id, class.spec.vnet_subnet_id, "the class's own subnet");
}

#[test]
fn sizes_no_image_boots_are_dropped_and_none_left_is_not_ready() {
    let mut gen2_amd64 = class();
    gen2_amd64.status.as_mut().unwrap().images.truncate(1);
    let claim = claim_for(&["Standard_D2ps_v5", "Standard_D2s_v5"]);
    let request = launch_request(&claim, Some(&gen2_amd64), &catalog()).unwrap();
    let names: Vec<&str> = request.options.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["Standard_D2s_v5"]);
    let arm_only = claim_for(&["Standard_D2ps_v5", "Standard_D2_v2"]);
    let err = launch_request(&arm_only, Some(&gen2_amd64), &catalog()).unwrap_err();
    assert_eq!(
        err,
        LaunchRequestError::NoCompatibleImage {
            class: "default".into(),
            sizes: "Standard_D2ps_v5, Standard_D2_v2".into()
        }
    );
    assert_eq!(err.category(), "NodeClassNotReady");
}
