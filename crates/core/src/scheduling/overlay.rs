//! NodeOverlays applied to the instance types of every NodePool: the price of the matching offerings
//! and the extended resources of the matching types, as every decision reads them. Pure: pools,
//! catalogs and overlays in, adjusted catalogs and the overlays left out (with why) out.
//!
//! Upstream core's semantics (`pkg/controllers/nodeoverlay/controller.go` and `store.go`,
//! `pkg/cloudprovider/types.go` `AdjustedPrice`):
//! - Overlays are taken by weight, highest first (unset counts as 0); at equal weight the name later in
//!   the alphabet comes first (`NodeOverlayList.OrderByWeight`).
//! - An overlay matches an offering when its requirements admit the labels of the type, of the
//!   offering (zone, capacity type), `karpenter.sh/nodepool` and the pool's template labels. A type
//!   is matched when one of its offerings is.
//! - The first overlay to price an offering sets its price; later (lower) ones leave it alone.
//!   `price` replaces the price; `priceAdjustment` adds an amount or a percentage, never going below 0.
//! - Capacity merges per resource: the first overlay to name a resource for a type sets it.
//! - An overlay that prices an offering, or names a resource of a type, that an overlay of the same
//!   weight already did conflicts: it is left out everywhere, for every pool, whole.
//! - An overlay whose requirements or capacity cannot be read, or that asks for a capacity type by
//!   values none of which is one, is left out too (upstream's runtime validation).

use std::collections::{BTreeMap, BTreeSet};

use crate::apis::nodeoverlay::RESTRICTED_CAPACITY;
use crate::apis::NodeOverlay;
use crate::model::labels::{well_known_values, LABEL_NODEPOOL};
use crate::model::requirements::{Operator, Requirement, Requirements};
use crate::model::resources::Quantity;
use crate::model::selection::offering_labels;
use crate::model::InstanceType;

/// One pool's catalog, as overlays see it.
#[derive(Clone, Copy, Debug)]
pub struct PoolTypes<'a> {
    pub name: &'a str,
    /// The pool's template labels.
    pub labels: &'a BTreeMap<String, String>,
    pub types: &'a [InstanceType],
}

/// Why an overlay was left out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// Upstream's condition reason `RuntimeValidation`.
    #[error("{0}")]
    Invalid(String),
    /// Upstream's condition reason `Conflict`.
    #[error("conflict with another overlay")]
    Conflict,
}

impl Rejection {
    /// The condition reason upstream writes.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::Invalid(_) => "RuntimeValidation",
            Rejection::Conflict => "Conflict",
        }
    }
}

/// The catalogs with the overlays applied.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overlaid {
    /// Each pool's types, in the order of the pools given, re-sorted by price.
    pub types: Vec<Vec<InstanceType>>,
    /// Each pool's types with at least one offering priced by an overlay.
    pub price_overlaid: Vec<BTreeSet<String>>,
    /// Each pool's types whose capacity an overlay extended.
    pub capacity_overlaid: Vec<BTreeSet<String>>,
    /// Overlays left out, by name.
    pub rejected: BTreeMap<String, Rejection>,
}

/// A change to an offering's price.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PriceChange {
    /// `price`: the price itself.
    Set(f64),
    /// `priceAdjustment: +0.5` / `-0.1`.
    Add(f64),
    /// `priceAdjustment: -30%` / `+10%`.
    Percent(f64),
}

impl PriceChange {
    /// Reads `price` (unsigned) or `priceAdjustment` (signed, optionally a percentage).
    pub fn parse(price: Option<&str>, adjustment: Option<&str>) -> Result<Option<PriceChange>, String> {
        let number = |s: &str| s.parse::<f64>().ok().filter(|n| n.is_finite());
        match (price, adjustment) {
            (Some(_), Some(_)) => Err("cannot set both 'price' and 'priceAdjustment'".into()),
            (Some(p), None) => number(p)
                .filter(|n| *n >= 0.0)
                .map(|n| Some(PriceChange::Set(n)))
                .ok_or(format!("invalid price {p:?}")),
            (None, Some(a)) => {
                let signed = a.starts_with('+') || a.starts_with('-');
                let change = match a.strip_suffix('%') {
                    Some(percent) => number(percent).map(PriceChange::Percent),
                    None => number(a).map(PriceChange::Add),
                };
                change.filter(|_| signed).map(Some).ok_or(format!("invalid priceAdjustment {a:?}"))
            }
            (None, None) => Ok(None),
        }
    }

    /// The new price of an offering priced `price`; adjustments never go below 0.
    pub fn apply(self, price: f64) -> f64 {
        match self {
            PriceChange::Set(p) => p,
            PriceChange::Add(delta) => (price + delta).max(0.0),
            PriceChange::Percent(pct) => (price * (1.0 + pct / 100.0)).max(0.0),
        }
    }
}

/// An overlay read into the model's terms.
#[derive(Clone, Debug)]
struct Parsed {
    name: String,
    weight: i32,
    requirements: Requirements,
    price: Option<PriceChange>,
    capacity: BTreeMap<String, i64>,
}

fn parse(overlay: &NodeOverlay) -> Result<Parsed, String> {
    let mut requirements = Requirements::new();
    for r in &overlay.spec.requirements {
        let requirement = Requirement::from_operator(&r.key, r.operator, &r.values, None)
            .map_err(|e| format!("invalid value: {e} in requirements, restricted"))?;
        // An In on a key with known values must name one of them (upstream core
        // pkg/apis/v1/nodeclaim_validation.go `validateWellKnownValues`).
        let known = well_known_values(requirement.key()).filter(|_| r.operator == Operator::In);
        if let Some(known) = known.filter(|known| !r.values.iter().any(|v| known.contains(&v.as_str()))) {
            return Err(format!(
                "invalid value: no valid values found in {:?} for {}, expected one of: {known:?} in requirements, restricted",
                r.values,
                requirement.key()
            ));
        }
        requirements.add(requirement);
    }
    let price = PriceChange::parse(overlay.spec.price.as_deref(), overlay.spec.price_adjustment.as_deref())?;
    let mut capacity = BTreeMap::new();
    for (resource, quantity) in overlay.spec.capacity.iter().flatten() {
        if RESTRICTED_CAPACITY.contains(&resource.as_str()) {
            return Err(format!("invalid capacity: {resource} in resource, restricted"));
        }
        // Whole units, rounded down: upstream keeps `500m` as half a unit, which no pod's request (a
        // whole number of an extended resource) fits in.
        let amount = Quantity::parse(quantity.as_str())
            .map_err(|e| format!("invalid capacity: {resource}: {e}"))?
            .whole_units()
            .ok_or_else(|| format!("invalid capacity: {resource}: {} is out of range", quantity.as_str()))?;
        capacity.insert(resource.clone(), amount);
    }
    Ok(Parsed { name: overlay.name().to_string(), weight: overlay.weight(), requirements, price, capacity })
}

/// The price an offering ended with and the lowest weight of the overlays that matched it (upstream
/// `priceUpdate`).
#[derive(Clone, Copy, Debug)]
struct PriceUpdate {
    change: PriceChange,
    lowest_weight: i32,
}

/// The capacity a type ended with (upstream `capacityUpdate`).
#[derive(Clone, Debug)]
struct CapacityUpdate {
    merged: BTreeMap<String, i64>,
    lowest_weight: i32,
    lowest_weight_resources: BTreeSet<String>,
}

#[derive(Clone, Debug, Default)]
struct TypeUpdate {
    /// By offering index.
    prices: BTreeMap<usize, PriceUpdate>,
    capacity: Option<CapacityUpdate>,
}

/// The offerings (by index) of each type (by index) an overlay matches in one pool. Each label is
/// looked up where it lives (offering, type, pool), so no label set is copied per offering.
fn matches(pool: &PoolTypes<'_>, overlay: &Parsed) -> Vec<(usize, Vec<usize>)> {
    pool.types
        .iter()
        .enumerate()
        .filter_map(|(t, it)| {
            let offerings: Vec<usize> = it
                .offerings
                .iter()
                .enumerate()
                .filter(|(_, o)| {
                    let own = offering_labels(o);
                    overlay.requirements.iter().all(|r| {
                        let key = r.key();
                        let value = own
                            .iter()
                            .find(|(k, _)| *k == key)
                            .map(|(_, v)| *v)
                            .or_else(|| it.labels.get(key).map(String::as_str))
                            .or_else(|| (key == LABEL_NODEPOOL).then_some(pool.name))
                            .or_else(|| pool.labels.get(key).map(String::as_str));
                        r.admits(value)
                    })
                })
                .map(|(i, _)| i)
                .collect();
            (!offerings.is_empty()).then_some((t, offerings))
        })
        .collect()
}

fn conflicts(
    updates: &BTreeMap<usize, TypeUpdate>,
    matched: &[(usize, Vec<usize>)],
    overlay: &Parsed,
) -> bool {
    matched.iter().any(|(t, offerings)| {
        let Some(update) = updates.get(t) else { return false };
        let price = overlay.price.is_some()
            && offerings
                .iter()
                .any(|o| update.prices.get(o).is_some_and(|p| p.lowest_weight == overlay.weight));
        let capacity = !overlay.capacity.is_empty()
            && update.capacity.as_ref().is_some_and(|c| {
                c.lowest_weight == overlay.weight
                    && overlay.capacity.keys().any(|r| c.lowest_weight_resources.contains(r))
            });
        price || capacity
    })
}

fn record(updates: &mut BTreeMap<usize, TypeUpdate>, matched: Vec<(usize, Vec<usize>)>, overlay: &Parsed) {
    for (t, offerings) in matched {
        let update = updates.entry(t).or_default();
        if let Some(change) = overlay.price {
            for o in offerings {
                update
                    .prices
                    .entry(o)
                    .and_modify(|p| p.lowest_weight = overlay.weight)
                    .or_insert(PriceUpdate { change, lowest_weight: overlay.weight });
            }
        }
        if !overlay.capacity.is_empty() {
            let resources: BTreeSet<String> = overlay.capacity.keys().cloned().collect();
            match &mut update.capacity {
                None => {
                    update.capacity = Some(CapacityUpdate {
                        merged: overlay.capacity.clone(),
                        lowest_weight: overlay.weight,
                        lowest_weight_resources: resources,
                    })
                }
                Some(c) => {
                    for (r, amount) in &overlay.capacity {
                        c.merged.entry(r.clone()).or_insert(*amount);
                    }
                    c.lowest_weight = overlay.weight;
                    c.lowest_weight_resources = resources;
                }
            }
        }
    }
}

/// Applies `overlays` to every pool's types; see the module documentation for the rules.
pub fn apply(pools: &[PoolTypes<'_>], overlays: &[NodeOverlay]) -> Overlaid {
    let mut rejected = BTreeMap::new();
    let mut parsed: Vec<Parsed> = vec![];
    for overlay in overlays {
        match parse(overlay) {
            Ok(p) => parsed.push(p),
            Err(e) => drop(rejected.insert(overlay.name().to_string(), Rejection::Invalid(e))),
        }
    }
    parsed.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name)));

    let mut updates: Vec<BTreeMap<usize, TypeUpdate>> = vec![BTreeMap::new(); pools.len()];
    for overlay in &parsed {
        let matched: Vec<Vec<(usize, Vec<usize>)>> = pools.iter().map(|p| matches(p, overlay)).collect();
        if updates.iter().zip(&matched).any(|(u, m)| conflicts(u, m, overlay)) {
            rejected.insert(overlay.name.clone(), Rejection::Conflict);
            continue;
        }
        for (u, m) in updates.iter_mut().zip(matched) {
            record(u, m, overlay);
        }
    }

    let mut out = Overlaid { rejected, ..Overlaid::default() };
    for (pool, updates) in pools.iter().zip(updates) {
        let (mut overlaid, mut extended) = (BTreeSet::new(), BTreeSet::new());
        let mut types = pool.types.to_vec();
        for (t, update) in updates {
            let it = &mut types[t];
            if !update.prices.is_empty() {
                overlaid.insert(it.name.clone());
            }
            for (o, price) in &update.prices {
                let offering = &mut it.offerings[*o];
                offering.price = price.change.apply(offering.price);
            }
            it.offerings.sort_by(|a, b| {
                a.price
                    .total_cmp(&b.price)
                    .then_with(|| a.zone.cmp(&b.zone))
                    .then_with(|| a.capacity_type.cmp(&b.capacity_type))
            });
            if update.capacity.is_some() {
                extended.insert(it.name.clone());
            }
            // Extended resources have no node overhead: capacity and allocatable grow alike.
            for (resource, amount) in update.capacity.map(|c| c.merged).unwrap_or_default() {
                it.capacity.set(&resource, amount);
                it.allocatable.set(&resource, amount);
            }
        }
        types.sort_by(|a, b| a.sort_price().total_cmp(&b.sort_price()).then_with(|| a.name.cmp(&b.name)));
        out.types.push(types);
        out.price_overlaid.push(overlaid);
        out.capacity_overlaid.push(extended);
    }
    out
}

#[cfg(test)]
#[path = "overlay_tests.rs"]
mod tests;
