//! The simulator: runs the same decision code as the controller on a scenario written as Kubernetes
//! manifests (or a snapshot of a real cluster), without a cluster, and reports what would be launched
//! and what it would cost (`karpenter-azure simulate`).
//!
//! - `load`: reading and decoding the files (the only manifest I/O); `from_cluster`: the same objects
//!   listed from the current kubeconfig's cluster (`--from-cluster`).
//! - `index`: the objects loaded into the controller's cluster index ([`crate::state::Cluster`]),
//!   with what a file lacks filled in; the solver and disruption input are that index's snapshots.
//! - `scenario`: the solver input ([`crate::scheduling::SolveInput`]), plus the pods of workloads the
//!   input has no pods for.
//! - `managed`: the disruption input, with the errors and warnings only `simulate` gives.
//! - `catalog_file`: the `--catalog` JSON list of instance types.
//! - `report`: table and JSON output; `explain`: `--explain`'s answer for one pod or node; `command`:
//!   the command itself. `demo.yaml`: the built-in demo.
//! - `catalog_command`: the `karpenter-azure catalog` command, which reads a NodePool and AKSNodeClass
//!   from files (the catalog itself is pure).
//! - `upstream_bench`: `bench-upstream`, our solver next to upstream Karpenter's on upstream's benchmark
//!   input, both plans checked for feasibility; `growth`: solve time against pods, judged against
//!   `n log n`, for `bench` and `bench-upstream`.
//! - `upstream_disruption`: `bench-upstream-disruption`, our disruption pass next to upstream
//!   Karpenter's on clusters packed by upstream, both outcomes checked for feasibility.

pub mod catalog_command;
pub mod catalog_file;
pub mod command;
pub mod explain;
pub mod from_cluster;
pub mod growth;
pub mod index;
#[cfg(test)]
mod index_tests;
pub mod load;
pub mod managed;
pub mod report;
pub mod scenario;
pub mod timeline;
pub mod upstream_bench;
pub mod upstream_disruption;

pub use command::{run, SimulateArgs, SimulateError};
