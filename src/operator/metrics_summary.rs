//! A Prometheus summary with labels, which the `prometheus` crate does not have: upstream Karpenter
//! exports two (`karpenter_pods_startup_duration_seconds`, `karpenter_nodes_termination_duration_seconds`)
//! with client_golang's `SummaryVec`.
//!
//! As client_golang's summary, `_sum` and `_count` count every observation since start, and the quantiles
//! describe the observations of the last [`MAX_AGE`] (client_golang's `DefMaxAge`, 10 minutes); with none
//! in that window a quantile is NaN. The quantiles here are exact over the window (client_golang
//! estimates them within the objective's error), and the window keeps at most [`MAX_WINDOW`] samples,
//! dropping the oldest first.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary};

/// client_golang `DefMaxAge`.
pub const MAX_AGE: Duration = Duration::from_secs(600);
/// Samples kept per series for the quantiles.
pub const MAX_WINDOW: usize = 10_000;

/// Upstream core `metrics.SummaryObjectives()`: the quantiles 0, 0.5, 0.9, 0.99 and 1.
pub const OBJECTIVES: &[f64] = &[0.0, 0.5, 0.9, 0.99, 1.0];

#[derive(Debug, Default)]
struct Series {
    count: u64,
    sum: f64,
    window: VecDeque<(Instant, f64)>,
}

impl Series {
    fn prune(&mut self, now: Instant) {
        while self.window.front().is_some_and(|(at, _)| now.saturating_duration_since(*at) > MAX_AGE) {
            self.window.pop_front();
        }
    }
}

/// A summary vector; clones share the series.
#[derive(Clone, Debug)]
pub struct SummaryVec {
    desc: Desc,
    labels: Vec<String>,
    objectives: Vec<f64>,
    series: Arc<Mutex<BTreeMap<Vec<String>, Series>>>,
}

impl SummaryVec {
    pub fn new(name: &str, help: &str, labels: &[&str], objectives: &[f64]) -> prometheus::Result<Self> {
        let labels: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        let desc = Desc::new(name.to_string(), help.to_string(), labels.clone(), Default::default())?;
        Ok(SummaryVec { desc, labels, objectives: objectives.to_vec(), series: Arc::default() })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Vec<String>, Series>> {
        self.series.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One observation under `values` (in the order of the label names).
    pub fn observe(&self, values: &[&str], value: f64) {
        self.observe_at(values, value, Instant::now());
    }

    fn observe_at(&self, values: &[&str], value: f64, now: Instant) {
        assert_eq!(values.len(), self.labels.len(), "{}: label values", self.desc.fq_name);
        let mut series = self.lock();
        let s = series.entry(values.iter().map(|v| v.to_string()).collect()).or_default();
        s.count += 1;
        s.sum += value;
        s.window.push_back((now, value));
        if s.window.len() > MAX_WINDOW {
            s.window.pop_front();
        }
        s.prune(now);
    }

    /// Drops every series.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn metric(&self, values: &[String], s: &mut Series, now: Instant) -> Metric {
        s.prune(now);
        let mut sorted: Vec<f64> = s.window.iter().map(|(_, v)| *v).collect();
        sorted.sort_by(f64::total_cmp);
        let quantiles = self
            .objectives
            .iter()
            .map(|&q| {
                let mut quantile = Quantile::default();
                quantile.set_quantile(q);
                quantile.set_value(rank(&sorted, q));
                quantile
            })
            .collect();
        let mut summary = Summary::default();
        summary.set_sample_count(s.count);
        summary.set_sample_sum(s.sum);
        summary.set_quantile(quantiles);
        let mut metric = Metric::default();
        let pairs = self
            .labels
            .iter()
            .zip(values)
            .map(|(name, value)| {
                let mut pair = LabelPair::default();
                pair.set_name(name.clone());
                pair.set_value(value.clone());
                pair
            })
            .collect();
        metric.set_label(pairs);
        metric.set_summary(summary);
        metric
    }
}

/// The `q` quantile of `sorted` by nearest rank; NaN when empty (as client_golang).
fn rank(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

impl Collector for SummaryVec {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let now = Instant::now();
        let mut series = self.lock();
        if series.is_empty() {
            return vec![];
        }
        let metrics = series.iter_mut().map(|(values, s)| self.metric(values, s, now)).collect();
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::SUMMARY);
        family.set_metric(metrics);
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_everything_and_ranks_the_window() {
        let s = SummaryVec::new("x_seconds", "x", &["nodepool"], OBJECTIVES).unwrap();
        let t0 = Instant::now();
        for v in 1..=10 {
            s.observe_at(&["a"], v as f64, t0);
        }
        let family = s.collect().remove(0);
        assert_eq!(family.get_field_type(), MetricType::SUMMARY);
        let summary = family.get_metric()[0].get_summary();
        assert_eq!((summary.sample_count(), summary.sample_sum()), (10, 55.0));
        let q: Vec<f64> = summary.get_quantile().iter().map(|q| q.value()).collect();
        assert_eq!(q, vec![1.0, 6.0, 9.0, 10.0, 10.0]);
        // Past the window the quantiles are NaN, the totals stay.
        let later = t0 + MAX_AGE + Duration::from_secs(1);
        let mut series = s.lock();
        let (values, series) = series.iter_mut().next().unwrap();
        let metric = s.metric(&values.clone(), series, later);
        assert!(metric.get_summary().get_quantile().iter().all(|q| q.value().is_nan()));
        assert_eq!(metric.get_summary().sample_count(), 10);
    }

    #[test]
    fn no_series_no_family() {
        let s = SummaryVec::new("y_seconds", "y", &[], OBJECTIVES).unwrap();
        assert!(s.collect().is_empty());
        s.observe(&[], 1.0);
        s.reset();
        assert!(s.collect().is_empty());
    }
}
