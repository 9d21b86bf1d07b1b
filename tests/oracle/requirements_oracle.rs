//! Our requirements algebra (`model/requirements.rs`) against upstream core's own (`pkg/scheduling`,
//! `requirement.go` and `requirements.go`, at the version pinned in hack/upstream-oracle/go.mod).
//!
//! A seeded generator draws cases: two requirement lists A and B on a few keys (well-known, the
//! provider's, custom, and the deprecated aliases upstream normalizes), with every operator (In, NotIn,
//! Exists, DoesNotExist, Gt, Lt, Gte, Lte), word and integer values, integer operands at and around
//! the int64 bounds, minValues, and several entries on one key so that intersections get narrow or
//! empty. Each list is folded into one Requirements on both sides, and for A, B and their intersection
//! every key is compared: which probe values it admits (`Has`), whether a node without the label meets
//! it, minValues; then, for each key both define, whether the two requirements share a value
//! (`HasIntersection`); then `Compatible` both ways, with and without `AllowUndefinedWellKnownLabels`.
//!
//! Upstream keeps no "the label must exist" flag: it reads absence from the operator it reports, so a
//! few of its answers differ from ours, and ours are the ones kube-scheduler agrees with. Those
//! differences are listed in [`absence_difference`] with their reasons, each only where it applies;
//! any other difference fails the test. Upstream's `Compatible` is checked through a model of it
//! ([`compatible_model`]) that must reproduce every one of its answers, so a `Compatible` difference
//! is traced to the per-key difference it follows from.

use std::collections::{BTreeMap, BTreeSet};

use karpenter_azure::model::labels::{is_well_known, normalized_key};
use karpenter_azure::model::requirements::{Operator, Requirement, Requirements};
use serde_json::{json, Value};

use crate::upstream_core::{ask, Rng};

const CASES: usize = 4000;
const SEED: u64 = 0x5eed_4e71;

/// Keys and the words their In/NotIn values come from; integer values come from [`INTS`].
const KEYS: &[(&str, &[&str])] = &[
    ("topology.kubernetes.io/zone", &["eastus-1", "eastus-2", "eastus-3"]),
    ("kubernetes.io/arch", &["amd64", "arm64"]),
    ("karpenter.sh/capacity-type", &["on-demand", "spot"]),
    ("node.kubernetes.io/instance-type", &["Standard_D2s_v5", "Standard_D4s_v5"]),
    ("karpenter.azure.com/sku-cpu", &["2", "4", "8"]),
    ("karpenter.azure.com/sku-family", &["D", "E", "F"]),
    ("team", &["a", "b", "c"]),
    ("example.com/generation", &["1", "2", "3"]),
    ("beta.kubernetes.io/arch", &["amd64", "arm64"]),
    ("failure-domain.beta.kubernetes.io/zone", &["eastus-1", "eastus-2"]),
];

/// Integer label values, with forms that parse to the same integer and forms that do not parse.
const INTS: &[&str] = &["0", "1", "2", "4", "8", "16", "007", "-1", "1.5", "1e3", ""];

const MIN: &str = "-9223372036854775808";
const MAX: &str = "9223372036854775807";

/// One entry of a requirement list, as a NodePool, a NodeClaim or a pod states it.
#[derive(Clone, Debug)]
struct Req {
    key: &'static str,
    operator: Operator,
    values: Vec<String>,
    min_values: Option<u32>,
}

impl Req {
    fn json(&self) -> Value {
        json!({"key": self.key, "operator": format!("{:?}", self.operator), "values": self.values,
               "minValues": self.min_values})
    }
}

/// A requirement list as it reads in a manifest: `key Op [values]`, `; ` between entries.
fn show(list: &[Req]) -> String {
    let entries: Vec<String> = list
        .iter()
        .map(|r| {
            let min = r.min_values.map(|m| format!(" minValues {m}")).unwrap_or_default();
            format!("{} {:?} {:?}{min}", r.key, r.operator, r.values)
        })
        .collect();
    entries.join("; ")
}

#[derive(Debug)]
struct Case {
    name: String,
    a: Vec<Req>,
    b: Vec<Req>,
    probes: Vec<String>,
}

fn operand(rng: &mut Rng) -> String {
    match rng.below(24) {
        0 => MAX.into(),
        1 => "9223372036854775806".into(),
        2 => MIN.into(),
        3 => "-9223372036854775807".into(),
        4 => "-1".into(),
        5 => "007".into(),
        6 => "+3".into(),
        _ => rng.below(17).to_string(),
    }
}

fn requirement(rng: &mut Rng, key: &'static str, words: &[&str]) -> Req {
    let operator = *rng.pick(&[
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
        Operator::Gte,
        Operator::Lte,
    ]);
    let values = match operator {
        Operator::In | Operator::NotIn => {
            let n = 1 + rng.below(3);
            let mut values = BTreeSet::new();
            while values.len() < n {
                let pool = if rng.chance(70) { words } else { INTS };
                values.insert(rng.pick(pool).to_string());
            }
            values.into_iter().collect()
        }
        Operator::Exists | Operator::DoesNotExist => vec![],
        _ => vec![operand(rng)],
    };
    let min_values = (matches!(operator, Operator::In | Operator::Exists) && rng.chance(15))
        .then(|| 1 + rng.below(3) as u32);
    Req { key, operator, values, min_values }
}

fn side(rng: &mut Rng, keys: &[(&'static str, &'static [&'static str])]) -> Vec<Req> {
    (0..rng.below(5))
        .map(|_| {
            let (key, words) = *rng.pick(keys);
            requirement(rng, key, words)
        })
        .collect()
}

/// Values to ask every requirement about: those the case names, each integer operand and its
/// neighbours (beyond int64 too), and forms that parse, or not, as integers.
fn probes(a: &[Req], b: &[Req]) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    let mut push = |v: String| {
        if !out.contains(&v) {
            out.push(v)
        }
    };
    for r in a.iter().chain(b) {
        for v in &r.values {
            push(v.clone());
            if let Ok(n) = v.parse::<i128>() {
                push((n - 1).to_string());
                push(n.to_string());
                push((n + 1).to_string());
            }
        }
    }
    for v in ["a", "", "1.5", "007", "-0", "2", "3", "16", MIN, MAX] {
        push(v.to_string());
    }
    out
}

fn cases() -> Vec<Case> {
    let mut rng = Rng::new(SEED);
    (0..CASES)
        .map(|i| {
            let n = 1 + rng.below(3);
            let keys = rng.subset(KEYS, n);
            let (a, b) = (side(&mut rng, &keys), side(&mut rng, &keys));
            let probes = probes(&a, &b);
            Case { name: format!("requirements-{i}"), a, b, probes }
        })
        .collect()
}

fn ours(list: &[Req]) -> Requirements {
    let mut out = Requirements::new();
    for r in list {
        let requirement = Requirement::from_operator(r.key, r.operator, &r.values, r.min_values)
            .unwrap_or_else(|e| panic!("{r:?}: {e}"));
        out.add(requirement);
    }
    out
}

/// What one side says about one key's requirement.
#[derive(Clone, Debug, PartialEq)]
struct Facts {
    has: Vec<bool>,
    /// Whether a node without the label meets it (upstream: its operator is NotIn or DoesNotExist).
    absent_ok: bool,
    min_values: Option<u64>,
    text: String,
}

fn our_facts(r: &Requirement, probes: &[String]) -> Facts {
    Facts {
        has: probes.iter().map(|p| r.admits(Some(p))).collect(),
        absent_ok: r.admits(None),
        min_values: r.min_values().map(u64::from),
        text: r.to_string(),
    }
}

fn upstream_facts(answer: &Value) -> BTreeMap<String, (Facts, String)> {
    answer
        .as_object()
        .unwrap()
        .iter()
        .map(|(key, a)| {
            let operator = a["operator"].as_str().unwrap().to_string();
            let facts = Facts {
                has: a["has"].as_array().unwrap().iter().map(|b| b.as_bool().unwrap()).collect(),
                absent_ok: operator == "NotIn" || operator == "DoesNotExist",
                min_values: a["minValues"].as_u64(),
                text: a["string"].as_str().unwrap().to_string(),
            };
            (key.clone(), (facts, operator))
        })
        .collect()
}

const LT_MIN_WRAPS: &str = "upstream turns `Lt n` into `Lte n-1`, which wraps around for the least int64 \
     and admits every integer; no integer is below it";
const EMPTY_AS_DOES_NOT_EXIST: &str = "upstream writes a requirement nothing meets (an empty \
     intersection, `Gt` the largest int64) as DoesNotExist, which a node without the label meets; no \
     node meets it";
const EXISTENCE_LOST: &str = "upstream reports a complement with values as NotIn, which a node \
     without the label meets, even after Exists or an integer bound; such a requirement needs the label";

/// Why upstream's answer on a key may differ from ours, if it is one of the known differences.
fn absence_difference(ours: &Requirement, upstream_operator: &str, raw: &[&Req]) -> Option<&'static str> {
    if raw.iter().any(|r| r.operator == Operator::Lt && r.values == [MIN]) {
        return Some(LT_MIN_WRAPS);
    }
    if ours.is_empty() && upstream_operator == "DoesNotExist" {
        return Some(EMPTY_AS_DOES_NOT_EXIST);
    }
    if !ours.admits(None) && ours.admits_some_value() && upstream_operator == "NotIn" {
        return Some(EXISTENCE_LOST);
    }
    None
}

/// Upstream's `offered.Compatible(wanted)` from per-key facts (pkg/scheduling/requirements.go): a key
/// the offer does not define passes when it is well-known (under `AllowUndefinedWellKnownLabels`) or
/// when its requirement admits absence; a key both define passes when the two share a value or both
/// admit absence (`Intersects`). Ours has the same shape, so the model checks both.
fn compatible_model(
    offered: &BTreeMap<String, bool>,
    wanted: &BTreeMap<String, bool>,
    intersects: &BTreeMap<String, bool>,
    open: bool,
) -> bool {
    wanted.iter().all(|(key, &wanted_absent)| match offered.get(key) {
        None => (open && is_well_known(key)) || wanted_absent,
        Some(&offered_absent) => intersects[key] || (wanted_absent && offered_absent),
    })
}

#[derive(Default)]
struct Report {
    compared: usize,
    problems: Vec<String>,
    intended: BTreeMap<&'static str, usize>,
}

impl Report {
    /// Prints what was compared and the intended differences; fails on any other difference.
    fn finish(self, cases: usize) {
        eprintln!("{cases} cases, {} answers compared", self.compared);
        eprintln!("intended differences (reason: occurrences):");
        for (reason, n) in &self.intended {
            eprintln!("  {reason}: {n}");
        }
        assert!(
            self.problems.is_empty(),
            "{} differences from upstream that are not intended:\n{}",
            self.problems.len(),
            self.problems.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
        );
    }

    fn check<T: PartialEq + std::fmt::Debug>(
        &mut self,
        case: &Case,
        what: &str,
        ours: T,
        upstream: T,
        reason: Option<&'static str>,
    ) -> bool {
        self.compared += 1;
        if ours == upstream {
            return true;
        }
        match reason {
            Some(reason) => *self.intended.entry(reason).or_default() += 1,
            None => self.problems.push(format!(
                "{}: {what}: ours {ours:?}, upstream {upstream:?}\n  A: {}\n  B: {}",
                case.name,
                show(&case.a),
                show(&case.b)
            )),
        }
        false
    }
}

/// Per key, whether a node without the label meets the requirement.
type Absence = BTreeMap<String, bool>;

/// Compares one side's requirements (A, B or their intersection) key by key; returns whether each
/// key admits absence, ours and upstream's.
fn compare_side(
    report: &mut Report,
    case: &Case,
    side: &str,
    requirements: &Requirements,
    raw: &[&Req],
    answer: &Value,
) -> (Absence, Absence) {
    let theirs = upstream_facts(answer);
    let our_keys: BTreeSet<&str> = requirements.keys().collect();
    let their_keys: BTreeSet<&str> = theirs.keys().map(String::as_str).collect();
    report.check(case, &format!("{side}: keys"), &our_keys, &their_keys, None);
    let theirs_absent = theirs.iter().map(|(key, (facts, _))| (key.clone(), facts.absent_ok)).collect();
    let ours_absent = requirements.iter().map(|r| (r.key().to_string(), r.admits(None))).collect();
    for r in requirements.iter() {
        let Some((upstream, operator)) = theirs.get(r.key()) else { continue };
        let ours = our_facts(r, &case.probes);
        let raw_key: Vec<&Req> = raw.iter().copied().filter(|q| normalized_key(q.key) == r.key()).collect();
        let reason = absence_difference(r, operator, &raw_key);
        let what = |field: &str| {
            format!("{side}: {}: {field} (ours {}; upstream {})", r.key(), ours.text, upstream.text)
        };
        let lt_min = reason.filter(|r| *r == LT_MIN_WRAPS);
        for (p, (o, t)) in case.probes.iter().zip(ours.has.iter().zip(&upstream.has)) {
            report.check(case, &what(&format!("admits {p:?}")), o, t, lt_min);
        }
        report.check(
            case,
            &what("admits a node without the label"),
            ours.absent_ok,
            upstream.absent_ok,
            reason,
        );
        report.check(case, &what("minValues"), ours.min_values, upstream.min_values, None);
    }
    (ours_absent, theirs_absent)
}

/// Compares whether A's and B's requirement share a value, for each key both define; returns the
/// answers, ours and upstream's.
fn compare_intersections(
    report: &mut Report,
    case: &Case,
    (a, b): (&Requirements, &Requirements),
    answer: &Value,
) -> (Absence, Absence) {
    let ours: Absence = a
        .iter()
        .filter_map(|x| b.get(x.key()).map(|y| (x.key().to_string(), x.intersect(y).admits_some_value())))
        .collect();
    let theirs: Absence =
        answer.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_bool().unwrap())).collect();
    for (key, &t) in &theirs {
        let Some(&o) = ours.get(key) else { continue };
        let lt_min = case
            .a
            .iter()
            .chain(&case.b)
            .any(|r| normalized_key(r.key) == key && r.operator == Operator::Lt && r.values == [MIN]);
        let (x, y) = (a.get(key).unwrap(), b.get(key).unwrap());
        let what = format!("{key}: A and B share a value ({x} / {y})");
        report.check(case, &what, o, t, lt_min.then_some(LT_MIN_WRAPS));
    }
    (ours, theirs)
}

fn compare_case(report: &mut Report, case: &Case, answer: &Value) {
    let (a, b) = (ours(&case.a), ours(&case.b));
    let both = a.intersect(&b);
    let (raw_a, raw_b): (Vec<&Req>, Vec<&Req>) = (case.a.iter().collect(), case.b.iter().collect());
    let raw_both: Vec<&Req> = case.a.iter().chain(&case.b).collect();
    let (ours_a, theirs_a) = compare_side(report, case, "A", &a, &raw_a, &answer["a"]);
    let (ours_b, theirs_b) = compare_side(report, case, "B", &b, &raw_b, &answer["b"]);
    compare_side(report, case, "A and B", &both, &raw_both, &answer["both"]);
    let (ours_shared, theirs_shared) =
        compare_intersections(report, case, (&a, &b), &answer["hasIntersection"]);

    // Compatible, both ways, with and without undefined well-known keys allowed. The model must
    // reproduce both sides' answers; then equal per-key facts give equal answers, and a difference in
    // the facts is reported, intended or not, where it arises.
    let facts_differ = ours_a != theirs_a || ours_b != theirs_b || ours_shared != theirs_shared;
    for (field, open, reverse) in [
        ("compatible", false, false),
        ("compatibleWellKnown", true, false),
        ("bCompatibleA", false, true),
        ("bCompatibleAWellKnown", true, true),
    ] {
        let ((offered, ours_offered, theirs_offered), (wanted, ours_wanted, theirs_wanted)) = {
            let (x, y) = ((&a, &ours_a, &theirs_a), (&b, &ours_b, &theirs_b));
            if reverse {
                (y, x)
            } else {
                (x, y)
            }
        };
        let ours = offered.compatible(wanted, open).is_ok();
        let upstream = answer[field].as_bool().unwrap();
        let name = &case.name;
        assert_eq!(
            compatible_model(ours_offered, ours_wanted, &ours_shared, open),
            ours,
            "{name}: {field}: ours"
        );
        assert_eq!(
            compatible_model(theirs_offered, theirs_wanted, &theirs_shared, open),
            upstream,
            "{name}: {field}: upstream's"
        );
        report.check(case, field, ours, upstream, facts_differ.then_some(FOLLOWS));
    }
}

const FOLLOWS: &str = "a Compatible answer that follows from a per-key difference above";

#[test]
fn requirements_match_upstream_case_by_case() {
    let cases = cases();
    let input: Vec<Value> = cases
        .iter()
        .map(|c| {
            json!({"name": c.name, "a": c.a.iter().map(Req::json).collect::<Vec<_>>(),
                   "b": c.b.iter().map(Req::json).collect::<Vec<_>>(), "probes": c.probes})
        })
        .collect();
    let answers = ask("requirements", &input);
    let mut report = Report::default();
    for (case, answer) in cases.iter().zip(&answers) {
        compare_case(&mut report, case, answer);
    }
    report.finish(cases.len());
}

#[test]
fn generated_cases_cover_what_the_algebra_varies_on() {
    let cases = cases();
    let reqs: Vec<&Req> = cases.iter().flat_map(|c| c.a.iter().chain(&c.b)).collect();
    for operator in [
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
        Operator::Gte,
        Operator::Lte,
    ] {
        let n = reqs.iter().filter(|r| r.operator == operator).count();
        assert!(n > 500, "{operator:?}: {n} requirements");
        for bound in [MIN, MAX, "0"] {
            if matches!(operator, Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte) {
                assert!(
                    reqs.iter().any(|r| r.operator == operator && r.values == [bound]),
                    "{operator:?} {bound}"
                );
            }
        }
    }
    for (key, _) in KEYS {
        assert!(reqs.iter().filter(|r| r.key == *key).count() > 500, "{key}");
    }
    let empty = cases.iter().filter(|c| ours(&c.a).intersect(&ours(&c.b)).first_empty().is_some()).count();
    assert!(empty > 300, "{empty} cases whose intersection admits nothing on some key");
    assert!(reqs.iter().any(|r| r.min_values.is_some()));
}
