//! `karpenter-azure simulate --timeline FILE`: a scenario over virtual time. The cluster starts with
//! the file's objects; events (scale a Deployment, apply or delete an object, a spot eviction) happen
//! at their times; the real provisioning, disruption and validation code runs on a virtual clock with
//! a configurable boot delay. A simulated day takes seconds, and the same file gives the same run.
//!
//! - `file`: the timeline format; `cluster`: the virtual cluster and its controllers' actions;
//!   `snapshot`: the cluster as objects of the controller's index now (Nodes with their NodeClaims,
//!   drift, PDB allowances); `engine`: the clock and the order of controllers;
//!   `above_bound`: the stretches above 1.1× the bound and what stopped consolidation in each;
//!   `output`: table and JSON; `html`: the self-contained `--report` page.
//! - `demo.yaml`: the built-in demo (`--timeline demo`).

pub mod above_bound;
pub mod cluster;
pub mod command;
pub mod engine;
pub mod file;
pub mod html;
pub mod output;
pub mod snapshot;

pub use command::{TimelineArgs, TimelineError};
pub use engine::{run, DecisionRow, Run, RunError, Sample};
pub use file::{parse, Timeline, TimelineFileError};

/// The built-in demo timeline: a day/night cycle with a spot eviction, a budget window and an
/// AKSNodeClass change.
pub const DEMO: &str = include_str!("demo.yaml");
/// The name that selects the demo, and names it in messages.
pub const DEMO_NAME: &str = "demo";
