//! The operator: what runs around the controllers: [`Options`] as flags and environment variables with
//! upstream's names, [`Validated`], the typed values after checking, and the leader election
//! ([`leader`]).

mod checks;
pub mod leader;
pub mod options;
pub mod settings;

pub use checks::setting;
pub use options::{defaults, Options, OptionsError, Secret, Setting};
pub use settings::{
    AzureSettings, Credential, LeaderElection, NetworkDataplane, NetworkPlugin, NetworkPolicy,
    NetworkSettings, Validated,
};

#[cfg(test)]
mod options_tests;
