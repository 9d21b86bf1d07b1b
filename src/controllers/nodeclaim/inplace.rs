//! In-place updates of running machines (upstream Azure provider `nodeclaim/inplaceupdate`): the tags a
//! VM and its NIC carry follow the AKSNodeClass's `spec.tags` (and `ADDITIONAL_TAGS`), and the VM gains
//! the user-assigned identities of `NODE_IDENTITIES`, without replacing the node; tags are left out of
//! the drift hash for exactly that reason.
//!
//! Every [`INTERVAL`] the leader computes, for each launched NodeClaim that is not being deleted, what
//! its machine should carry ([`CloudProvider::desired_in_place`]) and compares its hash with the
//! claim's `karpenter.azure.com/in-place-hash` annotation. Only on a difference does it PATCH the VM and
//! NIC and then record the new hash, so a steady cluster costs no Azure call.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use crate::apis::hash::hash_value;
use crate::apis::NodeClaim;
use crate::cloud::{CloudError, CloudProvider, InPlace};
use crate::controllers::Shared;

/// How often the claims are compared with their class.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// The hash of the tags and identities last written to the claim's machine.
pub const ANNOTATION_IN_PLACE_HASH: &str = "karpenter.azure.com/in-place-hash";

/// A claim whose machine is out of date.
#[derive(Debug, Clone, PartialEq)]
pub struct Stale {
    pub claim: String,
    pub provider_id: String,
    pub desired: InPlace,
    pub hash: String,
}

/// The claims whose recorded hash differs from what their class and the settings ask now.
pub fn stale<C: CloudProvider>(shared: &Shared<C>) -> Vec<Stale> {
    let cluster = shared.cluster();
    if cluster.sync_status().is_err() {
        return vec![];
    }
    let mut out = vec![];
    for claim in cluster.nodeclaims().filter(|c| !c.deleting) {
        let (Some(provider_id), Some(pool)) = (&claim.provider_id, &claim.nodepool) else { continue };
        let Some(class) = cluster.nodeclass(&claim.node_class) else { continue };
        let desired = shared.cloud.desired_in_place(pool, &class.spec.tags);
        let hash = hash_value(&json!(desired));
        if claim.annotations.get(ANNOTATION_IN_PLACE_HASH) != Some(&hash) {
            out.push(Stale { claim: claim.name.clone(), provider_id: provider_id.clone(), desired, hash });
        }
    }
    out
}

/// Runs while this replica leads.
pub async fn run<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    loop {
        for update in stale(&shared) {
            let _work = shared.begin_work(crate::operator::metrics::controller::NODECLAIM_INPLACE).await;
            apply(&shared, &update).await;
        }
        tokio::time::sleep(INTERVAL).await;
    }
}

async fn apply<C: CloudProvider>(shared: &Shared<C>, update: &Stale) {
    match shared.cloud.update_in_place(&update.provider_id, &update.desired).await {
        Ok(()) => {}
        // The machine is gone: garbage collection deletes the claim.
        Err(CloudError::NotFound(_)) => return,
        Err(error) => {
            tracing::warn!(nodeclaim = %update.claim, category = error.category(), %error, "updating tags and identities in place failed; retried next pass");
            return;
        }
    }
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    let patch = json!({ "metadata": { "annotations": { ANNOTATION_IN_PLACE_HASH: update.hash } } });
    match api.patch(&update.claim, &PatchParams::default(), &Patch::Merge(patch)).await {
        Ok(patched) => {
            shared.cluster().apply(&patched);
            tracing::info!(nodeclaim = %update.claim, tags = update.desired.tags.len(), identities = update.desired.identities.len(), "updated the machine's tags and identities in place");
        }
        Err(error) => tracing::warn!(nodeclaim = %update.claim, %error, "recording the in-place hash failed"),
    }
}
