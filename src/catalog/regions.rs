//! Every Azure region a cluster can run in, with its number of availability zones: what makes a
//! `LOCATION` (or `--region`) a real region when the embedded catalog has no data of its own for it.
//!
//! Such a region starts as upstream's provider does (`pkg/providers/pricing/pricing.go`): its sizes come
//! from the Resource SKUs API (offline: the embedded size list), priced at eastus's static prices until
//! live prices arrive. Offline its zones are the ones listed here; a region without zones gets regional
//! offerings (zone `""`).

use super::pricing::PriceTable;

/// Physical public-cloud regions and their logical zone counts, from upstream's generated
/// `pkg/fake/locations.json` (the Locations API's `availabilityZoneMappings`).
#[rustfmt::skip]
const PUBLIC: &[(&str, u32)] = &[
    ("australiacentral", 0), ("australiacentral2", 0), ("australiaeast", 3), ("australiasoutheast", 0),
    ("austriaeast", 3), ("belgiumcentral", 3), ("brazilsouth", 3), ("brazilsoutheast", 0),
    ("canadacentral", 3), ("canadaeast", 0), ("centralindia", 3), ("centralus", 3), ("centraluseuap", 2),
    ("chilecentral", 3), ("denmarkeast", 3), ("eastasia", 3), ("eastus", 3), ("eastus2", 3),
    ("eastus2euap", 4), ("francecentral", 3), ("francesouth", 0), ("germanynorth", 0),
    ("germanywestcentral", 3), ("indonesiacentral", 3), ("israelcentral", 3), ("italynorth", 3),
    ("japaneast", 3), ("japanwest", 3), ("jioindiacentral", 0), ("jioindiawest", 0), ("koreacentral", 3),
    ("koreasouth", 0), ("malaysiawest", 3), ("mexicocentral", 3), ("newzealandnorth", 3),
    ("northcentralus", 0), ("northeurope", 3), ("norwayeast", 3), ("norwaywest", 0), ("polandcentral", 3),
    ("qatarcentral", 3), ("southafricanorth", 3), ("southafricawest", 0), ("southcentralus", 3),
    ("southeastasia", 3), ("southindia", 0), ("spaincentral", 3), ("swedencentral", 3),
    ("switzerlandnorth", 3), ("switzerlandwest", 0), ("uaecentral", 0), ("uaenorth", 3), ("uksouth", 3),
    ("ukwest", 0), ("westcentralus", 0), ("westeurope", 3), ("westindia", 0), ("westus", 0), ("westus2", 3),
    ("westus3", 3),
];

/// Azure Government and Azure China regions (upstream's `ARM_CLOUD` values other than the public cloud
/// reach them). Their zones are not in upstream's list, so offline they get regional offerings; the
/// controller takes their zones from the Resource SKUs API.
#[rustfmt::skip]
const SOVEREIGN: &[&str] = &[
    "chinaeast", "chinaeast2", "chinaeast3", "chinanorth", "chinanorth2", "chinanorth3", "usdodcentral",
    "usdodeast", "usgovarizona", "usgovtexas", "usgovvirginia",
];

/// The region whose static prices stand in for a region that has none (upstream's fallback).
pub const FALLBACK_PRICE_REGION: &str = "eastus";

/// Whether `name` is an Azure region (ARM name, e.g. `eastus2`).
pub fn is_azure_region(name: &str) -> bool {
    PUBLIC.iter().any(|(r, _)| *r == name) || SOVEREIGN.contains(&name)
}

/// Every Azure region name, sorted.
pub fn azure_regions() -> Vec<&'static str> {
    let mut all: Vec<&str> = PUBLIC.iter().map(|(r, _)| *r).chain(SOVEREIGN.iter().copied()).collect();
    all.sort_unstable();
    all
}

/// The logical zones (`"1"`, `"2"`, ...) of an Azure region as far as known offline; empty for a
/// region without zones, None for a name that is not an Azure region.
pub fn region_zones(name: &str) -> Option<Vec<String>> {
    if let Some((_, n)) = PUBLIC.iter().find(|(r, _)| *r == name) {
        return Some((1..=*n).map(|z| z.to_string()).collect());
    }
    SOVEREIGN.contains(&name).then(Vec::new)
}

/// What a reader of offline output (`catalog`, `simulate`) should know about the prices and sizes of
/// `region` given `prices`: one line each, empty when the embedded data covers the region fully.
pub fn offline_notes(region: &str, has_own_data: bool, prices: &PriceTable) -> Vec<String> {
    let mut notes = Vec::new();
    if !has_own_data {
        let zones = match region_zones(region).map(|z| z.len()).unwrap_or(0) {
            0 => "regional offerings only (zone \"\")".to_string(),
            n => format!("{n} zones"),
        };
        notes.push(format!(
            "region {region} has no embedded data: all embedded VM sizes are listed (the controller lists the \
             region's own from the Resource SKUs API), with {zones}, priced at {FALLBACK_PRICE_REGION}'s \
             static prices (upstream's fallback) until live prices arrive"
        ));
    }
    if !prices.iter().any(|(_, p)| p.spot.is_some()) {
        notes.push(
            "the embedded price table has no spot prices: spot is priced as on-demand, as upstream does \
             until its first live price update, so a plan picks spot only on ties; the controller reads \
             spot prices from the Azure Retail Prices API"
                .to_string(),
        );
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_regions_are_known_with_their_zones() {
        assert_eq!(region_zones("eastus"), Some(vec!["1".into(), "2".into(), "3".into()]));
        assert_eq!(region_zones("westcentralus"), Some(vec![]), "no zones: regional");
        assert_eq!(region_zones("usgovvirginia"), Some(vec![]));
        assert_eq!(region_zones("mars"), None);
        assert!(is_azure_region("swedencentral") && !is_azure_region("eastus4"));
        let all = azure_regions();
        assert_eq!(all.len(), PUBLIC.len() + SOVEREIGN.len());
        assert!(all.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates");
    }

    #[test]
    fn offline_notes_say_what_is_assumed() {
        let eastus = PriceTable::static_for_region("eastus");
        let notes = offline_notes("eastus", true, &eastus);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("spot is priced as on-demand"), "{notes:?}");
        let mut with_spot = eastus.clone();
        with_spot.set_spot("Standard_D4s_v5", 0.04);
        assert!(offline_notes("eastus", true, &with_spot).is_empty());
        let notes = offline_notes("westcentralus", false, &with_spot);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("eastus's static prices") && notes[0].contains("regional"), "{notes:?}");
        assert!(offline_notes("swedencentral", false, &with_spot)[0].contains("3 zones"));
    }
}
