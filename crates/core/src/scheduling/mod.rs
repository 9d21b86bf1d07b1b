//! Pure scheduling code: the solver's input and output, the solver itself, its lower bounds and the
//! feasibility checker. No I/O, no clock; deterministic (sorted maps and total-order tie-breaks). The
//! requirements algebra and resource vectors it works with are in `crate::model`.

mod anchors;
mod base;
mod bound;
mod cancel;
mod claims;
mod colgen;
mod downsize;
#[cfg(test)]
mod downsize_tests;
mod explain;
pub mod feasibility;
pub mod from_k8s;
mod improve;
pub mod input;
mod knapsack;
mod lp;
mod node;
mod node_fit;
pub mod overlay;
mod pack;
mod placement;
pub mod plan;
#[cfg(test)]
mod preference_policy_tests;
mod shapes;
mod slots;
mod solve;
#[cfg(test)]
mod solve_tests;
mod spread;
mod static_claim;
mod templates;
#[cfg(test)]
mod test_support;
mod topology;
mod valuation;
mod working;

pub use base::RunningBase;
pub use cancel::{Cancelled, ShouldCancel};
pub use input::{
    ExistingNode, MinValuesPolicy, NodePoolInput, Pod, PodId, PreferencePolicy, SolveInput, SolveOptions,
};
pub use placement::{Placement, Sketch, SketchedNode};
pub use plan::{NewNodeClaim, Plan, Unschedulable};
pub use solve::{lower_bound_with_cancel, place_with_cancel, placement_with_base, solve, solve_with_cancel};
pub use static_claim::static_claim;
