//! `GET /subscriptions/<sub>/providers/Microsoft.Compute/skus`: the Resource SKUs list, built from the
//! crate's embedded VM catalog in the real `ResourceSku` shape (capability names and value formats as
//! Azure writes them, e.g. `MemoryGB` "0.75", `LowPriorityCapable` "True", `HyperVGenerations` "V1,V2").
//!
//! A size is listed in a region when the catalog prices it there (the catalog's own notion of
//! availability); `$filter=location eq '<region>'` narrows to one region, as Azure does.
//!
//! The embedded catalog has no security capabilities, so the fake derives them by rule, the same rule
//! its VM create enforces (`security`), so tests see both outcomes:
//! - `EncryptionAtHostSupported`: "True" from the v3 generation of a series on, "False" for older
//!   (`_v2`) and unversioned sizes (basic A, B-series v1, `Standard_D2_v2`-era);
//! - `TrustedLaunchDisabled`: "True" for gen1-only sizes and the M series (Azure's trusted-launch size
//!   list leaves M out), absent otherwise, as Azure omits it for most sizes.

use karpenter_azure::catalog::sku::{embedded_skus, embedded_zones, Arch, SkuRecord};
use serde_json::{json, Value};

use super::wire::{ArmRequest, ArmResponse};

pub fn list_skus(request: &ArmRequest) -> ArmResponse {
    let filter_region = request.query_param("$filter").and_then(parse_location_filter);
    let mut items = Vec::new();
    for (region, zones) in embedded_zones() {
        if filter_region.as_deref().is_some_and(|wanted| !wanted.eq_ignore_ascii_case(region)) {
            continue;
        }
        for sku in embedded_skus().iter().filter(|sku| sku.prices.contains_key(region)) {
            items.push(resource_sku(sku, region, zones));
        }
    }
    ArmResponse::json(200, json!({ "value": items }))
}

/// `location eq 'eastus'` → `eastus`; other filters are ignored, as Azure only supports this one.
fn parse_location_filter(filter: &str) -> Option<String> {
    let (field, rest) = filter.trim().split_once(char::is_whitespace)?;
    let (op, value) = rest.trim().split_once(char::is_whitespace)?;
    (field.eq_ignore_ascii_case("location") && op.eq_ignore_ascii_case("eq"))
        .then(|| value.trim().trim_matches('\'').to_string())
}

/// One `ResourceSku` document for `sku` in `region`.
pub fn resource_sku(sku: &SkuRecord, region: &str, zones: &[String]) -> Value {
    json!({
        "resourceType": "virtualMachines",
        "name": sku.name,
        "tier": "Standard",
        "size": sku.name.strip_prefix("Standard_").unwrap_or(&sku.name),
        "family": sku.family,
        "locations": [region],
        "locationInfo": [{ "location": region, "zones": zones, "zoneDetails": [] }],
        "capabilities": capabilities(sku),
        // The catalog's `restricted` marks sizes AKS or Karpenter refuse by name; Azure itself lists them
        // unrestricted, so the fake does too.
        "restrictions": [],
    })
}

/// Whether the fake's SKU list (and VM create) says `sku` supports encryption at host.
pub fn encryption_at_host_supported(sku: &SkuRecord) -> bool {
    sku.version.is_some_and(|v| v >= 3)
}

/// Whether the fake's SKU list (and VM create) says `sku` cannot run trusted launch.
pub fn trusted_launch_disabled(sku: &SkuRecord) -> bool {
    let generations = sku.hyperv_generation_numbers();
    let gen1_only = !generations.is_empty() && !generations.iter().any(|g| g == "2");
    gen1_only || sku.series == "M"
}

fn capabilities(sku: &SkuRecord) -> Vec<Value> {
    let mut caps: Vec<(&str, String)> = vec![
        ("vCPUs", sku.vcpus.to_string()),
        ("MemoryGB", format_number(sku.memory_gib())),
        (
            "CpuArchitectureType",
            match sku.arch {
                Arch::Amd64 => "x64",
                Arch::Arm64 => "Arm64",
            }
            .to_string(),
        ),
        ("LowPriorityCapable", bool_value(sku.low_priority_capable())),
    ];
    if let Some(available) = sku.vcpus_available {
        caps.push(("vCPUsAvailable", available.to_string()));
    }
    if sku.gpu_count > 0 {
        caps.push(("GPUs", sku.gpu_count.to_string()));
    }
    if let Some(generations) = &sku.hyperv_generations {
        caps.push(("HyperVGenerations", generations.join(",")));
    }
    let optional_flags = [
        ("AcceleratedNetworkingEnabled", sku.accelerated_networking),
        ("PremiumIO", sku.premium_io),
        ("EphemeralOSDiskSupported", sku.ephemeral_os_disk_supported),
    ];
    for (name, flag) in optional_flags {
        if let Some(flag) = flag {
            caps.push((name, bool_value(flag)));
        }
    }
    caps.push(("EncryptionAtHostSupported", bool_value(encryption_at_host_supported(sku))));
    if trusted_launch_disabled(sku) {
        caps.push(("TrustedLaunchDisabled", bool_value(true)));
    }
    if let Some(placements) = &sku.ephemeral_os_disk_placements {
        caps.push(("SupportedEphemeralOSDiskPlacements", placements.join(",")));
    }
    if let Some(gib) = sku.resource_disk_gib {
        caps.push(("MaxResourceVolumeMB", ((gib * 1024.0).round() as u64).to_string()));
    }
    if let Some(gib) = sku.cache_disk_gib {
        caps.push(("CachedDiskBytes", ((gib * f64::from(1u32 << 30)).round() as u64).to_string()));
    }
    if let Some(gib) = sku.nvme_disk_gib {
        caps.push(("NvmeDiskSizeInMiB", ((gib * 1024.0).round() as u64).to_string()));
    }
    caps.into_iter().map(|(name, value)| json!({ "name": name, "value": value })).collect()
}

/// Azure writes booleans as "True"/"False".
fn bool_value(flag: bool) -> String {
    if flag { "True" } else { "False" }.to_string()
}

/// Azure writes whole numbers without a fraction ("16") and others as decimals ("0.75").
fn format_number(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        let text = format!("{value:.3}");
        text.trim_end_matches('0').to_string()
    }
}
