//! Every write that rests on what the writer read, and what a conflict (409) or a missing object
//! (404) means for it: the one place to check the controller's most subtle correctness rule.
//!
//! The reflector can hand a reconcile an object older than the last write (the watch event is still on
//! its way), and other writers (the kubelet, kube-controller-manager, a user) change objects under us.
//! A write decided on a read therefore carries that read's `resourceVersion` (patches) or uid and
//! version (deletes) as a precondition, and the API server refuses it when the object changed since.
//! Two policies, each used where it fits:
//! - **Guarded** ([`patch`], [`patch_status`], [`patch_status_at`], [`delete`], [`delete_named`]): a
//!   refused write is [`None`] / [`Deleted::Stale`], never an error. The caller drops the step without
//!   a backoff and without counting, logging or reporting it; the watch event that follows brings the
//!   newer object and the next reconcile decides again on it. A 404 is the same: the object went, and
//!   its deletion event follows. This is how upstream core's NodeClaim lifecycle treats conflicts (it
//!   requeues at once). Deletes decided on the index rather than on an object carry the uid the index
//!   holds ([`Guard::uid`]), so a newer object of the same name is never deleted for an older one.
//! - **Read, change, write** ([`update_on_conflict`]): for changes that must land whatever else
//!   changed (the `karpenter.sh/disrupted` taint, the disruption-reason condition), the object is read
//!   fresh, the change recomputed on it and written with that read's version, up to [`UPDATE_ATTEMPTS`]
//!   times; the last conflict is an error.

use std::fmt::Debug;

use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

/// How many times [`update_on_conflict`] reads and writes again after a conflict.
pub const UPDATE_ATTEMPTS: usize = 4;

/// Which part of an object a patch writes: the object (metadata, spec) or its `status` subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Object,
    Status,
}

/// A merge patch of `body` guarded by `read`'s resourceVersion: the object as stored after the patch,
/// or None when the object changed or went since it was read.
pub async fn patch<K>(api: &Api<K>, read: &K, body: Value) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    guarded(api, Part::Object, &read.name_any(), read.resource_version(), body).await
}

/// A merge patch of the `status` subresource, guarded like [`patch`].
pub async fn patch_status<K>(api: &Api<K>, read: &K, body: Value) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    guarded(api, Part::Status, &read.name_any(), read.resource_version(), body).await
}

/// [`patch_status`] for a writer that holds the name and version it read rather than the object (the
/// index's records).
pub async fn patch_status_at<K>(
    api: &Api<K>,
    name: &str,
    version: Option<String>,
    body: Value,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    guarded(api, Part::Status, name, version, body).await
}

/// The merge patch `body` with `metadata.resourceVersion` set to `version`: the API server applies it
/// only to that version. (Without a version, as for objects built in tests, the write is unguarded.)
fn with_version(mut body: Value, version: Option<String>) -> Value {
    body["metadata"]["resourceVersion"] = json!(version);
    body
}

async fn guarded<K>(
    api: &Api<K>,
    part: Part,
    name: &str,
    version: Option<String>,
    body: Value,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch = Patch::Merge(with_version(body, version));
    let params = PatchParams::default();
    let written = match part {
        Part::Object => api.patch(name, &params, &patch).await,
        Part::Status => api.patch_status(name, &params, &patch).await,
    };
    unless_stale(written)
}

/// A guarded write's stored object, or None when it was refused because the object changed or went.
fn unless_stale<K>(written: Result<K, kube::Error>) -> Result<Option<K>, kube::Error> {
    match written {
        Ok(stored) => Ok(Some(stored)),
        Err(e) if is_stale(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A refusal that means "the object is not what you read": changed (409) or gone (404).
pub fn is_stale(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if e.code == 409 || e.code == 404)
}

/// What a guarded delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// Deleted (or marked for deletion, when it has finalizers) by this call.
    Now,
    /// Already gone (404).
    Gone,
    /// Changed since it was read (409: uid or resourceVersion no longer match).
    Stale,
}

/// What a delete requires of the stored object: the uid it had when read (a replacement of the same
/// name is another object), and its resourceVersion when the decision rests on the object's content.
/// A uid the reader did not have (None) leaves the identity unchecked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Guard {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl Guard {
    /// `read`'s identity, and its version when `same_version`.
    pub fn of<K: Resource>(read: &K, same_version: bool) -> Guard {
        Guard { uid: read.uid(), resource_version: if same_version { read.resource_version() } else { None } }
    }

    /// The object with this uid, whatever changed in it since it was read.
    pub fn uid(uid: Option<String>) -> Guard {
        Guard { uid, resource_version: None }
    }

    /// As the API's delete preconditions (also for an eviction's delete options).
    pub fn preconditions(&self) -> Preconditions {
        Preconditions { uid: self.uid.clone(), resource_version: self.resource_version.clone() }
    }
}

/// Deletes `read` only if it is still the object that was read: same uid, and same resourceVersion
/// when `same_version` (a decision that rests on the object's content; a uid alone suffices when only
/// its identity matters, as for a pod that may have been replaced by one of the same name).
pub async fn delete<K>(api: &Api<K>, read: &K, same_version: bool) -> Result<Deleted, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let (deleted, _) = delete_named(api, &read.name_any(), &Guard::of(read, same_version), None).await?;
    Ok(deleted)
}

/// Deletes `name` only if the stored object meets `guard`, with `grace_seconds` instead of the object's
/// own grace period when given (pods). With the outcome, the object the API answered with when it
/// is only marked for deletion (finalizers hold it), for the caller's index.
pub async fn delete_named<K>(
    api: &Api<K>,
    name: &str,
    guard: &Guard,
    grace_seconds: Option<u32>,
) -> Result<(Deleted, Option<K>), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let params = DeleteParams {
        preconditions: Some(guard.preconditions()),
        grace_period_seconds: grace_seconds,
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(answer) => Ok((Deleted::Now, answer.left())),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok((Deleted::Gone, None)),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok((Deleted::Stale, None)),
        Err(e) => Err(e),
    }
}

/// What [`update_on_conflict`] did.
#[derive(Debug)]
pub enum Updated<K> {
    /// Written; the object as stored.
    Written(K),
    /// The fresh read already had the change: nothing written.
    Unchanged,
    /// The object does not exist.
    Gone,
}

/// Reads `name`, asks `change` for the merge patch that the fresh object needs (None: nothing to do),
/// and writes it guarded by that read's version; on a conflict, reads and asks again, at most
/// [`UPDATE_ATTEMPTS`] times.
pub async fn update_on_conflict<K>(
    api: &Api<K>,
    part: Part,
    name: &str,
    mut change: impl FnMut(&K) -> Option<Value>,
) -> Result<Updated<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut attempt = 1;
    loop {
        let Some(current) = api.get_opt(name).await? else { return Ok(Updated::Gone) };
        let Some(body) = change(&current) else { return Ok(Updated::Unchanged) };
        match guarded(api, part, name, current.resource_version(), body).await {
            Ok(Some(stored)) => return Ok(Updated::Written(stored)),
            // Changed (or gone) since the read: the next read tells which.
            Ok(None) if attempt < UPDATE_ATTEMPTS => attempt += 1,
            Ok(None) => return Err(conflict(name, attempt)),
            Err(e) => return Err(e),
        }
    }
}

/// The error of an update that lost every race.
fn conflict(name: &str, attempts: usize) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure(
            &format!("{name}: the object changed under each of {attempts} writes"),
            "Conflict",
        )
        .with_code(409)
        .boxed(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_read_guards_the_patch_and_keeps_the_rest() {
        let body = json!({ "metadata": { "labels": { "a": "b" } }, "spec": { "taints": [] } });
        let guarded = with_version(body, Some("42".into()));
        assert_eq!(
            guarded,
            json!({ "metadata": { "labels": { "a": "b" }, "resourceVersion": "42" }, "spec": { "taints": [] } })
        );
        // A status-only body gains the metadata it lacks.
        assert_eq!(
            with_version(json!({ "status": { "x": 1 } }), Some("7".into())),
            json!({ "metadata": { "resourceVersion": "7" }, "status": { "x": 1 } })
        );
    }

    #[test]
    fn conflicts_and_missing_objects_are_stale_other_errors_are_not() {
        let api_error =
            |code| kube::Error::Api(kube::core::Status::failure("x", "y").with_code(code).boxed());
        assert!(is_stale(&api_error(409)));
        assert!(is_stale(&api_error(404)));
        assert!(!is_stale(&api_error(500)));
        assert!(!is_stale(&api_error(422)));
        assert!(matches!(unless_stale::<u8>(Err(api_error(409))), Ok(None)));
        assert!(matches!(unless_stale::<u8>(Ok(3)), Ok(Some(3))));
        assert!(unless_stale::<u8>(Err(api_error(403))).is_err());
    }

    #[test]
    fn a_delete_guard_names_the_uid_read_and_the_version_only_when_asked() {
        let mut node = k8s_openapi::api::core::v1::Node::default();
        node.metadata.uid = Some("u-1".into());
        node.metadata.resource_version = Some("9".into());
        let identity = Guard::of(&node, false).preconditions();
        assert_eq!((identity.uid.as_deref(), identity.resource_version), (Some("u-1"), None));
        let content = Guard::of(&node, true).preconditions();
        assert_eq!((content.uid.as_deref(), content.resource_version.as_deref()), (Some("u-1"), Some("9")));
        assert_eq!(Guard::uid(None).preconditions().uid, None, "an unknown uid checks nothing");
    }
}
