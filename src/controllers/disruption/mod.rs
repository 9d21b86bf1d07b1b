//! The disruption controller (upstream core `pkg/controllers/disruption/controller.go`, `queue.go`,
//! `validation.go`, and `pkg/controllers/nodeclaim/expiration`): the loop that turns the pure
//! decisions of [`crate::disruption`] into safe actions on the cluster. Leader only, on a synced index.
//!
//! Each pass (every [`Settings::disruption_interval`](super::Settings), 10 s, and at once again after
//! an action):
//! 1. resumes commands a previous leader left between launching replacements and deleting candidates,
//!    and strips every other `karpenter.sh/disrupted` taint and `DisruptionReason` condition no command
//!    of this term owns, so nothing stays tainted or half-done after a restart or a leader change
//!    (`stale`);
//! 2. builds the disruption snapshot from the index ([`crate::state::Cluster::disruption_snapshot`]);
//! 3. deletes expired NodeClaims (forceful: no budget, no replacement first; the drain still honours
//!    PDBs and do-not-disrupt until terminationGracePeriod);
//! 4. decides, publishes the metrics and `DisruptionBlocked` events (`report`);
//! 5. for emptiness and consolidation, waits [`Settings::disruption_validation_delay`](super::Settings)
//!    (15 s) and validates the commands on a fresh snapshot; drift acts at once, as upstream;
//! 6. starts each valid command (`execute`): taint the candidates, create the replacements, and in
//!    the background wait until they are initialized before deleting the candidates, or roll back.
//!
//! Commands in flight are tracked by node name in `Disrupting`; the next passes see those nodes as
//! marked for deletion, so budgets count them.

mod execute;
mod report;
mod stale;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use tokio::task::JoinSet;

use super::{ControllerError, Shared};
use crate::apis::nodepool::DisruptionReason;
use crate::cloud::CloudProvider;
use crate::disruption::{self, Command, Decisions, Method, Snapshot};

/// Node names of the commands this leadership term is executing.
#[derive(Clone, Default)]
pub struct Disrupting(Arc<Mutex<BTreeSet<String>>>);

impl Disrupting {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn names(&self) -> BTreeSet<String> {
        self.lock().clone()
    }

    fn add(&self, nodes: &[String]) {
        self.lock().extend(nodes.iter().cloned());
    }

    fn remove(&self, nodes: &[String]) {
        let mut set = self.lock();
        for n in nodes {
            set.remove(n);
        }
    }
}

/// Runs while this replica leads; the commands it started are aborted with it (the next leader strips
/// their taints and decides again).
pub async fn run<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    let disrupting = Disrupting::default();
    let mut commands: JoinSet<()> = JoinSet::new();
    loop {
        while commands.try_join_next().is_some() {}
        let acted = match pass(&shared, &disrupting, &mut commands).await {
            Ok(acted) => acted,
            Err(error) => {
                tracing::warn!(category = error.category(), %error, "disruption pass failed");
                false
            }
        };
        if !acted {
            tokio::time::sleep(shared.settings.disruption_interval).await;
        }
    }
}

/// The disruption snapshot now, or `None` while the index is not synced.
fn snapshot<C: CloudProvider>(shared: &Shared<C>, disrupting: &Disrupting) -> Option<Snapshot> {
    let cluster = shared.cluster();
    if let Err(reason) = cluster.sync_status() {
        tracing::debug!(%reason, "disruption waits for the cluster state");
        return None;
    }
    let (snapshot, errors) = cluster.disruption_snapshot(
        &|_pool, class| shared.cloud.instance_types(class),
        shared.solve_options(),
        &disrupting.names(),
        &shared.nominated(),
    );
    for e in errors {
        tracing::warn!(error = %e, "NodePool left out of disruption");
    }
    Some(snapshot)
}

/// One pass; true when it acted (expired a claim or started a command).
async fn pass<C: CloudProvider + 'static>(
    shared: &Arc<Shared<C>>,
    disrupting: &Disrupting,
    commands: &mut JoinSet<()>,
) -> Result<bool, ControllerError> {
    let decisions = {
        let _work = shared.begin_work(crate::operator::metrics::controller::DISRUPTION).await;
        if shared.cluster().sync_status().is_err() {
            return Ok(false);
        }
        stale::resume(shared, disrupting, commands);
        stale::strip(shared, disrupting).await?;
        let Some(snapshot) = snapshot(shared, disrupting) else { return Ok(false) };
        let now = Timestamp::now();
        let expired = disruption::expired(&snapshot, now);
        if !expired.is_empty() {
            execute::expire(shared, &snapshot, &expired).await;
            return Ok(true);
        }
        let options = shared.settings.disruption.clone();
        let (snapshot, decisions, took, bound) = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let decisions = disruption::decide(&snapshot, now, &options);
            let took = started.elapsed();
            // The bound is this controller's own report: upstream's pass computes none, so its solve
            // is kept out of the evaluation time that upstream's metric reports.
            let bound = disruption::repack_lower_bound(&snapshot);
            (snapshot, decisions, took, bound)
        })
        .await
        .map_err(|e| ControllerError::Invalid(format!("the disruption decision panicked: {e}")))?;
        report::decisions(shared, &snapshot, &decisions, bound, now, took);
        decisions
    };
    let Decisions { commands: decided, .. } = decisions;
    if decided.is_empty() {
        return Ok(false);
    }
    let decided = if decided.iter().all(|c| c.method == Method::Drift) {
        decided
    } else {
        // Upstream validation.go: wait, then re-check on the cluster as it is then.
        tokio::time::sleep(shared.settings.disruption_validation_delay).await;
        validated(shared, disrupting, decided).await
    };
    let _work = shared.begin_work(crate::operator::metrics::controller::DISRUPTION_QUEUE).await;
    let mut acted = false;
    for command in decided {
        let Some(started) = execute::start(shared, disrupting, &command).await else { continue };
        acted = true;
        let (shared, disrupting) = (shared.clone(), disrupting.clone());
        commands.spawn(async move { execute::finish(&shared, &disrupting, command, started).await });
    }
    Ok(acted)
}

/// The commands that still hold on a fresh snapshot.
async fn validated<C: CloudProvider + 'static>(
    shared: &Arc<Shared<C>>,
    disrupting: &Disrupting,
    decided: Vec<Command>,
) -> Vec<Command> {
    let Some(snapshot) = snapshot(shared, disrupting) else { return vec![] };
    let now = Timestamp::now();
    let options = shared.settings.disruption.clone();
    let checked = tokio::task::spawn_blocking(move || {
        decided
            .into_iter()
            .map(|c| {
                let verdict = disruption::validate(&c, &snapshot, now, &options);
                (c, verdict)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let mut valid = vec![];
    for (command, verdict) in checked {
        match verdict {
            Ok(()) => valid.push(command),
            Err(invalid) => {
                tracing::info!(
                    method = command.method.as_str(),
                    candidates = ?command.candidates,
                    %invalid,
                    "disruption command no longer valid"
                );
                report::failed_validation(&command);
            }
        }
    }
    valid
}

/// Upstream's lower-case reason label.
fn reason_label(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Empty => "empty",
        DisruptionReason::Drifted => "drifted",
        DisruptionReason::Underutilized => "underutilized",
    }
}
