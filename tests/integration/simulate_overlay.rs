//! NodeOverlays in `simulate` and `catalog --overlay`: a `priceAdjustment: "-30%"` on the F family
//! makes the solver pick an F size for pending pods, makes consolidation replace a D node with an F
//! one, and shows in the catalog's prices; conflicting overlays are reported and left out.

use serde_json::Value;

use crate::support::cli::{run, simulate_json};

/// A pool of amd64 D and F sizes, on demand.
const POOL: &str = "apiVersion: karpenter.azure.com/v1beta1
kind: AKSNodeClass
metadata: {name: default}
spec: {imageFamily: Ubuntu}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  disruption: {consolidateAfter: 0s, budgets: [{nodes: '100%'}]}
  template:
    spec:
      nodeClassRef: {name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: karpenter.azure.com/sku-family, operator: In, values: [D, F]}
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
";

const PENDING: &str = "apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: c, resources: {requests: {cpu: '3', memory: 4Gi}}}]
";

/// A managed Standard_D4als_v6 node (the cheapest 4-vCPU amd64 size of the pool at list prices)
/// running a pod that needs most of it.
const D_NODE: &str = "apiVersion: v1
kind: Node
metadata:
  name: d-node
  creationTimestamp: '2026-12-01T08:00:00Z'
  labels: {kubernetes.io/hostname: d-node, topology.kubernetes.io/zone: eastus-1, kubernetes.io/os: linux, kubernetes.io/arch: amd64, node.kubernetes.io/instance-type: Standard_D4als_v6, karpenter.sh/capacity-type: on-demand, karpenter.sh/nodepool: general, karpenter.sh/initialized: 'true'}
status:
  allocatable: {cpu: 3860m, memory: 5Gi, pods: '110'}
  conditions: [{type: Ready, status: 'True'}]
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, creationTimestamp: '2026-12-01T09:00:00Z'}
spec:
  nodeName: d-node
  containers: [{name: c, resources: {requests: {cpu: '3', memory: 4Gi}}}]
status: {phase: Running, startTime: '2026-12-01T09:00:00Z'}
";

fn overlay(name: &str, weight: u32, family: &str, change: &str) -> String {
    format!(
        "---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {{name: {name}}}
spec:
  weight: {weight}
  {change}
  requirements:
  - {{key: karpenter.azure.com/sku-family, operator: In, values: [{family}]}}
"
    )
}

fn cheaper_f() -> String {
    overlay("cheaper-f", 10, "F", "priceAdjustment: \"-30%\"")
}

/// `simulate --output json` on the documents of `texts`.
fn simulate(texts: &[&str]) -> Value {
    simulate_json(&texts.join("---\n"))
}

fn family_of(plan: &Value) -> Vec<String> {
    plan["nodeclaims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["instance_type"].as_str().unwrap().trim_start_matches("Standard_")[..1].to_string())
        .collect()
}

#[test]
fn a_minus_30_percent_overlay_makes_the_solver_pick_its_family() {
    let before = simulate(&[POOL, PENDING]);
    assert_eq!(family_of(&before), ["D"], "{before:#}");
    let after = simulate(&[POOL, PENDING, &cheaper_f()]);
    assert_eq!(family_of(&after), ["F"], "{after:#}");
    let claim = &after["nodeclaims"][0];
    assert_eq!(claim["instance_type"], "Standard_F4s_v2", "{after:#}");
    // Standard_F4s_v2 lists at $0.169/h in eastus; 70% of it is what the plan pays.
    assert!((claim["price_per_hour"].as_f64().unwrap() - 0.169 * 0.7).abs() < 1e-6, "{claim:#}");
    assert!(after["price_per_hour"].as_f64() < before["price_per_hour"].as_f64());
}

#[test]
fn a_minus_30_percent_overlay_makes_consolidation_move_to_its_family() {
    let before = simulate(&[POOL, D_NODE])["disruption"].clone();
    assert_eq!(before["commands"], serde_json::json!([]), "{before:#}");
    let after = simulate(&[POOL, D_NODE, &cheaper_f()])["disruption"].clone();
    let commands = after["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 1, "{after:#}");
    let c = &commands[0];
    assert_eq!(c["reason"], "Underutilized");
    assert_eq!(c["candidates"], serde_json::json!(["d-node"]));
    let replacement = c["replacements"][0]["instance_type"].as_str().unwrap();
    assert!(replacement.starts_with("Standard_F"), "{after:#}");
    assert!(c["savings_per_hour"].as_f64().unwrap() > 0.04, "{after:#}");
    // The repack lower bound reads the same overlaid prices.
    assert!(after["repack_lower_bound_per_hour"].as_f64() < before["repack_lower_bound_per_hour"].as_f64());
}

#[test]
fn simulate_warns_about_an_overlay_left_out() {
    let flat = overlay("flat-f", 10, "F", "price: \"5\"");
    let plan = simulate(&[POOL, PENDING, &cheaper_f(), &flat]);
    let warnings = plan["warnings"].to_string();
    assert!(
        warnings.contains("NodeOverlay/cheaper-f: left out: conflict with another overlay"),
        "{warnings}"
    );
    // "flat-f" holds: F sizes at $5/h, so the pod goes to a D size.
    assert_eq!(family_of(&plan), ["D"], "{plan:#}");
}

#[test]
fn the_catalog_shows_overlaid_prices_and_reports_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool.yaml");
    std::fs::write(&pool, POOL.split("---\n").nth(1).unwrap()).unwrap();
    let overlays = dir.path().join("overlays.yaml");
    let texts = [
        cheaper_f(),
        // Same weight, same F offerings, a different price: upstream leaves one of the two out.
        overlay("flat-f", 10, "F", "price: \"5\""),
        overlay("capacity-d", 1, "D", "capacity: {example.com/widget: 3}"),
    ];
    std::fs::write(&overlays, texts.concat()).unwrap();
    let out = run(&[
        "catalog",
        "--nodepool",
        &pool.display().to_string(),
        "--overlay",
        &overlays.display().to_string(),
        "--output",
        "json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("NodeOverlay/cheaper-f: left out: conflict with another overlay"), "{stderr}");
    let sizes: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let f4 = sizes.iter().find(|s| s["name"] == "Standard_F4s_v2").unwrap();
    // "flat-f" comes before "cheaper-f" at equal weight (name order), so its price holds.
    assert!(f4.to_string().contains("5.0"), "{f4:#}");
    let d4 = sizes.iter().find(|s| s["name"] == "Standard_D4als_v6").unwrap();
    assert_eq!(d4["capacity"]["example.com/widget"], "3", "{d4:#}");
    assert_eq!(d4["allocatable"]["example.com/widget"], "3", "{d4:#}");
}

#[test]
fn an_overlay_applied_during_a_timeline_moves_the_node_to_its_family_after_it() {
    let docs = |text: &str| -> Vec<Value> {
        text.split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_yaml::from_str::<Value>(d).unwrap())
            .collect()
    };
    let mut objects = docs(POOL);
    objects.push(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "3", "memory": "4Gi"}}}]},
            },
        },
    }));
    let overlay = docs(&cheaper_f()).remove(0);
    let timeline = serde_json::json!({
        "settings": {"duration": "2h", "bootDelay": "60s"},
        "objects": objects,
        "events": [{"at": "30m", "apply": overlay}],
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("timeline.yaml");
    std::fs::write(&file, timeline.to_string()).unwrap();
    let out = run(&["simulate", "--timeline", &file.display().to_string(), "--output", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    let executed: Vec<&Value> = run["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["reason"] == "Underutilized" && d["outcome"].as_str().unwrap().starts_with("executed"))
        .collect();
    assert_eq!(executed.len(), 1, "{:#?}", run["decisions"]);
    assert!(executed[0]["offset_seconds"].as_u64().unwrap() >= 30 * 60, "not before the overlay");
    let first = &run["steps"].as_array().unwrap()[5];
    assert_eq!(first["nodes_by_instance_type"], serde_json::json!({"Standard_D4als_v6": 1}), "{first}");
    let last = run["steps"].as_array().unwrap().last().unwrap();
    let types: Vec<&String> = last["nodes_by_instance_type"].as_object().unwrap().keys().collect();
    assert!(types.len() == 1 && types[0].starts_with("Standard_F"), "{last}");
}
