//! karpenter-azure: a Kubernetes node autoscaler for Azure.
//!
//! # Layers
//!
//! ```text
//! model ← apis ← {catalog, scheduling, disruption} ← state ← operator ← {cloud, controllers, sim}
//! ```
//!
//! An arrow points from a lower layer to the modules that may use it; a module never uses one above
//! it, catalog and scheduling never use each other, and controllers may use cloud (not the reverse).
//! `bench`, `bench_disruption`, `bench_overlays` and the binary sit on top. `model`, `apis`,
//! `scheduling` and `disruption` are the pure core crate (`crates/core`, `karpenter_azure_core`),
//! re-exported here under the same names; its manifest has no dependency that does I/O.
//! `tests/integration/layering.rs` checks the layers, and that the pure modules name no I/O, async
//! runtime, client or clock.
//!
//! - `model`: labels, the requirements algebra, resources, instance types and offerings, selection.
//! - `apis`: the CRD types, their validation and their requirements in the model's terms; crdgen.
//! - `catalog`: Azure VM sizes, allocatable, prices, the unavailable-offerings cache.
//! - `scheduling`: the solver, its lower bounds and the feasibility checker (pure).
//! - `state`: the cluster index fed by watches, and its snapshot as solver input (synchronous).
//! - `operator`: settings, leader election, metrics and the health server.
//! - `cloud`: the CloudProvider trait and its Azure implementation; `controllers`: the controller
//!   command; `sim`: the simulator.
//!
//! # Data path of one provisioning decision
//!
//! 1. Watch: `controllers/watch.rs` streams Pods, Nodes, NodeClaims, NodePools, AKSNodeClasses,
//!    DaemonSets and PDBs into the index.
//! 2. State index: `state/cluster.rs` keeps compact records (`state/records.rs`) of what decisions read.
//! 3. Snapshot: `state/snapshot.rs` turns the index into a `scheduling::SolveInput`, with instance types
//!    from the cloud provider (`cloud/azure/instancetypes.rs`, built by `catalog/instancetype.rs`).
//! 4. Solve: `scheduling/solve.rs` (working state in `scheduling/working.rs`, both in `crates/core`)
//!    returns a `Plan`.
//! 5. NodeClaim: `controllers/provisioning/` creates one NodeClaim per planned claim
//!    (`controllers/nodeclaim/create.rs`), built by `controllers/nodeclaim/build.rs`.
//! 6. Launch: `controllers/nodeclaim/lifecycle/` (`phase.rs` decides, `launch.rs` acts) turns the
//!    NodeClaim into a launch request (`cloud/azure/launch.rs`) and the cloud provider launches it,
//!    `cloud/azure/provider.rs` (NIC and VM over ARM).

#![forbid(unsafe_code)]

pub mod apis;
// The pure core, re-exported so that `crate::model`, `crate::scheduling` and `crate::disruption` read
// the same in both crates.
pub use karpenter_azure_core::{disruption, model, scheduling};
pub mod bench;
pub mod bench_disruption;
pub mod bench_overlays;
pub mod catalog;
pub mod cloud;
pub mod controllers;
pub mod operator;
pub mod sim;
pub mod state;
