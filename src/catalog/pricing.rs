//! Prices of VM sizes in one region: the table, its static fallback, and how Retail API rows become prices.
//!
//! Owns the pure half of pricing. The static table comes from the embedded catalog (the upstream
//! provider's generated on-demand prices; it has no spot prices). Live rows from the Azure Retail Prices
//! API are classified here (Windows and "Low Priority" rows dropped, "Spot" rows are spot prices) and
//! merged over the static table; fetching them is `retail.rs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::sku::embedded_skus;

/// On-demand and spot price of a size, USD per hour. None = unknown.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct SkuPrice {
    pub on_demand: Option<f64>,
    pub spot: Option<f64>,
}

/// Size name → prices, for one region.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct PriceTable {
    region: String,
    prices: BTreeMap<String, SkuPrice>,
}

impl PriceTable {
    pub fn new(region: &str) -> PriceTable {
        PriceTable { region: region.to_string(), prices: BTreeMap::new() }
    }

    /// The static fallback for `region` from the embedded data; empty when the region has no prices.
    pub fn static_for_region(region: &str) -> PriceTable {
        let mut table = PriceTable::new(region);
        for sku in embedded_skus() {
            if let Some(price) = sku.prices.get(region) {
                table.prices.insert(
                    sku.name.clone(),
                    SkuPrice { on_demand: valid(price.on_demand), spot: valid(price.spot) },
                );
            }
        }
        table
    }

    /// The static table for `region`, or, when the embedded data has no prices for it, eastus's
    /// (upstream's fallback for unknown regions) under `region`'s name.
    pub fn static_or_fallback(region: &str) -> PriceTable {
        let own = PriceTable::static_for_region(region);
        if !own.is_empty() {
            return own;
        }
        let fallback = PriceTable::static_for_region(super::regions::FALLBACK_PRICE_REGION);
        PriceTable { region: region.to_string(), prices: fallback.prices }
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    pub fn len(&self) -> usize {
        self.prices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    pub fn get(&self, sku: &str) -> SkuPrice {
        self.prices.get(sku).copied().unwrap_or_default()
    }

    pub fn on_demand(&self, sku: &str) -> Option<f64> {
        self.get(sku).on_demand
    }

    pub fn spot(&self, sku: &str) -> Option<f64> {
        self.get(sku).spot
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, SkuPrice)> {
        self.prices.iter().map(|(k, v)| (k.as_str(), *v))
    }

    pub fn set_on_demand(&mut self, sku: &str, price: f64) {
        if let Some(price) = valid(Some(price)) {
            self.prices.entry(sku.to_string()).or_default().on_demand = Some(price);
        }
    }

    pub fn set_spot(&mut self, sku: &str, price: f64) {
        if let Some(price) = valid(Some(price)) {
            self.prices.entry(sku.to_string()).or_default().spot = Some(price);
        }
    }

    /// `live` laid over `self`: a live price replaces the base one; sizes or price kinds the live table
    /// lacks keep the base value, so a Retail API that omits a size never makes it unpriced.
    pub fn merged_with(&self, live: &PriceTable) -> PriceTable {
        let mut merged = self.clone();
        for (sku, price) in &live.prices {
            let slot = merged.prices.entry(sku.clone()).or_default();
            slot.on_demand = price.on_demand.or(slot.on_demand);
            slot.spot = price.spot.or(slot.spot);
        }
        merged
    }

    /// Builds a table from Retail API rows (see [`RetailPriceItem::classify`]).
    ///
    /// When several rows price the same size and kind, the choice is order-independent: the primary meter
    /// region first, then the latest effective start date, then the higher price.
    pub fn from_retail_items<'a>(
        region: &str,
        items: impl IntoIterator<Item = &'a RetailPriceItem>,
    ) -> PriceTable {
        type Rank<'a> = (bool, &'a str, f64);
        let mut best: BTreeMap<(&str, PriceKind), Rank> = BTreeMap::new();
        for item in items {
            let Some(kind) = item.classify() else {
                continue;
            };
            if valid(Some(item.retail_price)).is_none() || !item.arm_region_name.eq_ignore_ascii_case(region)
            {
                continue;
            }
            let rank = (item.is_primary_meter_region, item.effective_start_date.as_str(), item.retail_price);
            best.entry((item.arm_sku_name.as_str(), kind))
                .and_modify(|current| {
                    if rank.partial_cmp(current) == Some(std::cmp::Ordering::Greater) {
                        *current = rank;
                    }
                })
                .or_insert(rank);
        }
        let mut table = PriceTable::new(region);
        for ((sku, kind), (_, _, price)) in best {
            match kind {
                PriceKind::OnDemand => table.set_on_demand(sku, price),
                PriceKind::Spot => table.set_spot(sku, price),
            }
        }
        table
    }
}

/// Prices must be finite and positive to be usable for ranking.
fn valid(price: Option<f64>) -> Option<f64> {
    price.filter(|p| p.is_finite() && *p > 0.0)
}

/// Which map a Retail API row fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PriceKind {
    OnDemand,
    Spot,
}

/// One row of the Azure Retail Prices API (`Items[]`), with the fields pricing needs.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetailPriceItem {
    #[serde(default)]
    pub currency_code: String,
    pub retail_price: f64,
    #[serde(default)]
    pub arm_region_name: String,
    #[serde(default)]
    pub arm_sku_name: String,
    #[serde(default)]
    pub meter_name: String,
    #[serde(default)]
    pub product_name: String,
    #[serde(default)]
    pub sku_name: String,
    #[serde(default)]
    pub effective_start_date: String,
    #[serde(default)]
    pub is_primary_meter_region: bool,
}

impl RetailPriceItem {
    /// Windows rows carry the license and "Low Priority" rows are the retired low-priority VMs, so both are
    /// dropped; "... Spot" SKU rows are spot prices and everything else is Linux pay-as-you-go (upstream
    /// provider pricing.go). Rows without an ARM size name cannot be keyed and are dropped too.
    pub fn classify(&self) -> Option<PriceKind> {
        if self.arm_sku_name.is_empty()
            || self.product_name.ends_with(" Windows")
            || self.meter_name.ends_with(" Low Priority")
            || (!self.currency_code.is_empty() && self.currency_code != "USD")
        {
            return None;
        }
        if self.sku_name.ends_with(" Spot") {
            Some(PriceKind::Spot)
        } else {
            Some(PriceKind::OnDemand)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(sku: &str, sku_name: &str, meter: &str, product: &str, price: f64) -> RetailPriceItem {
        RetailPriceItem {
            currency_code: "USD".into(),
            retail_price: price,
            arm_region_name: "eastus".into(),
            arm_sku_name: sku.into(),
            meter_name: meter.into(),
            product_name: product.into(),
            sku_name: sku_name.into(),
            effective_start_date: "2024-01-01T00:00:00Z".into(),
            is_primary_meter_region: true,
        }
    }

    #[test]
    fn static_table_has_embedded_prices() {
        let table = PriceTable::static_for_region("eastus");
        assert_eq!(table.len(), 1407);
        assert_eq!(table.on_demand("Standard_D4s_v5"), Some(0.192));
        assert_eq!(table.spot("Standard_D4s_v5"), None);
        assert!(PriceTable::static_for_region("mars").is_empty());
    }

    #[test]
    fn classifies_retail_rows() {
        let linux = item("Standard_D4s_v5", "D4s v5", "D4s v5", "Virtual Machines Dsv5 Series", 0.192);
        let spot =
            item("Standard_D4s_v5", "D4s v5 Spot", "D4s v5 Spot", "Virtual Machines Dsv5 Series", 0.02);
        let windows =
            item("Standard_D4s_v5", "D4s v5", "D4s v5", "Virtual Machines Dsv5 Series Windows", 0.376);
        let low = item(
            "Standard_D4s_v5",
            "D4s v5 Low Priority",
            "D4s v5 Low Priority",
            "Virtual Machines Dsv5 Series",
            0.04,
        );
        assert_eq!(linux.classify(), Some(PriceKind::OnDemand));
        assert_eq!(spot.classify(), Some(PriceKind::Spot));
        assert_eq!(windows.classify(), None);
        assert_eq!(low.classify(), None);

        let table = PriceTable::from_retail_items("eastus", [&linux, &spot, &windows, &low]);
        assert_eq!(table.get("Standard_D4s_v5"), SkuPrice { on_demand: Some(0.192), spot: Some(0.02) });
    }

    #[test]
    fn duplicate_rows_resolve_independently_of_order() {
        let old = RetailPriceItem {
            effective_start_date: "2020-01-01T00:00:00Z".into(),
            ..item("Standard_D2s_v5", "D2s v5", "D2s v5", "Virtual Machines Dsv5 Series", 0.2)
        };
        let new = item("Standard_D2s_v5", "D2s v5", "D2s v5", "Virtual Machines Dsv5 Series", 0.096);
        let a = PriceTable::from_retail_items("eastus", [&old, &new]);
        let b = PriceTable::from_retail_items("eastus", [&new, &old]);
        assert_eq!(a, b);
        assert_eq!(a.on_demand("Standard_D2s_v5"), Some(0.096));
        // Zero or negative prices are unusable and ignored.
        let free = item("Standard_X", "X", "X", "Virtual Machines X", 0.0);
        assert!(PriceTable::from_retail_items("eastus", [&free]).is_empty());
    }

    #[test]
    fn merge_prefers_live_and_keeps_static_gaps() {
        let mut base = PriceTable::new("eastus");
        base.set_on_demand("A", 1.0);
        base.set_on_demand("B", 2.0);
        let mut live = PriceTable::new("eastus");
        live.set_on_demand("A", 1.5);
        live.set_spot("B", 0.3);
        live.set_on_demand("C", 3.0);
        let merged = base.merged_with(&live);
        assert_eq!(merged.get("A"), SkuPrice { on_demand: Some(1.5), spot: None });
        assert_eq!(merged.get("B"), SkuPrice { on_demand: Some(2.0), spot: Some(0.3) });
        assert_eq!(merged.get("C"), SkuPrice { on_demand: Some(3.0), spot: None });
        assert_eq!(merged.region(), "eastus");
    }
}
