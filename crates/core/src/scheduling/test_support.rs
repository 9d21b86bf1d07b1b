//! Builders the solver's unit tests share: synthetic instance types, a NodePool of them, and pods.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::labels::{LABEL_INSTANCE_TYPE, LABEL_NODEPOOL};
use crate::model::resources::{CPU, MEMORY, PODS};
use crate::model::{CapacityType, InstanceType, Offering, Overhead, Requirement, Requirements, Resources};
use crate::scheduling::{NodePoolInput, Pod};

pub const GI: i64 = 1 << 30;

/// A type of `cpus` vCPUs with 4 GiB each and room for 110 pods, allocatable = capacity, on demand at
/// `price` in zone `z-1`.
pub fn instance_type(name: &str, cpus: i64, price: f64) -> InstanceType {
    instance_type_in(name, cpus, price, &["z-1"])
}

/// [`instance_type`], offered on demand at `price` in each of `zones`.
pub fn instance_type_in(name: &str, cpus: i64, price: f64, zones: &[&str]) -> InstanceType {
    let capacity = Resources::new().with(CPU, cpus * 1000).with(MEMORY, cpus * 4 * GI).with(PODS, 110);
    InstanceType {
        name: name.into(),
        vcpus: cpus as u32,
        memory_mib: (cpus * 4096) as u64,
        labels: BTreeMap::from([(LABEL_INSTANCE_TYPE.to_string(), name.to_string())]),
        allocatable: capacity.clone(),
        capacity,
        overhead: Overhead::default(),
        offerings: zones
            .iter()
            .map(|zone| Offering {
                zone: zone.to_string(),
                capacity_type: CapacityType::OnDemand,
                price,
                available: true,
            })
            .collect(),
    }
}

/// NodePool `name` of `types`: its `karpenter.sh/nodepool` label, required and put on its nodes, and
/// the `extra` requirements; no weight, taints or limits.
pub fn pool(
    name: &str,
    types: Vec<InstanceType>,
    extra: impl IntoIterator<Item = Requirement>,
) -> NodePoolInput {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::is_in(LABEL_NODEPOOL, [name.to_string()]));
    for r in extra {
        requirements.add(r);
    }
    NodePoolInput {
        name: name.into(),
        weight: 0,
        requirements,
        labels: BTreeMap::from([(LABEL_NODEPOOL.to_string(), name.to_string())]),
        taints: vec![],
        startup_taints: vec![],
        remaining: None,
        instance_types: Arc::new(types),
        replicas: None,
    }
}

/// A pending pod in namespace `default` asking for `cpu_m` millicores, `memory` bytes and one pod slot.
pub fn pod(name: &str, cpu_m: i64, memory: i64) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        requests: Resources::new().with(CPU, cpu_m).with(MEMORY, memory).with(PODS, 1),
        ..Default::default()
    }
}
