//! A burst of 1,000 pending pods: how long after the last pod was created the controller has decided
//! where every pod goes and created the NodeClaims of that decision, and the controller's peak resident
//! memory meanwhile.
//!
//! Targets: the NodeClaims of the plan that decided the last pods within the batch window
//! (`BATCH_MAX_DURATION`, 10 s in `controller.rs`) plus 2 s of kube-scheduler's verdict on the last pod
//! (the `PodScheduled=False` condition: only a pod kube-scheduler marked unschedulable is the
//! controller's to provision, as for upstream's provisioner), and a peak RSS (`VmHWM`) under 150 MiB.
//! The time from the last pod's creation to that verdict is kube-scheduler's and is printed beside it.
//!
//! That plan is read from the controller's log: each "computed a scheduling plan" line says how many
//! pods it decided for the first time (`first_decided`), and its "created nodeclaim" lines follow it.
//! It is usually also the last NodeClaim, but not always: when the pods arrive over several batches,
//! kube-scheduler may bind a pod to another batch's node than the one planned for it, and a pod left
//! without room is planned again, onto a NodeClaim of its own, after every pod was decided (as upstream's
//! provisioner does). The gap to that last NodeClaim is printed, not held to the target.
//!
//! The pods come from one Deployment, so kube-controller-manager's ReplicaSet controller creates them at its
//! own client rate; the measurement starts at the last of them. Two clocks are read: the objects'
//! `creationTimestamp`s (1 s resolution) and the test process's own watch of pods and NodeClaims, which
//! notes when each new object was first seen (more precise, and what the target is checked against).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, ListParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::Value;

use super::controller::Controller;
use super::lookups::nodeclaims;
use super::tracker::{signed_seconds, Tracker};
use super::{cluster, manifests, objects, setup, wait};

/// Namespace, AKSNodeClass and NodePool.
const NAME: &str = "e2e-burst";
const APP: &str = "burst";
const REPLICAS: usize = 1000;
/// The batch window the controller runs with (`BATCH_IDLE_DURATION` / `BATCH_MAX_DURATION` in
/// `controller.rs`).
const BATCH_IDLE: Duration = Duration::from_secs(1);
const BATCH_MAX: Duration = Duration::from_secs(10);
/// The target: the deciding plan's NodeClaims at most this long after the verdict on the last pod.
const GAP_TARGET: Duration = BATCH_MAX.saturating_add(Duration::from_secs(2));
const PEAK_RSS_TARGET_MIB: f64 = 150.0;

const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";
/// How long the ReplicaSet controller may take to create all pods.
const PODS_CREATED: Duration = Duration::from_secs(180);
/// The controller has stopped creating NodeClaims once none appeared for this long (and every pod is
/// bound), or once `SETTLE` has passed since the last pod.
const CLAIMS_STABLE: Duration = Duration::from_secs(5);
const SETTLE: Duration = Duration::from_secs(120);
/// How long, after the Deployment was created, until every pod must be Running.
const ALL_RUNNING: Duration = Duration::from_secs(360);
/// Each cleanup stage (pods gone, NodeClaims gone).
const CLEANUP: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_1000_pending_pods_is_batched_into_nodeclaims_within_the_window() {
    let client = cluster::shared().client().await;
    let controller = set_up(&client).await;

    let pods = Tracker::default();
    let claims = Tracker::default();
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), NAME);
    let watches = [
        pods.watch(pods_api.clone(), watcher::Config::default().labels(&format!("app={APP}")), "e2e burst"),
        claims.watch(
            nodeclaims(&client),
            watcher::Config::default().labels(&format!("{LABEL_NODEPOOL}={NAME}")),
            "e2e burst",
        ),
    ];

    let started = Instant::now();
    objects::apply(&client, &deployment(REPLICAS)).await.expect("applying the Deployment");
    controller
        .wait_until(&format!("the ReplicaSet controller to create {REPLICAS} pods"), PODS_CREATED, || async {
            let seen = pods.snapshot();
            if seen.count >= REPLICAS {
                Ok(())
            } else {
                Err(format!("{} pods so far; {} NodeClaims", seen.count, claims.snapshot().count))
            }
        })
        .await;
    let all_pods_after = started.elapsed();

    // Until the controller stops creating NodeClaims: none new for CLAIMS_STABLE and every pod bound, or
    // SETTLE after the last pod.
    let settled = wait::within(SETTLE, || async {
        if let Some(status) = controller.exit_status() {
            panic!("the controller exited ({status}) while the burst was being provisioned");
        }
        let (pod_state, claim_state) = (pods.snapshot(), claims.snapshot());
        let quiet = claim_state.last_arrival.is_some_and(|at| at.elapsed() >= CLAIMS_STABLE);
        if quiet && pod_state.bound >= REPLICAS {
            Ok(())
        } else {
            Err(format!(
                "{} NodeClaims (last one {:.1?} ago), {} of {REPLICAS} pods bound",
                claim_state.count,
                claim_state.last_arrival.map(|at| at.elapsed()),
                pod_state.bound
            ))
        }
    })
    .await
    .map_err(|seen| {
        eprintln!("e2e burst: not settled {SETTLE:?} after the last pod: {seen}; measuring what was seen")
    })
    .is_ok();
    let claims_at_settle = claims.snapshot().count;

    controller
        .wait_until(&format!("all {REPLICAS} pods Running"), left(started + ALL_RUNNING), || async {
            let seen = pods.snapshot();
            if seen.running >= REPLICAS {
                Ok(())
            } else {
                Err(format!(
                    "{} of {} pods Running, {} bound; {} NodeClaims",
                    seen.running,
                    seen.count,
                    seen.bound,
                    claims.snapshot().count
                ))
            }
        })
        .await;
    let all_running_after = started.elapsed();
    let memory = controller.memory_kib().expect("reading the controller's /proc status");
    for watch in &watches {
        watch.abort();
    }

    // Claims created after the settle point count too: the gap is to the last NodeClaim of all.
    let (pod_state, claim_state) = (pods.snapshot(), claims.snapshot());
    let last_pod = pod_state.last_arrival.expect("pods were seen");
    let last_claim = claim_state.last_arrival.expect("NodeClaims were seen");
    let last_claim_gap = signed_seconds(last_pod, last_claim);
    let last_pod_wall = pod_state.last_arrival_wall.expect("pods were seen");
    // The controller's part starts at kube-scheduler's verdict on the last pod (seen by the same watch,
    // so on the same clock as the last arrival).
    let marked_after = pod_state.last_marked.map_or(0.0, |at| signed_seconds(last_pod, at).max(0.0));
    let last_marked_wall =
        last_pod_wall.checked_add(SignedDuration::from_secs_f64(marked_after)).expect("a timestamp in range");
    let decided = last_deciding_plan(&controller.log());
    let since_last_pod = |at: Timestamp| at.duration_since(last_pod_wall).as_secs_f64();
    let since_marked = |at: Timestamp| at.duration_since(last_marked_wall).as_secs_f64();
    let gap = decided.as_ref().map(|plan| since_marked(plan.done));
    // Where the time went, for a miss: when the plan was made, how long its longest-waiting pod waited on
    // the controller's clock (from the pod watch seeing it provisionable), and its snapshot and solve.
    let plan_detail = decided.as_ref().map_or("no deciding plan in the log".to_string(), |plan| {
        format!(
            "kube-scheduler's verdict on the last pod came {marked_after:.1} s after it; the plan was logged {:.1} s \
             after the last pod (snapshot and solve {} ms; its longest-waiting pod waited {:.1} s from the \
             controller seeing it provisionable), its NodeClaims {:.1} s after it",
            since_last_pod(plan.planned),
            plan.solve_ms,
            plan.longest_wait_ms as f64 / 1000.0,
            since_last_pod(plan.done)
        )
    });
    let stamp_gap = claim_state.latest_created.zip(pod_state.latest_created).map(|(c, p)| c - p);
    let peak_mib = memory.peak_rss as f64 / 1024.0;
    println!(
        "e2e burst: {REPLICAS} pods; kube-scheduler's verdict on the last pod → NodeClaims of the plan deciding \
         the last pods {} s (batch window idle {} s / max {} s); {} NodeClaims; all Running after {:.1} s; controller peak RSS {peak_mib:.1} MiB",
        gap.map_or("?".to_string(), |g| format!("{g:.1}")),
        BATCH_IDLE.as_secs(),
        BATCH_MAX.as_secs(),
        claim_state.count,
        all_running_after.as_secs_f64()
    );
    println!(
        "e2e burst: details: all pods created {:.1} s after the Deployment; by creationTimestamp last pod → \
         last NodeClaim {} s; last pod → last NodeClaim {last_claim_gap:.1} s; {claims_at_settle} NodeClaims when \
         {}; {plan_detail}; controller RSS now {:.1} MiB (pid {})",
        all_pods_after.as_secs_f64(),
        stamp_gap.map_or("?".to_string(), |s| s.to_string()),
        if settled { "settled" } else { "the settle timeout passed" },
        memory.rss as f64 / 1024.0,
        controller.pid()
    );

    tear_down(&client, &controller).await;

    let mut missed = Vec::new();
    match gap {
        Some(gap) if gap <= GAP_TARGET.as_secs_f64() => {}
        Some(gap) => missed.push(format!(
            "the NodeClaims of the plan deciding the last pods came {gap:.1} s after kube-scheduler's verdict on \
             the last pod; the target is at most {} s (BATCH_MAX_DURATION {} s + 2 s); {plan_detail}",
            GAP_TARGET.as_secs(),
            BATCH_MAX.as_secs()
        )),
        None => missed.push("the controller's log has no plan that decided pods".to_string()),
    }
    if peak_mib >= PEAK_RSS_TARGET_MIB {
        missed.push(format!(
            "the controller's peak RSS (VmHWM) was {peak_mib:.1} MiB; the target is under {PEAK_RSS_TARGET_MIB} MiB"
        ));
    }
    assert!(missed.is_empty(), "burst of {REPLICAS} pods missed its targets:\n- {}", missed.join("\n- "));
}

/// The last plan that decided pods for the first time, as the controller logged it.
#[derive(Clone, Debug, PartialEq)]
struct DecidingPlan {
    /// When the plan was logged (after its snapshot and solve).
    planned: Timestamp,
    /// When its last NodeClaim was logged as created (the plan itself when it created none).
    done: Timestamp,
    /// Its `longest_decision_wait_ms`: the longest wait, on the controller's clock, from seeing one of
    /// the pods it decided provisionable to this decision.
    longest_wait_ms: u64,
    /// Its `elapsed_ms`: snapshot and solve.
    solve_ms: u64,
}

/// Finds the [`DecidingPlan`] in the controller's log: JSON lines in the order written; a round logs its
/// plan, then its NodeClaims, before the next round starts.
fn last_deciding_plan(log: &str) -> Option<DecidingPlan> {
    let mut last: Option<DecidingPlan> = None;
    let mut in_deciding_round = false;
    for line in log.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else { continue };
        let Some(at) = entry["time"].as_str().and_then(|t| t.parse::<Timestamp>().ok()) else {
            continue;
        };
        match entry["message"].as_str() {
            Some("computed a scheduling plan") => {
                in_deciding_round = entry["first_decided"].as_u64().unwrap_or(0) > 0;
                if in_deciding_round {
                    last = Some(DecidingPlan {
                        planned: at,
                        done: at,
                        longest_wait_ms: entry["longest_decision_wait_ms"].as_u64().unwrap_or(0),
                        solve_ms: entry["elapsed_ms"].as_u64().unwrap_or(0),
                    });
                }
            }
            Some("created nodeclaim") if in_deciding_round => {
                if let Some(plan) = &mut last {
                    plan.done = at;
                }
            }
            _ => {}
        }
    }
    last
}

fn node_class() -> Value {
    manifests::node_class(NAME)
}

fn node_pool() -> Value {
    manifests::node_pool(NAME, None)
}

fn deployment(replicas: usize) -> Value {
    manifests::deployment(NAME, APP, NAME, replicas, "50m", "64Mi")
}

/// The controller, the AKSNodeClass and NodePool, Ready.
async fn set_up(client: &Client) -> Controller {
    let controller = setup::controller(NAME).start(client).await;
    setup::class_and_pool_ready(client, &controller, &node_class(), &node_pool()).await;
    controller
}

/// Deletes the Deployment and waits for its pods to be gone, then the NodeClaims (the controller, still
/// running, removes their finalizers) and waits for them, then the NodePool, AKSNodeClass and namespace.
/// Best effort: what is left is reported, not fatal.
async fn tear_down(client: &Client, controller: &Controller) {
    let background = DeleteParams::background();
    let started = Instant::now();
    if let Ok(api) = objects::api_for(client, &deployment(0)).await {
        let _ = api.delete(APP, &background).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAME);
    let listed = ListParams::default().labels(&format!("app={APP}"));
    let pods_left = until_empty(controller, || async {
        pods.list_metadata(&listed).await.map(|list| list.items.len()).unwrap_or(usize::MAX)
    })
    .await;
    let claims_api = nodeclaims(client);
    let claims_listed = ListParams::default().labels(&format!("{LABEL_NODEPOOL}={NAME}"));
    let claims = claims_api.list_metadata(&claims_listed).await.map(|list| list.items).unwrap_or_default();
    for claim in &claims {
        if let Some(name) = &claim.metadata.name {
            let _ = claims_api.delete(name, &background).await;
        }
    }
    let claims_left = until_empty(controller, || async {
        claims_api.list_metadata(&claims_listed).await.map(|list| list.items.len()).unwrap_or(usize::MAX)
    })
    .await;
    if pods_left > 0 || claims_left > 0 {
        eprintln!("e2e burst: cleanup left {pods_left} pods and {claims_left} NodeClaims");
    }
    for object in [node_pool(), node_class()] {
        if let Ok(api) = objects::api_for(client, &object).await {
            let _ = api.delete(NAME, &background).await;
        }
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(NAME, &background).await;
    eprintln!("e2e burst: cleanup of {} NodeClaims took {:.1?}", claims.len(), started.elapsed());
}

/// Polls `count` until it is zero, `CLEANUP` passes or the controller exits; the last count.
async fn until_empty<F, Fut>(controller: &Controller, mut count: F) -> usize
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    // Each count lists up to a thousand pods: once a second is enough.
    let left = wait::within_every(CLEANUP, Duration::from_secs(1), || {
        let counted = count();
        async move {
            let left = counted.await;
            if left == 0 || controller.exit_status().is_some() {
                Ok(left)
            } else {
                Err(left.to_string())
            }
        }
    })
    .await;
    left.unwrap_or_else(|last| last.parse().unwrap_or(usize::MAX))
}

/// Time until `deadline`, at least a moment so a last probe still runs.
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1))
}

#[test]
fn the_deciding_plan_is_the_last_one_with_first_decisions_and_its_claims() {
    let line = |at: &str, message: &str, first: u64| {
        let wait = first * 140;
        format!(
            r#"{{"time":"2026-12-02T10:00:{at}Z","message":"{message}","first_decided":{first},"longest_decision_wait_ms":{wait},"elapsed_ms":35}}"#
        )
    };
    let log = [
        line("01.000", "computed a scheduling plan", 200),
        line("01.100", "created nodeclaim", 0),
        line("05.000", "computed a scheduling plan", 30),
        line("05.200", "created nodeclaim", 0),
        line("05.300", "created nodeclaim", 0),
        "not json".to_string(),
        // Pods planned again, none for the first time: not the burst's decision.
        line("20.000", "computed a scheduling plan", 0),
        line("20.100", "created nodeclaim", 0),
    ]
    .join("\n");
    let plan = last_deciding_plan(&log).expect("a deciding plan");
    assert_eq!(plan.planned, "2026-12-02T10:00:05Z".parse().unwrap());
    assert_eq!(plan.done, "2026-12-02T10:00:05.300Z".parse().unwrap());
    assert_eq!((plan.longest_wait_ms, plan.solve_ms), (4200, 35));
    assert_eq!(last_deciding_plan(""), None);
}
