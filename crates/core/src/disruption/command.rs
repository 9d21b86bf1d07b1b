//! What a disruption pass decides: commands to act on, and for every managed node that is not acted
//! on, why not. Data first: the controller turns [`BlockReason`]s into events and the simulator into
//! report rows; `Display` gives the one-line text of both.

use std::fmt;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::apis::nodepool::DisruptionReason;
use crate::scheduling::{NewNodeClaim, PodId};

/// The outcome of one pass.
#[derive(Clone, Debug, Default)]
pub struct Decisions {
    /// Commands of the first method (in upstream's order) that found something to do.
    pub commands: Vec<Command>,
    /// Every managed node that no command disrupts, with why.
    pub blocked: Vec<Blocked>,
    /// $/hour of all managed nodes now.
    pub cluster_price_per_hour: f64,
}

/// A cluster's price over its repack lower bound ([`super::repack_lower_bound`]); 1.0 = nothing left
/// to gain.
pub fn repack_ratio(cluster_price_per_hour: f64, repack_lower_bound_per_hour: f64) -> f64 {
    if repack_lower_bound_per_hour > 0.0 {
        cluster_price_per_hour / repack_lower_bound_per_hour
    } else if cluster_price_per_hour > 0.0 {
        f64::INFINITY
    } else {
        1.0
    }
}

/// How a command was found, in upstream's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Method {
    Emptiness,
    Drift,
    MultiNodeConsolidation,
    SingleNodeConsolidation,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Emptiness => "emptiness",
            Method::Drift => "drift",
            Method::MultiNodeConsolidation => "multi-node-consolidation",
            Method::SingleNodeConsolidation => "single-node-consolidation",
        }
    }
}

pub fn reason_str(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Empty => "Empty",
        DisruptionReason::Drifted => "Drifted",
        DisruptionReason::Underutilized => "Underutilized",
    }
}

/// Remove `candidates` after launching `replacements`.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    pub reason: DisruptionReason,
    pub method: Method,
    /// Node names, sorted.
    pub candidates: Vec<String>,
    /// NodeClaims to launch (and wait for) before the candidates go, as the solver planned them.
    pub replacements: Vec<NewNodeClaim>,
    /// $/hour of the candidates minus $/hour of the replacements.
    pub savings_per_hour: f64,
    /// 1 per candidate plus each evicted pod's eviction cost (upstream `RescheduleDisruptionCost`).
    pub disruption_cost: f64,
    /// Where each evicted pod goes: an existing node or a replacement's name.
    pub moves: Vec<Move>,
    pub explanation: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Move {
    pub pod: PodId,
    pub to: String,
}

/// A managed node no command disrupts.
#[derive(Clone, Debug, PartialEq)]
pub struct Blocked {
    pub node: String,
    pub reason: BlockReason,
}

/// Why a node is not disrupted.
#[derive(Clone, Debug, PartialEq)]
pub enum BlockReason {
    /// Its NodeClaim has not launched a node yet.
    InFlight,
    NotInitialized,
    /// Already being disrupted or deleted.
    MarkedForDeletion,
    /// The provisioner just nominated it for pending pods.
    Nominated,
    /// `karpenter.sh/do-not-disrupt` on the node or its NodeClaim.
    NodeDoNotDisrupt,
    /// A pod's `karpenter.sh/do-not-disrupt`; `left` is `None` when it has no end.
    PodDoNotDisrupt {
        pod: PodId,
        left: Option<Duration>,
    },
    /// A PDB allows no eviction of this pod now.
    Pdb {
        pod: PodId,
        pdb: String,
    },
    /// The pod is selected by several PDBs, which the Eviction API refuses.
    MultiplePdbs {
        pod: PodId,
        pdbs: Vec<String>,
    },
    /// Its NodePool is not in the snapshot (deleted, or its budgets cannot be read).
    UnknownNodePool {
        nodepool: String,
    },
    /// consolidateAfter is Never.
    ConsolidationDisabled {
        nodepool: String,
    },
    /// consolidateAfter has not elapsed since the last pod event.
    ConsolidateAfter {
        left: Duration,
    },
    /// A static NodePool (`spec.replicas`) keeps its nodes: only drift and expiry replace them.
    StaticNodePool {
        nodepool: String,
    },
    /// Policy WhenEmpty and the node runs pods.
    WhenEmptyPolicy {
        nodepool: String,
    },
    /// The pool's budgets allow no more disruptions for this reason.
    Budget {
        nodepool: String,
        reason: DisruptionReason,
        limited_by: String,
    },
    /// Its pods cannot all be placed elsewhere or on cheaper capacity.
    NoCheaperPlacement {
        detail: String,
    },
    /// A drifted node of a static pool whose replacement cannot launch now.
    CannotReplace {
        detail: String,
    },
    /// A move was found but it saves too little for the disruption it causes.
    NotWorthIt {
        savings_per_hour: f64,
        required_per_hour: f64,
    },
    /// Spot-to-spot consolidation is behind a feature gate.
    SpotToSpotDisabled,
    /// Spot-to-spot single-node consolidation needs enough cheaper spot types.
    SpotFlexibility {
        cheaper_options: usize,
        needed: usize,
    },
    /// A candidate, but another command or method acted first this pass; it is judged again next pass.
    Deferred,
    /// Nothing to do: not empty, not drifted, and consolidation found no better place.
    Utilized,
}

impl fmt::Display for BlockReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockReason::InFlight => write!(f, "its NodeClaim has not launched a node yet"),
            BlockReason::NotInitialized => write!(f, "not initialized yet"),
            BlockReason::MarkedForDeletion => write!(f, "already being disrupted or deleted"),
            BlockReason::Nominated => write!(f, "nominated for pending pods"),
            BlockReason::NodeDoNotDisrupt => write!(f, "node has karpenter.sh/do-not-disrupt"),
            BlockReason::PodDoNotDisrupt { pod, left: None } => {
                write!(f, "do-not-disrupt pod {pod}")
            }
            BlockReason::PodDoNotDisrupt { pod, left: Some(left) } => {
                write!(f, "do-not-disrupt pod {pod} ({} left)", human(*left))
            }
            BlockReason::Pdb { pod, pdb } => write!(f, "PDB {pdb} allows 0 evictions of pod {pod}"),
            BlockReason::MultiplePdbs { pod, pdbs } => {
                write!(f, "pod {pod} is selected by several PDBs ({}), so it cannot be evicted", pdbs.join(", "))
            }
            BlockReason::UnknownNodePool { nodepool } => write!(f, "NodePool {nodepool} not found"),
            BlockReason::ConsolidationDisabled { nodepool } => {
                write!(f, "consolidateAfter of pool {nodepool} is Never")
            }
            BlockReason::ConsolidateAfter { left } => {
                write!(f, "consolidateAfter not elapsed ({} left)", human(*left))
            }
            BlockReason::StaticNodePool { nodepool } => {
                write!(f, "pool {nodepool} is static (spec.replicas): only drift and expiry replace its nodes")
            }
            BlockReason::WhenEmptyPolicy { nodepool } => {
                write!(f, "pool {nodepool} consolidates WhenEmpty and the node runs pods")
            }
            BlockReason::Budget { nodepool, reason, limited_by } => write!(
                f,
                "budget of pool {nodepool} is 0 for reason {} ({limited_by})",
                reason_str(*reason)
            ),
            BlockReason::NoCheaperPlacement { detail } => write!(f, "no cheaper placement: {detail}"),
            BlockReason::CannotReplace { detail } => write!(f, "no replacement can launch now: {detail}"),
            BlockReason::NotWorthIt { savings_per_hour, required_per_hour } => write!(
                f,
                "saving ${savings_per_hour:.4}/h is below the ${required_per_hour:.4}/h its disruption requires"
            ),
            BlockReason::SpotToSpotDisabled => {
                write!(f, "spot-to-spot consolidation is off (feature gate SpotToSpotConsolidation)")
            }
            BlockReason::SpotFlexibility { cheaper_options, needed } => write!(
                f,
                "only {cheaper_options} cheaper spot types, spot-to-spot replacement needs {needed}"
            ),
            BlockReason::Deferred => write!(f, "a candidate; another move was taken first this pass"),
            BlockReason::Utilized => write!(f, "not empty, not drifted, and no cheaper placement of its pods"),
        }
    }
}

/// `2m`, `1h5m`, `40s`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, sec) => format!("{m}m{sec}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// Why a command no longer holds at validation time.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Invalid {
    #[error("candidate {node} is gone")]
    CandidateGone { node: String },
    #[error("candidate {node} is no longer a candidate: {reason}")]
    NoLongerCandidate { node: String, reason: BlockReason },
    #[error("the budget of pool {nodepool} no longer allows {count} disruptions for reason {reason:?}")]
    Budget { nodepool: String, reason: DisruptionReason, count: usize },
    #[error("re-simulation leaves pods without a place: {detail}")]
    Unschedulable { detail: String },
    #[error("re-simulation needs {now} replacements, the command planned {planned}")]
    ReplacementCount { planned: usize, now: usize },
    #[error("re-simulation picks instance type {instance_type}, which the command did not plan")]
    ReplacementTypes { instance_type: String },
    #[error("the command no longer saves money (${savings_per_hour:.4}/h)")]
    NoSavings { savings_per_hour: f64 },
}

impl Invalid {
    /// Metric label, as upstream's `failed_validations_total` splits them.
    pub fn category(&self) -> &'static str {
        match self {
            Invalid::CandidateGone { .. } | Invalid::NoLongerCandidate { .. } => "churn",
            Invalid::Budget { .. } => "budget",
            _ => "scheduling",
        }
    }
}

/// A NodeClaim whose `expireAfter` has passed: deleted directly, with no budget or replacement first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    pub node: String,
    pub nodeclaim: String,
    pub nodepool: String,
    pub expired_at: Timestamp,
}
