//! A gauge family rebuilt whole from the index at every refresh, one series per object (the per-pod
//! gauges: `karpenter_pods_state` and the pod timings; the per-node gauges; the status-condition
//! gauges), kept as compact rows and written straight to the text format.
//!
//! The `prometheus` crate's `GaugeVec` keeps, per series, its label pairs as protobuf messages, a copy
//! of the family's descriptor and an atomic, and `gather` copies every series again into a
//! `MetricFamily` at each scrape: about 10 KB per pod for `karpenter_pods_state`'s 13 labels, 100 MB at
//! 10,000 pods. A row here is the label values, shared between rows where they repeat (a namespace,
//! a node, a zone), and the value; rendering writes each row's line without building anything else.
//!
//! The output is what the registry would serve for a `GaugeVec`: `# HELP` and `# TYPE`, then the
//! series sorted by their label values in label-name order, labels in name order, values escaped as
//! the text format requires; nothing when the family has no series.

use std::collections::HashSet;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// A rebuilt gauge family; clones share the rows.
#[derive(Clone, Debug)]
pub struct RebuiltGauge {
    family: Arc<Family>,
}

#[derive(Debug)]
struct Family {
    name: String,
    help: String,
    /// Label names in name order, as the text format writes them.
    names: Vec<String>,
    /// For each label in name order, its place in the order the recorders pass values.
    from_given: Vec<usize>,
    rows: Mutex<Rows>,
}

#[derive(Debug, Default)]
struct Rows {
    /// Sorted by label values (in name order), one row per distinct set of values.
    rows: Vec<Row>,
    /// Every label value the rows hold, so the next rebuild reuses them instead of allocating.
    values: HashSet<Arc<str>>,
}

#[derive(Debug)]
struct Row {
    /// In label-name order.
    labels: Box<[Arc<str>]>,
    value: f64,
}

impl RebuiltGauge {
    /// A family called `name` with `labels` in the order the recorders pass values.
    pub fn new(name: &str, help: &str, labels: &[&str]) -> RebuiltGauge {
        let mut from_given: Vec<usize> = (0..labels.len()).collect();
        from_given.sort_by_key(|&i| labels[i]);
        let names = from_given.iter().map(|&i| labels[i].to_string()).collect();
        let family = Family {
            name: name.to_string(),
            help: help.to_string(),
            names,
            from_given,
            rows: Mutex::default(),
        };
        RebuiltGauge { family: Arc::new(family) }
    }

    pub fn name(&self) -> &str {
        &self.family.name
    }

    /// Starts a rebuild: the family's series become exactly the ones [`Rebuild::set`] writes, when
    /// [`Rebuild::finish`] is called.
    pub fn rebuild(&self) -> Rebuild<'_> {
        Rebuild { gauge: self, rows: Vec::new(), values: HashSet::new() }
    }

    /// Drops every series.
    pub fn clear(&self) {
        *self.lock() = Rows::default();
    }

    /// How many series the family has.
    pub fn len(&self) -> usize {
        self.lock().rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the family in the text format; nothing when it has no series.
    pub fn render(&self, out: &mut impl io::Write) -> io::Result<()> {
        let rows = self.lock();
        if rows.rows.is_empty() {
            return Ok(());
        }
        let family = &self.family;
        let name = &family.name;
        if !family.help.is_empty() {
            writeln!(out, "# HELP {name} {}", escape(&family.help, false))?;
        }
        writeln!(out, "# TYPE {name} gauge")?;
        for row in &rows.rows {
            out.write_all(name.as_bytes())?;
            let mut separator = '{';
            for (label, value) in family.names.iter().zip(row.labels.iter()) {
                write!(out, "{separator}{label}=\"{}\"", escape(value, true))?;
                separator = ',';
            }
            if !family.names.is_empty() {
                out.write_all(b"}")?;
            }
            writeln!(out, " {}", row.value)?;
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Rows> {
        self.family.rows.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A rebuild in progress ([`RebuiltGauge::rebuild`]); dropped without [`Rebuild::finish`], it changes
/// nothing.
pub struct Rebuild<'g> {
    gauge: &'g RebuiltGauge,
    rows: Vec<Row>,
    values: HashSet<Arc<str>>,
}

impl Rebuild<'_> {
    /// Sets the series of `labels` (in the order the family was defined with) to `value`; a later
    /// `set` of the same labels wins, as with a `GaugeVec`.
    ///
    /// # Panics
    /// When `labels` has not one value per label name (a recorder bug, as `with_label_values`).
    pub fn set(&mut self, labels: &[&str], value: f64) {
        let family = &self.gauge.family;
        assert_eq!(labels.len(), family.names.len(), "label values of {}", family.name);
        let previous = self.gauge.lock();
        let labels = family
            .from_given
            .iter()
            .map(|&i| intern(&mut self.values, &previous.values, labels[i]))
            .collect();
        self.rows.push(Row { labels, value });
    }

    /// Replaces the family's series with the ones written.
    pub fn finish(self) {
        let Rebuild { gauge, mut rows, values } = self;
        // Stable: among rows with the same labels, the last written stays last, and wins below.
        rows.sort_by(|a, b| a.labels.cmp(&b.labels));
        let mut deduplicated: Vec<Row> = Vec::with_capacity(rows.len());
        for row in rows {
            match deduplicated.last_mut() {
                Some(last) if last.labels == row.labels => *last = row,
                _ => deduplicated.push(row),
            }
        }
        *gauge.lock() = Rows { rows: deduplicated, values };
    }
}

/// `value` as a shared string: the one this rebuild already holds, else the one the family held
/// before, else a new one.
fn intern(values: &mut HashSet<Arc<str>>, previous: &HashSet<Arc<str>>, value: &str) -> Arc<str> {
    if let Some(held) = values.get(value) {
        return held.clone();
    }
    let shared = previous.get(value).cloned().unwrap_or_else(|| Arc::from(value));
    values.insert(shared.clone());
    shared
}

/// The text format's escaping: `\` and newline in help text, and `"` too in label values.
fn escape(text: &str, quote: bool) -> std::borrow::Cow<'_, str> {
    let special = |c: char| c == '\\' || c == '\n' || (quote && c == '"');
    if !text.contains(special) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use prometheus::{Encoder, GaugeVec, Opts, Registry, TextEncoder};

    use super::*;

    /// What the registry serves for a `GaugeVec` given the same series.
    fn as_registry(name: &str, help: &str, labels: &[&str], series: &[(&[&str], f64)]) -> String {
        let registry = Registry::new();
        let gauge = GaugeVec::new(Opts::new(name, help), labels).unwrap();
        registry.register(Box::new(gauge.clone())).unwrap();
        for (values, value) in series {
            gauge.with_label_values(values).set(*value);
        }
        let mut out = Vec::new();
        TextEncoder::new().encode(&registry.gather(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn rendered(gauge: &RebuiltGauge) -> String {
        let mut out = Vec::new();
        gauge.render(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn renders_as_the_registry_renders_a_gauge_vec() {
        let labels = ["name", "namespace", "zone", "arch"];
        let help = "Pod state, with a \\ and a\nnewline.";
        let series: Vec<(&[&str], f64)> = vec![
            (&["web-2", "shop", "eastus-1", "amd64"], 1.0),
            (&["web-1", "shop", "eastus-2", "amd64"], 0.5),
            (&["api \"quoted\"", "a\\b", "line\nbreak", ""], 12.25),
            (&["web-1", "other", "eastus-1", "arm64"], 3.0),
        ];
        let gauge = RebuiltGauge::new("karpenter_pods_state", help, &labels);
        let mut rebuild = gauge.rebuild();
        for (values, value) in &series {
            rebuild.set(values, *value);
        }
        rebuild.finish();
        assert_eq!(rendered(&gauge), as_registry("karpenter_pods_state", help, &labels, &series));
        assert_eq!(gauge.len(), 4);
    }

    #[test]
    fn a_rebuild_keeps_only_what_it_writes_and_the_last_write_wins() {
        let gauge = RebuiltGauge::new("g", "help", &["name"]);
        let mut first = gauge.rebuild();
        first.set(&["a"], 1.0);
        first.set(&["b"], 2.0);
        first.finish();
        let mut second = gauge.rebuild();
        second.set(&["b"], 3.0);
        second.set(&["c"], 4.0);
        second.set(&["b"], 5.0);
        // Until it finishes, the family keeps the previous series.
        assert_eq!(rendered(&gauge), as_registry("g", "help", &["name"], &[(&["a"], 1.0), (&["b"], 2.0)]));
        second.finish();
        assert_eq!(rendered(&gauge), as_registry("g", "help", &["name"], &[(&["b"], 5.0), (&["c"], 4.0)]));
        // An abandoned rebuild changes nothing.
        let mut dropped = gauge.rebuild();
        dropped.set(&["z"], 9.0);
        drop(dropped);
        assert_eq!(gauge.len(), 2);
    }

    #[test]
    fn repeated_values_are_shared_and_an_empty_family_renders_nothing() {
        let gauge = RebuiltGauge::new("g", "help", &["name", "namespace"]);
        let mut rebuild = gauge.rebuild();
        for i in 0..100 {
            rebuild.set(&[&format!("pod-{i}"), "shop"], 1.0);
        }
        rebuild.finish();
        {
            let rows = gauge.lock();
            let shop: Vec<&Arc<str>> = rows.rows.iter().map(|r| &r.labels[1]).collect();
            assert!(shop.iter().all(|s| Arc::ptr_eq(s, shop[0])), "one shared namespace string");
            assert_eq!(rows.values.len(), 101);
        }
        gauge.clear();
        assert_eq!(rendered(&gauge), "");
        gauge.rebuild().finish();
        assert_eq!(rendered(&gauge), "");
    }
}
