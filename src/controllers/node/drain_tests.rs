//! Table tests of the drain's decisions: tiers, do-not-disrupt (both forms), the termination deadline,
//! VolumeAttachments and eviction answers.

use std::time::Duration;

use serde_json::json;

use super::*;

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn pod(name: &str) -> DrainPod {
    DrainPod {
        namespace: "ns".into(),
        name: name.into(),
        uid: Some(format!("uid-{name}")),
        daemonset: false,
        critical: false,
        mirror: false,
        terminal: false,
        deletion: None,
        do_not_disrupt: DoNotDisrupt::No,
        started: None,
        tolerates_disrupted: false,
        grace_seconds: 30,
        claims: vec![],
    }
}

fn ds(name: &str) -> DrainPod {
    DrainPod { daemonset: true, ..pod(name) }
}

fn critical(p: DrainPod) -> DrainPod {
    DrainPod { critical: true, ..p }
}

#[test]
fn evicts_ordinary_pods_and_skips_mirror_terminal_and_tolerating_pods() {
    let pods = vec![
        pod("web"),
        DrainPod { mirror: true, ..pod("static") },
        DrainPod { terminal: true, ..pod("done") },
        DrainPod { tolerates_disrupted: true, ..pod("tolerant") },
        pod("api"),
    ];
    let plan = plan(&pods, None, t(0));
    assert_eq!(plan.evict, vec![0, 4]);
    assert!(plan.delete.is_empty());
    assert_eq!((plan.waiting, plan.tier), (2, Some(Tier::Workload)));
    assert!(!plan.drained());
}

#[test]
fn nothing_to_wait_for_is_drained() {
    let pods =
        vec![DrainPod { tolerates_disrupted: true, ..ds("ds") }, DrainPod { mirror: true, ..pod("m") }];
    assert!(plan(&pods, None, t(0)).drained());
    assert_eq!(plan(&pods, None, t(0)).tier, None);
    assert!(plan(&[], None, t(0)).drained());
}

#[test]
fn tiers_go_one_at_a_time() {
    // (pods, expected tier, expected evictions)
    let cases: Vec<(Vec<DrainPod>, Option<Tier>, Vec<usize>)> = vec![
        (vec![critical(ds("c-ds")), critical(pod("c")), ds("ds"), pod("web")], Some(Tier::Workload), vec![3]),
        (vec![critical(ds("c-ds")), critical(pod("c")), ds("ds")], Some(Tier::DaemonSet), vec![2]),
        (vec![critical(ds("c-ds")), critical(pod("c"))], Some(Tier::CriticalWorkload), vec![1]),
        (vec![critical(ds("c-ds"))], Some(Tier::CriticalDaemonSet), vec![0]),
        // A terminating pod still holds its tier until it is gone (or stuck).
        (vec![ds("ds"), DrainPod { deletion: Some(t(-10)), ..pod("going") }], Some(Tier::Workload), vec![]),
        (vec![ds("ds"), DrainPod { deletion: Some(t(-61)), ..pod("stuck") }], Some(Tier::DaemonSet), vec![0]),
        // Terminal and tolerating pods never hold a tier.
        (
            vec![
                ds("ds"),
                DrainPod { terminal: true, ..pod("done") },
                DrainPod { tolerates_disrupted: true, ..pod("t") },
            ],
            Some(Tier::DaemonSet),
            vec![0],
        ),
    ];
    for (i, (pods, tier, evict)) in cases.into_iter().enumerate() {
        let p = plan(&pods, None, t(0));
        assert_eq!((p.tier, &p.evict), (tier, &evict), "case {i}: {p:?}");
    }
}

#[test]
fn a_protected_pod_holds_the_next_tier() {
    let pods = vec![DrainPod { do_not_disrupt: DoNotDisrupt::Always, ..pod("precious") }, ds("ds")];
    let p = plan(&pods, None, t(1_000_000));
    assert!(p.evict.is_empty());
    assert_eq!((p.waiting, p.do_not_disrupt, p.tier), (2, 1, Some(Tier::Workload)));
}

#[test]
fn terminating_pods_are_waited_for_until_stuck() {
    let pods = vec![DrainPod { deletion: Some(t(0)), ..pod("going") }];
    let p = plan(&pods, None, t(30));
    assert!(p.evict.is_empty());
    assert_eq!(p.waiting, 1);
    assert!(plan(&pods, None, t(61)).drained(), "stuck more than a minute past its deletionTimestamp");
}

#[test]
fn do_not_disrupt_true_is_never_evicted_without_a_deadline() {
    let pods = vec![DrainPod { do_not_disrupt: DoNotDisrupt::Always, ..pod("precious") }, pod("web")];
    let p = plan(&pods, None, t(1_000_000));
    assert_eq!(p.evict, vec![1]);
    assert_eq!((p.waiting, p.do_not_disrupt), (2, 1));
    assert!(p.delete.is_empty());
}

#[test]
fn a_do_not_disrupt_duration_protects_until_that_long_after_the_start() {
    let thirty_min = DoNotDisrupt::For(Duration::from_secs(30 * 60));
    let started = DrainPod { do_not_disrupt: thirty_min, started: Some(t(0)), ..pod("batch") };
    let unstarted = DrainPod { do_not_disrupt: thirty_min, ..pod("pending") };
    let pods = vec![started, unstarted];
    // (now, evicted)
    for (now, evict) in
        [(t(60), vec![]), (t(30 * 60 - 1), vec![]), (t(30 * 60), vec![0]), (t(86_400), vec![0])]
    {
        let p = plan(&pods, None, now);
        assert_eq!(p.evict, evict, "at {now}");
        assert_eq!(p.waiting, 2);
        assert_eq!(p.do_not_disrupt, 2 - evict.len(), "at {now}");
    }
}

#[test]
fn the_annotation_is_read_in_both_forms_and_a_bad_value_protects_nothing() {
    let with = |value: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "annotations": {"karpenter.sh/do-not-disrupt": value}},
            "spec": {"containers": [], "priorityClassName": "system-node-critical"},
            "status": {"startTime": "2025-01-01T00:00:00Z"}
        }))
        .unwrap()
    };
    let p = DrainPod::from_pod(&with("30m"));
    assert_eq!(p.do_not_disrupt, DoNotDisrupt::For(Duration::from_secs(1800)));
    assert_eq!(p.started, Some("2025-01-01T00:00:00Z".parse().unwrap()));
    assert!(p.critical);
    assert_eq!(DrainPod::from_pod(&with("true")).do_not_disrupt, DoNotDisrupt::Always);
    assert_eq!(DrainPod::from_pod(&with("soon")).do_not_disrupt, DoNotDisrupt::No);
}

#[test]
fn only_the_disrupted_taint_or_everything_is_tolerated() {
    let tolerating = |toleration: serde_json::Value| -> bool {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "tolerations": [toleration]}
        }))
        .unwrap();
        DrainPod::from_pod(&p).tolerates_disrupted
    };
    assert!(tolerating(json!({"operator": "Exists"})));
    assert!(tolerating(
        json!({"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"})
    ));
    assert!(tolerating(json!({"key": "karpenter.sh/disrupted", "operator": "Equal", "value": ""})));
    assert!(!tolerating(json!({"key": "karpenter.sh/disrupted", "operator": "Equal", "value": "x"})));
    assert!(!tolerating(
        json!({"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoExecute"})
    ));
    assert!(!tolerating(json!({"key": "other", "operator": "Exists"})));
}

#[test]
fn the_deadline_forces_deletion_across_tiers_so_pods_end_by_it() {
    let deadline = Some(t(100));
    let pods = vec![
        DrainPod { do_not_disrupt: DoNotDisrupt::Always, grace_seconds: 30, ..pod("precious") },
        DrainPod { grace_seconds: 10, ..pod("quick") },
        DrainPod { grace_seconds: 0, ..pod("instant") },
        DrainPod { grace_seconds: 40, ..critical(ds("agent")) },
    ];
    // 50 s left: nobody's grace reaches the deadline; only the first tier's ordinary pods are evicted.
    let p = plan(&pods, deadline, t(50));
    assert_eq!(p.evict, vec![1, 2]);
    assert!(p.delete.is_empty());
    // 30 s left: the critical daemon (40 s) and the do-not-disrupt pod (30 s) are deleted, whatever their tier.
    let p = plan(&pods, deadline, t(70));
    assert_eq!(p.delete, vec![(0, 30), (3, 30)]);
    assert_eq!(p.evict, vec![1, 2]);
    assert_eq!(p.waiting, 4);
    // 5 s left: grace clamped to the time left.
    let p = plan(&pods, deadline, t(95));
    assert_eq!(p.delete, vec![(0, 5), (1, 5), (3, 5)]);
    assert_eq!(p.evict, vec![2]);
}

#[test]
fn a_terminating_pod_whose_grace_outlasts_the_deadline_is_deleted_again() {
    let deadline = Some(t(100));
    let pods = vec![
        DrainPod { deletion: Some(t(150)), ..pod("slow") },
        DrainPod { deletion: Some(t(90)), ..pod("in-time") },
    ];
    let p = plan(&pods, deadline, t(80));
    assert_eq!(p.delete, vec![(0, 20)]);
    assert_eq!(p.waiting, 2);
}

#[test]
fn past_the_deadline_everything_is_deleted_and_nothing_is_waited_for() {
    let deadline = Some(t(100));
    let pods = vec![
        DrainPod { do_not_disrupt: DoNotDisrupt::Always, ..pod("precious") },
        pod("web"),
        ds("ds"),
        DrainPod { deletion: Some(t(99)), ..pod("going") },
    ];
    let p = plan(&pods, deadline, t(100));
    assert_eq!(p.delete, vec![(0, 1), (1, 1), (2, 1)]);
    assert!(p.evict.is_empty());
    assert!(p.drained());
}

#[test]
fn attachments_of_the_node_hold_the_vm_unless_a_staying_pod_uses_the_volume() {
    let a = |name: &str, node: &str, volume: Option<&str>| Attachment {
        name: name.into(),
        node: node.into(),
        volume: volume.map(String::from),
    };
    let attachments = vec![
        a("csi-b", "n1", Some("pv-b")),
        a("csi-a", "n1", Some("pv-a")),
        a("csi-kept", "n1", Some("pv-kept")),
        a("csi-inline", "n1", None),
        a("csi-other", "n2", Some("pv-c")),
    ];
    let kept = BTreeSet::from(["pv-kept".to_string()]);
    assert_eq!(pending_attachments(&attachments, "n1", &kept), ["csi-a", "csi-b"]);
    assert!(pending_attachments(&attachments, "n3", &kept).is_empty());
}

#[test]
fn eviction_answers() {
    let api = |code: u16| {
        Err::<(), _>(kube::Error::Api(Box::new(kube::core::Status { code, ..kube::core::Status::default() })))
    };
    assert_eq!(eviction_outcome(Ok::<(), kube::Error>(())).unwrap(), EvictionOutcome::Done);
    assert_eq!(eviction_outcome(api(404)).unwrap(), EvictionOutcome::Done);
    assert_eq!(eviction_outcome(api(409)).unwrap(), EvictionOutcome::Done);
    assert_eq!(eviction_outcome(api(429)).unwrap(), EvictionOutcome::Blocked);
    assert_eq!(eviction_outcome(api(500)).unwrap(), EvictionOutcome::Blocked);
    assert!(eviction_outcome(api(403)).is_err());
}

fn claim(deleted: Option<Timestamp>, tgp: Option<&str>, annotated: Option<&str>) -> NodeClaim {
    let mut claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
        "spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "d"},
                 "requirements": []}
    }))
    .unwrap();
    claim.metadata.deletion_timestamp = deleted.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time);
    claim.spec.termination_grace_period = tgp.map(String::from);
    if let Some(at) = annotated {
        claim.annotations_mut().insert(ANNOTATION_TERMINATION_TIMESTAMP.into(), at.into());
    }
    claim
}

#[test]
fn the_deadline_is_deletion_plus_the_grace_period_or_the_annotation_if_earlier() {
    assert_eq!(termination_deadline(&claim(Some(t(0)), Some("1h30s"), None)).unwrap(), Some(t(3630)));
    assert_eq!(termination_deadline(&claim(Some(t(0)), None, None)).unwrap(), None);
    assert_eq!(termination_deadline(&claim(None, Some("1h"), None)).unwrap(), None);
    assert!(termination_deadline(&claim(Some(t(0)), Some("soon"), None)).is_err());
    let at = t(10).to_string();
    assert_eq!(termination_deadline(&claim(Some(t(0)), None, Some(&at))).unwrap(), Some(t(10)));
    assert_eq!(termination_deadline(&claim(Some(t(0)), Some("5s"), Some(&at))).unwrap(), Some(t(5)));
    assert_eq!(termination_deadline(&claim(Some(t(0)), Some("1h"), Some(&at))).unwrap(), Some(t(10)));
    assert_eq!(termination_deadline(&claim(Some(t(0)), None, Some("garbage"))).unwrap(), None);
}
