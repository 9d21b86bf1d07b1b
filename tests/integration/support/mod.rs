//! Builders the integration tests share: solver inputs and plan checks (`solver_fixtures`) and disruption
//! snapshots and command checks (`disruption_fixtures`, built on the former).

pub mod disruption_fixtures;
pub mod solver_fixtures;
