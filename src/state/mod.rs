//! The cluster index: a synchronous, in-memory view of the objects provisioning and disruption decide
//! on (Pods, Nodes, NodeClaims, NodePools, AKSNodeClasses, NodeOverlays, DaemonSets,
//! PodDisruptionBudgets, and the PersistentVolumeClaims, PersistentVolumes, StorageClasses and
//! Namespaces that constrain pods), fed by
//! watch tasks through [`Cluster::apply`] / [`Cluster::delete`], gated by [`Cluster::synced`], and
//! turned into plain solver input by [`Cluster::snapshot`].
//!
//! Pure and synchronous: no kube client, no tokio, no clock. The watch tasks (in `controllers/`) own
//! the I/O and hold the index behind a lock; every query here sees one consistent state, so the
//! upstream rule "snapshot nodes before pods" (over-estimate capacity rather than launch twice) holds
//! trivially inside one snapshot.
//!
//! Objects are converted on arrival into compact records ([`records`]) holding only what decisions
//! read; whole Pods and Nodes are never kept, so memory grows with the fields used, not with
//! `managedFields` and status noise.

mod cluster;
mod disruption;
#[cfg(test)]
mod disruption_tests;
mod overlay_memo;
pub mod records;
mod shared;
#[cfg(test)]
mod shared_tests;
mod snapshot;
pub mod versions;
#[cfg(test)]
mod versions_tests;
// The simulator's tests reuse the small cluster fixture to compare their assembly with the snapshot.
#[cfg(test)]
pub(crate) mod tests;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::apis::{AKSNodeClass, NodeClaim, NodeOverlay, NodePool};

pub use cluster::{Cluster, NotSynced};
pub use records::{NodeClaimRecord, NodeRecord, PdbRecord, PodPhase, PodRecord};
pub use shared::SweepSchedule;

/// The kinds of object the index holds; each is watched and synced on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pod,
    Node,
    NodeClaim,
    NodePool,
    NodeClass,
    DaemonSet,
    PodDisruptionBudget,
    PersistentVolumeClaim,
    PersistentVolume,
    StorageClass,
    Namespace,
    NodeOverlay,
}

impl Kind {
    pub const ALL: [Kind; 12] = [
        Kind::Pod,
        Kind::Node,
        Kind::NodeClaim,
        Kind::NodePool,
        Kind::NodeClass,
        Kind::DaemonSet,
        Kind::PodDisruptionBudget,
        Kind::PersistentVolumeClaim,
        Kind::PersistentVolume,
        Kind::StorageClass,
        Kind::Namespace,
        // Last, so the kinds before it keep their places. With the `NodeOverlay` feature gate off
        // nothing watches it and the controller marks it synced at start (no overlays).
        Kind::NodeOverlay,
    ];

    /// The Kubernetes kind name, for logs and events.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::Node => "Node",
            Kind::NodeClaim => "NodeClaim",
            Kind::NodePool => "NodePool",
            Kind::NodeClass => "AKSNodeClass",
            Kind::DaemonSet => "DaemonSet",
            Kind::PodDisruptionBudget => "PodDisruptionBudget",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::PersistentVolume => "PersistentVolume",
            Kind::StorageClass => "StorageClass",
            Kind::Namespace => "Namespace",
            Kind::NodeOverlay => "NodeOverlay",
        }
    }
}

/// An object as a watch delivers it, borrowed: the index copies out only what it keeps.
#[derive(Clone, Copy, Debug)]
pub enum Object<'a> {
    Pod(&'a Pod),
    Node(&'a Node),
    NodeClaim(&'a NodeClaim),
    NodePool(&'a NodePool),
    NodeClass(&'a AKSNodeClass),
    DaemonSet(&'a DaemonSet),
    PodDisruptionBudget(&'a PodDisruptionBudget),
    PersistentVolumeClaim(&'a PersistentVolumeClaim),
    PersistentVolume(&'a PersistentVolume),
    StorageClass(&'a StorageClass),
    Namespace(&'a Namespace),
    NodeOverlay(&'a NodeOverlay),
}

impl Object<'_> {
    /// The object's metadata.
    pub fn meta(&self) -> &ObjectMeta {
        match self {
            Object::Pod(o) => &o.metadata,
            Object::Node(o) => &o.metadata,
            Object::NodeClaim(o) => &o.metadata,
            Object::NodePool(o) => &o.metadata,
            Object::NodeClass(o) => &o.metadata,
            Object::DaemonSet(o) => &o.metadata,
            Object::PodDisruptionBudget(o) => &o.metadata,
            Object::PersistentVolumeClaim(o) => &o.metadata,
            Object::PersistentVolume(o) => &o.metadata,
            Object::StorageClass(o) => &o.metadata,
            Object::Namespace(o) => &o.metadata,
            Object::NodeOverlay(o) => &o.metadata,
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Object::Pod(_) => Kind::Pod,
            Object::Node(_) => Kind::Node,
            Object::NodeClaim(_) => Kind::NodeClaim,
            Object::NodePool(_) => Kind::NodePool,
            Object::NodeClass(_) => Kind::NodeClass,
            Object::DaemonSet(_) => Kind::DaemonSet,
            Object::PodDisruptionBudget(_) => Kind::PodDisruptionBudget,
            Object::PersistentVolumeClaim(_) => Kind::PersistentVolumeClaim,
            Object::PersistentVolume(_) => Kind::PersistentVolume,
            Object::StorageClass(_) => Kind::StorageClass,
            Object::Namespace(_) => Kind::Namespace,
            Object::NodeOverlay(_) => Kind::NodeOverlay,
        }
    }
}

macro_rules! object_from {
    ($($variant:ident => $ty:ty),* $(,)?) => {$(
        impl<'a> From<&'a $ty> for Object<'a> {
            fn from(o: &'a $ty) -> Self {
                Object::$variant(o)
            }
        }
    )*};
}

object_from!(
    Pod => Pod,
    Node => Node,
    NodeClaim => NodeClaim,
    NodePool => NodePool,
    NodeClass => AKSNodeClass,
    DaemonSet => DaemonSet,
    PodDisruptionBudget => PodDisruptionBudget,
    PersistentVolumeClaim => PersistentVolumeClaim,
    PersistentVolume => PersistentVolume,
    StorageClass => StorageClass,
    Namespace => Namespace,
    NodeOverlay => NodeOverlay,
);

/// The index key of an object: `namespace/name` for namespaced kinds, `name` for cluster-scoped ones
/// (Nodes, NodeClaims, NodePools, AKSNodeClasses).
pub fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}
