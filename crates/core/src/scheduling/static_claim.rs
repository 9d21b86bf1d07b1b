//! The NodeClaim a static NodePool (`spec.replicas`) launches: no pods decide its shape, so it asks for
//! what the pool's requirements allow and the cheapest of it launches. Upstream core leaves the
//! instance type open on a static claim and its provider's `Create` takes the cheapest compatible
//! offering (`scheduling/nodeclaimtemplate.go` `ToNodeClaim`, `IsStaticNodeClaim`); here the claim
//! lists the allowed types cheapest first, so the launcher's fallback order is the same.

use crate::model::resources::Resources;
use crate::model::selection::select;
use crate::model::{InstanceType, Offering};

use super::claims::{claim_labels, require_options};
use super::templates::daemon_runs_on;
use super::{NewNodeClaim, NodePoolInput, Pod};

/// The claim for one replica of `pool`, named `<pool>-static-<n>` until the API server names it, with
/// the DaemonSet pods that would run on it as its requests (a size they do not fit is left out);
/// `Err` says why the pool cannot launch (no type or offering meets its requirements, or minValues).
pub fn static_claim(
    pool: &NodePoolInput,
    daemonsets: &[Pod],
    n: usize,
    max_options: usize,
) -> Result<NewNodeClaim, String> {
    let overhead = |t: &InstanceType| {
        let mut total = Resources::new();
        for daemon in daemonsets.iter().filter(|d| daemon_runs_on(d, pool, &t.labels)) {
            total.add_assign(&daemon.requests);
        }
        total
    };
    let mut types: Vec<(InstanceType, Offering)> = select(&pool.instance_types, &pool.requirements)
        .map_err(|e| format!("NodePool {}: {e}", pool.name))?
        .into_iter()
        .filter(|t| overhead(t).fits(&t.allocatable))
        .filter_map(|mut t| {
            t.offerings.retain(|o| o.available);
            let cheapest = t.offerings.iter().min_by(|a, b| cheaper(a, b)).cloned()?;
            Some((t, cheapest))
        })
        .collect();
    if types.is_empty() {
        return Err(format!(
            "NodePool {}: no instance type with an available offering meets its requirements and holds its DaemonSets",
            pool.name
        ));
    }
    types.sort_by(|(a, x), (b, y)| cheaper(x, y).then_with(|| a.name.cmp(&b.name)));
    types.truncate(max_options.max(1));
    let (chosen, offering) = types[0].clone();
    let mut requirements = pool.requirements.clone();
    require_options(
        &mut requirements,
        types.iter().map(|(t, _)| t.name.clone()),
        types.iter().flat_map(|(t, _)| &t.offerings).map(|o| (o.capacity_type, o.zone.as_str())),
    );
    let labels = claim_labels(pool, &requirements, &chosen, &offering);
    Ok(NewNodeClaim {
        name: format!("{}-static-{n}", pool.name),
        nodepool: pool.name.clone(),
        instance_type: chosen.name.clone(),
        instance_type_options: types.iter().map(|(t, _)| t.name.clone()).collect(),
        zone: offering.zone.clone(),
        capacity_type: offering.capacity_type,
        price_per_hour: offering.price,
        requirements,
        labels,
        taints: pool.taints.clone(),
        startup_taints: pool.startup_taints.clone(),
        allocatable: chosen.allocatable.clone(),
        requests: overhead(&chosen),
        daemon_overhead: overhead(&chosen),
        pods: vec![],
    })
}

/// The cheaper offering; among equal prices on-demand before spot (a static pool's nodes are meant to
/// stay), then by zone.
fn cheaper(a: &Offering, b: &Offering) -> std::cmp::Ordering {
    a.price
        .total_cmp(&b.price)
        .then_with(|| a.capacity_type.cmp(&b.capacity_type))
        .then_with(|| a.zone.cmp(&b.zone))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::labels::{LABEL_INSTANCE_TYPE, LABEL_NODEPOOL};
    use crate::model::requirements::Requirement;
    use crate::model::CapacityType;
    use crate::scheduling::test_support;

    fn size(name: &str, family: &str, prices: &[(&str, CapacityType, f64, bool)]) -> InstanceType {
        InstanceType {
            name: name.into(),
            labels: BTreeMap::from([
                (LABEL_INSTANCE_TYPE.to_string(), name.to_string()),
                ("karpenter.azure.com/sku-family".to_string(), family.to_string()),
            ]),
            offerings: prices
                .iter()
                .map(|&(zone, capacity_type, price, available)| Offering {
                    zone: zone.into(),
                    capacity_type,
                    price,
                    available,
                })
                .collect(),
            vcpus: 2,
            memory_mib: 8192,
            capacity: Resources::new(),
            overhead: Default::default(),
            allocatable: Resources::new(),
        }
    }

    fn pool(types: Vec<InstanceType>, extra: Vec<Requirement>) -> NodePoolInput {
        NodePoolInput { replicas: Some(2), ..test_support::pool("static", types, extra) }
    }

    #[test]
    fn the_cheapest_available_allowed_offering_launches_and_the_others_follow_by_price() {
        let od = CapacityType::OnDemand;
        let types = vec![
            size("Standard_D4s_v5", "D", &[("eastus-1", od, 0.192, true), ("eastus-2", od, 0.192, true)]),
            size("Standard_D2s_v5", "D", &[("eastus-1", od, 0.096, false), ("eastus-2", od, 0.097, true)]),
            size("Standard_E2s_v5", "E", &[("eastus-1", od, 0.05, true)]),
        ];
        let claim = static_claim(
            &pool(types, vec![Requirement::is_in("karpenter.azure.com/sku-family", ["D".to_string()])]),
            &[],
            1,
            60,
        )
        .unwrap();
        assert_eq!(claim.instance_type, "Standard_D2s_v5");
        assert_eq!(claim.zone, "eastus-2", "the cheaper zone is not available");
        assert_eq!(claim.instance_type_options, ["Standard_D2s_v5", "Standard_D4s_v5"]);
        assert!(claim.pods.is_empty() && claim.requests == Resources::new());
        assert_eq!(claim.labels.get(LABEL_NODEPOOL).map(String::as_str), Some("static"));
    }

    #[test]
    fn a_pool_nothing_can_launch_in_says_why() {
        let types = vec![size("Standard_D2s_v5", "D", &[("eastus-1", CapacityType::OnDemand, 0.096, false)])];
        let err = static_claim(&pool(types, vec![]), &[], 1, 60).unwrap_err();
        assert!(err.contains("no instance type with an available offering"), "{err}");
    }
}
