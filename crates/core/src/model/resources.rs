//! Resource vectors and Kubernetes quantity strings.
//!
//! Owns the exact integer representation of every resource the scheduler compares: `cpu` in millicores,
//! `memory` and `ephemeral-storage` in bytes, and counts (`pods`, `nvidia.com/gpu`, ...) as plain integers.
//! Quantity strings ("100m", "1.5", "2Gi", "129e6") are parsed exactly — no floating point — and rounded up
//! to the base unit the way the Kubernetes API server does (`resource.Quantity.MilliValue`/`Value`), so that
//! a request never looks smaller here than it does to the kubelet. Pure: no I/O.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Resource names used throughout the crate (Kubernetes core names plus the GPU device-plugin names).
pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const PODS: &str = "pods";
/// The node count a NodePool's `limits` may cap: its usage counts each node as 1.
pub const NODES: &str = "nodes";
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const AMD_GPU: &str = "amd.com/gpu";

/// Errors from parsing quantity strings or resource lists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourcesError {
    #[error("invalid quantity {value:?}: {reason}")]
    InvalidQuantity { value: String, reason: &'static str },
    #[error("resource {resource:?} has an invalid quantity {value:?}: {reason}")]
    InvalidResource { resource: String, value: String, reason: &'static str },
}

impl ResourcesError {
    /// Static category, usable as a metric label or event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidQuantity { .. } => "InvalidQuantity",
            Self::InvalidResource { .. } => "InvalidResource",
        }
    }
}

/// An exactly parsed quantity: `sign × digits × 10^exp10 × 2^exp2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    digits: u128,
    exp10: i32,
    exp2: u32,
}

impl Quantity {
    /// Parses a Kubernetes quantity: a signed decimal number followed by an optional binary suffix
    /// (Ki..Ei), decimal suffix (n, u, m, k, M, G, T, P, E) or decimal exponent (e3, E-2).
    pub fn parse(input: &str) -> Result<Quantity, ResourcesError> {
        let bad = |reason| ResourcesError::InvalidQuantity { value: input.to_string(), reason };
        let s = input.trim();
        let (negative, s) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            Some(_) => (false, s),
            None => return Err(bad("empty")),
        };
        let number_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
        let (number, suffix) = s.split_at(number_end);
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if frac_part.contains('.') {
            return Err(bad("more than one decimal point"));
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad("no digits"));
        }
        let mut digits: u128 = 0;
        for c in int_part.bytes().chain(frac_part.bytes()) {
            digits = digits
                .checked_mul(10)
                .and_then(|d| d.checked_add(u128::from(c - b'0')))
                .ok_or_else(|| bad("too many digits"))?;
        }
        let frac_len = i32::try_from(frac_part.len()).map_err(|_| bad("too many digits"))?;
        let (suffix_exp10, exp2) = parse_suffix(suffix).ok_or_else(|| bad("unknown suffix"))?;
        Ok(Quantity { negative, digits, exp10: suffix_exp10 - frac_len, exp2 })
    }

    /// The value in base units multiplied by `10^scale_exp10`, rounded up (towards +∞) as Kubernetes does.
    fn scaled_ceil(&self, scale_exp10: i32) -> Option<i64> {
        self.scaled(scale_exp10, true)
    }

    /// The value in base units multiplied by `10^scale_exp10`, rounded up or down.
    fn scaled(&self, scale_exp10: i32, up: bool) -> Option<i64> {
        let mut numerator = i128::try_from(self.digits).ok()?;
        numerator = numerator.checked_mul(1i128.checked_shl(self.exp2)?)?;
        let exp10 = self.exp10 + scale_exp10;
        let mut denominator: i128 = 1;
        if exp10 >= 0 {
            numerator = numerator.checked_mul(10i128.checked_pow(exp10.unsigned_abs())?)?;
        } else {
            denominator = 10i128.checked_pow(exp10.unsigned_abs())?;
        }
        if self.negative {
            numerator = -numerator;
        }
        // Floor division for either sign, plus one for the ceiling of an inexact quotient.
        let quotient =
            numerator.div_euclid(denominator) + i128::from(up && numerator.rem_euclid(denominator) != 0);
        i64::try_from(quotient).ok()
    }

    /// Whole base units (bytes, counts), rounded up.
    pub fn value(&self) -> Option<i64> {
        self.scaled_ceil(0)
    }

    /// Thousandths of the base unit (millicores for cpu), rounded up.
    pub fn milli_value(&self) -> Option<i64> {
        self.scaled_ceil(3)
    }

    /// Whole base units, rounded down: how many units of a capacity a pod can be given, since pods
    /// request extended resources in whole units.
    pub fn whole_units(&self) -> Option<i64> {
        self.scaled(0, false)
    }
}

/// Maps a suffix to (decimal exponent, binary exponent).
fn parse_suffix(suffix: &str) -> Option<(i32, u32)> {
    let decimal = |e: i32| Some((e, 0));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => Some((0, 10)),
        "Mi" => Some((0, 20)),
        "Gi" => Some((0, 30)),
        "Ti" => Some((0, 40)),
        "Pi" => Some((0, 50)),
        "Ei" => Some((0, 60)),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            exponent.parse::<i32>().ok().filter(|e| e.abs() <= 40).map(|e| (e, 0))
        }
    }
}

/// Parses `value` as an amount of `resource` in its base unit (millicores for cpu, else whole units).
pub fn parse_resource_quantity(resource: &str, value: &str) -> Result<i64, ResourcesError> {
    let invalid = |reason| ResourcesError::InvalidResource {
        resource: resource.to_string(),
        value: value.to_string(),
        reason,
    };
    let quantity = Quantity::parse(value).map_err(|e| match e {
        ResourcesError::InvalidQuantity { reason, .. } => invalid(reason),
        other => other,
    })?;
    let amount = if resource == CPU { quantity.milli_value() } else { quantity.value() };
    amount.ok_or_else(|| invalid("out of range"))
}

/// Formats an amount of `resource` (in its base unit) as a canonical quantity string.
///
/// cpu: "4" when whole cores, else "3860m". Counts (pods, GPUs, other extended resources that are not
/// byte-sized): the plain integer. Byte-sized resources: the shortest exact form among binary suffixes
/// (Ki..Ei), decimal suffixes (k..E) and the bare number; binary wins ties, as memory is usually binary.
pub fn format_resource_quantity(resource: &str, amount: i64) -> String {
    if resource == CPU {
        return if amount % 1000 == 0 { (amount / 1000).to_string() } else { format!("{amount}m") };
    }
    if !is_byte_sized(resource) || amount == 0 {
        return amount.to_string();
    }
    let binary = [("Ei", 60u32), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)]
        .into_iter()
        .find(|(_, shift)| amount % (1i64 << shift) == 0)
        .map(|(suffix, shift)| format!("{}{suffix}", amount / (1i64 << shift)));
    let decimal = [("E", 18u32), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3)]
        .into_iter()
        .find(|(_, exp)| amount % 10i64.pow(*exp) == 0)
        .map(|(suffix, exp)| format!("{}{suffix}", amount / 10i64.pow(exp)));
    [binary, decimal, Some(amount.to_string())]
        .into_iter()
        .flatten()
        .min_by_key(String::len)
        .unwrap_or_default()
}

fn is_byte_sized(resource: &str) -> bool {
    resource == MEMORY
        || resource == EPHEMERAL_STORAGE
        || resource == "storage"
        || resource.starts_with("hugepages-")
}

/// A vector of resource amounts in base units, keyed by resource name. Missing means zero.
///
/// Kept as a vector sorted by name: a pod's requests and limits name three or four resources, which a
/// `BTreeMap` would hold in a node sized for eleven, each name on the heap. The names Kubernetes and
/// the device plugins use are static strings; only other extended resources own theirs. Equality and
/// order are the map's: by name, a resource set to zero is present.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources(Vec<(Name, i64)>);

/// A resource name: one of the well-known names, or an extended resource's own.
#[derive(Debug, Clone)]
struct Name(std::borrow::Cow<'static, str>);

/// Names shared by every vector that holds them, instead of a copy each.
const WELL_KNOWN: [&str; 7] = [CPU, MEMORY, EPHEMERAL_STORAGE, PODS, NODES, NVIDIA_GPU, AMD_GPU];

impl Name {
    fn new(name: &str) -> Name {
        match WELL_KNOWN.iter().find(|known| **known == name) {
            Some(known) => Name(std::borrow::Cow::Borrowed(known)),
            None => Name(std::borrow::Cow::Owned(name.to_string())),
        }
    }

    fn as_str(&self) -> &str {
        &self.0
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl Resources {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builder form of [`Resources::set`].
    pub fn with(mut self, resource: &str, amount: i64) -> Self {
        self.set(resource, amount);
        self
    }

    pub fn set(&mut self, resource: &str, amount: i64) {
        *self.slot(resource, 0) = amount;
    }

    /// Where `resource` is, or where it would go.
    fn position(&self, resource: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(name, _)| name.as_str().cmp(resource))
    }

    /// The amount of `resource`, inserted as `absent` first when the vector has none. Grows the
    /// vector by one at a time: vectors hold a handful of resources and live as long as their pod.
    fn slot(&mut self, resource: &str, absent: i64) -> &mut i64 {
        let at = match self.position(resource) {
            Ok(at) => at,
            Err(at) => {
                self.0.reserve_exact(1);
                self.0.insert(at, (Name::new(resource), absent));
                at
            }
        };
        &mut self.0[at].1
    }

    /// The amount of `resource`; zero when absent.
    pub fn get(&self, resource: &str) -> i64 {
        self.position(resource).map_or(0, |at| self.0[at].1)
    }

    pub fn cpu_millis(&self) -> i64 {
        self.get(CPU)
    }

    pub fn memory_bytes(&self) -> i64 {
        self.get(MEMORY)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|(_, v)| *v == 0)
    }

    /// Element-wise sum (saturating, so absurd inputs cannot wrap around).
    pub fn add(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        out.add_assign(other);
        out
    }

    pub fn add_assign(&mut self, other: &Resources) {
        for (name, amount) in other.iter() {
            let slot = self.slot(name, 0);
            *slot = slot.saturating_add(amount);
        }
    }

    /// Element-wise difference, floored at zero: what is left of `self` after `other` is taken.
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        for (name, amount) in other.iter() {
            let slot = out.slot(name, 0);
            *slot = slot.saturating_sub(amount).max(0);
        }
        out
    }

    /// Element-wise maximum (e.g. init containers vs the sum of regular containers).
    pub fn max(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        for (name, amount) in other.iter() {
            let slot = out.slot(name, amount);
            *slot = (*slot).max(amount);
        }
        out
    }

    /// True when every requested amount is at most what `available` has (absent counts as zero).
    pub fn fits(&self, available: &Resources) -> bool {
        self.iter().all(|(name, amount)| amount <= available.get(name))
    }

    /// The resources whose request exceeds what `available` has, in name order.
    pub fn exceeding(&self, available: &Resources) -> Vec<String> {
        self.iter()
            .filter(|(name, amount)| *amount > available.get(name))
            .map(|(name, _)| name.to_string())
            .collect()
    }

    /// Parses a Kubernetes resource list (`{"cpu": "100m", "memory": "2Gi"}`).
    pub fn parse(list: &BTreeMap<String, String>) -> Result<Resources, ResourcesError> {
        list.iter()
            .map(|(name, value)| Ok((Name::new(name), parse_resource_quantity(name, value)?)))
            .collect::<Result<Vec<_>, _>>()
            .map(Resources)
    }

    /// Formats back to quantity strings, one per resource.
    pub fn to_quantities(&self) -> BTreeMap<String, String> {
        self.iter().map(|(name, amount)| (name.to_string(), format_resource_quantity(name, amount))).collect()
    }
}

impl FromIterator<(String, i64)> for Resources {
    /// As a map collects: a name given twice keeps its last amount.
    fn from_iter<I: IntoIterator<Item = (String, i64)>>(iter: I) -> Self {
        let mut out = Resources::new();
        for (name, amount) in iter {
            out.set(&name, amount);
        }
        out.0.shrink_to_fit();
        out
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.to_quantities().into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        write!(f, "{}", parts.join(","))
    }
}

impl Serialize for Resources {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_quantities().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Resources {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let list = BTreeMap::<String, String>::deserialize(deserializer)?;
        Resources::parse(&list).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(s: &str) -> i64 {
        parse_resource_quantity(CPU, s).unwrap()
    }
    fn bytes(s: &str) -> i64 {
        parse_resource_quantity(MEMORY, s).unwrap()
    }

    #[test]
    fn parses_cpu_in_millicores() {
        assert_eq!(cpu("100m"), 100);
        assert_eq!(cpu("1"), 1000);
        assert_eq!(cpu("1.5"), 1500);
        assert_eq!(cpu("0.1"), 100);
        assert_eq!(cpu("1e3"), 1_000_000);
        assert_eq!(cpu(".5"), 500);
        // Sub-millicore values round up, as the API server does.
        assert_eq!(cpu("0.0001"), 1);
        assert_eq!(cpu("1500u"), 2);
    }

    #[test]
    fn parses_memory_in_bytes() {
        assert_eq!(bytes("2Gi"), 2 * 1024 * 1024 * 1024);
        assert_eq!(bytes("500Mi"), 500 * 1024 * 1024);
        assert_eq!(bytes("123Mi"), 128_974_848);
        assert_eq!(bytes("128974848"), 128_974_848);
        assert_eq!(bytes("129e6"), 129_000_000);
        assert_eq!(bytes("129M"), 129_000_000);
        assert_eq!(bytes("1G"), 1_000_000_000);
        assert_eq!(bytes("1e3"), 1000);
        assert_eq!(bytes("1.5Gi"), 1_610_612_736);
        assert_eq!(bytes("1k"), 1000);
        assert_eq!(bytes("1Ki"), 1024);
        // Fractional bytes round up.
        assert_eq!(bytes("100m"), 1);
        assert_eq!(bytes("-100m"), 0);
        assert_eq!(bytes("-1Ki"), -1024);
    }

    #[test]
    fn parses_counts() {
        assert_eq!(parse_resource_quantity(PODS, "110").unwrap(), 110);
        assert_eq!(parse_resource_quantity(NVIDIA_GPU, "2").unwrap(), 2);
    }

    #[test]
    fn whole_units_round_down() {
        let whole = |s: &str| Quantity::parse(s).unwrap().whole_units().unwrap();
        assert_eq!(whole("500m"), 0);
        assert_eq!(whole("1999999u"), 1);
        assert_eq!(whole("2"), 2);
        assert_eq!(whole("1.5k"), 1500);
        assert_eq!(whole("-500m"), -1);
        assert_eq!(Quantity::parse("500m").unwrap().value(), Some(1), "value() still rounds up");
    }

    #[test]
    fn rejects_bad_quantities() {
        for bad in ["", "abc", "1x", "1.2.3", "Gi", "1 Gi", "1e", "1e+", "1ee3", "--1", "1Gii"] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} should not parse");
        }
        // Out of i64 range in base units.
        assert!(parse_resource_quantity(MEMORY, "100Ei").is_err());
        assert!(parse_resource_quantity(CPU, "1e30").is_err());
    }

    #[test]
    fn parse_error_names_resource_and_value() {
        let list = BTreeMap::from([
            ("cpu".to_string(), "1".to_string()),
            ("memory".to_string(), "12Gb".to_string()),
        ]);
        let err = Resources::parse(&list).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("\"memory\"") && text.contains("\"12Gb\""), "{text}");
        assert_eq!(err.category(), "InvalidResource");
    }

    #[test]
    fn formats_canonically() {
        assert_eq!(format_resource_quantity(CPU, 3860), "3860m");
        assert_eq!(format_resource_quantity(CPU, 4000), "4");
        assert_eq!(format_resource_quantity(CPU, 0), "0");
        assert_eq!(format_resource_quantity(MEMORY, 16 << 30), "16Gi");
        assert_eq!(format_resource_quantity(MEMORY, 750 << 20), "750Mi");
        assert_eq!(format_resource_quantity(MEMORY, 1536 << 10), "1536Ki");
        assert_eq!(format_resource_quantity(MEMORY, 12_313_637_683), "12313637683");
        assert_eq!(format_resource_quantity(EPHEMERAL_STORAGE, 128_000_000_000), "128G");
        assert_eq!(format_resource_quantity(PODS, 110), "110");
        assert_eq!(format_resource_quantity(NVIDIA_GPU, 1024), "1024");
    }

    #[test]
    fn vector_arithmetic() {
        let a = Resources::new().with(CPU, 1000).with(MEMORY, 100);
        let b = Resources::new().with(CPU, 1500).with(PODS, 1);
        assert_eq!(a.add(&b), Resources::new().with(CPU, 2500).with(MEMORY, 100).with(PODS, 1));
        assert_eq!(a.saturating_sub(&b), Resources::new().with(CPU, 0).with(MEMORY, 100).with(PODS, 0));
        assert_eq!(a.max(&b), Resources::new().with(CPU, 1500).with(MEMORY, 100).with(PODS, 1));
    }

    #[test]
    fn names_stay_sorted_and_equality_is_the_map_s() {
        let built = Resources::new().with(PODS, 1).with("example.com/dongle", 2).with(CPU, 3).with(PODS, 4);
        let names: Vec<&str> = built.iter().map(|(name, _)| name).collect();
        assert_eq!(names, [CPU, "example.com/dongle", PODS]);
        assert_eq!(built.get(PODS), 4, "the last set wins");
        assert_eq!(built.get(MEMORY), 0);
        // As with the map: a resource set to zero is present, so the vectors differ.
        assert_ne!(Resources::new().with(CPU, 0), Resources::new());
        assert!(Resources::new().with(CPU, 0).is_empty());
        let collected: Resources =
            [(PODS.to_string(), 1), (CPU.to_string(), 2), (PODS.to_string(), 5)].into_iter().collect();
        assert_eq!(collected, Resources::new().with(CPU, 2).with(PODS, 5));
    }

    #[test]
    fn fits_treats_missing_as_zero() {
        let available = Resources::new().with(CPU, 2000).with(MEMORY, 1 << 30);
        assert!(Resources::new().with(CPU, 2000).fits(&available));
        assert!(!Resources::new().with(CPU, 2001).fits(&available));
        assert!(!Resources::new().with(NVIDIA_GPU, 1).fits(&available));
        assert!(Resources::new().with(NVIDIA_GPU, 0).fits(&available));
        let over = Resources::new().with(CPU, 3000).with(NVIDIA_GPU, 1).with(MEMORY, 1);
        assert_eq!(over.exceeding(&available), vec![CPU.to_string(), NVIDIA_GPU.to_string()]);
    }

    #[test]
    fn round_trips_through_serde() {
        let r = Resources::new().with(CPU, 3860).with(MEMORY, 750 << 20).with(PODS, 110);
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, r#"{"cpu":"3860m","memory":"750Mi","pods":"110"}"#);
        assert_eq!(serde_json::from_str::<Resources>(&json).unwrap(), r);
    }

    proptest::proptest! {
        #![proptest_config(crate::proptest_config::config(256))]

        #[test]
        fn format_then_parse_is_identity(amount in 0i64..(1i64 << 50), which in 0usize..4) {
            let resource = [CPU, MEMORY, EPHEMERAL_STORAGE, PODS][which];
            let text = format_resource_quantity(resource, amount);
            proptest::prop_assert_eq!(parse_resource_quantity(resource, &text).unwrap(), amount);
        }
    }
}
