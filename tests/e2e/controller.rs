//! The `karpenter-azure controller` binary under test, run against the e2e cluster and an in-process fake
//! ARM whose VMs boot into Nodes of that cluster.
//!
//! [`Controller::start`] (through `setup::controller`) starts the fake ARM (boot simulation through
//! `KubeNodeRegistrar` or another registrar, short delays), then spawns the binary cargo built for this
//! test crate as a child process, configured only through the environment (the upstream variable names
//! of `operator::options`), with the credentials the fake accepts. It talks to the cluster as the Helm chart's ServiceAccount (see `identity`), so it has only
//! the permissions a real install grants. Its output goes to `<cluster dir>/logs/controller-<name>.log`.
//!
//! The child is killed when the [`Controller`] is dropped, which also happens while a failed test unwinds;
//! a failed test then also prints the tail of the log. One controller runs at a time: [`Controller::start`]
//! waits for the previous one to be dropped, because two would both act on every NodePool of the shared
//! cluster.

use std::fs::File;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::MutexGuard;

use super::cluster::Cluster;
use super::identity;
use fake_azure::arm::{FakeArm, FakeArmConfig};

/// The `CLUSTER_NAME` of every controller started here; the value of the VMs' cluster tag.
pub const CLUSTER_NAME: &str = "e2e-cluster";
/// Nodes never dial it (kwok plays their kubelet); it only has to be a valid https URL.
const CLUSTER_ENDPOINT: &str = "https://e2e-cluster-dns.hcp.eastus.azmk8s.io:443";
/// The client-secret credential: AZURE_CLIENT_ID must be a GUID, so the fake is told to accept this pair.
const CLIENT_ID: &str = "00000000-0000-0000-0000-00000000c11e";
const CLIENT_SECRET: &str = "e2e-client-secret";
const BOOTSTRAP_TOKEN: &str = "e2e0ab.0123456789abcdef";
const SSH_PUBLIC_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEe2ee2ee2ee2ee2ee2ee2ee2ee2ee2ee2ee2ee2ee2e e2e";
/// Between a VM reaching Succeeded and its Node registering.
const BOOT_DELAY: Duration = Duration::from_millis(200);
/// How often `wait_until` probes.
const POLL: Duration = Duration::from_millis(250);
/// Lines of the controller log a failed test prints.
const LOG_TAIL_LINES: usize = 60;
/// Variables of the test process the controller may see; everything else (AZURE_*, proxies, ...) is not
/// passed on, so the settings below are the only ones it reads.
const INHERITED_ENV: &[&str] = &["PATH", "HOME", "TMPDIR", "RUST_BACKTRACE"];

/// Serializes controllers across the tests of this binary (each test has its own tokio runtime; a tokio
/// mutex works across them and is not poisoned by a failed test).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The controller process's resident memory, in KiB (see [`Controller::memory_kib`]).
#[derive(Clone, Copy, Debug)]
pub struct MemoryKib {
    /// `VmHWM`: the peak resident set size since the process started.
    pub peak_rss: u64,
    /// `VmRSS`: the resident set size now.
    pub rss: u64,
}

/// A running controller child process and the fake ARM it talks to.
pub struct Controller {
    child: Mutex<Child>,
    log_path: PathBuf,
    /// The child's environment, kept for [`Controller::kill_and_restart`].
    env: Vec<(&'static str, String)>,
    fake: FakeArm,
    /// Set by [`Controller::expect_refusals`]: the RBAC check at drop is skipped.
    refusals_expected: std::sync::atomic::AtomicBool,
    _exclusive: MutexGuard<'static, ()>,
}

impl Controller {
    /// Starts the fake ARM, its VMs' Nodes registered by `registrar`, and the controller with the usual
    /// settings plus `extra_env`; `name` names the log file. Tests start it through `setup::controller`,
    /// which also installs the CRDs and makes the test's namespace.
    pub async fn start(
        cluster: &Cluster,
        client: &kube::Client,
        name: &str,
        extra_env: &[(&'static str, String)],
        registrar: Arc<dyn fake_azure::arm::NodeRegistrar>,
    ) -> Controller {
        Controller::start_with_fake(cluster, client, name, extra_env, registrar, FakeArmConfig::default())
            .await
    }

    /// [`Controller::start`] against a fake ARM configured by `config`, in which the registrar, the
    /// boot delay and the client secret this harness gives the controller are set.
    pub async fn start_with_fake(
        cluster: &Cluster,
        client: &kube::Client,
        name: &str,
        extra_env: &[(&'static str, String)],
        registrar: Arc<dyn fake_azure::arm::NodeRegistrar>,
        config: FakeArmConfig,
    ) -> Controller {
        let exclusive = ONE_AT_A_TIME.lock().await;
        let mut client_secrets = config.client_secrets.clone();
        client_secrets.push((CLIENT_ID.to_string(), CLIENT_SECRET.to_string()));
        let config =
            FakeArmConfig { client_secrets, boot_delay: BOOT_DELAY, registrar: Some(registrar), ..config };
        let fake = FakeArm::start(config).await.expect("the fake ARM starts");
        let kubeconfig = identity::controller_kubeconfig(cluster, client).await;

        let log_dir = cluster.dir.join("logs");
        std::fs::create_dir_all(&log_dir).unwrap_or_else(|err| panic!("{}: {err}", log_dir.display()));
        let log_path = log_dir.join(format!("controller-{name}.log"));
        File::create(&log_path).unwrap_or_else(|err| panic!("{}: {err}", log_path.display()));
        let mut env = settings_env(&kubeconfig, &fake);
        env.extend(extra_env.iter().cloned());
        let child = spawn(&log_path, &env);
        eprintln!("e2e: controller {name} started (pid {}), log {}", child.id(), log_path.display());
        let refusals_expected = std::sync::atomic::AtomicBool::new(false);
        Controller { child: Mutex::new(child), log_path, env, fake, refusals_expected, _exclusive: exclusive }
    }

    /// SIGKILLs the controller (no shutdown of any kind) and starts a new one with the same settings
    /// against the same fake ARM; its output is appended to the same log.
    pub fn kill_and_restart(&self) {
        let mut child = self.child.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        *child = spawn(&self.log_path, &self.env);
        eprintln!("e2e: controller killed and restarted (pid {})", child.id());
    }

    /// Stops the controller (SIGKILL) and starts it again with its settings plus `extra_env` (for this
    /// run only), appending to the same log.
    pub fn restart_with(&self, extra_env: &[(&'static str, String)]) {
        let mut child = self.child.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        let mut env = self.env.clone();
        env.extend(extra_env.iter().cloned());
        *child = spawn(&self.log_path, &env);
        eprintln!("e2e: controller restarted (pid {})", child.id());
    }

    /// SIGTERM, as the kubelet sends it, then waits up to `timeout` for the exit; None if it did not.
    pub fn terminate(&self, timeout: Duration) -> Option<ExitStatus> {
        let mut child = self.child.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        terminate(&mut child, timeout)
    }

    /// SIGKILLs the controller without restarting it.
    pub fn kill(&self) {
        let mut child = self.child.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        eprintln!("e2e: controller killed (pid {})", child.id());
    }

    /// Another replica with this controller's settings and fake ARM, plus `extra_env`, its own metrics
    /// and health ports, and its own log `controller-<name>.log`.
    pub fn spawn_replica(&self, name: &str, extra_env: &[(&'static str, String)]) -> Replica {
        let log_path = self.log_path.with_file_name(format!("controller-{name}.log"));
        File::create(&log_path).unwrap_or_else(|err| panic!("{}: {err}", log_path.display()));
        let [metrics_port, health_port] = free_ports();
        let mut env = self.env.clone();
        // Later entries win: `Command::envs` sets them in order.
        env.push(("METRICS_PORT", metrics_port.to_string()));
        env.push(("HEALTH_PROBE_PORT", health_port.to_string()));
        env.extend(extra_env.iter().cloned());
        let child = spawn(&log_path, &env);
        eprintln!("e2e: replica {name} started (pid {}), log {}", child.id(), log_path.display());
        Replica { child, log_path, metrics_port, health_port, env }
    }

    /// The process id of the running child (it changes with [`Controller::kill_and_restart`]).
    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).id()
    }

    /// The child's memory from `/proc/<pid>/status`: peak resident set (`VmHWM`) and current resident set
    /// (`VmRSS`), in KiB. `Err` when the file cannot be read or lacks the fields.
    pub fn memory_kib(&self) -> Result<MemoryKib, String> {
        let path = format!("/proc/{}/status", self.pid());
        let text = std::fs::read_to_string(&path).map_err(|err| format!("{path}: {err}"))?;
        let field = |name: &str| -> Result<u64, String> {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
                .ok_or_else(|| format!("{path}: no {name} in kB"))
        };
        Ok(MemoryKib { peak_rss: field("VmHWM")?, rss: field("VmRSS")? })
    }

    /// The fake ARM the controller launches VMs in.
    pub fn fake(&self) -> &FakeArm {
        &self.fake
    }

    /// The child's METRICS_PORT. It listens on every address; tests reach it on 127.0.0.1.
    pub fn metrics_port(&self) -> u16 {
        self.port("METRICS_PORT")
    }

    /// The child's HEALTH_PROBE_PORT (`/healthz`, `/readyz`).
    pub fn health_probe_port(&self) -> u16 {
        self.port("HEALTH_PROBE_PORT")
    }

    /// The port the child was given in `key`; the last setting wins, as with the child's environment.
    fn port(&self, key: &str) -> u16 {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} is set to a port in the controller's environment"))
    }

    /// The exit status, once the child has exited (it should not while a test runs).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        let mut child = self.child.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        child.try_wait().ok().flatten()
    }

    /// The controller's whole output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_else(|err| format!("(no log: {err})"))
    }

    /// The last `lines` lines of the controller's output.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// For a test that restarts the API server: a restarted kube-apiserver refuses every request its
    /// authorizer has not yet got the RBAC objects for, so refusals in the log then say nothing about
    /// the chart's rules, and the check at drop is skipped.
    pub fn expect_refusals(&self) {
        self.refusals_expected.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Log lines where the API server refused the controller for want of permission: RBAC's 403
    /// message, `<resource> is forbidden: User "system:serviceaccount:..." cannot <verb> ...`.
    fn forbidden_lines(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let refused = |line: &&str| line.contains("is forbidden: User") && line.contains("cannot");
        text.lines().filter(refused).take(5).map(str::to_string).collect()
    }

    /// Like `wait::until`, but fails at once when the controller has exited, since nothing will then
    /// happen. Panics after `timeout` with `what` and the probe's last `Err`; the log tail follows when
    /// the controller is dropped during the unwind.
    pub async fn wait_until<T, F, Fut>(&self, what: &str, timeout: Duration, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                panic!("the controller exited ({status}) while waiting for {what}");
            }
            match probe().await {
                Ok(value) => return value,
                Err(last) if Instant::now() >= deadline => {
                    panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}")
                }
                Err(_) => tokio::time::sleep(POLL).await,
            }
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let exited = child.try_wait().ok().flatten();
        if exited.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        drop(child);
        if std::thread::panicking() {
            let state = match exited {
                Some(status) => format!("had exited: {status}"),
                None => "was running; killed".to_string(),
            };
            eprintln!(
                "---- controller ({state}); last {LOG_TAIL_LINES} lines of {} ----\n{}\n---- end ----",
                self.log_path.display(),
                self.log_tail(LOG_TAIL_LINES)
            );
        } else {
            // Some refusals only log a warning (an event not published, a status not written), so the
            // test itself would pass; the chart's RBAC must still cover every call.
            let expected = self.refusals_expected.load(std::sync::atomic::Ordering::Relaxed);
            let refused = if expected { Vec::new() } else { self.forbidden_lines() };
            assert!(
                refused.is_empty(),
                "the API server refused the controller (the chart's RBAC lacks a rule) in {}:\n{}",
                self.log_path.display(),
                refused.join("\n")
            );
        }
    }
}

/// A further replica started by [`Controller::spawn_replica`]; killed when dropped.
pub struct Replica {
    child: Child,
    log_path: PathBuf,
    metrics_port: u16,
    health_port: u16,
    /// Its environment, kept for [`Replica::restart_with`].
    env: Vec<(&'static str, String)>,
}

impl Replica {
    pub fn metrics_port(&self) -> u16 {
        self.metrics_port
    }

    pub fn health_probe_port(&self) -> u16 {
        self.health_port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the replica (SIGKILL) and starts it again with its settings plus `extra_env` (for this run
    /// only), appending to the same log.
    pub fn restart_with(&mut self, extra_env: &[(&'static str, String)]) {
        self.kill();
        let mut env = self.env.clone();
        env.extend(extra_env.iter().cloned());
        self.child = spawn(&self.log_path, &env);
        eprintln!("e2e: replica restarted (pid {})", self.child.id());
    }

    /// SIGKILL, no shutdown of any kind.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, as the kubelet sends it, then waits up to `timeout` for the exit.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        terminate(&mut self.child, timeout)
    }

    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_else(|err| format!("(no log: {err})"))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let exited = self.child.try_wait().ok().flatten();
        if exited.is_none() {
            self.kill();
        }
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
            eprintln!(
                "---- replica {} (exit {exited:?}) ----\n{tail}\n---- end ----",
                self.log_path.display()
            );
        }
    }
}

/// Sends `child` SIGTERM, as the kubelet does, and waits up to `timeout` for it to exit.
fn terminate(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let sent = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    assert!(sent.is_ok_and(|s| s.success()), "sending SIGTERM to {}", child.id());
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Spawns `karpenter-azure controller` with exactly `env` (plus [`INHERITED_ENV`]), appending its output
/// to `log_path`.
fn spawn(log_path: &std::path::Path, env: &[(&'static str, String)]) -> Child {
    let log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log_path)
        .unwrap_or_else(|err| panic!("{}: {err}", log_path.display()));
    let log_for_stderr = log.try_clone().expect("log file handle clones");
    let mut command = Command::new(env!("CARGO_BIN_EXE_karpenter-azure"));
    command.arg("controller").env_clear().stdin(Stdio::null()).stdout(log).stderr(log_for_stderr);
    for key in INHERITED_ENV {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    command.envs(env.iter().map(|(k, v)| (*k, v)));
    command.spawn().unwrap_or_else(|err| panic!("spawning karpenter-azure controller: {err}"))
}

/// The controller's whole configuration, pointing at the fake ARM and, through `kubeconfig`, at the e2e
/// cluster.
fn settings_env(kubeconfig: &Path, fake: &FakeArm) -> Vec<(&'static str, String)> {
    let subnet = format!(
        "/subscriptions/{}/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes",
        fake.subscription_id()
    );
    let base = fake.base_url();
    let [metrics_port, health_port] = free_ports();
    vec![
        ("KUBECONFIG", kubeconfig.display().to_string()),
        ("CLUSTER_NAME", CLUSTER_NAME.to_string()),
        ("CLUSTER_ENDPOINT", CLUSTER_ENDPOINT.to_string()),
        ("AZURE_SUBSCRIPTION_ID", fake.subscription_id().to_string()),
        ("AZURE_TENANT_ID", fake.tenant_id().to_string()),
        ("AZURE_CLIENT_ID", CLIENT_ID.to_string()),
        ("AZURE_CLIENT_SECRET", CLIENT_SECRET.to_string()),
        ("LOCATION", fake.location().to_string()),
        ("ARM_RESOURCE_GROUP", "rg".to_string()),
        ("AZURE_NODE_RESOURCE_GROUP", fake.resource_group().to_string()),
        ("VNET_SUBNET_ID", subnet),
        ("KUBELET_BOOTSTRAP_TOKEN", BOOTSTRAP_TOKEN.to_string()),
        ("SSH_PUBLIC_KEY", SSH_PUBLIC_KEY.to_string()),
        ("ARM_ENDPOINT", base.clone()),
        ("AZURE_AUTHORITY_HOST", base.clone()),
        // No internet in tests: a path the fake answers 404 to, so prices come from the embedded catalog
        // at once instead of after a connect timeout.
        ("RETAIL_PRICES_URL", format!("{base}/e2e-no-retail-prices")),
        ("BATCH_IDLE_DURATION", "1s".to_string()),
        ("BATCH_MAX_DURATION", "10s".to_string()),
        ("DISABLE_LEADER_ELECTION", "true".to_string()),
        // Where the chart's Role lets it keep its Lease.
        ("LEADER_ELECTION_NAMESPACE", identity::NAMESPACE.to_string()),
        // As the chart sets it: the pod's namespace, where its Role lets it read the maintenance window.
        ("SYSTEM_NAMESPACE", identity::NAMESPACE.to_string()),
        ("LOG_LEVEL", "debug".to_string()),
        ("METRICS_PORT", metrics_port.to_string()),
        ("HEALTH_PROBE_PORT", health_port.to_string()),
    ]
}

/// Two distinct ports nothing listens on right now (the OS picks them; the listeners are closed again).
pub fn free_ports() -> [u16; 2] {
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    let listeners = [bind(), bind()];
    listeners.map(|listener| listener.local_addr().expect("local address").port())
}
