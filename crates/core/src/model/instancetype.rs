//! Instance types and their offerings as every layer sees them: a launchable VM size with its labels,
//! capacity, node overhead and allocatable, and the ways to buy it (zone, capacity type, price).
//!
//! Owns the types only. Building them from the Azure size data, prices and the unavailable-offerings
//! cache is the catalog's job (`catalog::instancetype`); the solver, the simulator and the controllers
//! only read them, so they live here, below all of those.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::resources::Resources;

/// Karpenter capacity type of an offering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum CapacityType {
    OnDemand,
    Spot,
}

impl CapacityType {
    pub const ALL: [CapacityType; 2] = [CapacityType::OnDemand, CapacityType::Spot];

    /// The `karpenter.sh/capacity-type` value.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::OnDemand => "on-demand",
            CapacityType::Spot => "spot",
        }
    }
}

/// What the node keeps for itself; allocatable = capacity − (kube-reserved + system-reserved + eviction).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Overhead {
    pub kube_reserved: Resources,
    /// Always zero on AKS, kept so the accounting reads like the kubelet's.
    pub system_reserved: Resources,
    pub eviction_threshold: Resources,
}

impl Overhead {
    pub fn total(&self) -> Resources {
        self.kube_reserved.add(&self.system_reserved).add(&self.eviction_threshold)
    }
}

/// One way to buy a size: a zone and a capacity type, with its hourly price.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Offering {
    /// `<region>-<n>`, the `topology.kubernetes.io/zone` value.
    pub zone: String,
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
    /// False while the unavailable-offerings cache blocks it.
    pub available: bool,
}

/// A launchable VM size in one region.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceType {
    pub name: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    /// Single-valued labels every node of this size carries (zone and capacity type are per offering).
    pub labels: BTreeMap<String, String>,
    pub capacity: Resources,
    pub overhead: Overhead,
    pub allocatable: Resources,
    /// Sorted by price, then zone, then capacity type.
    pub offerings: Vec<Offering>,
}

impl InstanceType {
    /// The cheapest available offering, if any.
    pub fn cheapest_available(&self) -> Option<&Offering> {
        self.offerings.iter().find(|o| o.available)
    }

    /// Lowest price of any offering of `capacity_type`, available or not.
    pub fn price(&self, capacity_type: CapacityType) -> Option<f64> {
        self.offerings.iter().filter(|o| o.capacity_type == capacity_type).map(|o| o.price).reduce(f64::min)
    }

    /// Zones with at least one available offering, sorted.
    pub fn available_zones(&self) -> Vec<&str> {
        let mut zones: Vec<&str> =
            self.offerings.iter().filter(|o| o.available).map(|o| o.zone.as_str()).collect();
        zones.sort_unstable();
        zones.dedup();
        zones
    }

    /// Cheapest offering price, for sorting; types without offerings sort last.
    /// The price that orders types cheapest first: the first (cheapest) offering's.
    pub fn sort_price(&self) -> f64 {
        self.offerings.first().map_or(f64::INFINITY, |o| o.price)
    }
}
