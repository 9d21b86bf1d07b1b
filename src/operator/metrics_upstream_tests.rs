//! The registry against upstream: every metric of `tests/fixtures/upstream-metrics.txt` (restated from
//! Karpenter core v1.14.1, the Azure provider v1.7.2, operatorpkg and controller-runtime; the file names
//! each source) is registered with upstream's name, type, labels and buckets, nothing else is
//! registered but ours, and every metric is recorded somewhere in the controller code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{Metrics, Origin};
use crate::model::labels::WELL_KNOWN_LABELS;

const FIXTURE: &str = include_str!("../../tests/fixtures/upstream-metrics.txt");

/// One metric as upstream defines it.
#[derive(Debug)]
struct Upstream {
    name: String,
    kind: String,
    labels: Vec<String>,
    buckets: Vec<f64>,
    source: String,
}

/// The per-node labels upstream's Azure provider v1.7.2 gets: core's well-known labels
/// (`pkg/apis/v1/labels.go`) and the provider's (`pkg/apis/v1beta1/labels.go` AzureWellKnownLabels),
/// snake-cased after the `/`, then `node_name`, `phase` and `managed`.
const UPSTREAM_NODE_LABELS: &[&str] = &[
    "nodepool",
    "zone",
    "region",
    "instance_type",
    "arch",
    "os",
    "capacity_type",
    "windows_build",
    "sku_name",
    "sku_family",
    "sku_series",
    "sku_version",
    "sku_cpu",
    "sku_memory",
    "sku_networking_accelerated",
    "sku_storage_premium_capable",
    "sku_storage_ephemeralos_maxsize",
    "sku_gpu_name",
    "sku_gpu_manufacturer",
    "sku_gpu_count",
    "cluster",
    "mode",
    "scalesetpriority",
    "os_sku",
    "node_name",
    "phase",
    "managed",
];

fn exponential(start: f64, factor: f64, count: usize) -> Vec<f64> {
    (0..count).map(|i| start * factor.powi(i as i32)).collect()
}

/// The bucket sets by the fixture's names, as upstream writes them.
fn buckets(name: &str) -> Vec<f64> {
    let day = 86400.0;
    match name {
        "-" => vec![],
        "duration" => vec![
            0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
            1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
            25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
        ],
        "reconcile" => buckets("duration")[..40].to_vec(),
        "default" => vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0],
        "score" => vec![0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0],
        "objectives" => vec![0.0, 0.5, 0.9, 0.99, 1.0],
        "lifetime" => {
            let minutes = [15.0, 30.0, 45.0].map(|m| m * 60.0);
            let hours = [1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0].map(|h| h * 3600.0);
            let days = [1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0].map(|d| d * day);
            minutes.into_iter().chain(hours).chain(days).collect()
        }
        "exp(1,2,11)" => exponential(1.0, 2.0, 11),
        "exp(1,2,12)" => exponential(1.0, 2.0, 12),
        "exp(0.5,2,15)" => exponential(0.5, 2.0, 15),
        other => panic!("unknown bucket set {other}"),
    }
}

fn upstream() -> Vec<Upstream> {
    FIXTURE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, kind, labels, bucket_set, source] = fields[..] else { panic!("bad line {line:?}") };
            let labels = match labels {
                "-" => vec![],
                "@node" => UPSTREAM_NODE_LABELS.iter().map(|l| l.to_string()).collect(),
                "@node+resource_type" => {
                    UPSTREAM_NODE_LABELS.iter().copied().chain(["resource_type"]).map(String::from).collect()
                }
                list => list.split(',').map(String::from).collect(),
            };
            Upstream {
                name: name.to_string(),
                kind: kind.to_string(),
                labels,
                buckets: buckets(bucket_set),
                source: source.to_string(),
            }
        })
        .collect()
}

/// Upstream's snake-casing of a well-known label key.
fn snake(key: &str) -> String {
    key.split_once('/').map_or(key, |(_, n)| n).to_ascii_lowercase().replace('-', "_")
}

#[test]
fn every_upstream_metric_is_registered_with_upstream_type_labels_and_buckets() {
    let metrics = Metrics::new();
    let docs: BTreeMap<&str, _> = metrics.docs().iter().map(|d| (d.name.as_str(), d)).collect();
    let well_known: BTreeSet<String> = WELL_KNOWN_LABELS.iter().map(|k| snake(k)).collect();
    let mut missing = vec![];
    let mut wrong = vec![];
    for want in upstream() {
        let Some(doc) = docs.get(want.name.as_str()) else {
            missing.push(format!("{} ({})", want.name, want.source));
            continue;
        };
        if doc.kind.as_str() != want.kind {
            wrong.push(format!("{}: type {} not {}", want.name, doc.kind.as_str(), want.kind));
        }
        let got: BTreeSet<&str> = doc.labels.iter().map(String::as_str).collect();
        let wanted: BTreeSet<&str> = want.labels.iter().map(String::as_str).collect();
        let node = want.labels.iter().any(|l| l == "node_name");
        // The per-node gauges carry every label this project knows as well-known; upstream's provider
        // release knows fewer.
        let extra: Vec<&&str> =
            got.difference(&wanted).filter(|l| !(node && well_known.contains(**l))).collect();
        let absent: Vec<&&str> = wanted.difference(&got).collect();
        if !extra.is_empty() || !absent.is_empty() {
            wrong.push(format!("{}: labels missing {absent:?}, extra {extra:?}", want.name));
        }
        if doc.buckets != want.buckets {
            wrong.push(format!("{}: buckets {:?} not {:?}", want.name, doc.buckets, want.buckets));
        }
    }
    assert!(missing.is_empty(), "{} upstream metrics not registered:\n{}", missing.len(), missing.join("\n"));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_other_registered_metric_is_ours_and_documented() {
    let metrics = Metrics::new();
    let upstream: BTreeSet<String> = upstream().into_iter().map(|u| u.name).collect();
    for doc in metrics.docs() {
        assert!(!doc.help.is_empty() && !doc.recorded.is_empty(), "{} is undocumented", doc.name);
        if upstream.contains(&doc.name) {
            assert_ne!(doc.origin, Origin::Ours, "{} is upstream's", doc.name);
        } else {
            assert_eq!(doc.origin, Origin::Ours, "{} is not in the upstream list", doc.name);
            let ours =
                doc.name.starts_with("karpenter_azure_") || doc.name.starts_with("operator_nodeoverlay_");
            assert!(ours, "{}: ours are named karpenter_azure_*", doc.name);
        }
    }
}

/// The Rust sources under `dir`, without the registry itself and the tests.
fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("reading the sources") {
        let path = entry.expect("a directory entry").path();
        let name = path.to_string_lossy().to_string();
        if path.is_dir() {
            sources(&path, out);
        } else if name.ends_with(".rs")
            && !name.ends_with("_tests.rs")
            && !name.contains("/operator/metrics")
            && !name.ends_with("/tests.rs")
        {
            out.push((name, std::fs::read_to_string(&path).expect("reading a source")));
        }
    }
}

/// Whether `text` calls `name` (`name(` not after `fn `, or a method/field access `.name`).
fn calls(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        let before = &text[..at];
        let after = &text[at + name.len()..];
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        if before.chars().next_back().is_some_and(ident) || after.chars().next().is_some_and(ident) {
            return false;
        }
        let call = after.starts_with('(') && !before.ends_with("fn ");
        let access = before.ends_with('.') && (after.starts_with('.') || after.starts_with('('));
        call || access
    })
}

#[test]
fn every_metric_is_recorded_from_controller_code() {
    let mut files = vec![];
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let mut unrecorded = vec![];
    for doc in Metrics::new().docs() {
        if doc.origin == Origin::Process {
            continue; // collected from /proc at scrape time
        }
        assert!(!doc.by.is_empty(), "{} names no recorder", doc.name);
        if !doc.by.iter().any(|name| files.iter().any(|(_, text)| calls(text, name))) {
            unrecorded.push(format!("{} (by {:?})", doc.name, doc.by));
        }
    }
    assert!(unrecorded.is_empty(), "registered but never recorded:\n{}", unrecorded.join("\n"));
}
