//! The chaos soak (`make soak`; a short run inside `make test`): two controller replicas under leader
//! election, with workload identity whose token file is rotated every few seconds, run against the e2e
//! control plane and a fake ARM while a workload scales up and down on a compressed day and a schedule
//! of faults hits every part they depend on.
//!
//! The soak plays the kubelet too: it probes each replica's `/healthz` every second and restarts a
//! replica after [`LIVENESS_FAILURES`] failed probes in a row, or when its process has exited, as the
//! chart's liveness probe and the kubelet would.
//!
//! Checked throughout and at the end:
//! - no VM or NIC without a NodeClaim once the schedule is over, and none at all after the NodePools
//!   are deleted;
//! - no NodeClaim launched twice (a VM name created twice) and never two replicas leading at once;
//! - the web Deployment's PodDisruptionBudget and the on-demand NodePool's disruption budget are never
//!   exceeded by voluntary disruption;
//! - after each fault ends, every pod runs within [`RECOVERY_BOUND`];
//! - `/healthz` fails while the credentials are broken and at no other time; `/readyz` fails while the
//!   API server is away and is back after each recovery;
//! - no NodeClaim is deleted as timed out, whatever a replica's wall clock says;
//! - the replicas' peak resident memory.
//!
//! It prints the faults with their recovery times, then the line
//! `soak: <min> min, <n> faults, <leaked> leaked, <dup> launched twice, <v> PDB violations, longest recovery <s> s`.
//!
//! `SOAK_MINUTES` (default 5) is how long faults keep being started; every kind of fault runs at least
//! once whatever the length, so a run takes a few minutes more than it says.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use super::cluster::{self, Cluster};
use super::controller::{Controller, Replica};
use super::health::vm_of;
use super::lookups::{claims_of, condition_is_true, is_running, list_pods};
use super::{manifests, objects, prometheus, setup, wait};
use fake_azure::arm::{CreateError, Delivery, FakeArm, FakeArmConfig, Fault, QuotaScope, Target};

const NAMESPACE: &str = "e2e-soak";
const CLASS: &str = "e2e-soak";
/// On-demand only, with a disruption budget of one node: the web pods and their PDB live here.
const POOL_ON_DEMAND: &str = "e2e-soak-od";
/// Spot only: the batch pods live here, and spot evictions hit it.
const POOL_SPOT: &str = "e2e-soak-spot";
const WEB: &str = "web";
const BATCH: &str = "batch";
/// The web PodDisruptionBudget's minAvailable; the web Deployment never has fewer replicas.
const WEB_MIN_AVAILABLE: usize = 3;
/// The replicas of each Deployment at each step of the compressed day.
const WEB_STEPS: [usize; 7] = [4, 8, 12, 7, 5, 10, 6];
const BATCH_STEPS: [usize; 7] = [2, 6, 9, 4, 7, 3, 5];

/// Every pod that fits runs within this long after a fault ends.
const RECOVERY_BOUND: Duration = Duration::from_secs(90);
/// How long a control-plane fault waits for a disruption command in flight to finish.
const SETTLE_BEFORE_CONTROL_PLANE_FAULT: Duration = Duration::from_secs(60);
/// How long the soak waits for a recovery before it records it as failed and goes on.
const RECOVERY_GIVE_UP: Duration = Duration::from_secs(240);
/// Between the recovery of one fault and the start of the next.
const QUIET: Duration = Duration::from_secs(3);

const LEASE_NAMESPACE: &str = "karpenter";
const LEASE_NAME: &str = "karpenter-leader-election";
const REPLICAS: [&str; 2] = ["a", "b"];

/// The federated assertions the soak writes are valid this long, and a new one is written this often,
/// as the kubelet rotates a projected token well before it expires.
const ASSERTION_LIFETIME: Duration = Duration::from_secs(30);
const ROTATE_EVERY: Duration = Duration::from_secs(10);
/// The subject of the assertions: the chart's ServiceAccount.
const SERVICE_ACCOUNT: &str = "system:serviceaccount:karpenter:karpenter";
/// The fake's access tokens live this long, so a controller that kept an old assertion fails within
/// a minute.
const TOKEN_LIFETIME: Duration = Duration::from_secs(20);
/// `KARPENTER_CREDENTIAL_RESTART_AFTER` of the replicas.
const CREDENTIAL_RESTART_AFTER: &str = "10s";
/// `KARPENTER_WATCH_STALE_AFTER` of the replicas.
const WATCH_STALE_AFTER: &str = "5s";
/// How long the fake keeps the NIC of a failed create reserved (Azure's is 180 s).
const NIC_RESERVATION: Duration = Duration::from_secs(15);

/// How often the soak probes, samples and plays the kubelet.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// Failed `/healthz` probes in a row after which the replica is restarted (the chart's probe: the
/// kubelet's default failure threshold).
const LIVENESS_FAILURES: u32 = 3;
/// The taint the controller puts on a node it disrupts (upstream's `karpenter.sh/disrupted`).
const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
/// How long a replica may take to stop after SIGTERM before the soak, as the kubelet, kills it
/// (Kubernetes' default terminationGracePeriodSeconds).
const TERMINATION_GRACE: Duration = Duration::from_secs(30);
/// How long after a replica's process exited the soak starts it again: the kubelet's first
/// crash-loop back-off.
const RESTART_DELAY: Duration = Duration::from_secs(10);
/// A probe that takes longer than this has failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The faults, in the order of one round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultKind {
    ThrottleStorm,
    ServerErrors,
    ArmHang,
    FamilyQuota,
    CapacityAndNicReservation,
    SpotEviction,
    LeaderSigkill,
    LeaderHandover,
    ApiServerRestart,
    EtcdCompaction,
    CredentialOutage,
    ClockFast,
    ClockSlow,
}

/// The control-plane faults come last: after an API-server outage the node lifecycle controller marks
/// the pods of nodes whose leases lapsed not Ready for a while, which would blur the faults after them.
/// kwok, which plays every node's kubelet, is restarted after each API-server restart: unlike a kubelet
/// it stays slow to renew leases and report new nodes Ready for minutes after one.
const ROUND: [FaultKind; 13] = [
    FaultKind::ThrottleStorm,
    FaultKind::ServerErrors,
    FaultKind::ArmHang,
    FaultKind::FamilyQuota,
    FaultKind::CapacityAndNicReservation,
    FaultKind::SpotEviction,
    FaultKind::LeaderSigkill,
    FaultKind::LeaderHandover,
    FaultKind::CredentialOutage,
    FaultKind::ClockFast,
    FaultKind::ClockSlow,
    FaultKind::ApiServerRestart,
    FaultKind::EtcdCompaction,
];

impl FaultKind {
    fn name(self) -> &'static str {
        match self {
            FaultKind::ThrottleStorm => "ARM 429 storm",
            FaultKind::ServerErrors => "ARM 500s",
            FaultKind::ArmHang => "ARM requests hang",
            FaultKind::FamilyQuota => "family vCPU quota exhausted",
            FaultKind::CapacityAndNicReservation => "allocation failures, NICs reserved",
            FaultKind::SpotEviction => "spot evictions",
            FaultKind::LeaderSigkill => "leader SIGKILLed",
            FaultKind::LeaderHandover => "leader handover (SIGTERM)",
            FaultKind::ApiServerRestart => "API server down and restarted",
            FaultKind::EtcdCompaction => "etcd compaction, watches relist",
            FaultKind::CredentialOutage => "federated token expired, not rotated",
            FaultKind::ClockFast => "leader clock 5 min fast",
            FaultKind::ClockSlow => "leader clock slow",
        }
    }

    /// Whether the workload moves to the next step of the day as the fault begins. Not for the
    /// control-plane faults: the pods of a new step would wait for nodes that kwok, which plays their
    /// kubelets, reports Ready a minute or more late after an API-server restart, and the recovery
    /// would measure kwok.
    fn moves_the_day(self) -> bool {
        !matches!(self, FaultKind::ApiServerRestart | FaultKind::EtcdCompaction)
    }

    /// How long the fault stays on after it is injected.
    fn hold(self) -> Duration {
        match self {
            FaultKind::ThrottleStorm | FaultKind::ServerErrors | FaultKind::CapacityAndNicReservation => {
                Duration::from_secs(10)
            }
            FaultKind::ArmHang => Duration::from_secs(8),
            FaultKind::FamilyQuota => Duration::from_secs(15),
            FaultKind::CredentialOutage => Duration::from_secs(35),
            FaultKind::ClockFast | FaultKind::ClockSlow => Duration::from_secs(20),
            FaultKind::SpotEviction
            | FaultKind::LeaderSigkill
            | FaultKind::LeaderHandover
            | FaultKind::ApiServerRestart
            | FaultKind::EtcdCompaction => Duration::ZERO,
        }
    }
}

/// One fault as it happened.
struct FaultRecord {
    kind: FaultKind,
    /// Seconds since the soak started.
    started: f64,
    ended: f64,
    /// From the end of the fault until every pod ran; None when that did not happen in time.
    recovery: Option<f64>,
    note: String,
}

/// What the prober saw.
#[derive(Default)]
struct Observations {
    /// Seconds since the start at which a replica's `/healthz` answered anything but 200 (or not in time).
    health_failures: Vec<(f64, usize)>,
    /// The same for `/readyz`.
    ready_failures: Vec<(f64, usize)>,
    consecutive_health_failures: [u32; 2],
    /// When each replica's process was first seen exited, until it is started again.
    exited_at: [Option<f64>; 2],
    /// Restarts the soak made as the kubelet: (time, replica, why).
    kubelet_restarts: Vec<(f64, usize, String)>,
    peak_rss_kib: [u64; 2],
    pdb_violations: u32,
    in_pdb_violation: bool,
    /// Each violation as it began: (time, what the web pods were).
    pdb_violation_log: Vec<(f64, String)>,
    lowest_web_ready: Option<usize>,
    budget_violations: u32,
    in_budget_violation: bool,
    most_disrupting: usize,
    two_leaders: u32,
    /// Once the web Deployment first ran fully; PDB samples before that mean nothing.
    web_settled: bool,
}

/// The two replicas: `a` is the harness's controller (and owns the fake ARM), `b` a second replica.
struct Fleet {
    a: Controller,
    b: Mutex<Replica>,
    /// Extra environment each replica is (re)started with: the wall-clock offset of a clock fault.
    extra_env: Mutex<[Vec<(&'static str, String)>; 2]>,
}

impl Fleet {
    fn fake(&self) -> &FakeArm {
        self.a.fake()
    }

    fn replica_b(&self) -> std::sync::MutexGuard<'_, Replica> {
        self.b.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn extra_env(&self, replica: usize) -> Vec<(&'static str, String)> {
        self.extra_env.lock().unwrap_or_else(|p| p.into_inner())[replica].clone()
    }

    fn set_extra_env(&self, replica: usize, env: Vec<(&'static str, String)>) {
        self.extra_env.lock().unwrap_or_else(|p| p.into_inner())[replica] = env;
    }

    /// Stops the replica as the kubelet does when its liveness probe fails (SIGTERM, SIGKILL after the
    /// grace period) and starts it again.
    fn restart_gracefully(&self, replica: usize) {
        self.terminate(replica);
        self.restart(replica);
    }

    /// SIGKILL and start again with the replica's current extra environment.
    fn restart(&self, replica: usize) {
        let extra = self.extra_env(replica);
        if replica == 0 {
            self.a.restart_with(&extra);
        } else {
            self.replica_b().restart_with(&extra);
        }
    }

    /// SIGTERM, then SIGKILL after the pod's grace period, as the kubelet stops a container; false
    /// when it took the SIGKILL.
    fn terminate(&self, replica: usize) -> bool {
        let grace = TERMINATION_GRACE;
        let exited = if replica == 0 { self.a.terminate(grace) } else { self.replica_b().terminate(grace) };
        if exited.is_none() {
            self.kill(replica);
        }
        exited.is_some()
    }

    fn kill(&self, replica: usize) {
        if replica == 0 {
            self.a.kill();
        } else {
            self.replica_b().kill();
        }
    }

    fn exited(&self, replica: usize) -> bool {
        if replica == 0 {
            self.a.exit_status().is_some()
        } else {
            self.replica_b().exit_status().is_some()
        }
    }

    fn pid(&self, replica: usize) -> u32 {
        if replica == 0 {
            self.a.pid()
        } else {
            self.replica_b().pid()
        }
    }

    fn health_port(&self, replica: usize) -> u16 {
        if replica == 0 {
            self.a.health_probe_port()
        } else {
            self.replica_b().health_probe_port()
        }
    }

    fn metrics_port(&self, replica: usize) -> u16 {
        if replica == 0 {
            self.a.metrics_port()
        } else {
            self.replica_b().metrics_port()
        }
    }
}

/// The workload-identity token file, rewritten as the kubelet rotates a projected token.
struct TokenFile {
    path: PathBuf,
    /// While false the file is left as it is (the credential outage).
    rotating: Mutex<bool>,
    rotations: Mutex<u32>,
}

impl TokenFile {
    /// Writes `token` by rename, as the kubelet swaps a projected volume's files.
    fn write(&self, token: &str) {
        let staged = self.path.with_extension("new");
        std::fs::write(&staged, token).unwrap_or_else(|err| panic!("{}: {err}", staged.display()));
        std::fs::rename(&staged, &self.path).unwrap_or_else(|err| panic!("{}: {err}", self.path.display()));
    }

    fn rotate(&self) {
        self.write(&fake_azure::arm::service_account_token(SERVICE_ACCOUNT, ASSERTION_LIFETIME));
        *self.rotations.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    }

    fn set_rotating(&self, on: bool) {
        *self.rotating.lock().unwrap_or_else(|p| p.into_inner()) = on;
    }

    fn is_rotating(&self) -> bool {
        *self.rotating.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Soak {
    client: Client,
    cluster: &'static Cluster,
    fleet: Arc<Fleet>,
    observed: Arc<Mutex<Observations>>,
    token: Arc<TokenFile>,
    started: Instant,
    step: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the chaos soak: `make soak`, and its short run in `make test`"]
async fn chaos_soak() {
    let minutes: f64 = std::env::var("SOAK_MINUTES").ok().and_then(|v| v.parse().ok()).unwrap_or(5.0);
    let libfaketime = libfaketime();
    let cluster = cluster::shared();
    let client = cluster.client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let _ = leases.delete(LEASE_NAME, &DeleteParams::default()).await;

    let token_path = cluster.dir.join("soak-azure-identity-token");
    let token = Arc::new(TokenFile {
        path: token_path.clone(),
        rotating: Mutex::new(true),
        rotations: Mutex::new(0),
    });
    token.rotate();
    let env = replica_env(&token_path, REPLICAS[0]);
    let fake_config = FakeArmConfig {
        token_lifetime: TOKEN_LIFETIME,
        nic_reservation: NIC_RESERVATION,
        ..FakeArmConfig::default()
    };
    let a = setup::controller("e2e-soak").envs(&env).fake_config(fake_config).start(&client).await;
    a.expect_refusals();
    let b = a.spawn_replica("e2e-soak-b", &[("POD_NAME", REPLICAS[1].to_string())]);
    let fleet = Arc::new(Fleet { a, b: Mutex::new(b), extra_env: Mutex::new([vec![], vec![]]) });

    let class = manifests::node_class(CLASS);
    objects::apply(&client, &class).await.expect("applying the AKSNodeClass");
    for pool in [on_demand_pool(), spot_pool()] {
        objects::apply(&client, &pool).await.expect("applying a NodePool");
    }
    objects::apply(&client, &web_pdb()).await.expect("applying the PodDisruptionBudget");

    let mut soak = Soak {
        client: client.clone(),
        cluster,
        fleet: fleet.clone(),
        observed: Arc::new(Mutex::new(Observations::default())),
        token: token.clone(),
        started: Instant::now(),
        step: 0,
    };
    let rotation = tokio::spawn(rotate_tokens(token.clone()));
    let prober =
        tokio::spawn(probe_forever(soak.client.clone(), fleet.clone(), soak.observed.clone(), soak.started));

    soak.scale().await;
    let first = soak.wait_recovered(Duration::from_secs(180)).await;
    assert!(first.is_some(), "the workload never ran before the first fault");
    soak.observed.lock().unwrap().web_settled = true;

    let deadline = soak.started + Duration::from_secs_f64(minutes * 60.0);
    let mut records = Vec::new();
    'rounds: loop {
        for kind in ROUND {
            if records.len() >= ROUND.len() && Instant::now() >= deadline {
                break 'rounds;
            }
            let record = soak.run_fault(kind, &libfaketime).await;
            eprintln!(
                "soak: {:>6.0}s {:<40} recovery {}",
                record.started,
                kind.name(),
                record.recovery.map_or("none".to_string(), |r| format!("{r:.1} s"))
            );
            records.push(record);
            tokio::time::sleep(QUIET).await;
        }
    }

    let orphans = soak.orphans_after_settling().await;
    let soak_minutes = soak.started.elapsed().as_secs_f64() / 60.0;
    prober.abort();
    let timeouts = timeout_events(&client).await;
    let left = soak.tear_down().await;
    rotation.abort();

    let dup = launched_twice(fleet.fake());
    let observed = soak.observed.lock().unwrap();
    let health = health_truth(&records, &observed);
    print_report(
        &records,
        &observed,
        &health,
        &orphans,
        &left,
        &dup,
        *token.rotations.lock().unwrap(),
        &timeouts,
    );
    let leaked = orphans.len() + left.len();
    let violations = observed.pdb_violations + observed.budget_violations;
    let longest = records.iter().map(|r| r.recovery.unwrap_or(f64::INFINITY)).fold(0.0, f64::max);
    println!(
        "soak: {soak_minutes:.1} min, {} faults, {leaked} leaked, {} launched twice, {violations} PDB violations, longest recovery {longest:.1} s",
        records.len(),
        dup.len()
    );

    assert_eq!(leaked, 0, "leaked: {orphans:?} after settling, {left:?} after the NodePools were deleted");
    assert!(dup.is_empty(), "VMs created twice: {dup:?}");
    assert_eq!(
        violations, 0,
        "PDB violations {}, budget violations {}",
        observed.pdb_violations, observed.budget_violations
    );
    assert!(
        longest <= RECOVERY_BOUND.as_secs_f64(),
        "a recovery took {longest:.1} s, over {RECOVERY_BOUND:?}"
    );
    assert_eq!(
        observed.two_leaders, 0,
        "two replicas reported leading at once in {} samples",
        observed.two_leaders
    );
    assert!(timeouts.is_empty(), "NodeClaims deleted as timed out: {timeouts:?}");
    assert!(
        health.problems.is_empty(),
        "/healthz or /readyz did not tell the truth:\n{}",
        health.problems.join("\n")
    );
}

impl Soak {
    fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Applies the Deployments at the current step of the compressed day.
    async fn scale(&self) {
        let web = WEB_STEPS[self.step % WEB_STEPS.len()];
        let batch = BATCH_STEPS[self.step % BATCH_STEPS.len()];
        let deployments = [
            manifests::deployment(NAMESPACE, WEB, POOL_ON_DEMAND, web, "500m", "1Gi"),
            manifests::deployment(NAMESPACE, BATCH, POOL_SPOT, batch, "1", "2Gi"),
        ];
        for deployment in &deployments {
            // The API server may be restarting; the next step applies again.
            if let Err(err) = objects::apply(&self.client, deployment).await {
                eprintln!("soak: scaling failed ({err}); the next step applies again");
            }
        }
    }

    /// Injects `kind`, holds it while the workload moves to the next step, ends it, and waits for every
    /// pod to run.
    async fn run_fault(&mut self, kind: FaultKind, libfaketime: &Path) -> FaultRecord {
        if kind.moves_the_day() {
            self.step += 1;
            self.scale().await;
        }
        // A control-plane fault that lands in the middle of a disruption command measures kwok's late
        // readiness of the command's replacements, not the controller; it waits for the command.
        let settled_note = if kind.moves_the_day() {
            String::new()
        } else {
            match wait::within(SETTLE_BEFORE_CONTROL_PLANE_FAULT, || self.no_claim_in_flight()).await {
                Ok(()) => String::new(),
                Err(why) => format!("injected with a command in flight ({why})"),
            }
        };
        let started = self.now();
        let note = self.inject(kind, libfaketime).await;
        tokio::time::sleep(kind.hold()).await;
        let end_note = self.end(kind).await;
        let ended = self.now();
        let recovery = self.wait_recovered(RECOVERY_GIVE_UP).await.map(|d| d.as_secs_f64());
        let ready = self.wait_all_ready().await;
        let mut note = [settled_note, note, end_note]
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        if let Err(why) = ready {
            note = format!("{note}; NOT READY after recovery: {why}");
        }
        FaultRecord { kind, started, ended, recovery, note }
    }

    async fn inject(&self, kind: FaultKind, libfaketime: &Path) -> String {
        let fake = self.fleet.fake();
        match kind {
            FaultKind::ThrottleStorm => {
                fake.inject(Fault::Throttle { requests: 40, retry_after_secs: 2, path_prefix: None });
                "40 requests answered 429, Retry-After 2 s".into()
            }
            FaultKind::ServerErrors => {
                fake.inject(Fault::ServerError { requests: 20, path_prefix: None });
                "20 requests answered 500".into()
            }
            FaultKind::ArmHang => {
                fake.inject(Fault::Hang { requests: 4, secs: 600, path_prefix: None });
                "4 requests never answered".into()
            }
            FaultKind::FamilyQuota => {
                let family = busiest_family(fake).unwrap_or_else(|| "standardDSv5Family".to_string());
                let scope = QuotaScope::Family { family: Some(family.clone()) };
                fake.inject(Fault::Quota { scope, limit: 0, delivery: Delivery::Sync });
                format!("{family} has no quota left")
            }
            FaultKind::CapacityAndNicReservation => {
                fake.inject(Fault::Capacity {
                    error: CreateError::AllocationFailed,
                    target: Target::default(),
                    delivery: Delivery::Async,
                    times: Some(3),
                });
                format!("3 creates fail after the NIC is attached; NICs reserved {NIC_RESERVATION:?}")
            }
            FaultKind::SpotEviction => {
                let spot: Vec<String> = fake
                    .vms()
                    .into_iter()
                    .filter(|vm| vm.spot && vm.provisioning_state == "Succeeded")
                    .map(|vm| vm.name)
                    .take(2)
                    .collect();
                for vm in &spot {
                    fake.evict(vm);
                }
                format!(
                    "evicted {}",
                    if spot.is_empty() { "nothing (no spot VM)".to_string() } else { spot.join(", ") }
                )
            }
            FaultKind::LeaderSigkill => match self.leader().await {
                Some(leader) => {
                    self.fleet.kill(leader);
                    format!("SIGKILL to {}", REPLICAS[leader])
                }
                None => "no leader to kill".into(),
            },
            FaultKind::LeaderHandover => match self.leader().await {
                Some(leader) => {
                    let fleet = self.fleet.clone();
                    let clean = tokio::task::spawn_blocking(move || fleet.terminate(leader)).await.unwrap();
                    let how = if clean { "" } else { ", SIGKILL after the grace period" };
                    format!("SIGTERM to {}{how}", REPLICAS[leader])
                }
                None => "no leader to stop".into(),
            },
            FaultKind::ApiServerRestart => {
                let cluster = self.cluster;
                let outage = Duration::from_secs(10);
                let result = tokio::task::spawn_blocking(move || {
                    cluster.restart("kube-apiserver", outage)?;
                    cluster.restart("kwok", Duration::ZERO)
                })
                .await;
                result.unwrap().expect("restarting kube-apiserver");
                "kube-apiserver stopped, started 10 s later".into()
            }
            FaultKind::EtcdCompaction => {
                let cluster = self.cluster;
                let result = tokio::task::spawn_blocking(move || {
                    cluster.compact_etcd()?;
                    cluster.restart("kube-apiserver", Duration::ZERO)?;
                    cluster.restart("kwok", Duration::ZERO)
                })
                .await;
                result.unwrap().expect("compacting etcd and restarting kube-apiserver");
                "compacted; kube-apiserver restarted with an empty watch cache".into()
            }
            FaultKind::CredentialOutage => {
                self.token.set_rotating(false);
                self.token.write(&expired_assertion());
                "the token file holds an expired assertion".into()
            }
            FaultKind::ClockFast => self.skew_leader(libfaketime, 300).await,
            FaultKind::ClockSlow => {
                // A clock behind the certificates' notBefore would refuse the API server's TLS; the
                // cluster's certificates are as old as the cluster.
                let age = cluster_age(self.cluster).as_secs();
                let behind = age.saturating_sub(60).min(300);
                if behind < 60 {
                    return "skipped: the cluster is too young".into();
                }
                self.skew_leader(libfaketime, -(behind as i64)).await
            }
        }
    }

    async fn end(&self, kind: FaultKind) -> String {
        match kind {
            FaultKind::ThrottleStorm
            | FaultKind::ServerErrors
            | FaultKind::ArmHang
            | FaultKind::FamilyQuota
            | FaultKind::CapacityAndNicReservation => {
                self.fleet.fake().clear_faults();
                String::new()
            }
            FaultKind::CredentialOutage => {
                self.token.rotate();
                self.token.set_rotating(true);
                String::new()
            }
            FaultKind::ClockFast | FaultKind::ClockSlow => {
                for replica in 0..2 {
                    if !self.fleet.extra_env(replica).is_empty() {
                        self.fleet.set_extra_env(replica, vec![]);
                        self.fleet.restart(replica);
                    }
                }
                "clock restored".into()
            }
            _ => String::new(),
        }
    }

    /// Restarts the standby with its wall clock `offset_s` seconds off, then stops the leader so the
    /// skewed replica leads while the workload grows.
    async fn skew_leader(&self, libfaketime: &Path, offset_s: i64) -> String {
        let Some(leader) = self.leader().await else { return "no leader".into() };
        let standby = 1 - leader;
        self.fleet.set_extra_env(
            standby,
            vec![
                ("LD_PRELOAD", libfaketime.display().to_string()),
                ("FAKETIME", format!("{offset_s:+}s")),
                // Only the wall clock is off, as with a bad NTP source; monotonic time is the kernel's.
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
            ],
        );
        self.fleet.restart(standby);
        // Let the skewed replica sync its watches before it is handed the lease.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let fleet = self.fleet.clone();
        let clean = tokio::task::spawn_blocking(move || fleet.terminate(leader)).await.unwrap();
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        let took = wait::within(Duration::from_secs(30), || async {
            match holder(&leases).await {
                Some(h) if h == standby => Ok(()),
                other => Err(format!("holder {other:?}")),
            }
        })
        .await;
        self.step_up().await;
        format!(
            "{} leads with its clock {offset_s:+} s{}{}",
            REPLICAS[standby],
            if took.is_ok() { "" } else { " (it did not get the lease)" },
            if clean { "" } else { "; the old leader took the SIGKILL" }
        )
    }

    /// One more step of the day while a fault is on, so the controller has work under it.
    async fn step_up(&self) {
        let web = WEB_STEPS.iter().max().copied().unwrap_or(8);
        let deployment = manifests::deployment(NAMESPACE, WEB, POOL_ON_DEMAND, web, "500m", "1Gi");
        let _ = objects::apply(&self.client, &deployment).await;
    }

    /// The replica that says it leads (0 for `a`, 1 for `b`): after a leader died the Lease still names
    /// it until a standby takes over, so the replicas' own word is asked.
    async fn leader(&self) -> Option<usize> {
        wait::within(Duration::from_secs(30), || async {
            for replica in 0..2 {
                if leader_status(self.fleet.metrics_port(replica)).await == Some(1.0) {
                    return Ok(replica);
                }
            }
            Err("no replica leads".to_string())
        })
        .await
        .ok()
    }

    /// Err while a NodeClaim of the soak's pools is being deleted or not yet initialized.
    async fn no_claim_in_flight(&self) -> Result<(), String> {
        for pool in [POOL_ON_DEMAND, POOL_SPOT] {
            for claim in claims_of(&self.client, pool).await? {
                let name = claim["metadata"]["name"].as_str().unwrap_or_default();
                if !claim["metadata"]["deletionTimestamp"].is_null() {
                    return Err(format!("{name} is being deleted"));
                }
                if !condition_is_true(&claim, "Initialized") {
                    return Err(format!("{name} is not initialized"));
                }
            }
        }
        Ok(())
    }

    /// Waits until every pod of both Deployments runs; how long that took, None after `timeout`.
    async fn wait_recovered(&self, timeout: Duration) -> Option<Duration> {
        let started = Instant::now();
        wait::within(timeout, || async { self.all_running().await }).await.ok().map(|_| started.elapsed())
    }

    async fn all_running(&self) -> Result<(), String> {
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(self.client.clone(), NAMESPACE);
        for app in [WEB, BATCH] {
            let want = deployments
                .get(app)
                .await
                .map_err(|err| err.to_string())?
                .spec
                .and_then(|s| s.replicas)
                .unwrap_or(0) as usize;
            let pods = list_pods(&self.client, NAMESPACE, app).await?;
            let running = pods.iter().filter(|p| is_running(p)).count();
            let waiting =
                pods.iter().filter(|p| !is_running(p) && p.metadata.deletion_timestamp.is_none()).count();
            if running < want || waiting > 0 {
                return Err(format!("{app}: {running} of {want} running, {waiting} waiting"));
            }
        }
        Ok(())
    }

    /// Both replicas' `/readyz` answer 200 within a minute of the recovery.
    async fn wait_all_ready(&self) -> Result<(), String> {
        wait::within(Duration::from_secs(60), || async {
            for (replica, name) in REPLICAS.iter().enumerate() {
                let port = self.fleet.health_port(replica);
                if probe(port, "/readyz").await != Probe::Ok {
                    return Err(format!("replica {name} is not ready"));
                }
            }
            Ok(())
        })
        .await
    }

    /// VMs and NICs without a NodeClaim once garbage collection has had a minute after the schedule
    /// (the NIC reservation and the GC interval are both shorter).
    async fn orphans_after_settling(&self) -> Vec<String> {
        let fake = self.fleet.fake();
        wait::within(Duration::from_secs(90), || async {
            let mut claimed = BTreeSet::new();
            for pool in [POOL_ON_DEMAND, POOL_SPOT] {
                for claim in claims_of(&self.client, pool).await? {
                    claimed.insert(claim["metadata"]["name"].as_str().unwrap_or_default().to_lowercase());
                    if let Some(vm) = vm_of(&claim) {
                        claimed.insert(vm.to_lowercase());
                    }
                }
            }
            let orphans = cloud_resources(fake)
                .into_iter()
                .filter(|(_, name)| !claimed.iter().any(|c| name.to_lowercase().ends_with(c.as_str())))
                .map(|(kind, name)| format!("{kind} {name}"))
                .collect::<Vec<_>>();
            if orphans.is_empty() {
                Ok(Vec::new())
            } else {
                Err(orphans.join("\n"))
            }
        })
        .await
        .unwrap_or_else(|orphans| orphans.lines().map(str::to_string).collect())
    }

    /// Deletes the workload and the NodePools; what the fake still holds two minutes later.
    async fn tear_down(&self) -> Vec<String> {
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(self.client.clone(), NAMESPACE);
        for app in [WEB, BATCH] {
            let _ = deployments.delete(app, &DeleteParams::default()).await;
        }
        for pool in [on_demand_pool(), spot_pool()] {
            let api = objects::api_for(&self.client, &pool).await.expect("the NodePool API");
            let _ = api
                .delete(pool["metadata"]["name"].as_str().unwrap_or_default(), &DeleteParams::default())
                .await;
        }
        let fake = self.fleet.fake();
        let left = wait::within(Duration::from_secs(120), || async {
            let left: Vec<String> =
                cloud_resources(fake).into_iter().map(|(kind, name)| format!("{kind} {name}")).collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(left.join("\n"))
            }
        })
        .await;
        let class = manifests::node_class(CLASS);
        if let Ok(api) = objects::api_for(&self.client, &class).await {
            let _ = api.delete(CLASS, &DeleteParams::default()).await;
        }
        match left {
            Ok(()) => Vec::new(),
            Err(left) => left.lines().map(str::to_string).collect(),
        }
    }
}

/// Every VM and NIC the fake holds, as (kind, name).
fn cloud_resources(fake: &FakeArm) -> Vec<(&'static str, String)> {
    let vms = fake.vms().into_iter().map(|vm| ("VM", vm.name));
    let nics = fake.nics().into_iter().filter_map(|nic| Some(("NIC", nic["name"].as_str()?.to_string())));
    vms.chain(nics).collect()
}

/// VM names the fake created more than once (a first PUT answers 201, a repeated one 200).
fn launched_twice(fake: &FakeArm) -> Vec<String> {
    let mut created: BTreeMap<String, u32> = BTreeMap::new();
    for request in fake.requests() {
        let path = request.path.to_lowercase();
        if request.method == "PUT"
            && request.status == 201
            && path.contains("/microsoft.compute/virtualmachines/")
        {
            let name = path.rsplit('/').next().unwrap_or_default().to_string();
            *created.entry(name).or_default() += 1;
        }
    }
    created.into_iter().filter(|(_, n)| *n > 1).map(|(name, n)| format!("{name} ({n} times)")).collect()
}

/// The quota family of the size most VMs have.
fn busiest_family(fake: &FakeArm) -> Option<String> {
    let mut sizes: BTreeMap<String, usize> = BTreeMap::new();
    for vm in fake.vms() {
        *sizes.entry(vm.vm_size).or_default() += 1;
    }
    let (size, _) = sizes.into_iter().max_by_key(|(_, n)| *n)?;
    let sku = karpenter_azure::catalog::embedded_sku(&size)?;
    Some(sku.family.clone().unwrap_or_else(|| format!("standard{}Family", sku.series)))
}

/// Events of NodeClaims deleted as not launched or not registered in time.
async fn timeout_events(client: &Client) -> Vec<String> {
    let events: Api<Event> = Api::all(client.clone());
    let Ok(list) = events.list(&ListParams::default()).await else { return vec!["events unreadable".into()] };
    list.items
        .iter()
        .filter(|e| matches!(e.reason.as_deref(), Some("LaunchTimeout" | "RegistrationTimeout")))
        .filter(|e| e.involved_object.name.as_deref().is_some_and(|n| n.starts_with("e2e-soak")))
        .map(|e| {
            format!(
                "{}: {}",
                e.involved_object.name.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default()
            )
        })
        .collect()
}

/// `leader_election_master_status` of the replica serving metrics on `port`; None when it does not answer.
async fn leader_status(port: u16) -> Option<f64> {
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    let (_, text) = tokio::time::timeout(PROBE_TIMEOUT, prometheus::get(&metrics)).await.ok()?.ok()?;
    let samples = prometheus::parse(&text).ok()?;
    prometheus::sum(&samples, "leader_election_master_status", &[("name", LEASE_NAME)])
}

/// The replica (0 or 1) named by the Lease's holder identity.
async fn holder(leases: &Api<Lease>) -> Option<usize> {
    let lease = leases.get_opt(LEASE_NAME).await.ok().flatten()?;
    let identity = lease.spec?.holder_identity?;
    let name = identity.split('_').next()?;
    REPLICAS.iter().position(|r| *r == name)
}

/// The environment of replica `name`: leader election, workload identity from `token_file`, and the
/// short thresholds the soak needs to see each signal.
fn replica_env(token_file: &Path, name: &str) -> Vec<(&'static str, String)> {
    vec![
        ("DISABLE_LEADER_ELECTION", "false".to_string()),
        ("LEADER_ELECTION_NAMESPACE", LEASE_NAMESPACE.to_string()),
        ("LEADER_ELECTION_NAME", LEASE_NAME.to_string()),
        ("POD_NAME", name.to_string()),
        // Workload identity: an empty secret is no secret.
        ("AZURE_CLIENT_SECRET", String::new()),
        ("AZURE_FEDERATED_TOKEN_FILE", token_file.display().to_string()),
        ("KARPENTER_CREDENTIAL_RESTART_AFTER", CREDENTIAL_RESTART_AFTER.to_string()),
        ("KARPENTER_WATCH_STALE_AFTER", WATCH_STALE_AFTER.to_string()),
        ("KARPENTER_GC_INTERVAL", "5s".to_string()),
        ("KARPENTER_GC_GRACE_PERIOD", "20s".to_string()),
        ("KARPENTER_DISRUPTION_VALIDATION_DELAY", "5s".to_string()),
        ("LOG_LEVEL", "info".to_string()),
    ]
}

fn on_demand_pool() -> Value {
    pool(POOL_ON_DEMAND, "on-demand", json!([{"nodes": "1"}]))
}

fn spot_pool() -> Value {
    pool(POOL_SPOT, "spot", json!([{"nodes": "50%"}]))
}

/// A NodePool of `capacity_type` on the soak's class that consolidates soon after a node is under-used.
fn pool(name: &str, capacity_type: &str, budgets: Value) -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
    "spec": {
        "template": {"spec": {
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity_type]},
                {"key": "karpenter.azure.com/sku-cpu", "operator": "Lt", "values": ["9"]}
            ],
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": CLASS}
        }},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "20s",
                       "budgets": budgets}
    }})
}

fn web_pdb() -> Value {
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": WEB, "namespace": NAMESPACE},
           "spec": {"minAvailable": WEB_MIN_AVAILABLE, "selector": {"matchLabels": {"app": WEB}}}})
}

/// A federated assertion that expires as it is written.
fn expired_assertion() -> String {
    fake_azure::arm::service_account_token(SERVICE_ACCOUNT, Duration::ZERO)
}

/// How long the cluster's certificates have existed.
fn cluster_age(cluster: &Cluster) -> Duration {
    let ca = cluster.dir.join("pki/ca.crt");
    let made = std::fs::metadata(&ca).and_then(|m| m.modified()).unwrap_or_else(|_| SystemTime::now());
    SystemTime::now().duration_since(made).unwrap_or_default()
}

/// Debian's libfaketime, which shifts the wall clock of the process it is preloaded into; its variant
/// for multi-threaded programs, as the controller's runtime is.
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib").ok().and_then(|dirs| {
        dirs.filter_map(|d| Some(d.ok()?.path().join("faketime/libfaketimeMT.so.1"))).find(|p| p.is_file())
    });
    found
        .unwrap_or_else(|| panic!("libfaketime is not installed: run hack/deps.sh (Debian package faketime)"))
}

async fn rotate_tokens(token: Arc<TokenFile>) {
    loop {
        tokio::time::sleep(ROTATE_EVERY).await;
        if token.is_rotating() {
            token.rotate();
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Probe {
    Ok,
    /// Answered, but not 200, or not in time.
    Failed,
    /// Nothing listens (the process is starting or gone).
    Down,
}

async fn probe(port: u16, path: &str) -> Probe {
    let client = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build().expect("an HTTP client");
    match client.get(format!("http://127.0.0.1:{port}{path}")).send().await {
        Ok(response) if response.status().is_success() => Probe::Ok,
        Ok(_) => Probe::Failed,
        Err(err) if err.is_timeout() => Probe::Failed,
        Err(_) => Probe::Down,
    }
}

/// Every second: probes both replicas as the kubelet does (restarting one that failed its liveness
/// probe or exited), samples their memory and leadership, and checks the budgets.
async fn probe_forever(
    client: Client,
    fleet: Arc<Fleet>,
    observed: Arc<Mutex<Observations>>,
    started: Instant,
) {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let now = started.elapsed().as_secs_f64();
        let mut leading = 0;
        for replica in 0..2 {
            if fleet.exited(replica) {
                let due = {
                    let mut o = observed.lock().unwrap();
                    let exited_at = *o.exited_at[replica].get_or_insert(now);
                    let due = now - exited_at >= RESTART_DELAY.as_secs_f64();
                    if due {
                        o.exited_at[replica] = None;
                        o.kubelet_restarts.push((now, replica, "exited".into()));
                    }
                    due
                };
                if due {
                    let fleet2 = fleet.clone();
                    tokio::task::spawn_blocking(move || fleet2.restart(replica)).await.unwrap();
                }
                continue;
            }
            let health = probe(fleet.health_port(replica), "/healthz").await;
            let ready = probe(fleet.health_port(replica), "/readyz").await;
            if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", fleet.pid(replica))) {
                let peak = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                    .unwrap_or(0);
                let mut o = observed.lock().unwrap();
                o.peak_rss_kib[replica] = o.peak_rss_kib[replica].max(peak);
            }
            let restart = {
                let mut o = observed.lock().unwrap();
                if ready == Probe::Failed {
                    o.ready_failures.push((now, replica));
                }
                if health == Probe::Failed {
                    o.health_failures.push((now, replica));
                    o.consecutive_health_failures[replica] += 1;
                } else {
                    o.consecutive_health_failures[replica] = 0;
                }
                if o.consecutive_health_failures[replica] >= LIVENESS_FAILURES {
                    o.consecutive_health_failures[replica] = 0;
                    o.kubelet_restarts.push((now, replica, "liveness probe failed".into()));
                    true
                } else {
                    false
                }
            };
            if restart {
                let fleet2 = fleet.clone();
                tokio::task::spawn_blocking(move || fleet2.restart_gracefully(replica)).await.unwrap();
                continue;
            }
            let metrics = format!("http://127.0.0.1:{}/metrics", fleet.metrics_port(replica));
            if let Ok(Ok((_, text))) = tokio::time::timeout(PROBE_TIMEOUT, prometheus::get(&metrics)).await {
                let samples = prometheus::parse(&text).unwrap_or_default();
                let status =
                    prometheus::sum(&samples, "leader_election_master_status", &[("name", LEASE_NAME)]);
                if status == Some(1.0) {
                    leading += 1;
                }
            }
        }
        if leading > 1 {
            observed.lock().unwrap().two_leaders += 1;
        }
        check_budgets(&client, &observed, now).await;
    }
}

/// The web pods Ready against the PDB, and the on-demand NodePool's claims being disrupted against
/// its budget of one node. Skipped while the API server cannot answer.
async fn check_budgets(client: &Client, observed: &Mutex<Observations>, now: f64) {
    let Ok(pods) = list_pods(client, NAMESPACE, WEB).await else { return };
    let nodes: Api<Node> = Api::all(client.clone());
    let Ok(nodes) = nodes.list(&ListParams::default()).await else { return };
    // Nodes the controller is taking away: tainted for disruption or being deleted.
    let disrupting: BTreeSet<String> = nodes
        .items
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_some() || has_taint(n, DISRUPTED_TAINT))
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    // A pod is unavailable by voluntary disruption when it is being evicted or deleted, gone with its
    // node, or on a node the controller is taking away. A Running pod that is not Ready on a node the
    // controller leaves alone is not its doing: after an API-server outage the node lifecycle controller
    // marks the pods of nodes whose leases lapsed not Ready, an involuntary disruption that a
    // PodDisruptionBudget does not cover.
    let on_kept_node =
        |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| !disrupting.contains(n));
    let ready = pods.iter().filter(|p| is_running(p) && (pod_ready(p) || on_kept_node(p))).count();
    let Ok(claims) = claims_of(client, POOL_ON_DEMAND).await else { return };
    // Disrupted voluntarily: initialized (the budget counts only those) and being deleted.
    let disrupting = claims
        .iter()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_string() && condition_is_true(c, "Initialized"))
        .count();
    let mut o = observed.lock().unwrap();
    if o.web_settled {
        o.lowest_web_ready = Some(o.lowest_web_ready.map_or(ready, |l| l.min(ready)));
        let below = ready < WEB_MIN_AVAILABLE;
        if below && !o.in_pdb_violation {
            o.pdb_violations += 1;
            let pods: Vec<String> = pods
                .iter()
                .map(|p| {
                    let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
                    let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
                    let deleting = if p.metadata.deletion_timestamp.is_some() { " deleting" } else { "" };
                    let node_state = if on_kept_node(p) { "" } else { " (node being disrupted)" };
                    format!("{phase}{deleting} ready={} on {node:?}{node_state}", pod_ready(p))
                })
                .collect();
            o.pdb_violation_log.push((now, pods.join(", ")));
        }
        o.in_pdb_violation = below;
    }
    o.most_disrupting = o.most_disrupting.max(disrupting);
    let over = disrupting > 1;
    if over && !o.in_budget_violation {
        o.budget_violations += 1;
    }
    o.in_budget_violation = over;
}

fn has_taint(node: &Node, key: &str) -> bool {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    taints.is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

fn pod_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What the probes said against what was true.
struct HealthTruth {
    problems: Vec<String>,
    summary: Vec<String>,
}

fn health_truth(records: &[FaultRecord], observed: &Observations) -> HealthTruth {
    let mut problems = Vec::new();
    let within = |t: f64, r: &FaultRecord, after: f64| t >= r.started && t <= r.ended + after;
    let outages: Vec<&FaultRecord> =
        records.iter().filter(|r| r.kind == FaultKind::CredentialOutage).collect();
    for outage in &outages {
        if !observed.health_failures.iter().any(|(t, _)| within(*t, outage, 5.0)) {
            problems.push(format!(
                "/healthz stayed green through the credential outage at {:.0} s",
                outage.started
            ));
        }
    }
    // A failure outside a credential outage (and the restarts it causes) would restart a working pod.
    let stray: Vec<f64> = observed
        .health_failures
        .iter()
        .map(|(t, _)| *t)
        .filter(|t| !outages.iter().any(|o| within(*t, o, 30.0)))
        .collect();
    if !stray.is_empty() {
        problems.push(format!("/healthz failed outside a credential outage at {stray:.0?} s"));
    }
    for restart in records.iter().filter(|r| r.kind == FaultKind::ApiServerRestart) {
        if !observed.ready_failures.iter().any(|(t, _)| within(*t, restart, 5.0)) {
            problems.push(format!(
                "/readyz stayed green while the API server was away at {:.0} s",
                restart.started
            ));
        }
    }
    for record in records.iter().filter(|r| r.note.contains("NOT READY")) {
        problems.push(format!("{} at {:.0} s: {}", record.kind.name(), record.started, record.note));
    }
    let summary = vec![
        format!(
            "/healthz failures: {} probes, {} during credential outages; /readyz failures: {} probes",
            observed.health_failures.len(),
            observed.health_failures.len() - stray.len(),
            observed.ready_failures.len()
        ),
        format!(
            "kubelet restarts: {}",
            observed
                .kubelet_restarts
                .iter()
                .map(|(t, r, why)| format!("{} at {t:.0} s ({why})", REPLICAS[*r]))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ];
    HealthTruth { problems, summary }
}

#[allow(clippy::too_many_arguments)]
fn print_report(
    records: &[FaultRecord],
    observed: &Observations,
    health: &HealthTruth,
    orphans: &[String],
    left: &[String],
    dup: &[String],
    rotations: u32,
    timeouts: &[String],
) {
    println!("{:>3}  {:<40} {:>8} {:>7} {:>10}  note", "#", "fault", "at (s)", "held", "recovery");
    for (index, r) in records.iter().enumerate() {
        let recovery = r.recovery.map_or("none".to_string(), |s| format!("{s:.1} s"));
        println!(
            "{:>3}  {:<40} {:>8.0} {:>6.0}s {:>10}  {}",
            index + 1,
            r.kind.name(),
            r.started,
            r.ended - r.started,
            recovery,
            r.note
        );
    }
    println!("token-file rotations: {rotations} (assertions valid {ASSERTION_LIFETIME:?}, access tokens {TOKEN_LIFETIME:?})");
    for line in &health.summary {
        println!("{line}");
    }
    println!(
        "web pods available at the lowest: {:?} (PDB minAvailable {WEB_MIN_AVAILABLE}); on-demand claims disrupted at once at most: {} (budget 1)",
        observed.lowest_web_ready, observed.most_disrupting
    );
    println!(
        "peak RSS: a {} MiB, b {} MiB; samples with two leaders: {}",
        observed.peak_rss_kib[0] / 1024,
        observed.peak_rss_kib[1] / 1024,
        observed.two_leaders
    );
    for (at, pods) in &observed.pdb_violation_log {
        println!("web pods below minAvailable at {at:.0} s: {pods}");
    }
    println!("orphans after settling: {orphans:?}; left after teardown: {left:?}; created twice: {dup:?}");
    println!("NodeClaims deleted as timed out: {timeouts:?}");
    for problem in &health.problems {
        println!("health: {problem}");
    }
}
