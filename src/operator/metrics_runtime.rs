//! The operator's own metrics: the build (`karpenter_build_info`, upstream core `pkg/operator/operator.go`),
//! the process (client_golang's process collector, which controller-runtime registers), leader election
//! and reconciles in controller-runtime's shape (`pkg/internal/controller/metrics`, `pkg/leaderelection`),
//! and ours: supervised task restarts, failing watches and credentials, the prices' age.
//!
//! A reconcile here is one unit of a controller's work ([`Work`], from `Shared::begin_work`): one
//! NodeClaim's lifecycle step, one provisioning round, one disruption pass or command, one sweep.

use std::time::{Duration, Instant};

use prometheus::{GaugeVec, HistogramVec, IntCounterVec, IntGaugeVec};

use super::metrics::{get, Metrics};
use super::metrics_registry::{Doc, Origin, Registrar, Type};

/// controller-runtime's `controller_runtime_reconcile_time_seconds` buckets.
pub const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25,
    1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0,
    50.0, 60.0,
];

/// The commit the binary was built from (`GIT_COMMIT` at build time, as upstream's `env.GetRevision`
/// reads the VCS stamp), else `unknown`.
pub const COMMIT: &str = match option_env!("GIT_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

/// Go's `GOARCH` name of the architecture the binary runs on.
pub fn goarch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

pub struct RuntimeMetrics {
    /// `karpenter_build_info{version, goversion, goarch, commit}`: 1.
    pub build_info: GaugeVec,
    /// `leader_election_master_status{name}`.
    pub leader_status: IntGaugeVec,
    /// `controller_runtime_reconcile_total{controller, result}`.
    pub reconcile_total: IntCounterVec,
    /// `controller_runtime_reconcile_errors_total{controller}`.
    pub reconcile_errors: IntCounterVec,
    /// `controller_runtime_reconcile_panics_total{controller}`.
    pub reconcile_panics: IntCounterVec,
    /// `controller_runtime_reconcile_time_seconds{controller}`.
    pub reconcile_time: HistogramVec,
    /// `controller_runtime_active_workers{controller}`.
    pub active_workers: IntGaugeVec,
    /// `controller_runtime_max_concurrent_reconciles{controller}`.
    pub max_concurrent: IntGaugeVec,
    /// `karpenter_azure_task_restarts_total{task}`: ours.
    pub task_restarts: IntCounterVec,
    /// `karpenter_azure_watch_failing_seconds{kind}`: ours.
    pub watch_failing: GaugeVec,
    /// `karpenter_azure_credential_failing_seconds`: ours.
    pub credential_failing: GaugeVec,
    /// `karpenter_azure_pricing_age_seconds{source}`: ours; one series, for the source in effect.
    pub pricing_age: GaugeVec,
}

impl RuntimeMetrics {
    pub fn register(r: &Registrar) -> RuntimeMetrics {
        let runtime = |name: &str, help: &str, labels: &[&str], when: &str, by: &'static [&'static str]| {
            r.def(name, help, labels).origin(Origin::ControllerRuntime).recorded(when, by)
        };
        let unit = "per unit of controller work (a NodeClaim reconcile, a provisioning round, a disruption pass or command, a sweep)";
        let m = RuntimeMetrics {
            build_info: r
                .def(
                    "karpenter_build_info",
                    "A metric with a constant '1' value labeled by version from which karpenter was built.",
                    &["version", "goversion", "goarch", "commit"],
                )
                .origin(Origin::Core("pkg/operator/operator.go"))
                .recorded(
                    "at start: version is the crate's, goversion the Rust compiler's (`rustc <version>`), goarch Go's name of the CPU architecture, commit the build's `GIT_COMMIT`",
                    &["record_build_info"],
                )
                .gauge(),
            leader_status: runtime(
                "leader_election_master_status",
                "Gauge of if the reporter is master of a particular lease, 1 indicates master, 0 indicates backup. The name label is the name of the lease.",
                &["name"],
                "leader election: 1 while this replica leads, 0 on a standby",
                &["set_leading"],
            )
            .int_gauge(),
            reconcile_total: runtime(
                "controller_runtime_reconcile_total",
                "Total number of reconciliations per controller",
                &["controller", "result"],
                &format!("{unit}; result success or error"),
                &["begin_work"],
            )
            .counter(),
            reconcile_errors: runtime(
                "controller_runtime_reconcile_errors_total",
                "Total number of reconciliation errors per controller",
                &["controller"],
                "per unit of controller work that failed",
                &["begin_work"],
            )
            .counter(),
            reconcile_panics: runtime(
                "controller_runtime_reconcile_panics_total",
                "Total number of reconciliation panics per controller",
                &["controller"],
                "per unit of controller work that panicked",
                &["begin_work"],
            )
            .counter(),
            reconcile_time: runtime(
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                &["controller"],
                unit,
                &["begin_work"],
            )
            .histogram(RECONCILE_BUCKETS),
            active_workers: runtime(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                &["controller"],
                "units of work in flight, per controller",
                &["begin_work"],
            )
            .leader_only()
            .int_gauge(),
            max_concurrent: runtime(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                &["controller"],
                "when a controller loop starts: 1 for the loops that work one unit at a time",
                &["set_max_concurrent"],
            )
            .leader_only()
            .int_gauge(),
            task_restarts: r
                .def(
                    "karpenter_azure_task_restarts_total",
                    "Long-running controller tasks (provisioning, the NodeClaim lifecycle, status, garbage collection, disruption, ...) that ended or panicked and were started again, by task.",
                    &["task"],
                )
                .recorded("a controller loop that ended or panicked and was started again", &["task_restarted"])
                .counter(),
            watch_failing: r
                .def(
                    "karpenter_azure_watch_failing_seconds",
                    "How long the watch of each kind has been failing (a series only while it fails); past KARPENTER_WATCH_STALE_AFTER (5 minutes) /readyz fails.",
                    &["kind"],
                )
                .recorded(
                    "at scrape time, every replica: how long the watch of a kind has been failing, while it fails; past `KARPENTER_WATCH_STALE_AFTER` (default 5 minutes) `/readyz` answers 503 naming it",
                    &["set_watch_failing"],
                )
                .gauge(),
            credential_failing: r
                .def(
                    "karpenter_azure_credential_failing_seconds",
                    "How long the Azure credential has failed to get tokens without a success in between; 0 while it works. Past a minute the AKSNodeClasses show CredentialsReady=False, past KARPENTER_CREDENTIAL_RESTART_AFTER (15 minutes) /healthz fails.",
                    &[],
                )
                .recorded(
                    "at scrape time, every replica: how long the Azure credential has failed to get tokens (0 while it works); past a minute every AKSNodeClass shows `CredentialsReady=False` with the cause (and a `CredentialsUnavailable` event) and is not Ready; past `KARPENTER_CREDENTIAL_RESTART_AFTER` (default 15 minutes) `/healthz` answers 500, so the kubelet restarts the pod",
                    &["set_credential_failing"],
                )
                .gauge(),
            pricing_age: r
                .def(
                    "karpenter_azure_pricing_age_seconds",
                    "Age of the VM prices the solver uses: seconds since the last successful Retail Prices API refresh (source=live), or, before the first one, since the controller started on the embedded table (source=static, spot priced as on-demand).",
                    &["source"],
                )
                .recorded(
                    "at scrape time, every replica: seconds since the last successful Retail Prices refresh (`live`), or since start while the embedded prices are in use (`static`)",
                    &["set_pricing_age"],
                )
                .gauge(),
        };
        register_process(r);
        m
    }
}

/// client_golang's process collector, as controller-runtime registers it (Linux only, as upstream's
/// reads `/proc` too).
fn register_process(r: &Registrar) {
    let process = |name: &str, kind: Type, help: &str| Doc {
        name: name.to_string(),
        kind,
        help: help.to_string(),
        labels: vec![],
        buckets: vec![],
        origin: Origin::Process,
        recorded: "at scrape time, from /proc".to_string(),
        by: &[],
        leader_only: false,
    };
    let docs = vec![
        process(
            "process_cpu_seconds_total",
            Type::Counter,
            "Total user and system CPU time spent in seconds.",
        ),
        process("process_open_fds", Type::Gauge, "Number of open file descriptors."),
        process("process_max_fds", Type::Gauge, "Maximum number of open file descriptors."),
        process("process_virtual_memory_bytes", Type::Gauge, "Virtual memory size in bytes."),
        process("process_resident_memory_bytes", Type::Gauge, "Resident memory size in bytes."),
        process(
            "process_start_time_seconds",
            Type::Gauge,
            "Start time of the process since unix epoch in seconds.",
        ),
        process("process_threads", Type::Gauge, "Number of OS threads in the process."),
    ];
    #[cfg(target_os = "linux")]
    r.collector(Box::new(prometheus::process_collector::ProcessCollector::for_self()), docs);
    #[cfg(not(target_os = "linux"))]
    drop(docs);
}

/// A unit of a controller's work in flight: counted in `controller_runtime_active_workers` while it
/// lives, then in `controller_runtime_reconcile_total` and `_time_seconds` when dropped (a panic
/// unwinding through it counts as a panic and an error).
pub struct Work {
    controller: &'static str,
    started: Instant,
    failed: bool,
}

impl Work {
    pub fn begin(controller: &'static str) -> Work {
        get().runtime.active_workers.with_label_values(&[controller]).inc();
        Work { controller, started: Instant::now(), failed: false }
    }

    /// The unit failed.
    pub fn failed(&mut self) {
        self.failed = true;
    }

    /// Marks the unit failed when `result` is an error, and hands it back.
    pub fn result<T, E>(&mut self, result: Result<T, E>) -> Result<T, E> {
        self.failed |= result.is_err();
        result
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let r = &get().runtime;
        let c = self.controller;
        r.active_workers.with_label_values(&[c]).dec();
        r.reconcile_time.with_label_values(&[c]).observe(self.started.elapsed().as_secs_f64());
        if std::thread::panicking() {
            r.reconcile_panics.with_label_values(&[c]).inc();
            self.failed = true;
        }
        let result = if self.failed { "error" } else { "success" };
        r.reconcile_total.with_label_values(&[c, result]).inc();
        if self.failed {
            r.reconcile_errors.with_label_values(&[c]).inc();
        }
    }
}

impl Metrics {
    /// `karpenter_build_info` of this binary, set once at start.
    pub fn record_build_info(&self) {
        let rustc = format!("rustc {}", env!("KARPENTER_AZURE_RUSTC_VERSION"));
        let labels = [env!("CARGO_PKG_VERSION"), rustc.as_str(), goarch(), COMMIT];
        self.runtime.build_info.with_label_values(&labels).set(1.0);
    }

    /// Whether this replica now holds the leader Lease `lease`.
    pub fn set_leading(&self, lease: &str, leading: bool) {
        self.runtime.leader_status.with_label_values(&[lease]).set(i64::from(leading));
    }

    /// A controller loop that works one unit at a time started.
    pub fn set_max_concurrent(&self, controller: &'static str, workers: usize) {
        self.runtime.max_concurrent.with_label_values(&[controller]).set(workers as i64);
    }

    /// Sets the price-age gauge: one series, labelled with the source in effect.
    pub fn set_pricing_age(&self, source: &'static str, age: Duration) {
        self.runtime.pricing_age.reset();
        self.runtime.pricing_age.with_label_values(&[source]).set(age.as_secs_f64());
    }

    /// The failing watches and how long each has failed; the others have no series.
    pub fn set_watch_failing<'a>(&self, failing: impl IntoIterator<Item = (&'a str, Duration)>) {
        self.runtime.watch_failing.reset();
        for (kind, failing) in failing {
            self.runtime.watch_failing.with_label_values(&[kind]).set(failing.as_secs_f64());
        }
    }

    /// How long the Azure credential has failed (zero while it works).
    pub fn set_credential_failing(&self, failing: Duration) {
        self.runtime.credential_failing.with_label_values(&[] as &[&str]).set(failing.as_secs_f64());
    }

    /// A supervised task ended or panicked and is started again.
    pub fn task_restarted(&self, task: &str) {
        self.runtime.task_restarts.with_label_values(&[task]).inc();
    }
}
