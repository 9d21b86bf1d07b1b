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
//! - daemonsets: the DaemonSet pod templates.
//!
//! The caller checks [`Cluster::synced`] first; the snapshot itself does not refuse.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::apis::{AKSNodeClass, NodePool, Taint};
use crate::model::InstanceType;
use crate::scheduling::from_k8s;
use crate::scheduling::{ExistingNode, NodePoolInput, Pod, SolveInput, SolveOptions};

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
        let mut nodes: Vec<ExistingNode> = self
            .nodes()
            .filter(|(node, claim)| !node.deleting && !claim.is_some_and(|c| c.deleting))
            .map(|(node, claim)| existing_node(node, claim))
            .collect();
        nodes.extend(self.in_flight_claims().map(NodeClaimRecord::in_flight_node));
        let node_names: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let running = node_names
            .iter()
            .flat_map(|name| self.pods_on_node(name))
            .filter(|p| !p.phase.is_terminal())
            .map(|p| p.pod.clone())
            .collect();
        let nodepools = self.solver_pools(catalog).into_iter().filter(|p| p.replicas.is_none()).collect();
        SolveInput {
            pods: self
                .provisionable_pods()
                .map(|p| Pod { volume_zones: self.volume_zones(p), ..p.pod.clone() })
                .collect(),
            running,
            nodes,
            nodepools,
            daemonsets: self.daemonsets().cloned().collect(),
            options,
        }
    }
}

impl Cluster {
    /// Every Ready NodePool that is not being deleted, static ones included, as the solver reads it.
    pub fn solver_pools(
        &self,
        catalog: &impl Fn(&NodePool, Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>>,
    ) -> Vec<NodePoolInput> {
        let usage = self.nodepool_usage();
        self.ready_nodepools()
            .filter_map(|pool| {
                let class = self.nodeclass(&pool.spec.template.spec.node_class_ref.name);
                let name = pool.metadata.name.as_deref().unwrap_or_default();
                let used = usage.get(name).cloned().unwrap_or_default();
                // Cannot fail: the same conversion succeeded when the pool was applied.
                from_k8s::nodepool(pool, &used, catalog(pool, class)).ok()
            })
            .collect()
    }
}

/// A registered Node as solver capacity. Until it is initialized, the taints a daemon or the lifecycle
/// will remove (the claim's startup taints, and ephemeral ones such as not-ready) do not keep pods off
/// it, as upstream judges uninitialized managed nodes. A managed node is initialized once both its
/// claim says so and the Node carries `karpenter.sh/initialized` (upstream core
/// `pkg/controllers/state/statenode.go`, `Initialized`): the two arrive on different watches, and a
/// claim seen Initialized before its Node's update must not make the Node's old not-ready taint count,
/// or provisioning would plan new nodes for pods about to land on it.
fn existing_node(node: &NodeRecord, claim: Option<&NodeClaimRecord>) -> ExistingNode {
    let mut out = node.node.clone();
    if let Some(claim) = claim {
        if out.nodepool.is_none() {
            out.nodepool = claim.nodepool.clone();
        }
        if !(node.initialized && claim.initialized) {
            let mut ignored: Vec<Taint> = claim.startup_taints.clone();
            for t in node.node.taints.iter().filter(|t| is_ephemeral_taint(t)) {
                if !ignored.contains(t) {
                    ignored.push(t.clone());
                }
            }
            out.startup_taints = ignored;
        }
    }
    out
}
