//! The `karpenter-azure` binary as the CLI tests run it: from the crate's directory, its output
//! captured; and `simulate` on one snapshot text at a fixed `--now`.

use std::process::{Command, Output};

use serde_json::Value;

/// The instant `simulate` judges snapshots at: a Tuesday, 12:00 UTC.
pub const NOW: &str = "2026-12-01T12:00:00Z";

pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_karpenter-azure"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// `simulate` on `text` written to a file, at [`NOW`], with `extra` arguments.
pub fn simulate(text: &str, extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.yaml");
    std::fs::write(&path, text).unwrap();
    let path = path.display().to_string();
    let mut args = vec!["simulate", path.as_str(), "--now", NOW];
    args.extend(extra);
    run(&args)
}

/// [`simulate`]'s JSON output, which must succeed.
pub fn simulate_json(text: &str) -> Value {
    let out = simulate(text, &["--output", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}
