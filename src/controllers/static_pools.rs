//! Static NodePools (`spec.replicas`): keeps each at its replica count, launching claims when it has
//! fewer (a new pool, a higher count, a node deleted or expired) and deleting the excess when it has
//! more (upstream core `pkg/controllers/static/provisioning` and `static/deprovisioning`). What to
//! launch or remove is [`crate::disruption::static_pools::decide`]; this loop acts on it. Drift of a
//! static node is the disruption loop's, through the same pure module.
//!
//! Upstream reconciles on NodePool and NodeClaim events and requeues every minute; the index here is
//! in memory, so looking every [`INTERVAL`] is cheap and catches every change within it: a look counts
//! each static pool's claims in the index and builds the disruption snapshot only when a pool does not
//! hold its count. A created claim and a deleted one go into the index at once, so the next look never
//! acts twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::{Api, ResourceExt};

use crate::apis::NodeClaim;
use crate::cloud::CloudProvider;
use crate::controllers::nodeclaim::{self, CreateError};
use crate::controllers::writes::{self, Deleted, Guard};
use crate::controllers::{metrics, Shared};
use crate::disruption::static_pools::{decide, StaticAction};
use crate::disruption::Snapshot;
use crate::state::NotSynced;

/// How often the replica counts are checked.
const INTERVAL: Duration = Duration::from_secs(2);
/// How often static pools are looked for while the gate is off.
const GATE_OFF_INTERVAL: Duration = Duration::from_secs(30);
/// How long a claim this loop deleted counts as deleting without the index saying so.
const REMOVED_MEMORY: Duration = Duration::from_secs(60);

/// Runs while this replica leads. With the `StaticCapacity` gate off (upstream's default) static pools
/// launch nothing, as upstream; each is named once in a warning, so a pool that stays empty says why.
pub async fn run<C: CloudProvider + 'static>(shared: Arc<Shared<C>>) {
    if !shared.settings.static_capacity {
        let mut warned = BTreeSet::new();
        loop {
            let pools: Vec<String> =
                shared.cluster().nodepools().filter(|p| p.is_static()).map(|p| p.name_any()).collect();
            for pool in pools.into_iter().filter(|p| warned.insert(p.clone())) {
                tracing::warn!(nodepool = %pool, "NodePool is static (spec.replicas) but the StaticCapacity feature gate is off; it launches nothing");
            }
            tokio::time::sleep(GATE_OFF_INTERVAL).await;
        }
    }
    let mut blocked: BTreeMap<String, String> = BTreeMap::new();
    // Claims this loop deleted: a claim without finalizers is gone at once, and the index learns it
    // from the watch; until then it counts as deleting here, so the next look removes no other.
    let mut removed: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        tokio::time::sleep(INTERVAL).await;
        if !listed_with_static_pools(&shared) {
            continue;
        }
        removed.retain(|_, at| at.elapsed() < REMOVED_MEMORY);
        // Every static pool holding its count is the common case: the index's claim counts say so
        // without building a snapshot, and the decision would be empty.
        if !may_act(&shared, &removed) {
            blocked.clear();
            continue;
        }
        let (mut snapshot, now) = snapshot(&shared);
        for node in snapshot.nodes.iter_mut().filter(|n| removed.contains_key(&n.nodeclaim)) {
            node.deleting = true;
            node.marked_for_deletion = true;
        }
        let actions = decide(&snapshot, now, snapshot.solve_options.max_instance_type_options);
        if actions.is_empty() {
            blocked.clear();
            continue;
        }
        let _in_flight = shared.begin_work(crate::operator::metrics::controller::STATIC_PROVISIONING).await;
        for action in actions {
            match action {
                StaticAction::Launch { nodepool, claims } => launch(&shared, &nodepool, &claims).await,
                StaticAction::Remove { nodepool, nodeclaims } => {
                    remove(&shared, &nodepool, &nodeclaims).await;
                    removed.extend(nodeclaims.into_iter().map(|name| (name, Instant::now())));
                }
                StaticAction::Blocked { nodepool, reason } => {
                    // Said once per cause, not every look.
                    if blocked.get(&nodepool) != Some(&reason) {
                        tracing::warn!(%nodepool, %reason, "static NodePool cannot reach its replica count");
                        blocked.insert(nodepool, reason);
                    }
                }
            }
        }
    }
}

/// Whether the index is synced and holds a static NodePool. Every kind listed is enough: claims still
/// launching are in the snapshot as nodes on their way, so they count (upstream's static provisioning
/// waits for the first sync only).
fn listed_with_static_pools<C>(shared: &Shared<C>) -> bool {
    let cluster = shared.cluster();
    let listed = matches!(cluster.sync_status(), Ok(()) | Err(NotSynced::Launching(_)));
    listed && cluster.nodepools().any(|p| p.is_static())
}

/// Whether [`decide`] may act: some static pool does not hold its count by the index's claim counts,
/// which are the snapshot's, with the claims this loop `removed` as deleting.
fn may_act<C>(shared: &Shared<C>, removed: &BTreeMap<String, Instant>) -> bool {
    let cluster = shared.cluster();
    let counts = cluster.claim_counts(|claim| removed.contains_key(claim));
    let may_act = cluster.nodepools().any(|pool| {
        pool.spec.replicas.is_some_and(|replicas| {
            !counts.get(&pool.name_any()).copied().unwrap_or_default().holds(replicas)
        })
    });
    may_act
}

/// The disruption snapshot, with the wall time.
fn snapshot<C: CloudProvider>(shared: &Shared<C>) -> (Snapshot, k8s_openapi::jiff::Timestamp) {
    let options = shared.solve_options();
    let (snapshot, _) = shared.cluster().disruption_snapshot(
        &|_pool, class| shared.cloud.instance_types(class),
        options,
        &Default::default(),
        &Default::default(),
    );
    (snapshot, k8s_openapi::jiff::Timestamp::now())
}

async fn launch<C: CloudProvider + 'static>(
    shared: &Shared<C>,
    nodepool: &str,
    claims: &[crate::scheduling::NewNodeClaim],
) {
    tracing::info!(%nodepool, count = claims.len(), "provisioning nodeclaims to satisfy the replica count");
    for planned in claims {
        match nodeclaim::create(shared, planned, BTreeMap::new()).await {
            Ok(created) => {
                metrics::get().nodeclaim_created(nodepool);
                tracing::info!(
                    nodeclaim = %created.name_any(),
                    %nodepool,
                    instance_type = %planned.instance_type,
                    instance_type_options = planned.instance_type_options.len(),
                    "created nodeclaim for a static NodePool"
                );
            }
            Err(CreateError::PoolGone(_)) => return,
            Err(CreateError::Kube(error)) => {
                tracing::warn!(%nodepool, %error, "creating a nodeclaim for a static NodePool failed");
                return;
            }
        }
    }
}

async fn remove<C>(shared: &Shared<C>, nodepool: &str, nodeclaims: &[String]) {
    tracing::info!(%nodepool, count = nodeclaims.len(), "deprovisioning nodeclaims to satisfy the replica count");
    let api: Api<NodeClaim> = Api::all(shared.client.clone());
    for name in nodeclaims {
        // The claim the index holds, not a newer one of the same name.
        let guard = Guard::uid(shared.cluster().nodeclaim(name).and_then(|c| c.uid.clone()));
        match writes::delete_named(&api, name, &guard, None).await {
            Ok((Deleted::Now, deleting)) => {
                if let Some(deleting) = deleting {
                    shared.cluster().apply(&deleting);
                }
                tracing::info!(nodeclaim = %name, %nodepool, "deleted nodeclaim of a static NodePool over its replica count");
            }
            Ok((Deleted::Gone | Deleted::Stale, _)) => {}
            Err(error) => {
                tracing::warn!(nodeclaim = %name, %nodepool, %error, "deleting a nodeclaim of a static NodePool failed")
            }
        }
    }
}
