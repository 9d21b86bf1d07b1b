//! `karpenter-azure bench-upstream-disruption DIR`: our disruption decision next to upstream Karpenter's
//! on the same cluster, as `hack/upstream-disruption.sh run DIR` writes it (one directory per size and
//! shape, `DIR/<nodes>/<shape>/`, holding `nodes.yaml`, `nodeclaims.yaml`, `pods.yaml`, `nodepool.yaml`,
//! `catalog.json` and upstream's result `upstream.json`).
//!
//! Per directory and consolidation policy it builds the disruption snapshot exactly as `simulate` does,
//! sets every pool's policy, and times one [`crate::disruption::decide`] (one pass; upstream's number
//! is one pass of its methods too). Our side is then applied pass after pass, each 10 s after the one
//! before as in the controller, until a pass that judges every single-node candidate decides nothing
//! ([`crate::disruption::applied::to_fixpoint`]), and the price there is set against the repack
//! lower bound. The outcome of each side — its candidates gone, its replacements
//! launched, the moved pods where it put them — is checked by the independent feasibility checker
//! ([`crate::scheduling::feasibility`]) on the solver input of the cluster without the candidates
//! ([`crate::disruption::simulate::input_without`]); upstream's replacements become NodeClaims as
//! `bench-upstream` reads upstream's plan ([`super::upstream_bench`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::command::{objects_and_scenario, SimulateArgs};
use super::managed;
use super::upstream_bench::{
    file_error, peak_rss_bytes, upstream_claims, BenchError, Feasibility, UpstreamClaim,
};
use crate::apis::nodepool::ConsolidationPolicy;
use crate::catalog::OutputFormat;
use crate::disruption::simulate::{input_without, Replace};
use crate::disruption::Snapshot;
use crate::scheduling::{feasibility, NewNodeClaim, Plan};

/// The region the catalog's types are labelled for: `simulate`'s default.
const REGION: &str = "eastus";
/// The policies compared, in upstream.json's order.
const POLICIES: [(&str, ConsolidationPolicy); 2] = [
    ("WhenEmptyOrUnderutilized", ConsolidationPolicy::WhenEmptyOrUnderutilized),
    ("Balanced", ConsolidationPolicy::Balanced),
];

/// One side's single pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassResult {
    /// The method that produced the commands (none: nothing to do).
    pub method: String,
    pub commands: usize,
    pub nodes_removed: usize,
    pub nodes_created: usize,
    pub savings_per_hour: f64,
    pub pods_moved: usize,
    pub pass_seconds: f64,
    /// Whole-process peak resident set after the pass (VmHWM).
    pub peak_rss_bytes: Option<u64>,
    pub feasibility: Feasibility,
}

/// Both sides on one cluster under one policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The size directory's name (nodes asked for).
    pub size: String,
    pub shape: String,
    pub policy: String,
    /// When both our pass and our fixpoint judged disruption (RFC 3339).
    pub now: String,
    /// Managed nodes and bound pods of the cluster.
    pub nodes: usize,
    pub pods: usize,
    pub price_per_hour: f64,
    /// Our proven lower bound on the price of repacking every pod on fresh capacity ($/h).
    pub lower_bound_per_hour: f64,
    /// What our solver's plan for that from-scratch repack costs ($/h): the floor moves could reach
    /// if every pod could move at once; between it and the bound is the bound's own gap.
    pub repack_plan_per_hour: f64,
    /// Time to solve for the repack plan and its bound, which our pass leaves out (as upstream's pass
    /// has no bound).
    pub bound_seconds: f64,
    pub upstream: Option<PassResult>,
    pub ours: PassResult,
    /// Ours applied pass after pass until a pass decides nothing.
    pub ours_fixpoint: FixpointResult,
}

/// Our decisions applied pass after pass on the same cluster until a pass that judges every
/// single-node candidate decides nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixpointResult {
    /// Passes whose commands were applied.
    pub passes: usize,
    /// Of those, the passes that judged every single-node candidate.
    pub sweeps: usize,
    /// Cluster time from the first pass to the last.
    pub minutes: f64,
    pub nodes_removed: usize,
    pub nodes_created: usize,
    pub pods_moved: usize,
    pub savings_per_hour: f64,
    pub price_per_hour: f64,
    /// `price_per_hour` over the repack lower bound.
    pub bound_ratio: f64,
    /// Every pass, the first included.
    pub decide_seconds: f64,
}

// --- upstream.json -----------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
struct UpstreamRun {
    policies: Vec<UpstreamPolicy>,
}

#[derive(Debug, Deserialize)]
struct UpstreamPolicy {
    policy: String,
    method: String,
    pass_seconds: f64,
    #[serde(default)]
    peak_rss_bytes: Option<u64>,
    nodes_removed: usize,
    nodes_created: usize,
    pods_moved: usize,
    savings_per_hour: f64,
    commands: Vec<UpstreamCommand>,
}

#[derive(Debug, Deserialize)]
struct UpstreamCommand {
    candidates: Vec<UpstreamCandidate>,
    replacements: Vec<UpstreamClaim>,
    moves: Vec<UpstreamMove>,
}

#[derive(Debug, Deserialize)]
struct UpstreamCandidate {
    node: String,
}

#[derive(Debug, Deserialize)]
struct UpstreamMove {
    pod: String,
    to: String,
}

fn read_upstream(path: &Path) -> Result<UpstreamRun, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| file_error(path, e))?;
    super::upstream_bench::parse_upstream(path, &text)
}

// --- one directory -----------------------------------------------------------------------------------

/// The disruption snapshot of a directory, built as `simulate` builds it from the same files.
pub fn read_snapshot(dir: &Path) -> Result<Snapshot, BenchError> {
    let files = ["nodes.yaml", "nodeclaims.yaml", "pods.yaml", "nodepool.yaml"];
    let args = SimulateArgs {
        files: files.iter().map(|f| dir.join(f)).collect(),
        region: REGION.into(),
        catalog: Some(dir.join("catalog.json")),
        output: OutputFormat::Table,
        now: None,
        explain: vec![],
        sources: vec![],
    };
    let (objects, scenario) = objects_and_scenario(&args)?;
    let mut warnings = vec![];
    managed::snapshot(&objects, &scenario, &mut warnings).map_err(|e| BenchError::Simulate(e.into()))
}

/// How long after a cluster's last event our side judges it when no time is given.
pub const SETTLED_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// An hour after the cluster's last NodeClaim creation, initialization or pod event: every
/// `consolidateAfter` up to an hour has passed, and the same input is judged at the same time in
/// every run (the single-node window moves with the time, so the current time would make the
/// fixpoint differ from run to run).
pub fn settled_now(snapshot: &Snapshot) -> Timestamp {
    let last = snapshot
        .nodes
        .iter()
        .flat_map(|n| [Some(n.created), n.initialized, n.last_pod_event])
        .flatten()
        .max()
        .unwrap_or(Timestamp::UNIX_EPOCH);
    last.checked_add(SETTLED_AFTER).unwrap_or(last)
}

/// Measures one directory: per policy, our pass and both outcomes' feasibility, at `now` or, without
/// one, at [`settled_now`].
pub fn measure(dir: &Path, now: Option<Timestamp>) -> Result<Vec<Row>, BenchError> {
    let base = read_snapshot(dir)?;
    let now = now.unwrap_or_else(|| settled_now(&base));
    let upstream_path = dir.join("upstream.json");
    let upstream = if upstream_path.is_file() { Some(read_upstream(&upstream_path)?) } else { None };
    let name = |p: Option<&Path>| {
        p.and_then(Path::file_name).map_or(String::new(), |n| n.to_string_lossy().into_owned())
    };
    let shape = name(Some(dir));
    let size = name(dir.parent());
    let options = crate::disruption::Options::default();
    let mut rows = vec![];
    for (policy_name, policy) in POLICIES {
        let mut snapshot = base.clone();
        for pool in &mut snapshot.nodepools {
            pool.consolidation_policy = policy;
        }
        let started = Instant::now();
        let decisions = crate::disruption::decide(&snapshot, now, &options);
        let pass_seconds = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let repack = crate::disruption::repack(&snapshot);
        let bound_seconds = started.elapsed().as_secs_f64();
        let lower_bound_per_hour = repack.lower_bound_per_hour;
        let rss = peak_rss_bytes();
        let removed: Vec<String> = decisions.commands.iter().flat_map(|c| c.candidates.clone()).collect();
        let moves: Vec<(String, String)> = decisions
            .commands
            .iter()
            .flat_map(|c| c.moves.iter().map(|m| (m.pod.clone(), m.to.clone())))
            .collect();
        let replacements: Vec<NewNodeClaim> =
            decisions.commands.iter().flat_map(|c| c.replacements.clone()).collect();
        let ours = PassResult {
            method: decisions.commands.first().map_or("-".into(), |c| c.method.as_str().to_string()),
            commands: decisions.commands.len(),
            nodes_removed: removed.len(),
            nodes_created: replacements.len(),
            savings_per_hour: decisions.commands.iter().map(|c| c.savings_per_hour).sum(),
            pods_moved: moves.len(),
            pass_seconds,
            peak_rss_bytes: rss,
            feasibility: check_outcome(&snapshot, now, &removed, &moves, Ok(replacements)),
        };
        let theirs = match upstream.as_ref().and_then(|u| u.policies.iter().find(|p| p.policy == policy_name))
        {
            None => None,
            Some(p) => {
                let removed: Vec<String> =
                    p.commands.iter().flat_map(|c| c.candidates.iter().map(|n| n.node.clone())).collect();
                let moves: Vec<(String, String)> = p
                    .commands
                    .iter()
                    .flat_map(|c| c.moves.iter().map(|m| (m.pod.clone(), m.to.clone())))
                    .collect();
                let claims: Vec<&UpstreamClaim> =
                    p.commands.iter().flat_map(|c| c.replacements.iter()).collect();
                let input = removal_input(&snapshot, now, &removed);
                let owned: Vec<UpstreamClaim> = claims.iter().map(|c| clone_claim(c)).collect();
                let replacements = upstream_claims(&input, &owned, &upstream_path);
                Some(PassResult {
                    method: if p.method.is_empty() { "-".into() } else { p.method.clone() },
                    commands: p.commands.len(),
                    nodes_removed: p.nodes_removed,
                    nodes_created: p.nodes_created,
                    savings_per_hour: p.savings_per_hour,
                    pods_moved: p.pods_moved,
                    pass_seconds: p.pass_seconds,
                    peak_rss_bytes: p.peak_rss_bytes,
                    feasibility: check_outcome(&snapshot, now, &removed, &moves, replacements),
                })
            }
        };
        let ours_fixpoint =
            fixpoint(&snapshot, decisions.clone(), lower_bound_per_hour, now, &options, pass_seconds);
        rows.push(Row {
            size: size.clone(),
            shape: shape.clone(),
            policy: policy_name.to_string(),
            now: now.to_string(),
            nodes: snapshot.nodes.len(),
            pods: snapshot.nodes.iter().map(|n| n.pods.len()).sum(),
            price_per_hour: decisions.cluster_price_per_hour,
            lower_bound_per_hour,
            repack_plan_per_hour: repack.price_per_hour,
            bound_seconds,
            upstream: theirs,
            ours,
            ours_fixpoint,
        });
    }
    Ok(rows)
}

/// `first` and the passes after it applied to a copy of `snapshot` until a pass that judges every
/// single-node candidate decides nothing.
fn fixpoint(
    snapshot: &Snapshot,
    first: crate::disruption::Decisions,
    bound: f64,
    now: Timestamp,
    options: &crate::disruption::Options,
    first_seconds: f64,
) -> FixpointResult {
    use crate::disruption::applied::{price, to_fixpoint};
    let before = price(snapshot);
    let mut end = snapshot.clone();
    let mut decide_seconds = first_seconds;
    let run = to_fixpoint(&mut end, first, now, |s, now, judging| {
        let started = Instant::now();
        let decisions = crate::disruption::decide(s, now, &judging.options(options));
        decide_seconds += started.elapsed().as_secs_f64();
        decisions
    });
    let after = price(&end);
    FixpointResult {
        passes: run.passes,
        sweeps: run.sweeps,
        minutes: run.end.duration_since(now).as_secs_f64() / 60.0,
        nodes_removed: run.nodes_removed,
        nodes_created: run.nodes_launched,
        pods_moved: run.pods_moved,
        savings_per_hour: before - after,
        price_per_hour: after,
        bound_ratio: ratio(after, bound),
        decide_seconds,
    }
}

/// `price ÷ bound`, NaN without a bound.
fn ratio(price: f64, bound: f64) -> f64 {
    if bound > 0.0 {
        price / bound
    } else {
        f64::NAN
    }
}

fn clone_claim(c: &UpstreamClaim) -> UpstreamClaim {
    UpstreamClaim {
        name: c.name.clone(),
        instance_type: c.instance_type.clone(),
        zone: c.zone.clone(),
        capacity_type: c.capacity_type.clone(),
        price: c.price,
        pods: c.pods.clone(),
    }
}

/// The solver input of the cluster without the named nodes (unknown names are ignored here and
/// reported by the checker as pods left unplaced).
fn removal_input(snapshot: &Snapshot, now: Timestamp, removed: &[String]) -> crate::scheduling::SolveInput {
    let names: BTreeSet<&str> = removed.iter().map(String::as_str).collect();
    let indices: BTreeSet<usize> = snapshot
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| names.contains(n.node.name.as_str()))
        .map(|(i, _)| i)
        .collect();
    input_without(snapshot, &indices, now, Replace::Any)
}

/// Checks one outcome: the named nodes gone, `replacements` launched, each moved pod where `moves`
/// puts it (an existing node or a replacement).
fn check_outcome(
    snapshot: &Snapshot,
    now: Timestamp,
    removed: &[String],
    moves: &[(String, String)],
    replacements: Result<Vec<NewNodeClaim>, BenchError>,
) -> Feasibility {
    let replacements = match replacements {
        Ok(r) => r,
        Err(e) => return Feasibility::NotChecked { reason: e.to_string() },
    };
    let input = removal_input(snapshot, now, removed);
    let claim_names: BTreeSet<&str> = replacements.iter().map(|c| c.name.as_str()).collect();
    let mut existing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (pod, to) in moves {
        if !claim_names.contains(to.as_str()) {
            existing.entry(to.clone()).or_default().push(pod.clone());
        }
    }
    for pods in existing.values_mut() {
        pods.sort();
    }
    let plan = Plan {
        existing,
        price_per_hour: replacements.iter().map(|c| c.price_per_hour).sum(),
        nodeclaims: replacements,
        unschedulable: vec![],
        lower_bound_per_hour: 0.0,
    };
    Feasibility::from_check(feasibility::check(&input, &plan))
}

// --- every directory ---------------------------------------------------------------------------------

/// The directories to measure: `dir/<size>/<shape>` for each of `sizes` (all numeric subdirectories
/// when none is given), shapes in name order; or `dir` itself when it holds a cluster.
pub fn dirs(dir: &Path, sizes: &[String]) -> Result<Vec<PathBuf>, BenchError> {
    if dir.join("nodes.yaml").is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let subdirs = |d: &Path| -> Result<Vec<PathBuf>, BenchError> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(d)
            .map_err(|e| file_error(d, e))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        out.sort();
        Ok(out)
    };
    let size_dirs: Vec<PathBuf> = if sizes.is_empty() {
        let mut found: Vec<(u64, PathBuf)> = subdirs(dir)?
            .into_iter()
            .filter_map(|p| Some((p.file_name()?.to_str()?.parse::<u64>().ok()?, p)))
            .collect();
        found.sort();
        found.into_iter().map(|(_, p)| p).collect()
    } else {
        sizes.iter().map(|s| dir.join(s)).collect()
    };
    let mut out = vec![];
    for size in size_dirs {
        out.extend(subdirs(&size)?.into_iter().filter(|p| p.join("nodes.yaml").is_file()));
    }
    if out.is_empty() {
        return Err(file_error(
            dir,
            "no <size>/<shape> directories (as hack/upstream-disruption.sh run writes)",
        ));
    }
    Ok(out)
}

/// Measures every chosen directory in this process ([`measure`]).
pub fn run(dir: &Path, sizes: &[String], now: Option<Timestamp>) -> Result<Vec<Row>, BenchError> {
    let mut rows = vec![];
    for d in dirs(dir, sizes)? {
        rows.extend(measure(&d, now)?);
    }
    Ok(rows)
}

// --- output ------------------------------------------------------------------------------------------

const MIB: f64 = 1024.0 * 1024.0;

/// One aligned table, one row per size, shape and policy; or the rows as JSON.
pub fn render(rows: &[Row], output: OutputFormat) -> String {
    if let OutputFormat::Json = output {
        return serde_json::to_string_pretty(rows).unwrap_or_else(|_| "[]".into()) + "\n";
    }
    let headers = [
        "nodes",
        "shape",
        "policy",
        "pods",
        "$/h",
        "bound $/h",
        "bound s",
        "repack ÷ bound",
        "cmds up/ours",
        "-nodes up/ours",
        "+nodes up/ours",
        "saved $/h up/ours",
        "moved up/ours",
        "pass s up/ours",
        "RSS MiB up/ours",
        "feasible up/ours",
        "fixpoint passes",
        "fixpoint saved $/h",
        "fixpoint / bound",
    ];
    let dash = || "-".to_string();
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let up = r.upstream.as_ref();
            let o = &r.ours;
            let pair = |f: &dyn Fn(&PassResult) -> String| format!("{}/{}", up.map_or_else(dash, f), f(o));
            let rss =
                |p: &PassResult| p.peak_rss_bytes.map_or_else(dash, |b| format!("{:.0}", b as f64 / MIB));
            vec![
                format!("{} ({})", r.size, r.nodes),
                r.shape.clone(),
                r.policy.clone(),
                r.pods.to_string(),
                format!("{:.2}", r.price_per_hour),
                format!("{:.2}", r.lower_bound_per_hour),
                format!("{:.3}", r.bound_seconds),
                format!("{:.3}", ratio(r.repack_plan_per_hour, r.lower_bound_per_hour)),
                pair(&|p| p.commands.to_string()),
                pair(&|p| p.nodes_removed.to_string()),
                pair(&|p| p.nodes_created.to_string()),
                pair(&|p| format!("{:.2}", p.savings_per_hour)),
                pair(&|p| p.pods_moved.to_string()),
                pair(&|p| format!("{:.3}", p.pass_seconds)),
                pair(&rss),
                pair(&|p| p.feasibility.cell()),
                r.ours_fixpoint.passes.to_string(),
                format!("{:.2}", r.ours_fixpoint.savings_per_hour),
                format!("{:.3}", r.ours_fixpoint.bound_ratio),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &table {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(headers.iter().map(|h| h.to_string()).collect());
    out.push_str(&format!("|{}|\n", widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("|")));
    for row in table {
        out.push_str(&line(row));
    }
    for r in rows {
        for (who, side) in [("upstream", r.upstream.as_ref()), ("ours", Some(&r.ours))] {
            if let Some(Feasibility::Violations { total, first, .. }) = side.map(|s| &s.feasibility) {
                out.push_str(&format!("{} {} {} {who}: {total} violations\n", r.size, r.shape, r.policy));
                for m in first {
                    out.push_str(&format!("  {m}\n"));
                }
            }
        }
    }
    out
}
