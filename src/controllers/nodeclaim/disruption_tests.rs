use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::apis::hash;
use crate::model::labels::{ANNOTATION_NODEPOOL_HASH, ANNOTATION_NODEPOOL_HASH_VERSION};

const POOL: &str = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
      nodeClassRef: {name: default, group: karpenter.azure.com, kind: AKSNodeClass}
";

const CLASS: &str = "
apiVersion: karpenter.azure.com/v1beta1
kind: AKSNodeClass
metadata: {name: default}
spec: {osDiskSizeGB: 128}
";

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

const NOW: &str = "2026-06-01T12:00:00Z";

fn pool() -> NodePool {
    serde_yaml::from_str(POOL).unwrap()
}

fn class() -> AKSNodeClass {
    serde_yaml::from_str(CLASS).unwrap()
}

/// A launched, initialized claim stamped with the current hashes; `extra_status` adds YAML lines
/// under `status`.
fn claim_object(annotations: &BTreeMap<String, String>, extra_status: &str) -> NodeClaim {
    let mut claim: NodeClaim = serde_yaml::from_str(&format!(
        "
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: general-a
  creationTimestamp: '2026-06-01T11:00:00Z'
  labels: {{karpenter.sh/nodepool: general, kubernetes.io/arch: amd64}}
spec: {{nodeClassRef: {{name: default}}, requirements: []}}
status:
  providerID: azure:///vm/a
  conditions:
    - {{type: Launched, status: 'True', reason: Launched, lastTransitionTime: '2026-06-01T11:00:00Z'}}
    - {{type: Initialized, status: 'True', reason: Initialized, lastTransitionTime: '2026-06-01T11:01:00Z'}}
{extra_status}"
    ))
    .unwrap();
    claim.metadata.annotations = Some(annotations.clone());
    claim
}

fn stamped() -> BTreeMap<String, String> {
    hash::annotations(&pool(), Some(&class())).unwrap()
}

fn record(claim: &NodeClaim) -> NodeClaimRecord {
    NodeClaimRecord::from_k8s(claim).unwrap()
}

fn pods(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| format!("ns/{n}/uid-{n}")).collect()
}

struct Fixture {
    pool: PoolDrift,
    class: ClassDrift,
}

fn fixture(pool: &NodePool, class: &AKSNodeClass) -> Fixture {
    Fixture { pool: PoolDrift::new(pool).unwrap(), class: ClassDrift::new(class).unwrap() }
}

fn input<'a>(
    f: &'a Fixture,
    claim: &'a NodeClaimRecord,
    now_pods: BTreeSet<String>,
    after: u64,
) -> ClaimInput<'a> {
    ClaimInput {
        claim,
        node: None,
        pods: now_pods,
        pool: &f.pool,
        consolidate_after: Some(NillableDuration::After(Duration::from_secs(after))),
        class: Some(&f.class),
        instance_types: None,
    }
}

#[test]
fn a_settled_claim_needs_nothing() {
    let f = fixture(&pool(), &class());
    let consolidatable = "    - {type: Consolidatable, status: 'True', reason: Consolidatable, lastTransitionTime: '2026-06-01T11:51:00Z'}\n";
    let claim = record(&claim_object(&stamped(), consolidatable));
    let (update, remember) = decide(&input(&f, &claim, pods(&["a"]), 60), Some(&pods(&["a"])), t(NOW));
    assert_eq!(update, Update::default());
    assert_eq!(remember, pods(&["a"]));
}

#[test]
fn drift_is_set_with_its_reason_and_cleared() {
    let mut changed = class();
    changed.spec.os_disk_size_gb = Some(256);
    let f = fixture(&pool(), &changed);
    let claim = record(&claim_object(&stamped(), ""));
    let (update, _) = decide(&input(&f, &claim, pods(&[]), 3600), None, t(NOW));
    assert_eq!(update.drifted, Some(Some(DriftReason::NodeClassDrift)));
    assert!(update.annotations.is_empty(), "a drifted claim keeps its hashes");

    // Already drifted for that reason: nothing to write.
    let drifted_status = "    - {type: Drifted, status: 'True', reason: NodeClassDrift, lastTransitionTime: '2026-06-01T11:30:00Z'}\n";
    let claim = record(&claim_object(&stamped(), drifted_status));
    let (update, _) = decide(&input(&f, &claim, pods(&[]), 3600), None, t(NOW));
    assert_eq!(update.drifted, None);

    // The class changed back: the condition goes.
    let f = fixture(&pool(), &class());
    let (update, _) = decide(&input(&f, &claim, pods(&[]), 3600), None, t(NOW));
    assert_eq!(update.drifted, Some(None));
}

#[test]
fn a_claim_not_launched_is_never_drifted() {
    let mut changed = class();
    changed.spec.os_disk_size_gb = Some(256);
    let f = fixture(&pool(), &changed);
    let mut object = claim_object(&stamped(), "");
    object.status.as_mut().unwrap().conditions.retain(|c| c.type_ != conditions::LAUNCHED);
    let (update, _) = decide(&input(&f, &record(&object), pods(&[]), 3600), None, t(NOW));
    assert_eq!(update.drifted, None);
}

#[test]
fn old_hash_versions_are_restamped_unless_drifted() {
    let f = fixture(&pool(), &class());
    let old = BTreeMap::from([
        (ANNOTATION_NODEPOOL_HASH.to_string(), "123".to_string()),
        (ANNOTATION_NODEPOOL_HASH_VERSION.to_string(), "v3".to_string()),
    ]);
    let claim = record(&claim_object(&old, ""));
    let (update, _) = decide(&input(&f, &claim, pods(&[]), 3600), None, t(NOW));
    assert_eq!(update.annotations, stamped(), "all four, the class's were missing");
    assert_eq!(update.drifted, None, "another version is not compared");

    // Claims created before stamping carry none: they get the current hashes.
    let claim = record(&claim_object(&BTreeMap::new(), ""));
    let (update, _) = decide(&input(&f, &claim, pods(&[]), 3600), None, t(NOW));
    assert_eq!(update.annotations, stamped());
}

#[test]
fn pod_events_are_written_on_change_at_most_every_ten_seconds() {
    let f = fixture(&pool(), &class());
    let claim = record(&claim_object(&stamped(), "  lastPodEventTime: '2026-06-01T11:59:55Z'\n"));
    // First sight: bound pods are an event, here within 10 s of the last write, so it is pending.
    let (update, remember) = decide(&input(&f, &claim, pods(&["a"]), 3600), None, t(NOW));
    assert_eq!(update.last_pod_event, None);
    assert_eq!(remember, pods(&[]));
    // First sight of an empty node: nothing to write.
    let (update, remember) = decide(&input(&f, &claim, pods(&[]), 3600), None, t(NOW));
    assert_eq!((update.last_pod_event, remember), (None, pods(&[])));
    // A change 5 s after the last write waits, and stays pending.
    let (update, remember) = decide(&input(&f, &claim, pods(&["a", "b"]), 3600), Some(&pods(&["a"])), t(NOW));
    assert_eq!(update.last_pod_event, None);
    assert_eq!(remember, pods(&["a"]));
    // After the window it is written.
    let later = t("2026-06-01T12:00:06Z");
    let (update, remember) = decide(&input(&f, &claim, pods(&["a", "b"]), 3600), Some(&pods(&["a"])), later);
    assert_eq!(update.last_pod_event, Some(later));
    assert_eq!(remember, pods(&["a", "b"]));
    // A pod removed, or replaced under the same name (another UID), is an event too.
    let (update, _) = decide(&input(&f, &claim, pods(&[]), 3600), Some(&pods(&["a"])), later);
    assert_eq!(update.last_pod_event, Some(later));
    let replaced: BTreeSet<String> = ["ns/a/uid-other".to_string()].into();
    let (update, _) = decide(&input(&f, &claim, replaced, 3600), Some(&pods(&["a"])), later);
    assert_eq!(update.last_pod_event, Some(later));
}

#[test]
fn consolidatable_follows_consolidate_after() {
    let f = fixture(&pool(), &class());
    let claim = record(&claim_object(&stamped(), "  lastPodEventTime: '2026-06-01T11:58:00Z'\n"));
    let decide_after = |after: u64, pods_now: &[&str]| {
        decide(&input(&f, &claim, pods(pods_now), after), Some(&pods(&["a"])), t(NOW)).0
    };
    assert_eq!(decide_after(60, &["a"]).consolidatable, Some(true), "2 min quiet, 1 min asked");
    assert_eq!(decide_after(300, &["a"]).consolidatable, None, "not yet, and not set");
    // A pod event now resets the clock in the same sweep.
    let update = decide_after(60, &["a", "b"]);
    assert_eq!((update.last_pod_event, update.consolidatable), (Some(t(NOW)), None));
    // Never: not consolidatable; unreadable: left alone.
    let mut i = input(&f, &claim, pods(&["a"]), 0);
    i.consolidate_after = Some(NillableDuration::Never);
    assert_eq!(decide(&i, None, t(NOW)).0.consolidatable, None);
    i.consolidate_after = None;
    assert_eq!(decide(&i, None, t(NOW)).0.consolidatable, None);

    let consolidatable = "    - {type: Consolidatable, status: 'True', reason: Consolidatable, lastTransitionTime: '2026-06-01T11:59:00Z'}\n";
    let claim = record(&claim_object(
        &stamped(),
        &format!("{consolidatable}  lastPodEventTime: '2026-06-01T11:58:00Z'\n"),
    ));
    let update = decide(&input(&f, &claim, pods(&["a", "b"]), 60), Some(&pods(&["a"])), t(NOW)).0;
    assert_eq!(update.consolidatable, Some(false), "a pod event removes it");
}

#[test]
fn status_is_applied_to_the_conditions_read() {
    let claim = record(&claim_object(&stamped(), ""));
    let (mut list, mut event) = (claim.conditions.clone(), None);
    let update = Update {
        drifted: Some(Some(DriftReason::ImageDrift)),
        consolidatable: Some(true),
        last_pod_event: Some(t(NOW)),
        annotations: BTreeMap::new(),
    };
    assert!(apply_status(&mut list, &mut event, &update, t(NOW)));
    let drifted = conditions::get(&list, conditions::DRIFTED).unwrap();
    assert_eq!((drifted.reason.as_str(), drifted.last_transition_time.0), ("ImageDrift", t(NOW)));
    assert!(conditions::is_true(&list, conditions::CONSOLIDATABLE));
    assert!(conditions::is_true(&list, conditions::INITIALIZED), "others kept");
    assert_eq!(event.as_ref().map(|t| t.0), Some(t(NOW)));
    // The same update again changes nothing and keeps the transition time.
    assert!(!apply_status(&mut list, &mut event, &update, t("2026-06-01T13:00:00Z")));
    let removal = Update { drifted: Some(None), consolidatable: Some(false), ..Update::default() };
    assert!(apply_status(&mut list, &mut event, &removal, t(NOW)));
    assert!(conditions::get(&list, conditions::DRIFTED).is_none());
    assert!(conditions::get(&list, conditions::CONSOLIDATABLE).is_none());
    assert_eq!(list.len(), 2);
}

#[test]
fn the_kubelet_version_of_a_ready_node_counts() {
    let mut k = class();
    k.status = Some(serde_yaml::from_str(
        "kubernetesVersion: 1.35.0\nconditions: [{type: KubernetesVersionReady, status: 'True', reason: R, lastTransitionTime: '2026-01-01T00:00:00Z'}]\n",
    ).unwrap());
    let f = fixture(&pool(), &k);
    let claim = record(&claim_object(&stamped(), ""));
    let node: Node = serde_yaml::from_str(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus:\n  conditions: [{type: Ready, status: 'True'}]\n  nodeInfo: {kubeletVersion: v1.34.4, machineID: '', systemUUID: '', bootID: '', kernelVersion: '', osImage: '', containerRuntimeVersion: '', kubeProxyVersion: '', operatingSystem: linux, architecture: amd64}\n",
    ).unwrap();
    let node = NodeRecord::from_k8s(&node).unwrap();
    let mut i = input(&f, &claim, pods(&[]), 3600);
    i.node = Some(&node);
    assert_eq!(decide(&i, None, t(NOW)).0.drifted, Some(Some(DriftReason::K8sVersionDrift)));
}
