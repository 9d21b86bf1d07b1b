//! The operator: what runs around the controllers: [`Options`] as flags and environment variables with
//! upstream's names, [`Validated`], the typed values after checking, the leader election ([`leader`]),
//! the log line formats (`logging`), the Prometheus metrics (`metrics`), the metrics and health servers (`server`), and the supervision
//! of long-running tasks (`supervisor`), and upstream's settings accepted without effect (`upstream_only`).

mod checks;
pub mod leader;
pub mod logging;
pub mod metrics;
mod metrics_cluster;
mod metrics_disruption;
mod metrics_lifecycle;
mod metrics_rebuilt;
mod metrics_registry;
mod metrics_runtime;
mod metrics_scheduler;
mod metrics_status;
mod metrics_summary;
pub mod metrics_table;
pub mod options;
pub mod server;
pub mod settings;
pub mod supervisor;
pub mod upstream_only;

pub use checks::setting;
pub use options::{defaults, FeatureGates, Options, OptionsError, Secret, Setting};
pub use settings::{
    AzureSettings, Credential, LeaderElection, LogFormat, MinValuesPolicy, NetworkDataplane, NetworkPlugin,
    NetworkPolicy, NetworkSettings, PreferencePolicy, Validated,
};

#[cfg(test)]
mod options_tests;
#[cfg(test)]
mod upstream_settings_tests;
