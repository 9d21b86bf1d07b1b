//! Which copy of an object is newest, so the index never goes back in time.
//!
//! Two streams feed the index: the watches, in order per kind, and the controller's own writes, whose
//! responses are applied at once so the next decision sees them. They race: a watch event still on its
//! way can carry an older copy than a write just applied, and a create's response can arrive after the
//! watch already delivered the object's deletion (a NodeClaim deleted by a fast capacity error); held
//! again, such a claim has no providerID and blocks every decision until a relist (the wedge of
//! kubernetes-sigs/karpenter#3176).
//!
//! The rules, per kind and key:
//! - a copy replaces what is held only when it is newer: a greater `resourceVersion`;
//! - a copy no newer than a deletion seen under the key (a tombstone) is not applied: it is of the
//!   deleted object, or of an even older one;
//! - a deletion removes what is held only when that is not newer than it (a newer object of the same
//!   name, already applied from a write, stays).
//!
//! `resourceVersion` is opaque to clients in general; the API server's are etcd revisions, integers
//! that grow with every write in the cluster, so any two copies under one key compare, whatever their
//! uid, and that is what is compared here. A deletion carries the revision of the delete. Where a
//! copy has no such version (an object from a file), identity decides: a copy with a version unknown
//! is taken as newer, unless it is of a deleted object (same uid as a tombstone).

use std::collections::{BTreeMap, VecDeque};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Kind;

/// How many deleted objects are remembered; the oldest are forgotten first. A late copy of an object
/// deleted this many deletions ago is no longer recognised.
pub const TOMBSTONES: usize = 10_000;

/// The identity and version of one copy of an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Version {
    pub uid: Option<String>,
    pub resource_version: Option<u64>,
}

impl Version {
    pub fn of(meta: &ObjectMeta) -> Version {
        Version {
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.as_deref().and_then(|v| v.parse().ok()),
        }
    }

    /// Whether this copy is newer than `other`: by revision when both have one; otherwise unknown
    /// (`None`).
    fn newer_than(&self, other: &Version) -> Option<bool> {
        Some(self.resource_version? > other.resource_version?)
    }

    /// Both copies are of the same object: same uid, or a uid unknown on either side.
    fn same_object(&self, other: &Version) -> bool {
        match (&self.uid, &other.uid) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
    }
}

/// The versions held and the objects deleted, by kind and key.
#[derive(Debug, Default)]
pub struct Versions {
    held: BTreeMap<(Kind, String), Version>,
    tombstones: BTreeMap<(Kind, String), Version>,
    /// Tombstone keys, oldest first, to forget beyond [`TOMBSTONES`].
    order: VecDeque<(Kind, String)>,
}

impl Versions {
    /// Whether a copy `version` of `kind`/`key` may replace what is held; when it may, it is
    /// recorded as held.
    pub fn admit(&mut self, kind: Kind, key: &str, version: Version) -> bool {
        let id = (kind, key.to_string());
        if let Some(held) = self.held.get(&id) {
            if version.newer_than(held) == Some(false) {
                return false;
            }
        }
        if let Some(dead) = self.tombstones.get(&id) {
            let deleted = match version.newer_than(dead) {
                Some(newer) => !newer,
                None => version.uid.is_some() && dead.uid == version.uid,
            };
            if deleted {
                return false;
            }
        }
        self.held.insert(id, version);
        true
    }

    /// Whether the deletion of the copy `version` removes what is held (not a newer object of the
    /// same name); either way the copy's object is tombstoned.
    pub fn remove(&mut self, kind: Kind, key: &str, version: Version) -> bool {
        let id = (kind, key.to_string());
        let removes = self.held.get(&id).is_none_or(|held| match held.newer_than(&version) {
            Some(newer) => !newer,
            None => version.same_object(held),
        });
        if removes {
            self.held.remove(&id);
        }
        if version.uid.is_some() || version.resource_version.is_some() {
            self.tomb(id, version);
        }
        removes
    }

    /// The object held under `kind`/`key` is gone (a relist did not see it): tombstoned as held.
    pub fn forget(&mut self, kind: Kind, key: &str) {
        let id = (kind, key.to_string());
        if let Some(held) = self.held.remove(&id) {
            if held.uid.is_some() || held.resource_version.is_some() {
                self.tomb(id, held);
            }
        }
    }

    /// Records a deletion under `id`; of two, the newer one is kept.
    fn tomb(&mut self, id: (Kind, String), version: Version) {
        match self.tombstones.get_mut(&id) {
            Some(dead) => {
                if version.newer_than(dead) != Some(false) {
                    *dead = version;
                }
            }
            None => {
                self.tombstones.insert(id.clone(), version);
                self.order.push_back(id);
            }
        }
        while self.order.len() > TOMBSTONES {
            if let Some(oldest) = self.order.pop_front() {
                self.tombstones.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(uid: &str, rv: u64) -> Version {
        Version { uid: Some(uid.into()), resource_version: Some(rv) }
    }

    #[test]
    fn older_copies_and_copies_of_deleted_objects_are_refused() {
        let mut versions = Versions::default();
        assert!(versions.admit(Kind::NodeClaim, "a", v("u1", 5)));
        assert!(!versions.admit(Kind::NodeClaim, "a", v("u1", 4)), "older");
        assert!(!versions.admit(Kind::NodeClaim, "a", v("u1", 5)), "the same");
        assert!(versions.admit(Kind::NodeClaim, "a", v("u1", 6)));
        assert!(versions.remove(Kind::NodeClaim, "a", v("u1", 7)));
        assert!(!versions.admit(Kind::NodeClaim, "a", v("u1", 6)), "a late copy of the deleted object");
        assert!(!versions.admit(Kind::NodeClaim, "a", v("u0", 2)), "an even older object");
        assert!(versions.admit(Kind::NodeClaim, "a", v("u2", 9)), "a new object of the same name");
        assert!(!versions.remove(Kind::NodeClaim, "a", v("u1", 8)), "an older deletion keeps it");
        assert!(!versions.admit(Kind::NodeClaim, "a", v("u1", 8)));
        assert!(versions.remove(Kind::NodeClaim, "a", v("u2", 10)));
        let file = |uid: &str| Version { uid: Some(uid.into()), resource_version: None };
        assert!(!versions.admit(Kind::NodeClaim, "a", file("u2")), "no version, but the deleted uid");
        assert!(versions.admit(Kind::NodeClaim, "a", file("u3")));
        assert!(versions.admit(Kind::Pod, "a", Version::default()), "no version: taken as newer");
        assert!(versions.admit(Kind::Pod, "a", Version::default()));
    }

    #[test]
    fn tombstones_are_bounded() {
        let mut versions = Versions::default();
        for i in 0..TOMBSTONES + 10 {
            versions.remove(Kind::Pod, &format!("p{i}"), v(&format!("u{i}"), 1));
        }
        assert_eq!(versions.tombstones.len(), TOMBSTONES);
        assert!(versions.admit(Kind::Pod, "p0", v("u0", 1)), "the oldest tombstones are forgotten");
        assert!(!versions.admit(Kind::Pod, "p20", v("u20", 1)));
    }
}
