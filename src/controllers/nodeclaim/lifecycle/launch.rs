//! Launch (upstream core `nodeclaim/lifecycle/launch.go`): the cloud provider creates the claim's VM from
//! the claim and its AKSNodeClass; the claim gets the VM's providerID, image, capacity and the labels of
//! the size, zone and capacity type it got. A refused offering (capacity, a class that is not Ready)
//! deletes the claim so the next batch solves again without it; any other error is retried with a
//! backoff. The create is cut off when the claim's launch timeout comes, whatever hangs inside it.
//! With NodeOverlays in the index, the launch ranks its offerings at the overlaid prices the solver
//! planned with ([`super::launch_prices`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::phase::WAIT_POLL;
use super::{delete_claim, set_condition};
use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::NodeClaim;
use crate::cloud::{CloudError, CloudProvider};
use crate::controllers::nodeclaim::{self, resource_list};
use crate::controllers::{events, writes, ControllerError, Shared};

/// The least time a create is given, so a claim reconciled just before its launch timeout still makes
/// one real attempt instead of one that is cut off at once.
const MIN_CREATE_TIME: std::time::Duration = std::time::Duration::from_secs(5);

pub(super) async fn launch<C: CloudProvider + 'static>(
    claim: &NodeClaim,
    shared: &Shared<C>,
    api: &Api<NodeClaim>,
    now: Timestamp,
    time_left: std::time::Duration,
) -> Result<Action, ControllerError> {
    let name = claim.name_any();
    let class = shared.cluster().nodeclass(&claim.spec.node_class_ref.name).cloned();
    let mut request = match shared.cloud.launch_request(claim, class.as_ref()) {
        Ok(request) => request,
        Err(error) if error.category() == "NodeClassNotReady" => {
            // As upstream: the claim cannot launch until its class changes, and provisioning creates no
            // claims for a class that is not Ready, so it goes instead of waiting.
            tracing::info!(nodeclaim = %name, %error, "launch failed");
            shared.events.on_claim(claim, events::launch_failed(error.category(), &error.to_string())).await;
            return delete_claim(api, claim, "nodeclass_not_ready").await;
        }
        Err(error) => {
            let ev = events::launch_failed("LaunchRequestInvalid", &error.to_string());
            shared.events.on_claim(claim, ev).await;
            set_condition(
                api,
                claim,
                conditions::LAUNCHED,
                ConditionStatus::Unknown,
                "LaunchRequestInvalid",
                &error.to_string(),
                now,
            )
            .await?;
            return Err(ControllerError::Invalid(error.to_string()));
        }
    };
    let overlaid =
        shared.cluster().overlaid_types_of(&request.nodepool, &|_, class| shared.cloud.instance_types(class));
    if let Some(types) = overlaid {
        super::launch_prices::reprice(&mut request, &types);
    }
    let bounded = tokio::time::timeout(time_left.max(MIN_CREATE_TIME), shared.cloud.create(&request));
    let created = bounded.await.unwrap_or_else(|_| {
        // The dropped create leaves at most a VM or NIC by the claim's name: the next attempt reuses
        // them and the claim's deletion removes them.
        Err(CloudError::Transient(format!(
            "the create did not finish within the launch timeout ({time_left:?} left)"
        )))
    });
    let instance = match created {
        Ok(instance) => instance,
        Err(error @ (CloudError::InsufficientCapacity { .. } | CloudError::NodeClassNotReady(_))) => {
            // The cloud marked the refused offerings unavailable; the next batch solves again without them.
            tracing::info!(nodeclaim = %name, category = error.category(), %error, "launch failed");
            let ev = match &error {
                CloudError::InsufficientCapacity { .. } => events::insufficient_capacity(&error.to_string()),
                _ => events::launch_failed(error.category(), &error.to_string()),
            };
            shared.events.on_claim(claim, ev).await;
            let reason = match &error {
                CloudError::InsufficientCapacity { .. } => "insufficient_capacity",
                _ => "nodeclass_not_ready",
            };
            return delete_claim(api, claim, reason).await;
        }
        Err(error) => {
            shared.events.on_claim(claim, events::launch_failed(error.category(), &error.to_string())).await;
            set_condition(
                api,
                claim,
                conditions::LAUNCHED,
                ConditionStatus::Unknown,
                error.category(),
                &error.to_string(),
                now,
            )
            .await?;
            return Err(error.into());
        }
    };
    let types = shared.cloud.instance_types(class.as_ref());
    let instance_type = types.iter().find(|t| t.name == instance.instance_type);
    let labels = nodeclaim::launched_labels(
        claim.metadata.labels.as_ref().unwrap_or(&Default::default()),
        instance_type,
        instance.zone.as_deref(),
        instance.capacity_type,
    );
    let launched = if labels.is_empty() {
        claim.clone()
    } else {
        match writes::patch(api, claim, json!({ "metadata": { "labels": labels } })).await? {
            Some(stored) => stored,
            None => return Ok(Action::requeue(WAIT_POLL)),
        }
    };
    let mut list = claim.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    conditions::set(
        &mut list,
        conditions::LAUNCHED,
        ConditionStatus::True,
        "Launched",
        "",
        claim.metadata.generation,
        &Time(now),
    );
    let mut status = json!({
        "providerID": instance.provider_id,
        "imageID": instance.image_id.clone().or_else(|| {
            request.options.iter().find(|o| o.name == instance.instance_type).map(|o| o.image_id.clone())
        }),
        "conditions": list,
    });
    if let Some(t) = instance_type {
        status["capacity"] = json!(resource_list(&t.capacity));
        status["allocatable"] = json!(resource_list(&t.allocatable));
    }
    if writes::patch_status(api, &launched, json!({ "status": status })).await?.is_none() {
        return Ok(Action::requeue(WAIT_POLL));
    }
    tracing::info!(
        nodeclaim = %name,
        provider_id = %instance.provider_id,
        instance_type = %instance.instance_type,
        zone = instance.zone.as_deref().unwrap_or(""),
        capacity_type = instance.capacity_type.as_str(),
        "launched nodeclaim"
    );
    let ev =
        events::launched(&instance.instance_type, instance.zone.as_deref(), instance.capacity_type.as_str());
    shared.events.on_claim(claim, ev).await;
    Ok(Action::requeue(WAIT_POLL))
}
