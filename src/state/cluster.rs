//! [`Cluster`]: the index itself. Applying and deleting objects, relists, the synced gate, and the
//! queries provisioning and disruption ask.
//!
//! The synced rule: every kind has finished its initial list, and no live NodeClaim lacks a
//! providerID. A claim without one is being launched; its capacity is not known yet, so a solve now
//! would launch for the same pods twice (upstream `Cluster.Synced`). Unlike upstream, a claim that is
//! already being deleted does not hold the gate: it will never become capacity, and waiting for its
//! finalizer would stall provisioning for nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::apis::conditions;
use crate::apis::{AKSNodeClass, NodeOverlay, NodePool};
use crate::model::resources::Resources;
use crate::scheduling::from_k8s::{self, FromK8sError, PodContext, VolumeIndex};
use crate::scheduling::Pod;

use super::overlay_memo::OverlayMemo;
use super::records::{NodeClaimRecord, NodeRecord, PdbRecord, PodRecord};
use super::shared::SharedParts;
use super::versions::{Version, Versions};
use super::{key, Kind, Object};

/// The label the API server puts on every namespace.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Why the index may not be acted on yet.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotSynced {
    #[error("{} watch has not finished its initial list", .0.name())]
    Listing(Kind),
    #[error("NodeClaim {0} is launching (no providerID yet)")]
    Launching(String),
}

/// The in-memory index of the cluster. See the module documentation of [`crate::state`].
#[derive(Debug, Default)]
pub struct Cluster {
    /// Namespaces and their labels, for pod-affinity `namespaceSelector`.
    ctx: PodContext,
    /// Claims, volumes and storage classes: the zones a pod's volumes allow, read at snapshot time so a
    /// volume bound after its pod arrived still counts.
    volumes: VolumeIndex,
    /// Boxed: a B-tree leaf has room for eleven entries and is often half full, and a record is
    /// large next to the pointer.
    pods: BTreeMap<String, Box<PodRecord>>,
    /// The labels, tolerations and owners the pods share, and the NodeClaims' labels and annotations,
    /// held once each.
    shared: SharedParts,
    /// Node name → keys of the pods bound to it.
    pods_by_node: BTreeMap<String, BTreeSet<String>>,
    nodes: BTreeMap<String, NodeRecord>,
    node_by_provider_id: BTreeMap<String, String>,
    nodeclaims: BTreeMap<String, NodeClaimRecord>,
    claim_by_provider_id: BTreeMap<String, String>,
    // Few and small, and the catalog and the NodePool conversion read them whole; `managedFields`
    // is dropped.
    nodepools: BTreeMap<String, NodePool>,
    nodeclasses: BTreeMap<String, AKSNodeClass>,
    /// Applied to every pool's catalog when solver input is built ([`crate::scheduling::overlay`]).
    node_overlays: BTreeMap<String, NodeOverlay>,
    /// DaemonSet key → its pod template as a solver pod.
    daemonsets: BTreeMap<String, Pod>,
    pdbs: BTreeMap<String, PdbRecord>,
    /// Objects that could not be converted, for events; they are left out of every query.
    invalid: BTreeMap<(Kind, String), FromK8sError>,
    synced: BTreeSet<Kind>,
    /// Kinds being relisted, with the keys seen so far: at the end, the rest were deleted meanwhile.
    relisting: BTreeMap<Kind, BTreeSet<String>>,
    /// The version of each object held and the objects deleted, so no older copy replaces a newer one.
    versions: Versions,
    /// The last NodeOverlay application, reused while its inputs are unchanged.
    pub(super) overlay_memo: OverlayMemo,
}

/// The index key of an object.
fn object_key(object: Object<'_>) -> String {
    let (namespace, name) = match object {
        Object::Pod(o) => (Some(o.metadata.namespace.as_deref().unwrap_or("default")), &o.metadata.name),
        Object::DaemonSet(o) => {
            (Some(o.metadata.namespace.as_deref().unwrap_or("default")), &o.metadata.name)
        }
        Object::PodDisruptionBudget(o) => {
            (Some(o.metadata.namespace.as_deref().unwrap_or("default")), &o.metadata.name)
        }
        Object::Node(o) => (None, &o.metadata.name),
        Object::NodeClaim(o) => (None, &o.metadata.name),
        Object::NodePool(o) => (None, &o.metadata.name),
        Object::NodeClass(o) => (None, &o.metadata.name),
        Object::PersistentVolumeClaim(o) => {
            (Some(o.metadata.namespace.as_deref().unwrap_or("default")), &o.metadata.name)
        }
        Object::PersistentVolume(o) => (None, &o.metadata.name),
        Object::StorageClass(o) => (None, &o.metadata.name),
        Object::Namespace(o) => (None, &o.metadata.name),
        Object::NodeOverlay(o) => (None, &o.metadata.name),
    };
    key(namespace, name.as_deref().unwrap_or_default())
}

/// Drops `id → key` from a providerID index, only if it still points at `key`: a newer object may
/// have taken the ID over.
fn unindex(index: &mut BTreeMap<String, String>, id: Option<String>, key: &str) {
    if let Some(id) = id {
        if index.get(&id).is_some_and(|k| k == key) {
            index.remove(&id);
        }
    }
}

impl Cluster {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces an object (a watch `Apply`, an `InitApply` during a relist, or the response of
    /// the controller's own write), unless it is older than the copy held or its object was deleted
    /// ([`versions`](super::versions)).
    pub fn apply<'a>(&mut self, object: impl Into<Object<'a>>) {
        let object = object.into();
        let kind = object.kind();
        let key = object_key(object);
        if let Some(seen) = self.relisting.get_mut(&kind) {
            seen.insert(key.clone());
        }
        if !self.versions.admit(kind, &key, Version::of(object.meta())) {
            return;
        }
        // The old version goes first, so a failed conversion never leaves it behind as current.
        self.remove(kind, &key);
        if let Err(error) = self.insert(object, &key) {
            self.invalid.insert((kind, key), error);
        }
    }

    /// Holds a copy that could not be read (it does not fit the API types) as set aside under its
    /// name, with why: it replaces an older readable copy, counts as seen by a relist, and is left out
    /// of every query like an object that does not convert ([`Cluster::invalid`]).
    pub fn set_aside(&mut self, kind: Kind, meta: &ObjectMeta, error: FromK8sError) {
        let key = key(meta.namespace.as_deref(), meta.name.as_deref().unwrap_or_default());
        if let Some(seen) = self.relisting.get_mut(&kind) {
            seen.insert(key.clone());
        }
        if self.versions.admit(kind, &key, Version::of(meta)) {
            self.remove(kind, &key);
            self.invalid.insert((kind, key), error);
        }
    }

    /// Removes a copy that could not be read (a watch `Delete` of it); a newer object stays.
    pub fn delete_unreadable(&mut self, kind: Kind, meta: &ObjectMeta) {
        let key = key(meta.namespace.as_deref(), meta.name.as_deref().unwrap_or_default());
        if self.versions.remove(kind, &key, Version::of(meta)) {
            self.drop_object(kind, &key);
        }
    }

    /// Why the object `kind`/`key` is left out, if it is.
    pub fn invalid_reason(&self, kind: Kind, key: &str) -> Option<&FromK8sError> {
        self.invalid.get(&(kind, key.to_string()))
    }

    /// Removes an object (a watch `Delete`); a newer object of the same name stays.
    pub fn delete<'a>(&mut self, object: impl Into<Object<'a>>) {
        let object = object.into();
        let (kind, key) = (object.kind(), object_key(object));
        if self.versions.remove(kind, &key, Version::of(object.meta())) {
            self.drop_object(kind, &key);
        }
    }

    /// Removes an object by kind and key (`namespace/name`, or `name` for cluster-scoped kinds).
    pub fn delete_key(&mut self, kind: Kind, key: &str) {
        self.versions.forget(kind, key);
        self.drop_object(kind, key);
    }

    fn drop_object(&mut self, kind: Kind, key: &str) {
        self.remove(kind, key);
        if kind == Kind::Namespace {
            self.reconvert_selector_pods();
        }
    }

    /// A watch of `kind` restarts its list (`Init`): objects not applied again before
    /// [`mark_synced`](Self::mark_synced) were deleted while the watch was down and are dropped then.
    pub fn begin_relist(&mut self, kind: Kind) {
        self.relisting.insert(kind, BTreeSet::new());
    }

    /// The watch of `kind` has delivered its full list (`InitDone`).
    pub fn mark_synced(&mut self, kind: Kind) {
        if let Some(seen) = self.relisting.remove(&kind) {
            for stale in self.keys(kind).into_iter().filter(|k| !seen.contains(k)) {
                self.delete_key(kind, &stale);
            }
        }
        self.synced.insert(kind);
    }

    /// Whether decisions may be made on this index; see the module documentation for the rule.
    pub fn synced(&self) -> bool {
        self.sync_status().is_ok()
    }

    /// [`synced`](Self::synced), with the first reason it is not.
    pub fn sync_status(&self) -> Result<(), NotSynced> {
        if let Some(kind) = Kind::ALL.into_iter().find(|k| !self.synced.contains(k)) {
            return Err(NotSynced::Listing(kind));
        }
        match self.nodeclaims.values().find(|c| !c.deleting && c.provider_id.is_none()) {
            Some(claim) => Err(NotSynced::Launching(claim.name.clone())),
            None => Ok(()),
        }
    }

    fn insert(&mut self, object: Object<'_>, key: &str) -> Result<(), FromK8sError> {
        let key = key.to_string();
        match object {
            Object::Pod(p) => {
                let record = self.shared.pod(PodRecord::from_k8s(p, &self.ctx)?);
                if let Some(node) = &record.pod.node_name {
                    self.pods_by_node.entry(node.clone()).or_default().insert(key.clone());
                }
                self.pods.insert(key, Box::new(record));
            }
            Object::Node(n) => {
                let record = self.shared.node(n)?;
                if let Some(id) = &record.provider_id {
                    self.node_by_provider_id.insert(id.clone(), key.clone());
                }
                self.nodes.insert(key, record);
            }
            Object::NodeClaim(c) => {
                let record = self.shared.nodeclaim(NodeClaimRecord::from_k8s(c)?);
                if let Some(id) = &record.provider_id {
                    self.claim_by_provider_id.insert(id.clone(), key.clone());
                }
                self.nodeclaims.insert(key, record);
            }
            Object::NodePool(p) => {
                // Converted once now only to surface errors; the snapshot converts it with the usage.
                from_k8s::nodepool(p, &Resources::new(), Arc::default())?;
                let mut pool = p.clone();
                pool.metadata.managed_fields = None;
                self.nodepools.insert(key, pool);
            }
            Object::NodeClass(c) => {
                let mut class = c.clone();
                class.metadata.managed_fields = None;
                self.nodeclasses.insert(key, class);
            }
            Object::NodeOverlay(o) => {
                let mut overlay = o.clone();
                overlay.metadata.managed_fields = None;
                self.node_overlays.insert(key, overlay);
            }
            Object::DaemonSet(d) => {
                let template = d.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
                let namespace = d.metadata.namespace.as_deref().unwrap_or("default");
                let name = d.metadata.name.as_deref().unwrap_or_default();
                let mut pods =
                    from_k8s::template_pods(&template, namespace, "DaemonSet", name, 1, &self.ctx)?;
                self.daemonsets.insert(key, pods.remove(0));
            }
            Object::PodDisruptionBudget(p) => {
                self.pdbs.insert(key, PdbRecord::from_k8s(p)?);
            }
            Object::PersistentVolumeClaim(c) => self.volumes.apply_claim(c),
            Object::PersistentVolume(v) => self.volumes.apply_volume(v),
            Object::StorageClass(c) => self.volumes.apply_class(c),
            Object::Namespace(n) => {
                let mut labels = n.metadata.labels.clone().unwrap_or_default();
                // The API server sets it on every namespace; an object from elsewhere may lack it.
                labels.entry(NAMESPACE_NAME_LABEL.to_string()).or_insert_with(|| key.clone());
                self.ctx.namespaces.insert(key, labels);
                self.reconvert_selector_pods();
            }
        }
        Ok(())
    }

    /// Converts again the pods whose affinity selects namespaces by label: which namespaces a
    /// `namespaceSelector` means changes with the namespaces.
    fn reconvert_selector_pods(&mut self) {
        let keys: Vec<String> =
            self.pods.iter().filter(|(_, r)| r.source.is_some()).map(|(k, _)| k.clone()).collect();
        for key in keys {
            let Some(source) = self.pods.get(&key).and_then(|r| r.source.clone()) else { continue };
            match PodRecord::from_k8s(&source, &self.ctx) {
                Ok(record) => drop(self.pods.insert(key, Box::new(self.shared.pod(record)))),
                Err(error) => {
                    self.remove(Kind::Pod, &key);
                    self.invalid.insert((Kind::Pod, key), error);
                }
            }
        }
    }

    fn remove(&mut self, kind: Kind, key: &str) {
        self.invalid.remove(&(kind, key.to_string()));
        match kind {
            Kind::Pod => {
                let node = self.pods.remove(key).and_then(|r| r.pod.node_name.clone());
                if let Some(node) = node {
                    if let Some(keys) = self.pods_by_node.get_mut(&node) {
                        keys.remove(key);
                        if keys.is_empty() {
                            self.pods_by_node.remove(&node);
                        }
                    }
                }
            }
            Kind::Node => {
                let id = self.nodes.remove(key).and_then(|r| r.provider_id);
                unindex(&mut self.node_by_provider_id, id, key);
            }
            Kind::NodeClaim => {
                let id = self.nodeclaims.remove(key).and_then(|r| r.provider_id);
                unindex(&mut self.claim_by_provider_id, id, key);
            }
            Kind::NodePool => drop(self.nodepools.remove(key)),
            Kind::NodeClass => drop(self.nodeclasses.remove(key)),
            Kind::NodeOverlay => drop(self.node_overlays.remove(key)),
            Kind::DaemonSet => drop(self.daemonsets.remove(key)),
            Kind::PodDisruptionBudget => drop(self.pdbs.remove(key)),
            Kind::PersistentVolumeClaim => self.volumes.delete_claim(key),
            Kind::PersistentVolume => self.volumes.delete_volume(key),
            Kind::StorageClass => self.volumes.delete_class(key),
            // The pods that select namespaces are converted again by the caller: once after a delete,
            // once after the insert that follows a removal in `apply`.
            Kind::Namespace => drop(self.ctx.namespaces.remove(key)),
        }
    }

    /// Every key of `kind`, invalid objects included.
    fn keys(&self, kind: Kind) -> Vec<String> {
        let valid: Vec<String> = match kind {
            Kind::Pod => self.pods.keys().cloned().collect(),
            Kind::Node => self.nodes.keys().cloned().collect(),
            Kind::NodeClaim => self.nodeclaims.keys().cloned().collect(),
            Kind::NodePool => self.nodepools.keys().cloned().collect(),
            Kind::NodeClass => self.nodeclasses.keys().cloned().collect(),
            Kind::NodeOverlay => self.node_overlays.keys().cloned().collect(),
            Kind::DaemonSet => self.daemonsets.keys().cloned().collect(),
            Kind::PodDisruptionBudget => self.pdbs.keys().cloned().collect(),
            Kind::PersistentVolumeClaim => self.volumes.claim_keys().cloned().collect(),
            Kind::PersistentVolume => self.volumes.volume_names().cloned().collect(),
            Kind::StorageClass => self.volumes.class_names().cloned().collect(),
            Kind::Namespace => self.ctx.namespaces.keys().cloned().collect(),
        };
        let invalid = self.invalid.keys().filter(|(k, _)| *k == kind).map(|(_, key)| key.clone());
        valid.into_iter().chain(invalid).collect()
    }

    // --- Queries -------------------------------------------------------------------------------

    pub fn pod(&self, key: &str) -> Option<&PodRecord> {
        self.pods.get(key).map(|record| &**record)
    }

    pub fn pods(&self) -> impl Iterator<Item = &PodRecord> {
        self.pods.values().map(|record| &**record)
    }

    /// Pods a new node should be launched for, in key order (see [`PodRecord::is_provisionable`]).
    pub fn provisionable_pods(&self) -> impl Iterator<Item = &PodRecord> {
        self.pods.values().map(|record| &**record).filter(|p| p.is_provisionable())
    }

    /// The keys (`namespace/name`) of [`Cluster::provisionable_pods`].
    pub fn provisionable_pod_keys(&self) -> impl Iterator<Item = &str> {
        self.pods.iter().filter(|(_, p)| p.is_provisionable()).map(|(key, _)| key.as_str())
    }

    /// The zones the pod's persistent volumes allow, now; None when they do not constrain it.
    pub fn volume_zones(&self, pod: &PodRecord) -> Option<Vec<String>> {
        self.volumes.zones(&pod.pod.namespace, &pod.volume_claims)
    }

    /// The pod as the solver places it: with the zones its volumes allow now
    /// ([`Cluster::volume_zones`]). Shared with the index unless those zones changed the pod.
    pub fn with_volume_zones(&self, pod: &PodRecord) -> Arc<Pod> {
        let volume_zones = self.volume_zones(pod);
        if volume_zones == pod.pod.volume_zones {
            return pod.pod.clone();
        }
        Arc::new(Pod { volume_zones, ..(*pod.pod).clone() })
    }

    /// The zones the volumes of `claims` (PersistentVolumeClaim names in `namespace`) allow, now; None
    /// when they do not constrain a pod.
    pub fn claim_zones(&self, namespace: &str, claims: &[String]) -> Option<Vec<String>> {
        self.volumes.zones(namespace, claims)
    }

    /// The namespaces and their labels, as pod-affinity `namespaceSelector`s see them.
    pub fn pod_context(&self) -> &PodContext {
        &self.ctx
    }

    /// The PersistentVolume the claim `namespace/name` is bound to, if any.
    pub fn claim_volume(&self, namespace: &str, name: &str) -> Option<&str> {
        self.volumes.claim_volume(namespace, name)
    }

    /// Pods bound to `node`, terminal ones included (callers decide what they count).
    pub fn pods_on_node<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a PodRecord> + 'a {
        self.pods_by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|k| self.pods.get(k).map(|record| &**record))
    }

    pub fn node(&self, name: &str) -> Option<&NodeRecord> {
        self.nodes.get(name)
    }

    /// Every Node with the NodeClaim that launched it (joined by providerID), by name.
    pub fn nodes(&self) -> impl Iterator<Item = (&NodeRecord, Option<&NodeClaimRecord>)> {
        self.nodes.values().map(|n| (n, self.claim_of(n)))
    }

    /// The NodeClaim whose providerID the Node carries.
    pub fn claim_of(&self, node: &NodeRecord) -> Option<&NodeClaimRecord> {
        let id = node.provider_id.as_deref()?;
        self.claim_by_provider_id.get(id).and_then(|k| self.nodeclaims.get(k))
    }

    /// The Node that registered with the claim's providerID.
    pub fn node_of(&self, claim: &NodeClaimRecord) -> Option<&NodeRecord> {
        let id = claim.provider_id.as_deref()?;
        self.node_by_provider_id.get(id).and_then(|k| self.nodes.get(k))
    }

    /// The Node that registered with `provider_id`, looked up in the providerID index.
    pub fn node_with_provider_id(&self, provider_id: &str) -> Option<&NodeRecord> {
        self.node_by_provider_id.get(provider_id).and_then(|k| self.nodes.get(k))
    }

    /// The NodeClaim that launched `provider_id`, looked up in the providerID index.
    pub fn nodeclaim_with_provider_id(&self, provider_id: &str) -> Option<&NodeClaimRecord> {
        self.claim_by_provider_id.get(provider_id).and_then(|k| self.nodeclaims.get(k))
    }

    pub fn nodeclaim(&self, name: &str) -> Option<&NodeClaimRecord> {
        self.nodeclaims.get(name)
    }

    pub fn nodeclaims(&self) -> impl Iterator<Item = &NodeClaimRecord> {
        self.nodeclaims.values()
    }

    /// Claims that are capacity on its way: not being deleted, and no Node has registered for them
    /// yet. Launched ones carry the cloud's allocatable; those still launching carry none.
    pub fn in_flight_claims(&self) -> impl Iterator<Item = &NodeClaimRecord> {
        self.nodeclaims.values().filter(|c| !c.deleting && self.node_of(c).is_none())
    }

    /// What each NodePool's nodes count against its limits, with a `nodes` count: Nodes (by their
    /// `karpenter.sh/nodepool` label, else their claim's) and claims without a Node. Nodes and claims
    /// being deleted still count, as upstream: they are billed until they are gone.
    pub fn nodepool_usage(&self) -> BTreeMap<String, Resources> {
        let mut usage: BTreeMap<String, Resources> = BTreeMap::new();
        for (node, claim) in self.nodes() {
            let pool = node.node.nodepool.as_ref().or_else(|| claim.and_then(|c| c.nodepool.as_ref()));
            if let Some(pool) = pool {
                usage.entry(pool.clone()).or_default().add_assign(&node.capacity);
            }
        }
        for claim in self.nodeclaims.values().filter(|c| self.node_of(c).is_none()) {
            if let Some(pool) = &claim.nodepool {
                usage.entry(pool.clone()).or_default().add_assign(&claim.limit_usage());
            }
        }
        usage
    }

    pub fn nodepool(&self, name: &str) -> Option<&NodePool> {
        self.nodepools.get(name)
    }

    pub fn nodepools(&self) -> impl Iterator<Item = &NodePool> {
        self.nodepools.values()
    }

    /// NodePools that may launch nodes: `Ready=True` and not being deleted (upstream
    /// `NewScheduler`); static pools do not exist in this API version.
    pub fn ready_nodepools(&self) -> impl Iterator<Item = &NodePool> {
        self.nodepools.values().filter(|p| {
            let ready =
                p.status.as_ref().is_some_and(|s| conditions::is_true(&s.conditions, conditions::READY));
            ready && p.metadata.deletion_timestamp.is_none()
        })
    }

    pub fn nodeclasses(&self) -> impl Iterator<Item = &AKSNodeClass> {
        self.nodeclasses.values()
    }

    pub fn nodeclass(&self, name: &str) -> Option<&AKSNodeClass> {
        self.nodeclasses.get(name)
    }

    /// The NodeOverlays, by name.
    pub fn node_overlays(&self) -> impl Iterator<Item = &NodeOverlay> {
        self.node_overlays.values()
    }

    /// DaemonSet pod templates as solver pods, by `namespace/name`.
    pub fn daemonsets(&self) -> impl Iterator<Item = &Pod> {
        self.daemonsets.values()
    }

    pub fn pdbs(&self) -> impl Iterator<Item = &PdbRecord> {
        self.pdbs.values()
    }

    /// Objects left out because they could not be converted, with why (for events and logs).
    pub fn invalid(&self) -> impl Iterator<Item = (Kind, &str, &FromK8sError)> {
        self.invalid.iter().map(|((kind, key), e)| (*kind, key.as_str(), e))
    }
}
