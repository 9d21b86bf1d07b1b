//! Property tests on clusters shaped as upstream's disruption benchmark shapes them
//! (`hack/upstream-bench/zz_disruption_test.go`): upstream's benchmark pods (`makeDiversePods`: generic,
//! zonal and hostname spread, zonal affinity, hostname anti-affinity) on upstream's fake instance types
//! (`fake.InstanceTypes`), packed by our solver as managed nodes and then scaled down in one of its
//! shapes: a uniform scale-in, one zone drained, a fragmented day-end cluster, spot and on-demand
//! mixed; each with or without the nodes it left empty. Every pass of our decisions, followed to a
//! fixpoint, is checked by the shared command checks ([`decided_with_at`]: nothing protected or behind
//! a PDB moved, budgets recounted, consolidation saving money, the post-command cluster judged feasible
//! by the independent checker) and must never raise the cluster's $/h or lose a pod.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_azure::apis::duration::NillableDuration;
use karpenter_azure::apis::nodepool::ConsolidationPolicy;
use karpenter_azure::bench::{nodepool, upstream_instance_types, upstream_pods, UPSTREAM_ZONES};
use karpenter_azure::bench_disruption::SplitMix;
use karpenter_azure::disruption::applied::{managed_node, price, to_fixpoint, workload_pod, MAX_PASSES};
use karpenter_azure::disruption::simulate::{outcome, PassSolves, Replace};
use karpenter_azure::disruption::{Budget, Options, Pdb, PoolPolicy, Snapshot};
use karpenter_azure::model::requirements::{Requirement, Requirements};
use karpenter_azure::model::CapacityType;
use karpenter_azure::scheduling::{solve, Pod, PodId, SolveInput, SolveOptions};
use proptest::prelude::*;

use crate::support::disruption_fixtures::{api_budget, decided_with_at};
use crate::support::proptest_config;

/// The shapes of upstream's disruption benchmark.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// A seeded half of the pods deleted.
    Uniform,
    /// Every pod of one zone deleted, and a seeded quarter of the rest.
    ZoneDrained,
    /// Each node keeps its own seeded share of its pods (a day-end cluster).
    Fragmented,
    /// Spot priced below on-demand, so the packing mixes them; then a seeded half deleted.
    SpotMixed,
}

/// True `per_mille` times in a thousand draws of `rng`: the shape's deletions follow the case's seed.
fn chance(rng: &mut SplitMix, per_mille: u64) -> bool {
    rng.next_u64() % 1000 < per_mille
}

fn now() -> Timestamp {
    "2026-12-01T12:00:00Z".parse().unwrap()
}

/// One case: the cluster and what it was built from, for the failure message.
#[derive(Debug)]
struct Case {
    snapshot: Snapshot,
    pods: usize,
}

#[allow(clippy::too_many_arguments)]
fn shaped(
    pods: usize,
    max_vcpus: usize,
    shape: Shape,
    drop_empty: bool,
    seed: u64,
    policy: ConsolidationPolicy,
    budget: &str,
    pdb: bool,
) -> Case {
    let mut types = upstream_instance_types(max_vcpus);
    if let Shape::SpotMixed = shape {
        for t in &mut types {
            for o in t.offerings.iter_mut().filter(|o| o.capacity_type == CapacityType::Spot) {
                o.price *= 0.7;
            }
        }
    }
    let input = SolveInput {
        pods: upstream_pods(pods).into_iter().map(Arc::new).collect(),
        nodepools: vec![nodepool(types)],
        options: SolveOptions { region: "test-region".into(), ..SolveOptions::default() },
        ..SolveInput::default()
    };
    let plan = solve(&input);
    assert!(plan.unschedulable.is_empty(), "upstream's pods fit upstream's types: {:?}", plan.unschedulable);
    let by_id: BTreeMap<PodId, &Pod> = input.pods.iter().map(|p| (p.id(), p.as_ref())).collect();
    let launched = now().checked_sub(SignedDuration::from_hours(2)).unwrap();
    let mut rng = SplitMix(seed);
    let drained = UPSTREAM_ZONES[(seed % 3) as usize];
    let mut nodes = vec![];
    for claim in &plan.nodeclaims {
        let mut node = managed_node(claim, &claim.name, &input.daemonsets, launched);
        let kept_per_mille = match shape {
            Shape::Uniform | Shape::SpotMixed => 500,
            Shape::ZoneDrained if claim.zone == drained => 0,
            Shape::ZoneDrained => 750,
            Shape::Fragmented => rng.next_u64() % 1000,
        };
        for id in &claim.pods {
            if chance(&mut rng, kept_per_mille) {
                node.pods.push(workload_pod(by_id[id], &claim.name, launched));
            }
        }
        if !(drop_empty && node.pods.iter().all(|p| !p.reschedulable())) {
            nodes.push(node);
        }
    }
    let pool = input.nodepools[0].clone();
    let pdbs = if pdb {
        // At most one zone-spread pod may go at a time.
        let mut selector = Requirements::new();
        selector.add(Requirement::is_in("app", ["zone-spread"]));
        vec![Pdb {
            namespace: "default".into(),
            name: "zone-spread".into(),
            selector: Some(selector),
            disruptions_allowed: 1,
        }]
    } else {
        vec![]
    };
    let kept = nodes.iter().map(|n| n.pods.iter().filter(|p| p.reschedulable()).count()).sum();
    let snapshot = Snapshot {
        nodes,
        nodepools: vec![PoolPolicy {
            name: pool.name.clone(),
            consolidation_policy: policy,
            consolidate_after: NillableDuration::After(Duration::ZERO),
            expire_after: NillableDuration::Never,
            budgets: Budget::parse_all(&[api_budget(budget)]).unwrap(),
            limits: None,
            solver: Some(pool),
            replicas: None,
        }],
        daemonsets: input.daemonsets.clone(),
        solve_options: input.options.clone(),
        pdbs,
        ..Snapshot::default()
    };
    Case { snapshot, pods: kept }
}

/// The workload pods running on the cluster's nodes.
fn running(snapshot: &Snapshot) -> usize {
    snapshot.nodes.iter().map(|n| n.pods.iter().filter(|p| p.reschedulable()).count()).sum()
}

proptest! {
    #![proptest_config(proptest_config::config(24))]

    #[test]
    fn every_pass_to_the_fixpoint_keeps_every_pod_budget_and_pdb_and_never_raises_the_price(
        pods in 40usize..140,
        max_vcpus in 2usize..9,
        shape in prop::sample::select(vec![Shape::Uniform, Shape::ZoneDrained, Shape::Fragmented, Shape::SpotMixed]),
        drop_empty in prop::bool::ANY,
        seed in any::<u64>(),
        policy in prop::sample::select(vec![ConsolidationPolicy::WhenEmptyOrUnderutilized, ConsolidationPolicy::Balanced]),
        budget in prop::sample::select(vec!["10%", "2", "100%"]),
        pdb in prop::bool::ANY,
    ) {
        let case = shaped(pods, max_vcpus, shape, drop_empty, seed, policy, budget, pdb);
        let options = Options::default();
        let mut end = case.snapshot.clone();
        let first = decided_with_at(&end, &options, now());
        let mut prices = vec![price(&end)];
        let mut counts = vec![running(&end)];
        let run = to_fixpoint(&mut end, first, now(), |s, at, judging| {
            prices.push(price(s));
            counts.push(running(s));
            decided_with_at(s, &judging.options(&options), at)
        });
        prices.push(price(&end));
        counts.push(running(&end));
        prop_assert!(run.passes < MAX_PASSES, "no fixpoint within {MAX_PASSES} passes");
        for w in prices.windows(2) {
            prop_assert!(w[1] <= w[0] + 1e-9, "a pass raised $/h: {prices:?}");
        }
        prop_assert!(counts.iter().all(|&c| c == case.pods), "pods lost or added: {counts:?} of {}", case.pods);
    }

    /// A pass reads the running pods once ([`PassSolves`]) and solves each removal on that base: it
    /// must place the pods exactly as a solve of the input listing them does.
    #[test]
    fn a_solve_on_the_pass_base_places_pods_as_the_solve_of_the_listed_input(
        pods in 40usize..140,
        max_vcpus in 2usize..9,
        shape in prop::sample::select(vec![Shape::Uniform, Shape::ZoneDrained, Shape::Fragmented, Shape::SpotMixed]),
        seed in any::<u64>(),
        removals in prop::collection::vec(prop::collection::btree_set(0usize..64, 0..6), 1..5),
        replace in prop::sample::select(vec![Replace::Any, Replace::SpotOnly, Replace::Never]),
    ) {
        let case = shaped(pods, max_vcpus, shape, false, seed, ConsolidationPolicy::WhenEmptyOrUnderutilized, "100%", false);
        let snapshot = &case.snapshot;
        let solves = PassSolves::new(snapshot, now());
        for removed in removals {
            let removed: BTreeSet<usize> = removed.into_iter().filter(|&i| i < snapshot.nodes.len()).collect();
            let listed = outcome(snapshot, &removed, now(), replace, &|| false).unwrap();
            let on_base = solves.outcome_unless(&removed, replace, &|| false, |_| None::<()>)
                .unwrap()
                .unwrap();
            prop_assert_eq!(format!("{listed:?}"), format!("{on_base:?}"), "removing {:?}", removed);
        }
    }

    /// What a pass refuses a move on before its replacements' NodeClaims are written (the move's
    /// sketch) must be what the written outcome says: the first stranded pod with its reason, and
    /// each replacement's price, in order, to the bit.
    #[test]
    fn a_moves_sketch_says_what_its_outcome_says(
        pods in 40usize..140,
        max_vcpus in 2usize..9,
        shape in prop::sample::select(vec![Shape::Uniform, Shape::ZoneDrained, Shape::Fragmented, Shape::SpotMixed]),
        drop_empty in any::<bool>(),
        seed in any::<u64>(),
        removals in prop::collection::vec(prop::collection::btree_set(0usize..64, 1..6), 1..5),
        replace in prop::sample::select(vec![Replace::Any, Replace::SpotOnly, Replace::OffSpot, Replace::Never]),
    ) {
        let case = shaped(pods, max_vcpus, shape, drop_empty, seed, ConsolidationPolicy::WhenEmptyOrUnderutilized, "100%", false);
        let snapshot = &case.snapshot;
        let solves = PassSolves::new(snapshot, now());
        for removed in removals {
            let removed: BTreeSet<usize> = removed.into_iter().filter(|&i| i < snapshot.nodes.len()).collect();
            let sketched = solves.outcome_unless(&removed, replace, &|| false, |sketch| {
                let stranded = sketch.first_stranded.map(|(pod, reason)| (pod.to_string(), reason.to_string()));
                Some((stranded, sketch.replacement_prices.clone(), sketch.replacement_price()))
            })
            .unwrap();
            let outcome = solves.outcome_unless(&removed, replace, &|| false, |_| None::<()>)
                .unwrap()
                .unwrap();
            let Err((stranded, prices, price)) = sketched else {
                return Err(TestCaseError::fail("no minValues here, so every placement has a sketch"));
            };
            prop_assert_eq!(stranded, outcome.stranded.first().cloned(), "removing {:?}", removed);
            let bits = |prices: &[f64]| prices.iter().map(|p| p.to_bits()).collect::<Vec<_>>();
            let written: Vec<f64> = outcome.replacements.iter().map(|c| c.price_per_hour).collect();
            prop_assert_eq!(bits(&prices), bits(&written), "removing {:?}", removed);
            prop_assert_eq!(price.to_bits(), outcome.replacement_price().to_bits());
        }
    }
}

/// The shapes leave consolidation work: on a uniform scale-in of 100 pods on sizes up to 4 vCPUs, the
/// fixpoint saves money. Keeps the property test honest about its inputs.
#[test]
fn a_uniform_scale_in_of_upstreams_pods_is_consolidated() {
    let case = shaped(
        100,
        4,
        Shape::Uniform,
        false,
        7,
        ConsolidationPolicy::WhenEmptyOrUnderutilized,
        "100%",
        false,
    );
    let options = Options::default();
    let before = price(&case.snapshot);
    let mut end = case.snapshot.clone();
    let first = decided_with_at(&end, &options, now());
    assert!(!first.commands.is_empty(), "a half-empty cluster has work");
    to_fixpoint(&mut end, first, now(), |s, at, judging| decided_with_at(s, &judging.options(&options), at));
    assert!(price(&end) < before, "{} → {}", before, price(&end));
    assert_eq!(running(&end), case.pods);
}
