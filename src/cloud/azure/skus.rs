//! The VM sizes a region offers, from the Azure Resource SKUs API: turned into the catalog's
//! [`SkuRecord`]s so the same capacity, label and offering code applies to live and embedded data.
//!
//! Live data decides *which* sizes exist and where (zones, restrictions); facts the API does not carry
//! (GPU vendor and model, the AKS-restricted list) come from the embedded record of the same name.
//! Prices stay with the catalog's price table. The security capabilities (`EncryptionAtHostSupported`,
//! `TrustedLaunchDisabled`) exist only here; `catalog::security` says what their absence means.

use std::collections::BTreeMap;

use azure_mgmt_compute::package_2024_07_01::models::{resource_sku_restrictions, ResourceSku};
use futures::StreamExt;

use crate::catalog::sku::{embedded_sku, Arch, SkuRecord};
use crate::cloud::azure::client::ArmClients;
use crate::cloud::azure::errors;
use crate::cloud::CloudError;

/// A size offered in the region, and the logical zones (`"1"`, `"2"`, ...) it is offered in.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionSku {
    pub record: SkuRecord,
    pub zones: Vec<String>,
}

/// Lists the virtual-machine sizes of `region` that the subscription may use.
pub async fn list_region_skus(clients: &ArmClients, region: &str) -> Result<Vec<RegionSku>, CloudError> {
    let mut pages = clients
        .compute
        .resource_skus_client()
        .list(clients.subscription_id.clone())
        .filter(format!("location eq '{region}'"))
        .into_stream();
    let mut out = vec![];
    while let Some(page) = pages.next().await {
        let page = page
            .map_err(|e| errors::cloud_error(&errors::ArmFailure::from_sdk(&e), "listing resource SKUs"))?;
        out.extend(page.value.iter().filter_map(|sku| region_sku(sku, region)));
    }
    out.sort_by(|a, b| a.record.name.cmp(&b.record.name));
    out.dedup_by(|a, b| a.record.name == b.record.name);
    Ok(out)
}

/// One API entry as a catalog record, or `None` when it is not a VM size usable in `region`.
pub fn region_sku(sku: &ResourceSku, region: &str) -> Option<RegionSku> {
    if sku.resource_type.as_deref() != Some("virtualMachines") {
        return None;
    }
    let name = sku.name.clone()?;
    let in_region = |values: &[String]| values.iter().any(|v| v.eq_ignore_ascii_case(region));
    // A location restriction (e.g. NotAvailableForSubscription) removes the size from the region.
    if sku.restrictions.iter().any(|r| {
        r.type_ == Some(resource_sku_restrictions::Type::Location)
            && (r.values.is_empty() || in_region(&r.values))
    }) {
        return None;
    }
    let capabilities: BTreeMap<&str, &str> =
        sku.capabilities.iter().filter_map(|c| Some((c.name.as_deref()?, c.value.as_deref()?))).collect();
    let number = |key: &str| capabilities.get(key).and_then(|v| v.parse::<f64>().ok());
    let flag = |key: &str| capabilities.get(key).map(|v| v.eq_ignore_ascii_case("true"));
    let vcpus = number("vCPUs")? as u32;
    let memory_mib = (number("MemoryGB")? * 1024.0).round() as u64;
    let embedded = embedded_sku(&name);
    let zones_restricted: Vec<String> = sku
        .restrictions
        .iter()
        .filter(|r| r.type_ == Some(resource_sku_restrictions::Type::Zone))
        .filter_map(|r| r.restriction_info.as_ref())
        .flat_map(|info| info.zones.clone())
        .collect();
    let mut zones: Vec<String> = sku
        .location_info
        .iter()
        .filter(|l| l.location.as_deref().is_some_and(|l| l.eq_ignore_ascii_case(region)))
        .flat_map(|l| l.zones.clone())
        .filter(|z| !zones_restricted.contains(z))
        .collect();
    zones.sort();
    zones.dedup();
    let arch = match capabilities.get("CpuArchitectureType") {
        Some(v) if v.eq_ignore_ascii_case("arm64") => Arch::Arm64,
        _ => Arch::Amd64,
    };
    let record = SkuRecord {
        name: name.clone(),
        family: sku.family.clone().or_else(|| embedded.and_then(|e| e.family.clone())),
        series: embedded.map(|e| e.series.clone()).unwrap_or_else(|| leading_capitals(&name)),
        version: embedded.and_then(|e| e.version),
        vcpus,
        vcpus_available: number("vCPUsAvailable").map(|v| v as u32).filter(|v| *v < vcpus),
        memory_mib,
        arch,
        gpu_count: number("GPUs").map(|g| g as u32).unwrap_or(0),
        gpu_fraction: embedded.and_then(|e| e.gpu_fraction.clone()),
        gpu_model: embedded.and_then(|e| e.gpu_model.clone()),
        gpu_vendor: embedded.and_then(|e| e.gpu_vendor),
        accelerator_kind: embedded.and_then(|e| e.accelerator_kind.clone()),
        accelerated_networking: flag("AcceleratedNetworkingEnabled"),
        premium_io: flag("PremiumIO"),
        ephemeral_os_disk_supported: flag("EphemeralOSDiskSupported"),
        ephemeral_os_disk_placements: capabilities
            .get("SupportedEphemeralOSDiskPlacements")
            .map(|v| v.split(',').map(|s| s.trim().to_string()).collect()),
        low_priority_capable: flag("LowPriorityCapable"),
        hyperv_generations: capabilities
            .get("HyperVGenerations")
            .map(|v| v.split(',').map(|s| s.trim().to_string()).collect()),
        encryption_at_host_supported: flag("EncryptionAtHostSupported"),
        trusted_launch_disabled: flag("TrustedLaunchDisabled"),
        resource_disk_gib: number("MaxResourceVolumeMB").map(|mb| mb / 1024.0),
        cache_disk_gib: number("CachedDiskBytes").map(|b| b / (1u64 << 30) as f64),
        nvme_disk_gib: number("NvmeDiskSizeInMiB").map(|mib| mib / 1024.0),
        // The AKS and Karpenter restricted lists are by name, so the embedded flag applies.
        restricted: embedded.is_some_and(|e| e.restricted),
        restricted_reason: embedded.and_then(|e| e.restricted_reason.clone()),
        prices: BTreeMap::new(),
    };
    Some(RegionSku { record, zones })
}

/// `DS` of `Standard_DS2_v2`: the series letters, for sizes the embedded catalog does not know.
fn leading_capitals(name: &str) -> String {
    name.trim_start_matches("Standard_")
        .trim_start_matches("Basic_")
        .chars()
        .take_while(char::is_ascii_uppercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sku(value: serde_json::Value) -> ResourceSku {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn api_entries_become_catalog_records() {
        let entry = sku(json!({
            "resourceType": "virtualMachines", "name": "Standard_D4s_v5", "family": "standardDSv5Family",
            "locations": ["eastus"],
            "locationInfo": [{"location": "eastus", "zones": ["3", "1", "2"]}],
            "capabilities": [
                {"name": "vCPUs", "value": "4"}, {"name": "MemoryGB", "value": "16"},
                {"name": "CpuArchitectureType", "value": "x64"}, {"name": "LowPriorityCapable", "value": "True"},
                {"name": "HyperVGenerations", "value": "V1,V2"}, {"name": "PremiumIO", "value": "True"}
            ],
            "restrictions": [{"type": "Zone", "values": ["eastus"], "restrictionInfo": {"locations": ["eastus"], "zones": ["2"]}}]
        }));
        let got = region_sku(&entry, "eastus").unwrap();
        assert_eq!(got.zones, ["1", "3"]);
        assert_eq!((got.record.vcpus, got.record.memory_mib), (4, 16384));
        assert_eq!(got.record.low_priority_capable, Some(true));
        assert_eq!(got.record.hyperv_generations.as_deref(), Some(&["V1".to_string(), "V2".to_string()][..]));
        assert_eq!(got.record.series, embedded_sku("Standard_D4s_v5").unwrap().series);
    }

    #[test]
    fn security_capabilities_are_read_and_absent_ones_stay_unknown() {
        let entry = |caps: serde_json::Value| {
            let mut capabilities =
                vec![json!({"name": "vCPUs", "value": "4"}), json!({"name": "MemoryGB", "value": "16"})];
            capabilities.extend(caps.as_array().unwrap().iter().cloned());
            let sku = sku(
                json!({"resourceType": "virtualMachines", "name": "Standard_D4s_v5", "capabilities": capabilities}),
            );
            let record = region_sku(&sku, "eastus").unwrap().record;
            (record.encryption_at_host_supported, record.trusted_launch_disabled)
        };
        let supported = json!([
            {"name": "EncryptionAtHostSupported", "value": "True"}, {"name": "TrustedLaunchDisabled", "value": "False"}
        ]);
        assert_eq!(entry(supported), (Some(true), Some(false)));
        let refused = json!([
            {"name": "EncryptionAtHostSupported", "value": "False"}, {"name": "TrustedLaunchDisabled", "value": "True"}
        ]);
        assert_eq!(entry(refused), (Some(false), Some(true)));
        assert_eq!(entry(json!([])), (None, None));
    }

    #[test]
    fn location_restrictions_and_other_resources_are_skipped() {
        let restricted = sku(json!({
            "resourceType": "virtualMachines", "name": "Standard_D4s_v5",
            "capabilities": [{"name": "vCPUs", "value": "4"}, {"name": "MemoryGB", "value": "16"}],
            "restrictions": [{"type": "Location", "values": ["eastus"], "reasonCode": "NotAvailableForSubscription"}]
        }));
        assert!(region_sku(&restricted, "eastus").is_none());
        let disk = sku(json!({"resourceType": "disks", "name": "Premium_LRS"}));
        assert!(region_sku(&disk, "eastus").is_none());
    }
}
