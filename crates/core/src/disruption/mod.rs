//! Pure disruption decisions: which managed nodes to remove or replace now, and why the others stay.
//!
//! Input is a [`Snapshot`] (plain data) and `now`; output is [`Decisions`]: [`Command`]s for the
//! controller to act on (taint, launch replacements, drain, delete) and a [`Blocked`] reason for every
//! other managed node. Methods run in upstream's order — emptiness, drift, consolidation — under the
//! NodePools' budgets, PDBs and do-not-disrupt. [`validate`] is the re-check before acting and
//! [`expired`] the forceful expiration. Every "where would these pods go" question is answered by
//! [`crate::scheduling::solve`]. No I/O, no clock, deterministic.

pub mod applied;
pub mod budgets;
pub mod candidates;
pub mod command;
pub mod consolidation;
pub mod cost;
pub mod cron;
mod decide;
pub mod drift;
mod expiration;
pub mod repair;
pub mod replacement;
pub mod simulate;
pub mod snapshot;
pub mod static_pools;
mod validate;

pub use budgets::{Budget, BudgetError, BudgetNodes, BudgetWindow};
pub use command::{repack_ratio, BlockReason, Blocked, Command, Decisions, Expired, Invalid, Method, Move};
pub use decide::{
    decide, decide_with_cancel, repack, repack_lower_bound, repack_lower_bound_with_cancel,
    repack_with_cancel,
};
pub use expiration::expired;
pub use snapshot::{
    offering_price, DoNotDisrupt, Drifted, ManagedNode, NodePod, Pdb, PodKind, PolicyError, PoolPolicy,
    Snapshot, UnmanagedNode,
};
pub use validate::validate;

/// Settings of the decisions that are not per NodePool.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Feature gate `SpotToSpotConsolidation` (upstream default off): whether a set of spot nodes may
    /// be replaced by cheaper spot capacity rather than only deleted.
    pub spot_to_spot_consolidation: bool,
    /// How much saving a consolidation in a `Balanced` pool must bring for the disruption it causes: a
    /// move is taken when `(savings ÷ pool $/h) ÷ (disruption ÷ pool disruption) ≥ threshold`
    /// (upstream `pkg/controllers/disruption/balanced.go`: 1/k with `BalancedK` = 2, the default here).
    /// Pools with `WhenEmptyOrUnderutilized` take any saving, as upstream.
    pub consolidation_threshold: f64,
    /// Single-node moves solved per pass when no multi-node move is worth it; the rest wait for the
    /// next pass (upstream bounds the same search by a 3-minute timeout, which is not deterministic).
    pub max_single_node_solves: usize,
    /// Prefix sizes solved per pass and per candidate order for a multi-node move (halving from the
    /// whole order, then a binary search upward); smaller moves are left to the single-node solves and
    /// later passes.
    pub max_multi_node_solves: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            spot_to_spot_consolidation: false,
            consolidation_threshold: 0.5,
            max_single_node_solves: 8,
            max_multi_node_solves: 10,
        }
    }
}
