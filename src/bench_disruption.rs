//! `karpenter-azure bench --workload fragmented`: the disruption decisions on a fragmented cluster.
//!
//! Provision the mixed workload ([`crate::bench::mixed_input`], 20,000 pods on the full eastus catalog)
//! as managed nodes, delete a seeded random half of the pods, then:
//! - time one full pass of [`crate::disruption::decide`] (every method, budgets unlimited) and read
//!   the peak RSS;
//! - apply the commands pass after pass until a pass decides nothing, and report the price before and
//!   after, the solver's lower bound for a from-scratch repack, nodes removed and launched, pods moved.
//!
//! The cluster is built from the solver's own plan, so the numbers measure the decisions, not I/O.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::apis::duration::NillableDuration;
use crate::apis::nodepool::ConsolidationPolicy;
use crate::bench::{mixed_input, peak_rss_kib};
use crate::disruption::applied::{managed_node, price, to_fixpoint, workload_pod, Judging};
use crate::disruption::{decide, Options, PoolPolicy, Snapshot};
use crate::scheduling::{solve, Pod, PodId};

/// The moment the cluster is judged at; nodes were launched two hours earlier.
const NOW: &str = "2026-12-01T12:00:00Z";
/// The share of pods the scale-in deletes, per mille, and the seed that picks them.
const DELETED_PER_MILLE: u64 = 500;
const SEED: u64 = 0x5eed_1234_abcd_0042;

/// What the benchmark measured.
#[derive(Clone, Debug)]
pub struct FragmentedResult {
    pub pods_provisioned: usize,
    pub pods_after_scale_in: usize,
    pub nodes: usize,
    /// One full pass on the fragmented cluster.
    pub first_pass: Duration,
    pub first_pass_commands: usize,
    pub peak_rss_kib: Option<u64>,
    pub passes: usize,
    pub total_decide_time: Duration,
    /// The last pass, which found nothing to do: every method tried and no move pays.
    pub last_pass: Duration,
    pub price_before: f64,
    pub price_after: f64,
    pub lower_bound: f64,
    pub nodes_removed: usize,
    pub nodes_launched: usize,
    pub pods_moved: usize,
    pub nodes_after: usize,
}

/// Runs the benchmark with `pods` provisioned pods and `options`; `max_vcpus` keeps only sizes up to
/// that many vCPUs (smaller nodes, so many more of them), `None` the full catalog.
pub fn run(pods: usize, max_vcpus: Option<u32>, options: &Options) -> FragmentedResult {
    let now: Timestamp = NOW.parse().expect("a valid time");
    let mut snapshot = fragmented_cluster(pods, max_vcpus, now);
    // A threshold only means something to a Balanced pool; 0 keeps upstream's default policy.
    if options.consolidation_threshold > 0.0 {
        for pool in &mut snapshot.nodepools {
            pool.consolidation_policy = ConsolidationPolicy::Balanced;
        }
    }
    let pods_after = snapshot.nodes.iter().map(|n| n.pods.iter().filter(|p| p.reschedulable()).count()).sum();
    let nodes = snapshot.nodes.len();
    let price_before = price(&snapshot);

    let started = Instant::now();
    let first = decide(&snapshot, now, options);
    let first_pass = started.elapsed();
    let peak = peak_rss_kib();
    let lower_bound = crate::disruption::repack_lower_bound(&snapshot);
    let first_pass_commands = first.commands.len();

    let (mut decide_time, mut last_pass) = (Duration::ZERO, first_pass);
    let fixpoint = to_fixpoint(&mut snapshot, first, now, |s, now, judging| {
        let started = Instant::now();
        let decisions = decide(s, now, &judging.options(options));
        let took = started.elapsed();
        decide_time += took;
        // The controller's pass, not the benchmark's judging of every candidate.
        if judging == Judging::Window {
            last_pass = took;
        }
        decisions
    });
    FragmentedResult {
        pods_provisioned: pods,
        pods_after_scale_in: pods_after,
        nodes,
        first_pass,
        first_pass_commands,
        peak_rss_kib: peak,
        passes: fixpoint.passes,
        total_decide_time: first_pass + decide_time,
        last_pass,
        price_before,
        price_after: price(&snapshot),
        lower_bound,
        nodes_removed: fixpoint.nodes_removed,
        nodes_launched: fixpoint.nodes_launched,
        pods_moved: fixpoint.pods_moved,
        nodes_after: snapshot.nodes.len(),
    }
}

/// The mixed workload provisioned by the solver, as managed nodes launched two hours before `now`,
/// with a seeded random half of the pods deleted.
pub fn fragmented_cluster(pods: usize, max_vcpus: Option<u32>, now: Timestamp) -> Snapshot {
    provisioned_cluster(pods, max_vcpus, now, DELETED_PER_MILLE)
}

/// The mixed workload provisioned by the solver, as managed nodes launched two hours before `now`,
/// with `deleted_per_mille` of the pods deleted at random (seeded).
fn provisioned_cluster(
    pods: usize,
    max_vcpus: Option<u32>,
    now: Timestamp,
    deleted_per_mille: u64,
) -> Snapshot {
    let mut input = mixed_input(pods);
    if let Some(max) = max_vcpus {
        let pool = &mut input.nodepools[0];
        let types = pool.instance_types.iter().filter(|t| t.vcpus <= max).cloned().collect();
        pool.instance_types = std::sync::Arc::new(types);
    }
    let plan = solve(&input);
    let by_id: BTreeMap<PodId, &Pod> = input.pods.iter().map(|p| (p.id(), p.as_ref())).collect();
    let launched = now.checked_sub(SignedDuration::from_hours(2)).expect("in range");
    let mut rng = SplitMix(SEED);
    let mut nodes = vec![];
    for claim in &plan.nodeclaims {
        let mut node = managed_node(claim, &claim.name, &input.daemonsets, launched);
        for id in &claim.pods {
            if rng.next_u64() % 1000 < deleted_per_mille {
                continue;
            }
            node.pods.push(workload_pod(by_id[id], &claim.name, launched));
        }
        nodes.push(node);
    }
    let pool = input.nodepools[0].clone();
    Snapshot {
        nodes,
        nodepools: vec![PoolPolicy {
            name: pool.name.clone(),
            consolidation_policy: ConsolidationPolicy::WhenEmptyOrUnderutilized,
            consolidate_after: NillableDuration::After(Duration::ZERO),
            expire_after: NillableDuration::Never,
            // Unlimited: the benchmark measures how far the decisions go, not how fast budgets let them.
            budgets: vec![],
            limits: None,
            solver: Some(pool),
            replicas: None,
        }],
        daemonsets: input.daemonsets.clone(),
        solve_options: input.options.clone(),
        ..Snapshot::default()
    }
}

/// One disruption pass on a settled cluster: what a large cluster pays every pass when nothing is
/// worth doing.
#[derive(Clone, Debug)]
pub struct SettledResult {
    pub pods: usize,
    pub nodes: usize,
    /// The pass without the repack bound (what upstream's pass computes), and its commands.
    pub pass: Duration,
    pub commands: usize,
    /// The repack lower bound alone, which the controller reports beside each pass.
    pub bound: Duration,
    pub peak_rss_kib: Option<u64>,
}

/// `karpenter-azure bench --workload settled`: the mixed workload of `pods` pods provisioned by the
/// solver and left as it is (nothing deleted), every node past its consolidateAfter, budgets
/// unlimited; times one pass of [`decide`] and, apart, the repack bound.
pub fn run_settled(pods: usize, max_vcpus: Option<u32>, options: &Options) -> SettledResult {
    let now: Timestamp = NOW.parse().expect("a valid time");
    let snapshot = provisioned_cluster(pods, max_vcpus, now, 0);
    let started = Instant::now();
    let decisions = decide(&snapshot, now, options);
    let pass = started.elapsed();
    let started = Instant::now();
    std::hint::black_box(crate::disruption::repack_lower_bound(&snapshot));
    let bound = started.elapsed();
    SettledResult {
        pods,
        nodes: snapshot.nodes.len(),
        pass,
        commands: decisions.commands.len(),
        bound,
        peak_rss_kib: peak_rss_kib(),
    }
}

/// The report line of one settled cluster.
pub fn render_settled(r: &SettledResult) -> String {
    let rss = r.peak_rss_kib.map_or("-".to_string(), |k| format!("{:.0} MiB", k as f64 / 1024.0));
    format!(
        "settled cluster: {} pods on {} nodes: pass {:.2?} ({} command(s)), repack bound {:.2?}, peak RSS {rss}",
        r.pods, r.nodes, r.pass, r.commands, r.bound
    )
}

/// A small deterministic generator (SplitMix64), so the deleted half is the same on every run; the
/// disruption property tests shape their clusters with it too.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The report lines.
pub fn render(r: &FragmentedResult, options: &Options) -> String {
    let rss = r.peak_rss_kib.map_or("-".to_string(), |k| format!("{:.0} MiB", k as f64 / 1024.0));
    let ratio = |p: f64| if r.lower_bound > 0.0 { format!("{:.3}", p / r.lower_bound) } else { "-".into() };
    format!(
        "fragmented cluster: {} pods provisioned on {} nodes, {} left after deleting half (threshold {}, spot-to-spot {})\n\
         one pass: {:.2?}, {} command(s), peak RSS {rss}\n\
         fixpoint: {} passes in {:.2?} (the last, deciding nothing: {:.2?}); price {:.2} -> {:.2} $/h, repack lower bound {:.2} $/h (ratio {} -> {})\n\
         nodes removed {}, launched {}, {} -> {} nodes; pods moved {}",
        r.pods_provisioned,
        r.nodes,
        r.pods_after_scale_in,
        options.consolidation_threshold,
        if options.spot_to_spot_consolidation { "on" } else { "off" },
        r.first_pass,
        r.first_pass_commands,
        r.passes,
        r.total_decide_time,
        r.last_pass,
        r.price_before,
        r.price_after,
        r.lower_bound,
        ratio(r.price_before),
        ratio(r.price_after),
        r.nodes_removed,
        r.nodes_launched,
        r.nodes,
        r.nodes_after,
        r.pods_moved,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_fragmented_cluster_gets_cheaper_and_keeps_every_pod() {
        let options = Options { consolidation_threshold: 0.0, ..Options::default() };
        let now: Timestamp = NOW.parse().unwrap();
        let start = fragmented_cluster(200, Some(8), now);
        let pods =
            |s: &Snapshot| s.nodes.iter().flat_map(|n| n.pods.iter()).filter(|p| p.reschedulable()).count();
        let r = run(200, Some(8), &options);
        assert_eq!(r.pods_after_scale_in, pods(&start));
        assert!(r.pods_after_scale_in > 60 && r.pods_after_scale_in < 140, "about half deleted: {r:?}");
        assert!(r.price_after < r.price_before, "{r:?}");
        assert!(r.price_after >= r.lower_bound - 1e-9, "{r:?}");
        assert!(r.passes < crate::disruption::applied::MAX_PASSES, "a fixpoint is reached: {r:?}");
        assert!(r.pods_moved > 0 && r.nodes_removed > 0, "{r:?}");
        assert!(render(&r, &options).contains("fixpoint"));
    }

    #[test]
    fn a_settled_cluster_keeps_every_pod_and_its_pass_is_timed_apart_from_the_bound() {
        let now: Timestamp = NOW.parse().unwrap();
        let cluster = provisioned_cluster(200, Some(8), now, 0);
        let placed = cluster.nodes.iter().flat_map(|n| n.pods.iter()).filter(|p| p.reschedulable()).count();
        assert_eq!(placed, 200, "nothing is deleted from a settled cluster");
        let r = run_settled(200, Some(8), &Options::default());
        assert_eq!(r.nodes, cluster.nodes.len());
        assert!(r.pass > Duration::ZERO && r.bound > Duration::ZERO, "{r:?}");
        let line = render_settled(&r);
        assert!(
            line.starts_with(&format!("settled cluster: 200 pods on {} nodes: pass ", r.nodes)),
            "{line}"
        );
    }
}
