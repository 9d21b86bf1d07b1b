//! A cluster after disruption commands ran: the candidates gone, the replacements running, the pods
//! where the commands moved them. The disruption benchmarks (`bench --workload fragmented`,
//! `bench-upstream-disruption`) use it to follow decisions pass after pass until a pass decides
//! nothing, not even when it judges every single-node candidate (the fixpoint the disruption
//! controller converges to when the cluster does not change under it). Pure: the start time is passed
//! in, each pass's time follows from it, and the caller decides (and times) each pass.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::consolidation::PASS_INTERVAL_SECONDS;
use super::{Command, Decisions, DoNotDisrupt, ManagedNode, NodePod, Options, PodKind, Snapshot};
use crate::model::labels::LABEL_HOSTNAME;
use crate::model::node_labels;
use crate::scheduling::{ExistingNode, NewNodeClaim, Pod, PodId};

/// Passes stop here even if commands keep coming (they should not: every pass must save money).
pub const MAX_PASSES: usize = 200;

/// What applying the decisions pass after pass did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fixpoint {
    /// Passes whose commands were applied.
    pub passes: usize,
    /// Of those, the passes that judged every single-node candidate ([`Judging::Everyone`]).
    pub sweeps: usize,
    pub nodes_removed: usize,
    pub nodes_launched: usize,
    pub pods_moved: usize,
    /// When the last pass that decided something ran (the start when none did).
    pub end: Timestamp,
}

/// Which single-node candidates a pass of [`to_fixpoint`] judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judging {
    /// As many as `Options::max_single_node_solves` allows: the top of the order and the window at
    /// the pass's time, as the controller's pass.
    Window,
    /// Every single-node candidate, and nothing else. The controller gets there over many passes,
    /// as its window moves on (one candidate every [`PASS_INTERVAL_SECONDS`]); with nothing else
    /// changing, those passes find the same moves a pass that judges everyone finds at once. Such a
    /// pass follows one that decided nothing on the same cluster, so the multi-node moves, which do
    /// not depend on the window, are not solved again.
    Everyone,
}

impl Judging {
    /// `options` for a pass that judges these candidates.
    pub fn options(self, options: &Options) -> Options {
        match self {
            Judging::Window => options.clone(),
            Judging::Everyone => {
                Options { max_single_node_solves: usize::MAX, max_multi_node_solves: 0, ..options.clone() }
            }
        }
    }
}

/// Applies `first`'s commands (decided at `start`) to `snapshot`, then `decide`s again on the result
/// and applies, until a pass judging every single-node candidate decides nothing (or [`MAX_PASSES`]
/// passes decided something); `snapshot` ends as the cluster at the fixpoint.
///
/// Passes are [`PASS_INTERVAL_SECONDS`] apart, as in the controller. A pass that decides nothing is
/// followed, at the same time, by one that judges every single-node candidate: where the
/// controller's window would find a move in a later pass, it is found there.
pub fn to_fixpoint(
    snapshot: &mut Snapshot,
    first: Decisions,
    start: Timestamp,
    mut decide: impl FnMut(&Snapshot, Timestamp, Judging) -> Decisions,
) -> Fixpoint {
    let mut fixpoint = Fixpoint { end: start, ..Fixpoint::default() };
    let mut decisions = first;
    let mut now = start;
    let mut judging = Judging::Window;
    while fixpoint.passes < MAX_PASSES {
        if decisions.commands.is_empty() {
            if judging == Judging::Everyone {
                break;
            }
            judging = Judging::Everyone;
            decisions = decide(snapshot, now, judging);
            continue;
        }
        fixpoint.passes += 1;
        if judging == Judging::Everyone {
            fixpoint.sweeps += 1;
        }
        for command in &decisions.commands {
            fixpoint.nodes_removed += command.candidates.len();
            fixpoint.nodes_launched += command.replacements.len();
            fixpoint.pods_moved += command.moves.len();
            apply(snapshot, command, fixpoint.passes, now);
        }
        fixpoint.end = now;
        now = now.checked_add(SignedDuration::from_secs(PASS_INTERVAL_SECONDS)).unwrap_or(now);
        judging = Judging::Window;
        decisions = decide(snapshot, now, judging);
    }
    fixpoint
}

/// The cluster's $/hour: every managed node's price.
pub fn price(snapshot: &Snapshot) -> f64 {
    snapshot.nodes.iter().map(|n| n.price_per_hour).sum()
}

/// The cluster after `command` completed: replacements running (renamed so names stay unique), pods
/// where the command moved them, candidates gone.
pub fn apply(snapshot: &mut Snapshot, command: &Command, pass: usize, now: Timestamp) {
    let rename: BTreeMap<&str, String> =
        command.replacements.iter().map(|c| (c.name.as_str(), format!("p{pass}-{}", c.name))).collect();
    let gone: BTreeSet<&str> = command.candidates.iter().map(String::as_str).collect();
    let mut moving: BTreeMap<PodId, NodePod> = BTreeMap::new();
    for node in snapshot.nodes.iter().filter(|n| gone.contains(n.node.name.as_str())) {
        for p in node.pods.iter().filter(|p| p.reschedulable()) {
            moving.insert(p.pod.id(), p.clone());
        }
    }
    snapshot.nodes.retain(|n| !gone.contains(n.node.name.as_str()));
    for claim in &command.replacements {
        let name = &rename[claim.name.as_str()];
        let daemonsets = snapshot.daemonsets.clone();
        snapshot.nodes.push(managed_node(claim, name, &daemonsets, now));
    }
    for m in &command.moves {
        let to = rename.get(m.to.as_str()).cloned().unwrap_or_else(|| m.to.clone());
        let Some(mut pod) = moving.remove(&m.pod) else { continue };
        Arc::make_mut(&mut pod.pod).node_name = Some(to.clone());
        pod.started = Some(now);
        if let Some(node) = snapshot.nodes.iter_mut().find(|n| n.node.name == to) {
            node.pods.push(pod);
            node.last_pod_event = Some(now);
        }
    }
}

/// A managed node for a planned NodeClaim, named `name`, running the DaemonSet pods.
pub fn managed_node(
    claim: &NewNodeClaim,
    name: &str,
    daemonsets: &[Pod],
    launched: Timestamp,
) -> ManagedNode {
    let mut labels = claim.labels.clone();
    labels.insert(LABEL_HOSTNAME.into(), name.into());
    let pods = daemonsets
        .iter()
        .map(|ds| NodePod {
            kind: PodKind::DaemonSet,
            ..workload_pod(&Pod { name: format!("{}-{name}", ds.name), ..ds.clone() }, name, launched)
        })
        .collect();
    ManagedNode {
        node: Arc::new(ExistingNode {
            name: name.into(),
            labels: node_labels(&labels),
            taints: claim.taints.clone(),
            allocatable: claim.allocatable.clone(),
            nodepool: Some(claim.nodepool.clone()),
            in_flight: false,
            startup_taints: vec![],
        }),
        nodeclaim: name.into(),
        nodepool: claim.nodepool.clone(),
        instance_type: claim.instance_type.clone(),
        zone: claim.zone.clone(),
        capacity_type: claim.capacity_type,
        price_per_hour: claim.price_per_hour,
        created: launched,
        initialized: Some(launched),
        last_pod_event: Some(launched),
        drifted: None,
        do_not_disrupt: false,
        nominated: false,
        marked_for_deletion: false,
        deleting: false,
        ready: true,
        pods,
    }
}

/// `pod` running on `node` since `started`, as a workload pod the disruption rules may move.
pub fn workload_pod(pod: &Pod, node: &str, started: Timestamp) -> NodePod {
    NodePod {
        pod: Arc::new(Pod { node_name: Some(node.into()), ..pod.clone() }),
        priority: 0,
        deletion_cost: 0,
        do_not_disrupt: DoNotDisrupt::No,
        started: Some(started),
        kind: PodKind::Workload,
    }
}
