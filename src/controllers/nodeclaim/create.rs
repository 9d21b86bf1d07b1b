//! Creating a planned NodeClaim: the one path provisioning and disruption replacements share.

use std::collections::BTreeMap;

use kube::api::PostParams;
use kube::Api;

use crate::apis::{AKSNodeClass, NodeClaim, NodePool};
use crate::cloud::CloudProvider;
use crate::controllers::nodeclaim::build;
use crate::controllers::Shared;
use crate::scheduling::NewNodeClaim;

/// Why a planned NodeClaim was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The plan's NodePool was deleted after the plan was made.
    #[error("NodePool {0} is gone")]
    PoolGone(String),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// Creates the NodeClaim of `planned` from its NodePool and AKSNodeClass as the index holds them now
/// ([`build`]), with `annotations` added (and upstream's overlay annotations when a NodeOverlay priced
/// or extended one of its sizes), and applies the stored claim to the index at once, so the
/// next snapshot counts it as capacity in flight before its watch event arrives.
pub async fn create<C: CloudProvider>(
    shared: &Shared<C>,
    planned: &NewNodeClaim,
    mut annotations: BTreeMap<String, String>,
) -> Result<NodeClaim, CreateError> {
    let (pool, class) = {
        let cluster = shared.cluster();
        let pool = cluster.nodepool(&planned.nodepool).cloned();
        let class =
            pool.as_ref().and_then(|p| cluster.nodeclass(&p.spec.template.spec.node_class_ref.name).cloned());
        let catalog = |_: &NodePool, class: Option<&AKSNodeClass>| shared.cloud.instance_types(class);
        annotations.extend(cluster.overlay_annotations(
            &planned.nodepool,
            &planned.instance_type_options,
            &catalog,
        ));
        (pool, class)
    };
    let pool = pool.ok_or_else(|| CreateError::PoolGone(planned.nodepool.clone()))?;
    let mut object = build(planned, &pool, class.as_ref());
    if !annotations.is_empty() {
        object.metadata.annotations.get_or_insert_with(Default::default).extend(annotations);
    }
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    let created = api.create(&PostParams::default(), &object).await?;
    shared.cluster().apply(&created);
    Ok(created)
}
