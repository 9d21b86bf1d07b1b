//! AKSNodeClass and NodePool status.
//!
//! AKSNodeClass: `kubernetesVersion` from the API server's /version, `images` with one default image per
//! image family, and KubernetesVersionReady / ImagesReady / Ready. Real image resolution (listing the
//! community gallery or SIG versions and picking the newest, upstream provider `imagefamily/resolver.go`)
//! is not implemented yet: the image version is `latest` of the family's default definition.
//!
//! NodePool: NodeClassReady and Ready from its class, `resources` and `nodes` in use from the index.
//! Provisioning only sees NodePools whose Ready is True, so this writer must run for anything to launch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::nodeclaim::resource_list;
use super::{ControllerError, Shared};
use crate::apis::aksnodeclass::{ImageFamily, NodeImage};
use crate::apis::common::{NodeSelectorRequirementWithMinValues, Operator};
use crate::apis::conditions::{self, Condition, ConditionStatus};
use crate::apis::labels::{LABEL_ARCH, LABEL_SKU_HYPERV_GENERATION};
use crate::apis::{AKSNodeClass, NodePool};

/// Status is recomputed at least this often (node counts and the Kubernetes version change without a
/// NodePool or AKSNodeClass event).
const RESYNC: Duration = Duration::from_secs(10);

const UBUNTU_GALLERY: &str = "AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2";
const AZURE_LINUX_GALLERY: &str = "AKSAzureLinux-f7c7cda5-1c9a-4bdc-a222-9614c968580b";

pub async fn run<C: Send + Sync + 'static>(shared: Arc<Shared<C>>) {
    loop {
        let in_flight = shared.begin_work().await;
        if let Err(error) = sync_all(&shared).await {
            tracing::warn!(category = error.category(), %error, "status update failed");
        }
        drop(in_flight);
        tokio::select! {
            _ = shared.status_changed.notified() => {}
            _ = tokio::time::sleep(RESYNC) => {}
        }
    }
}

async fn sync_all<C>(shared: &Shared<C>) -> Result<(), ControllerError> {
    // The index keeps classes by name only; they are few, so they are listed (fresh status included).
    let classes_api: Api<AKSNodeClass> = Api::all(shared.client.clone());
    let classes = classes_api.list(&ListParams::default()).await?.items;
    if !classes.is_empty() {
        let version = kubernetes_version(&shared.client.apiserver_version().await?.git_version);
        for class in &classes {
            if let Some(status) = nodeclass_status(class, &version, &now()) {
                let patch = Patch::Merge(json!({ "status": status }));
                classes_api.patch_status(&class.name_any(), &PatchParams::default(), &patch).await?;
                tracing::info!(aksnodeclass = %class.name_any(), kubernetes_version = %version, "updated aksnodeclass status");
            }
        }
    }
    let (pools, usage, node_counts) = {
        let cluster = shared.cluster();
        let mut counts = BTreeMap::<String, i64>::new();
        for (node, claim) in cluster.nodes() {
            let pool = node.node.nodepool.as_ref().or_else(|| claim.and_then(|c| c.nodepool.as_ref()));
            if let Some(pool) = pool {
                *counts.entry(pool.clone()).or_default() += 1;
            }
        }
        (cluster.nodepools().cloned().collect::<Vec<NodePool>>(), cluster.nodepool_usage(), counts)
    };
    let api: Api<NodePool> = Api::all(shared.client.clone());
    for pool in &pools {
        let name = pool.name_any();
        let class_name = &pool.spec.template.spec.node_class_ref.name;
        let class = classes.iter().find(|c| &c.name_any() == class_name);
        let used = usage.get(&name).cloned().unwrap_or_default();
        let nodes = node_counts.get(&name).copied().unwrap_or(0);
        if let Some(status) = nodepool_status(pool, class, resource_list(&used), nodes, &now()) {
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({ "status": status })))
                .await?;
            tracing::debug!(nodepool = %name, "updated nodepool status");
        }
    }
    Ok(())
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// `v1.34.2+k3s1` → `1.34.2`.
pub fn kubernetes_version(git_version: &str) -> String {
    let v = git_version.trim_start_matches('v');
    v.split(['-', '+']).next().unwrap_or(v).to_string()
}

/// The default image of a family for a Kubernetes version (upstream: Ubuntu is 22.04 below 1.34 and
/// 24.04 from 1.34; Azure Linux 3 from 1.32).
pub fn default_image(family: ImageFamily, version: &str) -> NodeImage {
    let minor: u32 = version.split('.').nth(1).and_then(|m| m.parse().ok()).unwrap_or(0);
    let (gallery, definition) = match family {
        ImageFamily::Ubuntu if minor >= 34 => (UBUNTU_GALLERY, "2404gen2containerd"),
        ImageFamily::Ubuntu | ImageFamily::Ubuntu2204 => (UBUNTU_GALLERY, "2204gen2containerd"),
        ImageFamily::Ubuntu2404 => (UBUNTU_GALLERY, "2404gen2containerd"),
        ImageFamily::AzureLinux => (AZURE_LINUX_GALLERY, "V3gen2"),
    };
    let requirement = |key: &str, value: &str| NodeSelectorRequirementWithMinValues {
        key: key.to_string(),
        operator: Operator::In,
        values: vec![value.to_string()],
        min_values: None,
    };
    NodeImage {
        id: format!("/CommunityGalleries/{gallery}/images/{definition}/versions/latest"),
        requirements: vec![requirement(LABEL_ARCH, "amd64"), requirement(LABEL_SKU_HYPERV_GENERATION, "2")],
    }
}

/// The class's status, or None when what is stored is already right.
pub fn nodeclass_status(class: &AKSNodeClass, version: &str, now: &Time) -> Option<serde_json::Value> {
    let current = class.status.clone().unwrap_or_default();
    let family = class.spec.image_family.unwrap_or_default();
    let images = vec![default_image(family, version)];
    let generation = class.metadata.generation;
    let mut list: Vec<Condition> = current.conditions.clone();
    let t = ConditionStatus::True;
    let mut changed = conditions::set(
        &mut list,
        conditions::KUBERNETES_VERSION_READY,
        t,
        "KubernetesVersionReady",
        "",
        generation,
        now,
    );
    changed |= conditions::set(&mut list, conditions::IMAGES_READY, t, "ImagesReady", "", generation, now);
    changed |= conditions::set(&mut list, conditions::READY, t, "Ready", "", generation, now);
    changed |= current.kubernetes_version.as_deref() != Some(version) || current.images != images;
    changed.then(|| json!({ "kubernetesVersion": version, "images": images, "conditions": list }))
}

/// The pool's status, or None when what is stored is already right.
pub fn nodepool_status(
    pool: &NodePool,
    class: Option<&AKSNodeClass>,
    resources: crate::apis::common::ResourceList,
    nodes: i64,
    now: &Time,
) -> Option<serde_json::Value> {
    let current = pool.status.clone().unwrap_or_default();
    let class_name = &pool.spec.template.spec.node_class_ref.name;
    let class_ready = class
        .and_then(|c| c.status.as_ref())
        .is_some_and(|s| conditions::is_true(&s.conditions, conditions::READY));
    let (status, reason, message) = match (class, class_ready) {
        (None, _) => {
            (ConditionStatus::False, "NodeClassNotFound", format!("AKSNodeClass {class_name} not found"))
        }
        (Some(_), false) => {
            (ConditionStatus::False, "NodeClassNotReady", format!("AKSNodeClass {class_name} is not ready"))
        }
        (Some(_), true) => (ConditionStatus::True, "NodeClassReady", String::new()),
    };
    let generation = pool.metadata.generation;
    let mut list = current.conditions.clone();
    let mut changed =
        conditions::set(&mut list, conditions::NODE_CLASS_READY, status, reason, &message, generation, now);
    let ready_reason = if status == ConditionStatus::True { "Ready" } else { reason };
    changed |= conditions::set(&mut list, conditions::READY, status, ready_reason, &message, generation, now);
    changed |= current.resources != resources || current.nodes != Some(nodes);
    changed.then(|| json!({ "resources": resources, "nodes": nodes, "conditions": list }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_images() {
        assert_eq!(kubernetes_version("v1.34.2+k3s1"), "1.34.2");
        assert_eq!(kubernetes_version("v1.31.0-rc.1"), "1.31.0");
        assert!(default_image(ImageFamily::Ubuntu, "1.33.1")
            .id
            .contains("/images/2204gen2containerd/versions/latest"));
        assert!(default_image(ImageFamily::Ubuntu, "1.34.0").id.contains("/images/2404gen2containerd/"));
        assert!(default_image(ImageFamily::AzureLinux, "1.34.0")
            .id
            .starts_with("/CommunityGalleries/AKSAzureLinux-"));
    }
}
