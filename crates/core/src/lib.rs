//! The pure core of karpenter-azure: everything that decides, and nothing that does I/O.
//!
//! ```text
//! model ← apis ← scheduling ← disruption
//! ```
//!
//! - `model`: labels, the requirements algebra, resources, instance types and offerings, selection.
//! - `apis`: the CRD types (`NodePool`, `NodeClaim`, `AKSNodeClass`), their validation, their
//!   requirements in the model's terms, and the hashes drift is judged on.
//! - `scheduling`: the solver, its lower bounds and the feasibility checker.
//! - `disruption`: the disruption decisions (emptiness, drift, expiration, consolidation) under
//!   budgets, PDBs and do-not-disrupt.
//!
//! A crate of its own so that purity is the build's rule: no async runtime, no HTTP, Kubernetes or
//! Azure client is a dependency, so none can be named here; decisions take `now` as an argument. The
//! controller (the `karpenter-azure` crate) turns Kubernetes objects into this crate's inputs and its
//! outputs into API and Azure calls; the simulator runs the same code on files and a virtual clock.

#![forbid(unsafe_code)]

pub mod apis;
pub mod disruption;
pub mod model;
pub mod scheduling;

// The property tests' seed and failure files, for this crate's tests and (with the feature) the
// integration tests.
#[cfg(any(test, feature = "proptest-config"))]
pub mod proptest_config;
