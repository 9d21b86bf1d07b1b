//! The requirements algebra: node selector requirements as sets of allowed label values.
//!
//! Every requirement on a key denotes a set of outcomes for that key's label on a node: one of its
//! possible values, or "the label is absent" (written ⊥ below).
//!
//! | operator       | allowed outcomes                     |
//! |----------------|--------------------------------------|
//! | `In V`         | the values in V                      |
//! | `NotIn V`      | every value not in V, and ⊥          |
//! | `Exists`       | every value                          |
//! | `DoesNotExist` | only ⊥                               |
//! | `Gt n` / `Lt n`| integer values above n / below n     |
//! | `Gte n` / `Lte n` | integer values at least n / at most n |
//!
//! [`Requirement`] keeps that set in a closed form (a finite set or the complement of one, integer
//! bounds, and whether ⊥ is allowed), so intersection is exact and emptiness is decidable. A
//! [`Requirements`] value is one requirement per key: the conjunction of everything known about a
//! node, a NodePool, an instance type or a pod. Pure code: no I/O, deterministic (keys and values kept sorted).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::labels;
use crate::model::node_labels::LabelLookup;
use crate::model::value_set::ValueSet;

/// A node selector operator, as in `corev1.NodeSelectorOperator`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    /// Integer values at least n (upstream core v1.14's NodeSelectorRequirementWithMinValues).
    Gte,
    /// Integer values at most n.
    Lte,
}

/// Which values a requirement admits, before integer bounds are applied.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Values {
    /// Exactly these values.
    Only(ValueSet),
    /// Any value except these.
    AllBut(ValueSet),
}

/// The set of allowed outcomes for one label key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    values: Values,
    /// Values must parse as integers (int64) greater than this. Wider than int64 so that `Gte` and
    /// `Lte` at the bounds of int64 (`Gt i64::MIN-1`, `Lt i64::MAX+1`) are exact.
    greater_than: Option<i128>,
    /// Values must parse as integers (int64) less than this.
    less_than: Option<i128>,
    /// Whether a node without this label satisfies the requirement.
    absent_allowed: bool,
    /// The least number of distinct values the options of a node must span (upstream minValues).
    min_values: Option<u32>,
}

/// A requirement could not be built from its API form.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RequirementError {
    #[error("requirement on {key:?}: operator {operator} needs exactly one integer value, got {values:?}")]
    BadIntegerOperand { key: String, operator: &'static str, values: Vec<String> },
    #[error("requirement on {key:?}: operator In needs at least one value")]
    EmptyIn { key: String },
}

impl Requirement {
    /// `key In values`.
    pub fn is_in<I: IntoIterator<Item = S>, S: Into<String>>(key: &str, values: I) -> Self {
        Self::with(key, Values::Only(values.into_iter().map(Into::into).collect()), false)
    }

    /// `key NotIn values`.
    pub fn not_in<I: IntoIterator<Item = S>, S: Into<String>>(key: &str, values: I) -> Self {
        Self::with(key, Values::AllBut(values.into_iter().map(Into::into).collect()), true)
    }

    /// `key Exists`.
    pub fn exists(key: &str) -> Self {
        Self::with(key, Values::AllBut(ValueSet::new()), false)
    }

    /// `key DoesNotExist`.
    pub fn does_not_exist(key: &str) -> Self {
        Self::with(key, Values::Only(ValueSet::new()), true)
    }

    /// `key Gt n`.
    pub fn greater_than(key: &str, n: i64) -> Self {
        Self::above(key, n.into())
    }

    /// `key Lt n`.
    pub fn less_than(key: &str, n: i64) -> Self {
        Self::below(key, n.into())
    }

    fn above(key: &str, n: i128) -> Self {
        Self { greater_than: Some(n), ..Self::exists(key) }
    }

    fn below(key: &str, n: i128) -> Self {
        Self { less_than: Some(n), ..Self::exists(key) }
    }

    /// No constraint at all: every value and ⊥.
    pub fn any(key: &str) -> Self {
        Self::with(key, Values::AllBut(ValueSet::new()), true)
    }

    /// Every constructor comes here, so a deprecated alias of a well-known key is read as that key,
    /// as upstream core's `NewRequirementWithFlexibility` does ([`labels::normalized_key`]).
    fn with(key: &str, values: Values, absent_allowed: bool) -> Self {
        Self {
            key: labels::normalized_key(key).to_string(),
            values,
            greater_than: None,
            less_than: None,
            absent_allowed,
            min_values: None,
        }
    }

    /// Builds a requirement from the operator form used by the APIs.
    pub fn from_operator(
        key: &str,
        operator: Operator,
        values: &[String],
        min_values: Option<u32>,
    ) -> Result<Self, RequirementError> {
        let integer = |name: &'static str| -> Result<i64, RequirementError> {
            match values {
                [one] => one.parse::<i64>().ok(),
                _ => None,
            }
            .ok_or_else(|| RequirementError::BadIntegerOperand {
                key: key.to_string(),
                operator: name,
                values: values.to_vec(),
            })
        };
        let requirement = match operator {
            Operator::In if values.is_empty() => {
                return Err(RequirementError::EmptyIn { key: key.to_string() })
            }
            Operator::In => Self::is_in(key, values.iter().cloned()),
            Operator::NotIn => Self::not_in(key, values.iter().cloned()),
            Operator::Exists => Self::exists(key),
            Operator::DoesNotExist => Self::does_not_exist(key),
            Operator::Gt => Self::greater_than(key, integer("Gt")?),
            Operator::Lt => Self::less_than(key, integer("Lt")?),
            // Integers only, so `Gte n` is `Gt n-1` and `Lte n` is `Lt n+1`, exact in i128 at the
            // bounds of int64 too.
            Operator::Gte => Self::above(key, i128::from(integer("Gte")?) - 1),
            Operator::Lte => Self::below(key, i128::from(integer("Lte")?) + 1),
        };
        Ok(requirement.with_min_values(min_values))
    }

    /// Sets the minimum number of distinct values (minValues).
    pub fn with_min_values(mut self, min_values: Option<u32>) -> Self {
        self.min_values = min_values;
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    /// Whether a node whose label is `value` (or absent, for `None`) satisfies this requirement.
    pub fn admits(&self, value: Option<&str>) -> bool {
        match value {
            None => self.absent_allowed,
            Some(v) => self.admits_value(v),
        }
    }

    fn within_bounds(&self, v: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        let Ok(n) = v.parse::<i64>().map(i128::from) else { return false };
        self.greater_than.is_none_or(|g| n > g) && self.less_than.is_none_or(|l| n < l)
    }

    fn admits_value(&self, v: &str) -> bool {
        let listed = match &self.values {
            Values::Only(set) => set.contains(v),
            Values::AllBut(set) => !set.contains(v),
        };
        listed && self.within_bounds(v)
    }

    /// The finite set of admitted values, when there is one (In after bounds are applied).
    pub fn finite_values(&self) -> Option<BTreeSet<&str>> {
        match &self.values {
            Values::Only(set) => {
                Some(set.iter().map(String::as_str).filter(|v| self.within_bounds(v)).collect())
            }
            Values::AllBut(_) => None,
        }
    }

    /// The one value this requirement pins, if it admits exactly one value and not ⊥.
    pub fn single_value(&self) -> Option<&str> {
        let values = self.finite_values()?;
        (values.len() == 1 && !self.absent_allowed).then(|| *values.iter().next().expect("len is 1"))
    }

    /// Whether some label value (not ⊥) satisfies the requirement.
    pub fn admits_some_value(&self) -> bool {
        match self.finite_values() {
            Some(values) => !values.is_empty(),
            // A complement is infinite; integer bounds leave an infinite set of spellings of the
            // integers in range ("2", "02", ...) as long as the range holds an int64 (`Gt` the
            // largest int64 holds none).
            None => {
                let lowest = self.greater_than.map_or(i128::from(i64::MIN), |g| g + 1).max(i64::MIN.into());
                let highest = self.less_than.map_or(i128::from(i64::MAX), |l| l - 1).min(i64::MAX.into());
                lowest <= highest
            }
        }
    }

    /// Whether nothing at all (no value and not ⊥) satisfies the requirement.
    pub fn is_empty(&self) -> bool {
        !self.absent_allowed && !self.admits_some_value()
    }

    /// The outcomes both requirements allow; minValues takes the larger of the two.
    ///
    /// # Panics
    /// When the keys differ: intersecting requirements on different keys is a programming error.
    pub fn intersect(&self, other: &Requirement) -> Requirement {
        assert_eq!(self.key, other.key, "requirements on different keys cannot be intersected");
        let values = match (&self.values, &other.values) {
            (Values::Only(a), Values::Only(b)) => Values::Only(a.intersection(b)),
            (Values::Only(a), Values::AllBut(b)) | (Values::AllBut(b), Values::Only(a)) => {
                Values::Only(a.difference(b))
            }
            (Values::AllBut(a), Values::AllBut(b)) => Values::AllBut(a.union(b)),
        };
        let mut out = Requirement {
            key: self.key.clone(),
            values,
            greater_than: max_option(self.greater_than, other.greater_than),
            less_than: min_option(self.less_than, other.less_than),
            absent_allowed: self.absent_allowed && other.absent_allowed,
            min_values: max_option(self.min_values, other.min_values),
        };
        // A finite set absorbs the bounds, so equal sets compare equal however they were built.
        if let Values::Only(set) = &out.values {
            let kept = set.iter().filter(|v| out.within_bounds(v)).cloned().collect();
            out.values = Values::Only(kept);
            out.greater_than = None;
            out.less_than = None;
        }
        out
    }

    /// The operator form closest to this set, one or more `(operator, values)` entries, for writing
    /// NodeClaim requirements back to the API.
    pub fn operator_form(&self) -> Vec<(Operator, Vec<String>)> {
        match &self.values {
            Values::Only(set) if set.is_empty() => vec![(Operator::DoesNotExist, vec![])],
            Values::Only(set) => vec![(Operator::In, set.iter().cloned().collect())],
            Values::AllBut(set) => {
                let mut out = vec![];
                if !set.is_empty() || self.absent_allowed {
                    out.push((Operator::NotIn, set.iter().cloned().collect()));
                }
                // `Gt`/`Lt` unless the bound lies beyond int64, where the API's operand cannot say it.
                if let Some(g) = self.greater_than {
                    out.push(match i64::try_from(g) {
                        Ok(g) => (Operator::Gt, vec![g.to_string()]),
                        Err(_) => (Operator::Gte, vec![i64::MIN.to_string()]),
                    });
                }
                if let Some(l) = self.less_than {
                    out.push(match i64::try_from(l) {
                        Ok(l) => (Operator::Lt, vec![l.to_string()]),
                        Err(_) => (Operator::Lte, vec![i64::MAX.to_string()]),
                    });
                }
                if out.is_empty() || (!self.absent_allowed && !set.is_empty()) {
                    out.push((Operator::Exists, vec![]));
                }
                out
            }
        }
    }
}

fn max_option<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_option<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .operator_form()
            .iter()
            .map(|(operator, values)| match operator {
                Operator::Exists | Operator::DoesNotExist => format!("{} {operator:?}", self.key),
                _ => format!("{} {operator:?} [{}]", self.key, values.join(", ")),
            })
            .collect();
        write!(f, "{}", parts.join(" and "))
    }
}

/// Why two requirement sets cannot describe the same node.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Incompatibility {
    #[error("{wanted} conflicts with {offered}")]
    Conflict { key: String, wanted: String, offered: String },
    #[error("label {key:?} is not set on these nodes, so {wanted} cannot be met; set it in the NodePool's template labels or requirements")]
    Undefined { key: String, wanted: String },
}

/// minValues cannot be met by the available options.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("minValues {needed} for {key:?} needs {needed} distinct values but the options span only {found}")]
pub struct MinValuesError {
    pub key: String,
    pub needed: u32,
    pub found: usize,
}

/// One requirement per key: everything known about a node, pool, instance type or pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    /// One requirement per key, sorted by key. A set holds a handful of keys, so a sorted vector is
    /// both the smallest form (a B-tree's first node alone takes about 1.9 KB for one requirement, and
    /// every pending pod carries a few sets) and the quickest to search.
    by_key: Vec<Requirement>,
}

impl Requirements {
    pub fn new() -> Self {
        Self::default()
    }

    /// Requirements that pin each label to its value (`key In [value]`).
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut out = Self::new();
        for (k, v) in labels {
            out.add(Requirement::is_in(k, [v.clone()]));
        }
        out.shrink_to_fit();
        out
    }

    /// Drops the spare room `add` grows into, for a set kept as long as its pod or node is.
    pub fn shrink_to_fit(&mut self) {
        self.by_key.shrink_to_fit();
    }

    /// Adds a requirement, intersecting it with what is already known about its key.
    pub fn add(&mut self, requirement: Requirement) {
        match self.position(&requirement.key) {
            Ok(i) => self.by_key[i] = self.by_key[i].intersect(&requirement),
            Err(i) => self.by_key.insert(i, requirement),
        }
    }

    /// Where `key`'s requirement is, or where it would go.
    fn position(&self, key: &str) -> Result<usize, usize> {
        self.by_key.binary_search_by(|r| r.key.as_str().cmp(key))
    }

    /// The conjunction of both sets.
    pub fn intersect(&self, other: &Requirements) -> Requirements {
        let mut out = self.clone();
        for r in &other.by_key {
            out.add(r.clone());
        }
        out
    }

    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.position(key).ok().map(|i| &self.by_key[i])
    }

    pub fn iter(&self) -> impl Iterator<Item = &Requirement> {
        self.by_key.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.by_key.iter().map(|r| r.key.as_str())
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Whether a node with these labels satisfies every requirement.
    pub fn matches(&self, labels: &(impl LabelLookup + ?Sized)) -> bool {
        self.by_key.iter().all(|r| r.admits(labels.label(&r.key)))
    }

    /// The first key whose requirement admits nothing at all.
    pub fn first_empty(&self) -> Option<&Requirement> {
        self.by_key.iter().find(|r| r.is_empty())
    }

    /// Whether a node described by `self` (a pool, an instance type, a NodeClaim) can meet `wanted`
    /// (a pod's requirements).
    ///
    /// A key `self` does not define means the label will be absent, except for well-known labels
    /// when `undefined_well_known_is_open` is set: those are decided later by the instance type and
    /// offering, so they may take any value (upstream's `AllowUndefinedWellKnownLabels`).
    pub fn compatible(
        &self,
        wanted: &Requirements,
        undefined_well_known_is_open: bool,
    ) -> Result<(), Incompatibility> {
        for want in &wanted.by_key {
            let offered = match self.get(&want.key) {
                Some(offered) => offered,
                None if undefined_well_known_is_open && labels::is_well_known(&want.key) => continue,
                None if want.absent_allowed => continue,
                None => {
                    return Err(Incompatibility::Undefined {
                        key: want.key.clone(),
                        wanted: want.to_string(),
                    });
                }
            };
            if offered.intersect(want).is_empty() {
                return Err(Incompatibility::Conflict {
                    key: want.key.clone(),
                    wanted: want.to_string(),
                    offered: offered.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Checks minValues against the label sets of the options a node may be launched as.
    pub fn check_min_values<'a>(
        &self,
        options: impl IntoIterator<Item = &'a BTreeMap<String, String>> + Clone,
    ) -> Result<(), MinValuesError> {
        for r in &self.by_key {
            let Some(needed) = r.min_values else { continue };
            let found = r.distinct_values_in(options.clone());
            if found < needed as usize {
                return Err(MinValuesError { key: r.key.clone(), needed, found });
            }
        }
        Ok(())
    }

    /// Lowers each minValues the options cannot meet to the number of values they offer, as upstream
    /// core does under MinValuesPolicy BestEffort (pkg/controllers/provisioning/scheduling/nodeclaim.go,
    /// `filterInstanceTypesByRequirements` and `CanAdd`). None of them offers a value: the minValues is
    /// dropped, since the API's minValues is at least 1. Returns whether any was lowered.
    pub fn relax_min_values<'a>(
        &mut self,
        options: impl IntoIterator<Item = &'a BTreeMap<String, String>> + Clone,
    ) -> bool {
        let mut relaxed = false;
        for r in &mut self.by_key {
            let Some(needed) = r.min_values else { continue };
            let found = r.distinct_values_in(options.clone());
            if found < needed as usize {
                r.min_values = u32::try_from(found).ok().filter(|&n| n > 0);
                relaxed = true;
            }
        }
        relaxed
    }
}

impl Requirement {
    /// How many distinct values of this key, among those admitted, the label sets carry.
    fn distinct_values_in<'a>(
        &self,
        options: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
    ) -> usize {
        let distinct: BTreeSet<&str> = options
            .into_iter()
            .filter_map(|labels| labels.get(&self.key).map(String::as_str))
            .filter(|v| self.admits_value(v))
            .collect();
        distinct.len()
    }
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.by_key.iter().map(ToString::to_string).collect();
        write!(f, "{}", parts.join(", "))
    }
}

#[cfg(test)]
#[path = "requirements_tests.rs"]
mod tests;
