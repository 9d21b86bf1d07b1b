//! What the disruption tests share: a NodePool that consolidates, the controller settings that make a
//! pass quick, a background watcher that records how many of a pool's nodes were disrupting at once
//! and how few of an app's pods were available, and `karpenter-azure simulate` run on manifests for
//! the solver's plan and price (the independent yardstick of "how cheap should this be").

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::Client;
use serde_json::{json, Value};

use super::lookups::{is_running, list_pods};
use super::manifests::{self, LABEL_NODEPOOL};

pub const TAINT_DISRUPTED: &str = "karpenter.sh/disrupted";

/// Shorter disruption timings for the tests: a pass every 2 s, commands validated 5 s after the
/// decision (production: 10 s and 15 s).
pub fn fast_disruption_env() -> Vec<(&'static str, String)> {
    vec![
        ("KARPENTER_DISRUPTION_INTERVAL", "2s".to_string()),
        ("KARPENTER_DISRUPTION_VALIDATION_DELAY", "5s".to_string()),
    ]
}

/// An on-demand NodePool of D-family sizes with 2 or 4 vCPUs on the class `name`, consolidating
/// after `consolidate_after` under `budgets`.
pub fn node_pool(name: &str, consolidate_after: &str, budgets: Value) -> Value {
    let mut pool = manifests::node_pool(name, Some("D"));
    pool["spec"]["template"]["spec"]["requirements"]
        .as_array_mut()
        .expect("requirements")
        .push(json!({"key": "karpenter.azure.com/sku-cpu", "operator": "In", "values": ["2", "4"]}));
    pool["spec"]["disruption"] = json!({
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": consolidate_after,
        "budgets": budgets,
    });
    pool
}

/// The pool's Nodes.
pub async fn pool_nodes(client: &Client, pool: &str) -> Result<Vec<Node>, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default().labels(&format!("{LABEL_NODEPOOL}={pool}"))).await;
    Ok(list.map_err(|e| format!("listing nodes: {e}"))?.items)
}

pub fn is_tainted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TAINT_DISRUPTED))
}

/// A pool node counts as disrupting while it carries the disrupted taint or is being deleted.
pub fn is_disrupting(node: &Node) -> bool {
    is_tainted(node) || node.metadata.deletion_timestamp.is_some()
}

/// What the watcher saw.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub samples: usize,
    pub max_disrupting: usize,
    pub min_running: Option<usize>,
    /// Every node name of the pool seen, for "was it replaced" checks.
    pub nodes: BTreeSet<String>,
}

/// Samples the pool's nodes and the app's running pods every 250 ms until stopped.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    pub fn start(client: &Client, pool: &str, namespace: &str, app: &str) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (client, pool, namespace, app) =
            (client.clone(), pool.to_string(), namespace.to_string(), app.to_string());
        let (stop_flag, record) = (stop.clone(), seen.clone());
        let task = tokio::spawn(async move {
            while !stop_flag.load(Ordering::Relaxed) {
                if let (Ok(nodes), Ok(pods)) =
                    (pool_nodes(&client, &pool).await, list_pods(&client, &namespace, &app).await)
                {
                    let disrupting = nodes.iter().filter(|n| is_disrupting(n)).count();
                    let running = pods.iter().filter(|p| is_running(p)).count();
                    let mut s = record.lock().unwrap();
                    s.samples += 1;
                    s.max_disrupting = s.max_disrupting.max(disrupting);
                    s.min_running = Some(s.min_running.map_or(running, |m| m.min(running)));
                    s.nodes.extend(nodes.iter().filter_map(|n| n.metadata.name.clone()));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Watcher { stop, seen, task }
    }

    pub async fn stop(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.seen.clone();
        let _ = self.task.await;
        let out = seen.lock().unwrap().clone();
        out
    }
}

/// `karpenter-azure simulate --output json` on `objects` (a List), in `region`.
pub fn simulate(objects: Vec<Value>, region: &str) -> Value {
    let dir = std::env::temp_dir().join(format!("e2e-simulate-{}-{}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let file = dir.join("objects.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    std::fs::write(&file, serde_json::to_vec(&list).expect("json")).expect("writing the objects");
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-azure"))
        .args(["simulate", file.to_str().expect("utf-8 path"), "--region", region, "--output", "json"])
        .output()
        .expect("running karpenter-azure simulate");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "simulate failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("simulate prints JSON")
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// An object as `simulate` reads it: the API server's copy without managedFields.
pub fn as_input<T: serde::Serialize>(object: &T) -> Value {
    let mut v = serde_json::to_value(object).expect("serializable");
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    v
}
