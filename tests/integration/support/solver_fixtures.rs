//! Builders shared by the solver tests: synthetic and real instance types, NodePools, pods with
//! constraints, and assertions that run the feasibility checker.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use karpenter_azure::apis::{Taint, TaintEffect};
use karpenter_azure::catalog::{instance_types, CapacityOptions, PriceTable, UnavailableOfferings};
use karpenter_azure::model::labels::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_OS,
    LABEL_SKU_GPU_COUNT, LABEL_ZONE,
};
use karpenter_azure::model::requirements::{Requirement, Requirements};
use karpenter_azure::model::resources::{Resources, CPU, MEMORY, NVIDIA_GPU, PODS};
use karpenter_azure::model::{CapacityType, InstanceType, Offering, Overhead};
use karpenter_azure::scheduling::feasibility;
use karpenter_azure::scheduling::input::{
    HostPort, PodAffinityTerm, Toleration, TolerationOperator, TopologySpread, WhenUnsatisfiable,
};
use karpenter_azure::scheduling::{ExistingNode, NewNodeClaim, NodePoolInput, Plan, Pod, SolveInput};

pub const MI: i64 = 1 << 20;
pub const GI: i64 = 1 << 30;
pub const NS: &str = "default";
pub const ZONES: [&str; 3] = ["z-1", "z-2", "z-3"];

/// A synthetic type with allocatable = capacity and the given offerings (zone, capacity type, price).
pub fn instance_type(
    name: &str,
    cpu_millis: i64,
    memory: i64,
    offerings: &[(&str, CapacityType, f64)],
) -> InstanceType {
    let capacity = Resources::new().with(CPU, cpu_millis).with(MEMORY, memory).with(PODS, 110);
    let labels =
        [(LABEL_INSTANCE_TYPE, name), (LABEL_ARCH, "amd64"), (LABEL_OS, "linux"), (LABEL_SKU_GPU_COUNT, "0")];
    let mut offerings: Vec<Offering> = offerings
        .iter()
        .map(|(zone, capacity_type, price)| Offering {
            zone: zone.to_string(),
            capacity_type: *capacity_type,
            price: *price,
            available: true,
        })
        .collect();
    offerings.sort_by(|a, b| a.price.total_cmp(&b.price).then(a.zone.cmp(&b.zone)));
    InstanceType {
        name: name.into(),
        vcpus: (cpu_millis / 1000) as u32,
        memory_mib: (memory / MI) as u64,
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        allocatable: capacity.clone(),
        capacity,
        overhead: Overhead::default(),
        offerings,
    }
}

/// A synthetic type offered on demand in all three [`ZONES`] at `price`.
pub fn zonal_type(name: &str, cpu_millis: i64, memory: i64, price: f64) -> InstanceType {
    let offerings: Vec<_> = ZONES.iter().map(|z| (*z, CapacityType::OnDemand, price)).collect();
    instance_type(name, cpu_millis, memory, &offerings)
}

/// Adds labels to a type (arch, GPU count, ...).
pub fn with_labels(mut it: InstanceType, labels: &[(&str, &str)]) -> InstanceType {
    it.labels.extend(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    it
}

/// Adds `count` NVIDIA GPUs to a type's capacity and allocatable, and sets its GPU-count label.
pub fn with_gpus(mut it: InstanceType, count: i64) -> InstanceType {
    it.capacity.set(NVIDIA_GPU, count);
    it.allocatable.set(NVIDIA_GPU, count);
    it.labels.insert(LABEL_SKU_GPU_COUNT.into(), count.to_string());
    it
}

/// Sizes of the real eastus catalog used by property tests: general purpose, memory and compute
/// optimised, arm64, burstable and GPU sizes.
pub const EASTUS_SUBSET: &[&str] = &[
    "Standard_B2s",
    "Standard_B2ms",
    "Standard_B4ms",
    "Standard_D2s_v5",
    "Standard_D4s_v5",
    "Standard_D8s_v5",
    "Standard_D16s_v5",
    "Standard_D32s_v5",
    "Standard_D2ps_v5",
    "Standard_D4ps_v5",
    "Standard_D8ps_v5",
    "Standard_D16ps_v5",
    "Standard_E2s_v5",
    "Standard_E4s_v5",
    "Standard_E8s_v5",
    "Standard_E16s_v5",
    "Standard_E2ps_v5",
    "Standard_E4ps_v5",
    "Standard_F2s_v2",
    "Standard_F4s_v2",
    "Standard_F8s_v2",
    "Standard_F16s_v2",
    "Standard_D2as_v5",
    "Standard_D4as_v5",
    "Standard_D8as_v5",
    "Standard_D16as_v5",
    "Standard_NC4as_T4_v3",
    "Standard_NC8as_T4_v3",
    "Standard_NC16as_T4_v3",
    "Standard_L8s_v3",
];

/// The [`EASTUS_SUBSET`] sizes from the embedded catalog (static prices, every zone and capacity type).
pub fn eastus_subset() -> Vec<InstanceType> {
    let all = instance_types(
        "eastus",
        &CapacityOptions::default(),
        &PriceTable::static_for_region("eastus"),
        &UnavailableOfferings::new(),
        Duration::ZERO,
    )
    .expect("eastus catalog");
    all.into_iter().filter(|t| EASTUS_SUBSET.contains(&t.name.as_str())).collect()
}

/// An untainted, unlimited NodePool over `types`.
pub fn pool(name: &str, types: Vec<InstanceType>) -> NodePoolInput {
    NodePoolInput {
        name: name.into(),
        weight: 0,
        requirements: requirements(&[Requirement::is_in(LABEL_NODEPOOL, [name])]),
        labels: BTreeMap::new(),
        taints: vec![],
        startup_taints: vec![],
        remaining: None,
        instance_types: Arc::new(types),
        replicas: None,
    }
}

pub fn requirements(list: &[Requirement]) -> Requirements {
    let mut out = Requirements::new();
    for r in list {
        out.add(r.clone());
    }
    out
}

pub fn taint(key: &str, value: &str) -> Taint {
    Taint { key: key.into(), value: Some(value.into()), effect: TaintEffect::NoSchedule, time_added: None }
}

pub fn toleration(key: &str) -> Toleration {
    Toleration { key: Some(key.into()), operator: TolerationOperator::Exists, value: None, effect: None }
}

/// A pending pod `default/<name>` labelled `app=<app>` requesting `cpu_millis` and `memory` (and one pod).
pub fn pod(name: &str, app: &str, cpu_millis: i64, memory: i64) -> Pod {
    Pod {
        namespace: NS.into(),
        name: name.into(),
        labels: BTreeMap::from([("app".to_string(), app.to_string())]).into(),
        requests: Resources::new().with(CPU, cpu_millis).with(MEMORY, memory).with(PODS, 1),
        ..Pod::default()
    }
}

/// `count` identical pods `<app>-<i>`.
pub fn pods(app: &str, count: usize, cpu_millis: i64, memory: i64) -> Vec<Pod> {
    (0..count).map(|i| pod(&format!("{app}-{i}"), app, cpu_millis, memory)).collect()
}

pub fn app_selector(app: &str) -> Requirements {
    requirements(&[Requirement::is_in("app", [app])])
}

pub fn spread(app: &str, key: &str, max_skew: u32) -> TopologySpread {
    TopologySpread {
        topology_key: key.into(),
        max_skew,
        min_domains: None,
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        selector: app_selector(app),
    }
}

pub fn affinity_term(app: &str, key: &str) -> PodAffinityTerm {
    PodAffinityTerm { selector: app_selector(app), namespaces: vec![NS.into()], topology_key: key.into() }
}

pub fn host_port(port: u16) -> HostPort {
    HostPort { port, protocol: "TCP".into(), host_ip: String::new() }
}

/// An existing, initialized node in `zone` with `allocatable`.
pub fn existing_node(name: &str, zone: &str, allocatable: Resources) -> ExistingNode {
    let labels = [
        (LABEL_ZONE, zone),
        (LABEL_HOSTNAME, name),
        (LABEL_ARCH, "amd64"),
        (LABEL_CAPACITY_TYPE, "on-demand"),
    ];
    ExistingNode {
        name: name.into(),
        labels: karpenter_azure::model::node_labels(labels),
        taints: vec![],
        allocatable,
        nodepool: None,
        in_flight: false,
        startup_taints: vec![],
    }
}

pub fn input(pods: Vec<Pod>, nodepools: Vec<NodePoolInput>) -> SolveInput {
    SolveInput { pods: pods.into_iter().map(Arc::new).collect(), nodepools, ..SolveInput::default() }
}

/// Panics with every violation when the plan is not feasible for the input.
pub fn assert_feasible(input: &SolveInput, plan: &Plan) {
    if let Err(violations) = feasibility::check(input, plan) {
        let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
        panic!("infeasible plan:\n  {}\nplan: {plan:#?}", list.join("\n  "));
    }
}

/// The new NodeClaim holding `pod` (`namespace/name`), if any.
pub fn claim_of<'p>(plan: &'p Plan, pod: &str) -> Option<&'p NewNodeClaim> {
    plan.nodeclaims.iter().find(|c| c.pods.iter().any(|p| p == pod))
}

/// The reason `pod` is unschedulable, if it is.
pub fn unschedulable_reason<'p>(plan: &'p Plan, pod: &str) -> Option<&'p str> {
    plan.unschedulable.iter().find(|u| u.pod == pod).map(|u| u.reason.as_str())
}

/// How many placed pods of `app` each zone holds (new claims only).
pub fn pods_per_zone(plan: &Plan, app: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for claim in &plan.nodeclaims {
        let n = claim.pods.iter().filter(|p| p.starts_with(&format!("{NS}/{app}-"))).count();
        if n > 0 {
            *out.entry(claim.zone.clone()).or_default() += n;
        }
    }
    out
}
