//! Upstream's settings that change nothing here, accepted so that an environment or command line written
//! for upstream's controller starts this one unchanged.
//!
//! Each is a flag and an environment variable under upstream's names (Azure provider
//! `pkg/operator/options/options.go` and `pkg/auth/config.go`, Karpenter core
//! `pkg/operator/options/options.go`, and the variables upstream's chart sets in
//! `charts/karpenter/templates/deployment.yaml`). A value is checked for its form as upstream checks it;
//! one that differs from upstream's default is reported at start as having no effect, or refused when
//! running without it would do something else than the user asked for (another provision mode, the
//! AKS-managed image gallery, another cloud).

use std::collections::BTreeMap;

use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};

use super::checks;
use super::options::{OptionsError, Setting};

/// The form of a value, as upstream parses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Go's `strconv.ParseBool`.
    Bool,
    /// A whole number at least 0.
    Count,
    /// A Go duration such as `1s`.
    Duration,
    /// One of these.
    OneOf(&'static [&'static str]),
    /// Any text.
    Text,
    /// Any text, compared with the default without regard to case (go-autorest's cloud names).
    Name,
}

/// What a value other than upstream's default does here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Otherwise {
    /// Nothing: a warning at start says so.
    NoEffect,
    /// Something this controller cannot do: the value is refused with this fix.
    Refused(&'static str),
}

/// One upstream-only setting.
#[derive(Debug, Clone, Copy)]
struct UpstreamSetting {
    setting: Setting,
    kind: Kind,
    /// Upstream's default; a value equal to it (or empty) is silent.
    default: &'static str,
    /// Why it changes nothing here.
    reason: &'static str,
    otherwise: Otherwise,
}

const fn upstream(
    flag: &'static str,
    env: &'static str,
    kind: Kind,
    default: &'static str,
    reason: &'static str,
    otherwise: Otherwise,
) -> UpstreamSetting {
    UpstreamSetting { setting: Setting { flag, env, fallback_env: None }, kind, default, reason, otherwise }
}

const PROVISION_MODES: &[&str] =
    &["aksscriptless", "bootstrappingclient", "aksmachineapi", "aksmachineapiheaderbatch"];
const MACHINE_API_ONLY: &str = "used only by upstream's AKS Machine API provision modes";
const SIG_ONLY: &str = "used only with USE_SIG, which is for the AKS-managed add-on";

/// Every upstream setting accepted without effect.
const UPSTREAM_ONLY: &[UpstreamSetting] = &[
    upstream(
        "provision-mode",
        "PROVISION_MODE",
        Kind::OneOf(PROVISION_MODES),
        "aksscriptless",
        "nodes are always launched as VMs that join with their own custom data (aksscriptless)",
        Otherwise::Refused("only aksscriptless is implemented: set it, or leave the setting unset"),
    ),
    upstream(
        "nodebootstrapping-server-url",
        "NODEBOOTSTRAPPING_SERVER_URL",
        Kind::Text,
        "",
        "used only by upstream's bootstrappingclient provision mode",
        Otherwise::NoEffect,
    ),
    upstream(
        "use-sig",
        "USE_SIG",
        Kind::Bool,
        "false",
        "node images come from the AKS community galleries",
        Otherwise::Refused("the AKS-managed image gallery is not implemented: set false, or leave it unset"),
    ),
    upstream("sig-access-token-server-url", "SIG_ACCESS_TOKEN_SERVER_URL", Kind::Text, "", SIG_ONLY, Otherwise::NoEffect),
    upstream("sig-access-token-scope", "SIG_ACCESS_TOKEN_SCOPE", Kind::Text, "", SIG_ONLY, Otherwise::NoEffect),
    upstream("sig-subscription-id", "SIG_SUBSCRIPTION_ID", Kind::Text, "", SIG_ONLY, Otherwise::NoEffect),
    upstream(
        "manage-existing-aks-machines",
        "MANAGE_EXISTING_AKS_MACHINES",
        Kind::Bool,
        "false",
        MACHINE_API_ONLY,
        Otherwise::NoEffect,
    ),
    upstream("aks-machines-pool-name", "AKS_MACHINES_POOL_NAME", Kind::Text, "", MACHINE_API_ONLY, Otherwise::NoEffect),
    upstream(
        "provider-batch-idle-duration",
        "PROVIDER_BATCH_IDLE_DURATION",
        Kind::Duration,
        "1s",
        MACHINE_API_ONLY,
        Otherwise::NoEffect,
    ),
    upstream(
        "provider-batch-max-duration",
        "PROVIDER_BATCH_MAX_DURATION",
        Kind::Duration,
        "5s",
        MACHINE_API_ONLY,
        Otherwise::NoEffect,
    ),
    upstream("provider-batch-max-size", "PROVIDER_BATCH_MAX_SIZE", Kind::Count, "50", MACHINE_API_ONLY, Otherwise::NoEffect),
    upstream(
        "enable-azure-sdk-logging",
        "ENABLE_AZURE_SDK_LOGGING",
        Kind::Bool,
        "true",
        "the Azure SDK's request logging is not wired in",
        Otherwise::NoEffect,
    ),
    upstream(
        "arm-cloud",
        "ARM_CLOUD",
        Kind::Name,
        "AzurePublicCloud",
        "the cloud is chosen by ARM_ENDPOINT and AZURE_AUTHORITY_HOST",
        Otherwise::Refused(
            "set ARM_ENDPOINT and AZURE_AUTHORITY_HOST to the cloud's endpoints instead, and leave this unset",
        ),
    ),
    upstream(
        "azure-environment-filepath",
        "AZURE_ENVIRONMENT_FILEPATH",
        Kind::Text,
        "",
        "the cloud is chosen by ARM_ENDPOINT and AZURE_AUTHORITY_HOST",
        Otherwise::Refused(
            "set ARM_ENDPOINT and AZURE_AUTHORITY_HOST to the cloud's endpoints instead, and leave this unset",
        ),
    ),
    upstream(
        "ignore-dra-requests",
        "IGNORE_DRA_REQUESTS",
        Kind::Bool,
        "true",
        "the solver does not read Dynamic Resource Allocation claims",
        Otherwise::NoEffect,
    ),
    upstream(
        "disable-cluster-state-observability",
        "DISABLE_CLUSTER_STATE_OBSERVABILITY",
        Kind::Bool,
        "false",
        "the cluster state metrics are always exported",
        Otherwise::NoEffect,
    ),
    upstream("kube-client-qps", "KUBE_CLIENT_QPS", Kind::Count, "200", "this controller's Kubernetes client has no client-side rate limit to set", Otherwise::NoEffect),
    upstream("kube-client-burst", "KUBE_CLIENT_BURST", Kind::Count, "300", "this controller's Kubernetes client has no client-side rate limit to set", Otherwise::NoEffect),
    upstream("enable-profiling", "ENABLE_PROFILING", Kind::Bool, "false", "there is no Go profiler to serve", Otherwise::NoEffect),
    upstream(
        "disable-controller-warmup",
        "DISABLE_CONTROLLER_WARMUP",
        Kind::Bool,
        "true",
        "there are no controller-runtime controllers to warm up",
        Otherwise::NoEffect,
    ),
    upstream("memory-limit", "MEMORY_LIMIT", Kind::Text, "-1", "there is no Go garbage collector to tune", Otherwise::NoEffect),
    upstream("cpu-requests", "CPU_REQUESTS", Kind::Text, "1000", "there is no Go runtime to size", Otherwise::NoEffect),
    upstream("log-output-paths", "LOG_OUTPUT_PATHS", Kind::Text, "stdout", "the controller logs JSON to stdout", Otherwise::NoEffect),
    upstream(
        "log-error-output-paths",
        "LOG_ERROR_OUTPUT_PATHS",
        Kind::Text,
        "stderr",
        "the controller logs errors, as JSON, to stdout",
        Otherwise::NoEffect,
    ),
    upstream("scheduler-config", "SCHEDULER_CONFIG", Kind::Text, "", "kube-scheduler's default spread constraints are not read", Otherwise::NoEffect),
    upstream("karpenter-service", "KARPENTER_SERVICE", Kind::Text, "", "there are no admission webhooks", Otherwise::NoEffect),
    upstream("disable-webhook", "DISABLE_WEBHOOK", Kind::Bool, "false", "there are no admission webhooks", Otherwise::NoEffect),
    upstream("webhook-port", "WEBHOOK_PORT", Kind::Count, "8443", "there are no admission webhooks", Otherwise::NoEffect),
    upstream("webhook-metrics-port", "WEBHOOK_METRICS_PORT", Kind::Count, "8001", "there are no admission webhooks", Otherwise::NoEffect),
    upstream(
        "kubernetes-min-version",
        "KUBERNETES_MIN_VERSION",
        Kind::Text,
        "",
        "the cluster's version is not compared with a minimum",
        Otherwise::NoEffect,
    ),
];

/// The values given to upstream-only settings, by environment variable name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamOnly {
    pub given: BTreeMap<&'static str, String>,
}

/// An upstream-only setting given a value that changes nothing here, for a warning at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WithoutEffect {
    pub setting: Setting,
    pub value: String,
    pub reason: &'static str,
}

impl UpstreamOnly {
    /// Checks each given value's form; returns those that differ from upstream's default, or the first
    /// value that is malformed or refused.
    pub fn check(&self) -> Result<Vec<WithoutEffect>, OptionsError> {
        let mut without_effect = Vec::new();
        for u in UPSTREAM_ONLY {
            let Some(value) = self.given.get(u.setting.env).map(|v| v.trim()).filter(|v| !v.is_empty())
            else {
                continue;
            };
            let is_default = match u.kind {
                Kind::Bool => checks::go_bool(u.setting, value)? == checks::go_bool(u.setting, u.default)?,
                Kind::Count => {
                    let n = value.parse::<u32>().map_err(|_| OptionsError::Invalid {
                        setting: u.setting,
                        reason: format!("must be a whole number, got {value:?}"),
                    })?;
                    u.default.parse::<u32>().ok() == Some(n)
                }
                Kind::Duration => {
                    checks::duration(u.setting, value)? == checks::duration(u.setting, u.default)?
                }
                Kind::OneOf(allowed) => checks::one_of(u.setting, value, allowed)? == u.default,
                Kind::Text => value == u.default,
                Kind::Name => value.eq_ignore_ascii_case(u.default),
            };
            if is_default {
                continue;
            }
            match u.otherwise {
                Otherwise::NoEffect => without_effect.push(WithoutEffect {
                    setting: u.setting,
                    value: value.to_string(),
                    reason: u.reason,
                }),
                Otherwise::Refused(fix) => {
                    return Err(OptionsError::Invalid {
                        setting: u.setting,
                        reason: format!("{value:?}: {fix}"),
                    })
                }
            }
        }
        Ok(without_effect)
    }
}

impl FromArgMatches for UpstreamOnly {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let given = UPSTREAM_ONLY
            .iter()
            .filter_map(|u| Some((u.setting.env, matches.get_one::<String>(u.setting.flag)?.clone())))
            .collect();
        Ok(UpstreamOnly { given })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = UpstreamOnly::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for UpstreamOnly {
    fn augment_args(command: Command) -> Command {
        let args = UPSTREAM_ONLY.iter().map(|u| {
            let arg = Arg::new(u.setting.flag)
                .long(u.setting.flag)
                .env(u.setting.env)
                .value_parser(clap::value_parser!(String))
                .help(match u.otherwise {
                    Otherwise::NoEffect => format!("Upstream's; no effect here: {}", u.reason),
                    Otherwise::Refused(_) if u.default.is_empty() => {
                        format!("Upstream's; must be left unset here: {}", u.reason)
                    }
                    Otherwise::Refused(_) => {
                        format!("Upstream's; only {:?} is accepted: {}", u.default, u.reason)
                    }
                });
            // Go's boolean flags may be given without a value, as upstream's are.
            match u.kind {
                Kind::Bool => arg.num_args(0..=1).default_missing_value("true"),
                _ => arg.num_args(1),
            }
        });
        command.next_help_heading("Upstream settings, accepted for compatibility").args(args)
    }

    fn augment_args_for_update(command: Command) -> Command {
        UpstreamOnly::augment_args(command)
    }
}

/// Warns, once at start, about each upstream-only setting whose value changes nothing here.
pub fn log_without_effect(without_effect: &[WithoutEffect]) {
    for w in without_effect {
        tracing::warn!(setting = %w.setting, value = %w.value, reason = w.reason, "upstream setting has no effect here");
    }
}

/// The environment variable names of every upstream-only setting, for tests and docs.
pub fn env_names() -> impl Iterator<Item = &'static str> {
    UPSTREAM_ONLY.iter().map(|u| u.setting.env)
}
