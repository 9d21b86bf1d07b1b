//! NodeOverlay application: weights and ties, each kind of price change, capacity merging,
//! requirements that do not match, the price floor, conflicts and invalid overlays.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::apis::nodeoverlay::{NodeOverlaySpec, OverlayRequirement};
use crate::apis::{Operator, Quantity};
use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE};
use crate::model::resources::{CPU, MEMORY};
use crate::model::{CapacityType, Offering, Overhead, Resources};

const FAMILY: &str = "karpenter.azure.com/sku-family";

fn instance_type(name: &str, family: &str, price: f64) -> InstanceType {
    let capacity = Resources::new().with(CPU, 4000).with(MEMORY, 16 << 30);
    let offerings = [
        ("z-1", CapacityType::OnDemand, price),
        ("z-2", CapacityType::OnDemand, price),
        ("z-1", CapacityType::Spot, price / 4.0),
    ]
    .iter()
    .map(|(zone, capacity_type, price)| Offering {
        zone: zone.to_string(),
        capacity_type: *capacity_type,
        price: *price,
        available: true,
    })
    .collect();
    let mut it = InstanceType {
        name: name.into(),
        vcpus: 4,
        memory_mib: 16384,
        labels: BTreeMap::from([
            (LABEL_INSTANCE_TYPE.to_string(), name.to_string()),
            (FAMILY.to_string(), family.to_string()),
        ]),
        allocatable: capacity.clone(),
        capacity,
        overhead: Overhead::default(),
        offerings,
    };
    it.offerings.sort_by(|a, b| a.price.total_cmp(&b.price).then_with(|| a.zone.cmp(&b.zone)));
    it
}

fn catalog() -> Vec<InstanceType> {
    vec![instance_type("Standard_D4s_v5", "D", 0.2), instance_type("Standard_F4s_v2", "F", 0.17)]
}

fn req(key: &str, operator: Operator, values: &[&str]) -> OverlayRequirement {
    OverlayRequirement { key: key.into(), operator, values: values.iter().map(|v| v.to_string()).collect() }
}

fn overlay(name: &str, weight: Option<i32>, requirements: Vec<OverlayRequirement>) -> NodeOverlay {
    NodeOverlay::new(
        name,
        NodeOverlaySpec { requirements, price_adjustment: None, price: None, capacity: None, weight },
    )
}

fn adjusted(name: &str, weight: Option<i32>, family: &str, change: &str) -> NodeOverlay {
    let mut o = overlay(name, weight, vec![req(FAMILY, Operator::In, &[family])]);
    o.spec.price_adjustment = Some(change.into());
    o
}

fn priced(name: &str, weight: Option<i32>, family: &str, price: &str) -> NodeOverlay {
    let mut o = overlay(name, weight, vec![req(FAMILY, Operator::In, &[family])]);
    o.spec.price = Some(price.into());
    o
}

fn with_capacity(name: &str, weight: Option<i32>, family: &str, capacity: &[(&str, &str)]) -> NodeOverlay {
    let mut o = overlay(name, weight, vec![req(FAMILY, Operator::In, &[family])]);
    o.spec.capacity = Some(capacity.iter().map(|(k, v)| (k.to_string(), Quantity::from(*v))).collect());
    o
}

fn run(overlays: &[NodeOverlay]) -> Overlaid {
    let types = catalog();
    let labels = BTreeMap::new();
    apply(&[PoolTypes { name: "general", labels: &labels, types: &types }], overlays)
}

fn prices(out: &Overlaid, name: &str) -> Vec<(String, CapacityType, f64)> {
    let it = out.types[0].iter().find(|t| t.name == name).unwrap();
    let mut p: Vec<_> = it.offerings.iter().map(|o| (o.zone.clone(), o.capacity_type, o.price)).collect();
    p.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    p
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn percent_adjustment_makes_the_family_cheapest_and_resorts() {
    let out = run(&[adjusted("cheaper-d", None, "D", "-30%")]);
    assert!(out.rejected.is_empty());
    let d = out.types[0].iter().find(|t| t.name == "Standard_D4s_v5").unwrap();
    assert!(close(d.offerings[0].price, 0.05 * 0.7));
    assert!(close(d.price(CapacityType::OnDemand).unwrap(), 0.14));
    // 0.14 < 0.17: the D size now sorts first.
    assert_eq!(out.types[0][0].name, "Standard_D4s_v5");
    assert_eq!(out.price_overlaid[0], BTreeSet::from(["Standard_D4s_v5".to_string()]));
    let f = out.types[0].iter().find(|t| t.name == "Standard_F4s_v2").unwrap();
    assert_eq!(f, &catalog()[1], "a type no requirement matches is untouched");
}

#[test]
fn absolute_adjustments_and_absolute_price() {
    let up = run(&[adjusted("up", None, "F", "+0.5")]);
    assert!(prices(&up, "Standard_F4s_v2").iter().all(|(_, ct, p)| match ct {
        CapacityType::OnDemand => close(*p, 0.67),
        CapacityType::Spot => close(*p, 0.0425 + 0.5),
    }));
    let set = run(&[priced("flat", None, "F", "0.01")]);
    assert!(prices(&set, "Standard_F4s_v2").iter().all(|(_, _, p)| close(*p, 0.01)));
    let plus = run(&[adjusted("plus", None, "F", "+10%")]);
    assert!(close(
        plus.types[0]
            .iter()
            .find(|t| t.name == "Standard_F4s_v2")
            .unwrap()
            .price(CapacityType::OnDemand)
            .unwrap(),
        0.187
    ));
}

#[test]
fn a_price_never_goes_below_zero() {
    let out = run(&[adjusted("free", None, "D", "-5")]);
    assert!(prices(&out, "Standard_D4s_v5").iter().all(|(_, _, p)| *p == 0.0));
    let all = run(&[adjusted("all", None, "D", "-100%")]);
    assert!(prices(&all, "Standard_D4s_v5").iter().all(|(_, _, p)| *p == 0.0));
}

#[test]
fn offering_requirements_select_offerings() {
    let mut spot = adjusted("spot", None, "D", "-50%");
    spot.spec.requirements.push(req(LABEL_CAPACITY_TYPE, Operator::In, &["spot"]));
    let out = run(&[spot]);
    for (zone, ct, p) in prices(&out, "Standard_D4s_v5") {
        let want = if ct == CapacityType::Spot { 0.025 } else { 0.2 };
        assert!(close(p, want), "{zone} {ct:?} {p}");
    }
    let mut zonal = adjusted("zonal", None, "D", "+1");
    zonal.spec.requirements.push(req(LABEL_ZONE, Operator::NotIn, &["z-1"]));
    let out = run(&[zonal]);
    for (zone, _, p) in prices(&out, "Standard_D4s_v5") {
        assert_eq!(zone == "z-2", p > 1.0, "{zone} {p}");
    }
}

#[test]
fn nodepool_and_template_labels_take_part() {
    let types = catalog();
    let team = BTreeMap::from([("team".to_string(), "a".to_string())]);
    let none = BTreeMap::new();
    let mut o = adjusted("team-a", None, "D", "-50%");
    o.spec.requirements.push(req("team", Operator::In, &["a"]));
    o.spec.requirements.push(req(LABEL_NODEPOOL, Operator::In, &["a", "b"]));
    let out = apply(
        &[
            PoolTypes { name: "a", labels: &team, types: &types },
            PoolTypes { name: "b", labels: &none, types: &types },
            PoolTypes { name: "c", labels: &team, types: &types },
        ],
        &[o],
    );
    assert_eq!(out.price_overlaid[0].len(), 1);
    assert!(out.price_overlaid[1].is_empty(), "pool b lacks the team label");
    assert!(out.price_overlaid[2].is_empty(), "pool c is not named");
}

#[test]
fn the_highest_weight_sets_the_price() {
    let out = run(&[adjusted("low", Some(1), "D", "-90%"), priced("high", Some(50), "D", "0.3")]);
    assert!(out.rejected.is_empty());
    assert!(prices(&out, "Standard_D4s_v5").iter().all(|(_, _, p)| close(*p, 0.3)));
    // Unset weight counts as 0, below any set weight.
    let out = run(&[adjusted("unset", None, "D", "-90%"), priced("one", Some(1), "D", "0.3")]);
    assert!(prices(&out, "Standard_D4s_v5").iter().all(|(_, _, p)| close(*p, 0.3)));
}

#[test]
fn equal_weights_on_the_same_offerings_conflict_and_the_later_name_wins() {
    let out = run(&[adjusted("alpha", Some(5), "D", "-90%"), priced("beta", Some(5), "D", "0.3")]);
    // "beta" comes first at equal weight (name order, descending); "alpha" then conflicts.
    assert_eq!(out.rejected, BTreeMap::from([("alpha".to_string(), Rejection::Conflict)]));
    assert!(prices(&out, "Standard_D4s_v5").iter().all(|(_, _, p)| close(*p, 0.3)));
    // Equal weights on disjoint types do not conflict.
    let out = run(&[adjusted("alpha", Some(5), "D", "-90%"), priced("beta", Some(5), "F", "0.3")]);
    assert!(out.rejected.is_empty());
}

#[test]
fn a_lower_weight_takes_the_weight_slot_so_its_peer_conflicts() {
    // Upstream tracks the lowest weight that matched an offering even when it did not price it.
    let out = run(&[
        priced("top", Some(10), "D", "0.3"),
        adjusted("mid-a", Some(5), "D", "-10%"),
        adjusted("mid-b", Some(5), "D", "-20%"),
    ]);
    assert_eq!(out.rejected, BTreeMap::from([("mid-a".to_string(), Rejection::Conflict)]));
    assert!(prices(&out, "Standard_D4s_v5").iter().all(|(_, _, p)| close(*p, 0.3)));
}

#[test]
fn capacity_merges_by_weight_and_conflicts_only_on_shared_resources() {
    let out = run(&[
        with_capacity("low", Some(1), "D", &[("example.com/a", "1"), ("example.com/b", "7")]),
        with_capacity("high", Some(9), "D", &[("example.com/a", "4")]),
    ]);
    assert!(out.rejected.is_empty());
    let d = out.types[0].iter().find(|t| t.name == "Standard_D4s_v5").unwrap();
    assert_eq!(d.capacity.get("example.com/a"), 4);
    assert_eq!(d.capacity.get("example.com/b"), 7);
    assert_eq!(d.allocatable.get("example.com/a"), 4);
    assert_eq!(d.capacity.get(CPU), 4000, "standard resources are kept");
    assert!(out.price_overlaid[0].is_empty(), "capacity alone prices nothing");
    assert_eq!(out.capacity_overlaid[0], BTreeSet::from(["Standard_D4s_v5".to_string()]));

    let out = run(&[
        with_capacity("x", Some(3), "D", &[("example.com/a", "1")]),
        with_capacity("y", Some(3), "D", &[("example.com/b", "1")]),
    ]);
    assert!(out.rejected.is_empty());
    let out = run(&[
        with_capacity("x", Some(3), "D", &[("example.com/a", "1")]),
        with_capacity("y", Some(3), "D", &[("example.com/a", "2")]),
    ]);
    assert_eq!(out.rejected, BTreeMap::from([("x".to_string(), Rejection::Conflict)]));
}

#[test]
fn a_conflict_anywhere_leaves_the_overlay_out_everywhere() {
    let types = catalog();
    let none = BTreeMap::new();
    let mut a_only = priced("zz", Some(2), "D", "0.3");
    a_only.spec.requirements.push(req(LABEL_NODEPOOL, Operator::In, &["a"]));
    let everywhere = adjusted("aa", Some(2), "D", "-50%");
    let out = apply(
        &[
            PoolTypes { name: "a", labels: &none, types: &types },
            PoolTypes { name: "b", labels: &none, types: &types },
        ],
        &[a_only, everywhere],
    );
    assert_eq!(out.rejected.get("aa"), Some(&Rejection::Conflict));
    assert!(out.price_overlaid[1].is_empty(), "pool b did not get the left-out overlay");
}

#[test]
fn unreadable_overlays_are_left_out() {
    let cpu = with_capacity("cpu", None, "D", &[("cpu", "2")]);
    let mut bad = overlay("bad", None, vec![req("karpenter.azure.com/sku-cpu", Operator::Gt, &["many"])]);
    bad.spec.price = Some("1".into());
    let mut both = adjusted("both", None, "D", "-1%");
    both.spec.price = Some("1".into());
    let out = run(&[cpu, bad, both]);
    assert_eq!(out.rejected.len(), 3);
    assert!(out.rejected.values().all(|r| r.reason() == "RuntimeValidation"));
    assert_eq!(out.types[0], {
        let mut c = catalog();
        c.sort_by(|a, b| a.sort_price().total_cmp(&b.sort_price()).then_with(|| a.name.cmp(&b.name)));
        c
    });
}

#[test]
fn a_fractional_capacity_counts_the_whole_units_a_pod_can_have() {
    let out = run(&[with_capacity(
        "licences",
        None,
        "D",
        &[("example.com/licence", "1500m"), ("example.com/seat", "500m")],
    )]);
    assert!(out.rejected.is_empty());
    let d = out.types[0].iter().find(|t| t.name == "Standard_D4s_v5").unwrap();
    assert_eq!(d.capacity.get("example.com/licence"), 1);
    assert_eq!(d.allocatable.get("example.com/seat"), 0);
}

#[test]
fn a_capacity_type_no_value_of_which_is_one_is_left_out() {
    let mut unknown = adjusted("unknown", None, "D", "-50%");
    unknown.spec.requirements.push(req(LABEL_CAPACITY_TYPE, Operator::In, &["foo"]));
    let mut one_known = adjusted("one-known", None, "F", "-50%");
    one_known.spec.requirements.push(req(LABEL_CAPACITY_TYPE, Operator::In, &["foo", "spot"]));
    // NotIn names values to avoid: none need be a capacity type.
    let mut not_in = adjusted("not-in", None, "D", "+1");
    not_in.spec.requirements.push(req(LABEL_CAPACITY_TYPE, Operator::NotIn, &["foo"]));
    let out = run(&[unknown, one_known, not_in]);
    assert_eq!(out.rejected.keys().collect::<Vec<_>>(), ["unknown"]);
    assert_eq!(out.rejected["unknown"].reason(), "RuntimeValidation");
    let d = prices(&out, "Standard_D4s_v5");
    assert!(d.iter().all(|(_, ct, p)| close(*p, if *ct == CapacityType::Spot { 1.05 } else { 1.2 })));
    let f = prices(&out, "Standard_F4s_v2");
    assert!(f.iter().any(|(_, ct, p)| *ct == CapacityType::Spot && close(*p, 0.17 / 4.0 / 2.0)));
}

#[test]
fn price_change_parsing_follows_the_crd_patterns() {
    assert_eq!(PriceChange::parse(Some("0.5"), None), Ok(Some(PriceChange::Set(0.5))));
    assert_eq!(PriceChange::parse(None, Some("-30%")), Ok(Some(PriceChange::Percent(-30.0))));
    assert_eq!(PriceChange::parse(None, Some("+.5")), Ok(Some(PriceChange::Add(0.5))));
    assert!(PriceChange::parse(None, Some("30%")).is_err());
    assert!(PriceChange::parse(Some("-1"), None).is_err());
    assert_eq!(PriceChange::parse(None, None), Ok(None));
}

proptest! {
    #![proptest_config(crate::proptest_config::config(128))]

    /// Whatever the overlays, offerings stay sorted by price, prices stay non-negative, and a type no
    /// overlay names keeps its offerings.
    #[test]
    fn prices_stay_sorted_and_non_negative(
        changes in prop::collection::vec((0i32..4, prop::bool::ANY, -150.0f64..150.0, prop::bool::ANY), 0..6)
    ) {
        let overlays: Vec<NodeOverlay> = changes
            .iter()
            .enumerate()
            .map(|(i, (w, percent, amount, on_d))| {
                let family = if *on_d { "D" } else { "F" };
                let change = if *percent {
                    format!("{:+}%", amount.clamp(-99.0, 150.0))
                } else {
                    format!("{:+}", amount / 100.0)
                };
                adjusted(&format!("o{i}"), (*w > 0).then_some(*w), family, &change)
            })
            .collect();
        let out = run(&overlays);
        for it in &out.types[0] {
            prop_assert!(it.offerings.windows(2).all(|w| w[0].price <= w[1].price));
            prop_assert!(it.offerings.iter().all(|o| o.price >= 0.0));
        }
        prop_assert!(out.types[0].windows(2).all(|w| w[0].sort_price() <= w[1].sort_price()));
    }
}
