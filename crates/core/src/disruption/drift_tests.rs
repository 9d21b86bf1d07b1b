use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::apis::hash::{annotations as hash_annotations, fnv1a, hash_value};
use crate::model::resources::Resources;
use crate::model::{CapacityType, Offering};

const POOL: &str = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    metadata: {labels: {team: a}}
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      nodeClassRef: {name: default, group: karpenter.azure.com, kind: AKSNodeClass}
      taints: [{key: a, effect: NoSchedule}, {key: b, effect: NoSchedule}]
  limits: {cpu: '100'}
";

const CLASS: &str = "
apiVersion: karpenter.azure.com/v1beta1
kind: AKSNodeClass
metadata: {name: default}
spec:
  osDiskSizeGB: 128
  imageFamily: Ubuntu
  tags: {env: prod}
  kubelet: {allowedUnsafeSysctls: [net.core.a, net.core.b]}
status:
  kubernetesVersion: 1.34.4
  images: [{id: img-1}, {id: img-2}]
  conditions:
    - {type: KubernetesVersionReady, status: 'True', reason: Ready, lastTransitionTime: '2026-01-01T00:00:00Z'}
    - {type: ImagesReady, status: 'True', reason: Ready, lastTransitionTime: '2026-01-01T00:00:00Z'}
";

fn pool() -> NodePool {
    serde_yaml::from_str(POOL).unwrap()
}

fn class() -> AKSNodeClass {
    serde_yaml::from_str(CLASS).unwrap()
}

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

const NOW: &str = "2026-06-01T12:00:00Z";

/// A launched claim of `pool()` on `class()`, stamped at creation, two hours old.
struct Claim {
    annotations: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    created: Timestamp,
    image: String,
}

fn claim() -> Claim {
    Claim {
        annotations: hash_annotations(&pool(), Some(&class())).unwrap(),
        labels: BTreeMap::from([
            ("karpenter.sh/nodepool".into(), "general".into()),
            ("karpenter.sh/capacity-type".into(), "spot".into()),
            ("kubernetes.io/arch".into(), "amd64".into()),
            ("node.kubernetes.io/instance-type".into(), "Standard_D2s_v5".into()),
            ("topology.kubernetes.io/zone".into(), "eastus-1".into()),
            ("team".into(), "a".into()),
        ]),
        created: t("2026-06-01T10:00:00Z"),
        image: "img-1".into(),
    }
}

fn types(zone: &str) -> Vec<InstanceType> {
    vec![InstanceType {
        name: "Standard_D2s_v5".into(),
        vcpus: 2,
        memory_mib: 8192,
        labels: BTreeMap::new(),
        capacity: Resources::new(),
        overhead: Default::default(),
        allocatable: Resources::new(),
        offerings: vec![Offering {
            zone: zone.into(),
            capacity_type: CapacityType::Spot,
            price: 0.1,
            available: false,
        }],
    }]
}

fn reason(
    c: &Claim,
    p: &NodePool,
    k: Option<&AKSNodeClass>,
    kubelet: &str,
    its: Option<&[InstanceType]>,
) -> Option<DriftReason> {
    let pool = PoolDrift::new(p).unwrap();
    let class = k.map(|k| ClassDrift::new(k).unwrap());
    let facts = ClaimFacts {
        annotations: &c.annotations,
        labels: &c.labels,
        created: Some(c.created),
        image_id: Some(&c.image),
    };
    let node =
        NodeFacts { kubelet_version: Some(kubelet), kubelet_identity: None, ready: true, deleting: false };
    drift_reason(&facts, &pool, class.as_ref(), Some(&node), its, t(NOW))
}

fn check(c: &Claim, p: &NodePool, k: &AKSNodeClass) -> Option<DriftReason> {
    reason(c, p, Some(k), "v1.34.4", Some(&types("eastus-1")))
}

#[test]
fn a_fresh_claim_is_not_drifted() {
    assert_eq!(check(&claim(), &pool(), &class()), None);
}

#[test]
fn each_reason_in_upstream_order() {
    type Case = (&'static str, fn(&mut Claim, &mut NodePool, &mut AKSNodeClass), Option<DriftReason>);
    let cases: Vec<Case> = vec![
        (
            "template label",
            |_, p, _| {
                p.spec.template.metadata.as_mut().unwrap().labels.insert("team".into(), "b".into());
            },
            Some(DriftReason::NodePoolDrifted),
        ),
        (
            "expireAfter",
            |_, p, _| p.spec.template.spec.expire_after = "24h".into(),
            Some(DriftReason::NodePoolDrifted),
        ),
        (
            "taint added",
            |_, p, _| {
                let mut t = p.spec.template.spec.taints[0].clone();
                t.key = "c".into();
                p.spec.template.spec.taints.push(t);
            },
            Some(DriftReason::NodePoolDrifted),
        ),
        (
            "pool hash wins over class hash",
            |_, p, k| {
                p.spec.template.spec.expire_after = "24h".into();
                k.spec.os_disk_size_gb = Some(256);
            },
            Some(DriftReason::NodePoolDrifted),
        ),
        (
            "requirement no longer met",
            |_, p, _| {
                p.spec.template.spec.requirements[0].values = vec!["on-demand".into()];
            },
            Some(DriftReason::RequirementsDrifted),
        ),
        (
            "requirement on a label the claim lacks",
            |_, p, _| {
                let mut r = p.spec.template.spec.requirements[0].clone();
                r.key = "example.com/rack".into();
                p.spec.template.spec.requirements.push(r);
            },
            Some(DriftReason::RequirementsDrifted),
        ),
        (
            "instance type gone",
            |c, _, _| {
                c.labels.insert("node.kubernetes.io/instance-type".into(), "Standard_X".into());
            },
            Some(DriftReason::InstanceTypeNotFound),
        ),
        (
            "no offering in the zone",
            |c, _, _| {
                c.labels.insert("topology.kubernetes.io/zone".into(), "eastus-3".into());
            },
            Some(DriftReason::InstanceTypeNotFound),
        ),
        (
            "instance type too young to check",
            |c, _, _| {
                c.labels.insert("node.kubernetes.io/instance-type".into(), "Standard_X".into());
                c.created = t("2026-06-01T11:30:00Z");
            },
            None,
        ),
        ("osDiskSizeGB", |_, _, k| k.spec.os_disk_size_gb = Some(256), Some(DriftReason::NodeClassDrift)),
        (
            "tags only",
            |_, _, k| {
                k.spec.tags.insert("owner".into(), "x".into());
            },
            None,
        ),
        (
            "sysctls reordered",
            |_, _, k| k.spec.kubelet.as_mut().unwrap().allowed_unsafe_sysctls.reverse(),
            None,
        ),
        ("taints reordered", |_, p, _| p.spec.template.spec.taints.reverse(), None),
        (
            "budgets, limits and weight",
            |_, p, _| {
                p.spec.limits = None;
                p.spec.weight = Some(10);
                p.spec.disruption.budgets.clear();
                p.spec.disruption.consolidate_after = "1h".into();
            },
            None,
        ),
        (
            "requirements change that labels still meet",
            |_, p, _| {
                p.spec.template.spec.requirements[1].values.push("arm64".into());
            },
            None,
        ),
        (
            "kubernetes version",
            |_, _, k| {
                k.status.as_mut().unwrap().kubernetes_version = Some("1.35.0".into());
            },
            Some(DriftReason::K8sVersionDrift),
        ),
        (
            "kubernetes version not ready",
            |_, _, k| {
                let s = k.status.as_mut().unwrap();
                s.kubernetes_version = Some("1.35.0".into());
                s.conditions[0].status = crate::apis::conditions::ConditionStatus::False;
            },
            None,
        ),
        (
            "image gone",
            |_, _, k| {
                k.status.as_mut().unwrap().images.remove(0);
            },
            Some(DriftReason::ImageDrift),
        ),
        ("image ID in another case", |c, _, _| c.image = "IMG-1".into(), None),
        (
            "images not ready",
            |_, _, k| {
                let s = k.status.as_mut().unwrap();
                s.images.remove(0);
                s.conditions[1].status = crate::apis::conditions::ConditionStatus::False;
            },
            None,
        ),
        (
            "claim of another hash version",
            |c, p, k| {
                c.annotations.insert(ANNOTATION_NODEPOOL_HASH_VERSION.into(), "v3".into());
                c.annotations.insert(ANNOTATION_NODECLASS_HASH_VERSION.into(), "v3".into());
                p.spec.template.spec.expire_after = "24h".into();
                k.spec.os_disk_size_gb = Some(256);
            },
            None,
        ),
        (
            "claim without annotations",
            |c, p, _| {
                c.annotations.clear();
                p.spec.template.spec.expire_after = "24h".into();
            },
            None,
        ),
    ];
    for (name, change, want) in cases {
        let (mut c, mut p, mut k) = (claim(), pool(), class());
        change(&mut c, &mut p, &mut k);
        assert_eq!(check(&c, &p, &k), want, "{name}");
    }
}

#[test]
fn the_provider_checks_need_their_inputs() {
    let c = claim();
    let mut k = class();
    k.status.as_mut().unwrap().kubernetes_version = Some("1.35.0".into());
    let facts = |c: &Claim| (c.annotations.clone(), c.labels.clone());
    let (annotations, labels) = facts(&c);
    let claim_facts =
        ClaimFacts { annotations: &annotations, labels: &labels, created: Some(c.created), image_id: None };
    let pool_drift = PoolDrift::new(&pool()).unwrap();
    let class_drift = ClassDrift::new(&k).unwrap();
    let at = |node: Option<NodeFacts<'_>>| {
        drift_reason(&claim_facts, &pool_drift, Some(&class_drift), node.as_ref(), None, t(NOW))
    };
    // No Node, a NotReady Node and a deleting Node say nothing about the version.
    assert_eq!(at(None), None);
    assert_eq!(
        at(Some(NodeFacts {
            kubelet_version: Some("v1.34.4"),
            kubelet_identity: None,
            ready: false,
            deleting: false
        })),
        None
    );
    assert_eq!(
        at(Some(NodeFacts {
            kubelet_version: Some("v1.34.4"),
            kubelet_identity: None,
            ready: true,
            deleting: true
        })),
        None
    );
    assert_eq!(
        at(Some(NodeFacts {
            kubelet_version: Some("v1.34.4"),
            kubelet_identity: None,
            ready: true,
            deleting: false
        })),
        Some(DriftReason::K8sVersionDrift)
    );
    // The kubelet identity: a node launched with another one drifts; a node without the label does not.
    let mut with_identity = ClassDrift::new(&class()).unwrap();
    with_identity.kubelet_identity = Some("new-id".into());
    let identity = |label: Option<&'static str>| {
        let node = NodeFacts {
            kubelet_version: Some("v1.34.4"),
            kubelet_identity: label,
            ready: true,
            deleting: false,
        };
        drift_reason(&claim_facts, &pool_drift, Some(&with_identity), Some(&node), None, t(NOW))
    };
    assert_eq!(identity(Some("old-id")), Some(DriftReason::KubeletIdentityDrift));
    assert_eq!(identity(Some("new-id")), None);
    assert_eq!(identity(None), None, "nodes from before the label are not drifted");
    assert_eq!(identity(Some("")), None);
    // Without the class, only core's checks run; without instance types, that check is skipped.
    assert_eq!(reason(&c, &pool(), None, "v0", None), None);
    assert_eq!(reason(&c, &pool(), Some(&class()), "v1.34.4", Some(&[])), None, "empty catalog");
}

#[test]
fn hashes_are_stable_and_ignore_unset_fields() {
    // Pinned: the hash must not change between builds or processes, or every node would drift on
    // upgrade. Change these only together with the hash versions.
    assert_eq!(
        hash_value(&serde_json::json!({"b": [2, 1], "a": "x", "c": null, "d": []})),
        hash_value(&serde_json::json!({"a": "x", "b": [1, 2]}))
    );
    assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_ne!(hash_value(&serde_json::json!({"a": false})), hash_value(&serde_json::json!({})));
    assert_eq!(pool().hash().unwrap(), pool().hash().unwrap());
    let a = hash_annotations(&pool(), Some(&class())).unwrap();
    assert_eq!(a.len(), 4);
    assert_eq!(a[ANNOTATION_NODEPOOL_HASH_VERSION], NODEPOOL_HASH_VERSION);
    assert_eq!(a[ANNOTATION_NODECLASS_HASH_VERSION], NODECLASS_HASH_VERSION);
    assert_eq!(hash_annotations(&pool(), None).unwrap().len(), 2);
}

#[test]
fn restamping_follows_the_version() {
    let current = hash_annotations(&pool(), Some(&class())).unwrap();
    assert!(restamp(&current, "p", Some("c"), false).is_empty(), "current version: nothing to do");
    let old = BTreeMap::from([
        (ANNOTATION_NODEPOOL_HASH.to_string(), "1".to_string()),
        (ANNOTATION_NODEPOOL_HASH_VERSION.to_string(), "v3".to_string()),
    ]);
    let out = restamp(&old, "p", Some("c"), false);
    assert_eq!(out[ANNOTATION_NODEPOOL_HASH], "p");
    assert_eq!(out[ANNOTATION_NODEPOOL_HASH_VERSION], NODEPOOL_HASH_VERSION);
    assert_eq!(out[ANNOTATION_NODECLASS_HASH], "c");
    assert_eq!(out.len(), 4);
    let drifted = restamp(&old, "p", Some("c"), true);
    assert!(!drifted.contains_key(ANNOTATION_NODEPOOL_HASH), "a drifted claim keeps its hash");
    assert_eq!(drifted.len(), 2);
}

#[test]
fn consolidatable_after_the_quiet_period() {
    let after = |s: u64| NillableDuration::After(Duration::from_secs(s));
    let init = Some(t("2026-06-01T11:00:00Z"));
    let now = t(NOW);
    assert!(consolidatable(init, None, after(3600), now), "an hour after initialization");
    assert!(!consolidatable(init, None, after(3601), now));
    assert!(!consolidatable(init, Some(t("2026-06-01T11:59:30Z")), after(60), now), "a pod event 30 s ago");
    assert!(consolidatable(init, Some(t("2026-06-01T11:58:00Z")), after(60), now));
    assert!(
        !consolidatable(Some(t("2026-06-01T11:59:30Z")), Some(t("2026-06-01T10:00:00Z")), after(60), now),
        "the later of the two"
    );
    assert!(!consolidatable(None, None, after(0), now), "not initialized");
    assert!(consolidatable(init, Some(now), after(0), now), "0s: at once");
    assert!(!consolidatable(init, None, NillableDuration::Never, now), "Never");
}

#[test]
fn reasons_round_trip() {
    for r in DriftReason::ALL {
        assert_eq!(DriftReason::parse(r.as_str()), Some(r));
        assert!(!r.message().is_empty());
    }
    assert_eq!(DriftReason::parse("Other"), None);
}
