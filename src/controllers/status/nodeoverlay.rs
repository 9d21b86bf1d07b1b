//! NodeOverlay status: `ValidationSucceeded` and `Ready` (upstream core `pkg/apis/v1alpha1/
//! nodeoverlay_status.go`, written by `pkg/controllers/nodeoverlay/controller.go`). An overlay whose
//! requirements or capacity cannot be read is `False` with reason `RuntimeValidation`; one that
//! conflicts with an overlay of the same weight is `False` with reason `Conflict`. Either way it is
//! left out of every decision ([`crate::scheduling::overlay`]), so the condition says why it does
//! nothing. Written only with the `NodeOverlay` feature gate on, when the index holds overlays.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::NodeOverlay;
use crate::cloud::CloudProvider;
use crate::controllers::{ControllerError, Shared};
use crate::scheduling::overlay::Rejection;

/// Upstream's condition type (operatorpkg's Ready depends on it).
pub const VALIDATION_SUCCEEDED: &str = conditions::VALIDATION_SUCCEEDED;

/// Writes the conditions of every overlay whose stored status is not what the index now implies.
pub async fn sync<C: CloudProvider>(shared: &Shared<C>, now: &Time) -> Result<(), ControllerError> {
    let updates: Vec<(String, serde_json::Value)> = {
        let cluster = shared.cluster();
        let overlays: Vec<NodeOverlay> = cluster.node_overlays().cloned().collect();
        if overlays.is_empty() {
            return Ok(());
        }
        let pools: Vec<_> = cluster.ready_nodepools().collect();
        let rejected =
            cluster.overlaid_catalogs(&pools, &|_, class| shared.cloud.instance_types(class)).rejected;
        overlays
            .iter()
            .filter_map(|o| overlay_status(o, rejected.get(o.name()), now).map(|s| (o.name_any(), s)))
            .collect()
    };
    let api: Api<NodeOverlay> = Api::all(shared.client.clone());
    for (name, status) in updates {
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({ "status": status }))).await?;
        tracing::info!(nodeoverlay = %name, conditions = %status["conditions"], "updated nodeoverlay status");
    }
    Ok(())
}

/// The overlay's status given why it is left out (`None`: applied), or None when what is stored is
/// already right.
pub fn overlay_status(
    overlay: &NodeOverlay,
    rejection: Option<&Rejection>,
    now: &Time,
) -> Option<serde_json::Value> {
    let mut list = overlay.status.clone().unwrap_or_default().conditions;
    let generation = overlay.metadata.generation;
    let (status, reason, message) = match rejection {
        None => (ConditionStatus::True, VALIDATION_SUCCEEDED.to_string(), String::new()),
        Some(r) => (ConditionStatus::False, r.reason().to_string(), r.to_string()),
    };
    let mut changed =
        conditions::set(&mut list, VALIDATION_SUCCEEDED, status, &reason, &message, generation, now);
    let (ready_reason, ready_message) = match status {
        ConditionStatus::True => ("Ready".to_string(), String::new()),
        _ => ("UnhealthyDependents".to_string(), format!("{VALIDATION_SUCCEEDED}: {message}")),
    };
    changed |=
        conditions::set(&mut list, conditions::READY, status, &ready_reason, &ready_message, generation, now);
    changed.then(|| json!({ "conditions": list }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn overlay() -> NodeOverlay {
        serde_yaml::from_str(
            "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: o, generation: 3}\nspec:\n  price: '1'\n  requirements: []\n",
        )
        .unwrap()
    }

    fn condition(o: &NodeOverlay, type_: &str) -> (ConditionStatus, String, String) {
        let c = conditions::get(&o.status.as_ref().unwrap().conditions, type_).unwrap();
        (c.status, c.reason.clone(), c.message.clone())
    }

    #[test]
    fn conflicts_and_runtime_failures_are_false_with_upstreams_reasons_and_clear_again() {
        let now = Time(Timestamp::UNIX_EPOCH);
        let mut o = overlay();
        let apply = |o: &mut NodeOverlay, r: Option<&Rejection>| match overlay_status(o, r, &now) {
            Some(status) => {
                o.status = Some(serde_json::from_value(status).unwrap());
                true
            }
            None => false,
        };
        assert!(apply(&mut o, None));
        assert_eq!(condition(&o, VALIDATION_SUCCEEDED).0, ConditionStatus::True);
        assert_eq!(condition(&o, conditions::READY).0, ConditionStatus::True);
        assert!(!apply(&mut o, None), "nothing to write twice");
        assert!(apply(&mut o, Some(&Rejection::Conflict)));
        assert_eq!(
            condition(&o, VALIDATION_SUCCEEDED),
            (ConditionStatus::False, "Conflict".into(), "conflict with another overlay".into())
        );
        assert_eq!(condition(&o, conditions::READY).0, ConditionStatus::False);
        assert!(apply(
            &mut o,
            Some(&Rejection::Invalid("invalid capacity: cpu in resource, restricted".into()))
        ));
        assert_eq!(condition(&o, VALIDATION_SUCCEEDED).1, "RuntimeValidation");
        assert!(apply(&mut o, None));
        assert_eq!(condition(&o, conditions::READY).0, ConditionStatus::True);
    }
}
