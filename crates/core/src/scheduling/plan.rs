//! The solver's output: where each pod goes, which NodeClaims to create, which pods cannot be placed
//! and why, and how the plan's price compares with a proven lower bound.

use std::collections::BTreeMap;

use crate::apis::Taint;
use crate::model::requirements::Requirements;
use crate::model::resources::Resources;
use crate::model::CapacityType;
use crate::scheduling::input::PodId;

/// A complete scheduling decision for one batch of pods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Pods placed on nodes that exist or are already in flight, by node name (sorted).
    pub existing: BTreeMap<String, Vec<PodId>>,
    /// Nodes to launch.
    pub nodeclaims: Vec<NewNodeClaim>,
    /// Pods that cannot be placed, with a reason a person can act on.
    pub unschedulable: Vec<Unschedulable>,
    /// Total $/hour of the new NodeClaims at their chosen offerings.
    pub price_per_hour: f64,
    /// No plan that places the same pods can spend less than this ($/hour) on new capacity; see
    /// [`crate::scheduling::bound`] and [`crate::scheduling::colgen`] for why.
    pub lower_bound_per_hour: f64,
}

/// A node to launch.
#[derive(Clone, Debug, PartialEq)]
pub struct NewNodeClaim {
    /// A deterministic placeholder name, `<nodepool>-<n>`; the controller generates the real name.
    pub name: String,
    pub nodepool: String,
    /// The chosen (cheapest) instance type.
    pub instance_type: String,
    /// Instance types that fit the same pods, cheapest first, truncated; the first is `instance_type`.
    pub instance_type_options: Vec<String>,
    pub zone: String,
    pub capacity_type: CapacityType,
    /// $/hour of the chosen offering.
    pub price_per_hour: f64,
    /// What the NodeClaim asks for: pool ∩ pods ∩ topology, plus instance-type, zone and capacity type.
    pub requirements: Requirements,
    /// Labels the node will carry (pool labels, single-valued requirements, type and offering labels).
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Allocatable of the chosen type.
    pub allocatable: Resources,
    /// Requests of the pods plus the DaemonSet overhead.
    pub requests: Resources,
    /// DaemonSet overhead included in `requests`.
    pub daemon_overhead: Resources,
    pub pods: Vec<PodId>,
}

/// A pod the plan leaves pending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    pub pod: PodId,
    pub reason: String,
}

impl Plan {
    /// How far the plan's price is above the lower bound, as a ratio (1.0 = provably optimal).
    pub fn optimality_ratio(&self) -> f64 {
        if self.lower_bound_per_hour <= 0.0 {
            if self.price_per_hour <= 0.0 {
                1.0
            } else {
                f64::INFINITY
            }
        } else {
            self.price_per_hour / self.lower_bound_per_hour
        }
    }

    /// Number of pods placed anywhere.
    pub fn placed_pods(&self) -> usize {
        self.existing.values().map(Vec::len).sum::<usize>()
            + self.nodeclaims.iter().map(|n| n.pods.len()).sum::<usize>()
    }
}
