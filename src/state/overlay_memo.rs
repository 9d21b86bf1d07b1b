//! The last NodeOverlay application and what it was computed from.
//!
//! Applying overlays takes about a millisecond per overlay over four pools of the full eastus catalog
//! (`karpenter-azure bench --workload overlays`), and every decision's snapshot asks for it, while
//! its inputs change only when a NodePool's name or template labels, an overlay's spec or a catalog
//! does. The cloud provider memoises each class's catalog, so an unchanged catalog is the same
//! allocation: pointer equality is enough to know it. Upstream core keeps one overlaid instance type
//! store too, rebuilt when overlays or NodePools change (`pkg/controllers/nodeoverlay/controller.go`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::apis::{NodeOverlay, NodeOverlaySpec};
use crate::model::InstanceType;
use crate::scheduling::overlay::{self, PoolTypes};

use super::snapshot::OverlaidCatalogs;

/// One pool as the application read it. The catalog is held, so its allocation cannot be reused
/// by another catalog while the memo compares against it.
#[derive(Debug)]
struct PoolKey {
    name: String,
    labels: BTreeMap<String, String>,
    types: Arc<Vec<InstanceType>>,
}

/// What an application was computed from.
#[derive(Debug)]
struct Inputs {
    pools: Vec<PoolKey>,
    overlays: Vec<(String, NodeOverlaySpec)>,
}

impl Inputs {
    fn of(pools: &[(PoolTypes<'_>, &Arc<Vec<InstanceType>>)], overlays: &[NodeOverlay]) -> Self {
        Inputs {
            pools: pools
                .iter()
                .map(|(p, types)| PoolKey {
                    name: p.name.to_string(),
                    labels: p.labels.clone(),
                    types: Arc::clone(types),
                })
                .collect(),
            overlays: overlays.iter().map(|o| (overlay_name(o).to_string(), o.spec.clone())).collect(),
        }
    }

    fn same_as(&self, pools: &[(PoolTypes<'_>, &Arc<Vec<InstanceType>>)], overlays: &[NodeOverlay]) -> bool {
        self.pools.len() == pools.len()
            && self.overlays.len() == overlays.len()
            && self.pools.iter().zip(pools).all(|(held, (p, types))| {
                held.name == p.name && Arc::ptr_eq(&held.types, types) && &held.labels == p.labels
            })
            && self
                .overlays
                .iter()
                .zip(overlays)
                .all(|((name, spec), o)| name == overlay_name(o) && *spec == o.spec)
    }
}

fn overlay_name(overlay: &NodeOverlay) -> &str {
    overlay.metadata.name.as_deref().unwrap_or_default()
}

/// The memo: at most one application, the last. A hit costs a clone of the result (the catalogs
/// are shared, the names of the overlaid sizes copied).
#[derive(Debug, Default)]
pub struct OverlayMemo(Mutex<Option<(Inputs, OverlaidCatalogs)>>);

impl OverlayMemo {
    /// [`overlay::apply`] over `pools` (each beside the catalog its types borrow from), or the last
    /// application when it was computed from the same pools, catalogs and overlays.
    pub fn apply(
        &self,
        pools: &[(PoolTypes<'_>, &Arc<Vec<InstanceType>>)],
        overlays: &[NodeOverlay],
    ) -> OverlaidCatalogs {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((inputs, out)) = held.as_ref() {
            if inputs.same_as(pools, overlays) {
                return out.clone();
            }
        }
        let types: Vec<PoolTypes<'_>> = pools.iter().map(|(p, _)| *p).collect();
        let out = overlay::apply(&types, overlays);
        let out = OverlaidCatalogs {
            types: out.types.into_iter().map(Arc::new).collect(),
            rejected: out.rejected,
            price_overlaid: out.price_overlaid,
            capacity_overlaid: out.capacity_overlaid,
        };
        *held = Some((Inputs::of(pools, overlays), out.clone()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::labels::LABEL_INSTANCE_TYPE;
    use crate::model::resources::{Resources, CPU};
    use crate::model::{CapacityType, Offering};

    fn catalog(price: f64) -> Arc<Vec<InstanceType>> {
        Arc::new(vec![InstanceType {
            name: "Standard_B".into(),
            vcpus: 2,
            memory_mib: 8192,
            labels: [(LABEL_INSTANCE_TYPE.to_string(), "Standard_B".to_string())].into(),
            capacity: Resources::new().with(CPU, 2000),
            overhead: Default::default(),
            allocatable: Resources::new().with(CPU, 2000),
            offerings: vec![Offering {
                zone: "eastus-1".into(),
                capacity_type: CapacityType::OnDemand,
                price,
                available: true,
            }],
        }])
    }

    fn overlay(adjustment: &str) -> NodeOverlay {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "off"},
            "spec": {"priceAdjustment": adjustment, "requirements": []}
        }))
        .unwrap()
    }

    /// The price `memo` gives the one size, and its catalog's allocation (new on each application).
    fn applied(
        memo: &OverlayMemo,
        labels: &BTreeMap<String, String>,
        types: &Arc<Vec<InstanceType>>,
        overlays: &[NodeOverlay],
    ) -> (f64, Arc<Vec<InstanceType>>) {
        let pools = [(PoolTypes { name: "general", labels, types }, types)];
        let out = memo.apply(&pools, overlays);
        (out.types[0][0].offerings[0].price, Arc::clone(&out.types[0]))
    }

    #[test]
    fn an_application_is_reused_until_a_pool_a_catalog_or_an_overlay_changes() {
        let memo = OverlayMemo::default();
        let (none, team_a): (BTreeMap<String, String>, BTreeMap<String, String>) =
            (BTreeMap::new(), [("team".to_string(), "a".to_string())].into());
        let (list, cheaper) = (catalog(1.0), catalog(0.5));
        let half = [overlay("-50%")];

        let (price, first) = applied(&memo, &none, &list, &half);
        assert_eq!(price, 0.5);
        let (_, again) = applied(&memo, &none, &list, &half);
        assert!(Arc::ptr_eq(&first, &again), "same inputs: the last application");

        let (price, other) = applied(&memo, &none, &cheaper, &half);
        assert_eq!(price, 0.25, "another catalog is applied anew");
        assert!(!Arc::ptr_eq(&other, &again));
        let (price, _) = applied(&memo, &none, &cheaper, &[overlay("-20%")]);
        assert_eq!(price, 0.4, "a changed overlay is applied anew");
        let (_, before) = applied(&memo, &none, &cheaper, &[overlay("-20%")]);
        let (_, labelled) = applied(&memo, &team_a, &cheaper, &[overlay("-20%")]);
        assert!(!Arc::ptr_eq(&before, &labelled), "changed template labels are applied anew");
        let (price, _) = applied(&memo, &team_a, &cheaper, &[]);
        assert_eq!(price, 0.5, "no overlay left: list prices");
    }
}
