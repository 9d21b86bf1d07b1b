//! `karpenter-azure bench --workload overlays`: what NodeOverlays cost each decision. Every snapshot the
//! controller builds (provisioning, each disruption pass, the repack bound) asks the index for each
//! NodePool's catalog with the overlays applied ([`crate::state::Cluster::overlaid_catalogs`]): an
//! application when a pool, a catalog or an overlay changed, the last one reused otherwise.
//!
//! The overlays are generated without randomness, in the shapes AKS users write (Azure/karpenter-
//! provider-azure#1902): a percentage off a VM family (reserved instances), a negotiated price for one
//! size, a spot surcharge in one zone, and an extended resource on one size. Weights are distinct except
//! for every tenth overlay, which repeats its neighbour's weight and family so conflicts are judged too.
//! Numbers, not pass/fail.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::apis::{AKSNodeClass, NodeOverlay, NodePool};
use crate::bench::{eastus_catalog, peak_rss_kib};
use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_SKU_FAMILY, LABEL_ZONE};
use crate::model::InstanceType;
use crate::state::Cluster;

/// NodePools the overlays are applied to, each with the whole catalog (as pools with no requirement
/// narrowing their sizes get it).
pub const POOLS: usize = 4;
/// Times each size is applied; the median is reported.
const REPEATS: usize = 5;

/// One measured size.
#[derive(Debug, Clone)]
pub struct OverlayResult {
    pub overlays: usize,
    pub pools: usize,
    pub types_per_pool: usize,
    /// Median time of one application to every pool.
    pub apply: Duration,
    /// Median time of a snapshot's overlays when nothing they depend on changed.
    pub reuse: Duration,
    /// Sizes with at least one offering priced by an overlay, summed over the pools.
    pub priced: usize,
    /// Sizes an overlay gave an extended resource, summed over the pools.
    pub extended: usize,
    /// Overlays left out (conflicts).
    pub rejected: usize,
    pub peak_rss_kib: Option<u64>,
}

/// `count` overlays over the families, sizes and zones of `types`.
pub fn overlays(types: &[InstanceType], count: usize) -> Vec<NodeOverlay> {
    let families: Vec<&str> = types
        .iter()
        .filter_map(|t| t.labels.get(LABEL_SKU_FAMILY).map(String::as_str))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let zones: Vec<&str> = types
        .iter()
        .flat_map(|t| &t.offerings)
        .map(|o| o.zone.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    (0..count)
        .map(|i| {
            // Every tenth repeats the previous overlay's weight and shape: a conflict at equal weight.
            let shape = if i % 10 == 9 { i - 1 } else { i };
            let weight = (shape % 10_000) + 1;
            let family = families[shape % families.len()];
            let size = &types[(shape * 7) % types.len()].name;
            let zone = zones[shape % zones.len()];
            let spec = match shape % 4 {
                0 => serde_json::json!({
                    "priceAdjustment": format!("-{}%", 5 + shape % 30),
                    "requirements": [{"key": LABEL_SKU_FAMILY, "operator": "In", "values": [family]}],
                }),
                1 => serde_json::json!({
                    "price": format!("{:.4}", 0.01 + (shape % 50) as f64 / 100.0),
                    "requirements": [{"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": [size]}],
                }),
                2 => serde_json::json!({
                    "priceAdjustment": "+0.002",
                    "requirements": [
                        {"key": LABEL_CAPACITY_TYPE, "operator": "In", "values": ["spot"]},
                        {"key": LABEL_ZONE, "operator": "In", "values": [zone]},
                        {"key": LABEL_SKU_FAMILY, "operator": "In", "values": [family]},
                    ],
                }),
                _ => serde_json::json!({
                    "capacity": {format!("example.com/device-{}", shape % 16): "1"},
                    "requirements": [{"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": [size]}],
                }),
            };
            let mut spec = spec;
            spec["weight"] = serde_json::json!(weight);
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1alpha1",
                "kind": "NodeOverlay",
                "metadata": {"name": format!("overlay-{i:05}")},
                "spec": spec,
            }))
            .expect("a generated NodeOverlay reads")
        })
        .collect()
}

/// Applies each of `sizes` overlay counts to [`POOLS`] NodePools of the eastus catalog through the
/// cluster index, as a snapshot does, reporting each size as soon as it is measured: the median
/// application (a catalog of a new allocation each time, as after a price refresh) and the median
/// snapshot that finds the same pools, catalog and overlays (the memoised application). Generation
/// is outside the timed region.
pub fn run(sizes: &[usize], mut report: impl FnMut(&OverlayResult)) {
    let catalog = eastus_catalog();
    for &count in sizes {
        let mut cluster = Cluster::new();
        for i in 0..POOLS {
            cluster.apply(&nodepool(i));
        }
        for overlay in overlays(&catalog, count) {
            cluster.apply(&overlay);
        }
        let pools: Vec<&NodePool> = cluster.nodepools().collect();
        let (mut applied, mut reused) = (vec![], vec![]);
        let mut last = None;
        for _ in 0..REPEATS {
            let fresh = Arc::new(catalog.clone());
            let types = |_: &NodePool, _: Option<&AKSNodeClass>| Arc::clone(&fresh);
            let started = Instant::now();
            let out = cluster.overlaid_catalogs(&pools, &types);
            applied.push(started.elapsed());
            let started = Instant::now();
            let again = cluster.overlaid_catalogs(&pools, &types);
            reused.push(started.elapsed());
            assert!(
                again.types.iter().zip(&out.types).all(|(a, b)| Arc::ptr_eq(a, b)),
                "the same inputs reuse the last application"
            );
            last = Some(out);
        }
        applied.sort();
        reused.sort();
        let out = last.expect("at least one repeat");
        report(&OverlayResult {
            overlays: count,
            pools: POOLS,
            types_per_pool: catalog.len(),
            apply: applied[REPEATS / 2],
            reuse: reused[REPEATS / 2],
            priced: out.price_overlaid.iter().map(BTreeSet::len).sum(),
            extended: out.capacity_overlaid.iter().map(BTreeSet::len).sum(),
            rejected: out.rejected.len(),
            peak_rss_kib: peak_rss_kib(),
        });
    }
}

/// Pool `i`: no requirement (the whole catalog) and a template label of its own.
fn nodepool(i: usize) -> NodePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": format!("pool-{i}")},
        "spec": {"template": {
            "metadata": {"labels": {"team": format!("team-{i}")}},
            "spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                     "requirements": []}
        }}
    }))
    .expect("a generated NodePool reads")
}

/// The table header matching [`render_row`].
pub fn render_header() -> String {
    format!(
        "{:>9} {:>6} {:>11} {:>11} {:>11} {:>8} {:>9} {:>9} {:>10}",
        "overlays",
        "pools",
        "types/pool",
        "apply_ms",
        "reuse_ms",
        "priced",
        "extended",
        "rejected",
        "peak_mib"
    )
}

/// One row of the overlay table.
pub fn render_row(r: &OverlayResult) -> String {
    format!(
        "{:>9} {:>6} {:>11} {:>11.2} {:>11.3} {:>8} {:>9} {:>9} {:>10}",
        r.overlays,
        r.pools,
        r.types_per_pool,
        r.apply.as_secs_f64() * 1000.0,
        r.reuse.as_secs_f64() * 1000.0,
        r.priced,
        r.extended,
        r.rejected,
        r.peak_rss_kib.map_or("-".to_string(), |k| format!("{:.0}", k as f64 / 1024.0)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_generated_shape_applies_and_every_tenth_conflicts() {
        let mut rows = vec![];
        run(&[0, 40], |r| rows.push(r.clone()));
        let (none, forty) = (&rows[0], &rows[1]);
        assert_eq!((none.priced, none.extended, none.rejected), (0, 0, 0));
        assert_eq!(forty.rejected, 4, "overlays 9, 19, 29 and 39 repeat their neighbour's weight and shape");
        assert!(forty.priced > 0 && forty.extended > 0, "{forty:?}");
        assert_eq!(forty.priced % POOLS, 0, "every pool is priced alike (no overlay names a pool)");
        assert!(render_row(forty).split_whitespace().count() == render_header().split_whitespace().count());
    }
}
