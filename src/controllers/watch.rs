//! Watch tasks: one `watcher()` stream per kind feeding the shared [`crate::state::Cluster`] index.
//! `Init` / `InitApply` / `InitDone` map to `begin_relist` / `apply` / `mark_synced`, so objects deleted
//! while a watch was down are dropped at the end of its relist. No reflector store is kept: the index
//! holds only the fields decisions read.
//!
//! The custom resources (NodeClaims, NodePools, AKSNodeClasses, NodeOverlays) are read one object at a time, so one
//! that this version cannot read (stored by another version) is set aside, logged and evented instead
//! of failing the whole list; objects that read but do not convert are reported the same way. Either
//! way the object is left out of every decision ([`Cluster::invalid`]).
//!
//! Side effects after an update: a provisionable pod is sent to the provisioning batcher; a NodePool or
//! AKSNodeClass change wakes the status writer, and so does a NodeOverlay change (watched only with
//! the `NodeOverlay` feature gate on).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, TypeMeta};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinSet;

use super::{events, Shared};
use crate::apis::{AKSNodeClass, NodeClaim, NodeOverlay, NodePool};
use crate::operator::metrics::status;
use crate::scheduling::from_k8s::FromK8sError;
use crate::state::{self, Cluster, Kind, Object};

/// Starts one watch per kind the index holds, each run by the supervisor: a watch that ends or panics
/// is started again (it relists), counted in `karpenter_azure_task_restarts_total{task="watch_<kind>"}`.
pub fn spawn_all<C: Send + Sync + 'static>(
    tasks: &mut JoinSet<()>,
    shared: Arc<Shared<C>>,
    triggers: UnboundedSender<super::provisioning::Trigger>,
) {
    let hooked = shared.clone();
    let leading = move || hooked.leading.load(Ordering::Relaxed);
    let metered = shared.clone();
    let pod_hook = move |cluster: &Cluster, pod: &Pod| {
        let key = state::key(pod.metadata.namespace.as_deref(), &pod.name_any());
        // The pod's way to a node, for the pod metrics; only the leader records durations.
        let mut state = metered.metrics_state();
        super::metrics_pods::pod_observed(super::metrics::get(), &mut state.pods, pod, leading());
        drop(state);
        // A standby keeps its index warm but queues nothing: its provisioning loop is not running.
        if leading() && cluster.pod(&key).is_some_and(|p| p.is_provisionable()) {
            // The receiver lives as long as the controllers; a send error only happens at shutdown.
            let _ = triggers.send((key, std::time::Instant::now()));
        }
    };
    // The status-condition metrics look for transitions at each delivery, as upstream's controller
    // reconciles at each event; only the leader records them.
    let observed = shared.clone();
    let status = move |cluster: &Cluster, kind: status::Kind, name: &str| {
        let record = observed.leading.load(Ordering::Relaxed);
        let mut state = observed.metrics_state();
        super::metrics_status::object_observed(
            super::metrics::get(),
            &mut state.status,
            cluster,
            kind,
            name,
            record,
        );
    };
    let notify = shared.clone();
    let (on_pool, on_class, on_claim, on_node) =
        (status.clone(), status.clone(), status.clone(), status.clone());
    let pool_hook = move |cluster: &Cluster, pool: &NodePool| {
        on_pool(cluster, status::NODEPOOL, &pool.name_any());
        notify.status_changed.notify_one();
    };
    let notify = shared.clone();
    let class_hook = move |cluster: &Cluster, class: &AKSNodeClass| {
        on_class(cluster, status::AKSNODECLASS, &class.name_any());
        notify.status_changed.notify_one();
    };
    let claim_hook =
        move |cluster: &Cluster, claim: &NodeClaim| on_claim(cluster, status::NODECLAIM, &claim.name_any());
    let node_hook = move |cluster: &Cluster, node: &Node| on_node(cluster, status::NODE, &node.name_any());
    let typed = Reading::Typed;
    // Custom resources are read object by object, so one that does not fit the types is set aside.
    let tolerant = Reading::Tolerant;
    spawn_watch(tasks, &shared, Kind::Pod, typed, pod_hook);
    spawn_watch(tasks, &shared, Kind::Node, typed, node_hook);
    spawn_watch(tasks, &shared, Kind::NodeClaim, tolerant, claim_hook);
    spawn_watch(tasks, &shared, Kind::NodePool, tolerant, pool_hook);
    spawn_watch(tasks, &shared, Kind::NodeClass, tolerant, class_hook);
    spawn_watch(tasks, &shared, Kind::DaemonSet, typed, |_, _: &DaemonSet| {});
    spawn_watch(tasks, &shared, Kind::PodDisruptionBudget, typed, |_, _: &PodDisruptionBudget| {});
    // What constrains pods beyond their own spec: the zones of their volumes, and the namespaces a
    // pod-affinity namespaceSelector picks.
    spawn_watch(tasks, &shared, Kind::PersistentVolumeClaim, typed, |_, _: &PersistentVolumeClaim| {});
    spawn_watch(tasks, &shared, Kind::PersistentVolume, typed, |_, _: &PersistentVolume| {});
    spawn_watch(tasks, &shared, Kind::StorageClass, typed, |_, _: &StorageClass| {});
    spawn_watch(tasks, &shared, Kind::Namespace, typed, |_, _: &Namespace| {});
    if shared.settings.node_overlay {
        let notify = shared.clone();
        let overlay_hook = move |cluster: &Cluster, overlay: &NodeOverlay| {
            status(cluster, status::NODEOVERLAY, &overlay.name_any());
            notify.status_changed.notify_one();
        };
        spawn_watch(tasks, &shared, Kind::NodeOverlay, tolerant, overlay_hook);
    } else {
        // Nothing to wait for: with the gate off the index holds no overlays.
        shared.cluster().mark_synced(Kind::NodeOverlay);
        tracing::info!("feature gate NodeOverlay is off: NodeOverlays are ignored");
    }
}

/// How a watch reads its objects.
#[derive(Clone, Copy)]
enum Reading {
    /// The typed list and watch: for the built-in kinds, whose copies always fit the types.
    Typed,
    /// Object by object ([`watch_tolerant`]).
    Tolerant,
}

/// Spawns the supervised watch of `kind`.
fn spawn_watch<K, C, H>(
    tasks: &mut JoinSet<()>,
    shared: &Arc<Shared<C>>,
    kind: Kind,
    reading: Reading,
    hook: H,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    for<'a> &'a K: Into<Object<'a>>,
    C: Send + Sync + 'static,
    H: Fn(&Cluster, &K) + Clone + Send + Sync + 'static,
{
    let watched = shared.clone();
    let make = move || {
        let (shared, hook) = (watched.clone(), hook.clone());
        async move {
            let client = shared.client.clone();
            match reading {
                Reading::Typed => watch(Api::<K>::all(client), kind, shared, hook).await,
                Reading::Tolerant => watch_tolerant(client, kind, shared, hook).await,
            }
        }
    };
    tasks.spawn(shared.supervisor.run(watch_task(kind), make));
}

/// The supervisor's name of the watch of `kind`.
fn watch_task(kind: Kind) -> &'static str {
    match kind {
        Kind::Pod => "watch_pod",
        Kind::Node => "watch_node",
        Kind::NodeClaim => "watch_nodeclaim",
        Kind::NodePool => "watch_nodepool",
        Kind::NodeClass => "watch_aksnodeclass",
        Kind::DaemonSet => "watch_daemonset",
        Kind::PodDisruptionBudget => "watch_poddisruptionbudget",
        Kind::PersistentVolumeClaim => "watch_persistentvolumeclaim",
        Kind::PersistentVolume => "watch_persistentvolume",
        Kind::StorageClass => "watch_storageclass",
        Kind::Namespace => "watch_namespace",
        Kind::NodeOverlay => "watch_nodeoverlay",
    }
}

/// A watched object as read: the typed object, or, for a copy that does not fit the API types, its
/// metadata and why.
enum Read<K> {
    Object(K),
    // Boxed: rare, and the metadata is large.
    Unreadable(Box<ObjectMeta>, String),
}

/// Runs one watch of typed objects until the task is aborted. The API server validates the built-in
/// kinds, so their objects always decode.
async fn watch<K, C>(api: Api<K>, kind: Kind, shared: Arc<Shared<C>>, after_apply: impl Fn(&Cluster, &K))
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    for<'a> &'a K: Into<Object<'a>>,
{
    let stream = kube::runtime::watcher(api, watcher::Config::default()).default_backoff().boxed();
    run(stream, kind, &shared, Read::Object, after_apply).await;
}

/// Runs one watch of a custom resource, read object by object: a copy this version's types cannot
/// read (written by another version of the controller, say a requirement operator it does not know)
/// is set aside with why ([`Cluster::set_aside`]), instead of failing the whole list and leaving the
/// kind unsynced.
async fn watch_tolerant<K, C>(
    client: kube::Client,
    kind: Kind,
    shared: Arc<Shared<C>>,
    after_apply: impl Fn(&Cluster, &K),
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    for<'a> &'a K: Into<Object<'a>>,
{
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let stream = kube::runtime::watcher(api, watcher::Config::default()).default_backoff().boxed();
    let read = move |object: DynamicObject| read_as::<K>(object, &resource);
    run(stream, kind, &shared, read, after_apply).await;
}

/// `object` as a `K`, or why it cannot be one.
fn read_as<K: DeserializeOwned>(mut object: DynamicObject, resource: &ApiResource) -> Read<K> {
    // Items of a list may come without their type; the typed object needs it.
    if object.types.is_none() {
        object.types =
            Some(TypeMeta { api_version: resource.api_version.clone(), kind: resource.kind.clone() });
    }
    let meta = object.metadata.clone();
    match serde_json::to_value(&object).and_then(serde_json::from_value::<K>) {
        Ok(typed) => Read::Object(typed),
        Err(error) => Read::Unreadable(Box::new(meta), error.to_string()),
    }
}

/// Feeds a watch's events into the index; errors are logged and the stream backs off and relists.
/// An object the index leaves out (unreadable, or not convertible) is logged and evented once per
/// version.
async fn run<K, W, C>(
    mut stream: futures::stream::BoxStream<'static, watcher::Result<Event<W>>>,
    kind: Kind,
    shared: &Shared<C>,
    read: impl Fn(W) -> Read<K>,
    after_apply: impl Fn(&Cluster, &K),
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    for<'a> &'a K: Into<Object<'a>>,
{
    let mut reported: BTreeMap<String, Option<String>> = BTreeMap::new();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                shared.watch_health.failed(kind, tokio::time::Instant::now());
                tracing::warn!(kind = kind.name(), %error, "watch failed; retrying");
                continue;
            }
        };
        shared.watch_health.delivered(kind);
        let mut left_out = None;
        {
            let mut cluster = shared.cluster();
            match event {
                Event::Init => cluster.begin_relist(kind),
                Event::InitApply(object) | Event::Apply(object) => {
                    let meta = match read(object) {
                        Read::Object(object) => {
                            cluster.apply(&object);
                            after_apply(&cluster, &object);
                            object.meta().clone()
                        }
                        Read::Unreadable(meta, why) => {
                            cluster.set_aside(kind, &meta, FromK8sError::Undecodable { message: why });
                            *meta
                        }
                    };
                    let key = state::key(meta.namespace.as_deref(), meta.name.as_deref().unwrap_or_default());
                    match cluster.invalid_reason(kind, &key) {
                        Some(why) if reported.get(&key) != Some(&meta.resource_version) => {
                            reported.insert(key, meta.resource_version.clone());
                            left_out = Some((meta, why.to_string()));
                        }
                        Some(_) => {}
                        None => drop(reported.remove(&key)),
                    }
                }
                Event::InitDone => {
                    cluster.mark_synced(kind);
                    tracing::debug!(kind = kind.name(), "watch synced");
                }
                Event::Delete(object) => {
                    let meta = match read(object) {
                        Read::Object(object) => {
                            cluster.delete(&object);
                            object.meta().clone()
                        }
                        Read::Unreadable(meta, _) => {
                            cluster.delete_unreadable(kind, &meta);
                            *meta
                        }
                    };
                    reported.remove(&state::key(
                        meta.namespace.as_deref(),
                        meta.name.as_deref().unwrap_or_default(),
                    ));
                }
            }
        }
        if let Some((meta, why)) = left_out {
            let name = meta.name.clone().unwrap_or_default();
            tracing::warn!(kind = kind.name(), name = %name, namespace = meta.namespace.as_deref().unwrap_or(""), %why, "object left out of every decision: it cannot be read");
            let reference = ObjectReference {
                api_version: Some(K::api_version(&()).to_string()),
                kind: Some(K::kind(&()).to_string()),
                name: meta.name,
                namespace: meta.namespace,
                uid: meta.uid,
                resource_version: meta.resource_version,
                ..ObjectReference::default()
            };
            shared.events.publish(events::unreadable(&why), reference).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dynamic(operator: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "uid": "u", "resourceVersion": "7"},
            "spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "d"},
                     "requirements": [{"key": "karpenter.azure.com/sku-cpu", "operator": operator, "values": ["4"]}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_custom_resource_this_version_cannot_read_is_set_aside_with_why_and_the_rest_of_the_kind_syncs() {
        let resource = ApiResource::erase::<NodeClaim>(&());
        let Read::Unreadable(meta, why) = read_as::<NodeClaim>(dynamic("Between"), &resource) else {
            panic!("an operator this version does not know reads")
        };
        assert!(why.contains("Between"), "{why}");
        let Read::Object(good) = read_as::<NodeClaim>(dynamic("Gt"), &resource) else { panic!("Gt reads") };
        let mut other = good.clone();
        other.metadata.name = Some("other".into());
        other.metadata.uid = Some("u2".into());
        other.status =
            serde_json::from_value(serde_json::json!({"providerID": "azure:///vm/other"})).unwrap();

        let mut cluster = Cluster::new();
        for kind in Kind::ALL {
            cluster.mark_synced(kind);
        }
        cluster.begin_relist(Kind::NodeClaim);
        cluster.set_aside(Kind::NodeClaim, &meta, FromK8sError::Undecodable { message: why });
        cluster.apply(&other);
        cluster.mark_synced(Kind::NodeClaim);
        assert!(cluster.synced(), "{:?}", cluster.sync_status());
        assert!(cluster.nodeclaim("c").is_none() && cluster.nodeclaim("other").is_some());
        let reason = cluster.invalid_reason(Kind::NodeClaim, "c").map(|e| e.category());
        assert_eq!(reason, Some("Undecodable"), "kept as set aside through the relist");
        // A readable copy written later replaces it; the unreadable one's deletion then keeps it.
        let mut fixed = good;
        fixed.metadata.resource_version = Some("8".into());
        cluster.apply(&fixed);
        assert!(cluster.nodeclaim("c").is_some() && cluster.invalid_reason(Kind::NodeClaim, "c").is_none());
        cluster.delete_unreadable(Kind::NodeClaim, &meta);
        assert!(cluster.nodeclaim("c").is_some(), "the deletion of an older copy keeps the newer");
    }
}
