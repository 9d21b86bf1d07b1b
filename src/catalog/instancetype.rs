//! Building instance types: the VM sizes a region can launch, with labels, capacity, allocatable and
//! offerings (the types themselves are `crate::model::instancetype`).
//!
//! Owns the global size filters, the well-known labels per size (upstream provider `pkg/apis/v1beta1/labels.go`), and the offerings per
//! zone and capacity type with their prices and availability. Pure: prices, the unavailable-offerings
//! cache and `now` are passed in. Output is sorted cheapest first (then by name) so every consumer sees
//! the same order.

use std::collections::BTreeMap;

use super::allocatable::{self, CapacityOptions};
use super::pricing::PriceTable;
use super::regions;
use super::sku::{embedded_skus, embedded_zones, SkuRecord};
use super::unavailable::{OfferingRef, Timestamp, UnavailableOfferings};
use crate::model::labels;
use crate::model::{CapacityType, InstanceType, Offering};

/// Sizes below these are filtered out everywhere (upstream provider instancetypes.go): the AKS node
/// components alone would leave too little for pods.
pub const MIN_VCPUS: u32 = 2;
/// 3.5 GiB, in MiB.
pub const MIN_MEMORY_MIB: u64 = 3584;

/// Errors of instance-type listing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error("unknown region {region:?}: not an Azure region; Azure regions: {}", known.join(", "))]
    UnknownRegion { region: String, known: Vec<String> },
}

impl CatalogError {
    /// Static category, usable as a metric label or event reason.
    pub fn category(&self) -> &'static str {
        match self {
            CatalogError::UnknownRegion { .. } => "UnknownRegion",
        }
    }
}

/// Regions the embedded data has zones and prices for, sorted.
pub fn known_regions() -> Vec<String> {
    embedded_zones().keys().cloned().collect()
}

/// The logical zones of `region`: the embedded data's, else the Azure region list's (see
/// [`super::regions`]); an error naming every Azure region when `region` is not one.
pub fn region_zones(region: &str) -> Result<Vec<String>, CatalogError> {
    if let Some(zones) = embedded_zones().get(region) {
        return Ok(zones.clone());
    }
    regions::region_zones(region).ok_or_else(|| CatalogError::UnknownRegion {
        region: region.to_string(),
        known: regions::azure_regions().into_iter().map(str::to_string).collect(),
    })
}

/// The instance types of `region` from the embedded catalog. A region without embedded data of its own
/// gets every embedded size, in the zones [`region_zones`] knows (regional offerings when none).
///
/// Filters: restricted sizes (AKS- and Karpenter-restricted lists), fewer than 2 vCPUs, less than
/// 3.5 GiB, confidential DC*/EC* sizes, constrained-core sizes (their `vcpus` overstates what the VM can use), sizes
/// with a GPU AKS does not support ([`super::support::global_reason`]), and sizes without an
/// on-demand price in `pricing`. Unlike upstream, which keeps unpriced sizes at a placeholder price of
/// 999 $/h, an unpriced size is left out of the region: a made-up price would distort cost ranking and
/// the solver's lower bound, and the static table covers every size the region actually sells.
pub fn instance_types(
    region: &str,
    options: &CapacityOptions,
    pricing: &PriceTable,
    unavailable: &UnavailableOfferings,
    now: Timestamp,
) -> Result<Vec<InstanceType>, CatalogError> {
    let zones = region_zones(region)?;
    Ok(build_instance_types(embedded_skus(), region, &zones, options, pricing, unavailable, now))
}

/// [`instance_types`] over explicit records and zone numbers (for tests and what-if runs). No zone
/// numbers (a size or region without availability zones) gives regional offerings, zone `""`, as
/// upstream offers non-zonal sizes.
pub fn build_instance_types(
    skus: &[SkuRecord],
    region: &str,
    zone_numbers: &[String],
    options: &CapacityOptions,
    pricing: &PriceTable,
    unavailable: &UnavailableOfferings,
    now: Timestamp,
) -> Vec<InstanceType> {
    let zones: Vec<String> = if zone_numbers.is_empty() {
        vec![String::new()]
    } else {
        zone_numbers.iter().map(|n| format!("{region}-{n}")).collect()
    };
    let mut types: Vec<InstanceType> = skus
        .iter()
        .filter(|sku| passes_global_filters(sku))
        .filter_map(|sku| instance_type(sku, region, &zones, options, pricing, unavailable, now))
        .collect();
    types.sort_by(|a, b| a.sort_price().total_cmp(&b.sort_price()).then_with(|| a.name.cmp(&b.name)));
    types
}

/// Whether a size may be offered at all, independent of region and NodeClass.
pub fn passes_global_filters(sku: &SkuRecord) -> bool {
    !sku.restricted
        && sku.vcpus >= MIN_VCPUS
        && sku.memory_mib >= MIN_MEMORY_MIB
        && !sku.is_constrained_cpu()
        && !sku.is_confidential()
        && super::support::global_reason(sku).is_none()
}

/// Builds one instance type; None when the size has no on-demand price in `pricing`.
pub fn instance_type(
    sku: &SkuRecord,
    region: &str,
    zones: &[String],
    options: &CapacityOptions,
    pricing: &PriceTable,
    unavailable: &UnavailableOfferings,
    now: Timestamp,
) -> Option<InstanceType> {
    let price = pricing.get(&sku.name);
    let on_demand = price.on_demand?;
    // Upstream starts spot at the on-demand price until a live spot price is known; we do the same so
    // spot is never assumed cheaper than evidence says.
    let spot = price.spot.unwrap_or(on_demand);
    let capacity_types: &[CapacityType] = if sku.low_priority_capable() {
        &[CapacityType::OnDemand, CapacityType::Spot]
    } else {
        &[CapacityType::OnDemand]
    };
    let mut offerings: Vec<Offering> = zones
        .iter()
        .flat_map(|zone| capacity_types.iter().map(move |ct| (zone, *ct)))
        .map(|(zone, capacity_type)| {
            let reference = OfferingRef {
                capacity_type,
                sku: &sku.name,
                zone,
                family: sku.family.as_deref(),
                vcpus: sku.vcpus,
            };
            Offering {
                zone: zone.clone(),
                capacity_type,
                price: if capacity_type == CapacityType::Spot { spot } else { on_demand },
                available: !unavailable.is_unavailable(&reference, now),
            }
        })
        .collect();
    offerings.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.zone.cmp(&b.zone))
            .then_with(|| a.capacity_type.cmp(&b.capacity_type))
    });
    let capacity = allocatable::capacity(sku, options);
    let overhead = allocatable::overhead(sku);
    Some(InstanceType {
        name: sku.name.clone(),
        vcpus: sku.vcpus,
        memory_mib: sku.memory_mib,
        labels: labels_for(sku, region),
        allocatable: allocatable::allocatable(&capacity, &overhead),
        capacity,
        overhead,
        offerings,
    })
}

/// The well-known labels of a size (upstream provider `pkg/apis/v1beta1/labels.go`). Capability labels appear only where the data knows
/// the capability; GPU name and manufacturer only for sizes with whole GPUs; GPU count always ("0" for
/// non-GPU sizes, so `Lt`/`Gt` requirements work).
pub fn labels_for(sku: &SkuRecord, region: &str) -> BTreeMap<String, String> {
    let size = sku.size_name();
    let mut out = BTreeMap::new();
    let mut put = |key: &str, value: String| {
        out.insert(key.to_string(), value);
    };
    put(labels::LABEL_INSTANCE_TYPE, sku.name.clone());
    put(labels::LABEL_SKU_NAME, sku.name.clone());
    put(labels::LABEL_ARCH, sku.arch.as_str().to_string());
    put(labels::LABEL_OS, labels::OS_LINUX.to_string());
    put(labels::LABEL_REGION, region.to_string());
    put(labels::LABEL_SKU_FAMILY, size.family.clone());
    put(labels::LABEL_SKU_SERIES, size.series());
    put(labels::LABEL_SKU_VERSION, sku.version_label());
    put(labels::LABEL_SKU_CPU, sku.vcpus.to_string());
    put(labels::LABEL_AKS_SKU_CPU, sku.vcpus.to_string());
    put(labels::LABEL_SKU_MEMORY, sku.memory_mib.to_string());
    put(labels::LABEL_AKS_SKU_MEMORY, sku.memory_mib.to_string());
    let gpus = sku.whole_gpus();
    put(labels::LABEL_SKU_GPU_COUNT, gpus.map_or(0, |(_, n)| n).to_string());
    if let Some((vendor, _)) = gpus {
        put(labels::LABEL_SKU_GPU_MANUFACTURER, vendor.as_str().to_string());
        if let Some(accelerator) = size.accelerator.clone() {
            put(labels::LABEL_SKU_GPU_NAME, accelerator);
        }
    }
    if let Some(accelerated) = sku.accelerated_networking {
        put(labels::LABEL_SKU_NETWORKING_ACCELERATED, accelerated.to_string());
    }
    if let Some(premium) = sku.premium_io {
        put(labels::LABEL_SKU_STORAGE_PREMIUM_CAPABLE, premium.to_string());
    }
    if let Some(gb) = sku.ephemeral_os_disk_max_gb() {
        put(labels::LABEL_SKU_STORAGE_EPHEMERAL_OS_MAX_SIZE, gb.to_string());
    }
    out
}
