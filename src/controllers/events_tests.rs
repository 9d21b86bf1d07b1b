//! Tests of the event builders, the reason set and the dedupe table.

use super::*;

#[test]
fn reasons_are_camel_case_and_distinct() {
    let set: BTreeSet<_> = reason::ALL.iter().collect();
    assert_eq!(set.len(), reason::ALL.len());
    for r in reason::ALL {
        assert!(r.chars().next().unwrap().is_ascii_uppercase(), "{r}");
        assert!(r.chars().all(|c| c.is_ascii_alphanumeric()), "{r}");
    }
}

#[test]
fn builders_use_their_reason_and_type() {
    let cases = [
        (nominated(Nomination::Node("n")), reason::NOMINATED, EventType::Normal),
        (failed_scheduling("x"), reason::FAILED_SCHEDULING, EventType::Warning),
        (launched("Standard_D2s_v5", Some("eastus-1"), "spot"), reason::LAUNCHED, EventType::Normal),
        (launch_failed("Throttled", "x"), reason::LAUNCH_FAILED, EventType::Warning),
        (insufficient_capacity("x"), reason::INSUFFICIENT_CAPACITY, EventType::Warning),
        (registered("n"), reason::REGISTERED, EventType::Normal),
        (launch_timeout(Duration::from_secs(300)), reason::LAUNCH_TIMEOUT, EventType::Warning),
        (registration_timeout(Duration::from_secs(900)), reason::REGISTRATION_TIMEOUT, EventType::Warning),
        (terminating(&[]), reason::TERMINATING, EventType::Normal),
        (eviction_blocked("n", 2), reason::EVICTION_BLOCKED, EventType::Warning),
        (drained(), reason::DRAINED, EventType::Normal),
        (garbage_collected("id"), reason::GARBAGE_COLLECTED, EventType::Normal),
        (drifted("NodeClassDrift", "x"), reason::DRIFTED, EventType::Normal),
        (disruption_blocked("Budget", "x"), reason::DISRUPTION_BLOCKED, EventType::Normal),
        (disrupting("x"), reason::DISRUPTING, EventType::Normal),
        (expired("720h"), reason::EXPIRED, EventType::Normal),
        (
            awaiting_volume_detachment("n", &["csi-1".into()]),
            reason::AWAITING_VOLUME_DETACHMENT,
            EventType::Normal,
        ),
        (unhealthy("n", "Ready=False", "t"), reason::UNHEALTHY, EventType::Warning),
        (node_repair_blocked("x"), reason::NODE_REPAIR_BLOCKED, EventType::Warning),
        (interrupted("id"), reason::INTERRUPTED, EventType::Warning),
        (
            unreadable("spec.requirements[0].operator: unknown variant `Gte`"),
            reason::UNREADABLE,
            EventType::Warning,
        ),
        (credentials_unavailable("expired assertion"), reason::CREDENTIALS_UNAVAILABLE, EventType::Warning),
        (registration_unhealthy("2 of the last 2"), reason::NODE_REGISTRATION_UNHEALTHY, EventType::Warning),
        (unconsolidatable("Can't replace with a cheaper node"), reason::UNCONSOLIDATABLE, EventType::Normal),
        (
            waiting_on_nodeclaim_termination(&["a".into()]),
            reason::WAITING_ON_NODECLAIM_TERMINATION,
            EventType::Normal,
        ),
    ];
    assert_eq!(cases.len(), reason::ALL.len());
    for (ev, reason, type_) in cases {
        assert_eq!(ev.reason, reason);
        assert_eq!(ev.type_, type_, "{reason}");
        assert!(!ev.action.is_empty() && ev.note.as_deref().is_some_and(|n| !n.is_empty()));
    }
}

#[test]
fn messages() {
    let note = |ev: Event| ev.note.unwrap();
    assert_eq!(
        note(nominated(Nomination::NodeClaim("general-abc"))),
        "Pod should schedule on: nodeclaim/general-abc"
    );
    assert_eq!(note(nominated(Nomination::Node("aks-x"))), "Pod should schedule on: node/aks-x");
    assert_eq!(
        note(failed_scheduling("no instance type fits: cpu")),
        "Failed to schedule pod, no instance type fits: cpu"
    );
    assert_eq!(
        note(launched("Standard_D2s_v5", Some("eastus-2"), "on-demand")),
        "Launched Standard_D2s_v5 in eastus-2 (on-demand)"
    );
    assert_eq!(
        note(launched("Standard_D2s_v5", Some(""), "spot")),
        "Launched Standard_D2s_v5 in no zone (spot)"
    );
    assert_eq!(note(launch_failed("Throttled", "429 from ARM")), "Throttled: 429 from ARM");
    assert_eq!(
        note(launch_timeout(Duration::from_secs(300))),
        "Not launched within 5m; deleting the nodeclaim"
    );
    assert_eq!(
        note(registration_timeout(Duration::from_secs(90))),
        "Node not registered within 90s; deleting the nodeclaim. The VM's kubelet did not join: check the \
         cluster CA (KUBE_CA_CRT), the API server name and the bootstrap token (TLS_BOOTSTRAP_TOKEN) it \
         booted with"
    );
    assert_eq!(note(terminating(&["a".into(), "b".into()])), "Draining node a, b");
    assert_eq!(
        note(eviction_blocked("aks-x", 1)),
        "Evicting 1 pod from node aks-x would violate a PodDisruptionBudget; retrying"
    );
    assert!(note(eviction_blocked("aks-x", 3)).starts_with("Evicting 3 pods"));
}

#[test]
fn long_notes_are_cut_on_a_character_boundary() {
    let ev = launch_failed("Unknown", &"é".repeat(2000));
    let n = ev.note.unwrap();
    assert!(n.len() <= MAX_NOTE_BYTES, "{}", n.len());
    assert!(n.ends_with('…'));
    assert_eq!(truncate("short".into(), 10), "short");
    assert_eq!(truncate("abcdefghij".into(), 10), "abcdefghij");
    assert_eq!(truncate("abcdefghijk".into(), 10), "abcdefg…");
}

#[test]
fn references() {
    let r = pod_ref("ns/web-1", Some("u1".into()));
    assert_eq!((r.namespace.as_deref(), r.name.as_deref()), (Some("ns"), Some("web-1")));
    assert_eq!(
        (r.kind.as_deref(), r.api_version.as_deref(), r.uid.as_deref()),
        (Some("Pod"), Some("v1"), Some("u1"))
    );
    let c = nodeclaim_ref("general-abc");
    assert_eq!(c.kind.as_deref(), Some("NodeClaim"));
    assert_eq!(c.api_version.as_deref(), Some("karpenter.sh/v1"));
    assert_eq!(c.namespace, None);
}

#[test]
fn pod_events_are_once_per_pod_and_capped() {
    let events = vec![("a".to_string(), 1), ("b".into(), 2), ("a".into(), 3), ("c".into(), 4)];
    assert_eq!(cap_per_pod(events.clone(), 10), vec![("a".into(), 1), ("b".into(), 2), ("c".into(), 4)]);
    assert_eq!(cap_per_pod(events, 2), vec![("a".into(), 1), ("b".into(), 2)]);
    let many = (0..2000).map(|i| (format!("ns/p{i}"), ()));
    assert_eq!(cap_per_pod(many, MAX_POD_EVENTS_PER_BATCH).len(), MAX_POD_EVENTS_PER_BATCH);
}

#[test]
fn identical_events_are_deduplicated_for_a_while() {
    let mut d = Dedupe::default();
    let t0 = Instant::now();
    let r = pod_ref("ns/p", None);
    let key = |ev: &Event| Dedupe::key(ev, &r);
    assert!(d.admit(key(&failed_scheduling("x")), t0, DEDUPE_TIMEOUT));
    assert!(!d.admit(key(&failed_scheduling("x")), t0 + Duration::from_secs(60), DEDUPE_TIMEOUT));
    assert!(d.admit(key(&failed_scheduling("y")), t0 + Duration::from_secs(60), DEDUPE_TIMEOUT));
    assert!(d.admit(key(&failed_scheduling("x")), t0 + DEDUPE_TIMEOUT, DEDUPE_TIMEOUT));
    // Unconsolidatable waits longer before it repeats, as upstream's.
    let why = unconsolidatable("Can't replace with a cheaper node");
    assert!(d.admit(key(&why), t0, dedupe_timeout(&why.reason)));
    assert!(!d.admit(key(&why), t0 + DEDUPE_TIMEOUT, dedupe_timeout(&why.reason)));
    assert!(d.admit(key(&why), t0 + UNCONSOLIDATABLE_DEDUPE_TIMEOUT, dedupe_timeout(&why.reason)));
    let other = pod_ref("ns/q", None);
    assert!(d.admit(Dedupe::key(&failed_scheduling("x"), &other), t0, DEDUPE_TIMEOUT));
}

#[test]
fn the_dedupe_table_is_pruned() {
    let mut d = Dedupe::default();
    let t0 = Instant::now();
    for i in 0..DEDUPE_PRUNE_AT as u64 {
        assert!(d.admit(i, t0, DEDUPE_TIMEOUT));
    }
    assert!(d.admit(u64::MAX, t0 + UNCONSOLIDATABLE_DEDUPE_TIMEOUT, DEDUPE_TIMEOUT));
    assert_eq!(d.seen.len(), 1);
}

#[test]
fn a_dedupe_table_of_live_entries_is_pruned_again_only_once_it_has_doubled() {
    let mut d = Dedupe::default();
    let t0 = Instant::now();
    let live = DEDUPE_PRUNE_AT as u64;
    // A large cluster's pass: more live entries than the prune size. The prune at the size keeps
    // them all, and the next one waits for twice as many: no scan of the table at every event.
    for key in 0..=live {
        assert!(d.admit(key, t0, DEDUPE_TIMEOUT));
    }
    assert_eq!(d.seen.len(), DEDUPE_PRUNE_AT + 1);
    let later = t0 + UNCONSOLIDATABLE_DEDUPE_TIMEOUT;
    for key in live + 1..2 * live {
        assert!(d.admit(key, later, DEDUPE_TIMEOUT));
    }
    assert_eq!(d.seen.len(), 2 * DEDUPE_PRUNE_AT, "expired entries wait for the table to double");
    assert!(d.admit(2 * live, later, DEDUPE_TIMEOUT));
    assert_eq!(d.seen.len(), DEDUPE_PRUNE_AT, "the prune keeps the entries of the later pass");
}

#[test]
fn drifted_event() {
    let ev = drifted("NodeClassDrift", "the AKSNodeClass's spec changed");
    assert_eq!(ev.note.as_deref(), Some("Drifted (NodeClassDrift): the AKSNodeClass's spec changed"));
}
