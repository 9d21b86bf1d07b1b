//! Builders the integration tests share: solver inputs and plan checks (`solver_fixtures`) and disruption
//! snapshots and command checks (`disruption_fixtures`, built on the former), the binary run as the CLI
//! tests run it (`cli`), and the configuration of every property test (`proptest_config`).

pub mod cli;
pub mod disruption_fixtures;
pub mod solver_fixtures;

pub use karpenter_azure_core::proptest_config;
