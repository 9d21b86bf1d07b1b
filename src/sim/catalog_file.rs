//! `simulate --catalog FILE`: a JSON list of instance types that replaces the embedded Azure catalog,
//! for private sizes, what-if prices and benchmarks. The schema (documented in docs/simulate.md):
//!
//! ```json
//! [{"name": "Custom_D4", "labels": {"karpenter.azure.com/sku-family": "D"},
//!   "allocatable": {"cpu": "3860m", "memory": "12Gi", "pods": "110"},
//!   "capacity": {"cpu": "4", "memory": "16Gi"},
//!   "offerings": [{"zone": "eastus-1", "capacity_type": "on-demand", "price": 0.192, "available": true}]}]
//! ```
//!
//! `labels`, `capacity` (defaults to `allocatable`) and `available` (defaults to true) are optional;
//! `pods` defaults to 110. Labels the catalog would set (instance type, sku name, os, arch amd64,
//! region, sku-cpu, sku-memory) are added unless given.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::model::labels;
use crate::model::resources::{Resources, CPU, MEMORY, PODS};
use crate::model::{CapacityType, InstanceType, Offering, Overhead};

/// Max pods when the file does not say (the kubelet default).
const DEFAULT_PODS: i64 = 110;

/// A catalog file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CatalogFileError {
    #[error("{file}: {source}")]
    Read { file: String, source: std::io::Error },
    #[error("{file}: {path}: {message}")]
    Invalid { file: String, path: String, message: String },
}

impl CatalogFileError {
    /// Static category, usable as a metric label or event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Read { .. } => "Read",
            Self::Invalid { .. } => "InvalidCatalog",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    allocatable: Resources,
    #[serde(default)]
    capacity: Option<Resources>,
    offerings: Vec<OfferingEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OfferingEntry {
    zone: String,
    capacity_type: CapacityTypeName,
    price: f64,
    #[serde(default = "available_by_default")]
    available: bool,
}

fn available_by_default() -> bool {
    true
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
enum CapacityTypeName {
    OnDemand,
    Spot,
}

/// Reads a catalog file.
pub fn read(path: &Path, region: &str) -> Result<Vec<InstanceType>, CatalogFileError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|source| CatalogFileError::Read { file: file.clone(), source })?;
    parse(&file, &text, region)
}

/// Parses catalog text; `file` is used in messages. Types come out cheapest first, then by name.
pub fn parse(file: &str, text: &str, region: &str) -> Result<Vec<InstanceType>, CatalogFileError> {
    let invalid =
        |path: String, message: String| CatalogFileError::Invalid { file: file.into(), path, message };
    let mut json = serde_json::Deserializer::from_str(text);
    let entries: Vec<Entry> = serde_path_to_error::deserialize(&mut json)
        .map_err(|e| invalid(e.path().to_string(), e.inner().to_string()))?;
    let mut types = Vec::with_capacity(entries.len());
    let mut names = std::collections::BTreeSet::new();
    for (i, entry) in entries.into_iter().enumerate() {
        if entry.name.is_empty() {
            return Err(invalid(format!("[{i}].name"), "must not be empty".into()));
        }
        if !names.insert(entry.name.clone()) {
            return Err(invalid(format!("[{i}].name"), format!("{:?} is listed twice", entry.name)));
        }
        for (j, o) in entry.offerings.iter().enumerate() {
            if !(o.price.is_finite() && o.price >= 0.0) {
                return Err(invalid(
                    format!("[{i}].offerings[{j}].price"),
                    "must be a price of 0 or more".into(),
                ));
            }
        }
        types.push(instance_type(entry, region));
    }
    let cheapest = |t: &InstanceType| t.offerings.first().map_or(f64::INFINITY, |o| o.price);
    types.sort_by(|a, b| cheapest(a).total_cmp(&cheapest(b)).then_with(|| a.name.cmp(&b.name)));
    Ok(types)
}

fn instance_type(entry: Entry, region: &str) -> InstanceType {
    let mut allocatable = entry.allocatable;
    if !allocatable.iter().any(|(name, _)| name == PODS) {
        allocatable.set(PODS, DEFAULT_PODS);
    }
    let capacity = entry.capacity.unwrap_or_else(|| allocatable.clone());
    // vCPUs and MiB for the size labels: whole cores rounded up, memory rounded down.
    let vcpus = u32::try_from((capacity.get(CPU) + 999) / 1000).unwrap_or(u32::MAX);
    let memory_mib = u64::try_from(capacity.get(MEMORY) >> 20).unwrap_or(0);
    let mut labels = entry.labels;
    let defaults = [
        (labels::LABEL_INSTANCE_TYPE, entry.name.clone()),
        (labels::LABEL_SKU_NAME, entry.name.clone()),
        (labels::LABEL_OS, labels::OS_LINUX.to_string()),
        (labels::LABEL_ARCH, "amd64".to_string()),
        (labels::LABEL_REGION, region.to_string()),
        (labels::LABEL_SKU_CPU, vcpus.to_string()),
        (labels::LABEL_SKU_MEMORY, memory_mib.to_string()),
    ];
    for (key, value) in defaults {
        labels.entry(key.to_string()).or_insert(value);
    }
    let mut offerings: Vec<Offering> = entry
        .offerings
        .into_iter()
        .map(|o| Offering {
            zone: o.zone,
            capacity_type: match o.capacity_type {
                CapacityTypeName::OnDemand => CapacityType::OnDemand,
                CapacityTypeName::Spot => CapacityType::Spot,
            },
            price: o.price,
            available: o.available,
        })
        .collect();
    offerings.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.zone.cmp(&b.zone))
            .then_with(|| a.capacity_type.cmp(&b.capacity_type))
    });
    InstanceType {
        name: entry.name,
        vcpus,
        memory_mib,
        labels,
        overhead: Overhead { kube_reserved: capacity.saturating_sub(&allocatable), ..Overhead::default() },
        capacity,
        allocatable,
        offerings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_documented_schema() {
        let text = r#"[
          {"name": "Big", "allocatable": {"cpu": "7820m", "memory": "28Gi"},
           "offerings": [{"zone": "eastus-1", "capacity_type": "on-demand", "price": 0.4}]},
          {"name": "Small", "labels": {"karpenter.azure.com/sku-family": "D"},
           "allocatable": {"cpu": "3860m", "memory": "12Gi", "pods": "30"},
           "capacity": {"cpu": "4", "memory": "16Gi"},
           "offerings": [{"zone": "eastus-2", "capacity_type": "spot", "price": 0.05, "available": false},
                         {"zone": "eastus-1", "capacity_type": "on-demand", "price": 0.192}]}
        ]"#;
        let types = parse("c.json", text, "eastus").unwrap();
        assert_eq!(types[0].name, "Small");
        assert_eq!((types[0].vcpus, types[0].memory_mib), (4, 16384));
        assert_eq!(types[0].allocatable.get(PODS), 30);
        assert_eq!(types[1].allocatable.get(PODS), DEFAULT_PODS);
        assert_eq!(types[0].labels[labels::LABEL_INSTANCE_TYPE], "Small");
        assert_eq!(types[0].offerings[0].capacity_type, CapacityType::Spot);
        assert!(!types[0].offerings[0].available);
        assert_eq!(types[1].labels[labels::LABEL_SKU_CPU], "8");
    }

    #[test]
    fn errors_name_the_entry_and_field() {
        let err = parse(
            "c.json",
            r#"[{"name": "X", "allocatable": {"memory": "12Gb"}, "offerings": []}]"#,
            "eastus",
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("c.json: [0].allocatable"), "{err}");
        let err = parse(
            "c.json",
            r#"[{"name": "X", "allocatable": {}, "offerings": [{"zone": "z", "capacity_type": "reserved", "price": 1}]}]"#,
            "eastus",
        )
        .unwrap_err();
        assert!(err.to_string().contains("[0].offerings[0].capacity_type"), "{err}");
    }
}
