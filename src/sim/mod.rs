//! The simulator: runs the same decision code as the controller on a scenario written as Kubernetes
//! manifests (or a snapshot of a real cluster), without a cluster, and reports what would be launched
//! and what it would cost (`karpenter-azure simulate`).
//!
//! - `load`: reading and decoding the files (the only manifest I/O).
//! - `scenario`: objects to one [`crate::scheduling::SolveInput`] (workload expansion, NodePools,
//!   limits, DaemonSets); the per-object conversion is [`crate::scheduling::from_k8s`].
//! - `managed`: the managed nodes of a snapshot as the disruption decisions see them.
//! - `catalog_file`: the `--catalog` JSON list of instance types.
//! - `report`: table and JSON output; `command`: the command itself. `demo.yaml`: the built-in demo.
//! - `catalog_command`: the `karpenter-azure catalog` command, which reads a NodePool and AKSNodeClass
//!   from files (the catalog itself is pure).
//! - `upstream_bench`: `bench-upstream`, our solver next to upstream Karpenter's on upstream's benchmark
//!   input, both plans checked for feasibility; `growth`: solve time against pods, judged against
//!   `n log n`, for `bench` and `bench-upstream`.

pub mod catalog_command;
pub mod catalog_file;
pub mod command;
pub mod growth;
pub mod load;
pub mod managed;
pub mod report;
pub mod scenario;
#[cfg(test)]
mod snapshot_tests;
pub mod timeline;
pub mod upstream_bench;

pub use command::{run, SimulateArgs, SimulateError};
