//! The per-Node and per-NodePool gauges, from the index (upstream core
//! `pkg/controllers/metrics/node/controller.go`, `.../nodepool/controller.go`, `pkg/state/cost/cost.go`).
//!
//! Per Node: allocatable, the requests and limits of its pods (all, and the DaemonSet pods'), the system
//! overhead (capacity − allocatable) and its age, labelled as upstream with every well-known label,
//! `node_name`, `phase` and `managed`; pods count unless terminal, and their `pods: 1` request is not a
//! resource here, as upstream's requests have none. The cluster's utilization is the pods' requests over
//! the Nodes' allocatable. Per NodePool: usage, limits and cost (the $/hour of its NodeClaims at the
//! catalog's price of their offering, NodeOverlays applied).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::metrics::{resource_type, resource_value, Catalog};
use crate::model::instancetype::CapacityType;
use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE};
use crate::model::resources::{parse_resource_quantity, Resources, PODS};
use crate::model::LabelLookup;
use crate::operator::metrics::{node_label_keys, Metrics};
use crate::state::{Cluster, NodeRecord};

/// The per-node gauges' label values of `node`, in [`crate::operator::metrics::node_labels`]' order.
fn node_values(node: &NodeRecord, managed: bool) -> Vec<String> {
    let labels = &node.node.labels;
    let mut values: Vec<String> = node_label_keys()
        .into_iter()
        .map(|(key, _)| labels.label(key).unwrap_or_default().to_string())
        .collect();
    values.push(node.name().to_string());
    values.push(node.phase.clone());
    values.push(managed.to_string());
    values
}

/// Every per-node gauge and the cluster's utilization, rebuilt.
pub fn nodes(m: &Metrics, cluster: &Cluster, now: Timestamp) {
    let c = &m.cluster;
    let mut per_resource = [
        &c.allocatable,
        &c.total_pod_requests,
        &c.total_pod_limits,
        &c.total_daemon_requests,
        &c.total_daemon_limits,
        &c.system_overhead,
    ]
    .map(|gauge| gauge.rebuild());
    let mut lifetime = c.current_lifetime.rebuild();
    c.utilization.reset();
    let mut allocatable_total = Resources::new();
    let mut requested_total = Resources::new();
    for (node, claim) in cluster.nodes() {
        let values = node_values(node, claim.is_some());
        let mut requests = Resources::new();
        let mut limits = Resources::new();
        let mut daemon_requests = Resources::new();
        let mut daemon_limits = Resources::new();
        for pod in cluster.pods_on_node(node.name()).filter(|p| !p.phase.is_terminal()) {
            requests.add_assign(&pod.pod.requests);
            limits.add_assign(&pod.limits);
            if pod.is_daemonset_pod() {
                daemon_requests.add_assign(&pod.pod.requests);
                daemon_limits.add_assign(&pod.limits);
            }
        }
        let allocatable = &node.node.allocatable;
        let mut overhead = Resources::new();
        for (name, amount) in node.capacity.iter().filter(|(name, _)| *name != "nodes") {
            overhead.set(name, amount - allocatable.get(name));
        }
        let lists = [allocatable, &requests, &limits, &daemon_requests, &daemon_limits, &overhead];
        for (i, (gauge, list)) in per_resource.iter_mut().zip(lists).enumerate() {
            // The pods' requests and limits (1 to 4) carry the solver's `pods` count, not a resource.
            let pod_sums = (1..=4).contains(&i);
            for (name, amount) in list.iter().filter(|(name, _)| !(pod_sums && *name == PODS)) {
                let kind = resource_type(name);
                let mut labels: Vec<&str> = values.iter().map(String::as_str).collect();
                labels.push(&kind);
                gauge.set(&labels, resource_value(name, amount));
            }
        }
        if let Some(created) = node.created {
            let age = now.duration_since(created).as_secs_f64().max(0.0);
            lifetime.set(&values.iter().map(String::as_str).collect::<Vec<_>>(), age);
        }
        allocatable_total.add_assign(allocatable);
        requested_total.add_assign(&requests);
    }
    for rebuilt in per_resource.into_iter().chain([lifetime]) {
        rebuilt.finish();
    }
    for (name, allocatable) in allocatable_total.iter() {
        if allocatable == 0 {
            continue;
        }
        let percent = 100.0 * requested_total.get(name) as f64 / allocatable as f64;
        c.utilization.with_label_values(&[&resource_type(name)]).set(percent);
    }
}

/// Usage, limits and cost of every NodePool, rebuilt; a NodeClaim whose pool or offering price is
/// unknown is counted once in the cost tracker's errors (`counted` remembers it until it is gone).
pub fn nodepools(m: &Metrics, cluster: &Cluster, catalog: Catalog<'_>, counted: &mut BTreeSet<String>) {
    let c = &m.cluster;
    let usage = cluster.nodepool_usage();
    for gauge in [&c.nodepools_usage, &c.nodepools_limit, &c.nodepools_cost] {
        gauge.reset();
    }
    for pool in cluster.nodepools() {
        let name = pool.name_any();
        for (resource, amount) in usage.get(&name).into_iter().flat_map(Resources::iter) {
            let labels = [resource_type(resource), name.clone()];
            c.nodepools_usage.with_label_values(&labels).set(resource_value(resource, amount));
        }
        for (resource, quantity) in pool.spec.limits.iter().flatten() {
            // The API server validated the quantity; one it could not store would not be here.
            if let Ok(amount) = parse_resource_quantity(resource, quantity.as_str()) {
                let labels = [resource_type(resource), name.clone()];
                c.nodepools_limit.with_label_values(&labels).set(resource_value(resource, amount));
            }
        }
    }
    let mut cost: BTreeMap<String, f64> =
        cluster.nodepools().map(|p| (p.name_any(), 0.0)).collect::<BTreeMap<_, _>>();
    let mut types = BTreeMap::new();
    counted.retain(|claim| cluster.nodeclaim(claim).is_some());
    for claim in cluster.nodeclaims() {
        // Upstream's `NecessaryLabels`: a claim without them is not yet costed, and that is no error.
        let label = |key: &str| claim.labels.get(key).map(String::as_str);
        let (Some(pool), Some(size), Some(capacity_type), Some(zone)) = (
            label(LABEL_NODEPOOL),
            label(LABEL_INSTANCE_TYPE),
            label(LABEL_CAPACITY_TYPE),
            label(LABEL_ZONE),
        ) else {
            continue;
        };
        let catalog = types.entry(pool.to_string()).or_insert_with(|| {
            cluster.nodepool(pool).map(|p| {
                cluster.overlaid_types_of(pool, &catalog).unwrap_or_else(|| {
                    catalog(p, cluster.nodeclass(&p.spec.template.spec.node_class_ref.name))
                })
            })
        });
        let capacity_type = if capacity_type == CapacityType::Spot.as_str() {
            CapacityType::Spot
        } else {
            CapacityType::OnDemand
        };
        let price = catalog.as_ref().and_then(|types| {
            let it = types.iter().find(|t| t.name == size)?;
            it.offerings.iter().find(|o| o.zone == zone && o.capacity_type == capacity_type).map(|o| o.price)
        });
        match price {
            Some(price) if cost.contains_key(pool) => *cost.get_mut(pool).expect("checked") += price,
            _ => {
                if counted.insert(claim.name.clone()) {
                    m.cost_tracker_error(pool);
                }
            }
        }
    }
    for (pool, dollars) in cost {
        c.nodepools_cost.with_label_values(&[&pool]).set(dollars);
    }
}

impl Metrics {
    /// A NodeClaim of `nodepool` could not be costed.
    pub fn cost_tracker_error(&self, nodepool: &str) {
        self.cluster.cost_tracker_errors.with_label_values(&[nodepool]).inc();
    }
}
