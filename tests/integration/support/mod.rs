//! Builders the integration tests share: solver inputs and plan checks (`solver_fixtures`) and disruption
//! snapshots and command checks (`disruption_fixtures`, built on the former), and the configuration of every
//! property test (`proptest_config`).

pub mod disruption_fixtures;
pub mod solver_fixtures;

pub use karpenter_azure_core::proptest_config;
