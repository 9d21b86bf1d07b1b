//! Our NodeOverlay application (`scheduling/overlay.rs`) against upstream core's own: its NodeOverlay
//! controller (`pkg/controllers/nodeoverlay/controller.go`, `Reconcile`, on a fake API server) and
//! instance type store (`store.go`, `ApplyAll`), at the version pinned in hack/upstream-oracle/go.mod.
//!
//! A seeded generator draws cases: one to three NodePools (with and without template labels), each
//! with a few Azure sizes (labels, capacity, offerings by zone and capacity type), and one to five
//! overlays with weights (unset, equal, different), `price`, `priceAdjustment` absolute and percent,
//! up and down (to below zero, -100 %), capacity for extended resources (some the size has already,
//! an empty list, a restricted resource), and requirements on the size's labels, the offering's
//! (zone, capacity type), the pool's name and template labels, keys nothing defines, integer
//! operators on the size's CPU count, and a deprecated alias. Both sides apply the same overlays to
//! the same catalog, and every price (exactly, to the bit), whether a type was priced or extended by
//! an overlay, every capacity, and the overlays left out (Conflict or RuntimeValidation) are compared.
//! Capacities compare in whole units rounded down (cpu in millicores): upstream keeps `500m` of an
//! extended resource as half a unit, ours as none, and pods, which request whole units, fit neither.
//!
//! Requirement lists that meet a difference of upstream's requirements algebra documented by
//! requirements_oracle are not generated; [`documented_differences`] shows what they do to overlays.
//!
//! The upstream helper builds each size as a provider does: its requirements are its labels, with
//! each offering label's values over all its offerings; an offering's requirements are its labels.

use std::collections::BTreeMap;

use karpenter_azure::apis::nodeoverlay::{NodeOverlaySpec, OverlayRequirement};
use karpenter_azure::apis::{NodeOverlay, Operator, Quantity};
use karpenter_azure::model::resources::{format_resource_quantity, CPU, MEMORY, NVIDIA_GPU, PODS};
use karpenter_azure::model::selection::offering_labels;
use karpenter_azure::model::{
    CapacityType, InstanceType, Offering, Overhead, Requirement, Requirements, Resources,
};
use karpenter_azure::scheduling::overlay::{apply, PoolTypes};
use serde_json::{json, Value};

use crate::upstream_core::{ask, Rng};

const CASES: usize = 1500;
const SEED: u64 = 0x0f_e7a1;

const FAMILY: &str = "karpenter.azure.com/sku-family";
const SKU_CPU: &str = "karpenter.azure.com/sku-cpu";
const GPU_COUNT: &str = "karpenter.azure.com/sku-gpu-count";
const ZONES: [&str; 3] = ["eastus-1", "eastus-2", "eastus-3"];

/// (name, family, vCPUs, architecture, NVIDIA GPUs)
const SKUS: &[(&str, &str, u32, &str, i64)] = &[
    ("Standard_D2s_v5", "D", 2, "amd64", 0),
    ("Standard_D4s_v5", "D", 4, "amd64", 0),
    ("Standard_D8ps_v5", "D", 8, "arm64", 0),
    ("Standard_E4s_v5", "E", 4, "amd64", 0),
    ("Standard_F16s_v2", "F", 16, "amd64", 0),
    ("Standard_NC6s_v3", "N", 6, "amd64", 1),
];

/// (name, template labels)
const POOLS: &[(&str, &[(&str, &str)])] = &[
    ("general", &[]),
    ("team-a", &[("team", "a")]),
    ("tiered", &[("team", "b"), ("example.com/tier", "2")]),
];

const NAMES: [&str; 5] = ["alpha", "bravo", "charlie", "delta", "echo"];

struct Pool {
    name: &'static str,
    labels: BTreeMap<String, String>,
    types: Vec<InstanceType>,
}

struct Case {
    name: String,
    pools: Vec<Pool>,
    overlays: Vec<NodeOverlay>,
}

fn cents(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

fn instance_type(
    rng: &mut Rng,
    &(name, family, cpu, arch, gpus): &(&str, &str, u32, &str, i64),
) -> InstanceType {
    let mut capacity = Resources::new()
        .with(CPU, i64::from(cpu) * 1000)
        .with(MEMORY, i64::from(cpu) * (4 << 30))
        .with(PODS, 110);
    let mut labels = BTreeMap::from([
        ("node.kubernetes.io/instance-type".to_string(), name.to_string()),
        ("kubernetes.io/arch".to_string(), arch.to_string()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        (FAMILY.to_string(), family.to_string()),
        (SKU_CPU.to_string(), cpu.to_string()),
    ]);
    if gpus > 0 {
        capacity.set(NVIDIA_GPU, gpus);
        labels.insert(GPU_COUNT.to_string(), gpus.to_string());
    }
    let n_zones = 1 + rng.below(3);
    let zones = rng.subset(&ZONES, n_zones);
    let base = f64::from(cpu) * 0.048 * (0.8 + rng.below(40) as f64 / 100.0);
    let mut offerings = vec![];
    for zone in zones {
        for capacity_type in CapacityType::ALL {
            if rng.chance(25) {
                continue;
            }
            let price = match capacity_type {
                CapacityType::OnDemand => base,
                CapacityType::Spot => base * (0.1 + rng.below(40) as f64 / 100.0),
            };
            offerings.push(Offering {
                zone: zone.to_string(),
                capacity_type,
                price: cents(price),
                available: true,
            });
        }
    }
    if offerings.is_empty() {
        offerings.push(Offering {
            zone: ZONES[0].into(),
            capacity_type: CapacityType::OnDemand,
            price: cents(base),
            available: true,
        });
    }
    offerings.sort_by(|a, b| a.price.total_cmp(&b.price).then_with(|| a.zone.cmp(&b.zone)));
    InstanceType {
        name: name.into(),
        vcpus: cpu,
        memory_mib: u64::from(cpu) * 4096,
        labels,
        allocatable: capacity.clone(),
        capacity,
        overhead: Overhead::default(),
        offerings,
    }
}

fn req(key: &str, operator: Operator, values: &[&str]) -> OverlayRequirement {
    OverlayRequirement { key: key.into(), operator, values: values.iter().map(|v| v.to_string()).collect() }
}

fn requirement(rng: &mut Rng, pools: &[Pool]) -> OverlayRequirement {
    use Operator::*;
    let families = ["D", "E", "F", "N"];
    let cpu_operand = *rng.pick(&["1", "2", "3", "4", "5", "6", "8", "15", "16", "17"]);
    match rng.below(16) {
        0 => {
            let n = 1 + rng.below(2);
            req(FAMILY, In, &rng.subset(&families, n))
        }
        1 => req(FAMILY, NotIn, &[*rng.pick(&families)]),
        2 => {
            let names: Vec<&str> = SKUS.iter().map(|s| s.0).collect();
            let n = 1 + rng.below(2);
            req("node.kubernetes.io/instance-type", In, &rng.subset(&names, n))
        }
        3 => {
            let n = 1 + rng.below(2);
            let zones = rng.subset(&ZONES, n);
            req("topology.kubernetes.io/zone", *rng.pick(&[In, NotIn]), &zones)
        }
        4 => {
            let choices: [&[&str]; 5] =
                [&["spot"], &["on-demand"], &["spot", "on-demand"], &["reserved"], &["foo"]];
            let values = *rng.pick(&choices);
            req("karpenter.sh/capacity-type", In, values)
        }
        5 | 6 => req(SKU_CPU, *rng.pick(&[Gt, Lt, Gte, Lte]), &[cpu_operand]),
        7 => match rng.below(3) {
            0 => req("kubernetes.io/arch", Exists, &[]),
            1 => req("kubernetes.io/arch", DoesNotExist, &[]),
            _ => req("kubernetes.io/arch", In, &["arm64"]),
        },
        8 => {
            let pool = rng.pick(pools).name;
            req("karpenter.sh/nodepool", *rng.pick(&[In, NotIn]), &[pool])
        }
        9 => match rng.below(4) {
            0 => req("team", In, &["a"]),
            1 => req("team", NotIn, &["a"]),
            2 => req("team", Exists, &[]),
            _ => req("team", DoesNotExist, &[]),
        },
        10 => req("example.com/tier", *rng.pick(&[Gte, Lt]), &["2"]),
        11 => match rng.below(4) {
            0 => req("example.com/undefined", In, &["x"]),
            1 => req("example.com/undefined", NotIn, &["x"]),
            2 => req("example.com/undefined", Exists, &[]),
            _ => req("example.com/undefined", DoesNotExist, &[]),
        },
        12 => match rng.below(2) {
            0 => req(GPU_COUNT, Exists, &[]),
            _ => req(GPU_COUNT, Gt, &["0"]),
        },
        13 => req("beta.kubernetes.io/arch", In, &["amd64"]),
        14 => req("kubernetes.azure.com/scalesetpriority", In, &["spot"]),
        _ => req(FAMILY, In, &[*rng.pick(&families)]),
    }
}

/// Whether a requirement list meets, on some key, a difference of upstream's requirements algebra
/// that requirements_oracle documents: nothing meets it (upstream reads DoesNotExist), or NotIn
/// with Exists or a bound (upstream reads NotIn alone). [`documented_differences`] covers those.
fn hits_documented_difference(requirements: &[OverlayRequirement]) -> bool {
    let mut ours = Requirements::new();
    for r in requirements {
        ours.add(
            Requirement::from_operator(&r.key, r.operator, &r.values, None).expect("a valid requirement"),
        );
    }
    let hits = ours.iter().any(|r| {
        let not_in = r.operator_form().iter().any(|(op, _)| *op == Operator::NotIn);
        r.is_empty() || (not_in && !r.admits(None))
    });
    hits
}

fn overlay(rng: &mut Rng, name: &str, pools: &[Pool]) -> NodeOverlay {
    let mut requirements = vec![];
    for _ in 0..rng.below(4) {
        let candidate = requirement(rng, pools);
        requirements.push(candidate);
        if hits_documented_difference(&requirements) {
            requirements.pop();
        }
    }
    let weight = *rng.pick(&[None, Some(1), Some(1), Some(5), Some(10), Some(10), Some(10000)]);
    let (mut price, mut price_adjustment) = (None, None);
    match rng.below(20) {
        0..=8 => {
            let adjustments =
                ["+0.5", "-0.1", "-5", "+.25", "+0", "+10%", "+150%", "-30%", "-99.5%", "-100%", "-0.05"];
            price_adjustment = Some(rng.pick(&adjustments).to_string());
        }
        9..=13 => price = Some(rng.pick(&["0", "0.01", "1", "2.5", "0.333"]).to_string()),
        _ => {}
    }
    let capacity = match rng.below(20) {
        0..=7 => {
            let options = [
                ("example.com/fpga", *rng.pick(&["1", "2", "4"])),
                ("example.com/licence", *rng.pick(&["3", "1k", "500m"])),
                (NVIDIA_GPU, "8"),
            ];
            let n = 1 + rng.below(2);
            Some(
                rng.subset(&options, n)
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), Quantity::from(v)))
                    .collect(),
            )
        }
        8 => Some(BTreeMap::new()),
        9 => Some(BTreeMap::from([(CPU.to_string(), Quantity::from("1"))])),
        _ => None,
    };
    NodeOverlay::new(name, NodeOverlaySpec { requirements, price_adjustment, price, capacity, weight })
}

fn cases() -> Vec<Case> {
    let mut rng = Rng::new(SEED);
    (0..CASES)
        .map(|i| {
            let n = 1 + rng.below(3);
            let pools: Vec<Pool> = rng
                .subset(POOLS, n)
                .into_iter()
                .map(|(name, labels)| {
                    let n = 2 + rng.below(4);
                    let types = rng.subset(SKUS, n).iter().map(|sku| instance_type(&mut rng, sku)).collect();
                    let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                    Pool { name, labels, types }
                })
                .collect();
            let n = 1 + rng.below(5);
            let overlays =
                rng.subset(&NAMES, n).into_iter().map(|name| overlay(&mut rng, name, &pools)).collect();
            Case { name: format!("overlays-{i}"), pools, overlays }
        })
        .collect()
}

fn upstream_input(case: &Case) -> Value {
    let pools: Vec<Value> = case
        .pools
        .iter()
        .map(|p| {
            let types: Vec<Value> = p
                .types
                .iter()
                .map(|t| {
                    let capacity: BTreeMap<&str, String> =
                        t.capacity.iter().map(|(r, n)| (r, format_resource_quantity(r, n))).collect();
                    let offerings: Vec<Value> = t
                        .offerings
                        .iter()
                        .map(|o| {
                            let labels: BTreeMap<&str, &str> = offering_labels(o).into_iter().collect();
                            json!({"labels": labels, "price": o.price})
                        })
                        .collect();
                    json!({"name": t.name, "labels": t.labels, "capacity": capacity, "offerings": offerings})
                })
                .collect();
            json!({"name": p.name, "labels": p.labels, "types": types})
        })
        .collect();
    json!({"name": case.name, "pools": pools, "overlays": case.overlays})
}

#[derive(Default)]
struct Report {
    compared: usize,
    problems: Vec<String>,
}

impl Report {
    fn check<T: PartialEq + std::fmt::Debug>(&mut self, case: &Case, what: &str, ours: T, upstream: T) {
        self.compared += 1;
        if ours != upstream {
            self.problems.push(format!(
                "{}: {what}: ours {ours:?}, upstream {upstream:?}\n{}",
                case.name,
                show(case)
            ));
        }
    }
}

/// The overlays of a case as they read in manifests, for a difference.
fn show(case: &Case) -> String {
    let lines: Vec<String> = case
        .overlays
        .iter()
        .map(|o| {
            let reqs: Vec<String> = o
                .spec
                .requirements
                .iter()
                .map(|r| format!("{} {:?} {:?}", r.key, r.operator, r.values))
                .collect();
            format!(
                "  {} weight {:?} [{}] price {:?} priceAdjustment {:?} capacity {:?}",
                o.name(),
                o.spec.weight,
                reqs.join("; "),
                o.spec.price,
                o.spec.price_adjustment,
                o.spec
                    .capacity
                    .as_ref()
                    .map(|c| c.iter().map(|(k, v)| format!("{k}={}", v.as_str())).collect::<Vec<_>>())
            )
        })
        .collect();
    let pools: Vec<String> = case
        .pools
        .iter()
        .map(|p| {
            format!(
                "  pool {} {:?}: {}",
                p.name,
                p.labels,
                p.types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    format!("{}\n{}", pools.join("\n"), lines.join("\n"))
}

fn compare_case(report: &mut Report, case: &Case, answer: &Value) {
    let pools: Vec<PoolTypes> =
        case.pools.iter().map(|p| PoolTypes { name: p.name, labels: &p.labels, types: &p.types }).collect();
    let ours = apply(&pools, &case.overlays);
    let our_rejected: BTreeMap<&str, &str> =
        ours.rejected.iter().map(|(k, v)| (k.as_str(), v.reason())).collect();
    let their_rejected: BTreeMap<&str, &str> = answer["rejected"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap()))
        .collect();
    report.check(case, "overlays left out", our_rejected, their_rejected);

    for (i, pool) in case.pools.iter().enumerate() {
        let theirs = &answer["pools"][pool.name];
        for input in &pool.types {
            let name = &input.name;
            let ours_type = ours.types[i].iter().find(|t| &t.name == name).expect("every type comes back");
            let their_type = &theirs[name.as_str()];
            let at = |what: &str| format!("{}/{name}: {what}", pool.name);
            for (o, offering) in input.offerings.iter().enumerate() {
                let ours_price = ours_type
                    .offerings
                    .iter()
                    .find(|x| x.zone == offering.zone && x.capacity_type == offering.capacity_type)
                    .expect("every offering comes back")
                    .price;
                let bits = their_type["offerings"][o]["priceBits"].as_u64().expect("priceBits");
                let what = at(&format!(
                    "{} {} price (was {})",
                    offering.zone,
                    offering.capacity_type.as_str(),
                    offering.price
                ));
                report.check(case, &what, ours_price, f64::from_bits(bits));
            }
            let their_priced =
                their_type["offerings"].as_array().unwrap().iter().any(|o| o["overlaid"].as_bool().unwrap());
            report.check(
                case,
                &at("priced by an overlay"),
                ours.price_overlaid[i].contains(name),
                their_priced,
            );
            let our_capacity: BTreeMap<String, i64> =
                ours_type.capacity.iter().map(|(r, n)| (r.to_string(), n)).collect();
            let their_capacity: BTreeMap<String, i64> = their_type["capacity"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(r, n)| (r.clone(), n.as_i64().unwrap()))
                .collect();
            report.check(case, &at("capacity"), our_capacity, their_capacity);
            let their_extended = their_type["capacityOverlaid"].as_bool().unwrap();
            report.check(
                case,
                &at("capacity extended by an overlay"),
                ours.capacity_overlaid[i].contains(name),
                their_extended,
            );
        }
    }
}

#[test]
fn overlays_match_upstream_case_by_case() {
    let cases = cases();
    let input: Vec<Value> = cases.iter().map(upstream_input).collect();
    let started = std::time::Instant::now();
    let answers = ask("overlays", &input);
    eprintln!("upstream answered in {:?}", started.elapsed());
    let mut report = Report::default();
    for (case, answer) in cases.iter().zip(&answers) {
        compare_case(&mut report, case, answer);
    }
    eprintln!("{} cases, {} answers compared", cases.len(), report.compared);
    assert!(
        report.problems.is_empty(),
        "{} differences from upstream:\n{}",
        report.problems.len(),
        report.problems.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// Overlays whose requirements meet a documented difference of upstream's requirements algebra (see
/// requirements_oracle): upstream applies them where no label satisfies them, ours does not.
/// - `example.com/tier Gte 2` and `Lt 2`: nothing meets both; upstream reads DoesNotExist, which a
///   pool without the label meets, so it reprices that pool's sizes.
/// - `team Exists` and `team NotIn [a]`: the label must exist; upstream reads NotIn, which a pool
///   without the label meets.
///
/// Both cases apply to a pool without the label; upstream reprices its size, ours leaves it.
#[test]
fn documented_differences() {
    let mut rng = Rng::new(SEED);
    let size = instance_type(&mut rng, &SKUS[0]);
    let contradiction =
        [req("example.com/tier", Operator::Gte, &["2"]), req("example.com/tier", Operator::Lt, &["2"])];
    let must_exist = [req("team", Operator::Exists, &[]), req("team", Operator::NotIn, &["a"])];
    let cases: Vec<Case> = [("contradiction", &contradiction), ("must-exist", &must_exist)]
        .into_iter()
        .map(|(name, requirements)| {
            let spec = NodeOverlaySpec {
                requirements: requirements.to_vec(),
                price: Some("1".into()),
                price_adjustment: None,
                capacity: None,
                weight: None,
            };
            let pool = Pool { name: "general", labels: BTreeMap::new(), types: vec![size.clone()] };
            Case { name: name.into(), pools: vec![pool], overlays: vec![NodeOverlay::new(name, spec)] }
        })
        .collect();
    let answers = ask("overlays", &cases.iter().map(upstream_input).collect::<Vec<_>>());
    for (case, answer) in cases.iter().zip(&answers) {
        assert!(hits_documented_difference(&case.overlays[0].spec.requirements), "{}", case.name);
        let pools =
            [PoolTypes { name: "general", labels: &case.pools[0].labels, types: &case.pools[0].types }];
        let ours = apply(&pools, &case.overlays);
        let name = &case.pools[0].types[0].name;
        assert!(!ours.price_overlaid[0].contains(name), "{}: ours applies the overlay", case.name);
        let theirs = &answer["pools"]["general"][name.as_str()]["offerings"];
        let upstream_priced = theirs.as_array().unwrap().iter().all(|o| o["overlaid"].as_bool().unwrap());
        assert!(
            upstream_priced,
            "{}: upstream no longer applies the overlay; drop the documented difference",
            case.name
        );
    }
}

#[test]
fn generated_cases_cover_what_overlays_vary_on() {
    let mut counts = BTreeMap::<&str, usize>::new();
    for case in cases() {
        let pools: Vec<PoolTypes> = case
            .pools
            .iter()
            .map(|p| PoolTypes { name: p.name, labels: &p.labels, types: &p.types })
            .collect();
        let out = apply(&pools, &case.overlays);
        let mut count = |what, yes: bool| *counts.entry(what).or_default() += usize::from(yes);
        count("a conflict", out.rejected.values().any(|r| r.reason() == "Conflict"));
        count(
            "a runtime validation failure",
            out.rejected.values().any(|r| r.reason() == "RuntimeValidation"),
        );
        let weights: Vec<i32> = case.overlays.iter().map(NodeOverlay::weight).collect();
        count("equal weights", (1..weights.len()).any(|i| weights[..i].contains(&weights[i])));
        for (i, pool) in case.pools.iter().enumerate() {
            let priced = out.price_overlaid[i].len();
            count("a pool with some types priced and some not", priced > 0 && priced < pool.types.len());
            count("a type extended", !out.capacity_overlaid[i].is_empty());
            let free = out.types[i].iter().flat_map(|t| &t.offerings).any(|o| o.price == 0.0);
            count("an offering priced at 0", free);
            let some_offerings = out.types[i].iter().zip(&pool.types).any(|(t, _)| {
                let input = pool.types.iter().find(|x| x.name == t.name).unwrap();
                let changed = t.offerings.iter().filter(|o| !input.offerings.contains(o)).count();
                changed > 0 && changed < t.offerings.len()
            });
            count("a type with some offerings priced and some not", some_offerings);
            let gpu = out.types[i].iter().any(|t| {
                let input = pool.types.iter().find(|x| x.name == t.name).unwrap();
                input.capacity.get(NVIDIA_GPU) > 0
                    && t.capacity.get(NVIDIA_GPU) != input.capacity.get(NVIDIA_GPU)
            });
            count("a resource the type has already, overridden", gpu);
        }
    }
    eprintln!("{counts:#?}");
    for (what, n) in &counts {
        assert!(*n >= 100, "only {n} cases with {what}");
    }
}
