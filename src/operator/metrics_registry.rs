//! How a metric is defined: [`Registrar::def`] registers it in the one registry and keeps a [`Doc`] of
//! it (name, type, labels, buckets, where the definition comes from upstream, where it is recorded),
//! so the documentation's metric table is generated from the registry itself
//! (`karpenter-azure metrics-table`) and the tests compare the registry with upstream's list.
//!
//! A metric defined [`Def::leader_only`] describes the cluster (or a decision of the leader's
//! controllers): upstream runs the controllers that set those only on the leader, so a standby
//! serves none of them. [`Registrar`] keeps a handle on each, and [`LeaderOnly::clear`] drops every
//! series when this replica does not lead.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::metrics_rebuilt::RebuiltGauge;
use super::metrics_summary::SummaryVec;

/// The Prometheus type of a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Type {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

impl Type {
    /// As `# TYPE` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
            Type::Summary => "summary",
        }
    }
}

/// Where a metric's definition comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Karpenter core (`sigs.k8s.io/karpenter`), the file under `pkg/` that defines it.
    Core(&'static str),
    /// The Azure provider (`github.com/Azure/karpenter-provider-azure`), the file under `pkg/`.
    Azure(&'static str),
    /// `github.com/awslabs/operatorpkg` `status/metrics.go`, as Karpenter registers it.
    OperatorPkg,
    /// controller-runtime (`pkg/internal/controller/metrics`, `pkg/leaderelection`).
    ControllerRuntime,
    /// The Prometheus client's process collector (client_golang `collectors.NewProcessCollector`).
    Process,
    /// This project's own.
    Ours,
}

impl Origin {
    /// For the documentation's table.
    pub fn describe(self) -> String {
        match self {
            Origin::Core(file) => format!("core `{file}`"),
            Origin::Azure(file) => format!("Azure provider `{file}`"),
            Origin::OperatorPkg => "operatorpkg `status/metrics.go`".to_string(),
            Origin::ControllerRuntime => "controller-runtime".to_string(),
            Origin::Process => "Prometheus process collector".to_string(),
            Origin::Ours => "ours".to_string(),
        }
    }
}

/// What the registry knows of one metric.
#[derive(Clone, Debug)]
pub struct Doc {
    pub name: String,
    pub kind: Type,
    pub help: String,
    /// In the order the recorders pass values.
    pub labels: Vec<String>,
    /// A histogram's bucket bounds or a summary's quantiles; empty otherwise.
    pub buckets: Vec<f64>,
    pub origin: Origin,
    /// When and by what it is recorded, for the table.
    pub recorded: String,
    /// The recorder methods (or fields) controller code records it through; a test checks that each
    /// metric has such a call outside the registry.
    pub by: &'static [&'static str],
    pub leader_only: bool,
}

/// A metric that can drop all of its series.
trait Clear: Send + Sync {
    fn clear(&self);
}

macro_rules! clear_by_reset {
    ($($t:ty),*) => {$(
        impl Clear for $t {
            fn clear(&self) {
                self.reset();
            }
        }
    )*};
}
clear_by_reset!(GaugeVec, IntGaugeVec, HistogramVec, IntCounterVec, SummaryVec);

impl Clear for RebuiltGauge {
    fn clear(&self) {
        RebuiltGauge::clear(self);
    }
}

/// The leader-only metrics, to clear on a replica that does not lead.
#[derive(Default)]
pub struct LeaderOnly(Vec<Box<dyn Clear>>);

impl LeaderOnly {
    pub fn clear(&self) {
        self.0.iter().for_each(|m| m.clear());
    }
}

/// Registers metrics and documents them; [`Registrar::finish`] hands back the registry.
#[derive(Default)]
pub struct Registrar {
    registry: Registry,
    docs: Mutex<Vec<Doc>>,
    leader_only: Mutex<LeaderOnly>,
    /// The families rendered beside the registry ([`Def::rebuilt_gauge`]).
    rebuilt: Mutex<Vec<RebuiltGauge>>,
}

/// One metric being defined.
#[must_use]
pub struct Def<'r> {
    r: &'r Registrar,
    doc: Doc,
}

impl Registrar {
    pub fn new() -> Registrar {
        Registrar::default()
    }

    /// A metric called `name`, documented by `help`, with `labels` in the recorders' order.
    pub fn def(&self, name: &str, help: &str, labels: &[&str]) -> Def<'_> {
        let doc = Doc {
            name: name.to_string(),
            kind: Type::Gauge,
            help: help.to_string(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
            buckets: vec![],
            origin: Origin::Ours,
            recorded: String::new(),
            by: &[],
            leader_only: false,
        };
        Def { r: self, doc }
    }

    /// Registers a collector documented elsewhere (the process collector).
    pub fn collector(&self, collector: Box<dyn Collector>, docs: Vec<Doc>) {
        self.registry.register(collector).expect("metric names are unique");
        self.docs.lock().unwrap_or_else(|p| p.into_inner()).extend(docs);
    }

    /// The registry, the docs, the leader-only metrics, and the rebuilt families sorted by name.
    pub fn finish(self) -> (Registry, Vec<Doc>, LeaderOnly, Vec<RebuiltGauge>) {
        let docs = self.docs.into_inner().unwrap_or_else(|p| p.into_inner());
        let leader_only = self.leader_only.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut rebuilt = self.rebuilt.into_inner().unwrap_or_else(|p| p.into_inner());
        rebuilt.sort_by(|a, b| a.name().cmp(b.name()));
        (self.registry, docs, leader_only, rebuilt)
    }
}

impl<'r> Def<'r> {
    pub fn origin(mut self, origin: Origin) -> Self {
        self.doc.origin = origin;
        self
    }

    /// When it is recorded (for the table) and through which recorders (`by`).
    pub fn recorded(mut self, when: &str, by: &'static [&'static str]) -> Self {
        self.doc.recorded = when.to_string();
        self.doc.by = by;
        self
    }

    /// Served only by the leader; see the module documentation.
    pub fn leader_only(mut self) -> Self {
        self.doc.leader_only = true;
        self
    }

    fn register<M: Collector + Clear + Clone + 'static>(mut self, kind: Type, metric: M) -> M {
        self.doc.kind = kind;
        self.r.registry.register(Box::new(metric.clone())).expect("metric names are unique");
        if self.doc.leader_only {
            let mut leader_only = self.r.leader_only.lock().unwrap_or_else(|p| p.into_inner());
            leader_only.0.push(Box::new(metric.clone()));
        }
        self.r.docs.lock().unwrap_or_else(|p| p.into_inner()).push(self.doc);
        metric
    }

    fn opts(&self) -> Opts {
        Opts::new(self.doc.name.clone(), self.doc.help.clone())
    }

    fn labels(&self) -> Vec<&str> {
        self.doc.labels.iter().map(String::as_str).collect()
    }

    pub fn counter(self) -> IntCounterVec {
        let metric = IntCounterVec::new(self.opts(), &self.labels()).expect("a valid metric definition");
        self.register(Type::Counter, metric)
    }

    pub fn gauge(self) -> GaugeVec {
        let metric = GaugeVec::new(self.opts(), &self.labels()).expect("a valid metric definition");
        self.register(Type::Gauge, metric)
    }

    /// A gauge family with a series per object, rebuilt whole at each refresh and kept compact
    /// ([`RebuiltGauge`]); rendered beside the registry, in name order with its families.
    pub fn rebuilt_gauge(mut self) -> RebuiltGauge {
        self.doc.kind = Type::Gauge;
        let gauge = RebuiltGauge::new(&self.doc.name, &self.doc.help, &self.labels());
        let mut rebuilt = self.r.rebuilt.lock().unwrap_or_else(|p| p.into_inner());
        assert!(rebuilt.iter().all(|g| g.name() != gauge.name()), "metric names are unique");
        rebuilt.push(gauge.clone());
        drop(rebuilt);
        if self.doc.leader_only {
            let mut leader_only = self.r.leader_only.lock().unwrap_or_else(|p| p.into_inner());
            leader_only.0.push(Box::new(gauge.clone()));
        }
        self.r.docs.lock().unwrap_or_else(|p| p.into_inner()).push(self.doc);
        gauge
    }

    pub fn int_gauge(self) -> IntGaugeVec {
        let metric = IntGaugeVec::new(self.opts(), &self.labels()).expect("a valid metric definition");
        self.register(Type::Gauge, metric)
    }

    pub fn histogram(mut self, buckets: &[f64]) -> HistogramVec {
        self.doc.buckets = buckets.to_vec();
        let opts = HistogramOpts::new(self.doc.name.clone(), self.doc.help.clone()).buckets(buckets.to_vec());
        let metric = HistogramVec::new(opts, &self.labels()).expect("a valid metric definition");
        self.register(Type::Histogram, metric)
    }

    pub fn summary(mut self, objectives: &[f64]) -> SummaryVec {
        self.doc.buckets = objectives.to_vec();
        let metric = SummaryVec::new(&self.doc.name, &self.doc.help, &self.labels(), objectives)
            .expect("a valid metric definition");
        self.register(Type::Summary, metric)
    }
}

/// client_golang `prometheus.ExponentialBuckets(start, factor, count)`.
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    std::iter::successors(Some(start), |b| Some(b * factor)).take(count).collect()
}

/// client_golang `prometheus.DefBuckets`.
pub const DEFAULT_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Drops every series of `vec` whose `label` is `value` (client_golang's `DeletePartialMatch` with one
/// label).
pub fn remove_where<T: MetricVecBuilder>(vec: &MetricVec<T>, label: &str, value: &str) {
    for family in vec.collect() {
        for metric in family.get_metric() {
            let pairs = metric.get_label();
            if pairs.iter().any(|p| p.name() == label && p.value() == value) {
                let labels: HashMap<&str, &str> = pairs.iter().map(|p| (p.name(), p.value())).collect();
                let _ = vec.remove(&labels);
            }
        }
    }
}
