//! A solve's placement before its NodeClaims are written: where every pod goes and what each new
//! node costs. Writing a NodeClaim (its instance-type options, requirements and labels) is a large
//! share of a small solve's time, and a disruption pass solves many moves it then refuses on where
//! the pods went and what the new nodes cost alone; such a caller reads the [`Sketch`] first and
//! writes the [`Plan`] only for a move it may take.

use crate::scheduling::claims::{self, ZoneUse};
use crate::scheduling::input::PodId;
use crate::scheduling::plan::{Plan, Unschedulable};
use crate::scheduling::working::Solver;

/// Where a solve put every pod, with the NodeClaims not yet written.
pub struct Placement<'a> {
    solver: Solver<'a>,
    unschedulable: Vec<Unschedulable>,
}

/// What the [`Plan`] of a [`Placement`] will say of its pods and new nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Sketch<'p> {
    /// The plan's `unschedulable`: the pods left pending, by pod, with their reasons.
    pub unschedulable: &'p [Unschedulable],
    /// The plan's `nodeclaims`, in order, as the pods each holds and its `price_per_hour`.
    pub new_nodes: Vec<SketchedNode>,
}

/// One NodeClaim of a [`Sketch`].
#[derive(Clone, Debug, PartialEq)]
pub struct SketchedNode {
    pub pods: Vec<PodId>,
    pub price_per_hour: f64,
}

impl<'a> Placement<'a> {
    pub(crate) fn new(solver: Solver<'a>, unschedulable: Vec<Unschedulable>) -> Self {
        Placement { solver, unschedulable }
    }

    /// What the plan will say, when that is known before its NodeClaims are written: `None` when
    /// writing one may fail (a minValues its options cannot meet, under the Strict policy) and leave
    /// its pods pending instead.
    pub fn sketch(&self) -> Option<Sketch<'_>> {
        let solver = &self.solver;
        if claims::claims_may_fail(solver) {
            return None;
        }
        let mut zone_use = ZoneUse::new();
        let mut new_nodes = vec![];
        for (slot, pods) in claims::slots_with_pods(solver) {
            if slot.existing().is_some() || slot.template().is_none() || pods.is_empty() {
                continue;
            }
            let offering = claims::priced_offering(solver, slot, &mut zone_use);
            new_nodes.push(SketchedNode {
                pods: pods.iter().map(|&p| solver.input().pods[p].id()).collect(),
                price_per_hour: offering.price,
            });
        }
        Some(Sketch { unschedulable: &self.unschedulable, new_nodes })
    }

    /// The plan, without a lower bound (`lower_bound_per_hour` 0).
    pub fn into_plan(self) -> Plan {
        claims::build_plan(&self.solver, self.unschedulable, 0.0)
    }
}
