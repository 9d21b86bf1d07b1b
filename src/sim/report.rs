//! What `simulate` prints: a readable table (new NodeClaims, pods placed on existing nodes,
//! unschedulable pods with reasons, totals, warnings) or the JSON contract documented in docs/simulate.md.
//! Pure formatting of a [`Plan`] and the input it was computed from.

use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use crate::catalog::OutputFormat;
use crate::disruption::command::{human, reason_str};
use crate::disruption::static_pools::StaticAction;
use crate::disruption::{Decisions, Expired};
use crate::model::resources::{format_resource_quantity, CPU, MEMORY};
use crate::scheduling::{NewNodeClaim, Plan, SolveInput};

/// What the command measured and decided, ready to print.
pub struct Report<'a> {
    pub input: &'a SolveInput,
    pub plan: &'a Plan,
    /// Wall-clock time of the solve, measured by the command (the solver does not read the clock).
    pub solve_ms: f64,
    /// Shown in the table output only, so the JSON stays a stable contract.
    pub warnings: &'a [String],
    /// What disruption would do to the managed nodes now.
    pub disruption: Option<&'a DisruptionReport>,
}

/// The disruption decisions at one moment, and the NodeClaims past their expireAfter.
pub struct DisruptionReport {
    pub decisions: Decisions,
    /// The repack lower bound of the cluster ($/h), see [`crate::disruption::repack_lower_bound`].
    pub repack_lower_bound_per_hour: f64,
    pub expired: Vec<Expired>,
    /// What the static NodePools need to hold their replica counts.
    pub static_pools: Vec<StaticAction>,
    pub now: Timestamp,
}

/// Renders the report in the chosen format, ending with a newline.
pub fn render(report: &Report, output: OutputFormat) -> String {
    match output {
        OutputFormat::Table => table(report),
        OutputFormat::Json => {
            let mut text = serde_json::to_string_pretty(&to_json(report)).unwrap_or_else(|_| "{}".into());
            text.push('\n');
            text
        }
    }
}

/// The JSON contract; keys are never removed or renamed.
pub fn to_json(report: &Report) -> Value {
    let plan = report.plan;
    let nodeclaims: Vec<Value> = plan.nodeclaims.iter().map(nodeclaim_json).collect();
    let existing_nodes: Vec<Value> = report
        .input
        .nodes
        .iter()
        .map(|n| json!({"name": n.name, "pods": plan.existing.get(&n.name).cloned().unwrap_or_default()}))
        .collect();
    let unschedulable: Vec<Value> =
        plan.unschedulable.iter().map(|u| json!({"pod": u.pod, "reason": u.reason})).collect();
    let mut out = json!({
        "region": report.input.options.region,
        "solve_ms": report.solve_ms,
        "price_per_hour": plan.price_per_hour,
        "lower_bound_per_hour": plan.lower_bound_per_hour,
        "nodeclaims": nodeclaims,
        "existing_nodes": existing_nodes,
        "unschedulable": unschedulable,
        "warnings": report.warnings,
    });
    if let Some(d) = report.disruption {
        out["disruption"] = disruption_json(d);
    }
    out
}

/// One `"nodeclaims"` entry; disruption replacements have the same shape.
fn nodeclaim_json(c: &NewNodeClaim) -> Value {
    json!({
        "name": c.name,
        "nodepool": c.nodepool,
        "instance_type": c.instance_type,
        "instance_type_options": c.instance_type_options,
        "zone": c.zone,
        "capacity_type": c.capacity_type.as_str(),
        "price_per_hour": c.price_per_hour,
        "labels": c.labels,
        "taints": c.taints,
        "allocatable": c.allocatable.to_quantities(),
        "pods": c.pods,
    })
}

/// The `"disruption"` key of the contract.
pub fn disruption_json(report: &DisruptionReport) -> Value {
    let d = &report.decisions;
    let commands: Vec<Value> = d
        .commands
        .iter()
        .map(|c| {
            json!({
                "reason": reason_str(c.reason),
                "method": c.method.as_str(),
                "candidates": c.candidates,
                "replacements": c.replacements.iter().map(nodeclaim_json).collect::<Vec<_>>(),
                "savings_per_hour": c.savings_per_hour,
                "disruption_cost": c.disruption_cost,
                "moves": c.moves.iter().map(|m| json!({"pod": m.pod, "to": m.to})).collect::<Vec<_>>(),
                "explanation": c.explanation,
            })
        })
        .collect();
    json!({
        "now": report.now.to_string(),
        "cluster_price_per_hour": d.cluster_price_per_hour,
        "repack_lower_bound_per_hour": report.repack_lower_bound_per_hour,
        "commands": commands,
        "blocked": d.blocked.iter().map(|b| json!({"node": b.node, "reason": b.reason.to_string()})).collect::<Vec<_>>(),
        "expired": report.expired.iter().map(|e| json!({
            "node": e.node,
            "nodeclaim": e.nodeclaim,
            "nodepool": e.nodepool,
            "expired_at": e.expired_at.to_string(),
        })).collect::<Vec<_>>(),
        "static_nodepools": report.static_pools.iter().map(static_json).collect::<Vec<_>>(),
    })
}

fn static_json(action: &StaticAction) -> Value {
    match action {
        StaticAction::Launch { nodepool, claims } => json!({
            "nodepool": nodepool,
            "action": "launch",
            "nodeclaims": claims.iter().map(nodeclaim_json).collect::<Vec<_>>(),
        }),
        StaticAction::Remove { nodepool, nodeclaims } => {
            json!({"nodepool": nodepool, "action": "remove", "nodeclaims": nodeclaims})
        }
        StaticAction::Blocked { nodepool, reason } => {
            json!({"nodepool": nodepool, "action": "blocked", "reason": reason})
        }
    }
}

/// One line per static NodePool that is off its replica count.
fn static_lines(actions: &[StaticAction]) -> String {
    let mut out = String::new();
    for action in actions {
        let line = match action {
            StaticAction::Launch { nodepool, claims } => format!(
                "Static NodePool {nodepool}: launch {} NodeClaim(s) of {} to reach its replicas\n",
                claims.len(),
                claims.first().map(|c| c.instance_type.as_str()).unwrap_or_default()
            ),
            StaticAction::Remove { nodepool, nodeclaims } => {
                format!("Static NodePool {nodepool}: remove {} over its replicas\n", nodeclaims.join(", "))
            }
            StaticAction::Blocked { nodepool, reason } => {
                format!("Static NodePool {nodepool}: short of its replicas: {reason}\n")
            }
        };
        out.push_str(&line);
    }
    out
}

/// The table's "Disruption" section.
fn disruption_table(report: &DisruptionReport) -> String {
    let d = &report.decisions;
    let managed = d.blocked.len() + d.commands.iter().map(|c| c.candidates.len()).sum::<usize>();
    let ratio = crate::disruption::repack_ratio(d.cluster_price_per_hour, report.repack_lower_bound_per_hour);
    let ratio = if ratio.is_finite() { format!("{ratio:.3}") } else { "-".to_string() };
    let mut out = format!(
        "\nDisruption at {}: {managed} managed nodes, {:.4} $/h (repack lower bound {:.4} $/h, ratio {ratio})\n",
        report.now, d.cluster_price_per_hour, report.repack_lower_bound_per_hour
    );
    if d.commands.is_empty() {
        out.push_str("No disruption commands.\n");
    } else {
        let rows: Vec<Vec<String>> = d
            .commands
            .iter()
            .map(|c| {
                vec![
                    reason_str(c.reason).to_string(),
                    c.method.as_str().to_string(),
                    c.candidates.join(","),
                    c.replacements.iter().map(|r| r.instance_type.clone()).collect::<Vec<_>>().join(","),
                    format!("{:.4}", c.savings_per_hour),
                    c.moves.len().to_string(),
                    c.explanation.clone(),
                ]
            })
            .collect();
        let headers = ["REASON", "METHOD", "CANDIDATES", "REPLACEMENTS", "SAVES $/h", "MOVES", "EXPLANATION"];
        out.push_str(&columns(&headers, &rows));
    }
    if !d.blocked.is_empty() {
        out.push_str("\nNot disrupted:\n");
        let rows: Vec<Vec<String>> =
            d.blocked.iter().map(|b| vec![b.node.clone(), b.reason.to_string()]).collect();
        out.push_str(&columns(&["NODE", "REASON"], &rows));
    }
    out.push_str(&static_lines(&report.static_pools));
    for e in &report.expired {
        let late = report.now.as_second().saturating_sub(e.expired_at.as_second()).max(0) as u64;
        out.push_str(&format!(
            "Expired: {} (NodeClaim {}) passed expireAfter {} ago; deleted without budgets\n",
            e.node,
            e.nodeclaim,
            human(std::time::Duration::from_secs(late))
        ));
    }
    out
}

/// Left-aligned columns separated by two spaces, without trailing blanks.
fn columns(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let headers: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    let mut out = String::new();
    for row in std::iter::once(&headers).chain(rows) {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn table(report: &Report) -> String {
    let (input, plan) = (report.input, report.plan);
    let mut out = format!(
        "Region {}: {} pending pods, {} running pods on {} nodes, {} NodePools, {} DaemonSets\n\n",
        input.options.region,
        input.pods.len(),
        input.running.len(),
        input.nodes.len(),
        input.nodepools.len(),
        input.daemonsets.len(),
    );
    if plan.nodeclaims.is_empty() {
        out.push_str("No new NodeClaims.\n");
    } else {
        out.push_str("New NodeClaims:\n");
        let rows: Vec<Vec<String>> = plan
            .nodeclaims
            .iter()
            .map(|c| {
                vec![
                    c.name.clone(),
                    c.nodepool.clone(),
                    c.instance_type.clone(),
                    c.zone.clone(),
                    c.capacity_type.as_str().to_string(),
                    format!("{:.4}", c.price_per_hour),
                    c.pods.len().to_string(),
                    format!(
                        "{}/{}",
                        format_resource_quantity(CPU, c.requests.get(CPU)),
                        format_resource_quantity(CPU, c.allocatable.get(CPU))
                    ),
                    format!("{}/{}Mi", c.requests.get(MEMORY) >> 20, c.allocatable.get(MEMORY) >> 20),
                ]
            })
            .collect();
        let headers =
            ["NAME", "NODEPOOL", "INSTANCE TYPE", "ZONE", "CAPACITY", "$/h", "PODS", "CPU", "MEMORY"];
        out.push_str(&columns(&headers, &rows));
    }
    let placed: Vec<Vec<String>> = plan
        .existing
        .iter()
        .filter(|(_, pods)| !pods.is_empty())
        .map(|(node, pods)| vec![node.clone(), pods.len().to_string()])
        .collect();
    if !placed.is_empty() {
        out.push_str("\nPlaced on existing nodes:\n");
        out.push_str(&columns(&["NODE", "PODS"], &placed));
    }
    if !plan.unschedulable.is_empty() {
        out.push_str("\nUnschedulable pods:\n");
        let rows: Vec<Vec<String>> =
            plan.unschedulable.iter().map(|u| vec![u.pod.clone(), u.reason.clone()]).collect();
        out.push_str(&columns(&["POD", "REASON"], &rows));
    }
    let ratio = plan.optimality_ratio();
    let ratio = if ratio.is_finite() { format!("{ratio:.3}") } else { "-".to_string() };
    out.push_str(&format!(
        "\nTotal: {} new nodes, {:.4} $/h (lower bound {:.4} $/h, ratio {ratio}); {} of {} pending pods placed; solved in {:.1} ms\n",
        plan.nodeclaims.len(),
        plan.price_per_hour,
        plan.lower_bound_per_hour,
        plan.placed_pods(),
        input.pods.len(),
        report.solve_ms,
    ));
    if let Some(d) = report.disruption {
        out.push_str(&disruption_table(d));
    }
    for warning in report.warnings {
        out.push_str(&format!("warning: {warning}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CapacityType;
    use crate::scheduling::{NewNodeClaim, Unschedulable};

    fn claim() -> NewNodeClaim {
        NewNodeClaim {
            name: "general-1".into(),
            nodepool: "general".into(),
            instance_type: "Standard_D2s_v5".into(),
            instance_type_options: vec!["Standard_D2s_v5".into()],
            zone: "eastus-1".into(),
            capacity_type: CapacityType::OnDemand,
            price_per_hour: 0.096,
            requirements: Default::default(),
            labels: Default::default(),
            taints: vec![],
            startup_taints: vec![],
            allocatable: Default::default(),
            requests: Default::default(),
            daemon_overhead: Default::default(),
            pods: vec!["default/a".into()],
        }
    }

    #[test]
    fn json_has_every_contract_key() {
        let input = SolveInput::default();
        let plan = Plan {
            nodeclaims: vec![claim()],
            unschedulable: vec![Unschedulable { pod: "default/b".into(), reason: "too big".into() }],
            price_per_hour: 0.096,
            lower_bound_per_hour: 0.09,
            ..Plan::default()
        };
        let value =
            to_json(&Report { input: &input, plan: &plan, solve_ms: 1.5, warnings: &[], disruption: None });
        for key in [
            "region",
            "solve_ms",
            "price_per_hour",
            "lower_bound_per_hour",
            "nodeclaims",
            "existing_nodes",
            "unschedulable",
        ] {
            assert!(value.get(key).is_some(), "{key}");
        }
        assert_eq!(value["nodeclaims"][0]["capacity_type"], "on-demand");
        let text = render(
            &Report { input: &input, plan: &plan, solve_ms: 1.5, warnings: &["w".into()], disruption: None },
            OutputFormat::Table,
        );
        assert!(
            text.contains("general-1") && text.contains("too big") && text.contains("warning: w"),
            "{text}"
        );
    }
}
