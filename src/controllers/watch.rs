//! Watch tasks: one `watcher()` stream per kind feeding the shared [`crate::state::Cluster`] index.
//! `Init` / `InitApply` / `InitDone` map to `begin_relist` / `apply` / `mark_synced`, so objects deleted
//! while a watch was down are dropped at the end of its relist. No reflector store is kept: the index
//! holds only the fields decisions read.
//!
//! Side effects after an update: a provisionable pod is sent to the provisioning batcher; a NodePool or
//! AKSNodeClass change wakes the status writer.

use std::fmt::Debug;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinSet;

use super::Shared;
use crate::apis::{AKSNodeClass, NodeClaim, NodePool};
use crate::state::{self, Cluster, Kind, Object};

/// Starts one watch per kind the index holds.
pub fn spawn_all<C: Send + Sync + 'static>(
    tasks: &mut JoinSet<()>,
    shared: Arc<Shared<C>>,
    triggers: UnboundedSender<super::provisioning::Trigger>,
) {
    let client = shared.client.clone();
    let leading = shared.clone();
    let leading = move || leading.leading.load(Ordering::Relaxed);
    let pod_hook = move |cluster: &Cluster, pod: &Pod| {
        let key = state::key(pod.metadata.namespace.as_deref(), &pod.name_any());
        // A standby keeps its index warm but queues nothing: its provisioning loop is not running.
        if leading() && cluster.pod(&key).is_some_and(|p| p.is_provisionable()) {
            // The receiver lives as long as the controllers; a send error only happens at shutdown.
            let _ = triggers.send((key, std::time::Instant::now()));
        }
    };
    tasks.spawn(watch(Api::<Pod>::all(client.clone()), Kind::Pod, shared.clone(), pod_hook));
    tasks.spawn(watch(Api::<Node>::all(client.clone()), Kind::Node, shared.clone(), |_, _: &Node| {}));
    tasks.spawn(watch(
        Api::<NodeClaim>::all(client.clone()),
        Kind::NodeClaim,
        shared.clone(),
        |_, _: &NodeClaim| {},
    ));
    let notify = shared.clone();
    tasks.spawn(watch(
        Api::<NodePool>::all(client.clone()),
        Kind::NodePool,
        shared.clone(),
        move |_, _: &NodePool| notify.status_changed.notify_one(),
    ));
    let notify = shared.clone();
    tasks.spawn(watch(
        Api::<AKSNodeClass>::all(client.clone()),
        Kind::NodeClass,
        shared.clone(),
        move |_, _: &AKSNodeClass| notify.status_changed.notify_one(),
    ));
    tasks.spawn(watch(
        Api::<DaemonSet>::all(client.clone()),
        Kind::DaemonSet,
        shared.clone(),
        |_, _: &DaemonSet| {},
    ));
    tasks.spawn(watch(
        Api::<PodDisruptionBudget>::all(client.clone()),
        Kind::PodDisruptionBudget,
        shared.clone(),
        |_, _: &PodDisruptionBudget| {},
    ));
    // What constrains pods beyond their own spec: the zones of their volumes, and the namespaces a
    // pod-affinity namespaceSelector picks.
    tasks.spawn(watch(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        Kind::PersistentVolumeClaim,
        shared.clone(),
        |_, _: &PersistentVolumeClaim| {},
    ));
    tasks.spawn(watch(
        Api::<PersistentVolume>::all(client.clone()),
        Kind::PersistentVolume,
        shared.clone(),
        |_, _: &PersistentVolume| {},
    ));
    tasks.spawn(watch(
        Api::<StorageClass>::all(client.clone()),
        Kind::StorageClass,
        shared.clone(),
        |_, _: &StorageClass| {},
    ));
    tasks.spawn(watch(Api::<Namespace>::all(client), Kind::Namespace, shared, |_, _: &Namespace| {}));
}

/// Runs one watch until the task is aborted. Errors are logged; the stream backs off and relists itself.
async fn watch<K, C>(api: Api<K>, kind: Kind, shared: Arc<Shared<C>>, after_apply: impl Fn(&Cluster, &K))
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    for<'a> &'a K: Into<Object<'a>>,
{
    let mut stream = kube::runtime::watcher(api, watcher::Config::default()).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(kind = kind.name(), %error, "watch failed; retrying");
                continue;
            }
        };
        let mut cluster = shared.cluster();
        match event {
            Event::Init => cluster.begin_relist(kind),
            Event::InitApply(object) | Event::Apply(object) => {
                cluster.apply(&object);
                after_apply(&cluster, &object);
            }
            Event::InitDone => {
                cluster.mark_synced(kind);
                tracing::debug!(kind = kind.name(), "watch synced");
            }
            Event::Delete(object) => cluster.delete(&object),
        }
    }
}
