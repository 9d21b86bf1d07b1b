//! A node's labels, held as shared strings.
//!
//! A node carries some thirty labels, and nearly all of them (its pool, size, zone, capacity type,
//! image, the size's `karpenter.azure.com/sku-*` facts) repeat on every node of its kind; only the
//! hostname and a few ids are its own. With `String`s each node held its own copy of every key and
//! value; with `Arc<str>` the cluster index keeps one copy of each distinct string and every node
//! points at it.
//!
//! [`LabelLookup`] reads a label from either kind of map, so a requirement is matched the same way
//! against a node's labels and against a pod's or a template's.

use std::collections::BTreeMap;
use std::sync::Arc;

/// A node's labels: label key → value, both shared.
pub type NodeLabels = BTreeMap<Arc<str>, Arc<str>>;

/// A map of labels, read by key.
pub trait LabelLookup {
    /// The value of `key`, if the label is there.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelLookup for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl LabelLookup for NodeLabels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(|value| &**value)
    }
}

impl<T: LabelLookup + ?Sized> LabelLookup for &T {
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
}

impl<T: LabelLookup + ?Sized> LabelLookup for Arc<T> {
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
}

/// Node labels from owned strings (a Node object's, a test's).
pub fn node_labels<K: AsRef<str>, V: AsRef<str>>(labels: impl IntoIterator<Item = (K, V)>) -> NodeLabels {
    labels.into_iter().map(|(k, v)| (Arc::from(k.as_ref()), Arc::from(v.as_ref()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_of_map_read_the_same_labels() {
        let owned: BTreeMap<String, String> = [("topology.kubernetes.io/zone", "eastus-1"), ("app", "web")]
            .map(|(k, v)| (k.into(), v.into()))
            .into();
        let shared = node_labels(&owned);
        for key in ["topology.kubernetes.io/zone", "app", "missing"] {
            assert_eq!(owned.label(key), shared.label(key), "{key}");
        }
        assert_eq!(shared.label("app"), Some("web"));
    }
}
