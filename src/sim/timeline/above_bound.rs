//! Why a timeline stayed expensive: every stretch of the run where the managed nodes cost more than
//! [`RATIO`] times the repack lower bound, with what the disruption passes of that stretch (or the last
//! one before it, whose answer still held) found in the way of consolidation, by cause and node.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::engine::Run;
use crate::disruption::BlockReason;

/// A stretch is reported while the price stays above this multiple of the bound.
pub const RATIO: f64 = 1.1;

/// What one disruption pass that decided nothing found: nodes by cause ([`cause`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PassCauses {
    pub offset_seconds: u64,
    pub causes: BTreeMap<&'static str, BTreeSet<String>>,
}

/// One stretch above the bound.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stretch {
    pub from_offset_seconds: u64,
    /// The first sample back under the ratio, or the last sample of the run.
    pub to_offset_seconds: u64,
    /// At the stretch's last sample.
    pub price_per_hour: f64,
    pub lower_bound_per_hour: f64,
    pub ratio: f64,
    /// Disruption commands executed inside the stretch.
    pub commands_executed: usize,
    /// What stopped consolidation, by cause, with the nodes it held.
    pub causes: BTreeMap<&'static str, BTreeSet<String>>,
}

/// The cause a blocked node is counted under: the policy threshold, a budget, a PDB, do-not-disrupt, no
/// cheaper repack, and the rest.
pub fn cause(reason: &BlockReason) -> &'static str {
    match reason {
        BlockReason::NotWorthIt { .. } => {
            "policy threshold (the saving is below what its disruption requires)"
        }
        BlockReason::WhenEmptyPolicy { .. } => "policy WhenEmpty (the node runs pods)",
        BlockReason::ConsolidationDisabled { .. } => "policy consolidateAfter: Never",
        BlockReason::ConsolidateAfter { .. } => "consolidateAfter not elapsed",
        BlockReason::Budget { .. } => "disruption budget at 0",
        BlockReason::Pdb { .. } | BlockReason::MultiplePdbs { .. } => "PodDisruptionBudget",
        BlockReason::PodDoNotDisrupt { .. } | BlockReason::NodeDoNotDisrupt => "do-not-disrupt",
        BlockReason::NoCheaperPlacement { .. } | BlockReason::Utilized => "no cheaper repack found",
        BlockReason::SpotToSpotDisabled | BlockReason::SpotFlexibility { .. } => "spot-to-spot rules",
        BlockReason::StaticNodePool { .. } => "static NodePool",
        BlockReason::CannotReplace { .. } => "no replacement can launch",
        BlockReason::UnknownNodePool { .. } => "NodePool missing",
        BlockReason::InFlight
        | BlockReason::NotInitialized
        | BlockReason::MarkedForDeletion
        | BlockReason::Nominated
        | BlockReason::Deferred => "nodes still launching, initializing or being disrupted",
    }
}

/// The causes of one pass's blocked nodes.
pub fn pass_causes(offset_seconds: u64, blocked: &[crate::disruption::Blocked]) -> PassCauses {
    let mut causes: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    for b in blocked {
        causes.entry(cause(&b.reason)).or_default().insert(b.node.clone());
    }
    PassCauses { offset_seconds, causes }
}

/// Stretches closer than this merge into one: the bound moves while pods come and go, and a dip
/// under the ratio for a sample or two does not mean consolidation caught up.
pub const MERGE_GAP_SECONDS: u64 = 600;

/// Every stretch of `run` above [`RATIO`] times the bound, in order.
pub fn stretches(run: &Run) -> Vec<Stretch> {
    let samples = &run.samples;
    let above = |i: usize| {
        let s = &samples[i];
        s.lower_bound_per_hour > 0.0 && s.price_per_hour > RATIO * s.lower_bound_per_hour + 1e-9
    };
    // Runs of samples above the ratio, as (first, last) indices, merged across short dips.
    let mut ranges: Vec<(usize, usize)> = vec![];
    for i in (0..samples.len()).filter(|&i| above(i)) {
        match ranges.last_mut() {
            Some((_, last))
                if i == *last + 1
                    || samples[i].offset_seconds - samples[*last].offset_seconds <= MERGE_GAP_SECONDS =>
            {
                *last = i
            }
            _ => ranges.push((i, i)),
        }
    }
    ranges
        .into_iter()
        .map(|(first, last)| {
            let end = &samples[last];
            let from = samples[first].offset_seconds;
            let to = samples.get(last + 1).map_or(end.offset_seconds, |s| s.offset_seconds);
            Stretch {
                from_offset_seconds: from,
                to_offset_seconds: to,
                price_per_hour: end.price_per_hour,
                lower_bound_per_hour: end.lower_bound_per_hour,
                ratio: end.price_per_hour / end.lower_bound_per_hour,
                commands_executed: run
                    .decisions
                    .iter()
                    .filter(|d| d.offset_seconds >= from && d.offset_seconds < to.max(from + 1))
                    .filter(|d| d.outcome.starts_with("executed") && d.method != "expiration")
                    .count(),
                causes: causes_between(&run.passes, from, to),
            }
        })
        .collect()
}

/// The causes of the passes in `[from, to)`, and of the last pass before `from` (its answer held until
/// the cluster changed).
fn causes_between(passes: &[PassCauses], from: u64, to: u64) -> BTreeMap<&'static str, BTreeSet<String>> {
    let before = passes.iter().rev().find(|p| p.offset_seconds < from);
    let inside = passes.iter().filter(|p| p.offset_seconds >= from && p.offset_seconds < to.max(from + 1));
    let mut out: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    for pass in before.into_iter().chain(inside) {
        for (cause, nodes) in &pass.causes {
            out.entry(cause).or_default().extend(nodes.iter().cloned());
        }
    }
    out
}

/// `cause (node, node), cause (node)`, or what the stretch did instead when no pass found anything.
pub fn describe(stretch: &Stretch) -> String {
    if stretch.causes.is_empty() {
        return match stretch.commands_executed {
            0 => "no disruption pass judged these nodes yet".into(),
            n => format!("{n} consolidation command(s) executed, closing the gap"),
        };
    }
    let causes: Vec<String> = stretch
        .causes
        .iter()
        .map(|(cause, nodes)| format!("{cause} ({})", nodes.iter().cloned().collect::<Vec<_>>().join(", ")))
        .collect();
    causes.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::timeline::engine::{DecisionRow, Sample};

    fn sample(offset: u64, price: f64, bound: f64) -> Sample {
        Sample {
            offset_seconds: offset,
            time: String::new(),
            nodes: 3,
            nodes_by_pool: BTreeMap::new(),
            nodes_by_instance_type: BTreeMap::new(),
            nodes_by_capacity_type: BTreeMap::new(),
            price_per_hour: price,
            lower_bound_per_hour: bound,
            pending_pods: 0,
            starting_pods: 0,
            running_pods: 0,
        }
    }

    fn pass(offset: u64, cause: &'static str, node: &str) -> PassCauses {
        PassCauses {
            offset_seconds: offset,
            causes: BTreeMap::from([(cause, BTreeSet::from([node.to_string()]))]),
        }
    }

    #[test]
    fn stretches_above_the_ratio_carry_the_causes_of_their_passes() {
        let run = Run {
            samples: vec![
                sample(0, 1.0, 1.0),
                sample(3600, 1.5, 1.0),
                sample(7200, 1.5, 1.0),
                sample(10800, 1.05, 1.0),
                sample(14400, 2.0, 1.0),
            ],
            decisions: vec![DecisionRow {
                offset_seconds: 7200,
                time: String::new(),
                reason: "Underutilized".into(),
                method: "single-node-consolidation".into(),
                candidates: vec!["a".into()],
                replacements: vec![],
                savings_per_hour: 0.4,
                disruption_cost: 1.0,
                outcome: "executed: 1 pod(s) moved".into(),
                explanation: String::new(),
            }],
            passes: vec![
                pass(1800, "PodDisruptionBudget", "a"),
                pass(3600, "no cheaper repack found", "b"),
                pass(12000, "do-not-disrupt", "c"),
            ],
            ..Run::default()
        };
        let found = stretches(&run);
        assert_eq!(found.len(), 2, "{found:#?}");
        let first = &found[0];
        assert_eq!((first.from_offset_seconds, first.to_offset_seconds), (3600, 10800));
        assert_eq!(first.commands_executed, 1);
        assert_eq!(describe(first), "PodDisruptionBudget (a); no cheaper repack found (b)");
        let second = &found[1];
        assert_eq!((second.from_offset_seconds, second.to_offset_seconds), (14400, 14400));
        assert_eq!(describe(second), "do-not-disrupt (c)", "the last pass before the stretch still holds");
        assert!((second.ratio - 2.0).abs() < 1e-12);
    }

    #[test]
    fn every_block_reason_has_a_cause() {
        let reasons = [
            BlockReason::Budget {
                nodepool: "p".into(),
                reason: crate::apis::nodepool::DisruptionReason::Underutilized,
                limited_by: "nodes: 0".into(),
            },
            BlockReason::NotWorthIt { savings_per_hour: 0.01, required_per_hour: 0.1 },
            BlockReason::Utilized,
        ];
        let causes: Vec<&str> = reasons.iter().map(cause).collect();
        assert_eq!(
            causes,
            [
                "disruption budget at 0",
                "policy threshold (the saving is below what its disruption requires)",
                "no cheaper repack found"
            ]
        );
    }
}
