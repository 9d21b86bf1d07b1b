//! Pure scheduling code: the requirements algebra, resource vectors, the solver's input and output, and
//! the solver itself. No I/O, no clock; deterministic (sorted maps and total-order tie-breaks).

pub mod bound;
mod claims;
mod colgen;
mod explain;
pub mod feasibility;
pub mod from_k8s;
mod improve;
pub mod input;
mod knapsack;
pub mod lp;
pub mod model;
pub mod node;
pub mod pack;
pub mod plan;
pub mod requirements;
pub mod resources;
mod slots;
mod solve;
#[cfg(test)]
mod solve_tests;
mod spread;
pub mod templates;
pub mod topology;

pub use input::{ExistingNode, NodePoolInput, Pod, PodId, SolveInput, SolveOptions};
pub use plan::{NewNodeClaim, Plan, Unschedulable};
pub use solve::solve;
