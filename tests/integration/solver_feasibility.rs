//! Property tests: on random inputs every plan the solver returns passes the independent feasibility
//! checker, solving twice gives the same plan, and every unschedulable pod has a reason.
//!
//! Inputs mix pod groups (generic, zonal and hostname spread, hostname anti-affinity, zonal
//! self-affinity, arch and capacity-type selectors, tolerations, host ports, volume zones, preferred
//! zones, spread and anti-affinity on a custom `rack` key some pools define), NodePools with random taints, weights, type subsets and limits, optional existing nodes with
//! running pods and an optional DaemonSet, over either a subset of the real eastus catalog or synthetic
//! types. Pods of a group share their `app` label and their constraints, as a Deployment's do; a `tier`
//! label shared across groups makes some spreads count pods of other groups (overlapping selectors).

use crate::support::proptest_config;
use crate::support::solver_fixtures as fixtures;
use std::sync::Arc;

use std::sync::OnceLock;

use fixtures::*;
use karpenter_azure::model::labels::{LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_ZONE};
use karpenter_azure::model::requirements::Requirement;
use karpenter_azure::model::resources::{Resources, CPU, MEMORY, PODS};
use karpenter_azure::model::{CapacityType, InstanceType};
use karpenter_azure::scheduling::input::Weighted;
use karpenter_azure::scheduling::{solve, Pod, SolveInput};
use proptest::prelude::*;

const EASTUS_ZONES: [&str; 3] = ["eastus-1", "eastus-2", "eastus-3"];
const GROUP_KINDS: u8 = 15;
/// A topology key no instance type defines: pools 1 and 2 (and one existing node) define it.
const RACK: &str = "example.com/rack";

#[derive(Clone, Debug)]
struct GroupSpec {
    kind: u8,
    count: usize,
    cpu: i64,
    memory: i64,
}

#[derive(Clone, Debug)]
struct PoolSpec {
    tainted: bool,
    weight: i32,
    /// Bit i keeps catalog type i (modulo the catalog size).
    type_mask: u64,
    cpu_limit: Option<i64>,
}

#[derive(Clone, Debug)]
struct Scenario {
    groups: Vec<GroupSpec>,
    pools: Vec<PoolSpec>,
    existing_nodes: usize,
    daemonset: bool,
    real_catalog: bool,
}

fn eastus() -> &'static [InstanceType] {
    static TYPES: OnceLock<Vec<InstanceType>> = OnceLock::new();
    TYPES.get_or_init(|| {
        let types = eastus_subset();
        assert!(types.len() >= 20, "the eastus subset shrank to {} types", types.len());
        types
    })
}

/// Twelve synthetic types: amd64 and arm64, 2–16 cores, spot in two zones and on-demand in three.
fn synthetic() -> Vec<InstanceType> {
    let mut out = vec![];
    for (arch, factor) in [("amd64", 1.0), ("arm64", 0.8)] {
        for (cores, gib_per_core) in [(2, 4), (4, 4), (8, 4), (16, 4), (4, 8), (8, 2)] {
            let price = factor * (0.04 * cores as f64 + 0.005 * (cores * gib_per_core) as f64);
            let mut offerings: Vec<(&str, CapacityType, f64)> =
                EASTUS_ZONES.iter().map(|z| (*z, CapacityType::OnDemand, price)).collect();
            offerings.extend(EASTUS_ZONES[..2].iter().map(|z| (*z, CapacityType::Spot, price * 0.4)));
            let name = format!("{arch}-{cores}x{gib_per_core}");
            let it = instance_type(&name, cores * 1000, cores * gib_per_core * GI, &offerings);
            out.push(with_labels(it, &[(LABEL_ARCH, arch)]));
        }
    }
    out
}

fn group_pods(g: usize, spec: &GroupSpec) -> Vec<Pod> {
    let app = format!("g{g}");
    let mut pods = pods(&app, spec.count, spec.cpu, spec.memory);
    let term = |list: &[Requirement]| vec![requirements(list)];
    // Every pod also carries one of two `tier` values shared across groups, and the spreads of odd
    // groups select on it: those spreads then count pods of other groups that do not carry them
    // (upstream's benchmark does the same with its `my-label` values).
    let tier = format!("t{}", g % 2);
    let spread = |app: &str, key: &str, skew: u32| {
        let mut rule = spread(app, key, skew);
        if g % 2 == 1 {
            rule.selector = requirements(&[Requirement::is_in("tier", [tier.clone()])]);
        }
        rule
    };
    for p in pods.iter_mut() {
        std::sync::Arc::make_mut(&mut p.labels).insert("tier".into(), tier.clone());
        match spec.kind {
            1 => p.topology_spread = vec![spread(&app, LABEL_ZONE, 1)],
            2 => p.anti_affinity = vec![affinity_term(&app, LABEL_HOSTNAME)],
            3 => p.required_terms = term(&[Requirement::is_in(LABEL_ARCH, ["arm64"])]),
            4 => p.required_terms = term(&[Requirement::is_in(LABEL_ARCH, ["amd64"])]),
            5 => p.required_terms = term(&[Requirement::is_in(LABEL_CAPACITY_TYPE, ["spot"])]),
            6 => p.tolerations = vec![toleration("dedicated")].into(),
            7 => p.topology_spread = vec![spread(&app, LABEL_HOSTNAME, 1)],
            8 => p.affinity = vec![affinity_term(&app, LABEL_ZONE)],
            9 => p.host_ports = vec![host_port(9100)],
            10 => p.topology_spread = vec![spread(&app, LABEL_CAPACITY_TYPE, 1)],
            11 => {
                let zone = requirements(&[Requirement::is_in(LABEL_ZONE, [EASTUS_ZONES[1]])]);
                p.preferred_terms = vec![Weighted { weight: 10, term: zone }];
            }
            12 => p.volume_zones = Some(vec![EASTUS_ZONES[g % 3].to_string()]),
            13 => p.topology_spread = vec![spread(&app, RACK, 1)],
            14 => p.anti_affinity = vec![affinity_term(&app, RACK)],
            _ => {}
        }
    }
    pods
}

fn build(s: &Scenario) -> SolveInput {
    let catalog = if s.real_catalog { eastus().to_vec() } else { synthetic() };
    let pools = s
        .pools
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let types: Vec<InstanceType> = catalog
                .iter()
                .enumerate()
                .filter(|(t, _)| spec.type_mask & (1 << (t % 64)) != 0)
                .map(|(_, t)| t.clone())
                .collect();
            let mut pool = pool(&format!("pool-{i}"), types);
            pool.weight = spec.weight;
            if spec.tainted {
                pool.taints = vec![taint("dedicated", "yes")];
            }
            pool.remaining = spec.cpu_limit.map(|cpu| Resources::new().with(CPU, cpu));
            // Pool 1 lists two racks in a requirement, pool 2 labels its nodes with a third.
            match i % 3 {
                1 => pool.requirements.add(Requirement::is_in(RACK, ["rack-a", "rack-b"])),
                2 => {
                    pool.requirements.add(Requirement::is_in(RACK, ["rack-c"]));
                    pool.labels.insert(RACK.into(), "rack-c".into());
                }
                _ => {}
            }
            pool
        })
        .collect();
    let pods = s.groups.iter().enumerate().flat_map(|(g, spec)| group_pods(g, spec)).collect();
    let mut input = input(pods, pools);
    for n in 0..s.existing_nodes {
        let name = format!("existing-{n}");
        let allocatable = Resources::new().with(CPU, 4000).with(MEMORY, 16 * GI).with(PODS, 110);
        let mut node = existing_node(&name, EASTUS_ZONES[n % 3], allocatable);
        if n == 1 {
            node.labels.insert(RACK.into(), "rack-a".into());
        }
        input.nodes.push(Arc::new(node));
        // A running pod of group 0, so topology counts start uneven.
        let mut running = pod(&format!("running-{n}"), "g0", 1000, 2 * GI);
        running.node_name = Some(name);
        input.running.push(Arc::new(running));
    }
    if s.daemonset {
        input.daemonsets.push(pod("agent", "agent", 100, 128 * MI));
    }
    input
}

fn group(max_count: usize) -> impl Strategy<Value = GroupSpec> {
    (0..GROUP_KINDS, 1..=max_count, prop::sample::select(vec![100i64, 250, 500, 1000, 1500, 3000]), 0usize..6)
        .prop_map(|(kind, count, cpu, m)| GroupSpec {
            kind,
            count,
            cpu,
            memory: [128 * MI, 512 * MI, GI, 2 * GI, 4 * GI, 12 * GI][m],
        })
}

fn pool_spec() -> impl Strategy<Value = PoolSpec> {
    (any::<bool>(), 0i32..3, any::<u64>(), prop::option::weighted(0.2, 4000i64..40_000)).prop_map(
        |(tainted, weight, mask, cpu_limit)| PoolSpec {
            tainted,
            weight,
            // Keep at least a few types in every pool.
            type_mask: mask | 0b1_0001_0001,
            cpu_limit,
        },
    )
}

fn scenario(max_groups: usize, max_count: usize) -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec(group(max_count), 1..=max_groups),
        prop::collection::vec(pool_spec(), 1..=3),
        0usize..3,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(groups, pools, existing_nodes, daemonset, real_catalog)| Scenario {
            groups,
            pools,
            existing_nodes,
            daemonset,
            real_catalog,
        })
}

/// One line per node of the plan, for failure messages.
fn summary(plan: &karpenter_azure::scheduling::Plan) -> String {
    let mut lines = vec![];
    for (node, pods) in &plan.existing {
        lines.push(format!("existing {node}: {pods:?}"));
    }
    for c in &plan.nodeclaims {
        lines.push(format!(
            "{} {} {} {}: {:?}",
            c.name,
            c.instance_type,
            c.zone,
            c.capacity_type.as_str(),
            c.pods
        ));
    }
    for u in &plan.unschedulable {
        lines.push(format!("unschedulable {}: {}", u.pod, u.reason));
    }
    lines.join("\n")
}

fn check_scenario(s: &Scenario) -> Result<(), TestCaseError> {
    let input = build(s);
    let plan = solve(&input);
    if let Err(violations) = karpenter_azure::scheduling::feasibility::check(&input, &plan) {
        let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
        return Err(TestCaseError::fail(format!(
            "infeasible plan:\n  {}\n{}",
            list.join("\n  "),
            summary(&plan)
        )));
    }
    prop_assert_eq!(&plan, &solve(&input), "solving twice gave different plans");
    for u in &plan.unschedulable {
        prop_assert!(!u.reason.trim().is_empty(), "pod {} has no reason", u.pod);
    }
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config::config(128))]

    #[test]
    fn small_inputs_give_feasible_deterministic_plans(s in scenario(4, 8)) {
        check_scenario(&s)?;
    }
}

proptest! {
    #![proptest_config(proptest_config::config(24))]

    #[test]
    fn medium_inputs_give_feasible_deterministic_plans(s in scenario(8, 40)) {
        check_scenario(&s)?;
    }
}

#[test]
fn bench_workloads_give_feasible_plans() {
    use karpenter_azure::bench::{mixed_input, upstream_input};
    for (name, input) in [("upstream", upstream_input(500)), ("mixed", mixed_input(500))] {
        let plan = solve(&input);
        if let Err(violations) = karpenter_azure::scheduling::feasibility::check(&input, &plan) {
            let list: Vec<String> = violations.iter().take(20).map(ToString::to_string).collect();
            panic!("{name}: {} violations, first:\n  {}", violations.len(), list.join("\n  "));
        }
        assert!(plan.unschedulable.is_empty(), "{name}: {:?}", plan.unschedulable.first());
    }
}

/// Not a test: runs many random scenarios without stopping at the first failure and prints how often
/// each rule is broken, with one example per rule.
/// `cargo test --test integration solver_feasibility::survey -- --ignored --nocapture`.
#[test]
#[ignore]
fn survey() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeMap;

    let mut runner = TestRunner::deterministic();
    let mut broken: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let cases = 400;
    for _ in 0..cases {
        let s = scenario(8, 40).new_tree(&mut runner).expect("strategy").current();
        let input = build(&s);
        let plan = solve(&input);
        if let Err(violations) = karpenter_azure::scheduling::feasibility::check(&input, &plan) {
            let mut rules: Vec<String> = violations.iter().map(|v| format!("{:?}", v.rule)).collect();
            rules.dedup();
            for rule in rules {
                let example = violations.iter().find(|v| format!("{:?}", v.rule) == rule).unwrap();
                let entry =
                    broken.entry(rule).or_insert((0, format!("{example}\n{}\n{s:?}", summary(&plan))));
                entry.0 += 1;
            }
        }
    }
    for (rule, (count, example)) in &broken {
        println!("== {rule}: {count} of {cases} scenarios; example:\n{example}\n");
    }
}
