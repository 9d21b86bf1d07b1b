//! Hand-made plans, one good and one bad per rule, so the checker is known to fail when it should.

use std::sync::Arc;

use super::*;
use crate::apis::TaintEffect;
use crate::model::labels::LABEL_ARCH;
use crate::model::requirements::Requirement;
use crate::model::resources::{CPU, MEMORY, PODS};
use crate::model::{CapacityType, Overhead};
use crate::scheduling::input::{
    ExistingNode, HostPort, PodAffinityTerm, Toleration, TolerationOperator, TopologySpread,
};
use crate::scheduling::plan::Unschedulable;

const GI: i64 = 1 << 30;

fn resources(cpu: i64, memory: i64, pods: i64) -> Resources {
    Resources::new().with(CPU, cpu).with(MEMORY, memory).with(PODS, pods)
}

fn offering(zone: &str, capacity_type: CapacityType, price: f64) -> Offering {
    Offering { zone: zone.into(), capacity_type, price, available: true }
}

/// "small" (2 cpu, 4Gi) and "big" (8 cpu, 16Gi), amd64, on-demand in zones a and b, spot in a.
fn types() -> Vec<InstanceType> {
    let make = |name: &str, cpus: i64, price: f64| InstanceType {
        name: name.into(),
        vcpus: cpus as u32,
        memory_mib: (cpus * 2048) as u64,
        labels: [(crate::model::labels::LABEL_INSTANCE_TYPE, name), (LABEL_ARCH, "amd64")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        capacity: resources(cpus * 1000, cpus * 2 * GI, cpus * 5),
        overhead: Overhead::default(),
        allocatable: resources(cpus * 1000, cpus * 2 * GI, cpus * 5),
        offerings: vec![
            offering("a", CapacityType::Spot, price / 3.0),
            offering("a", CapacityType::OnDemand, price),
            offering("b", CapacityType::OnDemand, price),
        ],
    };
    vec![make("small", 2, 0.1), make("big", 8, 0.4)]
}

fn pool() -> NodePoolInput {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::is_in(LABEL_NODEPOOL, ["default"]));
    NodePoolInput {
        name: "default".into(),
        weight: 0,
        requirements,
        labels: BTreeMap::new(),
        taints: vec![],
        startup_taints: vec![],
        remaining: None,
        instance_types: Arc::new(types()),
        replicas: None,
    }
}

fn pod(name: &str, cpu: i64) -> Pod {
    Pod {
        namespace: "ns".into(),
        name: name.into(),
        labels: std::sync::Arc::new([("app".to_string(), "web".to_string())].into()),
        requests: resources(cpu, GI / 2, 1),
        ..Pod::default()
    }
}

fn input(pods: Vec<Pod>) -> SolveInput {
    SolveInput {
        pods: pods.into_iter().map(Arc::new).collect(),
        nodepools: vec![pool()],
        ..SolveInput::default()
    }
}

/// A correct claim for `pods` on `type_name` in `zone`, built from the input.
fn claim(input: &SolveInput, n: usize, type_name: &str, zone: &str, pods: &[&str]) -> NewNodeClaim {
    let pool = &input.nodepools[0];
    let it = pool.instance_types.iter().find(|t| t.name == type_name).unwrap();
    let o = find_offering(it, zone, "on-demand").unwrap();
    let mut requirements = pool.requirements.clone();
    requirements.add(Requirement::is_in(crate::model::labels::LABEL_INSTANCE_TYPE, [type_name]));
    requirements.add(Requirement::is_in(LABEL_ZONE, [zone]));
    requirements.add(Requirement::is_in(LABEL_CAPACITY_TYPE, ["on-demand"]));
    let placed: Vec<&Pod> =
        pods.iter().map(|id| input.pods.iter().find(|p| p.name == *id).unwrap().as_ref()).collect();
    let daemons: Vec<&Pod> = input.daemonsets.iter().collect();
    let daemon_overhead = sum_requests(&daemons);
    NewNodeClaim {
        name: format!("default-{n}"),
        nodepool: "default".into(),
        instance_type: type_name.into(),
        instance_type_options: vec![type_name.into()],
        zone: zone.into(),
        capacity_type: CapacityType::OnDemand,
        price_per_hour: o.price,
        requirements,
        labels: node_labels(pool, it, o),
        taints: pool.taints.clone(),
        startup_taints: vec![],
        allocatable: it.allocatable.clone(),
        requests: sum_requests(&placed).add(&daemon_overhead),
        daemon_overhead,
        pods: placed.iter().map(|p| p.id()).collect(),
    }
}

fn plan(claims: Vec<NewNodeClaim>) -> Plan {
    let price_per_hour = claims.iter().map(|c| c.price_per_hour).sum();
    Plan { nodeclaims: claims, price_per_hour, ..Plan::default() }
}

/// Asserts the plan breaks exactly `rule` (possibly several times) and nothing else.
fn assert_breaks(input: &SolveInput, plan: &Plan, rule: Rule) {
    let violations = check(input, plan).expect_err("the plan should be rejected");
    assert!(violations.iter().all(|v| v.rule == rule), "expected only {rule:?}: {violations:#?}");
}

fn assert_ok(input: &SolveInput, plan: &Plan) {
    if let Err(v) = check(input, plan) {
        panic!("unexpected violations: {v:#?}");
    }
}

#[test]
fn a_correct_plan_passes() {
    let input = input(vec![pod("p1", 1000), pod("p2", 1000), pod("p3", 3000)]);
    let plan =
        plan(vec![claim(&input, 1, "small", "a", &["p1", "p2"]), claim(&input, 2, "big", "b", &["p3"])]);
    assert_ok(&input, &plan);
}

#[test]
fn accounting() {
    let input = input(vec![pod("p1", 100), pod("p2", 100)]);
    let missing = plan(vec![claim(&input, 1, "small", "a", &["p1"])]);
    assert_breaks(&input, &missing, Rule::Accounting);
    let twice =
        plan(vec![claim(&input, 1, "small", "a", &["p1", "p2"]), claim(&input, 2, "small", "a", &["p2"])]);
    assert_breaks(&input, &twice, Rule::Accounting);
    let mut unknown = plan(vec![claim(&input, 1, "small", "a", &["p1", "p2"])]);
    unknown.unschedulable.push(Unschedulable { pod: "ns/ghost".into(), reason: "x".into() });
    assert_breaks(&input, &unknown, Rule::Accounting);
    let mut no_reason = plan(vec![claim(&input, 1, "small", "a", &["p1"])]);
    no_reason.unschedulable.push(Unschedulable { pod: "ns/p2".into(), reason: " ".into() });
    assert_breaks(&input, &no_reason, Rule::Accounting);
}

#[test]
fn capacity() {
    let input = input(vec![pod("p1", 1500), pod("p2", 1500)]);
    // Too big for the chosen type (which is also its only option, so that rule fires too).
    let violations = check(&input, &plan(vec![claim(&input, 1, "small", "a", &["p1", "p2"])])).unwrap_err();
    assert!(violations.iter().any(|v| v.rule == Rule::Capacity), "{violations:#?}");
    let mut wrong_requests = plan(vec![claim(&input, 1, "big", "a", &["p1", "p2"])]);
    wrong_requests.nodeclaims[0].requests = resources(1, 1, 1);
    assert_breaks(&input, &wrong_requests, Rule::Capacity);
}

#[test]
fn existing_node_capacity_counts_running_pods() {
    let mut input = input(vec![pod("p1", 1000)]);
    input.nodes.push(Arc::new(ExistingNode {
        name: "n1".into(),
        labels: BTreeMap::new(),
        taints: vec![],
        allocatable: resources(2000, 4 * GI, 10),
        nodepool: None,
        in_flight: false,
        startup_taints: vec![],
    }));
    input.running.push(Arc::new(Pod { node_name: Some("n1".into()), ..pod("r1", 1500) }));
    let plan = Plan { existing: [("n1".to_string(), vec!["ns/p1".to_string()])].into(), ..Plan::default() };
    assert_breaks(&input, &plan, Rule::Capacity);
}

#[test]
fn instance_types_and_offerings() {
    let input = input(vec![pod("p1", 1000)]);
    let mut bad_option = plan(vec![claim(&input, 1, "small", "a", &["p1"])]);
    bad_option.nodeclaims[0].instance_type_options = vec!["big".into(), "small".into()];
    assert_breaks(&input, &bad_option, Rule::InstanceType);
    let mut unknown_option = plan(vec![claim(&input, 1, "small", "a", &["p1"])]);
    unknown_option.nodeclaims[0].instance_type_options.push("huge".into());
    assert_breaks(&input, &unknown_option, Rule::InstanceType);

    let mut priced_wrong = plan(vec![claim(&input, 1, "small", "a", &["p1"])]);
    priced_wrong.nodeclaims[0].price_per_hour = 0.01;
    priced_wrong.price_per_hour = 0.01;
    assert_breaks(&input, &priced_wrong, Rule::Offering);
    let mut total_wrong = plan(vec![claim(&input, 1, "small", "a", &["p1"])]);
    total_wrong.price_per_hour = 0.5;
    assert_breaks(&input, &total_wrong, Rule::Price);

    let mut unavailable = input.clone();
    let mut types = types();
    types[0].offerings.iter_mut().for_each(|o| o.available = false);
    unavailable.nodepools[0].instance_types = Arc::new(types);
    let violations = check(&unavailable, &plan(vec![claim(&input, 1, "small", "a", &["p1"])])).unwrap_err();
    assert!(
        violations.iter().any(|v| v.rule == Rule::Offering && v.message.contains("unavailable")),
        "{violations:#?}"
    );
}

#[test]
fn node_selection() {
    let mut arm = pod("p1", 100);
    let mut term = Requirements::new();
    term.add(Requirement::is_in(LABEL_ARCH, ["arm64"]));
    arm.required_terms = vec![term.clone()];
    let input = input(vec![arm.clone()]);
    assert_breaks(&input, &plan(vec![claim(&input, 1, "small", "a", &["p1"])]), Rule::NodeSelection);
    // Several terms are ORed: one matching term is enough.
    let mut amd = Requirements::new();
    amd.add(Requirement::is_in(LABEL_ARCH, ["amd64"]));
    let either = self::input(vec![Pod { required_terms: vec![term, amd], ..arm }]);
    assert_ok(&either, &plan(vec![claim(&either, 1, "small", "a", &["p1"])]));
}

#[test]
fn claim_requirements_must_admit_the_node() {
    let input = input(vec![pod("p1", 100)]);
    let mut plan = plan(vec![claim(&input, 1, "small", "a", &["p1"])]);
    plan.nodeclaims[0].requirements.add(Requirement::is_in(LABEL_ZONE, ["a", "b"]));
    plan.nodeclaims[0].requirements = {
        let mut r = pool().requirements;
        r.add(Requirement::is_in(LABEL_ZONE, ["b"]));
        r
    };
    assert_breaks(&input, &plan, Rule::NodeSelection);
}

#[test]
fn taints() {
    let mut input = input(vec![pod("p1", 100)]);
    let taint = Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: TaintEffect::NoSchedule,
        time_added: None,
    };
    input.nodepools[0].taints = vec![taint];
    assert_breaks(&input, &plan(vec![claim(&input, 1, "small", "a", &["p1"])]), Rule::Taints);
    Arc::make_mut(&mut input.pods[0]).tolerations = vec![Toleration {
        key: Some("dedicated".into()),
        operator: TolerationOperator::Exists,
        value: None,
        effect: None,
    }]
    .into();
    assert_ok(&input, &plan(vec![claim(&input, 1, "small", "a", &["p1"])]));
}

fn web_selector() -> Requirements {
    let mut r = Requirements::new();
    r.add(Requirement::is_in("app", ["web"]));
    r
}

fn zone_spread(max_skew: u32) -> TopologySpread {
    TopologySpread {
        topology_key: LABEL_ZONE.into(),
        max_skew,
        min_domains: None,
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        selector: web_selector(),
    }
}

#[test]
fn topology_spread() {
    let spread = |name: &str| Pod { topology_spread: vec![zone_spread(1)], ..pod(name, 100) };
    let input = input(vec![spread("p1"), spread("p2"), spread("p3")]);
    let skewed = plan(vec![claim(&input, 1, "small", "a", &["p1", "p2", "p3"])]);
    assert_breaks(&input, &skewed, Rule::TopologySpread);
    let balanced =
        plan(vec![claim(&input, 1, "small", "a", &["p1", "p2"]), claim(&input, 2, "small", "b", &["p3"])]);
    assert_ok(&input, &balanced);
    let mut unpinned = balanced.clone();
    unpinned.nodeclaims[1].requirements = pool().requirements;
    assert_breaks(&input, &unpinned, Rule::DomainNotPinned);
}

fn hostname_anti_affinity(name: &str) -> Pod {
    let term = PodAffinityTerm {
        selector: web_selector(),
        namespaces: vec!["ns".into()],
        topology_key: LABEL_HOSTNAME.into(),
    };
    Pod { anti_affinity: vec![term], ..pod(name, 100) }
}

#[test]
fn anti_affinity_both_directions() {
    let input = input(vec![hostname_anti_affinity("p1"), hostname_anti_affinity("p2")]);
    assert_breaks(&input, &plan(vec![claim(&input, 1, "small", "a", &["p1", "p2"])]), Rule::PodAntiAffinity);
    assert_ok(
        &input,
        &plan(vec![claim(&input, 1, "small", "a", &["p1"]), claim(&input, 2, "small", "a", &["p2"])]),
    );

    // A running pod's anti-affinity keeps a new pod it selects off its node.
    let mut inverse = self::input(vec![pod("p1", 100)]);
    inverse.nodes.push(Arc::new(ExistingNode {
        name: "n1".into(),
        labels: BTreeMap::new(),
        taints: vec![],
        allocatable: resources(4000, 8 * GI, 10),
        nodepool: None,
        in_flight: false,
        startup_taints: vec![],
    }));
    inverse.running.push(Arc::new(Pod { node_name: Some("n1".into()), ..hostname_anti_affinity("r1") }));
    let plan = Plan { existing: [("n1".to_string(), vec!["ns/p1".to_string()])].into(), ..Plan::default() };
    assert_breaks(&inverse, &plan, Rule::PodAntiAffinity);
}

#[test]
fn self_affinity() {
    let term = PodAffinityTerm {
        selector: web_selector(),
        namespaces: vec!["ns".into()],
        topology_key: LABEL_ZONE.into(),
    };
    let affine = |name: &str| Pod { affinity: vec![term.clone()], ..pod(name, 100) };
    let input = input(vec![affine("p1"), affine("p2")]);
    let split = plan(vec![claim(&input, 1, "small", "a", &["p1"]), claim(&input, 2, "small", "b", &["p2"])]);
    assert_breaks(&input, &split, Rule::PodAffinity);
    let together =
        plan(vec![claim(&input, 1, "small", "a", &["p1"]), claim(&input, 2, "small", "a", &["p2"])]);
    assert_ok(&input, &together);
    let alone = self::input(vec![affine("p1")]);
    assert_ok(&alone, &plan(vec![claim(&alone, 1, "small", "b", &["p1"])]));
}

#[test]
fn host_ports() {
    let port = |ip: &str| HostPort { port: 8080, protocol: "TCP".into(), host_ip: ip.into() };
    let input = input(vec![
        Pod { host_ports: vec![port("0.0.0.0")], ..pod("p1", 100) },
        Pod { host_ports: vec![port("10.0.0.1")], ..pod("p2", 100) },
    ]);
    assert_breaks(&input, &plan(vec![claim(&input, 1, "small", "a", &["p1", "p2"])]), Rule::HostPorts);
    assert_ok(
        &input,
        &plan(vec![claim(&input, 1, "small", "a", &["p1"]), claim(&input, 2, "small", "a", &["p2"])]),
    );
}

#[test]
fn volume_zones() {
    let input = input(vec![Pod { volume_zones: Some(vec!["b".into()]), ..pod("p1", 100) }]);
    let violations = check(&input, &plan(vec![claim(&input, 1, "small", "a", &["p1"])])).unwrap_err();
    assert!(violations.iter().any(|v| v.rule == Rule::VolumeZones), "{violations:#?}");
    assert_ok(&input, &plan(vec![claim(&input, 1, "small", "b", &["p1"])]));
}

#[test]
fn limits() {
    let mut input = input(vec![pod("p1", 1000), pod("p2", 1000)]);
    input.nodepools[0].remaining = Some(Resources::new().with(CPU, 3000));
    let two = plan(vec![claim(&input, 1, "small", "a", &["p1"]), claim(&input, 2, "small", "a", &["p2"])]);
    assert_breaks(&input, &two, Rule::Limits);
    assert_ok(&input, &plan(vec![claim(&input, 1, "small", "a", &["p1", "p2"])]));
}

#[test]
fn daemon_overhead() {
    let mut input = input(vec![pod("p1", 1000)]);
    input.daemonsets.push(pod("ds", 500));
    assert_ok(&input, &plan(vec![claim(&input, 1, "small", "a", &["p1"])]));
    let mut forgot = plan(vec![claim(&input, 1, "small", "a", &["p1"])]);
    forgot.nodeclaims[0].daemon_overhead = Resources::new();
    forgot.nodeclaims[0].requests = input.pods[0].requests.clone();
    assert_breaks(&input, &forgot, Rule::DaemonOverhead);
}
