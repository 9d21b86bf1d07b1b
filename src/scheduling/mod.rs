//! Pure scheduling code: the requirements algebra, resource vectors, the solver's input and output, and
//! the solver itself. No I/O, no clock; deterministic (sorted maps and total-order tie-breaks).

pub mod input;
pub mod plan;
pub mod requirements;
pub mod resources;

pub use input::{ExistingNode, NodePoolInput, Pod, PodId, SolveInput, SolveOptions};
pub use plan::{NewNodeClaim, Plan, Unschedulable};
