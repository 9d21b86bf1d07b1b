//! Table and JSON output of a timeline run. JSON keys are only ever added.
//!
//! JSON: `{"summary": {...}, "steps": [{"offset_seconds", "time", "nodes", "nodes_by_pool",
//! "nodes_by_instance_type", "nodes_by_capacity_type", "price_per_hour", "lower_bound_per_hour",
//! "pending_pods", "starting_pods", "running_pods", "commands": [decision rows at that moment]}],
//! "decisions": [every decision row], "above_bound": [{"from_offset_seconds", "to_offset_seconds",
//! "price_per_hour", "lower_bound_per_hour", "ratio", "commands_executed", "causes": {cause: [nodes]},
//! "explanation"}]}`.

use std::fmt::Write;

use serde_json::{json, Value};

use super::above_bound;
use super::engine::Run;

/// Hours of virtual time and the cost integrated over them.
pub fn summary(run: &Run) -> Value {
    let (mut dollars, mut bound) = (0.0, 0.0);
    for pair in run.samples.windows(2) {
        let hours = (pair[1].offset_seconds - pair[0].offset_seconds) as f64 / 3600.0;
        dollars += pair[0].price_per_hour * hours;
        bound += pair[0].lower_bound_per_hour * hours;
    }
    let executed = run
        .decisions
        .iter()
        .filter(|d| d.outcome.starts_with("executed") && d.method != "expiration")
        .count();
    let invalid = run.decisions.iter().filter(|d| d.outcome.starts_with("invalid")).count();
    json!({
        "hours": run.samples.last().map_or(0.0, |s| s.offset_seconds as f64 / 3600.0),
        "cost_dollars": dollars,
        "lower_bound_dollars": bound,
        "peak_nodes": run.samples.iter().map(|s| s.nodes).max().unwrap_or(0),
        "peak_pending_pods": run.samples.iter().map(|s| s.pending_pods).max().unwrap_or(0),
        "nodes_launched": run.nodes_launched,
        "nodes_removed": run.nodes_removed,
        "pods_evicted": run.pods_evicted,
        "commands_executed": executed,
        "commands_invalidated": invalid,
    })
}

pub fn to_json(run: &Run) -> Value {
    let steps: Vec<Value> = run
        .samples
        .iter()
        .map(|s| {
            let mut step = serde_json::to_value(s).expect("a sample serialises");
            let commands: Vec<&super::engine::DecisionRow> =
                run.decisions.iter().filter(|d| d.offset_seconds == s.offset_seconds).collect();
            step["commands"] = serde_json::to_value(commands).expect("rows serialise");
            step
        })
        .collect();
    json!({
        "summary": summary(run),
        "steps": steps,
        "decisions": run.decisions,
        "above_bound": above_bound::stretches(run).iter().map(|s| {
            let mut v = serde_json::to_value(s).expect("a stretch serialises");
            v["explanation"] = Value::String(above_bound::describe(s));
            v
        }).collect::<Vec<_>>(),
    })
}

fn clock(offset_seconds: u64) -> String {
    let (h, m) = (offset_seconds / 3600, offset_seconds % 3600 / 60);
    format!("{h:>3}:{m:02}")
}

pub fn to_table(run: &Run) -> String {
    let mut out = String::new();
    let s = summary(run);
    let _ = writeln!(
        out,
        "Timeline: {:.1} h, ${:.2} spent (lower bound ${:.2}), peak {} nodes, {} launched, {} removed, {} pods evicted",
        s["hours"].as_f64().unwrap_or(0.0),
        s["cost_dollars"].as_f64().unwrap_or(0.0),
        s["lower_bound_dollars"].as_f64().unwrap_or(0.0),
        s["peak_nodes"],
        s["nodes_launched"],
        s["nodes_removed"],
        s["pods_evicted"],
    );
    let _ = writeln!(out, "\nHourly");
    let _ = writeln!(
        out,
        "{:>6}  {:>5}  {:>9}  {:>9}  {:>7}  {:<}",
        "time", "nodes", "$/h", "bound $/h", "pending", "capacity types"
    );
    let mut next_hour = 0;
    for sample in &run.samples {
        if sample.offset_seconds < next_hour {
            continue;
        }
        next_hour = (sample.offset_seconds / 3600 + 1) * 3600;
        let types: Vec<String> =
            sample.nodes_by_capacity_type.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "{:>6}  {:>5}  {:>9.3}  {:>9.3}  {:>7}  {}",
            clock(sample.offset_seconds),
            sample.nodes,
            sample.price_per_hour,
            sample.lower_bound_per_hour,
            sample.pending_pods,
            types.join(" ")
        );
    }
    let stretches = above_bound::stretches(run);
    if !stretches.is_empty() {
        let _ =
            writeln!(out, "\nAbove {}× the lower bound, and what stopped consolidation", above_bound::RATIO);
        for s in &stretches {
            let commands = match s.commands_executed {
                0 => "no command".to_string(),
                n => format!("{n} command(s)"),
            };
            let _ = writeln!(
                out,
                "{:>6}-{:<6} ${:.3}/h vs ${:.3}/h ({:.2}×), {commands}: {}",
                clock(s.from_offset_seconds).trim_start(),
                clock(s.to_offset_seconds).trim_start(),
                s.price_per_hour,
                s.lower_bound_per_hour,
                s.ratio,
                above_bound::describe(s)
            );
        }
    }
    let _ = writeln!(out, "\nDecisions");
    for d in &run.decisions {
        let what =
            if d.candidates.is_empty() { String::new() } else { format!(" {}", d.candidates.join(",")) };
        let with = if d.replacements.is_empty() {
            String::new()
        } else {
            format!(" -> {}", d.replacements.join(","))
        };
        let _ = writeln!(
            out,
            "{:>6}  {:<13} {:<26} {}{what}{with}  {}",
            clock(d.offset_seconds),
            d.reason,
            d.method,
            d.outcome,
            d.explanation
        );
    }
    out
}
