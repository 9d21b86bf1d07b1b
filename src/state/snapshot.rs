//! The index as solver input. `simulate` loads its manifests into an index too and takes this same
//! snapshot, so a what-if run and the controller agree.
//!
//! - pods: the provisionable pods, with the zones their persistent volumes allow as of now;
//! - nodes: registered Nodes not being deleted (nor their NodeClaim), by name, then in-flight
//!   NodeClaims as capacity on its way (`in_flight: true`, with the claim's labels and allocatable);
//! - running: non-terminal pods bound to one of those nodes (pods of a node being deleted are the
//!   disruption flow's concern);
//! - nodepools: Ready, not deleting and not static (`spec.replicas` unset: the solver never opens a
//!   node in a static pool, as upstream's scheduler leaves them out), by name, with
//!   `remaining = limits − usage` ([`Cluster::nodepool_usage`]);
//! - daemonsets: the DaemonSet pod templates;
//! - every pool's instance types come from the caller's catalog with the NodeOverlays of the index
//!   applied ([`Cluster::overlaid_catalogs`]).
//!
//! The caller checks [`Cluster::synced`] first; the snapshot itself does not refuse.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::apis::{AKSNodeClass, NodeOverlay, NodePool, Taint};
use crate::model::labels::{ANNOTATION_CAPACITY_OVERLAY_APPLIED, ANNOTATION_PRICE_OVERLAY_APPLIED};
use crate::model::InstanceType;
use crate::scheduling::from_k8s;
use crate::scheduling::overlay::{PoolTypes, Rejection};
use crate::scheduling::{ExistingNode, NodePoolInput, SolveInput, SolveOptions};

use super::records::{is_ephemeral_taint, NodeClaimRecord, NodeRecord};
use super::Cluster;

impl Cluster {
    /// Solver input from the current index. `catalog` gives each NodePool's instance types for its
    /// AKSNodeClass (`None` when the class is not in the index; the catalog decides what that means).
    pub fn snapshot(
        &self,
        catalog: &impl Fn(&NodePool, Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>>,
        options: SolveOptions,
    ) -> SolveInput {
        self.snapshot_with_pools(self.solver_pools(catalog), options)
    }

    /// [`Cluster::snapshot`] with the pools of [`Cluster::solver_pools`] already built: the static
    /// ones are left out here.
    pub(super) fn snapshot_with_pools(&self, pools: Vec<NodePoolInput>, options: SolveOptions) -> SolveInput {
        let mut nodes: Vec<Arc<ExistingNode>> = self
            .nodes()
            .filter(|(node, claim)| !node.deleting && !claim.is_some_and(|c| c.deleting))
            .map(|(node, claim)| existing_node(node, claim))
            .collect();
        nodes.extend(self.in_flight_claims().map(|c| Arc::new(c.in_flight_node())));
        let node_names: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let running = node_names
            .iter()
            .flat_map(|name| self.pods_on_node(name))
            .filter(|p| !p.phase.is_terminal())
            .map(|p| p.pod.clone())
            .collect();
        let nodepools = pools.into_iter().filter(|p| p.replicas.is_none()).collect();
        SolveInput {
            pods: self.provisionable_pods().map(|p| self.with_volume_zones(p)).collect(),
            running,
            nodes,
            nodepools,
            daemonsets: self.daemonsets().cloned().collect(),
            options,
        }
    }
}

impl Cluster {
    /// Every Ready NodePool that is not being deleted, static ones included, as the solver reads it,
    /// with the NodeOverlays applied to its instance types ([`Cluster::overlaid_catalogs`]).
    pub fn solver_pools(
        &self,
        catalog: &impl Fn(&NodePool, Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>>,
    ) -> Vec<NodePoolInput> {
        let usage = self.nodepool_usage();
        let pools: Vec<&NodePool> = self.ready_nodepools().collect();
        let catalogs = self.overlaid_catalogs(&pools, catalog).types;
        pools
            .into_iter()
            .zip(catalogs)
            .filter_map(|(pool, types)| {
                let name = pool.metadata.name.as_deref().unwrap_or_default();
                let used = usage.get(name).cloned().unwrap_or_default();
                // Cannot fail: the same conversion succeeded when the pool was applied.
                from_k8s::nodepool(pool, &used, types).ok()
            })
            .collect()
    }

    /// The instance types of Ready NodePool `pool` with the NodeOverlays applied, or None when the
    /// index holds no overlay (the catalog's own types are then the right ones) or no such pool.
    pub fn overlaid_types_of(
        &self,
        pool: &str,
        catalog: &impl Fn(&NodePool, Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>>,
    ) -> Option<Arc<Vec<InstanceType>>> {
        self.node_overlays().next()?;
        let pools: Vec<&NodePool> = self.ready_nodepools().collect();
        let at = pools.iter().position(|p| p.metadata.name.as_deref() == Some(pool))?;
        Some(self.overlaid_catalogs(&pools, catalog).types.swap_remove(at))
    }

    /// The annotations upstream puts on a NodeClaim of `pool` whose sizes (`options`) an overlay priced
    /// or extended (core `nodeclaimtemplate.go`): empty when none did.
    pub fn overlay_annotations(
        &self,
        pool: &str,
        options: &[String],
        catalog: &impl Fn(&NodePool, Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>>,
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if self.node_overlays().next().is_none() {
            return out;
        }
        let pools: Vec<&NodePool> = self.ready_nodepools().collect();
        let Some(at) = pools.iter().position(|p| p.metadata.name.as_deref() == Some(pool)) else {
            return out;
        };
        let overlaid = self.overlaid_catalogs(&pools, catalog);
        for (sizes, key) in [
            (&overlaid.price_overlaid[at], ANNOTATION_PRICE_OVERLAY_APPLIED),
            (&overlaid.capacity_overlaid[at], ANNOTATION_CAPACITY_OVERLAY_APPLIED),
        ] {
            if options.iter().any(|o| sizes.contains(o)) {
                out.insert(key.to_string(), "true".to_string());
            }
        }
        out
    }

    /// The catalog of each of `pools` with the index's NodeOverlays applied, with the overlays left
    /// out (conflicting or unreadable) and the sizes each pool had priced or extended. Every decision
    /// prices and sizes instance types through this, so provisioning, disruption and `simulate` see
    /// the same adjusted types.
    ///
    /// Conflicts are judged over every NodePool whose AKSNodeClass the index holds, not only `pools`:
    /// upstream core's NodeOverlay controller (`pkg/controllers/nodeoverlay/controller.go`) evaluates
    /// each overlay against every NodePool whose instance types resolve, Ready or not, so an overlay
    /// that conflicts only on a pool that cannot launch yet is still left out everywhere.
    pub fn overlaid_catalogs(
        &self,
        pools: &[&NodePool],
        catalog: &impl Fn(&NodePool, Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>>,
    ) -> OverlaidCatalogs {
        let class_of = |pool: &NodePool| self.nodeclass(&pool.spec.template.spec.node_class_ref.name);
        let overlays: Vec<NodeOverlay> = self.node_overlays().cloned().collect();
        if overlays.is_empty() {
            let none = vec![BTreeSet::new(); pools.len()];
            return OverlaidCatalogs {
                types: pools.iter().map(|pool| catalog(pool, class_of(pool))).collect(),
                rejected: BTreeMap::new(),
                price_overlaid: none.clone(),
                capacity_overlaid: none,
            };
        }
        let named = |pool: &NodePool| pool.metadata.name.clone().unwrap_or_default();
        let given: BTreeSet<String> = pools.iter().map(|p| named(p)).collect();
        let others = self.nodepools().filter(|p| !given.contains(&named(p)) && class_of(p).is_some());
        let evaluated: Vec<&NodePool> = pools.iter().copied().chain(others).collect();
        let catalogs: Vec<Arc<Vec<InstanceType>>> =
            evaluated.iter().map(|pool| catalog(pool, class_of(pool))).collect();
        let no_labels = BTreeMap::new();
        let inputs: Vec<(PoolTypes<'_>, &Arc<Vec<InstanceType>>)> = evaluated
            .iter()
            .zip(&catalogs)
            .map(|(pool, types)| {
                let labels = pool.spec.template.metadata.as_ref().map_or(&no_labels, |m| &m.labels);
                let name = pool.metadata.name.as_deref().unwrap_or_default();
                (PoolTypes { name, labels, types }, types)
            })
            .collect();
        let mut out = self.overlay_memo.apply(&inputs, &overlays);
        // Only the pools asked for are returned; the others served to judge conflicts.
        let asked = pools.len();
        out.types.truncate(asked);
        out.price_overlaid.truncate(asked);
        out.capacity_overlaid.truncate(asked);
        out
    }
}

/// [`Cluster::overlaid_catalogs`]: per pool, in the order of the pools given.
#[derive(Clone, Debug, Default)]
pub struct OverlaidCatalogs {
    pub types: Vec<Arc<Vec<InstanceType>>>,
    /// Overlays left out, by name, with why.
    pub rejected: BTreeMap<String, Rejection>,
    /// The sizes with an offering priced by an overlay.
    pub price_overlaid: Vec<BTreeSet<String>>,
    /// The sizes whose capacity an overlay extended.
    pub capacity_overlaid: Vec<BTreeSet<String>>,
}

/// A registered Node as solver capacity. Until it is initialized, the taints a daemon or the lifecycle
/// will remove (the claim's startup taints, and ephemeral ones such as not-ready) do not keep pods off
/// it, as upstream judges uninitialized managed nodes. A managed node is initialized once both its
/// claim says so and the Node carries `karpenter.sh/initialized` (upstream core
/// `pkg/controllers/state/statenode.go`, `Initialized`): the two arrive on different watches, and a
/// claim seen Initialized before its Node's update must not make the Node's old not-ready taint count,
/// or provisioning would plan new nodes for pods about to land on it.
fn existing_node(node: &NodeRecord, claim: Option<&NodeClaimRecord>) -> Arc<ExistingNode> {
    let Some(claim) = claim else { return node.node.clone() };
    let pool_from_claim = node.node.nodepool.is_none() && claim.nodepool.is_some();
    let initialized = node.initialized && claim.initialized;
    if !pool_from_claim && initialized {
        return node.node.clone();
    }
    let mut out = (*node.node).clone();
    if pool_from_claim {
        out.nodepool = claim.nodepool.clone();
    }
    if !initialized {
        let mut ignored: Vec<Taint> = claim.startup_taints.clone();
        for t in node.node.taints.iter().filter(|t| is_ephemeral_taint(t)) {
            if !ignored.contains(t) {
                ignored.push(t.clone());
            }
        }
        out.startup_taints = ignored;
    }
    Arc::new(out)
}
