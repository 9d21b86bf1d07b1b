//! The I/O half of the controller: watch tasks that feed the [`Cluster`] index, the provisioning loop that
//! turns a solver plan into NodeClaims, the per-NodeClaim lifecycle (launch, registration, initialization,
//! liveness), draining and termination, garbage collection, and the AKSNodeClass / NodePool status
//! writers. Every replica watches; only the lease holder runs the writers (`leading`).
//!
//! Grouped by the object they own:
//! - `provisioning/`: the batch window (`batch`, pure) → synced → snapshot → solve → create NodeClaims.
//! - `nodeclaim/`: NodeClaim objects built from a plan and launch requests built from NodeClaims
//!   (`build`, pure); the reconciler (`lifecycle`: launch, registration, initialization, liveness,
//!   termination); drift and consolidatable conditions (`disruption`); garbage collection (`gc`); VM
//!   tags kept in line with their AKSNodeClass (`inplace`).
//! - `node/`: draining a deleted claim's Node (`termination`, its decisions in `drain`, pure) and
//!   replacing Nodes that stay unhealthy (`repair`).
//! - `disruption/`: the disruption loop: expiration, then decide → validate → taint → replacements →
//!   delete, with its metrics and events.
//! - `status/`: AKSNodeClass and NodePool status.
//!
//! And what they share:
//! - `context`: [`Shared`] (client, index, cloud provider), [`Settings`], [`ControllerError`].
//! - `writes`: every write guarded by what its writer read, and what a conflict means for it.
//! - `watch`: one `watcher()` stream per kind into the shared index; pod triggers for provisioning.
//! - `events`: the Kubernetes Events the controllers emit (pure builders, a publisher that never fails);
//!   `events_sink` writes them, folding repeats into one Event's series in a bounded table.
//! - `metrics`: the cluster-state gauges computed from the index at scrape time, the labels the
//!   counters take from NodeClaims and Nodes, and readiness for the health server.
//! - `start`: the Azure provider (with its catalog) and settings built from the validated operator settings.
//! - `leading`: leadership terms: the writers run only while this replica holds the lease.

pub mod context;
pub mod disruption;
pub mod events;
pub mod events_sink;
pub mod leading;
pub mod metrics;
mod metrics_nodes;
pub mod metrics_pods;
mod metrics_status;
pub mod node;
pub mod nodeclaim;
pub mod nodepool_health;
pub mod observed;
pub mod provisioning;
pub mod start;
pub mod static_pools;
pub mod status;
pub mod watch;
pub mod watch_health;
pub mod writes;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, Notify};

use crate::cloud::CloudProvider;
use crate::operator::leader::Elector;
use crate::operator::server;
use crate::state::Cluster;

pub use context::{ControllerError, Settings, Shared};

/// Runs every controller until SIGTERM or ctrl-c. The watches run on every replica, so a standby is
/// ready to act the moment it wins `election`; everything that writes runs only while leading. Without
/// an elector (leader election disabled) this replica always leads.
pub async fn run<C: CloudProvider + 'static>(
    client: kube::Client,
    evictions: kube::Client,
    cloud: Arc<C>,
    settings: Settings,
    mut election: Option<Elector>,
) -> Result<(), ControllerError> {
    let settings_stale_after = settings.watch_stale_after;
    let shared = Arc::new(Shared {
        events: events::Events::new(client.clone()),
        client,
        cluster: Mutex::new(Cluster::new()),
        cloud,
        settings,
        status_changed: Notify::new(),
        failures: Mutex::new(BTreeMap::new()),
        nominations: Mutex::new(BTreeMap::new()),
        termination: node::termination::Termination::new(evictions),
        leading: AtomicBool::new(false),
        in_flight: tokio::sync::RwLock::new(()),
        supervisor: Arc::new(crate::operator::supervisor::Supervisor::new()),
        watch_health: watch_health::WatchHealth::new(settings_stale_after),
        first_seen: observed::FirstSeen::default(),
        quarantine: Mutex::new(BTreeMap::new()),
        registrations: nodepool_health::RegistrationHistory::default(),
        metrics_state: Mutex::new(metrics::MetricsState::default()),
    });
    if let Some(elector) = election.as_mut() {
        let observer = shared.clone();
        elector.observe_api_calls(Box::new(move |answered| {
            observer.watch_health.api_call(answered, tokio::time::Instant::now());
        }));
    }
    crate::operator::metrics::get().record_build_info();
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
