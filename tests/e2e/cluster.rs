//! The control plane of the e2e suite: started and stopped through `hack/e2e-cluster.sh`.
//!
//! One cluster per test binary. It starts lazily on the first `shared()` call and every test uses it,
//! each in its own namespace or with its own object names. Why not one per test: a warm start takes about
//! 8 s of a 2-core machine (five processes, fresh PKI, kube-controller-manager warming up), so five tests
//! would spend most of their time starting clusters, and running them in parallel would start five API
//! servers at once. The tests only ever add objects under names of their own, so sharing is safe at the
//! default test concurrency.
//!
//! Stopping exactly what was started:
//! - [`ClusterGuard`] stops its cluster on drop, which also runs while a panic unwinds;
//! - the shared guard lives in a static, which Rust never drops, so an `atexit` hook stops it when the test
//!   binary exits normally (all tests passed or some failed);
//! - `E2E_CLUSTER_WATCH_PID=<this process>` makes the script leave a watchdog that stops the cluster when the
//!   test binary dies any other way (SIGKILL, abort).
//!
//! The cluster directory is `$CARGO_TARGET_DIR/e2e/run-<time>-<pid>` (`target/` when unset). Logs stay
//! there for inspection (the newest ten runs are kept); the etcd data (over 100 MB of preallocated WAL) is
//! removed once the cluster is stopped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The binaries `hack/e2e-cluster.sh build` produces; all must exist before a start.
const BINARIES: &[&str] =
    &["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "helm"];

/// A running control plane.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Where the script keeps pids, PKI, logs and the kubeconfig.
    pub dir: PathBuf,
    /// The admin kubeconfig (client certificate of `system:masters`).
    pub kubeconfig: PathBuf,
    /// The cached control-plane binaries (kubectl, helm, ...).
    pub bin_dir: PathBuf,
}

impl Cluster {
    /// Where the API server listens (the kubeconfig's server), for clients that dial it by address.
    pub fn api_server_addr(&self) -> std::net::SocketAddr {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|err| panic!("reading {}: {err}", self.kubeconfig.display()));
        let server = kubeconfig
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.server.clone())
            .expect("the e2e kubeconfig names its server");
        let host_port = server.trim_start_matches("https://").trim_end_matches('/');
        host_port.parse().unwrap_or_else(|err| panic!("API server address {host_port:?}: {err}"))
    }

    /// A kube client with the admin kubeconfig, without automatic retries. Each test makes its own,
    /// because a client's connections belong to the tokio runtime that opened them and every
    /// `#[tokio::test]` has its own runtime.
    pub async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|err| panic!("reading {}: {err}", self.kubeconfig.display()));
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap_or_else(|err| panic!("loading {}: {err}", self.kubeconfig.display()));
        // kube 5 retries 429 by default (up to 15 times, backing off towards minutes), which turns an
        // eviction refused by a PDB into a five-minute wait; the tests want to see the 429.
        config.default_retry = false;
        kube::Client::try_from(config).expect("kube client from the e2e kubeconfig")
    }
}

impl Cluster {
    /// Stops `component` (kube-apiserver, kube-scheduler, ...) and starts it again with the same command
    /// line after `outage`; returns once it serves again (`hack/e2e-cluster.sh restart`). Blocks.
    pub fn restart(&self, component: &str, outage: std::time::Duration) -> Result<(), String> {
        let outage = outage.as_secs().to_string();
        run_script(&["restart", &self.dir.display().to_string(), component, &outage])
    }

    /// Compacts etcd's history up to its current revision (`hack/e2e-cluster.sh compact`). Blocks.
    pub fn compact_etcd(&self) -> Result<(), String> {
        run_script(&["compact", &self.dir.display().to_string()])
    }
}

/// Runs `hack/e2e-cluster.sh` with `args`; `Err` carries its output's tail when it fails.
fn run_script(args: &[&str]) -> Result<(), String> {
    let output = script().args(args).output().map_err(|err| format!("running hack/e2e-cluster.sh: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("hack/e2e-cluster.sh {} failed:\n{}", args.join(" "), tail(&output.stderr, 20)))
    }
}

/// Owns a started cluster and stops it (once) when dropped or told to.
pub struct ClusterGuard {
    cluster: Cluster,
    stopped: AtomicBool,
}

impl ClusterGuard {
    /// Starts a control plane in `dir`. Fails without starting anything when the binaries are not built,
    /// since `start` would otherwise spend ~10 minutes building them inside a test.
    pub fn start(dir: &Path) -> Result<ClusterGuard, String> {
        let bin_dir = built_bin_dir()?;
        let output = script()
            .arg("start")
            .arg(dir)
            .env("E2E_CLUSTER_WATCH_PID", std::process::id().to_string())
            .output()
            .map_err(|err| format!("running hack/e2e-cluster.sh start: {err}"))?;
        if !output.status.success() {
            return Err(format!(
                "hack/e2e-cluster.sh start {} failed ({}); logs in {}:\n{}",
                dir.display(),
                output.status,
                dir.join("logs").display(),
                tail(&output.stderr, 30)
            ));
        }
        // "control plane ready in 8.1s (...)": worth seeing in the output of a failed test.
        eprintln!("{}", tail(&output.stderr, 2));
        let cluster = Cluster { dir: dir.to_path_buf(), kubeconfig: dir.join("kubeconfig"), bin_dir };
        Ok(ClusterGuard { cluster, stopped: AtomicBool::new(false) })
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Stops the processes recorded in the cluster directory; later calls do nothing.
    pub fn stop(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        match script().arg("stop").arg(&self.cluster.dir).output() {
            Ok(output) if output.status.success() => {
                // Logs stay for inspection; the etcd data is only bulk.
                let _ = std::fs::remove_dir_all(self.cluster.dir.join("etcd-data"));
            }
            Ok(output) => eprintln!(
                "e2e: stopping {} failed:\n{}",
                self.cluster.dir.display(),
                tail(&output.stderr, 10)
            ),
            Err(err) => eprintln!("e2e: running hack/e2e-cluster.sh stop: {err}"),
        }
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

static SHARED: OnceLock<Result<ClusterGuard, String>> = OnceLock::new();

/// The cluster of this test binary, started on first use. Panics (failing the calling test) when it cannot
/// start, with the reason; later callers get the same reason without another attempt.
pub fn shared() -> &'static Cluster {
    let started = SHARED.get_or_init(|| {
        let dir = run_dir();
        if let Some(parent) = dir.parent() {
            prune_stopped_runs(parent, KEPT_RUNS);
        }
        let guard = ClusterGuard::start(&dir)?;
        register_stop_at_exit();
        Ok(guard)
    });
    match started {
        Ok(guard) => guard.cluster(),
        Err(reason) => panic!("the e2e control plane is not available: {reason}"),
    }
}

extern "C" fn stop_shared_at_exit() {
    if let Some(Ok(guard)) = SHARED.get() {
        guard.stop();
    }
}

fn register_stop_at_exit() {
    extern "C" {
        fn atexit(callback: extern "C" fn()) -> std::os::raw::c_int;
    }
    // SAFETY: atexit only stores the function pointer; the callback touches a static that outlives `exit`
    // and runs no Rust code that unwinds (stop() catches every error).
    let rc = unsafe { atexit(stop_shared_at_exit) };
    assert_eq!(rc, 0, "atexit refused the cluster stop hook");
}

/// `$CARGO_TARGET_DIR/e2e/run-<unix seconds>-<pid>`, or under `target/` of the crate when unset.
fn run_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let target =
        if target.is_relative() { Path::new(env!("CARGO_MANIFEST_DIR")).join(target) } else { target };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
    target.join("e2e").join(format!("run-{now}-{}", std::process::id()))
}

/// How many earlier run directories (logs, PKI) stay for inspection.
const KEPT_RUNS: usize = 10;

/// Removes all but the newest `keep` stopped run directories under `e2e_dir`, and the etcd data of the
/// stopped ones that stay (a run killed before its own cleanup leaves it). A run is stopped once its
/// `etcd.pid` is gone: `hack/e2e-cluster.sh stop` removes the pid files, and only then.
fn prune_stopped_runs(e2e_dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(e2e_dir) else { return };
    let mut stopped: Vec<PathBuf> = entries
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("run-")))
        .filter(|path| !path.join("etcd.pid").exists())
        .collect();
    // run-<unix seconds>-<pid>: newest first by modification time, which the name's clock agrees with.
    stopped.sort_by_key(|path| std::cmp::Reverse(path.metadata().and_then(|m| m.modified()).ok()));
    for (index, path) in stopped.iter().enumerate() {
        let target = if index < keep { path.join("etcd-data") } else { path.clone() };
        let _ = std::fs::remove_dir_all(target);
    }
}

fn script() -> Command {
    Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/e2e-cluster.sh"))
}

/// The cache directory of the pinned binaries, or the instruction to build them. Public for tools that
/// need no cluster (`helm template`).
pub fn built_bin_dir() -> Result<PathBuf, String> {
    let output: Output = script()
        .arg("versions")
        .output()
        .map_err(|err| format!("running hack/e2e-cluster.sh versions: {err}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let bin_dir = stdout
        .lines()
        .find_map(|line| line.strip_prefix("bin "))
        .map(PathBuf::from)
        .ok_or_else(|| format!("hack/e2e-cluster.sh versions printed no bin dir:\n{stdout}"))?;
    let missing: Vec<&str> = BINARIES.iter().copied().filter(|b| !bin_dir.join(b).is_file()).collect();
    if !missing.is_empty() {
        return Err(format!(
            "the control-plane binaries are not built ({} missing in {}). Run `hack/deps.sh`, which builds \
             them with `hack/e2e-cluster.sh build` (about 10 minutes cold), then rerun the tests.",
            missing.join(", "),
            bin_dir.display()
        ));
    }
    Ok(bin_dir)
}

/// The last `lines` lines of a process's output.
fn tail(bytes: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
