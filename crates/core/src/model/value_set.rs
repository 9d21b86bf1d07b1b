//! A small sorted set of label values, the values one requirement lists (`In [a, b]`, `NotIn [c]`).
//!
//! A requirement usually lists one to a few values, and every pending pod carries its requirements as
//! long as it is pending: a `BTreeSet` would hold even one value in a node sized for eleven. Here the
//! values are a boxed slice, sorted and without repeats, so a set takes exactly what it holds, equal
//! sets compare and hash equal, and iteration is in value order as the `BTreeSet` was.

use std::cmp::Ordering;

/// Label values, sorted and distinct.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ValueSet(Box<[String]>);

impl ValueSet {
    pub fn new() -> ValueSet {
        ValueSet::default()
    }

    pub fn contains(&self, value: &str) -> bool {
        self.0.binary_search_by(|v| v.as_str().cmp(value)).is_ok()
    }

    pub fn iter(&self) -> impl Iterator<Item = &String> {
        self.0.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values in both sets.
    pub fn intersection(&self, other: &ValueSet) -> ValueSet {
        self.merge(other, |in_self, in_other| in_self && in_other)
    }

    /// The values of `self` not in `other`.
    pub fn difference(&self, other: &ValueSet) -> ValueSet {
        self.merge(other, |in_self, in_other| in_self && !in_other)
    }

    /// The values in either set.
    pub fn union(&self, other: &ValueSet) -> ValueSet {
        self.merge(other, |in_self, in_other| in_self || in_other)
    }

    /// The values `keep` admits, given whether each is in `self` and in `other`: one walk over both
    /// sorted slices.
    fn merge(&self, other: &ValueSet, keep: impl Fn(bool, bool) -> bool) -> ValueSet {
        let (mut a, mut b) = (self.0.iter().peekable(), other.0.iter().peekable());
        let mut out = Vec::new();
        loop {
            let (value, in_self, in_other) = match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(_), None) => (a.next(), true, false),
                (None, Some(_)) => (b.next(), false, true),
                (Some(x), Some(y)) => match x.cmp(y) {
                    Ordering::Less => (a.next(), true, false),
                    Ordering::Greater => (b.next(), false, true),
                    Ordering::Equal => {
                        b.next();
                        (a.next(), true, true)
                    }
                },
            };
            if keep(in_self, in_other) {
                out.extend(value.cloned());
            }
        }
        ValueSet(out.into_boxed_slice())
    }
}

impl<S: Into<String>> FromIterator<S> for ValueSet {
    fn from_iter<I: IntoIterator<Item = S>>(values: I) -> ValueSet {
        let mut values: Vec<String> = values.into_iter().map(Into::into).collect();
        values.sort_unstable();
        values.dedup();
        ValueSet(values.into_boxed_slice())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn set(values: &[&str]) -> ValueSet {
        values.iter().copied().collect()
    }

    fn tree(values: &[&str]) -> BTreeSet<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    fn listed(set: &ValueSet) -> Vec<String> {
        set.iter().cloned().collect()
    }

    #[test]
    fn keeps_values_sorted_and_distinct() {
        let s = set(&["b", "a", "c", "a"]);
        assert_eq!(listed(&s), ["a", "b", "c"]);
        assert!(s.contains("b") && !s.contains("d"));
        assert_eq!(s, set(&["c", "b", "a"]));
        assert!(ValueSet::new().is_empty());
    }

    #[test]
    fn set_operations_agree_with_a_btree_set() {
        let samples: [&[&str]; 6] =
            [&[], &["a"], &["a", "b"], &["b", "c", "d"], &["a", "c", "e", "g"], &["0", "a", "z"]];
        for a in samples {
            for b in samples {
                let (x, y) = (set(a), set(b));
                let (tx, ty) = (tree(a), tree(b));
                let expect = |s: BTreeSet<&String>| s.into_iter().cloned().collect::<Vec<_>>();
                assert_eq!(
                    listed(&x.intersection(&y)),
                    expect(tx.intersection(&ty).collect()),
                    "{a:?} ∩ {b:?}"
                );
                assert_eq!(listed(&x.difference(&y)), expect(tx.difference(&ty).collect()), "{a:?} - {b:?}");
                assert_eq!(listed(&x.union(&y)), expect(tx.union(&ty).collect()), "{a:?} ∪ {b:?}");
            }
        }
    }
}
