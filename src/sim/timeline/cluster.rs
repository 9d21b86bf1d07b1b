//! The virtual cluster a timeline runs: the Kubernetes objects (as `simulate` reads them) plus what
//! the control plane, the workload controllers and Azure would add — nodes launched from NodeClaims
//! that become Ready after the boot delay, pods bound to nodes, Deployments kept at their replica
//! count, evicted pods recreated. Every change is a method here, so the engine reads as the sequence
//! of controllers it models. Deterministic: names come from counters, iteration is in name order.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, Taint as K8sTaint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;

use crate::apis::manifest::RawObject;
use crate::model::labels::{
    LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE,
};
use crate::model::resources::Resources;
use crate::model::CapacityType;
use crate::scheduling::NewNodeClaim;
use crate::sim::load::{self, LoadError, Objects, Source, Sourced};

/// The taint a disruption command puts on its candidates (upstream `karpenter.sh/disrupted`).
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

/// What the cluster knows about a node it launched, beyond the Node object.
#[derive(Clone, Debug)]
pub struct NodeRecord {
    pub name: String,
    pub nodeclaim: String,
    pub nodepool: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price_per_hour: f64,
    pub launched: Timestamp,
    /// Ready and initialized from this time (launch + boot delay).
    pub ready_at: Timestamp,
    pub last_pod_event: Timestamp,
    /// The hash annotations the NodeClaim was stamped with at launch
    /// ([`crate::apis::hash::annotations`]), for drift.
    pub annotations: BTreeMap<String, String>,
    /// A disruption command or an expiration is taking it away.
    pub disrupting: bool,
}

impl NodeRecord {
    pub fn ready(&self, now: Timestamp) -> bool {
        now >= self.ready_at
    }
}

/// The cluster's objects and node records.
#[derive(Clone, Debug)]
pub struct VirtualCluster {
    pub objects: Objects,
    pub nodes: BTreeMap<String, NodeRecord>,
    /// When each pod was bound (its `startTime`), by `namespace/name`.
    pub started: BTreeMap<String, Timestamp>,
    /// Bumped by every change to the objects, so callers can cache what they derive from them.
    version: u64,
    next_node: u64,
    next_pod: BTreeMap<String, u64>,
}

/// What the ReplicaSet controller needs of a Deployment.
struct Workload {
    namespace: String,
    name: String,
    replicas: i32,
    spec: PodSpec,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// The file name objects of a timeline are reported under.
const OBJECTS_FILE: &str = "timeline";

impl VirtualCluster {
    /// The cluster the timeline's objects describe. Nodes and bound pods in the objects are taken as
    /// they are (unmanaged capacity unless labelled with a NodePool).
    pub fn new(objects: &[RawObject]) -> Result<Self, LoadError> {
        let list = serde_json::json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": objects.iter().map(|o| o.value.clone()).collect::<Vec<_>>(),
        });
        let objects = load::load(&[Source::Text { name: OBJECTS_FILE.into(), text: list.to_string() }])?;
        Ok(VirtualCluster {
            objects,
            nodes: BTreeMap::new(),
            started: BTreeMap::new(),
            version: 0,
            next_node: 0,
            next_pod: BTreeMap::new(),
        })
    }

    /// Creates or replaces one object (matched by kind, namespace and name).
    pub fn apply(&mut self, raw: &RawObject) -> Result<(), LoadError> {
        self.version += 1;
        let mut single =
            load::load(&[Source::Text { name: OBJECTS_FILE.into(), text: raw.value.to_string() }])?;
        fn upsert<T>(into: &mut Vec<Sourced<T>>, from: &mut Vec<Sourced<T>>) {
            for object in from.drain(..) {
                match into.iter_mut().find(|o| o.display == object.display) {
                    Some(existing) => *existing = object,
                    None => into.push(object),
                }
            }
        }
        let o = &mut self.objects;
        upsert(&mut o.nodepools, &mut single.nodepools);
        upsert(&mut o.nodeclasses, &mut single.nodeclasses);
        upsert(&mut o.node_overlays, &mut single.node_overlays);
        upsert(&mut o.pods, &mut single.pods);
        upsert(&mut o.deployments, &mut single.deployments);
        upsert(&mut o.replicasets, &mut single.replicasets);
        upsert(&mut o.statefulsets, &mut single.statefulsets);
        upsert(&mut o.jobs, &mut single.jobs);
        upsert(&mut o.daemonsets, &mut single.daemonsets);
        upsert(&mut o.nodes, &mut single.nodes);
        upsert(&mut o.pdbs, &mut single.pdbs);
        upsert(&mut o.namespaces, &mut single.namespaces);
        upsert(&mut o.nodeclaims, &mut single.nodeclaims);
        upsert(&mut o.claims, &mut single.claims);
        upsert(&mut o.volumes, &mut single.volumes);
        upsert(&mut o.storage_classes, &mut single.storage_classes);
        Ok(())
    }

    /// Deletes an object; returns whether it existed. Deleting a Deployment deletes its pods.
    pub fn delete(&mut self, kind: &str, namespace: Option<&str>, name: &str) -> bool {
        self.version += 1;
        let display = match namespace {
            Some(ns) if kind != "NodePool" && kind != "AKSNodeClass" && kind != "Namespace" => {
                format!("{kind}/{ns}/{name}")
            }
            _ => format!("{kind}/{name}"),
        };
        let matches =
            |d: &String| *d == display || (namespace == Some("default") && *d == format!("{kind}/{name}"));
        let o = &mut self.objects;
        let before = o.pods.len()
            + o.deployments.len()
            + o.nodepools.len()
            + o.nodeclasses.len()
            + o.node_overlays.len()
            + o.pdbs.len()
            + o.daemonsets.len();
        o.pods.retain(|p| !matches(&p.display));
        o.deployments.retain(|p| !matches(&p.display));
        o.nodepools.retain(|p| !matches(&p.display));
        o.nodeclasses.retain(|p| !matches(&p.display));
        o.node_overlays.retain(|p| !matches(&p.display));
        o.pdbs.retain(|p| !matches(&p.display));
        o.daemonsets.retain(|p| !matches(&p.display));
        let after = o.pods.len()
            + o.deployments.len()
            + o.nodepools.len()
            + o.nodeclasses.len()
            + o.node_overlays.len()
            + o.pdbs.len()
            + o.daemonsets.len();
        if kind == "Deployment" {
            let ns = namespace.unwrap_or("default");
            self.objects.pods.retain(|p| owner_of(&p.object) != Some(("Deployment", ns, name)));
        }
        after < before
    }

    /// Sets a Deployment's replicas; false when there is no such Deployment.
    pub fn scale(&mut self, deployment: &str, replicas: u32) -> bool {
        self.version += 1;
        let Some((ns, name)) = deployment.split_once('/') else { return false };
        let Some(d) = self.objects.deployments.iter_mut().find(|d| {
            d.object.metadata.name.as_deref() == Some(name)
                && d.object.metadata.namespace.as_deref().unwrap_or("default") == ns
        }) else {
            return false;
        };
        d.object.spec.get_or_insert_with(Default::default).replicas = Some(replicas as i32);
        true
    }

    /// The ReplicaSet controller: every Deployment has as many pods as it asks for. New pods are
    /// pending; when there are too many, pending pods go first, then the newest.
    pub fn reconcile_workloads(&mut self, now: Timestamp) {
        let deployments: Vec<Workload> = self
            .objects
            .deployments
            .iter()
            .map(|d| {
                let spec = d.object.spec.clone().unwrap_or_default();
                let template = spec.template;
                let meta = template.metadata.unwrap_or_default();
                Workload {
                    namespace: d.object.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
                    name: d.object.metadata.name.clone().unwrap_or_default(),
                    replicas: spec.replicas.unwrap_or(1).max(0),
                    spec: template.spec.unwrap_or_default(),
                    labels: meta.labels.unwrap_or_default(),
                    annotations: meta.annotations.unwrap_or_default(),
                }
            })
            .collect();
        for Workload { namespace: ns, name, replicas, spec, labels, annotations } in deployments {
            let owned: Vec<usize> = (0..self.objects.pods.len())
                .filter(|&i| owner_of(&self.objects.pods[i].object) == Some(("Deployment", &ns, &name)))
                .collect();
            let have = owned.len() as i32;
            if have != replicas {
                self.version += 1;
            }
            if have < replicas {
                for _ in have..replicas {
                    let key = format!("{ns}/{name}");
                    let pod_name = loop {
                        let n = self.next_pod.entry(key.clone()).or_default();
                        let candidate = format!("{name}-{n}");
                        *n += 1;
                        let id = format!("{ns}/{candidate}");
                        if !self.objects.pods.iter().any(|p| pod_id(&p.object) == id) {
                            break candidate;
                        }
                    };
                    let pod = Pod {
                        metadata: ObjectMeta {
                            name: Some(pod_name.clone()),
                            namespace: Some(ns.clone()),
                            labels: Some(labels.clone()),
                            annotations: (!annotations.is_empty()).then(|| annotations.clone()),
                            owner_references: Some(vec![OwnerReference {
                                api_version: "apps/v1".into(),
                                kind: "Deployment".into(),
                                name: name.clone(),
                                controller: Some(true),
                                ..Default::default()
                            }]),
                            ..Default::default()
                        },
                        spec: Some(PodSpec { node_name: None, ..spec.clone() }),
                        status: Some(PodStatus { phase: Some("Pending".into()), ..Default::default() }),
                    };
                    self.objects.pods.push(Sourced {
                        file: OBJECTS_FILE.into(),
                        display: format!("Pod/{ns}/{pod_name}"),
                        object: pod,
                    });
                }
            } else if have > replicas {
                // Pending first, then the newest (highest number) — as the ReplicaSet controller
                // prefers unscheduled and younger pods when scaling down.
                let mut victims: Vec<(bool, u64, usize)> = owned
                    .iter()
                    .map(|&i| {
                        let p = &self.objects.pods[i];
                        let bound = node_of(&p.object).is_some();
                        let n = p
                            .object
                            .metadata
                            .name
                            .as_deref()
                            .and_then(|s| s.rsplit('-').next()?.parse().ok());
                        (bound, u64::MAX - n.unwrap_or(0), i)
                    })
                    .collect();
                victims.sort();
                let remove: BTreeSet<usize> =
                    victims.iter().take((have - replicas) as usize).map(|&(_, _, i)| i).collect();
                let mut i = 0;
                let removed_nodes: Vec<String> = remove
                    .iter()
                    .filter_map(|&k| node_of(&self.objects.pods[k].object).map(str::to_string))
                    .collect();
                self.objects.pods.retain(|_| {
                    let keep = !remove.contains(&i);
                    i += 1;
                    keep
                });
                self.touch(&removed_nodes, now);
            }
        }
    }

    /// Changes whenever the objects change.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Pods without a node, by `namespace/name`.
    pub fn pending_pods(&self) -> Vec<String> {
        self.objects.pods.iter().filter(|p| node_of(&p.object).is_none()).map(|p| pod_id(&p.object)).collect()
    }

    /// Pods bound to a node that is not Ready yet.
    pub fn starting_pods(&self, now: Timestamp) -> usize {
        self.objects
            .pods
            .iter()
            .filter(|p| node_of(&p.object).and_then(|n| self.nodes.get(n)).is_some_and(|r| !r.ready(now)))
            .count()
    }

    /// Binds a pod (`namespace/name`) to a node.
    pub fn bind(&mut self, pod: &str, node: &str, now: Timestamp) {
        self.version += 1;
        if let Some(p) = self.objects.pods.iter_mut().find(|p| pod_id(&p.object) == pod) {
            p.object.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
            p.object.status.get_or_insert_with(Default::default).phase = Some("Running".into());
            self.started.insert(pod.to_string(), now);
        }
        self.touch(&[node.to_string()], now);
    }

    /// A pod was added to or removed from these nodes (upstream's `lastPodEventTime`).
    fn touch(&mut self, nodes: &[String], now: Timestamp) {
        for node in nodes {
            if let Some(r) = self.nodes.get_mut(node) {
                r.last_pod_event = r.last_pod_event.max(now);
            }
        }
    }

    /// Launches a node for a planned NodeClaim; it is Ready `boot_delay` later. Returns its name.
    pub fn launch(
        &mut self,
        claim: &NewNodeClaim,
        now: Timestamp,
        boot_delay: std::time::Duration,
        annotations: BTreeMap<String, String>,
    ) -> String {
        self.version += 1;
        let name = format!("{}-{:05}", claim.nodepool, self.next_node);
        self.next_node += 1;
        let mut labels = claim.labels.clone();
        labels.insert(LABEL_HOSTNAME.into(), name.clone());
        labels.insert(LABEL_NODEPOOL.into(), claim.nodepool.clone());
        labels.insert(LABEL_INSTANCE_TYPE.into(), claim.instance_type.clone());
        labels.insert(LABEL_ZONE.into(), claim.zone.clone());
        labels.insert(LABEL_CAPACITY_TYPE.into(), claim.capacity_type.as_str().into());
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels),
                creation_timestamp: Some(Time(now)),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: (!claim.taints.is_empty()).then(|| {
                    claim
                        .taints
                        .iter()
                        .map(|t| K8sTaint {
                            key: t.key.clone(),
                            value: t.value.clone(),
                            effect: format!("{:?}", t.effect),
                            time_added: None,
                        })
                        .collect()
                }),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                allocatable: Some(quantities(&claim.allocatable)),
                ..Default::default()
            }),
        };
        self.objects.nodes.push(Sourced {
            file: OBJECTS_FILE.into(),
            display: format!("Node/{name}"),
            object: node,
        });
        let ready_at = now
            .checked_add(k8s_openapi::jiff::SignedDuration::try_from(boot_delay).unwrap_or_default())
            .unwrap_or(now);
        self.nodes.insert(
            name.clone(),
            NodeRecord {
                name: name.clone(),
                nodeclaim: name.clone(),
                nodepool: claim.nodepool.clone(),
                instance_type: claim.instance_type.clone(),
                zone: claim.zone.clone(),
                capacity_type: claim.capacity_type,
                price_per_hour: claim.price_per_hour,
                launched: now,
                ready_at,
                last_pod_event: now,
                annotations,
                disrupting: false,
            },
        );
        name
    }

    /// Takes a node of the initial objects as managed capacity (it carries `karpenter.sh/nodepool`).
    pub fn adopt(&mut self, record: NodeRecord) {
        self.version += 1;
        self.nodes.insert(record.name.clone(), record);
    }

    /// Taints a node `karpenter.sh/disrupted:NoSchedule` (nothing new lands on it) and marks it.
    pub fn taint_disrupted(&mut self, node: &str) {
        self.version += 1;
        if let Some(n) =
            self.objects.nodes.iter_mut().find(|n| n.object.metadata.name.as_deref() == Some(node))
        {
            let taints =
                n.object.spec.get_or_insert_with(Default::default).taints.get_or_insert_with(Vec::new);
            if !taints.iter().any(|t| t.key == DISRUPTED_TAINT) {
                taints.push(K8sTaint {
                    key: DISRUPTED_TAINT.into(),
                    effect: "NoSchedule".into(),
                    value: None,
                    time_added: None,
                });
            }
        }
        if let Some(r) = self.nodes.get_mut(node) {
            r.disrupting = true;
        }
    }

    /// Removes the disruption taint (a command was given up).
    pub fn untaint(&mut self, node: &str) {
        self.version += 1;
        if let Some(n) =
            self.objects.nodes.iter_mut().find(|n| n.object.metadata.name.as_deref() == Some(node))
        {
            if let Some(taints) = n.object.spec.as_mut().and_then(|s| s.taints.as_mut()) {
                taints.retain(|t| t.key != DISRUPTED_TAINT);
            }
        }
        if let Some(r) = self.nodes.get_mut(node) {
            r.disrupting = false;
        }
    }

    /// Deletes a node: its pods are evicted (a Deployment's pods come back pending with the next
    /// reconcile; bare pods are gone, as in Kubernetes). Returns how many pods it held.
    pub fn delete_node(&mut self, node: &str) -> usize {
        self.version += 1;
        let before = self.objects.pods.len();
        let evicted: Vec<String> = self
            .objects
            .pods
            .iter()
            .filter(|p| node_of(&p.object) == Some(node))
            .map(|p| pod_id(&p.object))
            .collect();
        self.objects.pods.retain(|p| node_of(&p.object) != Some(node));
        for id in &evicted {
            self.started.remove(id);
        }
        self.objects.nodes.retain(|n| n.object.metadata.name.as_deref() != Some(node));
        self.nodes.remove(node);
        before - self.objects.pods.len()
    }

    /// $/hour of every node the cluster launched.
    pub fn price_per_hour(&self) -> f64 {
        self.nodes.values().map(|n| n.price_per_hour).sum()
    }

    /// The pods bound to `node`, by `namespace/name`.
    pub fn pods_on(&self, node: &str) -> Vec<&Pod> {
        self.objects.pods.iter().filter(|p| node_of(&p.object) == Some(node)).map(|p| &p.object).collect()
    }
}

/// `namespace/name` of a pod.
pub fn pod_id(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or("default"),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

/// The node a pod is bound to.
pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// The controlling owner of a pod as (kind, namespace, name).
fn owner_of(p: &Pod) -> Option<(&str, &str, &str)> {
    let ns = p.metadata.namespace.as_deref().unwrap_or("default");
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.as_str(), ns, o.name.as_str()))
}

fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    r.to_quantities().into_iter().map(|(name, value)| (name, Quantity(value))).collect()
}
