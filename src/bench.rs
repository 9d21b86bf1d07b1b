//! `karpenter-azure bench`: deterministic solver workloads and a runner that prints solve time,
//! throughput, nodes, price against the lower bound, and peak memory.
//!
//! Two workloads, both generated without randomness so runs are comparable across commits:
//! - [`upstream_input`]: upstream Karpenter's scheduling benchmark (`scheduling_benchmark_test.go`)
//!   — 400 synthetic types and five pod kinds — so pods/s compare with the published
//!   ~700–1,000 pods/s at 20,000 pods;
//! - [`mixed_input`]: Deployment-like groups of varied shapes against the real eastus catalog, with a
//!   DaemonSet, zonal spread, hostname anti-affinity and GPU pods.
//!
//! The generators are public so tests and future criterion benches reuse them. Numbers, not pass/fail.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::catalog::{instance_types, CapacityOptions, PriceTable, UnavailableOfferings};
use crate::model::labels::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_OS,
    LABEL_ZONE,
};
use crate::model::requirements::{Requirement, Requirements};
use crate::model::resources::{Resources, CPU, MEMORY, NVIDIA_GPU, PODS};
use crate::model::{CapacityType, InstanceType, Offering, Overhead};
use crate::scheduling::input::{PodAffinityTerm, TopologySpread, WhenUnsatisfiable};
use crate::scheduling::{NodePoolInput, Plan, Pod, SolveInput, SolveOptions};

const MI: i64 = 1 << 20;
const GI: i64 = 1 << 30;
const NAMESPACE: &str = "default";
const NODEPOOL: &str = "default";

/// Which workload to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    Upstream,
    Mixed,
    /// The disruption decisions on a fragmented cluster ([`crate::bench_disruption`]); `--sizes` is
    /// the number of pods provisioned before half are deleted.
    Fragmented,
    /// One disruption pass on a provisioned cluster with nothing deleted
    /// ([`crate::bench_disruption::run_settled`]); `--sizes` are the pods provisioned.
    Settled,
    /// NodeOverlays applied to the catalogs of a few pools ([`crate::bench_overlays`]); `--sizes` are
    /// overlay counts.
    Overlays,
    All,
}

impl Workload {
    fn expand(self) -> Vec<Workload> {
        match self {
            // The fragmented pass has its own report; see `crate::bench_disruption`.
            Workload::All => vec![Workload::Upstream, Workload::Mixed],
            Workload::Fragmented | Workload::Settled | Workload::Overlays => vec![],
            one => vec![one],
        }
    }

    fn name(self) -> &'static str {
        match self {
            Workload::Upstream => "upstream",
            Workload::Mixed => "mixed",
            Workload::Fragmented => "fragmented",
            Workload::Settled => "settled",
            Workload::Overlays => "overlays",
            Workload::All => "all",
        }
    }

    /// The solver input of this workload with `pods` pending pods.
    pub fn input(self, pods: usize) -> SolveInput {
        match self {
            Workload::Upstream | Workload::All => upstream_input(pods),
            Workload::Mixed | Workload::Fragmented | Workload::Settled | Workload::Overlays => {
                mixed_input(pods)
            }
        }
    }
}

// --- upstream --------------------------------------------------------------------------------------

/// Upstream's fake zones.
pub const UPSTREAM_ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

/// Upstream's `fake.InstanceTypes(400)`: type i has i+1 vCPU, 2(i+1) GiB, 10(i+1) pods, priced
/// 0.1 $/vCPU + 0.1 $/GiB, with spot in two zones and on-demand in three at the same price, and
/// allocatable equal to capacity (the fake has no overhead).
pub fn upstream_instance_types(count: usize) -> Vec<InstanceType> {
    (1..=count as i64)
        .map(|n| {
            let name = format!("fake-it-{}", n - 1);
            let capacity = Resources::new().with(CPU, n * 1000).with(MEMORY, 2 * n * GI).with(PODS, 10 * n);
            let price = 0.1 * n as f64 + 0.1 * (2 * n) as f64;
            let offer = |zone: &str, capacity_type| Offering {
                zone: zone.into(),
                capacity_type,
                price,
                available: true,
            };
            let mut offerings = vec![
                offer(UPSTREAM_ZONES[0], CapacityType::Spot),
                offer(UPSTREAM_ZONES[1], CapacityType::Spot),
            ];
            offerings.extend(UPSTREAM_ZONES.iter().map(|z| offer(z, CapacityType::OnDemand)));
            offerings.sort_by(|a, b| a.zone.cmp(&b.zone).then(a.capacity_type.cmp(&b.capacity_type)));
            let labels = [(LABEL_INSTANCE_TYPE, name.as_str()), (LABEL_ARCH, "amd64"), (LABEL_OS, "linux")];
            InstanceType {
                labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                name,
                vcpus: n as u32,
                memory_mib: (2 * n * 1024) as u64,
                allocatable: capacity.clone(),
                capacity,
                overhead: Overhead::default(),
                offerings,
            }
        })
        .collect()
}

/// One NodePool named `default` over `types`, unlimited, untainted.
pub fn nodepool(types: Vec<InstanceType>) -> NodePoolInput {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::is_in(LABEL_NODEPOOL, [NODEPOOL]));
    NodePoolInput {
        name: NODEPOOL.into(),
        weight: 0,
        requirements,
        labels: BTreeMap::new(),
        taints: vec![],
        startup_taints: vec![],
        remaining: None,
        instance_types: Arc::new(types),
        replicas: None,
    }
}

/// Upstream's `makeDiversePods(n)`: one fifth each of generic pods, zonal spread (maxSkew 1),
/// hostname spread (maxSkew 1), zonal self-affinity, and hostname anti-affinity on one shared label
/// (so one such pod per node); the remainder goes to the generic group.
pub fn upstream_pods(count: usize) -> Vec<Pod> {
    let fifth = count / 5;
    let kinds: [(&str, usize); 5] = [
        ("generic", count - 4 * fifth),
        ("zone-spread", fifth),
        ("host-spread", fifth),
        ("zone-affinity", fifth),
        ("host-anti-affinity", fifth),
    ];
    let cpus = [100, 250, 500, 1000, 1500];
    let memories = [100 * MI, 256 * MI, 512 * MI, GI, 1536 * MI, 2 * GI, 4 * GI];
    let mut pods = Vec::with_capacity(count);
    for (kind, n) in kinds {
        for _ in 0..n {
            let i = pods.len();
            let mut pod = pod(
                kind,
                i,
                Resources::new().with(CPU, cpus[i % cpus.len()]).with(MEMORY, memories[i % memories.len()]),
            );
            match kind {
                "zone-spread" => pod.topology_spread = vec![spread(kind, LABEL_ZONE, 1)],
                "host-spread" => pod.topology_spread = vec![spread(kind, LABEL_HOSTNAME, 1)],
                "zone-affinity" => pod.affinity = vec![term(kind, LABEL_ZONE)],
                "host-anti-affinity" => pod.anti_affinity = vec![term(kind, LABEL_HOSTNAME)],
                _ => {}
            }
            pods.push(pod);
        }
    }
    pods
}

/// The upstream benchmark: 400 types, one pool, no existing nodes, `pods` diverse pods.
pub fn upstream_input(pods: usize) -> SolveInput {
    SolveInput {
        pods: upstream_pods(pods).into_iter().map(Arc::new).collect(),
        nodepools: vec![nodepool(upstream_instance_types(400))],
        options: SolveOptions { region: "test-region".into(), ..SolveOptions::default() },
        ..SolveInput::default()
    }
}

// --- mixed -----------------------------------------------------------------------------------------

/// The eastus catalog with default capacity options and static prices.
pub fn eastus_catalog() -> Vec<InstanceType> {
    instance_types(
        "eastus",
        &CapacityOptions::default(),
        &PriceTable::static_for_region("eastus"),
        &UnavailableOfferings::new(),
        Duration::ZERO,
    )
    .expect("eastus is in the embedded catalog")
}

/// A pod group of the mixed workload: its share of the pods, its shape and its constraints.
struct Group {
    app: &'static str,
    /// Parts per thousand of the pods.
    share: usize,
    cpu: i64,
    memory: i64,
    gpus: i64,
    zone_spread: bool,
    hostname_anti_affinity: bool,
    spot_only: bool,
}

const MIXED_GROUPS: &[Group] = &[
    Group {
        app: "web",
        share: 350,
        cpu: 250,
        memory: 512 * MI,
        gpus: 0,
        zone_spread: true,
        hostname_anti_affinity: false,
        spot_only: false,
    },
    Group {
        app: "api",
        share: 150,
        cpu: 500,
        memory: GI,
        gpus: 0,
        zone_spread: true,
        hostname_anti_affinity: false,
        spot_only: false,
    },
    Group {
        app: "worker",
        share: 150,
        cpu: 1000,
        memory: 1536 * MI,
        gpus: 0,
        zone_spread: false,
        hostname_anti_affinity: false,
        spot_only: false,
    },
    Group {
        app: "cache",
        share: 100,
        cpu: 500,
        memory: 8 * GI,
        gpus: 0,
        zone_spread: true,
        hostname_anti_affinity: false,
        spot_only: false,
    },
    Group {
        app: "batch",
        share: 240,
        cpu: 2000,
        memory: 2 * GI,
        gpus: 0,
        zone_spread: false,
        hostname_anti_affinity: false,
        spot_only: true,
    },
    Group {
        app: "ingress",
        share: 5,
        cpu: 1000,
        memory: 2 * GI,
        gpus: 0,
        zone_spread: false,
        hostname_anti_affinity: true,
        spot_only: false,
    },
    Group {
        app: "training",
        share: 5,
        cpu: 4000,
        memory: 16 * GI,
        gpus: 1,
        zone_spread: false,
        hostname_anti_affinity: false,
        spot_only: false,
    },
];

/// `pods` pods in Deployment-like groups (small web pods, memory-heavy caches, cpu-heavy spot batch,
/// a few GPU pods, a modest hostname anti-affinity group), one DaemonSet, the full eastus catalog.
pub fn mixed_input(pods: usize) -> SolveInput {
    SolveInput {
        pods: mixed_pods(pods).into_iter().map(Arc::new).collect(),
        nodepools: vec![nodepool(eastus_catalog())],
        daemonsets: vec![Pod {
            owner: Some("DaemonSet/log-agent".into()),
            ..pod("log-agent", 0, Resources::new().with(CPU, 100).with(MEMORY, 128 * MI))
        }],
        options: SolveOptions { region: "eastus".into(), ..SolveOptions::default() },
        ..SolveInput::default()
    }
}

/// The pods of [`mixed_input`]; the last group absorbs rounding so the total is exactly `count`.
pub fn mixed_pods(count: usize) -> Vec<Pod> {
    let mut pods = Vec::with_capacity(count);
    for (g, group) in MIXED_GROUPS.iter().enumerate() {
        let n = if g + 1 == MIXED_GROUPS.len() {
            count - pods.len()
        } else {
            (count * group.share / 1000).max(1).min(count - pods.len())
        };
        for _ in 0..n {
            let mut requests = Resources::new().with(CPU, group.cpu).with(MEMORY, group.memory);
            if group.gpus > 0 {
                requests.set(NVIDIA_GPU, group.gpus);
            }
            let mut pod = pod(group.app, pods.len(), requests);
            if group.zone_spread {
                pod.topology_spread = vec![spread(group.app, LABEL_ZONE, 1)];
            }
            if group.hostname_anti_affinity {
                pod.anti_affinity = vec![term(group.app, LABEL_HOSTNAME)];
            }
            if group.spot_only {
                let mut spot = Requirements::new();
                spot.add(Requirement::is_in(LABEL_CAPACITY_TYPE, [CapacityType::Spot.as_str()]));
                pod.required_terms = vec![spot];
            }
            pods.push(pod);
        }
    }
    pods
}

// --- shared pod builders ---------------------------------------------------------------------------

/// A pending pod `<app>-<index>` labelled `app=<app>`, with `pods: 1` added to its requests.
fn pod(app: &str, index: usize, requests: Resources) -> Pod {
    Pod {
        namespace: NAMESPACE.into(),
        name: format!("{app}-{index}"),
        labels: BTreeMap::from([("app".to_string(), app.to_string())]).into(),
        requests: requests.with(PODS, 1),
        owner: Some(format!("ReplicaSet/{app}").into()),
        ..Pod::default()
    }
}

fn app_selector(app: &str) -> Requirements {
    let mut selector = Requirements::new();
    selector.add(Requirement::is_in("app", [app]));
    selector
}

fn spread(app: &str, key: &str, max_skew: u32) -> TopologySpread {
    TopologySpread {
        topology_key: key.into(),
        max_skew,
        min_domains: None,
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        selector: app_selector(app),
    }
}

fn term(app: &str, key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        selector: app_selector(app),
        namespaces: vec![NAMESPACE.into()],
        topology_key: key.into(),
    }
}

// --- runner ----------------------------------------------------------------------------------------

/// One measured solve.
#[derive(Debug, Clone)]
pub struct BenchResult {
    pub workload: &'static str,
    pub pods: usize,
    pub elapsed: Duration,
    pub placed: usize,
    pub unschedulable: usize,
    pub nodes: usize,
    pub price_per_hour: f64,
    pub lower_bound_per_hour: f64,
    /// The process's peak resident set so far (VmHWM), in KiB; `None` off Linux.
    pub peak_rss_kib: Option<u64>,
}

impl BenchResult {
    pub fn pods_per_second(&self) -> f64 {
        self.pods as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn from_plan(workload: Workload, pods: usize, elapsed: Duration, plan: &Plan) -> Self {
        BenchResult {
            workload: workload.name(),
            pods,
            elapsed,
            placed: plan.placed_pods(),
            unschedulable: plan.unschedulable.len(),
            nodes: plan.nodeclaims.len(),
            price_per_hour: plan.price_per_hour,
            lower_bound_per_hour: plan.lower_bound_per_hour,
            peak_rss_kib: peak_rss_kib(),
        }
    }
}

/// Solves each workload at each size with `solve` (normally [`crate::scheduling::solve`]; a parameter
/// so alternative solvers can be compared), reporting each result as soon as it is measured. Input
/// generation is outside the timed region, as in upstream's benchmark.
pub fn run(
    workload: Workload,
    sizes: &[usize],
    solve: impl Fn(&SolveInput) -> Plan,
    mut report: impl FnMut(&BenchResult),
) {
    for w in workload.expand() {
        for &size in sizes {
            let input = w.input(size);
            let started = Instant::now();
            let plan = solve(&input);
            let elapsed = started.elapsed();
            report(&BenchResult::from_plan(w, size, elapsed, &plan));
        }
    }
}

/// The table header matching [`render_row`].
pub fn render_header() -> String {
    format!(
        "{:<9} {:>6} {:>10} {:>9} {:>6} {:>7} {:>11} {:>11} {:>7} {:>9}",
        "workload",
        "pods",
        "time",
        "pods/s",
        "nodes",
        "unsched",
        "price $/h",
        "bound $/h",
        "ratio",
        "peak MiB"
    )
}

pub fn render_row(r: &BenchResult) -> String {
    let ratio =
        if r.lower_bound_per_hour > 0.0 { r.price_per_hour / r.lower_bound_per_hour } else { f64::NAN };
    let rss = r.peak_rss_kib.map_or("-".to_string(), |k| format!("{:.0}", k as f64 / 1024.0));
    format!(
        "{:<9} {:>6} {:>10} {:>9.0} {:>6} {:>7} {:>11.2} {:>11.2} {:>7.3} {:>9}",
        r.workload,
        r.pods,
        format!("{:.1?}", r.elapsed),
        r.pods_per_second(),
        r.nodes,
        r.unschedulable,
        r.price_per_hour,
        r.lower_bound_per_hour,
        ratio,
        rss
    )
}

/// Peak resident set size of this process (VmHWM in /proc/self/status), in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_types_follow_the_fake() {
        let types = upstream_instance_types(400);
        assert_eq!(types.len(), 400);
        let t = &types[3];
        assert_eq!(
            (t.allocatable.get(CPU), t.allocatable.get(MEMORY), t.allocatable.get(PODS)),
            (4000, 8 * GI, 40)
        );
        assert_eq!(t.offerings.len(), 5);
        assert_eq!(t.offerings.iter().filter(|o| o.capacity_type == CapacityType::Spot).count(), 2);
        assert!((t.offerings[0].price - 1.2).abs() < 1e-9);
    }

    #[test]
    fn generators_are_deterministic_and_sized() {
        for n in [1, 7, 1000] {
            assert_eq!(upstream_pods(n), upstream_pods(n));
            assert_eq!(upstream_pods(n).len(), n);
            assert_eq!(mixed_pods(n), mixed_pods(n));
            assert_eq!(mixed_pods(n).len(), n);
        }
        let pods = upstream_pods(1000);
        assert_eq!(pods.iter().filter(|p| !p.anti_affinity.is_empty()).count(), 200);
        assert_eq!(mixed_pods(20_000).iter().filter(|p| p.requests.get(NVIDIA_GPU) > 0).count(), 100);
    }

    #[test]
    fn reads_peak_rss_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_rss_kib().is_some_and(|k| k > 0));
        }
    }
}
