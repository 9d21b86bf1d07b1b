//! Table tests of the upstream edge cases and property tests of the requirements algebra.

use super::*;
use proptest::prelude::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn reqs(list: Vec<Requirement>) -> Requirements {
    let mut out = Requirements::new();
    for r in list {
        out.add(r);
    }
    out
}

#[test]
fn operators_admit_what_kubernetes_admits() {
    let k = "k";
    let table: Vec<(Requirement, Option<&str>, bool)> = vec![
        (Requirement::is_in(k, ["a", "b"]), Some("a"), true),
        (Requirement::is_in(k, ["a", "b"]), Some("c"), false),
        (Requirement::is_in(k, ["a"]), None, false),
        (Requirement::not_in(k, ["a"]), Some("a"), false),
        (Requirement::not_in(k, ["a"]), Some("b"), true),
        (Requirement::not_in(k, ["a"]), None, true),
        (Requirement::exists(k), Some("x"), true),
        (Requirement::exists(k), None, false),
        (Requirement::does_not_exist(k), Some("x"), false),
        (Requirement::does_not_exist(k), None, true),
        (Requirement::greater_than(k, 4), Some("5"), true),
        (Requirement::greater_than(k, 4), Some("4"), false),
        (Requirement::greater_than(k, 4), Some("five"), false),
        (Requirement::greater_than(k, 4), None, false),
        (Requirement::less_than(k, 4), Some("3"), true),
        (Requirement::less_than(k, 4), Some("-1"), true),
        (Requirement::less_than(k, 4), Some("4"), false),
    ];
    for (r, value, want) in table {
        assert_eq!(r.admits(value), want, "{r} admits {value:?}");
    }
}

#[test]
fn intersections_of_upstream_edge_cases() {
    let k = "k";
    // In ∩ NotIn removes the excluded values.
    let r = Requirement::is_in(k, ["a", "b"]).intersect(&Requirement::not_in(k, ["a"]));
    assert_eq!(r.single_value(), Some("b"));
    // In ∩ In with nothing in common is empty.
    assert!(Requirement::is_in(k, ["a"]).intersect(&Requirement::is_in(k, ["b"])).is_empty());
    // Exists ∩ DoesNotExist is empty.
    assert!(Requirement::exists(k).intersect(&Requirement::does_not_exist(k)).is_empty());
    // NotIn ∩ DoesNotExist is DoesNotExist: the absent label still satisfies both.
    let r = Requirement::not_in(k, ["a"]).intersect(&Requirement::does_not_exist(k));
    assert!(!r.is_empty() && r.admits(None) && !r.admits(Some("b")));
    // Gt 1 ∩ Lt 3 admits only 2; Gt 2 ∩ Lt 3 admits nothing.
    let r = Requirement::greater_than(k, 1).intersect(&Requirement::less_than(k, 3));
    assert!(r.admits(Some("2")) && !r.admits(Some("3")) && !r.is_empty());
    assert!(Requirement::greater_than(k, 2).intersect(&Requirement::less_than(k, 3)).is_empty());
    // In ∩ Gt filters the listed values by the bound.
    let r = Requirement::is_in(k, ["2", "8", "16"]).intersect(&Requirement::greater_than(k, 4));
    assert_eq!(r.finite_values().unwrap(), ["16", "8"].into_iter().collect());
    // Gt on i64::MAX admits nothing.
    assert!(Requirement::greater_than(k, i64::MAX).intersect(&Requirement::less_than(k, 0)).is_empty());
    // minValues takes the larger bound.
    let r = Requirement::exists(k)
        .with_min_values(Some(2))
        .intersect(&Requirement::exists(k).with_min_values(Some(3)));
    assert_eq!(r.min_values(), Some(3));
}

#[test]
fn gte_and_lte_include_their_bound_and_meet_gt_and_lt_exactly() {
    let at_least_4 = operator("cpu", Operator::Gte, 4);
    let at_most_8 = operator("cpu", Operator::Lte, 8);
    for (value, want) in [("3", false), ("4", true), ("8", true), ("9", true), ("x", false)] {
        assert_eq!(at_least_4.admits(Some(value)), want, "Gte 4 on {value}");
    }
    for (value, want) in [("0", true), ("8", true), ("9", false), ("x", false)] {
        assert_eq!(at_most_8.admits(Some(value)), want, "Lte 8 on {value}");
    }
    assert!(!at_least_4.admits(None) && !at_most_8.admits(None), "like Gt and Lt, they need the label");
    let between = at_least_4.intersect(&at_most_8);
    assert!(between.admits(Some("4")) && between.admits(Some("8")) && !between.admits(Some("9")));
    // Gte n is Gt n-1: the same set, so the same requirement.
    assert_eq!(operator("cpu", Operator::Gte, 4), Requirement::greater_than("cpu", 3));
    assert_eq!(operator("cpu", Operator::Lte, 8), Requirement::less_than("cpu", 9));
    let empty = operator("cpu", Operator::Gte, 5).intersect(&Requirement::less_than("cpu", 5));
    assert!(empty.is_empty(), "Gte 5 and Lt 5 admit nothing");
    let point = operator("cpu", Operator::Gte, 5).intersect(&operator("cpu", Operator::Lte, 5));
    assert!(!point.is_empty() && point.admits(Some("5")), "Gte 5 and Lte 5 admit 5");
}

#[test]
fn integer_operators_at_the_bounds_of_int64() {
    let (min, max) = (i64::MIN.to_string(), i64::MAX.to_string());
    // Gte the least int64 is every integer, that one included; Lte the largest likewise.
    let at_least_min = operator("n", Operator::Gte, i64::MIN);
    let at_most_max = operator("n", Operator::Lte, i64::MAX);
    for r in [&at_least_min, &at_most_max] {
        for value in [min.as_str(), "0", max.as_str()] {
            assert!(r.admits(Some(value)), "{r} admits {value}");
        }
        assert!(!r.admits(Some("9223372036854775808")) && !r.admits(Some("x")) && !r.admits(None));
    }
    // Their API form reads back as the same set.
    for r in [&at_least_min, &at_most_max, &at_least_min.intersect(&at_most_max)] {
        let mut back = Requirement::any("n");
        for (op, values) in r.operator_form() {
            back = back.intersect(&Requirement::from_operator("n", op, &values, None).unwrap());
        }
        assert_eq!(&back, r, "{r}");
    }
    // No int64 is above the largest or below the least: nothing meets these.
    for r in [operator("n", Operator::Gt, i64::MAX), operator("n", Operator::Lt, i64::MIN)] {
        assert!(r.is_empty() && !r.admits_some_value(), "{r}");
        assert!(r.intersect(&Requirement::exists("n")).is_empty());
    }
    assert!(!operator("n", Operator::Gte, i64::MAX).is_empty());
    assert!(!operator("n", Operator::Gt, i64::MAX - 1).is_empty());
}

#[test]
fn deprecated_aliases_read_as_their_well_known_key() {
    let arch = Requirement::is_in("beta.kubernetes.io/arch", ["amd64"]);
    assert_eq!(arch.key(), labels::LABEL_ARCH);
    let zone = Requirement::from_operator(
        "failure-domain.beta.kubernetes.io/zone",
        Operator::NotIn,
        &["z".into()],
        None,
    )
    .unwrap();
    assert_eq!(zone.key(), labels::LABEL_ZONE);
    let pod = Requirements::from_labels(&labels(&[("beta.kubernetes.io/instance-type", "Standard_D2s_v5")]));
    assert!(pod.get(labels::LABEL_INSTANCE_TYPE).is_some_and(|r| r.admits(Some("Standard_D2s_v5"))));
    // A pool that says nothing about the alias still offers the well-known key.
    assert!(Requirements::new().compatible(&pod, true).is_ok());
    assert!(Requirements::new().compatible(&reqs(vec![arch]), true).is_ok());
}

#[test]
fn from_operator_rejects_bad_operands() {
    assert!(Requirement::from_operator("k", Operator::Gte, &["1.5".into()], None).is_err());
    assert!(Requirement::from_operator("k", Operator::Lte, &["1".into(), "2".into()], None).is_err());
    assert!(Requirement::from_operator("k", Operator::Gt, &["x".into()], None).is_err());
    assert!(Requirement::from_operator("k", Operator::Lt, &[], None).is_err());
    assert!(Requirement::from_operator("k", Operator::In, &[], None).is_err());
    assert!(Requirement::from_operator("k", Operator::Gt, &["3".into()], None).is_ok());
}

#[test]
fn compatibility_with_undefined_labels() {
    let pool = reqs(vec![Requirement::is_in(labels::LABEL_CAPACITY_TYPE, ["spot"])]);
    // A pod asking for a zone is fine: zones are decided by offerings later.
    let pod = reqs(vec![Requirement::is_in(labels::LABEL_ZONE, ["eastus-1"])]);
    assert!(pool.compatible(&pod, true).is_ok());
    assert!(pool.compatible(&pod, false).is_err());
    // A custom label the pool does not set cannot be required...
    let pod = reqs(vec![Requirement::is_in("team", ["a"])]);
    let err = pool.compatible(&pod, true).unwrap_err();
    assert!(matches!(err, Incompatibility::Undefined { .. }), "{err}");
    // ...but may be excluded.
    let pod = reqs(vec![Requirement::not_in("team", ["a"])]);
    assert!(pool.compatible(&pod, true).is_ok());
    let pod = reqs(vec![Requirement::does_not_exist("team")]);
    assert!(pool.compatible(&pod, true).is_ok());
    // A conflicting value is reported with both sides.
    let pod = reqs(vec![Requirement::is_in(labels::LABEL_CAPACITY_TYPE, ["on-demand"])]);
    let err = pool.compatible(&pod, true).unwrap_err().to_string();
    assert!(err.contains("on-demand") && err.contains("spot"), "{err}");
}

#[test]
fn min_values_counts_distinct_admitted_values() {
    let r = reqs(vec![Requirement::exists(labels::LABEL_SKU_FAMILY).with_min_values(Some(2))]);
    let d = labels(&[(labels::LABEL_SKU_FAMILY, "D")]);
    let d2 = labels(&[(labels::LABEL_SKU_FAMILY, "D")]);
    let e = labels(&[(labels::LABEL_SKU_FAMILY, "E")]);
    let err = r.check_min_values([&d, &d2]).unwrap_err();
    assert_eq!((err.needed, err.found), (2, 1));
    assert!(r.check_min_values([&d, &e]).is_ok());
}

#[test]
fn labels_match() {
    let r = reqs(vec![Requirement::is_in("a", ["x"]), Requirement::does_not_exist("b")]);
    assert!(r.matches(&labels(&[("a", "x")])));
    assert!(!r.matches(&labels(&[("a", "x"), ("b", "1")])));
    assert!(!r.matches(&labels(&[])));
}

// --- properties ----------------------------------------------------------------------------------

const VALUES: &[&str] = &["1", "2", "3", "5", "a", "b"];

fn arb_requirement() -> impl Strategy<Value = Requirement> {
    let subset = proptest::sample::subsequence(VALUES, 0..=VALUES.len());
    prop_oneof![
        subset
            .clone()
            .prop_filter("In needs a value", |v| !v.is_empty())
            .prop_map(|v| Requirement::is_in("k", v)),
        subset.prop_map(|v| Requirement::not_in("k", v)),
        Just(Requirement::exists("k")),
        Just(Requirement::does_not_exist("k")),
        (0i64..6).prop_map(|n| Requirement::greater_than("k", n)),
        (0i64..6).prop_map(|n| Requirement::less_than("k", n)),
        (0i64..6).prop_map(|n| operator("k", Operator::Gte, n)),
        (0i64..6).prop_map(|n| operator("k", Operator::Lte, n)),
    ]
}

fn operator(key: &str, op: Operator, n: i64) -> Requirement {
    Requirement::from_operator(key, op, &[n.to_string()], None).expect("an integer operand")
}

fn outcomes() -> impl Iterator<Item = Option<&'static str>> {
    std::iter::once(None).chain(VALUES.iter().copied().map(Some)).chain([Some("4"), Some("zz")])
}

proptest! {
    #![proptest_config(crate::proptest_config::config(256))]

    #[test]
    fn intersection_agrees_with_concrete_labels(a in arb_requirement(), b in arb_requirement()) {
        let both = a.intersect(&b);
        for value in outcomes() {
            prop_assert_eq!(both.admits(value), a.admits(value) && b.admits(value), "{} ∩ {} on {:?}", a, b, value);
        }
    }

    #[test]
    fn intersection_is_commutative(a in arb_requirement(), b in arb_requirement()) {
        let ab = a.intersect(&b);
        let ba = b.intersect(&a);
        for value in outcomes() {
            prop_assert_eq!(ab.admits(value), ba.admits(value));
        }
        prop_assert_eq!(ab.is_empty(), ba.is_empty());
    }

    #[test]
    fn emptiness_is_exact_on_the_sampled_universe(a in arb_requirement(), b in arb_requirement()) {
        let both = a.intersect(&b);
        // If some sampled outcome is admitted the set is certainly not empty.
        if outcomes().any(|v| both.admits(v)) {
            prop_assert!(!both.is_empty(), "{} claims empty", both);
        }
    }

    #[test]
    fn matches_agrees_with_admits(a in arb_requirement(), value in proptest::option::of(proptest::sample::select(VALUES))) {
        let set = reqs(vec![a.clone()]);
        let labels: BTreeMap<String, String> = value.iter().map(|v| ("k".to_string(), v.to_string())).collect();
        prop_assert_eq!(set.matches(&labels), a.admits(value));
    }
}
