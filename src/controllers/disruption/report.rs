//! What a disruption pass tells the outside: Prometheus metrics (upstream names, see
//! [`crate::operator::metrics::DisruptionMetrics`]) and Kubernetes Events on Nodes and NodeClaims
//! (`DisruptionBlocked` with the pod, PDB or budget that blocks, `Disrupting`, `Expired`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::execute::disrupting_events;
use super::{reason_label, Shared};
use crate::apis::duration::NillableDuration;
use crate::apis::nodepool::{ConsolidationPolicy, DisruptionReason};
use crate::controllers::events;
use crate::controllers::metrics::termination_mode_of;
use crate::disruption::budgets::allowances;
use crate::disruption::candidates::check;
use crate::disruption::cost::node_disruption_cost;
use crate::disruption::{BlockReason, Command, Decisions, Expired, ManagedNode, Method, Snapshot};
use crate::operator::metrics::{self as operator_metrics, consolidation_type, decision};

const REASONS: [DisruptionReason; 3] =
    [DisruptionReason::Empty, DisruptionReason::Drifted, DisruptionReason::Underutilized];

fn consolidation_type_of(method: Method) -> &'static str {
    match method {
        Method::Emptiness => consolidation_type::EMPTY,
        Method::Drift => consolidation_type::NONE,
        Method::MultiNodeConsolidation => consolidation_type::MULTI,
        Method::SingleNodeConsolidation => consolidation_type::SINGLE,
    }
}

fn decision_of(command: &Command) -> &'static str {
    if command.replacements.is_empty() {
        decision::DELETE
    } else {
        decision::REPLACE
    }
}

/// The metrics and events of one pass's decisions.
pub fn decisions<C>(
    shared: &Shared<C>,
    snapshot: &Snapshot,
    decisions: &Decisions,
    repack_lower_bound_per_hour: f64,
    now: Timestamp,
    took: Duration,
) {
    let m = &operator_metrics::get().disruption;
    let (reason, kind) = decisions
        .commands
        .first()
        .map_or(("", ""), |c| (reason_label(c.reason), consolidation_type_of(c.method)));
    m.evaluation_duration.with_label_values(&[reason, kind]).observe(took.as_secs_f64());
    for reason in REASONS {
        let eligible = snapshot.nodes.iter().filter(|n| check(snapshot, n, reason, now).is_ok()).count();
        m.eligible_nodes.with_label_values(&[reason_label(reason)]).set(eligible as f64);
        for (pool, allowance) in allowances(snapshot, reason, now) {
            let pool_nodes = snapshot.nodes.iter().filter(|n| n.nodepool == pool).count();
            let allowed = allowance.remaining.unwrap_or(pool_nodes);
            let labels = [pool.as_str(), reason_label(reason)];
            m.allowed_disruptions.with_label_values(&labels).set(allowed as f64);
            m.nodes_consuming_budgets.with_label_values(&labels).set(allowance.disrupting as f64);
        }
    }
    let no_labels: &[&str] = &[];
    m.cluster_price.with_label_values(no_labels).set(decisions.cluster_price_per_hour);
    m.repack_lower_bound.with_label_values(no_labels).set(repack_lower_bound_per_hour);
    let registered = registered_by_name(snapshot);
    consolidation_moves(shared, snapshot, decisions, &registered);
    // The single-node search stops at its per-pass cap (the deterministic stand-in for upstream's
    // 3-minute timeout): candidates left for the next pass and no move found is a timeout.
    let deferred = decisions.blocked.iter().any(|b| matches!(b.reason, BlockReason::Deferred));
    if decisions.commands.is_empty() && deferred {
        operator_metrics::get().consolidation_timed_out(consolidation_type::SINGLE);
    }
    // Built one at a time as the recorder takes them: most repeat the last pass's and are dropped.
    let out = decisions.blocked.iter().flat_map(|blocked| {
        let event = || match (event_worthy(&blocked.reason), unconsolidatable(&blocked.reason)) {
            (Some((blocker, why)), _) => Some(events::disruption_blocked(blocker, &why)),
            (None, Some(why)) => Some(events::unconsolidatable(&why)),
            (None, None) => None,
        };
        let on_node = event().map(|ev| (ev, events::node_ref(&blocked.node)));
        let claim = || registered.get(blocked.node.as_str());
        let on_claim = on_node
            .as_ref()
            .and_then(|_| claim())
            .and_then(|n| event().map(|ev| (ev, events::nodeclaim_ref(&n.nodeclaim))));
        on_node.into_iter().chain(on_claim)
    });
    shared.events.spawn_all(out);
    tracing::debug!(
        commands = decisions.commands.len(),
        blocked = decisions.blocked.len(),
        price_per_hour = decisions.cluster_price_per_hour,
        repack_lower_bound_per_hour,
        took_ms = took.as_millis() as u64,
        "disruption pass"
    );
}

/// The snapshot's registered nodes by name (a pass that blocks every node of a large cluster looks each
/// one up). A claim still in flight has no Node, and is never blocked under a Node's name.
fn registered_by_name(snapshot: &Snapshot) -> HashMap<&str, &ManagedNode> {
    snapshot.nodes.iter().filter(|n| !n.node.in_flight).map(|n| (n.node.name.as_str(), n)).collect()
}

/// The blocker kind and text of a `DisruptionBlocked` event, for reasons a user can act on (a pod, a
/// PDB, a budget, an annotation); routine states (not initialized, utilized, consolidateAfter running)
/// publish none. The text stays the same from pass to pass, so the recorder folds repeats.
pub fn event_worthy(reason: &BlockReason) -> Option<(&'static str, String)> {
    let blocker = match reason {
        BlockReason::NodeDoNotDisrupt => "NodeDoNotDisrupt",
        BlockReason::Pdb { .. } | BlockReason::MultiplePdbs { .. } => "PodDisruptionBudget",
        BlockReason::Budget { .. } => "DisruptionBudget",
        BlockReason::UnknownNodePool { .. } => "UnknownNodePool",
        BlockReason::PodDoNotDisrupt { pod, .. } => {
            return Some(("PodDoNotDisrupt", format!("pod {pod} has karpenter.sh/do-not-disrupt")));
        }
        _ => return None,
    };
    Some((blocker, reason.to_string()))
}

/// The message of an `Unconsolidatable` event: consolidation looked at the node and cannot act on it
/// (upstream `pkg/controllers/disruption/consolidation.go`, with its wording where the cause is the same).
/// Routine states (utilized, consolidateAfter running, deferred) publish none.
pub fn unconsolidatable(reason: &BlockReason) -> Option<String> {
    Some(match reason {
        BlockReason::ConsolidationDisabled { nodepool } => format!("NodePool {nodepool:?} has consolidation disabled"),
        BlockReason::WhenEmptyPolicy { nodepool } => {
            format!("NodePool {nodepool:?} has consolidation policy WhenEmpty, but node is not empty")
        }
        BlockReason::SpotToSpotDisabled => {
            "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node".to_string()
        }
        BlockReason::SpotFlexibility { cheaper_options, needed } => format!(
            "SpotToSpotConsolidation requires {needed} cheaper instance type options than the current candidate to consolidate, got {cheaper_options}"
        ),
        BlockReason::NoCheaperPlacement { detail } if detail.starts_with("pod ") => detail.clone(),
        BlockReason::NoCheaperPlacement { .. } => "Can't replace with a cheaper node".to_string(),
        BlockReason::NotWorthIt { .. } => format!("Can't replace with a cheaper node: {reason}"),
        _ => return None,
    })
}

pub fn failed_validation(command: &Command) {
    let m = &operator_metrics::get().disruption;
    m.failed_validations.with_label_values(&[consolidation_type_of(command.method)]).inc();
}

pub fn queue_failure(command: &Command) {
    let m = &operator_metrics::get().disruption;
    m.queue_failures
        .with_label_values(&[
            decision_of(command),
            reason_label(command.reason),
            consolidation_type_of(command.method),
        ])
        .inc();
}

/// Per pool of a consolidation command's candidates, or of a node whose move was not worth its
/// disruption: `karpenter_consolidation_moves_total` (approved, rejected) and, in `Balanced` pools,
/// `karpenter_consolidation_score`, the move's share of the pool's savings over its share of the pool's
/// disruption (upstream `balanced.go`).
fn consolidation_moves<C>(
    shared: &Shared<C>,
    snapshot: &Snapshot,
    decisions: &Decisions,
    registered: &HashMap<&str, &ManagedNode>,
) {
    let m = operator_metrics::get();
    let threshold = shared.settings.disruption.consolidation_threshold;
    let pools = pool_totals(snapshot);
    let policy =
        |pool: &str| snapshot.nodepools.iter().find(|p| p.name == pool).map(|p| p.consolidation_policy);
    let record = |decision: &str, pool: &str, score: Option<f64>| {
        let Some(policy) = policy(pool) else { return };
        let balanced = policy == ConsolidationPolicy::Balanced;
        m.consolidation_moves(decision, pool, policy_label(policy), score.filter(|_| balanced));
    };
    for command in decisions.commands.iter().filter(|c| c.reason == DisruptionReason::Underutilized) {
        let mut per_pool: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for n in snapshot.nodes.iter().filter(|n| command.candidates.contains(&n.node.name)) {
            let entry = per_pool.entry(n.nodepool.as_str()).or_default();
            entry.0 += n.price_per_hour;
            entry.1 += node_disruption_cost(n);
        }
        for replacement in &command.replacements {
            if let Some(entry) = per_pool.get_mut(replacement.nodepool.as_str()) {
                entry.0 -= replacement.price_per_hour;
            }
        }
        for (pool, (savings, disruption)) in per_pool {
            record("approved", pool, score(pools.get(pool), savings, disruption));
        }
    }
    for blocked in &decisions.blocked {
        let BlockReason::NotWorthIt { savings_per_hour, required_per_hour } = blocked.reason else {
            continue;
        };
        let Some(node) = registered.get(blocked.node.as_str()) else { continue };
        // required = threshold × pool price ÷ pool disruption × disruption, so the score is
        // threshold × savings ÷ required.
        let score = (required_per_hour > 0.0).then(|| threshold * savings_per_hour / required_per_hour);
        record("rejected", &node.nodepool, score);
    }
}

/// Each pool's $/hour and disruption cost, over its nodes not already leaving.
fn pool_totals(snapshot: &Snapshot) -> BTreeMap<&str, (f64, f64)> {
    let mut totals: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for n in snapshot.nodes.iter().filter(|n| !n.marked_for_deletion) {
        let t = totals.entry(n.nodepool.as_str()).or_default();
        t.0 += n.price_per_hour;
        t.1 += node_disruption_cost(n);
    }
    totals
}

/// Savings share over disruption share; `None` when the pool has no price or disruption.
fn score(pool: Option<&(f64, f64)>, savings: f64, disruption: f64) -> Option<f64> {
    let (price, pool_disruption) = *pool?;
    if price <= 0.0 || pool_disruption <= 0.0 || disruption <= 0.0 {
        return None;
    }
    Some((savings / price) / (disruption / pool_disruption))
}

/// A command passed validation and starts: `karpenter_voluntary_disruption_decisions_total` and, per
/// NodePool of its candidates, `..._decisions_by_nodepool_total` (upstream `queue.go` `StartCommand`).
pub fn command_started<C>(shared: &Shared<C>, command: &Command) {
    let m = &operator_metrics::get().disruption;
    let (decision, reason, kind) =
        (decision_of(command), reason_label(command.reason), consolidation_type_of(command.method));
    m.decisions.with_label_values(&[decision, reason, kind]).inc();
    let cluster = shared.cluster();
    let pools: BTreeSet<String> = command
        .candidates
        .iter()
        .filter_map(|node| cluster.node(node).and_then(|n| n.node.nodepool.clone()))
        .collect();
    for pool in pools {
        m.decisions_by_nodepool.with_label_values(&[&pool, decision, reason, kind]).inc();
    }
}

/// `Disrupting` on every candidate Node and NodeClaim.
pub fn started<C>(shared: &Shared<C>, command: &Command, replacements: &[String]) {
    let note = disrupting_events(command, replacements);
    let mut out = vec![];
    for node in &command.candidates {
        out.push((events::disrupting(&note), events::node_ref(node)));
        if let Some(claim) = super::execute::claim_of(shared, node) {
            out.push((events::disrupting(&note), events::nodeclaim_ref(&claim)));
        }
    }
    shared.events.spawn_all(out);
}

/// `karpenter_nodeclaims_disrupted_total` and `karpenter_pods_disruption_initiated_total` for one
/// deleted candidate.
pub fn disrupted<C>(shared: &Shared<C>, command: &Command, node: &str, claim: &str) {
    let cluster = shared.cluster();
    let record = cluster.nodeclaim(claim);
    let nodepool = record.and_then(|c| c.nodepool.clone()).unwrap_or_default();
    let capacity_type = record
        .and_then(|c| c.labels.get(crate::model::labels::LABEL_CAPACITY_TYPE).cloned())
        .unwrap_or_default();
    let pool = cluster.nodepool(&nodepool);
    let policy = pool.map(|p| policy_label(p.spec.disruption.consolidation_policy)).unwrap_or("");
    let mode =
        termination_mode_of(pool.and_then(|p| p.spec.template.spec.termination_grace_period.as_deref()));
    let pods = cluster
        .pods_on_node(node)
        .filter(|p| !p.is_daemonset_pod() && !p.mirror && !p.phase.is_terminal())
        .count();
    let labels = [reason_label(command.reason), nodepool.as_str(), capacity_type.as_str(), policy, mode];
    operator_metrics::get().disrupted_by_policy(labels, pods);
}

/// An expired NodeClaim was deleted: the metrics as upstream's `expired` reason, and `Expired` events.
pub fn expired<C>(shared: &Shared<C>, snapshot: &Snapshot, e: &Expired) {
    let node = snapshot.nodes.iter().find(|n| n.nodeclaim == e.nodeclaim);
    let pool = snapshot.nodepools.iter().find(|p| p.name == e.nodepool);
    let expire_after = match pool.map(|p| &p.expire_after) {
        Some(NillableDuration::After(d)) => crate::disruption::command::human(*d),
        _ => String::new(),
    };
    let (capacity_type, pods) = node
        .map_or(("", 0), |n| (n.capacity_type.as_str(), n.pods.iter().filter(|p| p.reschedulable()).count()));
    let policy = pool.map(|p| policy_label(p.consolidation_policy)).unwrap_or("");
    let labels = ["expired", e.nodepool.as_str(), capacity_type, policy, "forceful"];
    operator_metrics::get().disrupted_by_policy(labels, pods);
    let mut out = vec![(events::expired(&expire_after), events::nodeclaim_ref(&e.nodeclaim))];
    if node.is_some_and(|n| !n.node.in_flight) {
        out.push((events::expired(&expire_after), events::node_ref(&e.node)));
    }
    shared.events.spawn_all(out);
}

fn policy_label(policy: crate::apis::nodepool::ConsolidationPolicy) -> &'static str {
    use crate::apis::nodepool::ConsolidationPolicy::*;
    match policy {
        WhenEmpty => "WhenEmpty",
        WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
        Balanced => "Balanced",
    }
}
