//! Leadership terms. While this replica holds the lease it runs the controllers that write (to the
//! API server or to Azure): provisioning, the NodeClaim lifecycle with termination, the status writer,
//! garbage collection, disruption, the drift and consolidatability sweep and (feature gate
//! `NodeRepair`) node repair. When the lease is lost they are aborted at once, mid-call if need be
//! (every create and delete is idempotent, so the next leader finishes the work); then the replica
//! campaigns again.
//!
//! On SIGTERM the leader stops starting work, waits (bounded by [`DRAIN_TIMEOUT`], renewing the lease
//! meanwhile) for the units in flight, aborts the rest and releases the lease so a standby takes over
//! without waiting for it to expire.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::Mutex;
use tokio::task::JoinSet;

use super::nodeclaim::{gc, inplace, lifecycle};
use super::provisioning::{self, Trigger};
use super::{disruption, node::repair, status, Shared};
use crate::cloud::CloudProvider;
use crate::operator::leader::Elector;
use crate::operator::metrics;

/// How long shutdown waits for in-flight work; below the chart's terminationGracePeriodSeconds so the
/// lease is still released before the kubelet kills the process.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// Campaigns, leads, and campaigns again after a lost lease, until `shutdown` completes.
pub async fn run<C: CloudProvider + 'static>(
    shared: Arc<Shared<C>>,
    triggers: Arc<Mutex<UnboundedReceiver<Trigger>>>,
    mut election: Option<Elector>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let set_leading = |election: &Option<Elector>, leading: bool| {
        shared.leading.store(leading, Ordering::Relaxed);
        if let Some(elector) = election {
            metrics::get().set_leading(elector.lease_name(), leading);
        }
    };
    set_leading(&election, false);
    loop {
        if let Some(elector) = election.as_mut() {
            tracing::info!(identity = %elector.identity(), "waiting for the leader lease");
            tokio::select! {
                _ = elector.acquire() => {}
                _ = &mut shutdown => return,
            }
        }
        set_leading(&election, true);
        let mut tasks = spawn_writers(&shared, &triggers);
        let shutting_down = tokio::select! {
            _ = hold(election.as_mut()) => false,
            _ = &mut shutdown => true,
        };
        set_leading(&election, false);
        if !shutting_down {
            tracing::warn!("no longer the leader; stopping provisioning, lifecycle, status and gc");
            tasks.shutdown().await;
            // A standby serves none of the leader's gauges, not even their last values.
            metrics::get().clear_leader_only();
            continue;
        }
        tracing::info!(timeout_s = DRAIN_TIMEOUT.as_secs(), "shutting down: waiting for in-flight work");
        // The exclusive guard is held until the tasks are gone, so none starts another unit meanwhile.
        let drained = tokio::select! {
            drained = tokio::time::timeout(DRAIN_TIMEOUT, shared.in_flight.write()) => drained.ok(),
            // Still renewing: if the lease is lost meanwhile, stop at once.
            _ = hold(election.as_mut()) => None,
        };
        if drained.is_none() {
            tracing::warn!("in-flight work did not finish before shutdown; the next leader resumes it");
        }
        tasks.shutdown().await;
        drop(drained);
        if let Some(elector) = election.as_mut() {
            elector.release().await;
        }
        return;
    }
}

/// The controllers that run only while leading, each restarted by the supervisor when it ends or
/// panics ([`crate::operator::supervisor`]).
fn spawn_writers<C: CloudProvider + 'static>(
    shared: &Arc<Shared<C>>,
    triggers: &Arc<Mutex<UnboundedReceiver<Trigger>>>,
) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    let supervisor = &shared.supervisor;
    let mut spawn = |name: &'static str, run: fn(Arc<Shared<C>>) -> BoxedRun| {
        let shared = shared.clone();
        tasks.spawn(supervisor.run(name, move || run(shared.clone())));
    };
    // The loops that work one unit at a time (the lifecycle reconciles claims concurrently).
    use crate::operator::metrics::controller as c;
    for name in [c::PROVISIONER, c::DISRUPTION, c::NODECLAIM_GC, c::NODECLAIM_DISRUPTION, c::STATUS] {
        metrics::get().set_max_concurrent(name, 1);
    }
    spawn("metrics", |s| Box::pin(super::metrics::run(s)));
    spawn("lifecycle", |s| Box::pin(lifecycle::run(s)));
    spawn("status", |s| Box::pin(status::run(s)));
    spawn("gc", |s| Box::pin(gc::run(s)));
    spawn("nodeclaim_disruption", |s| Box::pin(super::nodeclaim::disruption::run(s)));
    spawn("disruption", |s| Box::pin(disruption::run(s)));
    spawn("static_pools", |s| Box::pin(super::static_pools::run(s)));
    spawn("inplace", |s| Box::pin(inplace::run(s)));
    if shared.settings.node_repair {
        spawn("repair", |s| Box::pin(repair::run(s)));
    }
    let (shared, triggers) = (shared.clone(), triggers.clone());
    tasks.spawn(supervisor.run("provisioning", move || provisioning::run(shared.clone(), triggers.clone())));
    tasks
}

/// A writer's loop, boxed so the writers fit one table.
type BoxedRun = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Completes when the lease is lost; never without an elector.
async fn hold(election: Option<&mut Elector>) {
    match election {
        Some(elector) => elector.hold().await,
        None => std::future::pending().await,
    }
}
