//! Node repair (feature gate `NodeRepair`, off by default; upstream core `pkg/controllers/node/health`):
//! a leader-only loop that replaces managed nodes that have stayed NotReady.
//!
//! Every [`INTERVAL`] (or sooner, when a node reaches its toleration) it reads the nodes from the index
//! and asks [`crate::disruption::repair::decide`] (pure) which to repair. For each:
//! 1. the NodeClaim is annotated `karpenter.sh/nodeclaim-termination-timestamp` = now, so the drain
//!    treats the terminationGracePeriod as elapsed: pods are deleted at once and no PDB, do-not-disrupt
//!    or VolumeAttachment holds the VM (upstream `annotateTerminationGracePeriod`);
//! 2. the NodeClaim is deleted (with a UID precondition); the lifecycle's finalizer terminates it and the
//!    provisioner launches capacity for its pods, which are pending again;
//! 3. an `Unhealthy` event goes on the claim and `karpenter_nodeclaims_unhealthy_disrupted_total` and
//!    `karpenter_nodeclaims_disrupted_total{reason="unhealthy"}` count it.
//!
//! Nodes held back because too much of their NodePool is unhealthy get a `NodeRepairBlocked` event.
//! The annotation patch returns the whole NodeClaim, so no read permission beyond the watch is needed.
//! Tests shorten the toleration and the interval with the hidden environment variables
//! `KARPENTER_REPAIR_TOLERATION` and `KARPENTER_REPAIR_INTERVAL` (read in `start`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde_json::json;

use crate::apis::NodeClaim;
use crate::cloud::CloudProvider;
use crate::controllers::node::drain::ANNOTATION_TERMINATION_TIMESTAMP;
use crate::controllers::start::{env_duration, REPAIR_INTERVAL_ENV, REPAIR_TOLERATION_ENV};
use crate::controllers::writes::{self, Deleted};
use crate::controllers::{events, metrics, ControllerError, Shared};
use crate::disruption::repair::{self, NodeHealth, RepairPlan, RepairPolicy};

/// How often the nodes are looked at when none is about to reach its toleration.
pub const INTERVAL: Duration = Duration::from_secs(30);
/// A condition type as the metric's `condition` label: upstream snake-cases it with `strcase.ToSnake`
/// (dots, dashes and spaces become `_`, a capital after a small letter or digit starts a word):
/// `Ready` is `ready`, `kubernetes.azure.com/NodeHealthy` is `kubernetes_azure_com/node_healthy`.
fn condition_label(condition_type: &str) -> String {
    let mut out = String::new();
    let mut previous: Option<char> = None;
    for c in condition_type.chars() {
        match c {
            '.' | '-' | ' ' | '_' => out.push('_'),
            c if c.is_uppercase() => {
                if previous.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit()) {
                    out.push('_');
                }
                out.extend(c.to_lowercase());
            }
            c => out.push(c),
        }
        previous = Some(c);
    }
    out
}

/// Runs repair passes until the task is stopped; started only with the `NodeRepair` gate on.
pub async fn run<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    let toleration = env_duration(REPAIR_TOLERATION_ENV, repair::TOLERATION);
    let interval = env_duration(REPAIR_INTERVAL_ENV, INTERVAL);
    tracing::info!(
        toleration_s = toleration.as_secs(),
        interval_s = interval.as_secs(),
        "node repair enabled"
    );
    loop {
        let mut wait = interval;
        if shared.cluster().synced() {
            let mut in_flight = shared.begin_work(crate::operator::metrics::controller::NODE_HEALTH).await;
            let now = Timestamp::now();
            let policies = shared.cloud.repair_policies(toleration);
            let plan = repair::decide(&health(&shared, &policies, now), &policies, now);
            if let Some(due) = plan.next_due {
                let until = Duration::try_from(due.duration_since(now)).unwrap_or_default();
                wait = wait.min(until.max(Duration::from_secs(1)));
            }
            if let Err(error) = in_flight.result(act(&shared, &plan).await) {
                tracing::warn!(category = error.category(), %error, "node repair failed");
            }
        }
        tokio::time::sleep(wait).await;
    }
}

/// Every Node of the index, as repair sees it. A node's unhealthy time counts from its Ready
/// transition (the kubelet's or the node controller's clock), but never from before this process saw
/// it unhealthy: a controller clock running fast cannot make a node that just went NotReady look long
/// unhealthy (`controllers::observed`).
fn health<C>(shared: &Shared<C>, policies: &[RepairPolicy], now: Timestamp) -> Vec<NodeHealth> {
    let seen_at = std::time::Instant::now();
    let cluster = shared.cluster();
    let mut unhealthy = std::collections::BTreeSet::new();
    let nodes = cluster
        .nodes()
        .map(|(node, claim)| {
            let mut conditions = node.conditions.clone();
            for c in &mut conditions {
                let broken = policies.iter().any(|p| p.condition == c.type_ && p.status == c.status);
                let Some(since) = c.since.filter(|_| broken) else { continue };
                let key = format!("Unhealthy/{}/{}={}/{since}", node.name(), c.type_, c.status);
                let wall = Duration::try_from(now.duration_since(since)).unwrap_or_default();
                let age = shared.first_seen.guarded(&key, wall, seen_at);
                c.since = now
                    .checked_sub(k8s_openapi::jiff::SignedDuration::try_from(age).unwrap_or_default())
                    .ok();
                unhealthy.insert(key);
            }
            NodeHealth {
                node: node.name().to_string(),
                nodeclaim: claim.map(|c| c.name.clone()),
                nodepool: node.node.nodepool.clone().or_else(|| claim.and_then(|c| c.nodepool.clone())),
                conditions,
                deleting: claim.is_some_and(|c| c.deleting),
            }
        })
        .collect();
    shared.first_seen.retain(|key| !key.starts_with("Unhealthy/") || unhealthy.contains(key));
    nodes
}

async fn act<C>(shared: &Shared<C>, plan: &RepairPlan) -> Result<(), ControllerError> {
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    for blocked in &plan.blocked {
        let why = blocked.reason();
        for (node, claim) in &blocked.nodes {
            tracing::warn!(node = %node, nodeclaim = %claim, reason = %why, "node repair blocked");
            shared.events.publish(events::node_repair_blocked(&why), events::nodeclaim_ref(claim)).await;
        }
    }
    for r in &plan.repair {
        let now = Timestamp::now();
        let patch = json!({"metadata": {"annotations": {ANNOTATION_TERMINATION_TIMESTAMP: now.to_string()}}});
        let claim = match api.patch(&r.nodeclaim, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(claim) => claim,
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => return Err(e.into()),
        };
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        // The claim just patched, not one of the same name created since.
        match writes::delete(&api, &claim, false).await? {
            Deleted::Now => {}
            Deleted::Gone | Deleted::Stale => continue,
        }
        tracing::info!(node = %r.node, nodeclaim = %r.nodeclaim, condition = %r.condition, unhealthy_since = %r.since, "deleting unhealthy node");
        let condition_type = r.condition.split('=').next().unwrap_or_default();
        metrics::nodeclaim_unhealthy_disrupted(metrics::get(), &claim, &condition_label(condition_type));
        let event = events::unhealthy(&r.node, &r.condition, &r.since.to_string());
        shared.events.publish(event, claim.object_ref(&())).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn condition_labels_are_snake_cased_as_upstream() {
        for (condition, label) in [
            ("Ready", "ready"),
            ("kubernetes.azure.com/NodeHealthy", "kubernetes_azure_com/node_healthy"),
            ("PreemptionScheduled", "preemption_scheduled"),
        ] {
            assert_eq!(super::condition_label(condition), label);
        }
    }

    #[test]
    fn a_node_is_timed_from_its_ready_conditions_transition_whatever_the_status() {
        let node = |conditions: &str| -> k8s_openapi::api::core::v1::Node {
            serde_yaml::from_str(&format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: n}}\nstatus: {{capacity: {{cpu: '2'}}, \
                 allocatable: {{cpu: '2'}}, conditions: {conditions}}}\n"
            ))
            .unwrap()
        };
        let at = |t: &str| Some(t.parse::<k8s_openapi::jiff::Timestamp>().unwrap());
        let cases = [
            (
                "[{type: Ready, status: 'True', lastTransitionTime: '2026-01-01T00:00:00Z'}]",
                true,
                at("2026-01-01T00:00:00Z"),
            ),
            (
                "[{type: MemoryPressure, status: 'False', lastTransitionTime: '2026-01-01T00:00:00Z'}, \
                 {type: Ready, status: 'False', lastTransitionTime: '2026-01-02T00:00:00Z'}]",
                false,
                at("2026-01-02T00:00:00Z"),
            ),
            (
                "[{type: Ready, status: Unknown, lastTransitionTime: '2026-01-03T00:00:00Z'}]",
                false,
                at("2026-01-03T00:00:00Z"),
            ),
            ("[{type: Ready, status: 'False'}]", false, None),
            ("[]", false, None),
        ];
        for (conditions, ready, since) in cases {
            let record = crate::state::NodeRecord::from_k8s(&node(conditions)).unwrap();
            assert_eq!((record.ready, record.ready_since), (ready, since), "{conditions}");
        }
    }
}
