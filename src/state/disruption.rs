//! The index as disruption input: a [`disruption::Snapshot`] built from the same solver input the
//! provisioner uses ([`Cluster::snapshot`]), so both loops see one cluster.
//!
//! - managed nodes: Nodes with a NodeClaim and a NodePool (label, else the claim's), with the offering's
//!   price from the pool's catalog, the claim's lifecycle times and `Drifted` condition, and their pods;
//!   NodeClaims still in flight join as in-flight nodes (never candidates, but they count for budgets
//!   and as destinations);
//! - nodes being deleted, nodes whose claim is being deleted, and nodes of a command in flight
//!   (`disrupting`) are `marked_for_deletion`: they use up budgets and their pods need a new place;
//! - unmanaged nodes are destinations only; pending pods keep their room; PDBs carry
//!   `status.disruptionsAllowed` as kube-controller-manager computed it.
//!
//! A pod's `karpenter.sh/do-not-disrupt` that is neither `"true"` nor a duration protects nothing, as
//! upstream reads it (`pkg/utils/pod` `IsDoNotDisruptActive`) and as the drain does; `simulate` reports
//! such a value as an error instead.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::apis::{AKSNodeClass, NodePool, Taint};
use crate::disruption::static_pools::Counts;
use crate::disruption::{
    offering_price, DoNotDisrupt, ManagedNode, NodePod, Pdb, PodKind, PolicyError, PoolPolicy, Snapshot,
    UnmanagedNode,
};
use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE, TAINT_DISRUPTED};
use crate::model::{CapacityType, InstanceType, LabelLookup};
use crate::scheduling::{ExistingNode, SolveOptions};

use super::records::{NodeClaimRecord, NodeRecord, PodRecord};
use super::Cluster;

impl Cluster {
    /// Disruption input from the current index. `catalog` is the provisioner's; `disrupting` names the
    /// nodes of commands this controller is executing (marked for deletion even before their taint is
    /// seen); `nominated` names the Nodes and NodeClaims the provisioner just planned pods onto. Pools whose disruption settings cannot be read are left out (their nodes are then
    /// blocked as of an unknown pool) and returned beside the snapshot.
    pub fn disruption_snapshot(
        &self,
        catalog: &impl Fn(&NodePool, Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>>,
        options: SolveOptions,
        disrupting: &BTreeSet<String>,
        nominated: &BTreeSet<String>,
    ) -> (Snapshot, Vec<PolicyError>) {
        let marks = Marks { disrupting, nominated };
        // Static pools are not in the solver input, but their nodes are priced and replaced from them.
        let solver_pools = self.solver_pools(catalog);
        let mut errors = vec![];
        let mut nodepools = vec![];
        for pool in self.nodepools() {
            let name = pool.metadata.name.as_deref().unwrap_or_default();
            let solver = solver_pools.iter().find(|p| p.name == name).cloned();
            match PoolPolicy::from_nodepool(pool, solver) {
                Ok(policy) => nodepools.push(policy),
                Err(e) => errors.push(e),
            }
        }
        let input = self.snapshot_with_pools(solver_pools, options);
        let mut snapshot = Snapshot {
            pending: input.pods,
            daemonsets: input.daemonsets,
            solve_options: input.options,
            nodepools,
            pdbs: self
                .pdbs()
                .map(|r| Pdb {
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    selector: r.selector.clone(),
                    disruptions_allowed: r.disruptions_allowed,
                })
                .collect(),
            ..Snapshot::default()
        };
        let active: BTreeSet<&str> = input.nodes.iter().map(|n| n.name.as_str()).collect();
        for existing in &input.nodes {
            if existing.in_flight {
                if let Some(claim) = self.nodeclaim(&existing.name) {
                    let managed = self.managed(existing.clone(), None, claim, &snapshot.nodepools, &marks);
                    snapshot.nodes.extend(managed);
                }
                continue;
            }
            let Some(node) = self.node(&existing.name) else { continue };
            match self.claim_of(node) {
                Some(claim) => {
                    let managed =
                        self.managed(existing.clone(), Some(node), claim, &snapshot.nodepools, &marks);
                    snapshot.nodes.extend(managed);
                }
                None => snapshot.unmanaged.push(UnmanagedNode {
                    node: existing.clone(),
                    pods: self.live_pods(&existing.name).map(|p| p.pod.clone()).collect(),
                }),
            }
        }
        // Nodes the solver input leaves out because they (or their claims) are being deleted: they
        // still use up budgets, and their pods still need a place.
        for (node, claim) in self.nodes() {
            let (Some(claim), false) = (claim, active.contains(node.name())) else { continue };
            let managed = self.managed(node.node.clone(), Some(node), claim, &snapshot.nodepools, &marks);
            snapshot.nodes.extend(managed);
        }
        (snapshot, errors)
    }

    /// The NodeClaims of each NodePool as [`Cluster::disruption_snapshot`] holds them, counted as
    /// static pools count them ([`Counts::of`]), without pricing nodes or collecting pods: in-flight
    /// claims, then Nodes with a claim; a Node being deleted under the name of an in-flight claim is
    /// left out, as the snapshot leaves it out. Claims `deleted` names count as deleting (deleted by
    /// the caller, not yet seen as such by the index). No command of this controller is assumed.
    pub fn claim_counts(&self, deleted: impl Fn(&str) -> bool) -> BTreeMap<String, Counts> {
        let mut counts: BTreeMap<String, Counts> = BTreeMap::new();
        let mut add = |pool: Option<&String>, claim: &NodeClaimRecord, (deleting, marked): (bool, bool)| {
            let Some(pool) = pool else { return };
            let gone = deleted(&claim.name);
            counts.entry(pool.clone()).or_default().add(deleting || gone, marked || gone);
        };
        let in_flight: BTreeSet<&str> = self.in_flight_claims().map(|c| c.name.as_str()).collect();
        for claim in self.in_flight_claims() {
            let taints = claim.taints.iter().chain(&claim.startup_taints);
            add(claim.nodepool.as_ref(), claim, deletion(claim, None, taints, false));
        }
        for (node, claim) in self.nodes() {
            let Some(claim) = claim else { continue };
            let marks = deletion(claim, Some(node), &node.node.taints, false);
            if marks.0 && in_flight.contains(node.name()) {
                continue;
            }
            add(node.node.nodepool.as_ref().or(claim.nodepool.as_ref()), claim, marks);
        }
        counts
    }

    /// Pods that must move because their node is being deleted (expired, disrupted, or deleted by
    /// hand): not DaemonSet or mirror pods, not terminal, not being deleted themselves. Provisioning
    /// plans capacity for them before they are evicted, as upstream's provisioner does for pods on
    /// deleting nodes, so an expired node's pods find room as soon as the drain lets them go.
    pub fn pods_of_deleting_nodes(&self) -> Vec<Arc<crate::scheduling::Pod>> {
        self.nodes()
            .filter(|(node, claim)| node.deleting || claim.is_some_and(|c| c.deleting))
            .flat_map(|(node, _)| self.live_pods(node.name()))
            .filter(|p| !p.is_daemonset_pod() && !p.mirror)
            .map(|p| {
                let pod = crate::scheduling::Pod {
                    node_name: None,
                    volume_zones: self.volume_zones(p),
                    ..(*p.pod).clone()
                };
                Arc::new(pod)
            })
            .collect()
    }

    /// Pods bound to `node` that still hold resources and are not leaving already.
    fn live_pods<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a PodRecord> + 'a {
        self.pods_on_node(node).filter(|p| !p.phase.is_terminal() && !p.deleting)
    }

    /// The managed node for `claim` (and its Node once registered); `None` without a NodePool.
    fn managed(
        &self,
        existing: Arc<ExistingNode>,
        node: Option<&NodeRecord>,
        claim: &NodeClaimRecord,
        pools: &[PoolPolicy],
        marks: &Marks<'_>,
    ) -> Option<ManagedNode> {
        let nodepool = existing.nodepool.clone().or_else(|| claim.nodepool.clone())?;
        let label = |key: &str| {
            existing.labels.label(key).or_else(|| claim.labels.label(key)).unwrap_or_default().to_string()
        };
        let instance_type = label(LABEL_INSTANCE_TYPE);
        let zone = label(LABEL_ZONE);
        let capacity_type =
            if label(LABEL_CAPACITY_TYPE) == "spot" { CapacityType::Spot } else { CapacityType::OnDemand };
        let price = offering_price(pools, &nodepool, &instance_type, &zone, capacity_type).unwrap_or(0.0);
        let (deleting, marked) =
            deletion(claim, node, &existing.taints, marks.disrupting.contains(&existing.name));
        let created = claim.created.as_ref().map(|t| t.0).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let initialized = claim
            .initialized_at
            .or_else(|| (claim.initialized || node.is_some_and(|n| n.initialized)).then_some(created));
        let pods = node.map(|n| self.live_pods(n.name()).map(node_pod).collect()).unwrap_or_default();
        Some(ManagedNode {
            nodeclaim: claim.name.clone(),
            nodepool,
            instance_type,
            zone,
            capacity_type,
            price_per_hour: price,
            created,
            initialized,
            last_pod_event: claim.last_pod_event,
            drifted: claim.drifted.clone(),
            do_not_disrupt: node.is_some_and(|n| n.do_not_disrupt)
                || claim
                    .annotations
                    .get(crate::model::labels::ANNOTATION_DO_NOT_DISRUPT)
                    .is_some_and(|v| v == "true"),
            nominated: marks.nominated.contains(&existing.name) || marks.nominated.contains(&claim.name),
            marked_for_deletion: marked,
            deleting,
            ready: node.is_some_and(|n| n.ready),
            pods,
            node: existing,
        })
    }
}

/// Whether the node of `claim` is being deleted (the claim or its Node), and whether it is marked for
/// deletion: being deleted, in a command of this controller (`disrupting`), or tainted
/// `karpenter.sh/disrupted`.
fn deletion<'a>(
    claim: &NodeClaimRecord,
    node: Option<&NodeRecord>,
    taints: impl IntoIterator<Item = &'a Taint>,
    disrupting: bool,
) -> (bool, bool) {
    let deleting = claim.deleting || node.is_some_and(|n| n.deleting);
    let tainted = taints.into_iter().any(|t| t.key == TAINT_DISRUPTED);
    (deleting, deleting || disrupting || tainted)
}

/// What the controller knows of nodes beyond the index.
struct Marks<'a> {
    disrupting: &'a BTreeSet<String>,
    nominated: &'a BTreeSet<String>,
}

/// A bound pod with what disruption weighs: priority, deletion cost, do-not-disrupt, start time, kind.
fn node_pod(p: &PodRecord) -> NodePod {
    let kind = if p.mirror {
        PodKind::Mirror
    } else if p.is_daemonset_pod() {
        PodKind::DaemonSet
    } else {
        PodKind::Workload
    };
    NodePod {
        pod: p.pod.clone(),
        priority: p.priority,
        deletion_cost: p.deletion_cost,
        do_not_disrupt: DoNotDisrupt::from_annotation(p.do_not_disrupt.as_deref())
            .unwrap_or(DoNotDisrupt::No),
        started: p.started,
        kind,
    }
}
