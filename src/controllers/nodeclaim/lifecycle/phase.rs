//! Where a NodeClaim stands in its lifecycle, decided from the claim, what the index knows of its Node
//! and the time: the pure half of the lifecycle controller, so every timeout and transition is tested
//! without a cluster or a clock.
//!
//! Upstream core (`pkg/controllers/nodeclaim/lifecycle/controller.go`) runs launch, registration,
//! initialization and liveness as sub-reconcilers in that order; here [`phase`] names the one that acts
//! and the reconciler in `mod.rs` runs it. Liveness (`liveness.go`): a claim not launched within 5 minutes,
//! or launched but not registered within the registration timeout (15 minutes), is deleted.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::apis::common::Operator;
use crate::apis::conditions;
use crate::apis::NodeClaim;
use crate::controllers::node::drain::ANNOTATION_TERMINATION_TIMESTAMP;
use crate::model::labels::{
    FINALIZER_TERMINATION, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE,
};

/// Upstream liveness: a claim not launched within 5 minutes is deleted.
pub const LAUNCH_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Upstream liveness: a claim whose Node has not registered within 15 minutes is deleted.
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How often a claim waiting for its Node is looked at again (Node events also wake it), and how soon a
/// step refused as stale is looked at again.
pub const WAIT_POLL: Duration = Duration::from_secs(2);
/// A settled claim is still looked at now and then, so a missed event is not fatal.
pub const RESYNC: Duration = Duration::from_secs(5 * 60);

/// The liveness timeouts a claim is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub launch: Duration,
    /// From the claim's creation; `KARPENTER_REGISTRATION_TIMEOUT` shortens it in tests.
    pub registration: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts { launch: LAUNCH_TIMEOUT, registration: REGISTRATION_TIMEOUT }
    }
}

/// The step a claim needs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Being deleted: drain its Node, delete the VM, the Node and our finalizer.
    Terminating,
    /// Being deleted, without our finalizer: nothing of ours left to do.
    Released,
    /// Our finalizer goes on before any cloud call, so a VM is never created for a claim that could
    /// vanish without cleaning it up.
    AddFinalizer,
    /// No VM yet: create one.
    Launch,
    /// No VM after the launch timeout (liveness).
    LaunchTimedOut { timeout: Duration },
    /// A VM, and no registered Node yet: find the Node with its providerID.
    Register { provider_id: String },
    /// A VM whose Node did not register within the registration timeout (liveness).
    RegistrationTimedOut { timeout: Duration },
    /// Its Node is being deleted by someone else: the claim (and so its VM) follows.
    NodeDeleted { provider_id: String },
    /// Registered: wait until the Node is Ready and its startup taints are gone.
    Initialize,
    /// Initialized: nothing to do until something changes.
    Settled,
}

/// The phase of `claim` at `now`. `node_deleting` is whether the index holds the claim's Node
/// (`status.nodeName`) as being deleted (None when it holds no such Node).
pub fn phase(claim: &NodeClaim, node_deleting: Option<bool>, now: Timestamp, timeouts: &Timeouts) -> Phase {
    phase_at_age(claim, node_deleting, age(claim, now), timeouts)
}

/// [`phase`] for a claim `age` old (the controller passes an age guarded against clock skew,
/// `controllers::observed`).
pub fn phase_at_age(
    claim: &NodeClaim,
    node_deleting: Option<bool>,
    age: Duration,
    timeouts: &Timeouts,
) -> Phase {
    let has_finalizer = claim.finalizers().iter().any(|f| f == FINALIZER_TERMINATION);
    if claim.metadata.deletion_timestamp.is_some() {
        return if has_finalizer { Phase::Terminating } else { Phase::Released };
    }
    if !has_finalizer {
        return Phase::AddFinalizer;
    }
    let Some(provider_id) = provider_id(claim).map(str::to_owned) else {
        if age > timeouts.launch {
            return Phase::LaunchTimedOut { timeout: timeouts.launch };
        }
        return Phase::Launch;
    };
    let no_conditions = Vec::new();
    let claim_conditions = claim.status.as_ref().map_or(&no_conditions, |s| &s.conditions);
    if !conditions::is_true(claim_conditions, conditions::REGISTERED) {
        if age > timeouts.registration {
            return Phase::RegistrationTimedOut { timeout: timeouts.registration };
        }
        return Phase::Register { provider_id };
    }
    if node_deleting == Some(true) {
        return Phase::NodeDeleted { provider_id };
    }
    if !conditions::is_true(claim_conditions, conditions::INITIALIZED) {
        return Phase::Initialize;
    }
    Phase::Settled
}

/// The labels a registered claim keeps in the store: the termination and disruption metrics' labels
/// (`crate::controllers::metrics`), and its size.
const LABELS_KEPT_WHEN_REGISTERED: [&str; 4] =
    [LABEL_NODEPOOL, LABEL_CAPACITY_TYPE, LABEL_ZONE, LABEL_INSTANCE_TYPE];

/// The annotations a registered claim keeps in the store: the deadline node repair sets, which the
/// drain reads (`crate::controllers::node::drain::termination_deadline`).
const ANNOTATIONS_KEPT_WHEN_REGISTERED: [&str; 1] = [ANNOTATION_TERMINATION_TIMESTAMP];

/// What the lifecycle controller's store keeps of a claim, which it holds for every claim while it
/// runs. No step reads `managedFields` (a JSON tree per field manager). Nor does any step read the
/// instance-type options (up to 60 sizes) once the claim has launched: the launch was their one reader,
/// and the size it got is the claim's instance-type label. So a launched claim keeps that size only.
/// Once registered (a condition that stays true), a claim's labels, annotations and requirements have
/// had their last reader (the registration, which copies them onto the Node), as have the capacity
/// and allocatable the launch wrote: the steps after it read the conditions, the Node's name, the
/// providerID, the startup taints, the requested resources, the termination grace period and the
/// termination deadline annotation ([`ANNOTATIONS_KEPT_WHEN_REGISTERED`]), and the termination
/// metrics read the labels of [`LABELS_KEPT_WHEN_REGISTERED`]. So a registered claim keeps those, and
/// none of the rest.
pub fn trim_for_store(claim: &mut NodeClaim) {
    claim.metadata.managed_fields = None;
    let registered =
        claim.status.as_ref().is_some_and(|s| conditions::is_true(&s.conditions, conditions::REGISTERED));
    if registered {
        if let Some(labels) = claim.metadata.labels.as_mut() {
            labels.retain(|key, _| LABELS_KEPT_WHEN_REGISTERED.contains(&key.as_str()));
        }
        if let Some(annotations) = claim.metadata.annotations.as_mut() {
            annotations.retain(|key, _| ANNOTATIONS_KEPT_WHEN_REGISTERED.contains(&key.as_str()));
        }
        claim.spec.requirements = Vec::new();
        if let Some(status) = claim.status.as_mut() {
            status.capacity.clear();
            status.allocatable.clear();
        }
        return;
    }
    let launched = provider_id(claim).is_some();
    let size = claim.metadata.labels.as_ref().and_then(|l| l.get(LABEL_INSTANCE_TYPE)).cloned();
    let (true, Some(size)) = (launched, size) else { return };
    let options = claim.spec.requirements.iter_mut();
    for r in options.filter(|r| r.key == LABEL_INSTANCE_TYPE && r.operator == Operator::In) {
        r.values.retain(|v| *v == size);
        r.values.shrink_to_fit();
    }
}

/// The claim's providerID once it has launched (`status.providerID` set and not empty).
fn provider_id(claim: &NodeClaim) -> Option<&str> {
    claim.status.as_ref().and_then(|s| s.provider_id.as_deref()).filter(|id| !id.is_empty())
}

/// How long ago the claim was created (zero when it has no creation time, or one in the future).
pub fn age(claim: &NodeClaim, now: Timestamp) -> Duration {
    let created = claim.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
    Duration::from_secs(now.as_second().saturating_sub(created.as_second()).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::apis::conditions::ConditionStatus;

    const PROVIDER_ID: &str =
        "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/aks-a";

    fn created_at() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    fn at(seconds: i64) -> Timestamp {
        created_at() + std::time::Duration::from_secs(seconds as u64)
    }

    /// A claim created at [`created_at`], with our finalizer.
    fn claim() -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": { "name": "a", "finalizers": [FINALIZER_TERMINATION] },
            "spec": { "nodeClassRef": { "group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default" },
                      "requirements": [] },
        }))
        .unwrap();
        claim.metadata.creation_timestamp = Some(Time(created_at()));
        claim
    }

    fn launched(mut claim: NodeClaim) -> NodeClaim {
        claim.status.get_or_insert_with(Default::default).provider_id = Some(PROVIDER_ID.into());
        claim
    }

    fn with_condition(mut claim: NodeClaim, type_: &str) -> NodeClaim {
        let status = claim.status.get_or_insert_with(Default::default);
        let t = Time(created_at());
        conditions::set(&mut status.conditions, type_, ConditionStatus::True, type_, "", None, &t);
        claim
    }

    fn registered(claim: NodeClaim) -> NodeClaim {
        with_condition(launched(claim), conditions::REGISTERED)
    }

    fn initialized(claim: NodeClaim) -> NodeClaim {
        with_condition(registered(claim), conditions::INITIALIZED)
    }

    #[test]
    fn the_store_keeps_a_launched_claims_size_only() {
        let options = serde_json::json!([
            { "key": LABEL_INSTANCE_TYPE, "operator": "In", "values": ["Standard_D2s_v5", "Standard_D4s_v5"] },
            { "key": "topology.kubernetes.io/zone", "operator": "In", "values": ["westus2-1", "westus2-2"] },
        ]);
        let mut fresh = claim();
        fresh.spec.requirements = serde_json::from_value(options).unwrap();
        fresh.metadata.managed_fields = Some(vec![Default::default()]);
        // Not launched: the launch still reads every option.
        let mut kept = fresh.clone();
        trim_for_store(&mut kept);
        assert_eq!(kept.metadata.managed_fields, None);
        assert_eq!(kept.spec.requirements, fresh.spec.requirements);
        // Launched, with the size it got as a label: that size is the one option left; other keys stay.
        let mut got = launched(fresh.clone());
        got.labels_mut().insert(LABEL_INSTANCE_TYPE.into(), "Standard_D4s_v5".into());
        let before = got.spec.requirements.clone();
        trim_for_store(&mut got);
        assert_eq!(got.spec.requirements[0].values, ["Standard_D4s_v5"]);
        assert_eq!(got.spec.requirements[1], before[1]);
        // Launched, but no label says which size: nothing is cut.
        let mut unlabelled = launched(fresh);
        trim_for_store(&mut unlabelled);
        assert_eq!(unlabelled.spec.requirements, before);
    }

    #[test]
    fn a_registered_claim_keeps_what_the_steps_after_registration_read() {
        let mut fresh = claim();
        fresh.spec.requirements = serde_json::from_value(serde_json::json!([
            { "key": LABEL_INSTANCE_TYPE, "operator": "In", "values": ["Standard_D2s_v5", "Standard_D4s_v5"] },
        ]))
        .unwrap();
        fresh.spec.termination_grace_period = Some("1h".into());
        for (key, value) in [
            (LABEL_NODEPOOL, "general"),
            (LABEL_CAPACITY_TYPE, "spot"),
            (LABEL_ZONE, "westus2-1"),
            (LABEL_INSTANCE_TYPE, "Standard_D2s_v5"),
            ("kubernetes.azure.com/mode", "user"),
            ("team", "web"),
        ] {
            fresh.labels_mut().insert(key.into(), value.into());
        }
        fresh.annotations_mut().insert("karpenter.sh/nodepool-hash".into(), "123".into());
        let status = launched(fresh.clone()).status.unwrap_or_default();
        fresh.status = Some(crate::apis::nodeclaim::NodeClaimStatus {
            node_name: Some("aks-general-abcde".into()),
            capacity: [("cpu".to_string(), crate::apis::common::Quantity("2".into()))].into(),
            ..status
        });
        // Launched, not registered: the registration still copies every label and annotation.
        let mut unregistered = fresh.clone();
        trim_for_store(&mut unregistered);
        assert_eq!(unregistered.labels(), fresh.labels());
        assert_eq!(unregistered.annotations(), fresh.annotations());
        // Registered: the metrics' labels and the size stay; what only the launch and the
        // registration read goes.
        let mut done = registered(fresh.clone());
        trim_for_store(&mut done);
        let kept: Vec<&str> = done.labels().keys().map(String::as_str).collect();
        assert_eq!(kept, [LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_INSTANCE_TYPE, LABEL_ZONE]);
        assert!(done.annotations().is_empty());
        // Node repair's deadline stays: the drain reads it.
        let mut repaired = registered(fresh.clone());
        let deadline = "2026-01-01T00:10:00Z";
        repaired.annotations_mut().insert(ANNOTATION_TERMINATION_TIMESTAMP.into(), deadline.into());
        trim_for_store(&mut repaired);
        let kept: Vec<(&str, &str)> =
            repaired.annotations().iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(kept, [(ANNOTATION_TERMINATION_TIMESTAMP, deadline)]);
        assert_eq!(
            crate::controllers::node::drain::termination_deadline(&repaired).unwrap(),
            Some(deadline.parse().unwrap())
        );
        assert!(done.spec.requirements.is_empty());
        let status = done.status.as_ref().unwrap();
        assert!(status.capacity.is_empty() && status.allocatable.is_empty());
        // What the later steps read stays.
        assert_eq!(status.node_name.as_deref(), Some("aks-general-abcde"));
        assert_eq!(provider_id(&done), Some(PROVIDER_ID));
        assert_eq!(done.spec.termination_grace_period.as_deref(), Some("1h"));
        let timeouts = Timeouts::default();
        assert_eq!(phase_at_age(&done, None, Duration::from_secs(60), &timeouts), Phase::Initialize);
    }

    #[test]
    fn each_state_of_a_claim_has_its_phase() {
        let timeouts = Timeouts::default();
        let registration = Phase::Register { provider_id: PROVIDER_ID.into() };
        let no_finalizer = {
            let mut c = claim();
            c.metadata.finalizers = None;
            c
        };
        let deleting = |mut c: NodeClaim| {
            c.metadata.deletion_timestamp = Some(Time(at(1)));
            c
        };
        let cases: Vec<(&str, NodeClaim, Option<bool>, i64, Phase)> = vec![
            ("new, no finalizer", no_finalizer.clone(), None, 0, Phase::AddFinalizer),
            ("new, finalizer", claim(), None, 0, Phase::Launch),
            ("not launched at the launch timeout", claim(), None, 300, Phase::Launch),
            ("not launched past it", claim(), None, 301, Phase::LaunchTimedOut { timeout: LAUNCH_TIMEOUT }),
            ("launched, no Node", launched(claim()), None, 60, registration.clone()),
            ("launched, at the registration timeout", launched(claim()), None, 900, registration.clone()),
            (
                "launched, past the registration timeout",
                launched(claim()),
                None,
                901,
                Phase::RegistrationTimedOut { timeout: REGISTRATION_TIMEOUT },
            ),
            (
                "registered long ago, not initialized",
                registered(claim()),
                Some(false),
                5000,
                Phase::Initialize,
            ),
            ("initialized", initialized(claim()), Some(false), 5000, Phase::Settled),
            (
                "registered, its Node being deleted",
                registered(claim()),
                Some(true),
                10,
                Phase::NodeDeleted { provider_id: PROVIDER_ID.into() },
            ),
            (
                "initialized, its Node being deleted",
                initialized(claim()),
                Some(true),
                10,
                Phase::NodeDeleted { provider_id: PROVIDER_ID.into() },
            ),
            // The index does not hold the Node (yet, or any more): nothing to follow.
            ("initialized, Node not in the index", initialized(claim()), None, 10, Phase::Settled),
            ("deleting", deleting(launched(claim())), None, 10, Phase::Terminating),
            (
                "deleting, not launched, past every timeout",
                deleting(claim()),
                None,
                99_999,
                Phase::Terminating,
            ),
            ("deleting, finalizer gone", deleting(no_finalizer), None, 10, Phase::Released),
        ];
        for (name, claim, node_deleting, seconds, want) in cases {
            assert_eq!(phase(&claim, node_deleting, at(seconds), &timeouts), want, "{name}");
        }
    }

    #[test]
    fn an_empty_provider_id_is_not_launched() {
        let mut c = claim();
        c.status.get_or_insert_with(Default::default).provider_id = Some(String::new());
        assert_eq!(phase(&c, None, at(1), &Timeouts::default()), Phase::Launch);
    }

    #[test]
    fn the_registration_timeout_is_a_setting() {
        let short = Timeouts { registration: Duration::from_secs(25), ..Timeouts::default() };
        let c = launched(claim());
        assert_eq!(phase(&c, None, at(25), &short), Phase::Register { provider_id: PROVIDER_ID.into() });
        assert_eq!(
            phase(&c, None, at(26), &short),
            Phase::RegistrationTimedOut { timeout: Duration::from_secs(25) }
        );
    }

    #[test]
    fn age_counts_from_creation_and_never_goes_negative() {
        let c = claim();
        assert_eq!(age(&c, at(90)), Duration::from_secs(90));
        assert_eq!(age(&c, created_at() - std::time::Duration::from_secs(5)), Duration::ZERO);
        let mut unborn = claim();
        unborn.metadata.creation_timestamp = None;
        assert_eq!(age(&unborn, at(1000)), Duration::ZERO);
    }
}
