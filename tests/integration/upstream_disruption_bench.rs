//! `bench-upstream-disruption` on a committed run of `hack/upstream-disruption.sh run` at 4 nodes (the
//! `uniform` shape; the catalog cut to the 40 cheapest fake types and the ones in use): both policies
//! give a row, upstream's outcome is read, both outcomes pass the feasibility checker, and our passes
//! to a fixpoint keep adding savings above the lower bound.

use serde_json::Value;

use crate::support::cli;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/upstream-disruption");
/// After the fixture's nodes were created (its consolidateAfter is 0s).
const NOW: &str = "2026-12-05T00:00:00Z";

#[test]
fn both_outcomes_are_feasible_for_both_policies() {
    let out = cli::run(&["bench-upstream-disruption", FIXTURE, "--now", NOW, "--output", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON rows");
    let policies: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap_or("")).collect();
    assert_eq!(policies, ["WhenEmptyOrUnderutilized", "Balanced"]);
    for row in &rows {
        assert_eq!((row["size"].as_str(), row["shape"].as_str()), (Some("4"), Some("uniform")));
        assert_eq!(row["nodes"], 4);
        assert_eq!(row["pods"], 10);
        for side in ["upstream", "ours"] {
            assert_eq!(row[side]["feasibility"]["result"], "ok", "{side}: {}", row[side]);
        }
        // Upstream deletes one node of three pods; ours saves at least as much.
        assert_eq!(row["upstream"]["nodes_removed"], 1);
        assert_eq!(row["upstream"]["pods_moved"], 3);
        let saved = |side: &str| row[side]["savings_per_hour"].as_f64().unwrap_or(f64::NAN);
        assert!(saved("ours") >= saved("upstream") - 1e-9, "{row}");
        assert!(row["lower_bound_per_hour"].as_f64().unwrap_or(0.0) > 0.0);
        // Passes after the first only add savings, and no cluster costs less than the bound.
        let fixpoint = &row["ours_fixpoint"];
        let number = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
        assert!(fixpoint["passes"].as_u64().unwrap_or(0) >= 1, "{row}");
        assert!(number(&fixpoint["savings_per_hour"]) >= saved("ours") - 1e-9, "{row}");
        assert!(number(&fixpoint["bound_ratio"]) >= 1.0 - 1e-9, "{row}");
        let price = number(&row["price_per_hour"]) - number(&fixpoint["savings_per_hour"]);
        assert!((price - number(&fixpoint["price_per_hour"])).abs() < 1e-6, "{row}");
    }
}

#[test]
fn the_table_has_one_row_per_policy() {
    let out = cli::run(&["bench-upstream-disruption", FIXTURE, "4", "--now", NOW]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(table.lines().filter(|l| l.contains("| uniform |")).count(), 2, "{table}");
}

#[test]
fn without_a_time_each_cluster_is_judged_an_hour_after_its_last_event_in_every_run() {
    let run = || {
        let out = cli::run(&["bench-upstream-disruption", FIXTURE, "--output", "json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON rows");
        rows.iter()
            .map(|r| {
                (
                    r["now"].as_str().unwrap_or("").to_string(),
                    r["ours_fixpoint"]["savings_per_hour"].to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    let first = run();
    assert_eq!(first, run());
    for (now, _) in &first {
        // The fixture's NodeClaims were created and initialized at 16:25:26–28 UTC.
        assert!(now.as_str() > "2026-12-04T17:25:00Z" && now.as_str() < "2026-12-04T17:26:00Z", "{now}");
    }
}
