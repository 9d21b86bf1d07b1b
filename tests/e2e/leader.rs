//! Leader election with two replicas (issue: operations): only the lease holder provisions; when it is
//! SIGKILLed mid-launch the standby takes over within 15 s and finishes the work without creating any
//! NodeClaim or VM twice; a SIGTERMed leader releases the lease so a standby takes over at once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::Api;
use serde_json::Value;

use super::lookups::{claims_of, condition_is_true, is_running, list_pods};
use super::{cleanup, cluster, manifests, objects, prometheus, setup, wait};
use fake_azure::arm::{Fault, Target};

const NAME: &str = "e2e-leader";
const APP: &str = "web";
/// The chart's release namespace: the chart's Role grants the Lease there.
const LEASE_NAMESPACE: &str = "karpenter";
const LEASE_NAME: &str = "karpenter-leader-election";
/// The bound for a standby to take over from a dead leader.
const TAKEOVER: Duration = Duration::from_secs(15);
const CONVERGE: Duration = Duration::from_secs(120);

fn election_env(replica: &str) -> Vec<(&'static str, String)> {
    vec![
        ("DISABLE_LEADER_ELECTION", "false".to_string()),
        ("LEADER_ELECTION_NAMESPACE", LEASE_NAMESPACE.to_string()),
        ("LEADER_ELECTION_NAME", LEASE_NAME.to_string()),
        // The identity's host part: tells the test which replica holds the lease.
        ("POD_NAME", replica.to_string()),
    ]
}

/// The replica name (`POD_NAME`) of the current holder, if any.
async fn holder(leases: &Api<Lease>) -> Option<String> {
    let lease = leases.get_opt(LEASE_NAME).await.ok().flatten()?;
    let identity = lease.spec?.holder_identity?;
    identity.split('_').next().map(str::to_string)
}

async fn wait_holder(leases: &Api<Lease>, want: &[&str], timeout: Duration) -> (String, Duration) {
    let started = Instant::now();
    let holder = wait::until("a replica to hold the lease", timeout, || async {
        match holder(leases).await {
            Some(h) if want.contains(&h.as_str()) => Ok(h),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
    (holder, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_within_15s_and_nothing_is_created_twice() {
    let _lease = LEASE_IN_USE.lock().await;
    let client = cluster::shared().client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let _ = leases.delete(LEASE_NAME, &DeleteParams::default()).await;

    let a = setup::controller("leader-a")
        .namespaces(&[NAME, LEASE_NAMESPACE])
        .envs(&election_env("replica-a"))
        .start(&client)
        .await;
    let (first, _) = wait_holder(&leases, &["replica-a"], Duration::from_secs(30)).await;
    let mut b = a.spawn_replica("leader-b", &election_env("replica-b"));
    let pool = manifests::node_pool(NAME, Some("D"));
    setup::class_and_pool_ready(&client, &a, &manifests::node_class(NAME), &pool).await;

    // VMs stay Creating for 6 s, so the leader dies with launches in flight.
    let fake = a.fake();
    fake.inject(Fault::SlowProvisioning { delay_ms: 6_000, target: Target::default() });
    let first_batch = 6;
    let deployment = |replicas| manifests::deployment(NAME, APP, NAME, replicas, "500m", "1Gi");
    objects::apply(&client, &deployment(first_batch)).await.expect("applying the Deployment");
    let before_kill = wait::until("a NodeClaim of the first batch", Duration::from_secs(60), || async {
        let claims = claims_of(&client, NAME).await?;
        if claims.is_empty() {
            Err("no NodeClaim yet".to_string())
        } else {
            Ok(claim_names(&claims))
        }
    })
    .await;
    assert!(b.exit_status().is_none(), "the standby exited");
    a.kill();
    let killed = Instant::now();
    let (second, takeover) = wait_holder(&leases, &["replica-b"], TAKEOVER + Duration::from_secs(5)).await;
    println!(
        "e2e leader election: {first} SIGKILLed with {} NodeClaims launching; {second} took over {takeover:.1?} later",
        before_kill.len()
    );
    assert!(takeover <= TAKEOVER, "takeover took {takeover:?}, more than {TAKEOVER:?}");
    assert_eq!(leader_status(b.metrics_port()).await, Some(1.0), "the new leader's metric");
    fake.clear_faults();

    // The new leader finishes the dead leader's launches and provisions for new pods.
    let replicas = first_batch + 6;
    objects::apply(&client, &deployment(replicas)).await.expect("scaling the Deployment");
    let claims = wait::until("all pods Running and every NodeClaim Registered", CONVERGE, || async {
        let pods = list_pods(&client, NAME, APP).await?;
        let running = pods.iter().filter(|p| is_running(p)).count();
        let claims = claims_of(&client, NAME).await?;
        let registered = claims.iter().all(|c| condition_is_true(c, "Registered"));
        if running == replicas && registered {
            Ok(claims)
        } else {
            Err(format!("{running}/{replicas} pods Running; claims {:?}", claim_names(&claims)))
        }
    })
    .await;
    assert!(before_kill.is_subset(&claim_names(&claims)), "a claim of the dead leader vanished");
    let pods = list_pods(&client, NAME, APP).await.expect("listing pods");
    assert_every_node_is_used(&claims, &pods);
    let puts: BTreeMap<String, u32> = claims
        .iter()
        .map(|c| format!("aks-{}", c["metadata"]["name"].as_str().unwrap_or_default()))
        .map(|vm| (vm.clone(), fake.vm_put_count(&vm)))
        .collect();
    assert!(puts.values().all(|n| *n == 1), "each claim's VM should have been PUT exactly once: {puts:?}");
    let pool_vms =
        fake.vms().iter().filter(|vm| vm.document["tags"]["karpenter.sh_nodepool"] == NAME).count();
    assert_eq!(pool_vms, claims.len(), "one VM per NodeClaim");
    println!(
        "e2e leader election: {replicas} pods Running on {} NodeClaims {:.1?} after the kill; one PUT per VM",
        claims.len(),
        killed.elapsed()
    );

    // A third replica stands by; SIGTERM on the leader releases the lease, so the handover is immediate.
    let mut c = a.spawn_replica("leader-c", &election_env("replica-c"));
    // Standing by: its metrics server is up and it has started campaigning (it sets the gauge to 0 then).
    wait::until("replica-c to stand by", Duration::from_secs(30), || async {
        match leader_status(c.metrics_port()).await {
            Some(0.0) => Ok(()),
            other => Err(format!("leader_election_master_status {other:?}")),
        }
    })
    .await;
    let terminated = Instant::now();
    let status = b.terminate(Duration::from_secs(40)).expect("the leader exits after SIGTERM");
    let exited_after = terminated.elapsed();
    assert!(status.success(), "SIGTERM should be a clean exit: {status}");
    assert!(b.log().contains("released the leader lease"), "the leader did not release its lease");
    assert_eq!(leader_status(c.metrics_port()).await, Some(0.0), "a standby's metric");
    let (_, handover) = wait_holder(&leases, &["replica-c"], TAKEOVER).await;
    let handover = handover + exited_after;
    println!("e2e leader election: SIGTERM → exit {exited_after:.1?}, replica-c leads {handover:.1?} after the signal");
    assert!(handover < Duration::from_secs(8), "a released lease should be taken at once, took {handover:?}");

    let deployment = manifests::deployment(NAME, APP, NAME, 0, "500m", "1Gi");
    cleanup::remove(&client, NAME, &[deployment], || c.exit_status().is_none()).await;
}

/// `leader_election_master_status{name=<lease>}` of the replica serving metrics on `port`.
async fn leader_status(port: u16) -> Option<f64> {
    let (_, text) = prometheus::get(&format!("http://127.0.0.1:{port}/metrics")).await.ok()?;
    let samples = prometheus::parse(&text).ok()?;
    prometheus::sum(&samples, "leader_election_master_status", &[("name", LEASE_NAME)])
}

fn claim_names(claims: &[Value]) -> BTreeSet<String> {
    claims.iter().filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string)).collect()
}

/// Two leaders provisioning for the same pods would leave NodeClaims whose Nodes run none of them.
fn assert_every_node_is_used(claims: &[Value], pods: &[Pod]) {
    let used: BTreeSet<&str> = pods.iter().filter_map(|p| p.spec.as_ref()?.node_name.as_deref()).collect();
    let idle: Vec<&str> = claims
        .iter()
        .filter_map(|c| c["status"]["nodeName"].as_str())
        .filter(|node| !used.contains(node))
        .collect();
    assert!(idle.is_empty(), "NodeClaims whose Nodes run none of the pods (created twice?): {idle:?}");
}

/// The chart's Role grants only the one Lease, so the tests of this file take turns with it.
static LEASE_IN_USE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const METRICS_LEASE: &str = LEASE_NAME;
const METRICS_NAME: &str = "e2e-leader-metrics";

fn metrics_election_env(replica: &str) -> Vec<(&'static str, String)> {
    vec![
        ("DISABLE_LEADER_ELECTION", "false".to_string()),
        ("LEADER_ELECTION_NAMESPACE", LEASE_NAMESPACE.to_string()),
        ("LEADER_ELECTION_NAME", METRICS_LEASE.to_string()),
        ("POD_NAME", replica.to_string()),
    ]
}

/// The samples of the page the replica on `port` serves.
async fn page(port: u16) -> Result<Vec<prometheus::Sample>, String> {
    let (status, text) = prometheus::get(&format!("http://127.0.0.1:{port}/metrics")).await?;
    if status != 200 {
        return Err(format!("{status}: {text}"));
    }
    prometheus::parse(&text)
}

/// The leader-only metrics ([`karpenter_azure::operator::metrics::Doc::leader_only`]) among `samples`.
fn leader_only_served(samples: &[prometheus::Sample]) -> BTreeSet<String> {
    let docs = karpenter_azure::operator::metrics::Metrics::new();
    let leader_only: BTreeSet<&str> =
        docs.docs().iter().filter(|d| d.leader_only).map(|d| d.name.as_str()).collect();
    samples.iter().filter(|s| leader_only.contains(s.name.as_str())).map(|s| s.name.clone()).collect()
}

/// With two replicas, Prometheus scrapes both; upstream runs its cluster-state metric controllers only
/// on the leader, so `sum by` over the pages counts each Node and pod once. Here too: the leader serves
/// the per-node, per-pod, per-NodePool and status-condition gauges, the standby none of them (only the
/// process's own: build, process, leader election); after a handover the new leader serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_serves_the_cluster_state_metrics() {
    let _lease = LEASE_IN_USE.lock().await;
    let client = cluster::shared().client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let _ = leases.delete(METRICS_LEASE, &DeleteParams::default()).await;
    let holder_of = |leases: Api<Lease>| async move {
        let lease = leases.get_opt(METRICS_LEASE).await.ok().flatten()?;
        lease.spec?.holder_identity?.split('_').next().map(str::to_string)
    };

    let a = setup::controller("leader-metrics-a")
        .namespaces(&[METRICS_NAME, LEASE_NAMESPACE])
        .envs(&metrics_election_env("replica-a"))
        .start(&client)
        .await;
    wait::until("replica-a to hold the lease", Duration::from_secs(30), || async {
        match holder_of(leases.clone()).await {
            Some(h) if h == "replica-a" => Ok(()),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
    let mut b = a.spawn_replica("leader-metrics-b", &metrics_election_env("replica-b"));
    let pool = manifests::node_pool(METRICS_NAME, Some("D"));
    setup::class_and_pool_ready(&client, &a, &manifests::node_class(METRICS_NAME), &pool).await;
    let deployment =
        |replicas| manifests::deployment(METRICS_NAME, APP, METRICS_NAME, replicas, "500m", "1Gi");
    objects::apply(&client, &deployment(2)).await.expect("applying the Deployment");
    setup::running_pods(&client, METRICS_NAME, &format!("app={APP}"), 2).within(CONVERGE).wait(&a).await;

    // The leader's page describes the cluster: every node and pod by name, the status conditions.
    let must = [
        "karpenter_cluster_state_synced",
        "karpenter_cluster_state_node_count",
        "karpenter_nodes_allocatable",
        "karpenter_nodes_total_pod_requests",
        "karpenter_pods_state",
        "karpenter_nodepools_usage",
        "karpenter_nodepools_cost_total",
        "operator_nodeclaim_status_condition_count",
        "operator_node_status_condition_count",
    ];
    let leader = a
        .wait_until("the leader to serve the cluster-state metrics", CONVERGE, || async {
            let samples = page(a.metrics_port()).await?;
            let served = leader_only_served(&samples);
            let missing: Vec<&&str> = must.iter().filter(|m| !served.contains(**m)).collect();
            let pods = samples
                .iter()
                .filter(|s| {
                    s.name == "karpenter_pods_state"
                        && s.labels.get("namespace").map(String::as_str) == Some(METRICS_NAME)
                })
                .count();
            if missing.is_empty() && pods == 2 {
                Ok(samples)
            } else {
                Err(format!("missing {missing:?}, {pods} pods of the Deployment in karpenter_pods_state"))
            }
        })
        .await;
    let standby = page(b.metrics_port()).await.expect("the standby's page");
    let served = leader_only_served(&standby);
    assert!(served.is_empty(), "the standby serves leader-only metrics: {served:?}");
    for name in ["karpenter_build_info", "process_resident_memory_bytes"] {
        assert!(standby.iter().any(|s| s.name == name), "the standby's page lacks {name}");
    }
    let status = |samples: &[prometheus::Sample]| {
        prometheus::sum(samples, "leader_election_master_status", &[("name", METRICS_LEASE)])
    };
    assert_eq!((status(&leader), status(&standby)), (Some(1.0), Some(0.0)));
    // Summed over both pages, each pod counts once.
    let both: Vec<prometheus::Sample> = leader.iter().chain(&standby).cloned().collect();
    let pods =
        prometheus::sum(&both, "karpenter_pods_state", &[("namespace", METRICS_NAME), ("phase", "Running")]);
    assert_eq!(pods, Some(2.0), "sum over the replicas counts each pod once");
    println!(
        "e2e leader metrics: the leader serves {} leader-only metrics, the standby none",
        leader_only_served(&leader).len()
    );

    // After a handover the new leader serves them, and the old one is gone.
    let status = a.terminate(Duration::from_secs(40)).expect("the leader exits after SIGTERM");
    assert!(status.success(), "{status}");
    let served = wait::until("replica-b to lead and serve the cluster state", CONVERGE, || async {
        let samples = page(b.metrics_port()).await?;
        let served = leader_only_served(&samples);
        let synced = prometheus::sum(&samples, "karpenter_cluster_state_synced", &[]);
        if served.contains("karpenter_pods_state") && synced == Some(1.0) {
            Ok(served.len())
        } else {
            Err(format!("synced {synced:?}, serving {served:?}"))
        }
    })
    .await;
    println!("e2e leader metrics: after the handover replica-b serves {served} leader-only metrics");
    cleanup::remove(&client, METRICS_NAME, &[deployment(0)], || b.exit_status().is_none()).await;
}
