//! Status conditions (`metav1.Condition` shape) and the condition types the project sets.
//!
//! Helpers are pure: the caller passes `now`, so controllers stay testable and the transition time only
//! moves when the status really changes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// NodeClaim lifecycle (upstream core `pkg/apis/v1/nodeclaim_status.go`).
pub const LAUNCHED: &str = "Launched";
pub const REGISTERED: &str = "Registered";
pub const INITIALIZED: &str = "Initialized";
pub const DRIFTED: &str = "Drifted";
pub const CONSOLIDATABLE: &str = "Consolidatable";
pub const DISRUPTION_REASON: &str = "DisruptionReason";
pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
pub const READY: &str = "Ready";

// NodePool (upstream core `pkg/apis/v1/nodepool_status.go`).
pub const NODE_CLASS_READY: &str = "NodeClassReady";
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";

// AKSNodeClass (upstream provider `aksnodeclass_status.go`).
pub const IMAGES_READY: &str = "ImagesReady";
pub const KUBERNETES_VERSION_READY: &str = "KubernetesVersionReady";
pub const SUBNETS_READY: &str = "SubnetsReady";
/// Ours: written only while the controller's Azure credentials keep failing.
pub const CREDENTIALS_READY: &str = "CredentialsReady";

/// The status of a condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// One observation of an object's state, as `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition type, e.g. Launched or Ready.
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    pub type_: String,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// The generation of the object this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When the status last changed.
    pub last_transition_time: Time,
    /// A CamelCase reason for the last transition.
    #[schemars(length(min = 1, max = 1024))]
    pub reason: String,
    /// A human-readable message about the transition.
    #[serde(default)]
    #[schemars(length(max = 32768))]
    pub message: String,
}

/// Finds a condition by type.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition exists and its status is True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == ConditionStatus::True)
}

/// Sets a condition, keeping its transition time unless the status changes. Returns whether
/// anything changed, so callers patch status only when needed.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: &Time,
) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            let changed = existing.status != status
                || existing.reason != reason
                || existing.message != message
                || existing.observed_generation != observed_generation;
            if existing.status != status {
                existing.last_transition_time = now.clone();
            }
            existing.status = status;
            existing.reason = reason.to_string();
            existing.message = message.to_string();
            existing.observed_generation = observed_generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_string(),
                status,
                observed_generation,
                last_transition_time: now.clone(),
                reason: reason.to_string(),
                message: message.to_string(),
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(s: &str) -> Time {
        serde_json::from_value(serde_json::Value::String(s.into())).unwrap()
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let t0 = time("2026-01-01T00:00:00Z");
        let t1 = time("2026-01-01T00:01:00Z");
        let mut conds = vec![];
        assert!(set(&mut conds, LAUNCHED, ConditionStatus::Unknown, "Launching", "", Some(1), &t0));
        assert!(set(&mut conds, LAUNCHED, ConditionStatus::Unknown, "Waiting", "", Some(1), &t1));
        assert_eq!(conds[0].last_transition_time, t0);
        assert!(set(&mut conds, LAUNCHED, ConditionStatus::True, "Launched", "", Some(1), &t1));
        assert_eq!(conds[0].last_transition_time, t1);
        assert!(!set(&mut conds, LAUNCHED, ConditionStatus::True, "Launched", "", Some(1), &t1));
        assert!(is_true(&conds, LAUNCHED));
        assert!(!is_true(&conds, REGISTERED));
    }
}
