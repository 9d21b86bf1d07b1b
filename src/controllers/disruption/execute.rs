//! Acting on one command (upstream `queue.go` `StartCommand` and `waitOrTerminate`), and on expired
//! NodeClaims (upstream `nodeclaim/expiration`).
//!
//! [`start`]: mark the candidates as ours, taint them `karpenter.sh/disrupted:NoSchedule` (nothing new
//! lands on them) and set `DisruptionReason` on their NodeClaims, then create the replacements. Pods
//! are not touched yet. [`finish`], in the background: wait until every replacement is Initialized
//! (pods must have somewhere to go before anything is drained), then delete the candidates' NodeClaims;
//! termination drains and deletes them. If a replacement fails to launch or initialize within
//! [`REPLACEMENT_TIMEOUT`], the command is rolled back: candidates untainted, conditions cleared.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{reason_label, report, Disrupting, Shared};
use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::NodeClaim;
use crate::cloud::CloudProvider;
use crate::controllers::nodeclaim::{self, CreateError};
use crate::controllers::writes::{self, Deleted, Guard, Part, Updated};
use crate::controllers::ControllerError;
use crate::disruption::{command::reason_str, Command, Expired, Snapshot};
use crate::model::labels::{ANNOTATION_REPLACEMENT_FOR, TAINT_DISRUPTED};
use crate::operator::metrics as operator_metrics;

/// How long replacements may take to initialize (upstream: `clamp(80 ms × queued commands, 10 min,
/// 1 h)`, 10 min for one command).
pub const REPLACEMENT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// How often [`finish`] looks at the replacements.
const POLL: Duration = Duration::from_secs(1);

/// A command whose candidates are tainted and whose replacements exist.
pub struct Started {
    pub replacements: Vec<String>,
    pub at: Instant,
}

/// Taints the candidates and creates the replacements; `None` (after a rollback) when either fails.
pub async fn start<C: CloudProvider + 'static>(
    shared: &Arc<Shared<C>>,
    disrupting: &Disrupting,
    command: &Command,
) -> Option<Started> {
    disrupting.add(&command.candidates);
    let reason = reason_str(command.reason);
    let mut failure = None;
    for node in &command.candidates {
        let claim = claim_of(shared, node);
        let tainted = async {
            taint(shared, node).await?;
            if let Some(claim) = &claim {
                set_disruption_reason(shared, claim, Some(reason)).await?;
            }
            Ok::<_, ControllerError>(())
        };
        if let Err(e) = tainted.await {
            failure = Some(e);
            break;
        }
    }
    let mut replacements = vec![];
    if failure.is_none() {
        match create_replacements(shared, command).await {
            Ok(names) => replacements = names,
            Err(e) => failure = Some(e),
        }
    }
    if let Some(error) = failure {
        tracing::warn!(candidates = ?command.candidates, category = error.category(), %error, "starting a disruption command failed; rolling back");
        rollback(shared, disrupting, command).await;
        report::queue_failure(command);
        return None;
    }
    report::command_started(shared, command);
    report::started(shared, command, &replacements);
    Some(Started { replacements, at: Instant::now() })
}

/// Waits for the replacements, then deletes the candidates; rolls back when a replacement fails.
pub async fn finish<C: Send + Sync + 'static>(
    shared: &Arc<Shared<C>>,
    disrupting: &Disrupting,
    command: Command,
    started: Started,
) {
    if let Err(why) = await_replacements(shared, &started).await {
        tracing::warn!(candidates = ?command.candidates, %why, "replacements did not initialize; rolling back the disruption");
        rollback(shared, disrupting, &command).await;
        report::queue_failure(&command);
        return;
    }
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    for node in &command.candidates {
        let Some(claim) = claim_of(shared, node) else { continue };
        let _work = shared.begin_work(crate::operator::metrics::controller::DISRUPTION_QUEUE).await;
        match writes::delete_named(&api, &claim, &indexed_claim(shared, &claim), None).await {
            Ok((Deleted::Now, deleting)) => {
                if let Some(deleting) = deleting {
                    shared.cluster().apply(&deleting);
                }
                report::disrupted(shared, &command, node, &claim);
                tracing::info!(node = %node, nodeclaim = %claim, reason = reason_str(command.reason), method = command.method.as_str(), waited_s = started.at.elapsed().as_secs(), "disrupting: deleted nodeclaim");
            }
            Ok((Deleted::Gone | Deleted::Stale, _)) => {}
            Err(error) => {
                tracing::warn!(nodeclaim = %claim, %error, "deleting a disrupted nodeclaim failed; the next leader pass retries");
            }
        }
    }
    disrupting.remove(&command.candidates);
}

async fn await_replacements<C>(shared: &Shared<C>, started: &Started) -> Result<(), String> {
    loop {
        let waiting = {
            let cluster = shared.cluster();
            let mut waiting = 0;
            for name in &started.replacements {
                match cluster.nodeclaim(name) {
                    None => return Err(format!("replacement {name} is gone")),
                    Some(c) if c.deleting => return Err(format!("replacement {name} is being deleted")),
                    Some(c) if !c.initialized => waiting += 1,
                    Some(_) => {}
                }
            }
            waiting
        };
        if waiting == 0 {
            return Ok(());
        }
        if started.at.elapsed() >= REPLACEMENT_TIMEOUT {
            return Err(format!(
                "{waiting} replacement(s) not initialized after {}s",
                REPLACEMENT_TIMEOUT.as_secs()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn create_replacements<C: CloudProvider>(
    shared: &Shared<C>,
    command: &Command,
) -> Result<Vec<String>, ControllerError> {
    let mut names = vec![];
    for planned in &command.replacements {
        let annotations =
            BTreeMap::from([(ANNOTATION_REPLACEMENT_FOR.to_string(), command.candidates.join(","))]);
        let created = nodeclaim::create(shared, planned, annotations).await.map_err(|e| match e {
            CreateError::PoolGone(_) => ControllerError::Invalid(e.to_string()),
            CreateError::Kube(e) => e.into(),
        })?;
        operator_metrics::get().nodeclaim_created_for(reason_label(command.reason), &planned.nodepool);
        tracing::info!(nodeclaim = %created.name_any(), nodepool = %planned.nodepool, instance_type = %planned.instance_type, zone = %planned.zone, capacity_type = planned.capacity_type.as_str(), price_per_hour = planned.price_per_hour, "created replacement nodeclaim");
        names.push(created.name_any());
    }
    Ok(names)
}

async fn rollback<C>(shared: &Shared<C>, disrupting: &Disrupting, command: &Command) {
    for node in &command.candidates {
        if let Err(error) = untaint(shared, node).await {
            tracing::warn!(node = %node, %error, "untainting after a failed disruption failed; the next pass retries");
        }
        if let Some(claim) = claim_of(shared, node) {
            if let Err(error) = clear_disruption_reason(shared, &claim).await {
                tracing::warn!(nodeclaim = %claim, %error, "clearing DisruptionReason failed; the next pass retries");
            }
        }
    }
    disrupting.remove(&command.candidates);
}

/// Deletes expired NodeClaims at once (forceful expiration).
pub async fn expire<C>(shared: &Shared<C>, snapshot: &Snapshot, expired: &[Expired]) {
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    for e in expired {
        match writes::delete_named(&api, &e.nodeclaim, &indexed_claim(shared, &e.nodeclaim), None).await {
            Ok((Deleted::Now, deleting)) => {
                if let Some(deleting) = deleting {
                    shared.cluster().apply(&deleting);
                }
                report::expired(shared, snapshot, e);
                tracing::info!(nodeclaim = %e.nodeclaim, node = %e.node, nodepool = %e.nodepool, "expired: deleted nodeclaim");
            }
            Ok((Deleted::Gone | Deleted::Stale, _)) => {}
            Err(error) => {
                tracing::warn!(nodeclaim = %e.nodeclaim, %error, "deleting an expired nodeclaim failed")
            }
        }
    }
}

/// A delete of the NodeClaim `name` the index holds: of that object (its uid), not a newer one of the
/// same name.
fn indexed_claim<C>(shared: &Shared<C>, name: &str) -> Guard {
    Guard::uid(shared.cluster().nodeclaim(name).and_then(|c| c.uid.clone()))
}

/// The NodeClaim behind `node` (a Node name, or an in-flight claim's own name).
pub fn claim_of<C>(shared: &Shared<C>, node: &str) -> Option<String> {
    let cluster = shared.cluster();
    match cluster.node(node) {
        Some(n) => cluster.claim_of(n).map(|c| c.name.clone()),
        None => cluster.nodeclaim(node).map(|c| c.name.clone()),
    }
}

/// Adds `karpenter.sh/disrupted:NoSchedule` to the Node (no Node yet: nothing to taint).
async fn taint<C>(shared: &Shared<C>, node: &str) -> Result<(), ControllerError> {
    update_taints(shared, node, |taints| {
        if taints.iter().any(|t| t.key == TAINT_DISRUPTED) {
            return false;
        }
        taints.push(Taint { key: TAINT_DISRUPTED.into(), effect: "NoSchedule".into(), ..Taint::default() });
        true
    })
    .await
}

/// Removes `karpenter.sh/disrupted` from the Node.
pub async fn untaint<C>(shared: &Shared<C>, node: &str) -> Result<(), ControllerError> {
    update_taints(shared, node, |taints| {
        let before = taints.len();
        taints.retain(|t| t.key != TAINT_DISRUPTED);
        taints.len() != before
    })
    .await
}

/// Changes the Node's taints with [`writes::update_on_conflict`]; `change` says whether it changed them.
async fn update_taints<C>(
    shared: &Shared<C>,
    node: &str,
    change: impl Fn(&mut Vec<Taint>) -> bool,
) -> Result<(), ControllerError> {
    let api: Api<Node> = Api::all(shared.client.clone());
    let updated = writes::update_on_conflict(&api, Part::Object, node, |current: &Node| {
        let mut taints = current.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        change(&mut taints).then(|| json!({ "spec": { "taints": taints } }))
    })
    .await?;
    if let Updated::Written(stored) = updated {
        shared.cluster().apply(&stored);
    }
    Ok(())
}

/// Sets the claim's `DisruptionReason` condition to `reason`, or removes it, with
/// [`writes::update_on_conflict`].
async fn set_disruption_reason<C>(
    shared: &Shared<C>,
    claim: &str,
    reason: Option<&str>,
) -> Result<(), ControllerError> {
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    let updated = writes::update_on_conflict(&api, Part::Status, claim, |current: &NodeClaim| {
        let mut list = current.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
        let changed = match reason {
            Some(reason) => conditions::set(
                &mut list,
                conditions::DISRUPTION_REASON,
                ConditionStatus::True,
                reason,
                &format!("Disrupting: {reason}"),
                current.metadata.generation,
                &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
            ),
            None => {
                let before = list.len();
                list.retain(|c| c.type_ != conditions::DISRUPTION_REASON);
                list.len() != before
            }
        };
        changed.then(|| json!({ "status": { "conditions": list } }))
    })
    .await?;
    if let Updated::Written(stored) = updated {
        shared.cluster().apply(&stored);
    }
    Ok(())
}

pub async fn clear_disruption_reason<C>(shared: &Shared<C>, claim: &str) -> Result<(), ControllerError> {
    set_disruption_reason(shared, claim, None).await
}

/// The events of a command that started, on each candidate Node and NodeClaim.
pub fn disrupting_events(command: &Command, replacements: &[String]) -> String {
    let with = if replacements.is_empty() {
        "no replacement".to_string()
    } else {
        format!("replacement(s) {}", replacements.join(", "))
    };
    format!("{} ({}): {}; {with}", reason_str(command.reason), command.method.as_str(), command.explanation)
}
