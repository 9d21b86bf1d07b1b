//! Node templates: every (NodePool, instance type) pair a new node could be, with the capacity left
//! after the pool's DaemonSets, the offerings the pool allows, and the pool's priority tier; and the
//! test of whether a class of pods can use a template (taints, requirements, offerings, fit).

use crate::model::requirements::Requirements;
use crate::model::resources::{Resources, NODES};
use crate::model::selection::{offering_labels, type_allowed};
use crate::model::CapacityType;
use crate::scheduling::input::{tolerates_all, NodePoolInput, Pod, SolveInput, Toleration};
use crate::scheduling::shapes::Dims;

/// One offering a template may launch as.
#[derive(Clone, Debug)]
pub struct TemplateOffering {
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price: f64,
}

/// A possible new node: a pool and one of its instance types.
#[derive(Clone, Debug)]
pub struct Template {
    pub pool: usize,
    pub instance_type: usize,
    /// Allocatable minus DaemonSet overhead, in solver dimensions.
    pub capacity: Vec<i64>,
    pub daemon_overhead: Resources,
    /// Available offerings the pool's requirements allow, cheapest first (at most 32).
    pub offerings: Vec<TemplateOffering>,
    /// 0 for the heaviest pools; pods use the lowest tier that can take them.
    pub tier: usize,
    /// The instance type's capacity in each resource its pool limits (but the node count), in the
    /// order of the pool's limits: whether one size takes more of a limit than another is then a
    /// comparison of numbers (empty for a pool without limits).
    pub limited: Vec<i64>,
}

impl Template {
    /// The largest fraction of this node's capacity that `demand` takes in any one resource: how much
    /// of the node a pod (or a pattern) uses up, for density orderings.
    pub fn dominant_share(&self, demand: &[i64]) -> f64 {
        dominant_share(demand, &self.capacity)
    }

    /// The cheapest offering within `mask`, ties going to spot (as upstream's allocation strategy).
    pub fn cheapest(&self, mask: u32) -> Option<(usize, &TemplateOffering)> {
        self.offerings.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).min_by(|(_, a), (_, b)| {
            a.price
                .total_cmp(&b.price)
                .then_with(|| b.capacity_type.cmp(&a.capacity_type))
                .then_with(|| a.zone.cmp(&b.zone))
        })
    }

    /// The price of [`Template::cheapest`]: the offerings are sorted by price, so it is the price of
    /// the first offering in the mask.
    pub fn price(&self, mask: u32) -> f64 {
        let within = mask & self.full_mask();
        if within == 0 {
            return f64::INFINITY;
        }
        self.offerings[within.trailing_zeros() as usize].price
    }

    pub fn full_mask(&self) -> u32 {
        if self.offerings.len() >= 32 {
            u32::MAX
        } else {
            (1u32 << self.offerings.len()) - 1
        }
    }
}

/// The distinct (zone, capacity type) pairs that the templates' offerings sell, and each offering's
/// pair: the domains a class can reach are then a union of small integers over its masks rather
/// than of strings (a batch asks this of every shape, over every template).
#[derive(Clone, Debug, Default)]
pub struct OfferingDomains {
    /// Sorted by zone, then capacity type.
    pairs: Vec<(String, String)>,
    /// `of_offering[t][i]`: the pair of offering `i` of template `t`.
    of_offering: Vec<Vec<usize>>,
}

impl OfferingDomains {
    pub fn new(templates: &[Template]) -> Self {
        let key = |o: &TemplateOffering| (o.zone.clone(), o.capacity_type.as_str().to_string());
        let mut pairs: Vec<(String, String)> =
            templates.iter().flat_map(|t| t.offerings.iter().map(key)).collect();
        pairs.sort();
        pairs.dedup();
        let of_offering = templates
            .iter()
            .map(|t| {
                t.offerings
                    .iter()
                    .map(|o| pairs.binary_search(&key(o)).expect("every pair is listed"))
                    .collect()
            })
            .collect();
        OfferingDomains { pairs, of_offering }
    }

    /// The pairs some offering within `masks` (one per template) sells, in order.
    pub fn reached(&self, masks: &[u32]) -> impl Iterator<Item = &(String, String)> {
        let mut seen = vec![false; self.pairs.len()];
        for (of_offering, &mask) in self.of_offering.iter().zip(masks) {
            let mut bits = mask;
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                if let Some(&pair) = of_offering.get(i) {
                    seen[pair] = true;
                }
                bits &= bits - 1;
            }
        }
        self.pairs.iter().zip(seen).filter(|(_, seen)| *seen).map(|(pair, _)| pair)
    }
}

/// Pool order: weight descending, ties to the name later in the alphabet (upstream `OrderByWeight`).
pub fn pool_order(pools: &[NodePoolInput]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..pools.len()).collect();
    order.sort_by(|&a, &b| {
        pools[b].weight.cmp(&pools[a].weight).then_with(|| pools[b].name.cmp(&pools[a].name))
    });
    order
}

/// Whether a DaemonSet pod would run on a node of `pool` with these instance-type labels.
pub(crate) fn daemon_runs_on(
    daemon: &Pod,
    pool: &NodePoolInput,
    type_labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    if !tolerates_all(&daemon.tolerations, &pool.taints) {
        return false;
    }
    let terms: Vec<Requirements> = if daemon.required_terms.is_empty() {
        vec![Requirements::new()]
    } else {
        daemon.required_terms.clone()
    };
    terms
        .iter()
        .any(|term| pool.requirements.compatible(term, true).is_ok() && type_admits(type_labels, term))
}

/// Whether the well-known labels an instance type defines satisfy `requirements`.
fn type_admits(
    type_labels: &std::collections::BTreeMap<String, String>,
    requirements: &Requirements,
) -> bool {
    type_keys(requirements).all(|r| r.admits(type_labels.get(r.key()).map(String::as_str)))
}

/// The requirements an instance type's own labels decide: well-known keys other than the offering
/// keys (decided per offering) and the keys the pool decides ([`crate::model::labels::is_pool_decided`]).
fn type_keys(requirements: &Requirements) -> impl Iterator<Item = &crate::model::requirements::Requirement> {
    requirements.iter().filter(|r| {
        crate::model::labels::is_well_known(r.key())
            && !is_offering_key(r.key())
            && !crate::model::labels::is_pool_decided(r.key())
    })
}

fn is_offering_key(key: &str) -> bool {
    use crate::model::labels::*;
    [LABEL_ZONE, LABEL_CAPACITY_TYPE, LABEL_AKS_SCALESET_PRIORITY, LABEL_AKS_PRIORITY].contains(&key)
}

/// Builds every template of every pool.
pub fn build(input: &SolveInput, dims: &Dims) -> Vec<Template> {
    let order = pool_order(&input.nodepools);
    let mut tiers = vec![0usize; input.nodepools.len()];
    let mut tier = 0;
    for (rank, &p) in order.iter().enumerate() {
        if rank > 0 && input.nodepools[order[rank - 1]].weight != input.nodepools[p].weight {
            tier += 1;
        }
        tiers[p] = tier;
    }
    let mut templates = vec![];
    for &p in &order {
        let pool = &input.nodepools[p];
        for (t, it) in pool.instance_types.iter().enumerate() {
            if !type_allowed(it, &pool.requirements) {
                continue;
            }
            let mut offerings: Vec<TemplateOffering> = it
                .offerings
                .iter()
                .filter(|o| o.available)
                .filter(|o| {
                    offering_labels(o)
                        .iter()
                        .all(|(k, v)| pool.requirements.get(k).is_none_or(|r| r.admits(Some(v))))
                })
                .map(|o| TemplateOffering {
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type,
                    price: o.price,
                })
                .collect();
            if offerings.is_empty() {
                continue;
            }
            offerings.sort_by(|a, b| a.price.total_cmp(&b.price).then_with(|| a.zone.cmp(&b.zone)));
            offerings.truncate(32);
            let mut overhead = Resources::new();
            for daemon in &input.daemonsets {
                if daemon_runs_on(daemon, pool, &it.labels) {
                    overhead.add_assign(&daemon.requests);
                }
            }
            let allocatable = dims.vector(&it.allocatable);
            let used = dims.vector(&overhead);
            let capacity: Vec<i64> = allocatable.iter().zip(&used).map(|(a, u)| a - u).collect();
            if capacity.iter().any(|c| *c < 0) {
                continue; // the DaemonSets alone do not fit
            }
            let limited = pool.remaining.as_ref().map_or_else(Vec::new, |limits| {
                limits
                    .iter()
                    .filter(|(name, _)| *name != NODES)
                    .map(|(name, _)| it.capacity.get(name))
                    .collect()
            });
            templates.push(Template {
                pool: p,
                instance_type: t,
                capacity,
                daemon_overhead: overhead,
                offerings,
                tier: tiers[p],
                limited,
            });
        }
    }
    templates
}

/// Why a class of pods cannot use a pool at all (before looking at instance types).
pub fn pool_rejects(
    pool: &NodePoolInput,
    requirements: &Requirements,
    tolerations: &[Toleration],
) -> Option<String> {
    if let Some(taint) = pool.taints.iter().find(|t| {
        t.effect != crate::apis::TaintEffect::PreferNoSchedule
            && !tolerations.iter().any(|tol| tol.tolerates(t))
    }) {
        let value = taint.value.as_deref().map(|v| format!("={v}")).unwrap_or_default();
        return Some(format!("taint {}{value}:{:?} is not tolerated", taint.key, taint.effect));
    }
    pool.requirements.compatible(requirements, true).err().map(|e| e.to_string())
}

/// The offerings of `template` a class with `requirements` may use, as a bit mask (0 = none).
pub fn offering_mask(template: &Template, requirements: &Requirements) -> u32 {
    use crate::model::labels::*;
    let zone = requirements.get(LABEL_ZONE);
    let capacity_type = requirements.get(LABEL_CAPACITY_TYPE);
    let priorities = [requirements.get(LABEL_AKS_SCALESET_PRIORITY), requirements.get(LABEL_AKS_PRIORITY)];
    if zone.is_none() && capacity_type.is_none() && priorities.iter().all(Option::is_none) {
        return template.full_mask();
    }
    let mut mask = 0;
    for (i, o) in template.offerings.iter().enumerate() {
        let priority = match o.capacity_type {
            CapacityType::OnDemand => "regular",
            CapacityType::Spot => "spot",
        };
        let ok = zone.is_none_or(|r| r.admits(Some(&o.zone)))
            && capacity_type.is_none_or(|r| r.admits(Some(o.capacity_type.as_str())))
            && priorities.iter().all(|p| p.is_none_or(|r| r.admits(Some(priority))));
        if ok {
            mask |= 1 << i;
        }
    }
    mask
}

/// The offering mask of every template for a class with `requirements` and `tolerations`, before
/// size: nonzero where the template's pool accepts the class, its type's labels meet the
/// requirements and some offering is allowed. A class can use a template when its mask is nonzero
/// and one pod fits ([`fits`]); that last test is the caller's, so many shapes of different sizes
/// share one computation.
pub fn offering_masks(
    input: &SolveInput,
    templates: &[Template],
    requirements: &Requirements,
    tolerations: &[Toleration],
) -> Vec<u32> {
    let pool_ok: Vec<bool> =
        input.nodepools.iter().map(|p| pool_rejects(p, requirements, tolerations).is_none()).collect();
    // Only well-known keys decided by the instance type need a per-type look; often there are none.
    let type_keys: Vec<_> = type_keys(requirements).collect();
    templates
        .iter()
        .map(|t| {
            if !pool_ok[t.pool] {
                return 0;
            }
            let it = &input.nodepools[t.pool].instance_types[t.instance_type];
            if !type_keys.iter().all(|r| r.admits(it.labels.get(r.key()).map(String::as_str))) {
                return 0;
            }
            offering_mask(t, requirements)
        })
        .collect()
}

/// The largest `demand[r] / capacity[r]` over the resources the capacity has.
pub fn dominant_share(demand: &[i64], capacity: &[i64]) -> f64 {
    demand
        .iter()
        .zip(capacity)
        .filter(|(_, cap)| **cap > 0)
        .map(|(d, cap)| *d as f64 / *cap as f64)
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(offerings: &[(&str, CapacityType)]) -> Template {
        Template {
            pool: 0,
            instance_type: 0,
            capacity: vec![1000],
            daemon_overhead: Resources::new(),
            offerings: offerings
                .iter()
                .map(|(zone, capacity_type)| TemplateOffering {
                    zone: zone.to_string(),
                    capacity_type: *capacity_type,
                    price: 1.0,
                })
                .collect(),
            tier: 0,
            limited: vec![],
        }
    }

    #[test]
    fn the_domains_a_class_reaches_are_the_pairs_its_masks_allow() {
        use CapacityType::{OnDemand, Spot};
        let templates = [
            template(&[("z-2", Spot), ("z-1", OnDemand), ("z-2", OnDemand)]),
            template(&[("z-3", OnDemand), ("z-1", Spot)]),
        ];
        let domains = OfferingDomains::new(&templates);
        let pair = |z: &str, c: &str| (z.to_string(), c.to_string());
        let reached = |masks: &[u32]| domains.reached(masks).cloned().collect::<Vec<_>>();
        assert_eq!(reached(&[0b001, 0b00]), [pair("z-2", "spot")]);
        // Sorted by zone, then capacity type, however the offerings are ordered.
        assert_eq!(
            reached(&[0b110, 0b11]),
            [
                pair("z-1", "on-demand"),
                pair("z-1", "spot"),
                pair("z-2", "on-demand"),
                pair("z-3", "on-demand")
            ]
        );
        assert!(reached(&[0, 0]).is_empty());
        // Bits past a template's offerings (a full 32-bit mask) are ignored.
        assert_eq!(reached(&[0, u32::MAX]).len(), 2);
    }
}
