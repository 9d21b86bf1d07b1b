//! What the controllers share: the settings they run with, their error type, and [`Shared`] — the
//! API client, the cluster index, the cloud provider (with its instance types) and the coordination between the
//! writers (status changes, nominations, backoff counts, leadership, work in flight).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::cloud::CloudError;
use crate::controllers::metrics::MetricsState;
use crate::controllers::node::termination::Termination;
use crate::controllers::nodepool_health::RegistrationHistory;
use crate::controllers::observed::FirstSeen;
use crate::controllers::watch_health::WatchHealth;
use crate::controllers::{events, provisioning};
use crate::operator::metrics::Work;
use crate::operator::server::{Ports, ServerError};
use crate::operator::supervisor::Supervisor;
use crate::state::Cluster;

/// What the controllers need from the operator settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `LOCATION`.
    pub region: String,
    /// `BATCH_IDLE_DURATION`.
    pub batch_idle: Duration,
    /// `MIN_VALUES_POLICY`, for every solve (provisioning and disruption, as upstream).
    pub min_values_policy: crate::scheduling::MinValuesPolicy,
    /// `PREFERENCE_POLICY`, for every solve.
    pub preference_policy: crate::scheduling::PreferencePolicy,
    /// `BATCH_MAX_DURATION`.
    pub batch_max: Duration,
    /// How often garbage collection sweeps ([`gc::DEFAULT_INTERVAL`]).
    pub gc_interval: Duration,
    /// How old an unowned VM must be before it is collected ([`gc::DEFAULT_GRACE`]).
    pub gc_grace: Duration,
    /// `METRICS_PORT` and `HEALTH_PROBE_PORT`.
    pub ports: Ports,
    /// How long a launched claim waits for its Node ([`lifecycle::REGISTRATION_TIMEOUT`]).
    pub registration_timeout: Duration,
    /// The disruption decisions' settings: feature gate `SpotToSpotConsolidation` (upstream default off:
    /// consolidation may replace spot nodes with cheaper spot nodes), the Balanced threshold, solve caps.
    pub disruption: crate::disruption::Options,
    /// Between disruption passes that found nothing to do (upstream: 10 s).
    pub disruption_interval: Duration,
    /// Between deciding a consolidation or emptiness command and validating it (upstream: 15 s).
    pub disruption_validation_delay: Duration,
    /// Feature gate `NodeRepair` (upstream default off): [`repair`] replaces nodes that stay unhealthy.
    pub node_repair: bool,
    /// Feature gate `NodeOverlay` (upstream default off): NodeOverlays are watched and applied to
    /// every pool's instance types; off, they are ignored.
    pub node_overlay: bool,
    /// Feature gate `StaticCapacity` (upstream default off): [`static_pools`] holds static NodePools at
    /// their replica count.
    pub static_capacity: bool,
    /// How long a watch may keep failing before `/readyz` fails (`KARPENTER_WATCH_STALE_AFTER`).
    pub watch_stale_after: Duration,
    /// How long the Azure credential may keep failing before `/healthz` fails, so the kubelet restarts
    /// the pod (`KARPENTER_CREDENTIAL_RESTART_AFTER`; a restart rereads mounted secrets).
    pub credential_restart_after: Duration,
    /// `SYSTEM_NAMESPACE`, where AKS publishes the maintenance windows.
    pub system_namespace: String,
}

/// Why a controller step failed. `category` is the bounded label for logs, metrics and events.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cloud: {0}")]
    Cloud(#[from] CloudError),
    #[error("node class not ready: {0}")]
    NodeClassNotReady(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Server(#[from] ServerError),
}

impl ControllerError {
    pub fn category(&self) -> &'static str {
        match self {
            ControllerError::Kube(_) => "KubernetesAPI",
            ControllerError::Cloud(e) => e.category(),
            ControllerError::NodeClassNotReady(_) => "NodeClassNotReady",
            ControllerError::Invalid(_) => "Invalid",
            ControllerError::Server(e) => e.category(),
        }
    }
}

/// State every controller shares.
pub struct Shared<C> {
    pub client: kube::Client,
    pub cluster: Mutex<Cluster>,
    pub cloud: Arc<C>,
    pub settings: Settings,
    /// Wakes the status writer when a NodePool or AKSNodeClass changed.
    pub status_changed: Notify,
    /// Consecutive failed reconciles per NodeClaim, for the lifecycle's backoff.
    pub failures: Mutex<BTreeMap<String, u32>>,
    /// The drain's eviction client (no retry layer) and its backoff.
    pub termination: Termination,
    /// Kubernetes Events; publishing never fails a reconcile.
    pub events: events::Events,
    /// True while this replica leads; the watches queue provisioning triggers only then.
    pub leading: AtomicBool,
    /// Nodes and NodeClaims the provisioner planned pods onto, and when: disruption leaves them alone
    /// for [`provisioning::NOMINATION_WINDOW`] (upstream's nomination), so a node about to receive
    /// pending pods is not removed as empty in the meantime.
    pub nominations: Mutex<BTreeMap<String, std::time::Instant>>,
    /// Held (shared) by every unit of leader work, so shutdown can wait for in-flight work to finish
    /// (exclusive) before it releases the lease; see [`leading`].
    pub in_flight: tokio::sync::RwLock<()>,
    /// Restarts the writers when they end or panic; a writer that keeps stopping fails `/healthz`.
    pub supervisor: Arc<Supervisor>,
    /// The watches' failure streaks; a watch failing too long fails `/readyz`.
    pub watch_health: WatchHealth,
    /// When this process first saw what a timeout is about, so clock skew fires none early.
    pub first_seen: FirstSeen,
    /// Pods the solver panicked on, left out of provisioning until the time given.
    pub quarantine: Mutex<BTreeMap<String, std::time::Instant>>,
    /// Whether each NodePool's claims register (`NodeRegistrationHealthy`).
    pub registrations: RegistrationHistory,
    /// What the cluster-state metrics remember between refreshes (pods seen pending, conditions seen,
    /// when the index stopped being synced).
    pub metrics_state: Mutex<MetricsState>,
}

/// Upstream's provider truncates a NodeClaim's instance-type options to 60.
pub const MAX_INSTANCE_TYPE_OPTIONS: usize = 60;

impl<C> Shared<C> {
    /// The solver's options for every decision this controller makes (provisioning, disruption,
    /// static NodePools).
    pub fn solve_options(&self) -> crate::scheduling::SolveOptions {
        crate::scheduling::SolveOptions {
            max_instance_type_options: MAX_INSTANCE_TYPE_OPTIONS,
            region: self.settings.region.clone(),
            min_values_policy: self.settings.min_values_policy,
            preference_policy: self.settings.preference_policy,
            // The NodeClaims this controller creates get generated names; plan names stay internal.
            reserved_names: Default::default(),
        }
    }

    /// The index; a panic while holding the lock cannot leave it half-updated in a way later reads
    /// cannot cope with (every update replaces whole records), so a poisoned lock is used as is.
    pub fn cluster(&self) -> MutexGuard<'_, Cluster> {
        self.cluster.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The pods left out of provisioning now (the solver panicked on them); expired entries are dropped.
    pub fn quarantined(&self) -> std::collections::BTreeSet<String> {
        let mut map = self.quarantine.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        map.retain(|_, until| *until > now);
        map.keys().cloned().collect()
    }

    /// Names (Nodes or NodeClaims) nominated within [`provisioning::NOMINATION_WINDOW`]; older
    /// nominations are dropped.
    pub fn nominated(&self) -> std::collections::BTreeSet<String> {
        let mut map = self.nominations.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, at| at.elapsed() < provisioning::NOMINATION_WINDOW);
        map.keys().cloned().collect()
    }

    /// Marks a unit of leader work of `controller` (a reconcile, a provisioning round, a sweep) as in
    /// flight until the guard drops, and counts it in the reconcile metrics. Once shutdown has begun
    /// waiting, new units wait too (tokio's lock is fair), and the task is aborted before it starts.
    pub async fn begin_work(&self, controller: &'static str) -> InFlight<'_> {
        let guard = self.in_flight.read().await;
        InFlight { work: Work::begin(controller), _guard: guard }
    }

    /// The metrics state; a panic while holding it leaves nothing a later refresh cannot cope with.
    pub fn metrics_state(&self) -> MutexGuard<'_, MetricsState> {
        self.metrics_state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A unit of leader work in flight ([`Shared::begin_work`]).
pub struct InFlight<'a> {
    pub work: Work,
    _guard: tokio::sync::RwLockReadGuard<'a, ()>,
}

impl InFlight<'_> {
    /// Counts the unit as failed when `result` is an error, and hands `result` back.
    pub fn result<T, E>(&mut self, result: Result<T, E>) -> Result<T, E> {
        self.work.result(result)
    }
}
