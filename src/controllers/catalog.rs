//! Instance types per AKSNodeClass: the embedded catalog for the region, priced by the static table,
//! shaped by the class (maxPods, OS disk) and the operator's network settings, with offerings the
//! unavailable cache blocks marked unavailable. Memoised per class shape and cache generation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::apis::AKSNodeClass;
use crate::catalog::{self, CapacityOptions, CatalogError, InstanceType, PriceTable, UnavailableOfferings};
use crate::cloud::Clock;

/// (maxPods, osDiskSizeGB) of a class: what changes allocatable.
type ClassShape = (Option<u32>, Option<u32>);
/// The types of a shape, with the cache generation they were computed at.
type Memo = BTreeMap<ClassShape, (u64, Arc<Vec<InstanceType>>)>;

pub struct Catalog {
    region: String,
    options: CapacityOptions,
    pricing: PriceTable,
    unavailable: Arc<Mutex<UnavailableOfferings>>,
    clock: Clock,
    memo: Mutex<Memo>,
}

impl Catalog {
    /// Fails when the region is not in the embedded catalog.
    pub fn new(
        region: &str,
        options: CapacityOptions,
        pricing: PriceTable,
        unavailable: Arc<Mutex<UnavailableOfferings>>,
        clock: Clock,
    ) -> Result<Catalog, CatalogError> {
        catalog::instance_types(region, &options, &pricing, &UnavailableOfferings::new(), clock())?;
        Ok(Catalog {
            region: region.to_string(),
            options,
            pricing,
            unavailable,
            clock,
            memo: Mutex::new(BTreeMap::new()),
        })
    }

    /// The cache of offerings Azure refused, shared with the cloud provider.
    pub fn unavailable(&self) -> Arc<Mutex<UnavailableOfferings>> {
        self.unavailable.clone()
    }

    /// The instance types a NodePool on `class` can launch (the defaults when the class is unknown).
    pub fn types_for(&self, class: Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>> {
        let shape: ClassShape = class.map_or((None, None), |c| {
            (c.spec.max_pods.map(|m| m.max(0) as u32), c.spec.os_disk_size_gb.map(|g| g.max(0) as u32))
        });
        let now = (self.clock)();
        let mut unavailable = self.unavailable.lock().unwrap_or_else(|p| p.into_inner());
        unavailable.evict_expired(now);
        let seq = unavailable.seq();
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, types)) = memo.get(&shape) {
            if *at == seq {
                return types.clone();
            }
        }
        let options = CapacityOptions { max_pods: shape.0, os_disk_size_gb: shape.1, ..self.options.clone() };
        // The region was checked in `new`, so this cannot fail; an empty list is the safe fallback.
        let types = Arc::new(
            catalog::instance_types(&self.region, &options, &self.pricing, &unavailable, now)
                .unwrap_or_default(),
        );
        memo.insert(shape, (seq, types.clone()));
        types
    }
}
