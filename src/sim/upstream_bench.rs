//! `karpenter-azure bench-upstream DIR`: our solver next to upstream Karpenter's scheduler on upstream's
//! own benchmark input, as `hack/upstream-bench.sh run DIR` writes it (one directory per size N holding
//! `pods.yaml`, `nodepool.yaml`, `catalog.json` and upstream's result `upstream.json`).
//!
//! Per size it builds the solver input exactly as `simulate` does, times only the solve (upstream's
//! number is only its `Solve` too), reads the peak resident set right after the solve, then checks
//! *both* plans with the independent feasibility checker ([`crate::scheduling::feasibility`]), so a
//! cheaper plan that breaks a rule cannot pass for a better one.
//!
//! Peak RSS is per process, so each size runs in a child process of the same binary
//! (`bench-upstream --one DIR/N`), which prints its [`SizeResult`] as JSON for the parent; the parent
//! renders one table. [`run`] takes the per-size measurement as a function so tests can measure in
//! process.
//!
//! Upstream's plan becomes a [`Plan`] of new NodeClaims as launched: the type, zone and capacity type
//! upstream's fake cloud provider picked, pinned in the claim's requirements (the checker then judges
//! the node that exists, not the set upstream could have launched); options are that type alone
//! (upstream.json gives only the count of its options); labels, allocatable and DaemonSet overhead are
//! derived from the pool, the catalog's type and the offering the same way a new node gets them; the
//! stated prices are kept, so the checker also verifies them against the catalog.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::command::{scenario_of, SimulateArgs, SimulateError};
use super::growth::{self, Point};
use crate::catalog::OutputFormat;
use crate::model::labels::{
    LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE,
};
use crate::model::requirements::Requirement;
use crate::model::resources::Resources;
use crate::model::selection::offering_labels;
use crate::model::CapacityType;
use crate::scheduling::feasibility::{self, Violation};
use crate::scheduling::input::tolerates_all;
use crate::scheduling::{NewNodeClaim, Plan, SolveInput, Unschedulable};

/// The region the input is built for: `simulate`'s default, which only labels the catalog's types.
const REGION: &str = "eastus";
/// Violation messages kept per plan (the counts per rule cover the rest).
const FIRST_MESSAGES: usize = 3;

/// A size directory or one of its files cannot be used; one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    /// The size's files, read as `simulate` reads them.
    #[error(transparent)]
    Simulate(#[from] SimulateError),
    /// A child process failed; its own one-line message.
    #[error("{0}")]
    Child(String),
}

pub(super) fn file_error(path: &Path, message: impl ToString) -> BenchError {
    BenchError::File { path: path.display().to_string(), message: message.to_string() }
}

/// Limits of one size's measurement; `None` waits as long as it takes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// Stop our solve after this long (the row then says so; there is no partial plan).
    pub solve_timeout: Option<Duration>,
    /// Give up on the feasibility checks after this long (they are quadratic, meant for small inputs).
    pub check_timeout: Option<Duration>,
}

/// What the feasibility checker said about one plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Feasibility {
    Ok,
    Violations {
        total: usize,
        /// Rule name to count.
        by_rule: BTreeMap<String, usize>,
        /// The first few messages, in the checker's order.
        first: Vec<String>,
    },
    NotChecked {
        reason: String,
    },
}

impl Feasibility {
    pub(super) fn from_check(result: Result<(), Vec<Violation>>) -> Self {
        match result {
            Ok(()) => Feasibility::Ok,
            Err(violations) => {
                let mut by_rule = BTreeMap::new();
                for v in &violations {
                    *by_rule.entry(format!("{:?}", v.rule)).or_insert(0) += 1;
                }
                let first = violations.iter().take(FIRST_MESSAGES).map(Violation::to_string).collect();
                Feasibility::Violations { total: violations.len(), by_rule, first }
            }
        }
    }

    pub(super) fn cell(&self) -> String {
        match self {
            Feasibility::Ok => "ok".into(),
            Feasibility::Violations { total, .. } => format!("{total} violations"),
            Feasibility::NotChecked { .. } => "not checked".into(),
        }
    }
}

/// One solver's result at one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideResult {
    pub solve_seconds: f64,
    pub pods_placed: usize,
    pub pods_pending: usize,
    pub nodeclaims: usize,
    pub price_per_hour: f64,
    /// Whole-process peak resident set after the solve (VmHWM); `None` where unknown.
    pub peak_rss_bytes: Option<u64>,
    pub feasibility: Feasibility,
}

/// Both solvers at one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeResult {
    /// The size directory's name (upstream's pod count).
    pub size: String,
    /// Pending pods in the input.
    pub pods: usize,
    /// `None` when the directory holds only the input (`hack/upstream-bench.sh input`: no
    /// upstream.json), for timing our solver alone at sizes upstream's scheduler takes too long on.
    pub upstream: Option<SideResult>,
    /// `None` when our solve was stopped; `note` says why.
    pub ours: Option<SideResult>,
    /// Our proven lower bound on the price of any plan placing the same pods ($/h).
    pub lower_bound_per_hour: Option<f64>,
    pub note: Option<String>,
}

// --- upstream.json -----------------------------------------------------------------------------------

/// The part of upstream.json this command reads (the file has more: memory statistics, versions).
#[derive(Debug, Deserialize)]
struct UpstreamReport {
    solve_seconds: f64,
    pods_placed: usize,
    pods_pending: usize,
    price_per_hour: f64,
    #[serde(default)]
    peak_rss_bytes: Option<u64>,
    plan: Vec<UpstreamClaim>,
    #[serde(default)]
    pending: Vec<UpstreamPending>,
}

/// A NodeClaim upstream launched, as upstream.json lists it (plans and disruption replacements).
#[derive(Debug, Deserialize)]
pub(super) struct UpstreamClaim {
    pub name: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
    #[serde(default)]
    pub pods: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct UpstreamPending {
    pod: String,
    error: String,
}

fn read_upstream(path: &Path) -> Result<UpstreamReport, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| file_error(path, e))?;
    parse_upstream(path, &text)
}

/// One of the upstream helpers' JSON files, its errors naming the file and the field.
pub(super) fn parse_upstream<T: serde::de::DeserializeOwned>(
    path: &Path,
    text: &str,
) -> Result<T, BenchError> {
    let mut json = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut json).map_err(|e| {
        let at = e.path().to_string();
        file_error(path, if at == "." { e.inner().to_string() } else { format!("{at}: {}", e.inner()) })
    })
}

/// Upstream's plan as a [`Plan`] over `input` (see the module doc for what each field becomes).
/// Mistakes in upstream's plan (an unknown type or offering, a pod listed twice) are left in for the
/// checker to report; only what makes the plan unreadable is an error.
fn upstream_plan(input: &SolveInput, report: &UpstreamReport, path: &Path) -> Result<Plan, BenchError> {
    let nodeclaims = upstream_claims(input, &report.plan, path)?;
    let unschedulable = report
        .pending
        .iter()
        .map(|p| Unschedulable { pod: p.pod.clone(), reason: p.error.clone() })
        .collect();
    Ok(Plan {
        existing: BTreeMap::new(),
        nodeclaims,
        unschedulable,
        price_per_hour: report.price_per_hour,
        lower_bound_per_hour: 0.0,
    })
}

/// NodeClaims upstream launched as [`NewNodeClaim`]s of `input`'s only NodePool, as launched (see the
/// module doc).
pub(super) fn upstream_claims(
    input: &SolveInput,
    claims: &[UpstreamClaim],
    path: &Path,
) -> Result<Vec<NewNodeClaim>, BenchError> {
    let [pool] = &input.nodepools[..] else {
        // upstream.json names no NodePool; the benchmark has exactly one.
        return Err(file_error(
            path,
            format!(
                "the plan names no NodePool, so the input needs exactly one (it has {})",
                input.nodepools.len()
            ),
        ));
    };
    let by_id: BTreeMap<String, &crate::scheduling::Pod> =
        input.pods.iter().map(|p| (p.id(), p.as_ref())).collect();
    let mut nodeclaims = Vec::with_capacity(claims.len());
    for (i, c) in claims.iter().enumerate() {
        let capacity_type = match c.capacity_type.as_str() {
            "spot" => CapacityType::Spot,
            "on-demand" => CapacityType::OnDemand,
            other => {
                return Err(file_error(
                    path,
                    format!("plan[{i}].capacity_type: unknown capacity type {other:?}"),
                ))
            }
        };
        let mut requirements = pool.requirements.clone();
        requirements.add(Requirement::is_in(LABEL_NODEPOOL, [pool.name.as_str()]));
        requirements.add(Requirement::is_in(LABEL_INSTANCE_TYPE, [c.instance_type.as_str()]));
        requirements.add(Requirement::is_in(LABEL_ZONE, [c.zone.as_str()]));
        requirements.add(Requirement::is_in(LABEL_CAPACITY_TYPE, [capacity_type.as_str()]));
        let it = pool.instance_types.iter().find(|t| t.name == c.instance_type);
        let offering = it
            .and_then(|t| t.offerings.iter().find(|o| o.zone == c.zone && o.capacity_type == capacity_type));
        // The labels a new node of this type and offering carries, as the checker derives them; an
        // unknown type or offering leaves them empty and the checker reports the claim.
        let mut labels = BTreeMap::new();
        if let (Some(it), Some(offering)) = (it, offering) {
            labels.extend(pool.labels.clone());
            for r in pool.requirements.iter() {
                if let Some(v) = r.single_value() {
                    labels.entry(r.key().to_string()).or_insert_with(|| v.to_string());
                }
            }
            labels.insert(LABEL_NODEPOOL.to_string(), pool.name.clone());
            labels.extend(it.labels.clone());
            labels.extend(offering_labels(offering).iter().map(|(k, v)| (k.to_string(), v.to_string())));
        }
        let daemon_overhead = input
            .daemonsets
            .iter()
            .filter(|ds| {
                tolerates_all(&ds.tolerations, &pool.taints)
                    && (ds.required_terms.is_empty() || ds.required_terms.iter().any(|t| t.matches(&labels)))
            })
            .fold(Resources::new(), |acc, ds| acc.add(&ds.requests));
        let requests = c
            .pods
            .iter()
            .filter_map(|id| by_id.get(id))
            .fold(daemon_overhead.clone(), |acc, p| acc.add(&p.requests));
        labels.insert(LABEL_HOSTNAME.to_string(), c.name.clone());
        nodeclaims.push(NewNodeClaim {
            name: c.name.clone(),
            nodepool: pool.name.clone(),
            instance_type: c.instance_type.clone(),
            instance_type_options: vec![c.instance_type.clone()],
            zone: c.zone.clone(),
            capacity_type,
            price_per_hour: c.price,
            requirements,
            labels,
            taints: pool.taints.clone(),
            startup_taints: pool.startup_taints.clone(),
            allocatable: it.map(|t| t.allocatable.clone()).unwrap_or_default(),
            requests,
            daemon_overhead,
            pods: c.pods.clone(),
        });
    }
    Ok(nodeclaims)
}

// --- one size ----------------------------------------------------------------------------------------

/// The solver input of a size directory, built as `simulate pods.yaml nodepool.yaml --catalog
/// catalog.json` builds it.
pub fn read_input(dir: &Path) -> Result<SolveInput, BenchError> {
    if !dir.is_dir() {
        return Err(file_error(dir, "not a directory"));
    }
    let args = SimulateArgs {
        files: vec![dir.join("pods.yaml"), dir.join("nodepool.yaml")],
        region: REGION.into(),
        catalog: Some(dir.join("catalog.json")),
        output: OutputFormat::Table,
        now: None,
        explain: vec![],
        sources: vec![],
    };
    Ok(scenario_of(&args)?.input)
}

/// Measures one size directory in this process: our solve (timed alone), the peak RSS right after it,
/// then both feasibility checks (in parallel, within `limits.check_timeout`).
pub fn measure(dir: &Path, limits: &Limits) -> Result<SizeResult, BenchError> {
    let input = Arc::new(read_input(dir)?);
    let started = Instant::now();
    let solved = match limits.solve_timeout {
        None => Ok(crate::scheduling::solve(&input)),
        Some(limit) => {
            let deadline = started + limit;
            crate::scheduling::solve_with_cancel(&input, &|| Instant::now() >= deadline)
        }
    };
    let solve_seconds = started.elapsed().as_secs_f64();
    let our_rss = peak_rss_bytes();
    let upstream_path = dir.join("upstream.json");
    let report = if upstream_path.is_file() { Some(read_upstream(&upstream_path)?) } else { None };
    let theirs = report.as_ref().map(|r| upstream_plan(&input, r, &upstream_path)).transpose()?;
    let size =
        dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
    let ours = solved.ok();
    let note = ours.is_none().then(|| format!("our solve stopped after {solve_seconds:.0} s"));
    let plans: Vec<Plan> = theirs.into_iter().chain(ours.clone()).collect();
    let mut verdicts = check_all(&input, plans, limits.check_timeout).into_iter();
    let no_result = || Feasibility::NotChecked { reason: "no result".into() };
    let upstream = report.as_ref().map(|report| SideResult {
        solve_seconds: report.solve_seconds,
        pods_placed: report.pods_placed,
        pods_pending: report.pods_pending,
        nodeclaims: report.plan.len(),
        price_per_hour: report.price_per_hour,
        peak_rss_bytes: report.peak_rss_bytes,
        feasibility: verdicts.next().unwrap_or_else(no_result),
    });
    let ours_side = ours.as_ref().map(|plan| SideResult {
        solve_seconds,
        pods_placed: plan.placed_pods(),
        pods_pending: plan.unschedulable.len(),
        nodeclaims: plan.nodeclaims.len(),
        price_per_hour: plan.price_per_hour,
        peak_rss_bytes: our_rss,
        feasibility: verdicts.next().unwrap_or_else(no_result),
    });
    Ok(SizeResult {
        size,
        pods: input.pods.len(),
        upstream,
        lower_bound_per_hour: ours.as_ref().map(|p| p.lower_bound_per_hour),
        ours: ours_side,
        note,
    })
}

/// Checks each plan on its own thread; a check still running at the deadline is reported as not
/// checked (the child process exits right after, which ends it).
fn check_all(input: &Arc<SolveInput>, plans: Vec<Plan>, timeout: Option<Duration>) -> Vec<Feasibility> {
    let started = Instant::now();
    let receivers: Vec<mpsc::Receiver<Feasibility>> = plans
        .into_iter()
        .map(|plan| {
            let (send, receive) = mpsc::channel();
            let input = Arc::clone(input);
            std::thread::spawn(move || {
                let _ = send.send(Feasibility::from_check(feasibility::check(&input, &plan)));
            });
            receive
        })
        .collect();
    receivers
        .into_iter()
        .map(|receive| {
            let verdict = match timeout {
                None => receive.recv().ok(),
                Some(limit) => receive.recv_timeout(limit.saturating_sub(started.elapsed())).ok(),
            };
            verdict.unwrap_or_else(|| Feasibility::NotChecked {
                reason: format!("the check took longer than {:.0} s", started.elapsed().as_secs_f64()),
            })
        })
        .collect()
}

/// This process's peak resident set (VmHWM in /proc/self/status), in bytes; `None` off Linux.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

// --- every size --------------------------------------------------------------------------------------

/// The size directories to measure: `dir/N` for each of `sizes`, or when none is given every size
/// directory of `dir` (numeric names), smallest first, or `dir` itself when it is one.
pub fn size_dirs(dir: &Path, sizes: &[String]) -> Result<Vec<PathBuf>, BenchError> {
    if !sizes.is_empty() {
        return sizes
            .iter()
            .map(|n| {
                let size = dir.join(n);
                if size.is_dir() {
                    Ok(size)
                } else {
                    Err(file_error(&size, "not a directory (no run of this size)"))
                }
            })
            .collect();
    }
    if dir.join("pods.yaml").is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| file_error(dir, e))?;
    let mut found: Vec<(u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u64>().ok()?, e.path())))
        .collect();
    if found.is_empty() {
        return Err(file_error(
            dir,
            "no size directories (numeric names, as hack/upstream-bench.sh run writes)",
        ));
    }
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// Measures the chosen sizes of `dir` (see [`size_dirs`]) with `measure_one` (normally a child process
/// per size), reporting each result as soon as it is known; stops at the first error.
pub fn run(
    dir: &Path,
    sizes: &[String],
    mut measure_one: impl FnMut(&Path) -> Result<SizeResult, BenchError>,
    mut report: impl FnMut(&SizeResult),
) -> Result<Vec<SizeResult>, BenchError> {
    let mut results = vec![];
    for size in size_dirs(dir, sizes)? {
        let result = measure_one(&size)?;
        report(&result);
        results.push(result);
    }
    Ok(results)
}

/// Measures one size in a child process of `exe` (this binary), so that its peak RSS is that size's.
pub fn measure_in_child(exe: &Path, dir: &Path, limits: &Limits) -> Result<SizeResult, BenchError> {
    let mut command = std::process::Command::new(exe);
    command.arg("bench-upstream").arg("--one").arg(dir);
    if let Some(t) = limits.solve_timeout {
        command.arg("--solve-timeout").arg(t.as_secs().max(1).to_string());
    }
    // Always passed: the command's default is a limit, and 0 is how "none" is said.
    let check_timeout = limits.check_timeout.map_or(0, |t| t.as_secs().max(1));
    command.arg("--check-timeout").arg(check_timeout.to_string());
    let output = command.output().map_err(|e| file_error(exe, e))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let line = stderr.lines().last().unwrap_or("").trim_start_matches("error: ").to_string();
        return Err(BenchError::Child(if line.is_empty() {
            format!("{}: measuring failed ({})", dir.display(), output.status)
        } else {
            line
        }));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| {
        BenchError::Child(format!("{}: unreadable result from the child process: {e}", dir.display()))
    })
}

// --- output ------------------------------------------------------------------------------------------

const MIB: f64 = 1024.0 * 1024.0;

/// One aligned, markdown-like table of every size, then the violations found, if any.
pub fn render(results: &[SizeResult], output: OutputFormat) -> String {
    match output {
        OutputFormat::Json => {
            let mut text = serde_json::to_string_pretty(results).unwrap_or_else(|_| "[]".into());
            text.push('\n');
            text
        }
        OutputFormat::Table => table(results),
    }
}

fn table(results: &[SizeResult]) -> String {
    let headers = [
        "pods",
        "upstream s",
        "ours s",
        "speed-up",
        "placed up/ours",
        "$/h up/ours",
        "ours/up",
        "bound $/h",
        "ours/bound",
        "RSS MiB up/ours",
        "feasible up/ours",
    ];
    let rows: Vec<Vec<String>> = results.iter().map(row).collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            // Numbers right-aligned except the first column; the verdicts read better left-aligned.
            .map(|(i, (c, w))| if i + 1 == cells.len() { format!("{c:<w$}") } else { format!("{c:>w$}") })
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(headers.iter().map(|h| h.to_string()).collect());
    out.push_str(&format!("|{}|\n", widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("|")));
    for row in rows {
        out.push_str(&line(row));
    }
    for (label, side) in [("ours", true), ("upstream", false)] {
        let points: Vec<Point> = results
            .iter()
            .filter_map(|r| {
                let s = if side { r.ours.as_ref() } else { r.upstream.as_ref() }?;
                Some(Point { pods: r.pods, seconds: s.solve_seconds })
            })
            .collect();
        if points.len() > 1 {
            out.push('\n');
            out.push_str(&growth::render(label, &points));
        }
    }
    let details = details(results);
    if !details.is_empty() {
        out.push('\n');
        out.push_str(&details);
    }
    out
}

fn row(r: &SizeResult) -> Vec<String> {
    let up = r.upstream.as_ref();
    let ours = r.ours.as_ref();
    let dash = || "-".to_string();
    let rss = |b: Option<u64>| b.map_or_else(dash, |b| format!("{:.0}", b as f64 / MIB));
    let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.3}", a / b) } else { dash() };
    let both = |f: &dyn Fn(&SideResult, &SideResult) -> String| match (up, ours) {
        (Some(u), Some(o)) => f(u, o),
        _ => dash(),
    };
    let pair = |f: &dyn Fn(&SideResult) -> String| {
        format!("{}/{}", up.map_or_else(dash, f), ours.map_or_else(dash, f))
    };
    vec![
        r.pods.to_string(),
        up.map_or_else(dash, |u| format!("{:.2}", u.solve_seconds)),
        ours.map_or_else(dash, |o| format!("{:.2}", o.solve_seconds)),
        both(&|u, o| {
            if o.solve_seconds > 0.0 {
                format!("{:.1}x", u.solve_seconds / o.solve_seconds)
            } else {
                dash()
            }
        }),
        pair(&|s| s.pods_placed.to_string()),
        pair(&|s| format!("{:.2}", s.price_per_hour)),
        both(&|u, o| ratio(o.price_per_hour, u.price_per_hour)),
        r.lower_bound_per_hour.map_or_else(dash, |b| format!("{b:.2}")),
        match (ours, r.lower_bound_per_hour) {
            (Some(o), Some(b)) => ratio(o.price_per_hour, b),
            _ => dash(),
        },
        pair(&|s| rss(s.peak_rss_bytes)),
        format!(
            "{} / {}",
            up.map_or_else(|| "not run".to_string(), |u| u.feasibility.cell()),
            ours.map_or_else(|| "no plan".to_string(), |o| o.feasibility.cell())
        ),
    ]
}

/// Per size and solver: notes, and violation counts per rule with the first messages.
fn details(results: &[SizeResult]) -> String {
    let mut out = String::new();
    for r in results {
        if let Some(note) = &r.note {
            out.push_str(&format!("{} pods: {note}\n", r.pods));
        }
        let sides = [("upstream", r.upstream.as_ref()), ("ours", r.ours.as_ref())];
        for (who, side) in sides {
            match side.map(|s| &s.feasibility) {
                Some(Feasibility::Violations { total, by_rule, first }) => {
                    let rules: Vec<String> = by_rule.iter().map(|(rule, n)| format!("{rule} {n}")).collect();
                    out.push_str(&format!(
                        "{} pods, {who}: {total} violations ({})\n",
                        r.pods,
                        rules.join(", ")
                    ));
                    for message in first {
                        out.push_str(&format!("  {message}\n"));
                    }
                }
                Some(Feasibility::NotChecked { reason }) => {
                    out.push_str(&format!("{} pods, {who}: not checked: {reason}\n", r.pods));
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "upstream_bench_tests.rs"]
mod tests;
