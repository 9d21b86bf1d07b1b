//! The unavailable-offerings cache: which (capacity type, size, zone) Azure recently refused, and until when.
//!
//! Owns the TTL table of upstream provider cache/unavailableofferings.go and instance/offerings and the
//! lookups the solver makes. Time is injected: every call takes `now` as a [`Timestamp`]
//! (a `Duration` since any fixed epoch the caller picks — the controller uses wall time, the simulator its
//! virtual clock); nothing here reads a clock.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::model::CapacityType;

/// A point in time as a duration since the caller's epoch.
pub type Timestamp = Duration;

/// TTLs (upstream provider cache/unavailableofferings.go and instance/offerings/*.go).
/// Anything not classified more precisely: retry soon.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3 * 60);
/// Spot quota, a family with zero quota, spot SKU-not-available and allocation failures change slowly.
pub const LONG_TTL: Duration = Duration::from_secs(3600);
/// A family with some quota left may free up as other VMs are deleted.
pub const FAMILY_QUOTA_PARTIAL_TTL: Duration = Duration::from_secs(10 * 60);
/// On-demand SkuNotAvailable is a regional capacity restriction that Azure lifts on the order of a day.
pub const SKU_NOT_AVAILABLE_ON_DEMAND_TTL: Duration = Duration::from_secs(23 * 3600);

/// The Azure error classes that mark offerings unavailable (upstream provider instance/offerings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnavailableReason {
    /// Unclassified capacity error for one offering.
    Other,
    /// Spot (low-priority) vCPU quota exhausted: every spot offering.
    LowPriorityQuota,
    /// The size's family quota is exhausted; `limit_zero` when the message says "Current Limit: 0".
    SkuFamilyQuota { limit_zero: bool },
    /// The size is not offered to this subscription in the region.
    SkuNotAvailable,
    /// The zone has no capacity for the size.
    ZonalAllocationFailed,
    /// The region has no capacity for the size.
    AllocationFailed,
    /// Constraints (e.g. proximity, accelerated networking) cannot be met in the zone.
    OverconstrainedAllocation,
}

impl UnavailableReason {
    /// Static category for metric labels and events.
    pub fn category(self) -> &'static str {
        match self {
            Self::Other => "Unavailable",
            Self::LowPriorityQuota => "LowPriorityQuota",
            Self::SkuFamilyQuota { .. } => "SKUFamilyQuotaReached",
            Self::SkuNotAvailable => "SKUNotAvailable",
            Self::ZonalAllocationFailed => "ZonalAllocationFailed",
            Self::AllocationFailed => "AllocationFailed",
            Self::OverconstrainedAllocation => "OverconstrainedAllocation",
        }
    }

    /// How long offerings stay unavailable for this error and capacity type.
    pub fn ttl(self, capacity_type: CapacityType) -> Duration {
        match self {
            Self::Other => DEFAULT_TTL,
            Self::SkuFamilyQuota { limit_zero: false } => FAMILY_QUOTA_PARTIAL_TTL,
            Self::SkuNotAvailable if capacity_type == CapacityType::OnDemand => {
                SKU_NOT_AVAILABLE_ON_DEMAND_TTL
            }
            Self::LowPriorityQuota
            | Self::SkuFamilyQuota { limit_zero: true }
            | Self::SkuNotAvailable
            | Self::ZonalAllocationFailed
            | Self::AllocationFailed
            | Self::OverconstrainedAllocation => LONG_TTL,
        }
    }
}

/// What an entry covers. `None` fields are wildcards.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Scope {
    capacity_type: CapacityType,
    sku: Option<String>,
    zone: Option<String>,
}

/// Family-wide block: every size of `family` in `zone` with at least `min_vcpus` vCPUs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct FamilyScope {
    family: String,
    zone: Option<String>,
    capacity_type: CapacityType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FamilyBlock {
    min_vcpus: u32,
    expires_at: Timestamp,
}

impl FamilyBlock {
    /// Folds a new block into this one: an expired one is replaced; a live one keeps the lower
    /// threshold and the later expiry.
    fn merge(&mut self, new: FamilyBlock, now: Timestamp) {
        if self.expires_at <= now {
            *self = new;
        } else {
            self.min_vcpus = self.min_vcpus.min(new.min_vcpus);
            self.expires_at = self.expires_at.max(new.expires_at);
        }
    }
}

/// The cache. `seq` changes on every mark and eviction so callers can tell when to recompute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnavailableOfferings {
    entries: BTreeMap<Scope, Timestamp>,
    families: BTreeMap<FamilyScope, FamilyBlock>,
    /// Region-wide blocks by capacity type: every size with at least `min_vcpus` vCPUs.
    regional: BTreeMap<CapacityType, FamilyBlock>,
    seq: u64,
}

impl UnavailableOfferings {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.families.is_empty() && self.regional.is_empty()
    }

    /// Records an Azure error for an attempt to launch `sku` in `zone` with `capacity_type`, marking the
    /// scope the error class implies (upstream provider instance/offerings).
    pub fn mark(
        &mut self,
        reason: UnavailableReason,
        capacity_type: CapacityType,
        sku: &str,
        zone: &str,
        now: Timestamp,
    ) {
        let ttl = reason.ttl(capacity_type);
        let (sku, zone) = (Some(sku), Some(zone));
        match reason {
            UnavailableReason::Other | UnavailableReason::OverconstrainedAllocation => {
                self.mark_scope(capacity_type, sku, zone, ttl, now)
            }
            UnavailableReason::LowPriorityQuota => self.mark_scope(CapacityType::Spot, None, None, ttl, now),
            UnavailableReason::SkuFamilyQuota { .. } | UnavailableReason::SkuNotAvailable => {
                self.mark_scope(capacity_type, sku, None, ttl, now)
            }
            UnavailableReason::ZonalAllocationFailed => {
                for ct in CapacityType::ALL {
                    self.mark_scope(ct, sku, zone, ttl, now);
                }
            }
            UnavailableReason::AllocationFailed => {
                for ct in CapacityType::ALL {
                    self.mark_scope(ct, sku, None, ttl, now);
                }
            }
        }
    }

    /// Marks one offering (or, with None, every size and/or zone) unavailable for `ttl` from `now`.
    /// A later expiry never shortens an existing one.
    pub fn mark_scope(
        &mut self,
        capacity_type: CapacityType,
        sku: Option<&str>,
        zone: Option<&str>,
        ttl: Duration,
        now: Timestamp,
    ) {
        let scope = Scope { capacity_type, sku: sku.map(str::to_string), zone: zone.map(str::to_string) };
        let expires_at = now + ttl;
        let slot = self.entries.entry(scope).or_insert(expires_at);
        *slot = (*slot).max(expires_at);
        self.seq += 1;
    }

    /// Blocks every size of `family` (the Resource SKU family, e.g. `standardDSv5Family`) with at least
    /// `min_vcpus` vCPUs (0 = the whole family) in `zone` (None = all zones). Used when quota headroom is
    /// known: sizes smaller than the remaining quota stay available. Overlapping blocks keep the lower
    /// threshold and the later expiry.
    pub fn mark_family(
        &mut self,
        family: &str,
        zone: Option<&str>,
        capacity_type: CapacityType,
        min_vcpus: u32,
        ttl: Duration,
        now: Timestamp,
    ) {
        let scope = FamilyScope { family: family.to_string(), zone: zone.map(str::to_string), capacity_type };
        let block = FamilyBlock { min_vcpus, expires_at: now + ttl };
        self.families.entry(scope).and_modify(|b| b.merge(block, now)).or_insert(block);
        self.seq += 1;
    }

    /// The region's vCPU quota is exhausted for `capacity_type`: blocks every size with more than
    /// `headroom` vCPUs (the quota left; None when Azure did not say, which blocks every size) for `ttl`.
    /// Upstream does not cache this error, so each launch fails again and its claim is created and
    /// deleted over and over; here the solver plans within the quota left until the block expires.
    /// Overlapping blocks keep the lower threshold and the later expiry.
    pub fn mark_regional_quota(
        &mut self,
        capacity_type: CapacityType,
        headroom: Option<u32>,
        ttl: Duration,
        now: Timestamp,
    ) {
        let min_vcpus = headroom.map_or(0, |h| h.saturating_add(1));
        let block = FamilyBlock { min_vcpus, expires_at: now + ttl };
        self.regional.entry(capacity_type).and_modify(|b| b.merge(block, now)).or_insert(block);
        self.seq += 1;
    }

    /// Whether the offering is blocked at `now` by any entry.
    pub fn is_unavailable(&self, offering: &OfferingRef<'_>, now: Timestamp) -> bool {
        let live = |expires_at: &Timestamp| *expires_at > now;
        let skus = [Some(offering.sku), None];
        let zones = [Some(offering.zone), None];
        let by_offering = skus.iter().any(|sku| {
            zones.iter().any(|zone| {
                let scope = Scope {
                    capacity_type: offering.capacity_type,
                    sku: sku.map(str::to_string),
                    zone: zone.map(str::to_string),
                };
                self.entries.get(&scope).is_some_and(live)
            })
        });
        let regional = self
            .regional
            .get(&offering.capacity_type)
            .is_some_and(|b| live(&b.expires_at) && offering.vcpus >= b.min_vcpus);
        by_offering
            || regional
            || offering.family.is_some_and(|family| {
                zones.iter().any(|zone| {
                    let scope = FamilyScope {
                        family: family.to_string(),
                        zone: zone.map(str::to_string),
                        capacity_type: offering.capacity_type,
                    };
                    self.families
                        .get(&scope)
                        .is_some_and(|b| live(&b.expires_at) && offering.vcpus >= b.min_vcpus)
                })
            })
    }

    /// Drops expired entries (the upstream 10 s cleanup loop calls the equivalent).
    pub fn evict_expired(&mut self, now: Timestamp) {
        let before = self.entries.len() + self.families.len() + self.regional.len();
        self.entries.retain(|_, expires_at| *expires_at > now);
        self.families.retain(|_, b| b.expires_at > now);
        self.regional.retain(|_, b| b.expires_at > now);
        if self.entries.len() + self.families.len() + self.regional.len() != before {
            self.seq += 1;
        }
    }
}

/// The facts of one offering the cache needs to answer a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfferingRef<'a> {
    pub capacity_type: CapacityType,
    pub sku: &'a str,
    pub zone: &'a str,
    /// Resource SKU family, for family-wide blocks.
    pub family: Option<&'a str>,
    pub vcpus: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Duration::from_secs(1_000_000);
    const MINUTE: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);

    fn offering<'a>(ct: CapacityType, sku: &'a str, zone: &'a str) -> OfferingRef<'a> {
        OfferingRef { capacity_type: ct, sku, zone, family: Some("standardDSv5Family"), vcpus: 4 }
    }

    use CapacityType::{OnDemand, Spot};

    #[test]
    fn ttl_table() {
        use UnavailableReason::*;
        assert_eq!(Other.ttl(OnDemand), 3 * MINUTE);
        assert_eq!(LowPriorityQuota.ttl(Spot), HOUR);
        assert_eq!(SkuFamilyQuota { limit_zero: true }.ttl(OnDemand), HOUR);
        assert_eq!(SkuFamilyQuota { limit_zero: false }.ttl(OnDemand), 10 * MINUTE);
        assert_eq!(SkuNotAvailable.ttl(Spot), HOUR);
        assert_eq!(SkuNotAvailable.ttl(OnDemand), 23 * HOUR);
        assert_eq!(ZonalAllocationFailed.ttl(Spot), HOUR);
        assert_eq!(AllocationFailed.ttl(OnDemand), HOUR);
        assert_eq!(OverconstrainedAllocation.ttl(OnDemand), HOUR);
    }

    #[test]
    fn default_entry_expires_after_three_minutes() {
        let mut cache = UnavailableOfferings::new();
        cache.mark(UnavailableReason::Other, OnDemand, "Standard_D4s_v5", "eastus-1", T0);
        let o = offering(OnDemand, "Standard_D4s_v5", "eastus-1");
        assert!(cache.is_unavailable(&o, T0));
        assert!(cache.is_unavailable(&o, T0 + 3 * MINUTE - Duration::from_secs(1)));
        assert!(!cache.is_unavailable(&o, T0 + 3 * MINUTE));
        // Only that offering.
        assert!(!cache.is_unavailable(&offering(Spot, "Standard_D4s_v5", "eastus-1"), T0));
        assert!(!cache.is_unavailable(&offering(OnDemand, "Standard_D4s_v5", "eastus-2"), T0));
    }

    #[test]
    fn low_priority_quota_blocks_all_spot() {
        let mut cache = UnavailableOfferings::new();
        cache.mark(UnavailableReason::LowPriorityQuota, Spot, "Standard_D4s_v5", "eastus-1", T0);
        assert!(cache.is_unavailable(&offering(Spot, "Standard_E8s_v5", "eastus-3"), T0 + 59 * MINUTE));
        assert!(!cache.is_unavailable(&offering(Spot, "Standard_E8s_v5", "eastus-3"), T0 + HOUR));
        assert!(!cache.is_unavailable(&offering(OnDemand, "Standard_D4s_v5", "eastus-1"), T0));
    }

    #[test]
    fn sku_not_available_covers_all_zones_of_the_capacity_type() {
        let mut cache = UnavailableOfferings::new();
        cache.mark(UnavailableReason::SkuNotAvailable, OnDemand, "Standard_D4s_v5", "eastus-1", T0);
        let other_zone = offering(OnDemand, "Standard_D4s_v5", "eastus-2");
        assert!(cache.is_unavailable(&other_zone, T0 + 22 * HOUR));
        assert!(!cache.is_unavailable(&other_zone, T0 + 23 * HOUR));
        assert!(!cache.is_unavailable(&offering(Spot, "Standard_D4s_v5", "eastus-2"), T0));
    }

    #[test]
    fn zonal_and_regional_allocation_failures_cover_both_capacity_types() {
        let mut cache = UnavailableOfferings::new();
        cache.mark(UnavailableReason::ZonalAllocationFailed, OnDemand, "Standard_D4s_v5", "eastus-1", T0);
        assert!(cache.is_unavailable(&offering(Spot, "Standard_D4s_v5", "eastus-1"), T0));
        assert!(!cache.is_unavailable(&offering(Spot, "Standard_D4s_v5", "eastus-2"), T0));
        cache.mark(UnavailableReason::AllocationFailed, Spot, "Standard_E4s_v5", "eastus-1", T0);
        assert!(cache.is_unavailable(&offering(OnDemand, "Standard_E4s_v5", "eastus-3"), T0));
    }

    #[test]
    fn a_regional_quota_block_leaves_the_sizes_that_fit_the_quota_left() {
        let mut cache = UnavailableOfferings::new();
        let size = |vcpus| OfferingRef { capacity_type: OnDemand, sku: "S", zone: "z", family: None, vcpus };
        cache.mark_regional_quota(OnDemand, Some(4), 10 * MINUTE, T0);
        assert!(!cache.is_unavailable(&size(4), T0), "4 vCPUs fit the 4 left");
        assert!(cache.is_unavailable(&size(8), T0));
        let spot = OfferingRef { capacity_type: CapacityType::Spot, ..size(8) };
        assert!(!cache.is_unavailable(&spot, T0), "spot has its own quota");
        cache.mark_regional_quota(OnDemand, None, 10 * MINUTE, T0 + MINUTE);
        assert!(cache.is_unavailable(&size(2), T0 + MINUTE), "no headroom known: every size");
        cache.evict_expired(T0 + 12 * MINUTE);
        assert!(cache.is_empty());
    }

    #[test]
    fn family_threshold_blocks_only_large_sizes() {
        let mut cache = UnavailableOfferings::new();
        cache.mark_family("standardDSv5Family", None, OnDemand, 8, HOUR, T0);
        let small = offering(OnDemand, "Standard_D4s_v5", "eastus-1");
        let large = OfferingRef { vcpus: 8, ..offering(OnDemand, "Standard_D8s_v5", "eastus-1") };
        assert!(!cache.is_unavailable(&small, T0));
        assert!(cache.is_unavailable(&large, T0));
        cache.mark_family("standardDSv5Family", None, OnDemand, 0, 10 * MINUTE, T0);
        assert!(cache.is_unavailable(&small, T0));
        assert!(!cache.is_unavailable(&large, T0 + HOUR));
    }

    #[test]
    fn eviction_and_sequence() {
        let mut cache = UnavailableOfferings::new();
        assert_eq!(cache.seq(), 0);
        cache.mark(UnavailableReason::Other, OnDemand, "A", "z", T0);
        cache.mark(UnavailableReason::SkuFamilyQuota { limit_zero: true }, OnDemand, "B", "z", T0);
        assert_eq!(cache.seq(), 2);
        cache.evict_expired(T0 + MINUTE);
        assert_eq!(cache.seq(), 2, "nothing expired yet");
        cache.evict_expired(T0 + 5 * MINUTE);
        assert_eq!(cache.seq(), 3);
        assert!(!cache.is_empty());
        cache.evict_expired(T0 + HOUR);
        assert!(cache.is_empty());
    }

    #[test]
    fn remarking_never_shortens() {
        let mut cache = UnavailableOfferings::new();
        cache.mark(UnavailableReason::SkuNotAvailable, OnDemand, "A", "z", T0);
        cache.mark(UnavailableReason::Other, OnDemand, "A", "z", T0);
        cache.mark_scope(OnDemand, Some("A"), None, MINUTE, T0);
        assert!(cache.is_unavailable(&offering(OnDemand, "A", "y"), T0 + 22 * HOUR));
    }
}
