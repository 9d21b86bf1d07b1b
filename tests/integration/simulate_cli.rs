//! The `karpenter-azure simulate` command end to end: the built-in demo and its JSON contract, a small
//! scenario whose pods must all land on real eastus sizes, running pods that use up existing capacity,
//! and one-line errors with exit code 2 and nothing on stdout for bad input.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::support::cli::run;

fn simulate_json(files: &[&Path]) -> Value {
    let mut args = vec!["simulate", "--output", "json"];
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    args.extend(names.iter().map(String::as_str));
    let out = run(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json output")
}

const CONTRACT_KEYS: [&str; 7] = [
    "region",
    "solve_ms",
    "price_per_hour",
    "lower_bound_per_hour",
    "nodeclaims",
    "existing_nodes",
    "unschedulable",
];
const NODECLAIM_KEYS: [&str; 11] = [
    "name",
    "nodepool",
    "instance_type",
    "instance_type_options",
    "zone",
    "capacity_type",
    "price_per_hour",
    "labels",
    "taints",
    "allocatable",
    "pods",
];

#[test]
fn demo_runs_and_its_json_has_every_contract_key() {
    let plan = simulate_json(&[]);
    for key in CONTRACT_KEYS {
        assert!(plan.get(key).is_some(), "missing {key}: {plan}");
    }
    assert_eq!(plan["region"], "eastus");
    let claims = plan["nodeclaims"].as_array().unwrap();
    assert!(!claims.is_empty(), "the demo launches nodes");
    for claim in claims {
        for key in NODECLAIM_KEYS {
            assert!(claim.get(key).is_some(), "nodeclaim misses {key}: {claim}");
        }
    }
    let table = run(&["simulate"]);
    assert!(table.status.success());
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.contains("Total:"), "{text}");
    assert!(text.contains("warning: the embedded price table has no spot prices"), "{text}");
    let warnings = plan["warnings"].as_array().expect("warnings in the JSON");
    assert!(warnings.iter().any(|w| w.as_str().unwrap_or_default().contains("spot is priced as on-demand")));
}

#[test]
fn every_azure_region_simulates_and_other_names_exit_2() {
    let out = run(&["simulate", "--region", "australiacentral", "--output", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["region"], "australiacentral");
    let warnings = plan["warnings"].to_string();
    assert!(warnings.contains("eastus's static prices") && warnings.contains("regional"), "{warnings}");
    let out = run(&["simulate", "--region", "eastus9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an Azure region"));
}

const POOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
---
apiVersion: karpenter.azure.com/v1beta1
kind: AKSNodeClass
metadata: {name: default}
spec: {maxPods: 110}
";

fn deployment(replicas: usize) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: app}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: app}}}}
  template:
    metadata: {{labels: {{app: app}}}}
    spec:
      containers:
      - {{name: c, image: i, resources: {{requests: {{cpu: '1', memory: 2Gi}}}}}}
"
    )
}

/// A 4-core node with `running_cpu` already used by a running pod (none when 0).
fn node(running_cpu: u32) -> String {
    let mut text = "apiVersion: v1
kind: Node
metadata:
  name: existing-1
  labels: {kubernetes.io/hostname: existing-1, topology.kubernetes.io/zone: eastus-1, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
status:
  allocatable: {cpu: '4', memory: 16Gi, pods: '110'}
"
    .to_string();
    if running_cpu > 0 {
        text.push_str(&format!(
            "---
apiVersion: v1
kind: Pod
metadata: {{name: busy, namespace: default}}
spec:
  nodeName: existing-1
  containers: [{{name: c, resources: {{requests: {{cpu: '{running_cpu}'}}}}}}]
"
        ));
    }
    text
}

fn pods_of(plan: &Value, key: &str) -> Vec<String> {
    plan[key]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["pods"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn every_pod_of_a_deployment_lands_on_an_eastus_size() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("scenario.yaml");
    std::fs::write(&file, format!("{POOL}---\n{}", deployment(7))).unwrap();
    let plan = simulate_json(&[&file]);
    let placed: BTreeSet<String> = pods_of(&plan, "nodeclaims").into_iter().collect();
    let wanted: BTreeSet<String> = (0..7).map(|i| format!("default/app-{i}")).collect();
    assert_eq!(placed, wanted, "{plan}");
    assert!(plan["unschedulable"].as_array().unwrap().is_empty(), "{plan}");
    let catalog = run(&["catalog", "--region", "eastus", "--output", "json"]);
    let sizes: Vec<Value> = serde_json::from_slice(&catalog.stdout).unwrap();
    let sizes: BTreeSet<&str> = sizes.iter().map(|s| s["name"].as_str().unwrap()).collect();
    for claim in plan["nodeclaims"].as_array().unwrap() {
        assert!(sizes.contains(claim["instance_type"].as_str().unwrap()), "{claim}");
        assert_eq!(claim["nodepool"], "general");
        assert_eq!(claim["capacity_type"], "on-demand");
    }
    assert!(plan["price_per_hour"].as_f64().unwrap() > 0.0);
}

#[test]
fn running_pods_on_a_node_reduce_what_fits_there() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("scenario.yaml");
    std::fs::write(&scenario, format!("{POOL}---\n{}", deployment(6))).unwrap();
    let idle = dir.path().join("idle.yaml");
    std::fs::write(&idle, node(0)).unwrap();
    let busy = dir.path().join("busy.yaml");
    std::fs::write(&busy, node(2)).unwrap();

    let without_node = simulate_json(&[&scenario]);
    let with_idle = simulate_json(&[&scenario, &idle]);
    let with_busy = simulate_json(&[&scenario, &busy]);
    let launched = |plan: &Value| pods_of(plan, "nodeclaims").len();
    let on_existing = |plan: &Value| pods_of(plan, "existing_nodes").len();

    assert_eq!(with_idle["existing_nodes"][0]["name"], "existing-1");
    // An idle 4-core node takes some of the 1-core pods; with 2 cores in use it takes at most two.
    assert!(on_existing(&with_idle) > 0, "{with_idle}");
    assert!(on_existing(&with_busy) <= 2, "{with_busy}");
    assert!(launched(&with_idle) < launched(&without_node));
    assert!(launched(&with_busy) > launched(&with_idle));
    for plan in [&without_node, &with_idle, &with_busy] {
        assert_eq!(launched(plan) + on_existing(plan), 6, "{plan}");
    }
}

/// Runs simulate on one file and checks the failure: exit 2, nothing on stdout, one line on stderr
/// that contains every `needle`.
fn assert_fails(name: &str, content: Option<&str>, needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    if let Some(content) = content {
        std::fs::write(&file, content).unwrap();
    }
    let out = run(&["simulate", &file.display().to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
    assert!(out.stdout.is_empty(), "{name}: partial output {}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: {stderr}");
    for needle in needles.iter().chain(&[name]) {
        assert!(stderr.contains(needle), "{name}: {needle:?} not in {stderr}");
    }
}

#[test]
fn bad_input_gives_one_line_naming_file_object_and_field() {
    assert_fails(
        "unknown-kind.yaml",
        Some("apiVersion: example.com/v1\nkind: Frontend\nmetadata: {name: frontend}\n"),
        &["Frontend/frontend", "kind"],
    );
    assert_fails(
        "quantity.yaml",
        Some(&deployment(2).replace("cpu: '1'", "cpu: lots")),
        &["Deployment/app", "spec.template.spec.containers[0].resources.requests", "lots"],
    );
    assert_fails(
        "pool.yaml",
        Some(&POOL.replace("karpenter.sh/capacity-type", "kubernetes.io/hostname")),
        &["NodePool/general", "spec.template.spec.requirements[0].key"],
    );
    assert_fails("missing.yaml", None, &[]);
    assert_fails("syntax.yaml", Some("kind: Pod\nmetadata: {name: [unclosed\n"), &["not valid YAML"]);
    assert_fails(
        "match-fields.yaml",
        Some(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n]}]}]\n",
        ),
        &["Pod/p", "nodeSelectorTerms[0].matchFields"],
    );
}

#[test]
fn a_catalog_file_replaces_the_azure_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("scenario.yaml");
    std::fs::write(&scenario, format!("{POOL}---\n{}", deployment(3))).unwrap();
    let catalog = dir.path().join("catalog.json");
    std::fs::write(
        &catalog,
        r#"[{"name": "Private_8x32", "allocatable": {"cpu": "7800m", "memory": "28Gi", "pods": "110"},
            "offerings": [{"zone": "eastus-1", "capacity_type": "on-demand", "price": 0.25}]}]"#,
    )
    .unwrap();
    let out = run(&[
        "simulate",
        "--output",
        "json",
        "--catalog",
        &catalog.display().to_string(),
        &scenario.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    for claim in plan["nodeclaims"].as_array().unwrap() {
        assert_eq!(claim["instance_type"], "Private_8x32");
    }
    assert_eq!(pods_of(&plan, "nodeclaims").len(), 3, "{plan}");

    std::fs::write(&catalog, r#"[{"name": "X", "allocatable": {"cpu": "many"}, "offerings": []}]"#).unwrap();
    let out =
        run(&["simulate", "--catalog", &catalog.display().to_string(), &scenario.display().to_string()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("catalog.json: [0].allocatable"), "{stderr}");
}

#[test]
fn a_statefulset_whose_volumes_sit_in_zone_2_is_planned_in_zone_2() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from(POOL);
    text.push_str(
        "---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: data}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: db, resources: {requests: {cpu: '1', memory: 2Gi}}}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], storageClassName: managed-csi, resources: {requests: {storage: 8Gi}}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: managed-csi}
provisioner: disk.csi.azure.com
volumeBindingMode: WaitForFirstConsumer
",
    );
    for i in 0..2 {
        text.push_str(&format!(
            "---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data-db-{i}, namespace: data}}
spec: {{volumeName: pv-db-{i}, storageClassName: managed-csi, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 8Gi}}}}}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-db-{i}}}
spec:
  capacity: {{storage: 8Gi}}
  accessModes: [ReadWriteOnce]
  csi: {{driver: disk.csi.azure.com, volumeHandle: disk-{i}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {{key: topology.disk.csi.azure.com/zone, operator: In, values: [eastus-2]}}
"
        ));
    }
    let file = dir.path().join("statefulset.yaml");
    std::fs::write(&file, text).unwrap();
    let plan = simulate_json(&[&file]);
    let claims = plan["nodeclaims"].as_array().unwrap();
    let placed: usize = claims.iter().map(|c| c["pods"].as_array().unwrap().len()).sum();
    assert_eq!(placed, 2, "{plan}");
    for claim in claims {
        assert_eq!(claim["zone"], "eastus-2", "{claim}");
    }
}

#[test]
fn a_static_pool_is_planned_to_its_replicas_and_its_pending_pods_get_no_node_of_it() {
    let dir = std::env::temp_dir().join(format!("karpenter-azure-static-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("static.yaml");
    let manifests = r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: fixed}
spec:
  replicas: 3
  limits: {nodes: "5"}
  template:
    spec:
      nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default}
      requirements:
      - {key: karpenter.azure.com/sku-family, operator: In, values: [D]}
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
---
apiVersion: karpenter.azure.com/v1beta1
kind: AKSNodeClass
metadata: {name: default}
spec: {}
"#;
    std::fs::write(&file, format!("{manifests}---\n{}", deployment(2))).unwrap();
    let plan = simulate_json(&[&file]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(plan["nodeclaims"], serde_json::json!([]), "no pod opens a node in a static pool");
    let actions = plan["disruption"]["static_nodepools"].as_array().expect("static_nodepools");
    let [launch] = &actions[..] else { panic!("{actions:#?}") };
    assert_eq!(launch["nodepool"], "fixed");
    assert_eq!(launch["action"], "launch");
    let claims = launch["nodeclaims"].as_array().unwrap();
    assert_eq!(claims.len(), 3);
    for claim in claims {
        assert!(claim["instance_type"].as_str().unwrap().starts_with("Standard_D"), "{claim}");
        assert_eq!(claim["labels"]["kubernetes.io/arch"], "amd64");
    }
}
