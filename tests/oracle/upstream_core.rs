//! Upstream Karpenter core as an oracle: `hack/upstream-oracle.sh` builds (once, into a cache outside
//! the repository) a Go helper against `sigs.k8s.io/karpenter` at the version pinned in
//! hack/upstream-oracle/go.mod, and this module sends it cases and reads its answers. Also the
//! deterministic random numbers the case generators draw from.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use karpenter_azure::model::labels::WELL_KNOWN_LABELS;
use serde_json::{json, Value};

/// The helper's path, built on first use. Go is needed only to build it; `hack/deps.sh` builds it
/// in the install stage, so a test run finds it cached.
fn helper() -> &'static str {
    static HELPER: OnceLock<String> = OnceLock::new();
    HELPER.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/upstream-oracle.sh");
        let out = Command::new(&script).arg("build").output().expect("running hack/upstream-oracle.sh build");
        assert!(
            out.status.success(),
            "hack/upstream-oracle.sh build failed (it needs Go and the Go module proxy the first time; \
             hack/deps.sh builds it):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    })
}

/// Upstream's answers to `cases` in `mode` (`requirements` or `overlays`), one per case, in order.
///
/// The helper first adds the label keys we hold well-known beyond core's to `v1.WellKnownLabels`, as
/// the Azure provider does at start-up; core's own set, which it reports, must be among ours.
pub fn ask(mode: &str, cases: &[Value]) -> Vec<Value> {
    let mut child = Command::new(helper())
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the upstream oracle");
    let input = json!({"wellKnown": WELL_KNOWN_LABELS, "cases": cases});
    child.stdin.take().unwrap().write_all(&serde_json::to_vec(&input).unwrap()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the upstream oracle failed: {}", String::from_utf8_lossy(&out.stderr));
    let output: Value = serde_json::from_slice(&out.stdout).expect("the oracle's answers");
    for key in output["coreWellKnown"].as_array().expect("coreWellKnown") {
        let key = key.as_str().unwrap();
        assert!(
            WELL_KNOWN_LABELS.contains(&key),
            "upstream core's well-known label {key} is not well-known here"
        );
    }
    let answers = output["answers"].as_array().expect("answers").clone();
    assert_eq!(answers.len(), cases.len(), "one answer per case");
    for (case, answer) in cases.iter().zip(&answers) {
        assert_eq!(case["name"], answer["name"], "answers in the cases' order");
    }
    answers
}

/// SplitMix64: a small, fixed-seed generator, so every run checks the same cases.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `n` distinct items, in the slice's order.
    pub fn subset<T: Clone>(&mut self, items: &[T], n: usize) -> Vec<T> {
        let mut chosen: Vec<usize> = (0..items.len()).collect();
        for i in (1..chosen.len()).rev() {
            let j = self.below(i + 1);
            chosen.swap(i, j);
        }
        let mut chosen: Vec<usize> = chosen.into_iter().take(n.min(items.len())).collect();
        chosen.sort_unstable();
        chosen.into_iter().map(|i| items[i].clone()).collect()
    }
}
