//! How the property tests run, checked so that it cannot erode unnoticed: every `proptest!` block of
//! `crates/core/src/`, `src/` and `tests/integration/` takes the shared configuration (a fixed seed, so `make test` cannot
//! fail by chance), every property test is in the Makefile's `PROPTEST_TESTS` (what `make
//! proptest-random` runs with fresh seeds), and the configuration finds the checked-in regression files.

use std::path::{Path, PathBuf};

use proptest::test_runner::RngSeed;

use crate::support::proptest_config;

const MARKER: &str = "proptest! {";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text of each `proptest! { ... }` block of `source`, braces matched.
fn blocks(source: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(MARKER) {
        let body = &rest[at + MARKER.len()..];
        let mut depth = 1;
        let end = body
            .char_indices()
            .find_map(|(i, c)| {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                (depth == 0).then_some(i)
            })
            .expect("a proptest! block closes");
        found.push(&body[..end]);
        rest = &body[end..];
    }
    found
}

/// The names of the test functions of a block.
fn test_names(block: &str) -> Vec<String> {
    block
        .split("fn ")
        .skip(1)
        .filter_map(|after| after.split('(').next())
        .map(|name| name.trim().to_string())
        .collect()
}

/// Every property test, as (file, name, whether its block takes the shared configuration).
fn property_tests() -> Vec<(String, String, bool)> {
    let mut files = Vec::new();
    rust_files(&repo("crates/core/src"), &mut files);
    rust_files(&repo("src"), &mut files);
    rust_files(&repo("tests/integration"), &mut files);
    let this_file = repo(file!().trim_start_matches("./"));
    let mut tests = Vec::new();
    for file in files.iter().filter(|f| **f != this_file) {
        let source = std::fs::read_to_string(file).unwrap_or_else(|err| panic!("{}: {err}", file.display()));
        for block in blocks(&source) {
            let configured = block.trim_start().starts_with("#![proptest_config(")
                && block.contains("proptest_config::config(");
            for name in test_names(block) {
                let relative = file.strip_prefix(repo("")).unwrap_or(file);
                tests.push((relative.display().to_string(), name, configured));
            }
        }
    }
    tests
}

#[test]
fn every_property_test_runs_from_the_fixed_seed_and_is_listed_for_proptest_random() {
    let tests = property_tests();
    assert!(tests.len() >= 5, "the property tests were not found: {tests:?}");
    let unseeded: Vec<_> = tests.iter().filter(|(_, _, configured)| !configured).collect();
    assert!(
        unseeded.is_empty(),
        "proptest! blocks without #![proptest_config(proptest_config::config(..))]: {unseeded:?}"
    );
    let makefile = std::fs::read_to_string(repo("Makefile")).expect("the Makefile");
    let listed: Vec<&str> = makefile
        .split("PROPTEST_TESTS =")
        .nth(1)
        .expect("PROPTEST_TESTS in the Makefile")
        .lines()
        .take_while(|line| !line.trim().is_empty() && !line.starts_with("PROPTEST_RUNS"))
        .flat_map(|line| line.split_whitespace())
        .filter(|word| *word != "\\")
        .collect();
    let missing: Vec<_> = tests.iter().filter(|(_, name, _)| !listed.contains(&name.as_str())).collect();
    assert!(missing.is_empty(), "property tests missing from PROPTEST_TESTS in the Makefile: {missing:?}");
}

#[test]
fn the_shared_configuration_has_a_fixed_seed_and_reads_the_checked_in_regressions() {
    let config = proptest_config::config(1);
    assert_eq!(config.rng_seed, RngSeed::Fixed(proptest_config::SEED));
    let source = "tests/integration/solver_feasibility.rs";
    let regressions =
        std::fs::read_to_string(repo("tests/integration/solver_feasibility.proptest-regressions"))
            .expect("the checked-in regression file");
    let saved = regressions.lines().filter(|line| line.starts_with("cc ")).count();
    assert!(saved > 0, "no saved cases in the regression file");
    let persistence = config.failure_persistence.expect("failure persistence is on");
    let loaded = persistence.load_persisted_failures2(Some(source));
    assert_eq!(loaded.len(), saved, "the cases proptest replays for {source}");
}
