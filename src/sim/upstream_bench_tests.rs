//! `bench-upstream` on tiny hand-written size directories (no Go needed): three pods, two instance
//! types, and upstream plans that are feasible, infeasible (pods on a node too small) or unreadable.

use std::fs;
use std::path::Path;

use super::*;

const NODEPOOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default}
      requirements: []
";

/// `small` holds one of the pods, `big` all three; one on-demand offering each, in one zone.
const CATALOG: &str = r#"[
  {"name": "small", "allocatable": {"cpu": "900m", "memory": "2038Mi", "pods": "10"},
   "capacity": {"cpu": "1", "memory": "2Gi", "pods": "10"},
   "offerings": [{"zone": "test-zone-1", "capacity_type": "on-demand", "price": 0.3}]},
  {"name": "big", "allocatable": {"cpu": "3900m", "memory": "8182Mi", "pods": "40"},
   "capacity": {"cpu": "4", "memory": "8Gi", "pods": "40"},
   "offerings": [{"zone": "test-zone-1", "capacity_type": "on-demand", "price": 1.2}]}
]"#;

fn pods_yaml() -> String {
    (0..3)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: generic-{i}, namespace: default}}\n\
                 spec:\n  containers:\n  - name: c0\n    resources: {{requests: {{cpu: 600m, memory: 512Mi}}}}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// An upstream.json whose plan puts all three pods on one node of `instance_type`.
fn upstream_json(instance_type: &str, price: f64) -> String {
    serde_json::json!({
        "solve_seconds": 0.5,
        "pods_placed": 3,
        "pods_pending": 0,
        "price_per_hour": price,
        "peak_rss_bytes": 100 * 1024 * 1024,
        "nodeclaims": 1,
        "plan": [{
            "name": "upstream-0",
            "instance_type": instance_type,
            "zone": "test-zone-1",
            "capacity_type": "on-demand",
            "price": price,
            "instance_type_options": 3,
            "requests": {"cpu": "1800m"},
            "pods": ["default/generic-0", "default/generic-1", "default/generic-2"],
        }],
        "pending": [],
    })
    .to_string()
}

fn write_size(dir: &Path, upstream: &str) {
    write_input(dir);
    fs::write(dir.join("upstream.json"), upstream).unwrap();
}

/// The input files only, as `hack/upstream-bench.sh input` writes them.
fn write_input(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("pods.yaml"), pods_yaml()).unwrap();
    fs::write(dir.join("nodepool.yaml"), NODEPOOL).unwrap();
    fs::write(dir.join("catalog.json"), CATALOG).unwrap();
}

#[test]
fn converts_a_feasible_upstream_plan_and_checks_ours() {
    let tmp = tempfile::tempdir().unwrap();
    write_size(&tmp.path().join("3"), &upstream_json("big", 1.2));
    let results = run(tmp.path(), &[], |d| measure(d, &Limits::default()), |_| {}).unwrap();
    let [r] = &results[..] else { panic!("one size: {results:?}") };
    assert_eq!((r.size.as_str(), r.pods), ("3", 3));
    let upstream = r.upstream.as_ref().expect("upstream.json is read");
    assert_eq!(upstream.feasibility, Feasibility::Ok, "{r:?}");
    assert_eq!(upstream.nodeclaims, 1);
    let ours = r.ours.as_ref().expect("our solve finished");
    assert_eq!(ours.feasibility, Feasibility::Ok, "{r:?}");
    assert_eq!(ours.pods_placed, 3);
    assert!(ours.price_per_hour <= 1.2 + 1e-9, "{r:?}");
    assert!(r.lower_bound_per_hour.is_some_and(|b| b <= ours.price_per_hour + 1e-9));

    let table = render(&results, OutputFormat::Table);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "header, rule, one row and no details:\n{table}");
    assert!(lines.iter().all(|l| l.len() == lines[0].len()), "aligned:\n{table}");
    assert!(lines[0].starts_with("| pods |") && lines[0].contains("feasible up/ours"), "{table}");
    assert!(lines[2].contains(" 3/3 |") && lines[2].contains("ok / ok"), "{table}");
    let json: Vec<SizeResult> = serde_json::from_str(&render(&results, OutputFormat::Json)).unwrap();
    assert_eq!(json, results);
}

#[test]
fn an_input_only_size_times_ours_alone_and_the_growth_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    write_size(&tmp.path().join("3"), &upstream_json("big", 1.2));
    write_input(&tmp.path().join("30"));
    let results = run(tmp.path(), &[], |d| measure(d, &Limits::default()), |_| {}).unwrap();
    let [with_upstream, alone] = &results[..] else { panic!("two sizes: {results:?}") };
    assert!(with_upstream.upstream.is_some());
    assert!(alone.upstream.is_none(), "{alone:?}");
    assert_eq!(alone.ours.as_ref().map(|o| &o.feasibility), Some(&Feasibility::Ok), "{alone:?}");
    let table = render(&results, OutputFormat::Table);
    let row = table.lines().find(|l| l.starts_with("| ") && l.contains("not run")).expect(&table);
    assert!(row.contains("-/") && row.contains("not run / ok"), "{table}");
    // Our times at both sizes make a growth series; upstream's one point does not.
    assert!(table.contains("solve time against pods, ours:"), "{table}");
    assert!(!table.contains("solve time against pods, upstream:"), "{table}");
}

#[test]
fn reports_an_infeasible_upstream_plan() {
    let tmp = tempfile::tempdir().unwrap();
    // Three 600m pods on a 900m node: the checker must say so.
    write_size(&tmp.path().join("3"), &upstream_json("small", 0.3));
    let results = run(tmp.path(), &[], |d| measure(d, &Limits::default()), |_| {}).unwrap();
    let Some(Feasibility::Violations { total, by_rule, first }) =
        results[0].upstream.as_ref().map(|u| &u.feasibility)
    else {
        panic!("upstream's plan must be infeasible: {results:?}");
    };
    assert!(*total >= 1 && by_rule.contains_key("Capacity"), "{by_rule:?}");
    assert!(first.iter().any(|m| m.contains("upstream-0")), "{first:?}");
    assert_eq!(results[0].ours.as_ref().unwrap().feasibility, Feasibility::Ok);
    let table = render(&results, OutputFormat::Table);
    assert!(table.contains(&format!("{total} violations / ok")), "{table}");
    assert!(table.contains("3 pods, upstream: ") && table.contains("Capacity "), "{table}");
}

#[test]
fn an_unknown_type_in_upstreams_plan_is_a_violation_not_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    write_size(tmp.path(), &upstream_json("huge", 9.0));
    // A size directory given directly is measured on its own.
    let r = measure(&size_dirs(tmp.path(), &[]).unwrap()[0], &Limits::default()).unwrap();
    let Some(Feasibility::Violations { by_rule, .. }) = r.upstream.as_ref().map(|u| &u.feasibility) else {
        panic!("{r:?}")
    };
    assert!(by_rule.contains_key("InstanceType"), "{by_rule:?}");
}

#[test]
fn errors_are_one_line_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let err = run(&missing, &[], |d| measure(d, &Limits::default()), |_| {}).unwrap_err().to_string();
    assert!(err.starts_with(&missing.display().to_string()) && err.lines().count() == 1, "{err}");

    let err = run(tmp.path(), &[], |d| measure(d, &Limits::default()), |_| {}).unwrap_err().to_string();
    assert!(err.contains("no size directories"), "{err}");

    let size = tmp.path().join("3");
    write_size(&size, r#"{"solve_seconds": "fast"}"#);
    let err = run(tmp.path(), &[], |d| measure(d, &Limits::default()), |_| {}).unwrap_err().to_string();
    let file = size.join("upstream.json").display().to_string();
    assert!(err.starts_with(&format!("{file}: solve_seconds: ")) && err.lines().count() == 1, "{err}");

    let err =
        run(tmp.path(), &["5".into()], |d| measure(d, &Limits::default()), |_| {}).unwrap_err().to_string();
    assert!(err.starts_with(&tmp.path().join("5").display().to_string()), "{err}");

    fs::write(size.join("catalog.json"), "[").unwrap();
    let err = run(tmp.path(), &[], |d| measure(d, &Limits::default()), |_| {}).unwrap_err().to_string();
    assert!(err.contains("catalog.json") && err.lines().count() == 1, "{err}");
}
