//! `simulate --explain`: for one pod or node, the decision the solver and the disruption decisions made
//! about it and the reason, in one or two lines. Pure formatting of what `simulate` computed
//! ([`Report`]): it reads the plan (placed, unschedulable), the disruption commands (moved, removed,
//! replaced, saving) and the blocked nodes (kept, and why).

use serde_json::{json, Value};

use super::report::Report;
use crate::disruption::command::{reason_str, Command};
use crate::scheduling::NewNodeClaim;

/// What `--explain` names: `pod/NAMESPACE/NAME` (or `pod/NAME` in `default`) or `node/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Pod { namespace: String, name: String },
    Node(String),
}

impl Target {
    /// Parses `pod/NS/NAME`, `pod/NAME` or `node/NAME`.
    pub fn parse(text: &str) -> Result<Target, String> {
        let parts: Vec<&str> = text.split('/').collect();
        let bad = || format!("--explain {text:?}: expected pod/NAMESPACE/NAME, pod/NAME or node/NAME");
        match parts.as_slice() {
            ["pod" | "pods" | "po", ns, name] if !ns.is_empty() && !name.is_empty() => {
                Ok(Target::Pod { namespace: ns.to_string(), name: name.to_string() })
            }
            ["pod" | "pods" | "po", name] if !name.is_empty() => {
                Ok(Target::Pod { namespace: "default".into(), name: name.to_string() })
            }
            ["node" | "nodes" | "no", name] if !name.is_empty() => Ok(Target::Node(name.to_string())),
            _ => Err(bad()),
        }
    }

    fn display(&self) -> String {
        match self {
            Target::Pod { namespace, name } => format!("pod/{namespace}/{name}"),
            Target::Node(name) => format!("node/{name}"),
        }
    }
}

/// The answer for one object.
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    /// `pod/NS/NAME` or `node/NAME`.
    pub object: String,
    /// A short verb: placed, unschedulable, stays, moves, kept, consolidated, replaced, deleted,
    /// unmanaged.
    pub decision: &'static str,
    /// Why, in a sentence or two.
    pub reason: String,
}

impl Explanation {
    pub fn line(&self) -> String {
        format!("{}: {}: {}", self.object, self.decision, self.reason)
    }

    pub fn json(&self) -> Value {
        json!({"object": self.object, "decision": self.decision, "reason": self.reason})
    }
}

/// Explains `target` from what `simulate` computed; an error names an object the input does not hold.
pub fn explain(report: &Report, target: &Target) -> Result<Explanation, String> {
    let object = target.display();
    let (decision, reason) = match target {
        Target::Pod { namespace, name } => pod(report, &format!("{namespace}/{name}"))?,
        Target::Node(name) => node(report, name)?,
    };
    Ok(Explanation { object, decision, reason })
}

fn claim_summary(c: &NewNodeClaim) -> String {
    format!(
        "{} ({}, {}, {}, ${:.4}/h, NodePool {})",
        c.name,
        c.instance_type,
        if c.zone.is_empty() { "regional" } else { c.zone.as_str() },
        c.capacity_type.as_str(),
        c.price_per_hour,
        c.nodepool
    )
}

/// The disruption commands, if `simulate` judged disruption.
fn commands<'r>(report: &'r Report) -> &'r [Command] {
    report.disruption.map(|d| d.decisions.commands.as_slice()).unwrap_or_default()
}

fn command_summary(c: &Command) -> String {
    command_summary_with(c, "")
}

/// [`command_summary`] with `with` (the other candidates) after the reason.
fn command_summary_with(c: &Command, with: &str) -> String {
    let what = if c.replacements.is_empty() {
        "deleted without a replacement".to_string()
    } else {
        let list: Vec<String> = c.replacements.iter().map(claim_summary).collect();
        format!("replaced by {}", list.join(", "))
    };
    format!(
        "{} ({}){with}: {what}, saving ${:.4}/h; {}",
        reason_str(c.reason),
        c.method.as_str(),
        c.savings_per_hour,
        c.explanation
    )
}

fn pod(report: &Report, id: &str) -> Result<(&'static str, String), String> {
    let plan = report.plan;
    if let Some(u) = plan.unschedulable.iter().find(|u| u.pod == id) {
        return Ok(("unschedulable", u.reason.clone()));
    }
    if let Some((node, _)) = plan.existing.iter().find(|(_, pods)| pods.iter().any(|p| p == id)) {
        return Ok((
            "placed",
            format!("on existing node {node}, which has room for it, so no new node is needed"),
        ));
    }
    if let Some(c) = plan.nodeclaims.iter().find(|c| c.pods.iter().any(|p| p == id)) {
        let others = c.pods.len() - 1;
        return Ok((
            "placed",
            format!(
                "on new NodeClaim {}: the cheapest allowed size that holds it with the {others} other pod(s) planned there",
                claim_summary(c)
            ),
        ));
    }
    let running = report.input.running.iter().find(|p| p.id() == id);
    let Some(running) = running else {
        return Err(format!("pod/{id} is not in the input (neither pending nor running)"));
    };
    let node = running.node_name.clone().unwrap_or_default();
    for c in commands(report) {
        if let Some(m) = c.moves.iter().find(|m| m.pod == id) {
            return Ok(("moves", format!("from {node} to {}: {node} would be {}", m.to, command_summary(c))));
        }
        if c.candidates.contains(&node) {
            return Ok(("moves", format!("its node {node} would be {}", command_summary(c))));
        }
    }
    let kept = report
        .disruption
        .and_then(|d| d.decisions.blocked.iter().find(|b| b.node == node))
        .map(|b| format!("; the node is kept: {}", b.reason))
        .unwrap_or_default();
    Ok(("stays", format!("runs on {node}{kept}")))
}

fn node(report: &Report, name: &str) -> Result<(&'static str, String), String> {
    let Some(existing) = report.input.nodes.iter().find(|n| n.name == name) else {
        return Err(format!("node/{name} is not in the input"));
    };
    let takes = report
        .plan
        .existing
        .get(name)
        .map(|pods| format!(" It takes {} pending pod(s) now.", pods.len()))
        .unwrap_or_default();
    for c in commands(report) {
        if c.candidates.iter().any(|n| n == name) {
            let decision = match (c.reason, c.replacements.is_empty()) {
                (crate::apis::nodepool::DisruptionReason::Drifted, _) => "replaced",
                (_, true) => "deleted",
                (_, false) => "consolidated",
            };
            let with = if c.candidates.len() > 1 {
                format!(
                    " together with {}",
                    c.candidates.iter().filter(|n| *n != name).cloned().collect::<Vec<_>>().join(", ")
                )
            } else {
                String::new()
            };
            return Ok((decision, command_summary_with(c, &with)));
        }
    }
    if let Some(b) = report.disruption.and_then(|d| d.decisions.blocked.iter().find(|b| b.node == name)) {
        return Ok(("kept", format!("{}.{takes}", b.reason)));
    }
    if existing.nodepool.is_none() {
        return Ok((
            "unmanaged",
            format!("no NodePool label and no NodeClaim: Karpenter never disrupts it.{takes}"),
        ));
    }
    Ok(("kept", format!("no disruption applies to it now.{takes}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_or_without_a_namespace_and_refuse_other_kinds() {
        assert_eq!(
            Target::parse("pod/kube-system/dns").unwrap(),
            Target::Pod { namespace: "kube-system".into(), name: "dns".into() }
        );
        assert_eq!(
            Target::parse("pod/web").unwrap(),
            Target::Pod { namespace: "default".into(), name: "web".into() }
        );
        assert_eq!(Target::parse("node/aks-1").unwrap(), Target::Node("aks-1".into()));
        for bad in ["deployment/web", "pod/", "node", "pod/a/b/c", ""] {
            let err = Target::parse(bad).unwrap_err();
            assert!(err.contains("pod/NAMESPACE/NAME"), "{bad}: {err}");
        }
    }
}
