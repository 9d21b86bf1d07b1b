//! Rebuilding a `GaugeVec` family from the index in place (the status-condition gauges):
//! a refresh sets the series it still has and removes only the ones it no longer writes.
//!
//! Dropping the family (`reset`) and writing it again made every refresh (every
//! [`super::metrics::REFRESH_INTERVAL`] and every scrape) allocate each series anew: its label pairs, its
//! descriptor, its atomic. A series the refresh writes again is found by its label values without
//! allocating. The per-pod and per-node gauges, far more numerous, are not `GaugeVec`s at all: see
//! [`crate::operator::metrics::RebuiltGauge`].

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use hashbrown::{Equivalent, HashSet};
use prometheus::core::Collector;
use prometheus::GaugeVec;

/// The label values each rebuilt gauge family was left with, by the family's name.
#[derive(Debug, Default)]
pub struct Series {
    families: HashMap<String, Family>,
}

#[derive(Debug, Default)]
struct Family {
    /// The label values of every series the family has.
    live: HashSet<Vec<String>>,
    /// Emptied at the start of a rebuild and kept for its capacity.
    spare: HashSet<Vec<String>>,
}

impl Series {
    /// Starts rebuilding `gauge`: every series [`Rebuild::set`] does not write before [`Series::finish`]
    /// is removed then.
    pub fn start<'g>(&mut self, gauge: &'g GaugeVec) -> Rebuild<'g> {
        let name = family_name(gauge);
        let mut family = self.families.remove(&name).unwrap_or_default();
        let mut written = std::mem::take(&mut family.spare);
        written.clear();
        Rebuild { gauge, name, previous: family.live, written }
    }

    /// Ends a rebuild: removes the series it did not write.
    pub fn finish(&mut self, rebuild: Rebuild<'_>) {
        let Rebuild { gauge, name, mut previous, written } = rebuild;
        for labels in previous.drain() {
            let values: Vec<&str> = labels.iter().map(String::as_str).collect();
            // Absent only when the family was reset meanwhile (a standby clears the leader-only
            // gauges), which is what removing it would do.
            let _ = gauge.remove_label_values(&values);
        }
        self.families.insert(name, Family { live: written, spare: previous });
    }
}

/// One family being rebuilt ([`Series::start`]).
pub struct Rebuild<'g> {
    gauge: &'g GaugeVec,
    name: String,
    /// Series from before the rebuild not written yet.
    previous: HashSet<Vec<String>>,
    written: HashSet<Vec<String>>,
}

impl Rebuild<'_> {
    /// Sets the series of `labels` to `value`.
    pub fn set(&mut self, labels: &[&str], value: f64) {
        self.gauge.with_label_values(labels).set(value);
        let key = Labels(labels);
        if self.written.contains(&key) {
            return;
        }
        let owned =
            self.previous.take(&key).unwrap_or_else(|| labels.iter().map(|l| l.to_string()).collect());
        self.written.insert(owned);
    }
}

fn family_name(gauge: &GaugeVec) -> String {
    gauge.desc().first().map(|d| d.fq_name.clone()).unwrap_or_default()
}

/// Borrowed label values, looked up in a set of owned ones. It hashes as a `Vec<String>` of the same
/// values does (a slice hashes its length, then each element; `&str` and `String` hash as `str`).
struct Labels<'a>(&'a [&'a str]);

impl Hash for Labels<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl Equivalent<Vec<String>> for Labels<'_> {
    fn equivalent(&self, key: &Vec<String>) -> bool {
        self.0.len() == key.len() && self.0.iter().zip(key).all(|(a, b)| *a == b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Opts;

    fn gauge() -> GaugeVec {
        GaugeVec::new(Opts::new("test_series", "a gauge"), &["pod", "phase"]).unwrap()
    }

    fn values(gauge: &GaugeVec) -> Vec<(String, String, f64)> {
        let mut out: Vec<(String, String, f64)> = gauge
            .collect()
            .iter()
            .flat_map(|family| family.get_metric().to_vec())
            .map(|m| {
                let labels = m.get_label();
                (labels[1].value().to_string(), labels[0].value().to_string(), m.get_gauge().get_value())
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        out
    }

    #[test]
    fn a_rebuild_keeps_what_it_writes_and_removes_the_rest() {
        let g = gauge();
        let mut series = Series::default();
        let mut r = series.start(&g);
        r.set(&["a", "Pending"], 1.0);
        r.set(&["b", "Running"], 1.0);
        series.finish(r);
        assert_eq!(
            values(&g),
            vec![("a".into(), "Pending".into(), 1.0), ("b".into(), "Running".into(), 1.0)]
        );

        let mut r = series.start(&g);
        r.set(&["a", "Running"], 2.0);
        r.set(&["b", "Running"], 3.0);
        r.set(&["b", "Running"], 4.0);
        series.finish(r);
        assert_eq!(
            values(&g),
            vec![("a".into(), "Running".into(), 2.0), ("b".into(), "Running".into(), 4.0)]
        );

        let empty = series.start(&g);
        series.finish(empty);
        assert!(values(&g).is_empty());
    }

    #[test]
    fn a_family_reset_meanwhile_is_rebuilt_with_what_the_rebuild_writes() {
        let g = gauge();
        let mut series = Series::default();
        let mut r = series.start(&g);
        r.set(&["a", "Pending"], 1.0);
        r.set(&["b", "Pending"], 1.0);
        series.finish(r);
        g.reset();
        let mut r = series.start(&g);
        r.set(&["b", "Pending"], 1.0);
        series.finish(r);
        assert_eq!(values(&g), vec![("b".into(), "Pending".into(), 1.0)]);
    }

    #[test]
    fn borrowed_labels_hash_as_owned_ones() {
        let owned: HashSet<Vec<String>> = [vec!["a".to_string(), "b".to_string()]].into_iter().collect();
        assert!(owned.contains(&Labels(&["a", "b"])));
        assert!(!owned.contains(&Labels(&["a", "c"])));
        assert!(!owned.contains(&Labels(&["a"])));
    }
}
