//! One copy of what many objects carry alike. The pods of one Deployment, Job or DaemonSet have the
//! same labels, the same tolerations (the API server's `DefaultTolerationSeconds` admission adds the
//! same two to nearly every pod) and the same owner; the NodeClaims of one NodePool, size, zone and
//! capacity type have the same labels and, but for a replacement's, the same annotations; the Nodes of
//! one pool and size differ in a few labels of their thirty (hostname, ids), so their label keys and
//! values are shared one string at a time. So the index keeps each distinct value once and every
//! record points at it.
//!
//! A value no record uses any more is dropped by a sweep that runs when the table has doubled since
//! the last one, so the work is constant per value shared and the table holds at most about twice the
//! values in use.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use crate::scheduling::from_k8s::FromK8sError;
use crate::scheduling::input::Toleration;
use crate::state::records::{NodeClaimRecord, NodeRecord, PodRecord};

/// When a table whose entries outlive their use is swept: once it has doubled since the last sweep,
/// and never below a floor. A sweep scans the whole table, so sweeping at a fixed size would scan a
/// table of live entries at every insert; doubling keeps the work constant per entry inserted and the
/// table at most about twice its live entries.
#[derive(Debug, Clone, Copy)]
pub struct SweepSchedule {
    /// Tables smaller than this are not swept: a sweep would free next to nothing.
    floor: usize,
    /// The table's size after the last sweep.
    kept: usize,
}

impl SweepSchedule {
    pub const fn new(floor: usize) -> Self {
        SweepSchedule { floor, kept: 0 }
    }

    /// Whether a table of `len` entries is due a sweep.
    pub fn due(&self, len: usize) -> bool {
        len >= self.floor.max(2 * self.kept)
    }

    /// Records the table's size after a sweep.
    pub fn swept(&mut self, len: usize) {
        self.kept = len;
    }
}

/// Values held once each, handed out as shared pointers.
pub struct Interner<T: ?Sized> {
    values: HashSet<Arc<T>>,
    sweeps: SweepSchedule,
}

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Interner { values: HashSet::new(), sweeps: SweepSchedule::new(SWEEP_FLOOR) }
    }
}

impl<T: ?Sized> fmt::Debug for Interner<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Interner({} values)", self.values.len())
    }
}

/// Tables smaller than this are not swept.
const SWEEP_FLOOR: usize = 64;

impl<T: ?Sized + Hash + Eq> Interner<T> {
    /// The held copy equal to `value`, or `value` itself, now held.
    pub fn share(&mut self, value: Arc<T>) -> Arc<T> {
        match self.values.get(&*value) {
            Some(held) => held.clone(),
            None => self.hold(value),
        }
    }

    /// The held copy equal to `value`, or a new copy of it, now held. Unlike [`Self::share`], nothing
    /// is allocated when a copy is already held.
    pub fn share_ref(&mut self, value: &T) -> Arc<T>
    where
        for<'a> Arc<T>: From<&'a T>,
    {
        match self.values.get(value) {
            Some(held) => held.clone(),
            None => self.hold(Arc::from(value)),
        }
    }

    /// Holds `value`, which no held copy equals.
    fn hold(&mut self, value: Arc<T>) -> Arc<T> {
        if self.sweeps.due(self.values.len()) {
            self.sweep();
        }
        self.values.insert(value.clone());
        value
    }

    /// Drops the values only this table still points at.
    fn sweep(&mut self) {
        self.values.retain(|value| Arc::strong_count(value) > 1);
        self.sweeps.swept(self.values.len());
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.values.len()
    }
}

/// The tables of the parts of pod and NodeClaim records that records share.
#[derive(Debug, Default)]
pub struct SharedParts {
    /// Label and annotation maps, of pods and NodeClaims alike.
    maps: Interner<BTreeMap<String, String>>,
    tolerations: Interner<[Toleration]>,
    /// Owners as `Kind/name` and as the owner link of the pod metrics.
    owners: Interner<str>,
    /// The keys and values of Nodes' labels: a node's pool, size, zone, image and size facts repeat
    /// on every node of its kind.
    node_label_strings: Interner<str>,
}

impl SharedParts {
    /// `record` with its labels, tolerations and owner link replaced by the held copies. The record's
    /// solver pod must be its own (just converted), as it is changed in place.
    pub fn pod(&mut self, mut record: PodRecord) -> PodRecord {
        if let Some(pod) = Arc::get_mut(&mut record.pod) {
            pod.labels = self.maps.share(std::mem::take(&mut pod.labels));
            pod.tolerations = self.tolerations.share(std::mem::take(&mut pod.tolerations));
            pod.owner = pod.owner.take().map(|owner| self.owners.share(owner));
        }
        record.owner_link = self.owners.share(record.owner_link);
        record
    }

    /// The Node as a record whose label keys and values are the held copies; a new string is
    /// allocated only for a key or value no indexed node carries yet.
    pub fn node(&mut self, node: &core::Node) -> Result<NodeRecord, FromK8sError> {
        let strings = &mut self.node_label_strings;
        NodeRecord::from_k8s_sharing_labels(node, |s| strings.share_ref(s))
    }

    /// `record` with its labels and annotations replaced by the held copies.
    pub fn nodeclaim(&mut self, mut record: NodeClaimRecord) -> NodeClaimRecord {
        record.labels = self.maps.share(record.labels);
        record.annotations = self.maps.share(record.annotations);
        record
    }
}
