//! The bottom layer: the vocabulary every other module speaks, with no I/O, no clock and no
//! dependency on any other module of the crate.
//!
//! - `labels`: well-known label keys, annotations, taints, finalizers, and which keys users may set.
//! - `requirements`: the requirements algebra (node selector requirements as sets of label values).
//! - `value_set`: the sorted set of values one requirement lists.
//! - `resources`: exact resource vectors and Kubernetes quantity strings.
//! - `instancetype`: instance types, their offerings, capacity types and node overhead.
//! - `selection`: which instance types and offerings a set of requirements allows.
//!
//! The crate is layered model ← apis ← {catalog, scheduling, disruption} ← state ← {cloud, controllers,
//! sim}; `tests/integration/layering.rs` checks that no module imports one above it.

pub mod instancetype;
pub mod labels;
pub mod node_labels;
pub mod requirements;
pub mod resources;
pub mod selection;
mod value_set;

pub use instancetype::{CapacityType, InstanceType, Offering, Overhead};
pub use node_labels::{node_labels, LabelLookup, NodeLabels};
pub use requirements::{Requirement, Requirements};
pub use resources::Resources;
