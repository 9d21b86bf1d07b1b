//! Garbage collection (upstream azure `nodeclaim/garbagecollection` and core `nodeclaim/garbagecollection`).
//!
//! Every [`Settings::gc_interval`](crate::controllers::Settings) (2 minutes in production) one sweep:
//! - VMs tagged for this cluster that no NodeClaim owns (neither by providerID nor by the name
//!   `aks-<claim>`) and that are older than [`Settings::gc_grace`](crate::controllers::Settings) (5 minutes) are deleted
//!   with their NIC, and so is a Node with their providerID that no NodeClaim owns;
//! - NICs `aks-<x>` tagged for this cluster with no VM `aks-<x>` and no NodeClaim `<x>` are deleted once
//!   they were found orphaned by two sweeps in a row (a NIC has no creation time; the second look covers a
//!   launch whose NodeClaim the index has not seen yet);
//! - NodeClaims that launched (have a providerID) but whose VM is gone (`CloudProvider::get` says
//!   NotFound) are deleted, so their pods are provisioned again. This does not wait for the Node to go
//!   NotReady (upstream core does), so an evicted spot VM is replaced within one sweep; a spot claim counts
//!   as `karpenter_nodeclaims_disrupted_total{reason="interruption"}`, any other as `garbage_collected`.
//!
//! A delete that fails (a throttled call, a NIC Network still reserves for a refused create) is logged
//! and tried again at the next sweep; it stops nothing else in this one. A NodeClaim the index cannot
//! read (set aside, see `controllers::watch`) keeps its VM and NIC. Nothing happens until the
//! index is synced. The decision is [`decide`], pure over plain lists and `now`.
//!
//! Tests shorten the interval and grace period with the hidden environment variables
//! `KARPENTER_GC_INTERVAL` and `KARPENTER_GC_GRACE_PERIOD` (read in `start`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::Event;
use kube::{Api, ResourceExt};

use crate::apis::NodeClaim;
use crate::cloud::{CloudError, CloudProvider, Instance};
use crate::controllers::writes::{self, Deleted, Guard};
use crate::controllers::{events, metrics, ControllerError, Shared};
use crate::model::labels::{CAPACITY_TYPE_SPOT, LABEL_CAPACITY_TYPE};
use crate::operator::metrics::{controller, in_controller};
use crate::state::Kind;

/// Upstream's instance GC period.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2 * 60);
/// Upstream's minimum age of an instance before it may be collected.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5 * 60);
/// `karpenter_nodeclaims_disrupted_total` reasons of a claim whose VM is gone.
pub const REASON_INTERRUPTION: &str = "interruption";
pub const REASON_GARBAGE_COLLECTED: &str = "garbage_collected";

/// What GC needs to know of one NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimView {
    pub name: String,
    pub provider_id: Option<String>,
    pub deleting: bool,
}

/// What one sweep should do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// Orphaned VMs old enough to delete (with their NIC).
    pub vms: Vec<Instance>,
    /// NICs with neither a VM nor a NodeClaim (deleted once orphaned in two sweeps in a row).
    pub nics: Vec<String>,
    /// Launched NodeClaims whose VM is not in the list: (claim, providerID), to confirm with a GET.
    pub claims: Vec<(String, String)>,
}

/// The pure GC decision over the index's NodeClaims, the cluster's VMs and NIC names, at `now`.
/// `claim_of` names the NodeClaim a VM or NIC was made for, from its name
/// ([`CloudProvider::claim_of_resource`]); `seen_for` says how long this process has seen a VM (by
/// name): a VM is old enough to collect only when both its `timeCreated` and that say so, so a
/// controller clock running fast cannot collect a VM whose claim is still on its way.
pub fn decide(
    claims: &[ClaimView],
    vms: &[Instance],
    nics: &[String],
    claim_of: &dyn Fn(&str) -> Option<String>,
    seen_for: &dyn Fn(&str) -> Duration,
    now: Timestamp,
    grace: Duration,
) -> Decision {
    let has_claim_named = |name: &str| claims.iter().any(|c| c.name.eq_ignore_ascii_case(name));
    let owned_by_id = |id: &str| {
        claims.iter().any(|c| c.provider_id.as_deref().is_some_and(|p| p.eq_ignore_ascii_case(id)))
    };
    let old_enough = |vm: &Instance| {
        let Some(created) = vm.created.as_deref().and_then(|t| t.parse::<Timestamp>().ok()) else {
            return false;
        };
        let age = now.as_millisecond().saturating_sub(created.as_millisecond());
        age >= 0 && Duration::from_millis(age as u64).min(seen_for(&vm.name)) >= grace
    };
    let orphan_vms: Vec<Instance> = vms
        .iter()
        .filter(|vm| !owned_by_id(&vm.provider_id))
        .filter(|vm| !claim_of(&vm.name).is_some_and(|claim| has_claim_named(&claim)))
        .filter(|vm| !vm.state.eq_ignore_ascii_case("Deleting"))
        .filter(|vm| old_enough(vm))
        .cloned()
        .collect();
    let orphan_nics: Vec<String> = nics
        .iter()
        .filter(|nic| {
            let Some(claim) = claim_of(nic) else { return false };
            !has_claim_named(&claim) && !vms.iter().any(|vm| vm.name.eq_ignore_ascii_case(nic))
        })
        .cloned()
        .collect();
    let missing: Vec<(String, String)> = claims
        .iter()
        .filter(|c| !c.deleting)
        .filter_map(|c| Some((c, c.provider_id.as_deref().filter(|p| !p.is_empty())?)))
        .filter(|(_, id)| !vms.iter().any(|vm| vm.provider_id.eq_ignore_ascii_case(id)))
        .map(|(c, id)| (c.name.clone(), id.to_string()))
        .collect();
    Decision { vms: orphan_vms, nics: orphan_nics, claims: missing }
}

/// Runs a sweep every `gc_interval` until the task is stopped.
pub async fn run<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    in_controller(controller::NODECLAIM_GC, sweep_forever(shared)).await;
}

async fn sweep_forever<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    // The first sweep runs as soon as the index is synced, then every interval.
    while !shared.cluster().synced() {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut ticker = tokio::time::interval(shared.settings.gc_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // NICs found orphaned by the previous sweep.
    let mut suspects = BTreeSet::new();
    loop {
        ticker.tick().await;
        let mut in_flight = shared.begin_work(crate::operator::metrics::controller::NODECLAIM_GC).await;
        match in_flight.result(sweep(&shared, &suspects).await) {
            Ok(next) => suspects = next,
            Err(error) => {
                tracing::warn!(category = error.category(), %error, "garbage collection failed");
            }
        }
    }
}

/// One sweep; returns the NICs found orphaned this time.
async fn sweep<C: CloudProvider + 'static>(
    shared: &Shared<C>,
    suspects: &BTreeSet<String>,
) -> Result<BTreeSet<String>, ControllerError> {
    // The index first, then the cloud: a VM listed after the snapshot was taken is either older than the
    // snapshot's claims or protected by the grace period and its claim's name.
    let claims: Vec<ClaimView> = {
        let cluster = shared.cluster();
        if !cluster.synced() {
            tracing::debug!("garbage collection skipped: the index is not synced");
            return Ok(suspects.clone());
        }
        // A claim the index cannot read still owns its VM (by name): it is never collected.
        let unreadable = cluster
            .invalid()
            .filter(|(kind, _, _)| *kind == Kind::NodeClaim)
            .map(|(_, name, _)| ClaimView { name: name.to_string(), provider_id: None, deleting: false });
        cluster
            .nodeclaims()
            .map(|c| ClaimView {
                name: c.name.clone(),
                provider_id: c.provider_id.clone(),
                deleting: c.deleting,
            })
            .chain(unreadable)
            .collect()
    };
    let vms = shared.cloud.list().await?;
    let nics = shared.cloud.list_nics().await?;
    let claim_of = |name: &str| shared.cloud.claim_of_resource(name);
    let seen_at = std::time::Instant::now();
    let seen_for = |name: &str| shared.first_seen.age(&format!("VM/{name}"), seen_at);
    let grace = shared.settings.gc_grace;
    let decision = decide(&claims, &vms, &nics, &claim_of, &seen_for, Timestamp::now(), grace);
    // What is gone is forgotten: VMs not listed, NodeClaims not in the index.
    let listed: BTreeSet<String> = vms.iter().map(|vm| format!("VM/{}", vm.name)).collect();
    let live_claims: BTreeSet<String> = {
        let cluster = shared.cluster();
        cluster.nodeclaims().filter_map(|c| c.uid.as_ref()).map(|uid| format!("NodeClaim/{uid}")).collect()
    };
    shared.first_seen.retain(|key| match key.split_once('/') {
        Some(("VM", _)) => listed.contains(key),
        Some(("NodeClaim", _)) => live_claims.contains(key),
        _ => true,
    });

    let collected = collect_orphans(&*shared.cloud, &decision, suspects).await;
    for provider_id in &collected.vms {
        if let Err(error) = delete_orphan_nodes(shared, provider_id).await {
            failed("deleting the Node of an orphan VM", provider_id, &error);
        }
    }
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    for (claim, provider_id) in decision.claims {
        match shared.cloud.get(&provider_id).await {
            Err(CloudError::NotFound(_)) => {}
            Ok(_) => continue,
            Err(error) => {
                failed("confirming a NodeClaim's VM is gone", &claim, &error.into());
                continue;
            }
        }
        // The lifecycle may have deleted it meanwhile (its Node went with the VM); count it once.
        let uid = match shared.cluster().nodeclaim(&claim) {
            Some(c) if !c.deleting => c.uid.clone(),
            _ => continue,
        };
        tracing::info!(nodeclaim = %claim, %provider_id, "garbage collecting NodeClaim whose VM is gone");
        let deleted = match writes::delete_named(&api, &claim, &Guard::uid(uid), None).await {
            Ok(deleted) => deleted,
            Err(error) => {
                failed("deleting a NodeClaim whose VM is gone", &claim, &error.into());
                continue;
            }
        };
        match deleted {
            (Deleted::Now, deleting) => {
                // With our finalizer the API returns the object (now deleting), whose UID the event wants
                // and whose labels the metric takes. Without it (not ours to finalize) there is neither.
                let (reference, event) = match deleting {
                    Some(object) => {
                        let (reason, event) = vanished(&object, &provider_id);
                        metrics::nodeclaim_disrupted(metrics::get(), &object, reason);
                        (kube::Resource::object_ref(&object, &()), event)
                    }
                    None => (events::nodeclaim_ref(&claim), events::garbage_collected(&provider_id)),
                };
                shared.events.publish(event, reference).await;
            }
            (Deleted::Gone | Deleted::Stale, _) => {}
        }
    }
    Ok(collected.suspects)
}

/// What the cloud side of a sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
struct Collected {
    /// The providerIDs of the orphan VMs deleted (with their NICs).
    vms: Vec<String>,
    /// The NICs (lower-cased) to delete at the next sweep: found orphaned for the first time, or
    /// orphaned twice but refused this time.
    suspects: BTreeSet<String>,
}

/// Deletes the orphan VMs and the NICs found orphaned by this sweep and the one before. A delete that
/// fails is logged and tried again by the next sweep; it stops nothing else.
async fn collect_orphans<C: CloudProvider>(
    cloud: &C,
    decision: &Decision,
    suspects: &BTreeSet<String>,
) -> Collected {
    let mut collected = Collected::default();
    for vm in &decision.vms {
        tracing::info!(vm = %vm.name, provider_id = %vm.provider_id, created = vm.created.as_deref().unwrap_or(""), "garbage collecting VM without a NodeClaim");
        match cloud.delete(&vm.provider_id).await {
            Ok(()) => collected.vms.push(vm.provider_id.clone()),
            Err(error) => failed("deleting an orphan VM", &vm.name, &error.into()),
        }
    }
    // An orphan VM's NIC goes with it, or is an orphan NIC of the next sweep.
    let vm_names: BTreeSet<String> = decision.vms.iter().map(|vm| vm.name.to_ascii_lowercase()).collect();
    for nic in &decision.nics {
        let key = nic.to_ascii_lowercase();
        if vm_names.contains(&key) {
            continue;
        }
        if !suspects.contains(&key) {
            collected.suspects.insert(key);
            continue;
        }
        tracing::info!(nic = %nic, "garbage collecting NIC without a VM or NodeClaim");
        if let Err(error) = cloud.delete_nic(nic).await {
            // Still an orphan: the next sweep tries again without a second look (the NIC of a refused
            // create stays reserved for 180 s after it, `NicReservedForAnotherVm`).
            failed("deleting an orphan NIC", nic, &error.into());
            collected.suspects.insert(key);
        }
    }
    collected
}

/// One step of a sweep that failed: logged, and tried again by the next sweep.
fn failed(what: &str, name: &str, error: &ControllerError) {
    tracing::warn!(name, category = error.category(), %error, "garbage collection: {what} failed; the next sweep retries");
}

/// Why a launched claim whose VM is gone is deleted, and the event that says so: Azure evicts spot VMs
/// (eviction policy Delete), so a spot claim was interrupted (upstream's `interruption`, the reason the
/// AWS provider's interruption controller gives); any other was lost (`garbage_collected`).
pub fn vanished(claim: &NodeClaim, provider_id: &str) -> (&'static str, Event) {
    let spot = claim.labels().get(LABEL_CAPACITY_TYPE).is_some_and(|c| c == CAPACITY_TYPE_SPOT);
    if spot {
        (REASON_INTERRUPTION, events::interrupted(provider_id))
    } else {
        (REASON_GARBAGE_COLLECTED, events::garbage_collected(provider_id))
    }
}

/// Deletes Nodes with this providerID that no NodeClaim owns (a NodeClaim's Node goes with its claim).
async fn delete_orphan_nodes<C>(shared: &Shared<C>, provider_id: &str) -> Result<(), ControllerError> {
    let orphans: Vec<(String, Guard)> = {
        let cluster = shared.cluster();
        cluster
            .nodes()
            .filter(|(n, claim)| {
                claim.is_none()
                    && n.provider_id.as_deref().is_some_and(|p| p.eq_ignore_ascii_case(provider_id))
            })
            .map(|(n, _)| (n.name().to_string(), Guard::uid(n.uid.clone())))
            .collect()
    };
    let nodes: Api<Node> = Api::all(shared.client.clone());
    for (name, guard) in orphans {
        tracing::info!(node = %name, %provider_id, "deleting the Node of a garbage-collected VM");
        writes::delete_named(&nodes, &name, &guard, None).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::fake::FakeCloud;
    use crate::model::CapacityType;

    /// The provider ID of the fake cloud's VM `name`, as the Azure provider forms it.
    fn provider_id(name: &str) -> String {
        format!("azure:///subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachines/{name}")
    }

    /// [`decide`] with the fake cloud's names (`aks-<claim>`, as Azure's).
    fn decide(
        claims: &[ClaimView],
        vms: &[Instance],
        nics: &[String],
        now: Timestamp,
        grace: Duration,
    ) -> Decision {
        let cloud = FakeCloud::new();
        let long_seen = |_: &str| Duration::MAX;
        super::decide(claims, vms, nics, &|name| cloud.claim_of_resource(name), &long_seen, now, grace)
    }

    fn now() -> Timestamp {
        "2025-01-01T12:00:00Z".parse().unwrap()
    }

    fn vm(claim: &str, created: Option<&str>, state: &str) -> Instance {
        let name = format!("aks-{claim}");
        Instance {
            provider_id: provider_id(&name),
            name,
            instance_type: "Standard_D2s_v5".into(),
            zone: None,
            capacity_type: CapacityType::OnDemand,
            nodepool: Some("default".into()),
            image_id: None,
            state: state.into(),
            created: created.map(str::to_string),
            tags: Default::default(),
        }
    }

    fn claim(name: &str, provider_id: Option<String>) -> ClaimView {
        ClaimView { name: name.into(), provider_id, deleting: false }
    }

    const OLD: Option<&str> = Some("2025-01-01T11:50:00Z");
    const NEW: Option<&str> = Some("2025-01-01T11:58:00Z");
    const GRACE: Duration = DEFAULT_GRACE;

    #[test]
    fn orphan_vms_older_than_the_grace_period_are_collected() {
        let vms = vec![
            vm("gone", OLD, "Succeeded"),
            vm("young", NEW, "Succeeded"),
            vm("nodate", None, "Succeeded"),
        ];
        let d = decide(&[], &vms, &[], now(), GRACE);
        assert_eq!(d.vms.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(), ["aks-gone"]);
        // Exactly at the grace period counts as old enough.
        let at = vec![vm("at", Some("2025-01-01T11:55:00Z"), "Succeeded")];
        assert_eq!(decide(&[], &at, &[], now(), GRACE).vms.len(), 1);
    }

    #[test]
    fn a_vm_is_old_enough_only_once_this_process_has_also_seen_it_for_the_grace_period() {
        // timeCreated says 10 minutes (a controller clock running fast), but it was first listed a
        // minute ago: its claim may still be on its way.
        let vms = vec![vm("young", OLD, "Succeeded")];
        let cloud = FakeCloud::new();
        let claim_of = |name: &str| cloud.claim_of_resource(name);
        let seen_for = |_: &str| Duration::from_secs(60);
        assert!(super::decide(&[], &vms, &[], &claim_of, &seen_for, now(), GRACE).vms.is_empty());
        let seen_long = |_: &str| GRACE;
        assert_eq!(super::decide(&[], &vms, &[], &claim_of, &seen_long, now(), GRACE).vms.len(), 1);
    }

    #[test]
    fn vms_owned_by_id_or_by_name_are_kept_and_deleting_ones_skipped() {
        let by_id = vm("a", OLD, "Succeeded");
        let claims =
            vec![claim("other-name", Some(by_id.provider_id.to_ascii_uppercase())), claim("b", None)];
        let vms = vec![by_id, vm("b", OLD, "Creating"), vm("c", OLD, "Deleting")];
        let d = decide(&claims, &vms, &[], now(), GRACE);
        assert!(d.vms.is_empty(), "{d:?}");
    }

    #[test]
    fn nics_without_vm_or_claim_are_collected() {
        let nics: Vec<String> =
            ["aks-lonely", "aks-withvm", "aks-withclaim", "not-ours"].iter().map(|s| s.to_string()).collect();
        let d = decide(&[claim("withclaim", None)], &[vm("withvm", NEW, "Succeeded")], &nics, now(), GRACE);
        assert_eq!(d.nics, ["aks-lonely"]);
    }

    #[test]
    fn a_vanished_spot_vm_was_interrupted_any_other_was_lost() {
        let claim = |capacity_type: &str| -> NodeClaim {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "c", "labels": {"karpenter.sh/capacity-type": capacity_type}},
                "spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "d"},
                         "requirements": []}
            }))
            .unwrap()
        };
        let (reason, event) = vanished(&claim("spot"), "id");
        assert_eq!((reason, event.reason.as_str()), ("interruption", events::reason::INTERRUPTED));
        let (reason, event) = vanished(&claim("on-demand"), "id");
        assert_eq!((reason, event.reason.as_str()), ("garbage_collected", events::reason::GARBAGE_COLLECTED));
    }

    #[test]
    fn launched_claims_whose_vm_is_not_listed_are_candidates() {
        let alive = vm("alive", OLD, "Succeeded");
        let gone_id = provider_id("aks-gone");
        let mut deleting = claim("deleting", Some(provider_id("aks-deleting")));
        deleting.deleting = true;
        let claims = vec![
            claim("alive", Some(alive.provider_id.clone())),
            claim("gone", Some(gone_id.clone())),
            claim("pending", None),
            claim("empty", Some(String::new())),
            deleting,
        ];
        let d = decide(&claims, &[alive], &[], now(), GRACE);
        assert_eq!(d.claims, [("gone".to_string(), gone_id)]);
        assert!(d.vms.is_empty() && d.nics.is_empty());
    }

    #[tokio::test]
    async fn a_failed_delete_stops_nothing_else_and_is_tried_again_next_sweep() {
        let cloud = FakeCloud::new();
        let request = |claim: &str| {
            let option = crate::cloud::InstanceTypeOption {
                name: "Standard_D2s_v5".into(),
                family: None,
                vcpus: 2,
                accelerated_networking: false,
                ephemeral_os_disk: None,
                image_id: "image".into(),
                offerings: vec![crate::cloud::OfferingChoice {
                    zone: String::new(),
                    capacity_type: CapacityType::OnDemand,
                    price: 0.1,
                }],
            };
            crate::cloud::LaunchRequest::for_test(claim, "default", vec![option])
        };
        let stuck = cloud.create(&request("stuck")).await.unwrap();
        let gone = cloud.create(&request("gone")).await.unwrap();
        for nic in ["aks-reserved", "aks-free", "aks-new"] {
            cloud.add_nic(nic);
        }
        let reserved = CloudError::Transient("NicReservedForAnotherVm".into());
        cloud.refuse_delete("aks-stuck", Some(CloudError::Throttled("429".into())));
        cloud.refuse_delete("aks-reserved", Some(reserved));
        let decision = Decision {
            vms: vec![stuck.clone(), gone.clone()],
            nics: vec!["aks-reserved".into(), "aks-free".into(), "aks-new".into()],
            claims: vec![],
        };
        let suspects: BTreeSet<String> = ["aks-reserved".to_string(), "aks-free".to_string()].into();
        let collected = collect_orphans(&cloud, &decision, &suspects).await;
        assert_eq!(collected.vms, [gone.provider_id], "the refused VM delete did not stop the next");
        assert_eq!(cloud.instances(), [stuck], "the refused VM is still there for the next sweep");
        let left: BTreeSet<String> = cloud.list_nics().await.unwrap().into_iter().collect();
        assert_eq!(left, ["aks-new".to_string(), "aks-reserved".to_string()].into(), "the free NIC went");
        assert_eq!(
            collected.suspects,
            ["aks-new".to_string(), "aks-reserved".to_string()].into(),
            "the refused NIC is deleted at the next sweep without a new first look"
        );
        cloud.refuse_delete("aks-reserved", None);
        let next =
            Decision { vms: vec![], nics: vec!["aks-reserved".into(), "aks-new".into()], claims: vec![] };
        let collected = collect_orphans(&cloud, &next, &collected.suspects).await;
        assert!(collected.suspects.is_empty() && cloud.list_nics().await.unwrap().is_empty());
    }
}
