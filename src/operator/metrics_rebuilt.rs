//! A gauge family rebuilt whole from the index at every refresh, one series per object (the per-pod
//! gauges: `karpenter_pods_state` and the pod timings; the per-node gauges; the status-condition
//! gauges), kept as compact rows and written straight to the text format.
//!
//! The `prometheus` crate's `GaugeVec` keeps, per series, its label pairs as protobuf messages, a copy
//! of the family's descriptor and an atomic, and `gather` copies every series again into a
//! `MetricFamily` at each scrape: about 10 KB per pod for `karpenter_pods_state`'s 13 labels, 100 MB at
//! 10,000 pods. A row here is its value and, per label, a 4-byte index into the family's table of
//! label values, each value held once however many rows name it (a namespace, a node, a zone); the
//! rows of a family sit in two flat arrays, so a row costs no allocation of its own. A per-node row of
//! thirty labels takes some 130 bytes. Rendering writes each row's line without building anything else.
//!
//! The output is what the registry would serve for a `GaugeVec`: `# HELP` and `# TYPE`, then the
//! series sorted by their label values in label-name order, labels in name order, values escaped as
//! the text format requires; nothing when the family has no series.

use std::cmp::Ordering;
use std::collections::HashMap;
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

/// A family's series: row `i` has the label values `labels[i * width..(i + 1) * width]` (indices into
/// `values`, in label-name order, `width` the number of labels) and the value `samples[i]`.
#[derive(Debug, Default)]
struct Rows {
    labels: Vec<u32>,
    samples: Vec<f64>,
    values: Values,
}

/// Label values, each held once, by index.
#[derive(Debug, Default)]
struct Values {
    table: Vec<Arc<str>>,
    index: HashMap<Arc<str>, u32>,
}

impl Values {
    /// The index of `value`, added when new; its string is the one `previous` holds when it has it,
    /// so a rebuild of the same series allocates no string again.
    fn intern(&mut self, previous: &Values, value: &str) -> u32 {
        if let Some(&i) = self.index.get(value) {
            return i;
        }
        let shared = previous.index.get_key_value(value).map_or_else(|| Arc::from(value), |(s, _)| s.clone());
        let i = u32::try_from(self.table.len()).expect("fewer than 2^32 label values");
        self.table.push(shared.clone());
        self.index.insert(shared, i);
        i
    }

    fn get(&self, i: u32) -> &str {
        &self.table[i as usize]
    }

    /// Compares two rows' label values, string by string.
    fn compare(&self, a: &[u32], b: &[u32]) -> Ordering {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| if x == y { Ordering::Equal } else { self.get(x).cmp(self.get(y)) })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
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
        Rebuild { gauge: self, rows: Rows::default() }
    }

    /// Drops every series.
    pub fn clear(&self) {
        *self.lock() = Rows::default();
    }

    /// How many series the family has.
    pub fn len(&self) -> usize {
        self.lock().samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the family in the text format; nothing when it has no series.
    pub fn render(&self, out: &mut impl io::Write) -> io::Result<()> {
        let rows = self.lock();
        if rows.samples.is_empty() {
            return Ok(());
        }
        let family = &self.family;
        let name = &family.name;
        if !family.help.is_empty() {
            writeln!(out, "# HELP {name} {}", escape(&family.help, false))?;
        }
        writeln!(out, "# TYPE {name} gauge")?;
        let width = family.names.len();
        for (i, sample) in rows.samples.iter().enumerate() {
            out.write_all(name.as_bytes())?;
            let mut separator = '{';
            for (label, &value) in family.names.iter().zip(&rows.labels[i * width..(i + 1) * width]) {
                write!(out, "{separator}{label}=\"{}\"", escape(rows.values.get(value), true))?;
                separator = ',';
            }
            if width > 0 {
                out.write_all(b"}")?;
            }
            writeln!(out, " {sample}")?;
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
    /// The rows as written: not yet sorted, and a later row may repeat an earlier one's labels.
    rows: Rows,
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
        let rows = &mut self.rows;
        for &i in &family.from_given {
            let index = rows.values.intern(&previous.values, labels[i]);
            rows.labels.push(index);
        }
        rows.samples.push(value);
    }

    /// Replaces the family's series with the ones written.
    pub fn finish(self) {
        let Rebuild { gauge, rows } = self;
        let width = gauge.family.names.len();
        let row = |i: usize| &rows.labels[i * width..(i + 1) * width];
        let mut order: Vec<usize> = (0..rows.samples.len()).collect();
        // Stable: among rows with the same labels, the last written stays last, and wins below.
        order.sort_by(|&a, &b| rows.values.compare(row(a), row(b)));
        let mut kept: Vec<usize> = Vec::with_capacity(order.len());
        for i in order {
            match kept.last_mut() {
                Some(last) if row(*last) == row(i) => *last = i,
                _ => kept.push(i),
            }
        }
        let mut sorted = Rows {
            labels: Vec::with_capacity(kept.len() * width),
            samples: Vec::with_capacity(kept.len()),
            values: Values::default(),
        };
        for &i in &kept {
            sorted.labels.extend_from_slice(row(i));
            sorted.samples.push(rows.samples[i]);
        }
        sorted.values = rows.values;
        *gauge.lock() = sorted;
    }
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
            // The namespace is held once: 100 pod names and one namespace.
            assert_eq!(rows.values.table.len(), 101);
            let namespaces: Vec<u32> = rows.labels.chunks(2).map(|row| row[1]).collect();
            assert!(namespaces.iter().all(|&i| i == namespaces[0]), "{namespaces:?}");
        }
        let before: Vec<Arc<str>> = gauge.lock().values.table.clone();
        let mut again = gauge.rebuild();
        for i in (0..100).rev() {
            again.set(&[&format!("pod-{i}"), "shop"], 2.0);
        }
        again.finish();
        {
            // A rebuild of the same series reuses the strings it held.
            let rows = gauge.lock();
            for value in &rows.values.table {
                assert!(before.iter().any(|b| Arc::ptr_eq(b, value)), "{value} allocated again");
            }
        }
        gauge.clear();
        assert_eq!(rendered(&gauge), "");
        gauge.rebuild().finish();
        assert_eq!(rendered(&gauge), "");
    }
}
