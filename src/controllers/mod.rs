//! The I/O half of the controller: watch tasks that feed the [`Cluster`] index, the provisioning loop that
//! turns a solver plan into NodeClaims, the per-NodeClaim lifecycle (launch, registration, initialization,
//! liveness), draining and termination, garbage collection, and the AKSNodeClass / NodePool status
//! writers. Every replica watches; only the lease holder runs the writers (`leading`).
//!
//! - `watch`: one `watcher()` stream per kind into the shared index; pod triggers for provisioning.
//! - `batch`: the provisioning batch window (pure, time passed in).
//! - `provisioning`: batch → synced → snapshot → solve → create NodeClaims.
//! - `nodeclaim`: NodeClaim objects built from a plan, and launch requests built from NodeClaims (pure).
//! - `lifecycle`: the NodeClaim reconciler, with its launch, registration, initialization, liveness and
//!   termination steps.
//! - `writes`: every write guarded by what its writer read, and what a conflict means for it.
//! - `termination`: draining a deleted claim's Node (taint, evictions, terminationGracePeriod); `drain`:
//!   its decisions (pure).
//! - `status`: AKSNodeClass and NodePool status; `nodeclass`: the image and subnet lookups behind the
//!   AKSNodeClass status, `recheck`: when to repeat them (pure), `nodeclass_status`: the status they
//!   make (pure).
//! - `events`: the Kubernetes Events the controllers emit (pure builders, a publisher that never fails).
//! - `inplace`: tags of running VMs and NICs kept in line with their AKSNodeClass, without replacing them.
//! - `gc`: garbage collection of unowned VMs and NICs, and of NodeClaims whose VM is gone.
//! - `start`: the Azure provider, catalog and settings built from the validated operator settings.
//! - `catalog`: instance types per AKSNodeClass, as the solver and the launcher both see them.
//! - `metrics`: the cluster-state gauges computed from the index at scrape time, the labels the
//!   counters take from NodeClaims and Nodes, and readiness for the health server.
//! - `leading`: leadership terms: the writers run only while this replica holds the lease.
//!
//! - `disruption`: the disruption loop: expiration, then decide → validate → taint → replacements →
//!   delete, with its metrics and events.

pub mod batch;
pub mod catalog;
pub mod disruption;
pub mod drain;
pub mod events;
pub mod gc;
pub mod inplace;
pub mod leading;
pub mod lifecycle;
pub mod metrics;
pub mod nodeclaim;
pub mod nodeclaim_disruption;
pub mod nodeclass;
pub mod nodeclass_status;
pub mod provisioning;
pub mod recheck;
pub mod repair;
pub mod start;
pub mod status;
pub mod termination;
pub mod watch;
pub mod writes;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use crate::cloud::{CloudError, CloudProvider};
use crate::operator::leader::Elector;
use crate::operator::server::{self, Ports, ServerError};
use crate::state::Cluster;

pub use catalog::Catalog;

/// What the controllers need from the operator settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `LOCATION`.
    pub region: String,
    /// `BATCH_IDLE_DURATION`.
    pub batch_idle: Duration,
    /// `BATCH_MAX_DURATION`.
    pub batch_max: Duration,
    /// How often garbage collection sweeps ([`gc::DEFAULT_INTERVAL`]).
    pub gc_interval: Duration,
    /// How old an unowned VM must be before it is collected ([`gc::DEFAULT_GRACE`]).
    pub gc_grace: Duration,
    /// `METRICS_PORT` and `HEALTH_PROBE_PORT`.
    pub ports: Ports,
    /// `VNET_SUBNET_ID`: the subnet of classes without their own, and the VNet theirs must be in.
    pub cluster_subnet_id: String,
    /// `AZURE_NODE_RESOURCE_GROUP`: tells an AKS-managed VNet (no custom subnets) from the user's.
    pub node_resource_group: String,
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
    pub catalog: Catalog,
    pub cloud: Arc<C>,
    pub settings: Settings,
    /// Wakes the status writer when a NodePool or AKSNodeClass changed.
    pub status_changed: Notify,
    /// Consecutive failed reconciles per NodeClaim, for the lifecycle's backoff.
    pub failures: Mutex<BTreeMap<String, u32>>,
    /// The drain's eviction client (no retry layer) and its backoff.
    pub termination: termination::Termination,
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
}

impl<C> Shared<C> {
    /// The index; a panic while holding the lock cannot leave it half-updated in a way later reads
    /// cannot cope with (every update replaces whole records), so a poisoned lock is used as is.
    pub fn cluster(&self) -> MutexGuard<'_, Cluster> {
        self.cluster.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Names (Nodes or NodeClaims) nominated within [`provisioning::NOMINATION_WINDOW`]; older
    /// nominations are dropped.
    pub fn nominated(&self) -> std::collections::BTreeSet<String> {
        let mut map = self.nominations.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, at| at.elapsed() < provisioning::NOMINATION_WINDOW);
        map.keys().cloned().collect()
    }

    /// Marks a unit of leader work (a reconcile, a provisioning round, a sweep) as in flight until the
    /// guard drops. Once shutdown has begun waiting, new units wait too (tokio's lock is fair), and
    /// the task is aborted before it starts.
    pub async fn begin_work(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.in_flight.read().await
    }
}

/// Runs every controller until SIGTERM or ctrl-c. The watches run on every replica, so a standby is
/// ready to act the moment it wins `election`; everything that writes runs only while leading. Without
/// an elector (leader election disabled) this replica always leads.
pub async fn run<C: CloudProvider + 'static>(
    client: kube::Client,
    evictions: kube::Client,
    cloud: Arc<C>,
    catalog: Catalog,
    settings: Settings,
    election: Option<Elector>,
) -> Result<(), ControllerError> {
    let shared = Arc::new(Shared {
        events: events::Events::new(client.clone()),
        client,
        cluster: Mutex::new(Cluster::new()),
        catalog,
        cloud,
        settings,
        status_changed: Notify::new(),
        failures: Mutex::new(BTreeMap::new()),
        nominations: Mutex::new(BTreeMap::new()),
        termination: termination::Termination::new(evictions),
        leading: AtomicBool::new(false),
        in_flight: tokio::sync::RwLock::new(()),
    });
    let (triggers, trigger_rx) = mpsc::unbounded_channel();
    let mut watches = tokio::task::JoinSet::new();
    // Every replica serves metrics and probes and keeps its index warm; only the leader writes.
    server::start(shared.settings.ports, shared.clone(), &mut watches).await?;
    watch::spawn_all(&mut watches, shared.clone(), triggers);
    tracing::info!(region = %shared.settings.region, "controllers started");
    leading::run(shared, Arc::new(tokio::sync::Mutex::new(trigger_rx)), election, shutdown_signal()).await;
    watches.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
