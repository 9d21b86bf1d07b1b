//! The re-check before acting (upstream `validation.go`, run `commandValidationDelay` = 15 s after a
//! decision): the candidates must still be candidates, the budgets must still allow them, and a
//! command with pods to move must, re-simulated, still place every pod with the same number of
//! replacements of types it planned, and still save money when it consolidates. Pure, so the
//! controller and the simulator share it.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;

use k8s_openapi::jiff::Timestamp;

use crate::apis::nodepool::DisruptionReason;

use super::budgets::allowances;
use super::candidates::check;
use super::command::{Command, Invalid};
use super::consolidation::replace_mode;
use super::replacement::spot_rule_broken;
use super::simulate::{outcome, solve_move, Replace};
use super::snapshot::Snapshot;
use super::static_pools;
use super::Options;

/// Whether `command` still holds on `snapshot` at `now`.
pub fn validate(
    command: &Command,
    snapshot: &Snapshot,
    now: Timestamp,
    options: &Options,
) -> Result<(), Invalid> {
    let mut indices = vec![];
    let mut per_pool: BTreeMap<&str, usize> = BTreeMap::new();
    for name in &command.candidates {
        let Some(i) = snapshot.nodes.iter().position(|n| n.node.name == *name) else {
            return Err(Invalid::CandidateGone { node: name.clone() });
        };
        let node = &snapshot.nodes[i];
        check(snapshot, node, command.reason, now)
            .map_err(|reason| Invalid::NoLongerCandidate { node: name.clone(), reason })?;
        *per_pool.entry(node.nodepool.as_str()).or_default() += 1;
        indices.push(i);
    }
    let budgets = allowances(snapshot, command.reason, now);
    for (pool, count) in per_pool {
        if budgets.get(pool).is_none_or(|a| !a.allows(count)) {
            return Err(Invalid::Budget { nodepool: pool.to_string(), reason: command.reason, count });
        }
    }
    if command.reason == DisruptionReason::Empty {
        return Ok(());
    }
    let replace = match command.reason {
        DisruptionReason::Underutilized => replace_mode(snapshot, &indices, options),
        _ => Replace::Any,
    };
    let removed: BTreeSet<usize> = indices.iter().copied().collect();
    let static_replacement = match (command.reason, &indices[..]) {
        (DisruptionReason::Drifted, &[i]) => {
            static_pools::drift_replacements(snapshot, &[i], snapshot.solve_options.max_instance_type_options)
                .remove(&i)
        }
        _ => None,
    };
    let (replace, result) = match static_replacement {
        Some(Err(detail)) => return Err(Invalid::Unschedulable { detail }),
        Some(Ok(claim)) => {
            static_pools::drift_outcome(snapshot, indices[0], &claim, now, &|| false).map(|o| (replace, o))
        }
        None => solve_move(replace, |replace| {
            outcome(snapshot, &removed, now, replace, &|| false).map(Ok::<_, Infallible>)
        })
        .map(|(replace, Ok(outcome))| (replace, outcome)),
    }
    .expect("never cancelled");
    if let Some((pod, why)) = result.stranded.first() {
        return Err(Invalid::Unschedulable { detail: format!("pod {pod}: {why}") });
    }
    if let Some(detail) = spot_rule_broken(snapshot, replace, &result.replacements) {
        return Err(Invalid::Unschedulable { detail });
    }
    if result.replacements.len() != command.replacements.len() {
        return Err(Invalid::ReplacementCount {
            planned: command.replacements.len(),
            now: result.replacements.len(),
        });
    }
    let launchable: BTreeSet<&str> =
        result.replacements.iter().flat_map(|c| c.instance_type_options.iter().map(String::as_str)).collect();
    for planned in &command.replacements {
        if !launchable.contains(planned.instance_type.as_str()) {
            return Err(Invalid::ReplacementTypes { instance_type: planned.instance_type.clone() });
        }
    }
    if command.reason == DisruptionReason::Underutilized {
        let price: f64 = indices.iter().map(|&i| snapshot.nodes[i].price_per_hour).sum();
        let savings = price - result.replacement_price();
        if savings <= 0.0 {
            return Err(Invalid::NoSavings { savings_per_hour: savings });
        }
    }
    Ok(())
}
