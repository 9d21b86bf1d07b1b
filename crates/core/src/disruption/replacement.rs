//! What a consolidation replacement may launch as. A solve prices each replacement at its cheapest
//! offering, but the NodeClaim's requirements list every zone and capacity type of its options, and
//! the launcher may take any of them. So before a move is judged, each replacement is held to the
//! price the move was judged at (upstream `consolidation.go` `computeConsolidation` and
//! `multinodeconsolidation.go` `filterOutSameInstanceType`):
//! - it is pinned to the capacity type it was priced at: a spot replacement may not fall back to a
//!   dearer on-demand launch when spot is short (upstream pins an on-demand node's [on-demand, spot]
//!   replacement, and every spot-to-spot replacement, to spot);
//! - its options keep only the types whose worst launch price under those requirements is below the
//!   move's ceiling (upstream `RemoveInstanceTypeOptionsByPriceAndMinValues` with `WorstLaunchPrice`);
//!   where the chosen type itself could launch dearer in some zone, the claim keeps the zones where
//!   it does not;
//! - when several nodes become one, the replacement may not be a type one of them already is, unless
//!   it is cheaper than that node: the node holds what the replacement would, so the move is deleting
//!   the others with more pods moved, and that deletion is judged instead. Several nodes becoming
//!   several are not held to this: a replacement of a candidate's type then holds other pods than
//!   the candidate does;
//! - the NodePool's minValues must still hold over the options left, whatever the MinValuesPolicy
//!   (upstream does not consolidate by relaxing minValues);
//! - spot nodes are replaced by spot only, unless their pool or pods keep the replacement off spot
//!   (a NodePool that allows on-demand only, a spread over the capacity type): then it is an
//!   ordinary replacement, and it needs no SpotToSpotConsolidation gate. The solve sees every
//!   offering, so the zones and capacity types only on-demand reaches stay domains of a topology
//!   spread, as upstream simulates with every offering and restricts the replacement afterwards; a
//!   replacement the solve could only put on demand because no spot offering reaches its zone
//!   makes the move impossible.

use std::collections::BTreeMap;

use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_ZONE};
use crate::model::requirements::{MinValuesError, Requirement, Requirements};
use crate::model::selection::{allowed_offerings, offering_labels};
use crate::model::{CapacityType, InstanceType};
use crate::scheduling::NewNodeClaim;

use super::simulate::{Outcome, Replace};
use super::snapshot::Snapshot;

/// The replacement of a move of spot nodes that breaks its spot rule, with why (upstream
/// `computeConsolidation`, which reads a replacement's capacity-type requirement: with spot in it the
/// move is spot-to-spot, without it an ordinary replacement):
/// - under [`Replace::SpotOnly`], a replacement the pool and pods would let run on spot but that
///   the solve put on demand (spot nodes are replaced by spot);
/// - under [`Replace::OffSpot`], any replacement they would let run on spot (spot-to-spot
///   consolidation is off).
///
/// A replacement they keep off spot ([`kept_off_spot`]) breaks neither.
pub fn spot_rule_broken(
    snapshot: &Snapshot,
    replace: Replace,
    replacements: &[NewNodeClaim],
) -> Option<String> {
    let broken = |c: &&NewNodeClaim| match replace {
        Replace::SpotOnly => c.capacity_type != CapacityType::Spot && !kept_off_spot(snapshot, c),
        Replace::OffSpot => !kept_off_spot(snapshot, c),
        Replace::Any | Replace::Never => false,
    };
    replacements.iter().find(broken).map(|c| {
        let at = format!(
            "{} pod(s) on {} {} in {}",
            c.pods.len(),
            c.capacity_type.as_str(),
            c.instance_type,
            c.zone
        );
        if replace == Replace::OffSpot {
            format!("spot-to-spot consolidation is off, and the solve puts {at}, which could run on spot")
        } else {
            format!("spot nodes are replaced by spot only, and the solve puts {at}")
        }
    })
}

/// Whether `claim`'s NodePool or pods keep it off spot, as upstream reads a replacement's
/// capacity-type requirement before any offering narrows it: the claim's requirements exclude spot
/// while the pool's do not admit it, or while some option has an available spot offering in the
/// claim's zones. A claim that is on demand only because no option offers spot where it must launch
/// (a zone a topology spread chose that only on-demand reaches) is not kept off spot: upstream pins
/// it to spot and finds nothing to launch.
pub fn kept_off_spot(snapshot: &Snapshot, claim: &NewNodeClaim) -> bool {
    let spot = Some(CapacityType::Spot.as_str());
    if claim.requirements.get(LABEL_CAPACITY_TYPE).is_none_or(|r| r.admits(spot)) {
        return false;
    }
    let Some(catalog) = Catalog::of(snapshot, claim) else { return false };
    if catalog.pool_requirements.get(LABEL_CAPACITY_TYPE).is_some_and(|r| !r.admits(spot)) {
        return true;
    }
    let zones = claim.requirements.get(LABEL_ZONE);
    claim
        .instance_type_options
        .iter()
        .filter_map(|o| catalog.types.get(o.as_str()))
        .flat_map(|t| &t.offerings)
        .any(|o| {
            o.available
                && o.capacity_type == CapacityType::Spot
                && zones.is_none_or(|z| z.admits(Some(&o.zone)))
        })
}

/// Pins `claim` to the capacity type it was priced at.
pub fn pin_capacity_type(claim: &mut NewNodeClaim) {
    claim.requirements.add(Requirement::is_in(LABEL_CAPACITY_TYPE, [claim.capacity_type.as_str()]));
}

/// The lowest price the nodes of an M→1 move pay for any type among its replacement's options: a
/// replacement of that type must cost less, or the move is a deletion of the others in disguise
/// (upstream `filterOutSameInstanceType`). `None` for a single node, for several replacements, or
/// when no option is a candidate's type.
pub fn same_type_ceiling(snapshot: &Snapshot, nodes: &[usize], replacements: &[NewNodeClaim]) -> Option<f64> {
    let [claim] = replacements else { return None };
    if nodes.len() < 2 {
        return None;
    }
    nodes
        .iter()
        .map(|&i| &snapshot.nodes[i])
        .filter(|n| claim.instance_type_options.contains(&n.instance_type))
        .map(|n| n.price_per_hour)
        .reduce(f64::min)
}

/// When `nodes` would become one replacement of the type one of them already is, at no less than
/// that node costs, the move is that node staying and the others deleted with fewer pods moved: the
/// others, for the caller to solve instead. The node kept is of the replacement's zone and capacity
/// type where one is, the cheapest otherwise. Upstream refuses such a move (`filterOutSameInstanceType`)
/// and leaves the deletion to a later prefix; [`same_type_ceiling`] still refuses the replacement when
/// the deletion fails too.
pub fn deletion_instead(snapshot: &Snapshot, nodes: &[usize], outcome: &Outcome) -> Option<Vec<usize>> {
    let [claim] = outcome.replacements.as_slice() else { return None };
    if nodes.len() < 2 || !outcome.stranded.is_empty() {
        return None;
    }
    let keep = nodes
        .iter()
        .copied()
        .filter(|&i| {
            let n = &snapshot.nodes[i];
            n.instance_type == claim.instance_type && n.price_per_hour <= claim.price_per_hour
        })
        .min_by(|&a, &b| {
            let (a, b) = (&snapshot.nodes[a], &snapshot.nodes[b]);
            let elsewhere = |n: &super::snapshot::ManagedNode| {
                (n.zone != claim.zone, n.capacity_type != claim.capacity_type)
            };
            elsewhere(a).cmp(&elsewhere(b)).then(a.price_per_hour.total_cmp(&b.price_per_hour))
        })?;
    Some(nodes.iter().copied().filter(|&i| i != keep).collect())
}

/// Keeps `claim`'s options whose worst launch price is below `ceiling` ($/h), the chosen type first,
/// and returns how many there are. When the chosen type could launch at `ceiling` or more in some
/// zone, the claim keeps only the zones where it costs less (upstream drops the type instead and
/// launches a dearer one). Fails, saying why, when no zone is left, or when the options left no
/// longer meet the NodePool's minValues.
pub fn keep_options_below(
    snapshot: &Snapshot,
    claim: &mut NewNodeClaim,
    ceiling: f64,
) -> Result<usize, String> {
    let Some(catalog) = Catalog::of(snapshot, claim) else {
        return Ok(claim.instance_type_options.len());
    };
    let below = |name: &str, requirements: &Requirements| {
        catalog.worst_launch_price(name, requirements).is_some_and(|p| p < ceiling)
    };
    if !below(&claim.instance_type, &claim.requirements) {
        let zones = catalog.zones_below(&claim.instance_type, &claim.requirements, ceiling);
        if zones.is_empty() {
            return Err(format!(
                "{} launches at ${ceiling:.4}/h or more, which the move cannot pay",
                claim.instance_type
            ));
        }
        claim.requirements.add(Requirement::is_in(LABEL_ZONE, zones));
    }
    let kept: Vec<String> =
        claim.instance_type_options.iter().filter(|o| below(o, &claim.requirements)).cloned().collect();
    catalog
        .check_min_values(&claim.requirements, &kept)
        .map_err(|e| format!("the options left under ${ceiling:.4}/h do not meet {e}"))?;
    claim.instance_type_options = kept;
    Ok(claim.instance_type_options.len())
}

/// Cuts `claim`'s options to the first `limit`, or to as many as the NodePool's minValues need if
/// that is more (upstream `computeSpotToSpotConsolidation`: the 15 cheapest, or more under minValues).
pub fn truncate_options(snapshot: &Snapshot, claim: &mut NewNodeClaim, limit: usize) {
    let needed = Catalog::of(snapshot, claim).map_or(0, |catalog| {
        (1..=claim.instance_type_options.len())
            .find(|&n| {
                catalog.check_min_values(&claim.requirements, &claim.instance_type_options[..n]).is_ok()
            })
            .unwrap_or(claim.instance_type_options.len())
    });
    claim.instance_type_options.truncate(limit.max(needed));
}

/// The instance types and requirements of a replacement's NodePool.
struct Catalog<'a> {
    pool_requirements: &'a Requirements,
    types: BTreeMap<&'a str, &'a InstanceType>,
}

impl<'a> Catalog<'a> {
    fn of(snapshot: &'a Snapshot, claim: &NewNodeClaim) -> Option<Self> {
        let pool = snapshot.nodepools.iter().find(|p| p.name == claim.nodepool)?.solver.as_ref()?;
        let types = pool.instance_types.iter().map(|t| (t.name.as_str(), t)).collect();
        Some(Catalog { pool_requirements: &pool.requirements, types })
    }

    /// The most `name` can cost launched under `requirements`: its dearest available offering they
    /// allow (upstream `Offerings.WorstLaunchPrice`, with the capacity type already pinned).
    fn worst_launch_price(&self, name: &str, requirements: &Requirements) -> Option<f64> {
        let instance_type = self.types.get(name)?;
        allowed_offerings(instance_type, requirements)
            .filter(|o| o.available)
            .map(|o| o.price)
            .reduce(f64::max)
    }

    /// The zones where `name` launches under `requirements` for less than `ceiling`; none when one of
    /// its offerings is regional (no zone to require).
    fn zones_below(&self, name: &str, requirements: &Requirements, ceiling: f64) -> Vec<String> {
        let Some(instance_type) = self.types.get(name) else { return vec![] };
        let offerings: Vec<_> =
            allowed_offerings(instance_type, requirements).filter(|o| o.available).collect();
        if offerings.iter().any(|o| o.zone.is_empty()) {
            return vec![];
        }
        offerings.iter().filter(|o| o.price < ceiling).map(|o| o.zone.clone()).collect()
    }

    /// Whether `options`, launched under `requirements`, meet the NodePool's minValues.
    fn check_min_values(
        &self,
        requirements: &Requirements,
        options: &[String],
    ) -> Result<(), MinValuesError> {
        if self.pool_requirements.iter().all(|r| r.min_values().is_none()) {
            return Ok(());
        }
        let label_sets: Vec<BTreeMap<String, String>> = options
            .iter()
            .filter_map(|o| self.types.get(o.as_str()))
            .flat_map(|t| {
                allowed_offerings(t, requirements).filter(|o| o.available).map(|o| {
                    let mut labels = t.labels.clone();
                    labels.extend(offering_labels(o).iter().map(|(k, v)| (k.to_string(), v.to_string())));
                    labels
                })
            })
            .collect();
        self.pool_requirements.check_min_values(label_sets.iter())
    }
}
