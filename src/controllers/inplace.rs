//! In-place updates of running machines (upstream Azure provider `nodeclaim/inplaceupdate`): the tags a
//! VM and its NIC carry follow the AKSNodeClass's `spec.tags` (and `ADDITIONAL_TAGS`) without replacing
//! the node; tags are left out of the drift hash for exactly that reason.
//!
//! Every [`INTERVAL`] the leader computes, for each launched NodeClaim that is not being deleted, the
//! tags its machine should carry ([`CloudProvider::desired_tags`]) and compares their hash with the
//! claim's `karpenter.azure.com/tags-hash` annotation. Only on a difference does it PATCH the VM and NIC
//! and then record the new hash, so a steady cluster costs no Azure call.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use super::Shared;
use crate::apis::NodeClaim;
use crate::cloud::{CloudError, CloudProvider};
use crate::disruption::drift::hash_value;

/// How often the claims are compared with their class.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// The hash of the tags last written to the claim's machine.
pub const ANNOTATION_TAGS_HASH: &str = "karpenter.azure.com/tags-hash";

/// A claim whose machine's tags are out of date.
#[derive(Debug, Clone, PartialEq)]
pub struct Stale {
    pub claim: String,
    pub provider_id: String,
    pub tags: BTreeMap<String, String>,
    pub hash: String,
}

/// The claims whose recorded tags hash differs from what their class asks now (pure over the index).
pub fn stale<C: CloudProvider>(shared: &Shared<C>) -> Vec<Stale> {
    let cluster = shared.cluster();
    if cluster.sync_status().is_err() {
        return vec![];
    }
    let mut out = vec![];
    for claim in cluster.nodeclaims().filter(|c| !c.deleting) {
        let (Some(provider_id), Some(pool)) = (&claim.provider_id, &claim.nodepool) else { continue };
        let Some(class) = cluster.nodeclass(&claim.node_class) else { continue };
        let tags = shared.cloud.desired_tags(pool, &class.spec.tags);
        let hash = hash_value(&json!(tags));
        if claim.annotations.get(ANNOTATION_TAGS_HASH) != Some(&hash) {
            out.push(Stale { claim: claim.name.clone(), provider_id: provider_id.clone(), tags, hash });
        }
    }
    out
}

/// Runs while this replica leads.
pub async fn run<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    loop {
        for update in stale(&shared) {
            let _work = shared.begin_work().await;
            apply(&shared, &update).await;
        }
        tokio::time::sleep(INTERVAL).await;
    }
}

async fn apply<C: CloudProvider>(shared: &Shared<C>, update: &Stale) {
    match shared.cloud.update_tags(&update.provider_id, &update.tags).await {
        Ok(()) => {}
        // The machine is gone: garbage collection deletes the claim.
        Err(CloudError::NotFound(_)) => return,
        Err(error) => {
            tracing::warn!(nodeclaim = %update.claim, category = error.category(), %error, "updating tags in place failed; retried next pass");
            return;
        }
    }
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    let patch = json!({ "metadata": { "annotations": { ANNOTATION_TAGS_HASH: update.hash } } });
    match api.patch(&update.claim, &PatchParams::default(), &Patch::Merge(patch)).await {
        Ok(patched) => {
            shared.cluster().apply(&patched);
            tracing::info!(nodeclaim = %update.claim, tags = update.tags.len(), "updated the machine's tags in place");
        }
        Err(error) => tracing::warn!(nodeclaim = %update.claim, %error, "recording the tags hash failed"),
    }
}
