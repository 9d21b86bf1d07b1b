//! AKSNodeClass and NodePool status.
//!
//! AKSNodeClass: `kubernetesVersion` from the API server's /version, `images` resolved from the AKS
//! community galleries and the subnet check, written as KubernetesVersionReady / ImagesReady /
//! SubnetsReady / Ready ([`crate::cloud::azure::nodeclass`]).
//!
//! Node image versions move only inside the AKS node OS maintenance window, when one is configured
//! ([`maintenance`]).
//!
//! NodePool: NodeClassReady and Ready from its class, `resources` and `nodes` in use from the index.
//! Provisioning only sees NodePools whose Ready is True, so this writer must run for anything to launch.
//!
//! NodeOverlay: ValidationSucceeded and Ready ([`nodeoverlay`]).

pub mod nodeoverlay;

pub mod maintenance;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::{AKSNodeClass, NodePool};
use crate::cloud::CloudProvider;
use crate::controllers::nodeclaim::resource_list;
use crate::controllers::nodepool_health::Registration;
use crate::controllers::{events, writes, ControllerError, Shared};
use crate::model::labels::FINALIZER_NODECLASS_TERMINATION;

/// Status is recomputed at least this often (node counts and the Kubernetes version change without a
/// NodePool or AKSNodeClass event).
const RESYNC: Duration = Duration::from_secs(10);

pub async fn run<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    let mut window_problem = None;
    loop {
        let mut in_flight = shared.begin_work(crate::operator::metrics::controller::STATUS).await;
        if let Err(error) = in_flight.result(sync_all(&shared, &mut window_problem).await) {
            tracing::warn!(category = error.category(), %error, "status update failed");
        }
        drop(in_flight);
        tokio::select! {
            _ = shared.status_changed.notified() => {}
            _ = tokio::time::sleep(RESYNC) => {}
        }
    }
}

/// `window_problem` is the last maintenance-window problem logged, so each is logged once.
async fn sync_all<C: CloudProvider>(
    shared: &Shared<C>,
    window_problem: &mut Option<String>,
) -> Result<(), ControllerError> {
    // The index keeps classes by name only; they are few, so they are listed (fresh status included).
    let classes_api: Api<AKSNodeClass> = Api::all(shared.client.clone());
    let classes = classes_api.list(&ListParams::default()).await?.items;
    for class in &classes {
        finalize(shared, &classes_api, class).await?;
    }
    if !classes.is_empty() {
        let version = kubernetes_version(&shared.client.apiserver_version().await?.git_version);
        let (upgrades, problem) =
            maintenance::upgrades(&shared.client, &shared.settings.system_namespace, Timestamp::now()).await;
        if problem.is_some() && problem != *window_problem {
            tracing::warn!(problem = problem.as_deref().unwrap_or_default(), "node OS maintenance window");
        }
        *window_problem = problem;
        for class in classes.iter().filter(|c| c.metadata.deletion_timestamp.is_none()) {
            if let Some(status) = shared.cloud.node_class_status(class, &version, upgrades, &now()).await {
                let patch = Patch::Merge(json!({ "status": status }));
                classes_api.patch_status(&class.name_any(), &PatchParams::default(), &patch).await?;
                if let Some(why) = newly_failing_credentials(class, &status) {
                    shared.events.publish(events::credentials_unavailable(&why), class.object_ref(&())).await;
                }
                tracing::info!(aksnodeclass = %class.name_any(), kubernetes_version = %version, ready = %ready_summary(&status), "updated aksnodeclass status");
            }
        }
        shared.cloud.forget_unused_node_class_lookups();
    }
    let (pools, usage, node_counts) = {
        let cluster = shared.cluster();
        let mut counts = BTreeMap::<String, i64>::new();
        for (node, claim) in cluster.nodes() {
            let pool = node.node.nodepool.as_ref().or_else(|| claim.and_then(|c| c.nodepool.as_ref()));
            if let Some(pool) = pool {
                *counts.entry(pool.clone()).or_default() += 1;
            }
        }
        (cluster.nodepools().cloned().collect::<Vec<NodePool>>(), cluster.nodepool_usage(), counts)
    };
    let api: Api<NodePool> = Api::all(shared.client.clone());
    for pool in &pools {
        let name = pool.name_any();
        let class_name = &pool.spec.template.spec.node_class_ref.name;
        let class = classes.iter().find(|c| &c.name_any() == class_name);
        let used = usage.get(&name).cloned().unwrap_or_default();
        let nodes = node_counts.get(&name).copied().unwrap_or(0);
        let registration = shared.registrations.state(&name);
        if let Some(status) =
            nodepool_status(pool, class, resource_list(&used), nodes, registration.as_ref(), &now())
        {
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({ "status": status })))
                .await?;
            if let Some(Registration::Unhealthy { .. }) = &registration {
                let was = pool
                    .status
                    .as_ref()
                    .and_then(|s| conditions::get(&s.conditions, conditions::NODE_REGISTRATION_HEALTHY));
                if was.is_none_or(|c| c.status != ConditionStatus::False) {
                    let (_, _, message) =
                        registration.as_ref().map(Registration::condition).unwrap_or_default();
                    tracing::warn!(nodepool = %name, %message, "the NodePool's nodes do not register");
                    shared
                        .events
                        .publish(events::registration_unhealthy(&message), pool.object_ref(&()))
                        .await;
                }
            }
            tracing::debug!(nodepool = %name, "updated nodepool status");
        }
    }
    nodeoverlay::sync(shared, &now()).await?;
    Ok(())
}

/// The AKSNodeClass termination finalizer (upstream provider `pkg/controllers/nodeclass/status` adds it,
/// `pkg/controllers/nodeclass/termination` removes it): a class in use is deleted only after the last
/// NodeClaim that names it, so no node is left without the class its drift and launches read. While it
/// waits, a `WaitingOnNodeClaimTermination` event names the claims.
async fn finalize<C>(
    shared: &Shared<C>,
    api: &Api<AKSNodeClass>,
    class: &AKSNodeClass,
) -> Result<(), ControllerError> {
    let has = class.finalizers().iter().any(|f| f == FINALIZER_NODECLASS_TERMINATION);
    let deleting = class.metadata.deletion_timestamp.is_some();
    let finalizers: Vec<String> = match (deleting, has) {
        (false, false) => {
            let mut list = class.finalizers().to_vec();
            list.push(FINALIZER_NODECLASS_TERMINATION.to_string());
            list
        }
        (true, true) => {
            let users: Vec<String> = {
                let cluster = shared.cluster();
                let name = class.name_any();
                cluster.nodeclaims().filter(|c| c.node_class == name).map(|c| c.name.clone()).collect()
            };
            if !users.is_empty() {
                let event = events::waiting_on_nodeclaim_termination(&users);
                shared.events.publish(event, class.object_ref(&())).await;
                return Ok(());
            }
            class.finalizers().iter().filter(|f| *f != FINALIZER_NODECLASS_TERMINATION).cloned().collect()
        }
        _ => return Ok(()),
    };
    // Guarded by the version read: a merge patch replaces the whole list.
    if writes::patch(api, class, json!({"metadata": {"finalizers": finalizers}})).await?.is_some() {
        tracing::info!(aksnodeclass = %class.name_any(), added = !deleting, "updated aksnodeclass termination finalizer");
    }
    Ok(())
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// The message of a `CredentialsReady=False` condition the new status brings and the class did not
/// have: the moment to tell whoever looks at the class.
fn newly_failing_credentials(class: &AKSNodeClass, status: &serde_json::Value) -> Option<String> {
    let had = class
        .status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == conditions::CREDENTIALS_READY));
    let written = status["conditions"].as_array()?;
    let failing =
        written.iter().find(|c| c["type"] == conditions::CREDENTIALS_READY && c["status"] == "False")?;
    (!had).then(|| failing["message"].as_str().unwrap_or_default().to_string())
}

/// `v1.34.2+k3s1` → `1.34.2`.
pub fn kubernetes_version(git_version: &str) -> String {
    let v = git_version.trim_start_matches('v');
    v.split(['-', '+']).next().unwrap_or(v).to_string()
}

/// `Ready=True`, or the failing conditions' reasons, for the log line.
fn ready_summary(status: &serde_json::Value) -> String {
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let failing: Vec<String> = conditions
        .iter()
        .filter(|c| c["status"] != "True")
        .map(|c| format!("{}={}", c["type"].as_str().unwrap_or("?"), c["reason"].as_str().unwrap_or("?")))
        .collect();
    if failing.is_empty() {
        "Ready=True".to_string()
    } else {
        failing.join(",")
    }
}

/// The pool's status, or None when what is stored is already right. `registration` is what its recent
/// launches say about `NodeRegistrationHealthy` (None: nothing yet; a pool without the condition
/// gets it as Unknown).
pub fn nodepool_status(
    pool: &NodePool,
    class: Option<&AKSNodeClass>,
    resources: crate::apis::common::ResourceList,
    nodes: i64,
    registration: Option<&Registration>,
    now: &Time,
) -> Option<serde_json::Value> {
    let current = pool.status.clone().unwrap_or_default();
    let class_name = &pool.spec.template.spec.node_class_ref.name;
    let class_ready = class
        .and_then(|c| c.status.as_ref())
        .is_some_and(|s| conditions::is_true(&s.conditions, conditions::READY));
    let terminating = class.is_some_and(|c| c.metadata.deletion_timestamp.is_some());
    let (status, reason, message) = match (class, class_ready) {
        (None, _) => {
            (ConditionStatus::False, "NodeClassNotFound", format!("AKSNodeClass {class_name} not found"))
        }
        // Upstream core's NodePool readiness: a deleting class launches nothing more.
        (Some(_), _) if terminating => (
            ConditionStatus::False,
            "NodeClassTerminating",
            format!("AKSNodeClass {class_name} is terminating"),
        ),
        (Some(_), false) => {
            (ConditionStatus::False, "NodeClassNotReady", format!("AKSNodeClass {class_name} is not ready"))
        }
        (Some(_), true) => (ConditionStatus::True, "NodeClassReady", String::new()),
    };
    let generation = pool.metadata.generation;
    let mut list = current.conditions.clone();
    let mut changed =
        conditions::set(&mut list, conditions::NODE_CLASS_READY, status, reason, &message, generation, now);
    let ready_reason = if status == ConditionStatus::True { "Ready" } else { reason };
    changed |= conditions::set(&mut list, conditions::READY, status, ready_reason, &message, generation, now);
    changed |= match registration.map(Registration::condition) {
        Some((healthy, reason, message)) => {
            let status = if healthy { ConditionStatus::True } else { ConditionStatus::False };
            conditions::set(
                &mut list,
                conditions::NODE_REGISTRATION_HEALTHY,
                status,
                reason,
                &message,
                generation,
                now,
            )
        }
        None if conditions::get(&list, conditions::NODE_REGISTRATION_HEALTHY).is_none() => conditions::set(
            &mut list,
            conditions::NODE_REGISTRATION_HEALTHY,
            ConditionStatus::Unknown,
            "AwaitingRegistration",
            "no NodeClaim of this NodePool has registered yet",
            generation,
            now,
        ),
        None => false,
    };
    changed |= current.resources != resources || current.nodes != Some(nodes);
    changed.then(|| json!({ "resources": resources, "nodes": nodes, "conditions": list }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_versions() {
        assert_eq!(kubernetes_version("v1.34.2+k3s1"), "1.34.2");
        assert_eq!(kubernetes_version("v1.31.0-rc.1"), "1.31.0");
    }

    #[test]
    fn ready_summaries_name_the_failing_conditions() {
        let ok = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]});
        assert_eq!(ready_summary(&ok), "Ready=True");
        let bad = json!({"conditions": [
            {"type": "SubnetsReady", "status": "False", "reason": "SubnetNotFound"},
            {"type": "Ready", "status": "False", "reason": "UnhealthyDependents"}]});
        assert_eq!(ready_summary(&bad), "SubnetsReady=SubnetNotFound,Ready=UnhealthyDependents");
    }

    #[test]
    fn node_registration_health_starts_unknown_and_follows_the_launches() {
        let mut pool: NodePool = serde_yaml::from_str(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: c}\n      requirements: []\n",
        )
        .unwrap();
        let now = Time(Timestamp::UNIX_EPOCH);
        let condition = |pool: &NodePool| {
            let c = conditions::get(
                &pool.status.as_ref().unwrap().conditions,
                conditions::NODE_REGISTRATION_HEALTHY,
            );
            c.map(|c| (c.status, c.reason.clone())).unwrap()
        };
        let apply = |pool: &mut NodePool, registration: Option<&Registration>| {
            if let Some(status) = nodepool_status(pool, None, Default::default(), 0, registration, &now) {
                pool.status = Some(serde_json::from_value(status).unwrap());
            }
        };
        apply(&mut pool, None);
        assert_eq!(condition(&pool), (ConditionStatus::Unknown, "AwaitingRegistration".to_string()));
        apply(&mut pool, Some(&Registration::Unhealthy { failed: 2, of: 2 }));
        assert_eq!(condition(&pool), (ConditionStatus::False, "RegistrationFailed".to_string()));
        apply(&mut pool, None);
        assert_eq!(condition(&pool).0, ConditionStatus::False, "a restart keeps what was written");
        apply(&mut pool, Some(&Registration::Healthy));
        assert_eq!(condition(&pool), (ConditionStatus::True, "NodeRegistrationHealthy".to_string()));
        let ready = conditions::get(&pool.status.as_ref().unwrap().conditions, conditions::READY).unwrap();
        assert_eq!(ready.reason, "NodeClassNotFound", "registration health is not a condition of Ready");
    }
}
