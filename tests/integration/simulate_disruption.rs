//! `karpenter-azure simulate` on a snapshot with managed nodes: the "disruption" JSON key and the
//! table's Disruption section, judged at `--now`, with managed capacity recognised from the
//! `karpenter.sh/nodepool` label and from NodeClaims, and one-line errors for bad disruption input.

use serde_json::Value;

use crate::support::cli::{run, simulate, simulate_json as json};

const POOL: &str = "apiVersion: karpenter.azure.com/v1beta1
kind: AKSNodeClass
metadata: {name: default}
spec: {imageFamily: Ubuntu}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  disruption:
    consolidateAfter: CONSOLIDATE_AFTER
    budgets: [{nodes: '100%'}]
  template:
    spec:
      nodeClassRef: {name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: karpenter.azure.com/sku-family, operator: In, values: [D]}
";

/// A Standard_D4s_v5 node; `managed` puts the NodePool label on it.
fn node(name: &str, managed: bool) -> String {
    let pool =
        if managed { ", karpenter.sh/nodepool: general, karpenter.sh/initialized: 'true'" } else { "" };
    format!(
        "---
apiVersion: v1
kind: Node
metadata:
  name: {name}
  creationTimestamp: '2026-12-01T08:00:00Z'
  labels: {{kubernetes.io/hostname: {name}, topology.kubernetes.io/zone: eastus-1, kubernetes.io/os: linux, kubernetes.io/arch: amd64, node.kubernetes.io/instance-type: Standard_D4s_v5, karpenter.sh/capacity-type: on-demand{pool}}}
status:
  allocatable: {{cpu: 3860m, memory: 12Gi, pods: '110'}}
  conditions: [{{type: Ready, status: 'True'}}]
"
    )
}

fn pod(name: &str, node: &str, cpu: &str, extra_annotations: &str) -> String {
    format!(
        "---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels: {{app: {name}}}
  creationTimestamp: '2026-12-01T09:00:00Z'
  annotations: {{x: y{extra_annotations}}}
spec:
  nodeName: {node}
  containers: [{{name: c, resources: {{requests: {{cpu: '{cpu}', memory: 1Gi}}}}}}]
status: {{phase: Running, startTime: '2026-12-01T09:00:00Z'}}
"
    )
}

/// Three managed nodes (one via a NodeClaim only), one unmanaged; "b" and "c" each run a small pod,
/// "p" runs a pod behind a PDB that allows nothing, "e" runs nothing.
fn snapshot(consolidate_after: &str) -> String {
    let mut text = POOL.replace("CONSOLIDATE_AFTER", consolidate_after);
    for (name, managed) in [("b", true), ("p", true), ("e", true), ("system-1", false)] {
        text.push_str(&node(name, managed));
    }
    // "c" carries no NodePool label: its NodeClaim makes it managed.
    text.push_str(&node("c", false));
    text.push_str(
        "---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: general-abc12
  labels: {karpenter.sh/nodepool: general}
  creationTimestamp: '2026-12-01T08:00:00Z'
spec:
  nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default}
  requirements: []
status:
  nodeName: c
  conditions:
  - {type: Initialized, status: 'True', lastTransitionTime: '2026-12-01T08:02:00Z', reason: Initialized, message: ''}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: guarded, namespace: default}
spec: {selector: {matchLabels: {app: guarded}}}
status: {disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}
",
    );
    text.push_str(&pod("small-b", "b", "500m", ""));
    text.push_str(&pod("small-c", "c", "500m", ""));
    text.push_str(&pod("guarded", "p", "500m", ""));
    text.push_str(&pod("system", "system-1", "3", ""));
    text
}

fn blocked_reason(d: &Value, node: &str) -> String {
    d["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["node"] == node)
        .unwrap_or_else(|| panic!("{node} not in blocked: {d:#}"))["reason"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn the_json_reports_what_disruption_would_do_now() {
    let out = json(&snapshot("0s"));
    for key in ["region", "price_per_hour", "nodeclaims", "existing_nodes", "unschedulable"] {
        assert!(out.get(key).is_some(), "existing contract key {key} kept");
    }
    let d = &out["disruption"];
    for key in ["cluster_price_per_hour", "repack_lower_bound_per_hour", "commands", "blocked"] {
        assert!(d.get(key).is_some(), "{key}: {d:#}");
    }
    let d4 = d["cluster_price_per_hour"].as_f64().unwrap() / 4.0;
    assert!(d4 > 0.05 && d4 < 1.0, "four D4s_v5 at their eastus price: {d:#}");
    // Emptiness acts first: the empty node goes, alone, without replacement.
    let commands = d["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 1, "{d:#}");
    let c = &commands[0];
    assert_eq!((c["reason"].as_str(), c["method"].as_str()), (Some("Empty"), Some("emptiness")));
    assert_eq!(c["candidates"], serde_json::json!(["e"]));
    assert_eq!(c["replacements"], serde_json::json!([]));
    assert!(c["savings_per_hour"].as_f64().unwrap() > 0.0);
    // The unmanaged node is neither a candidate nor explained; the PDB keeps "p".
    let blocked: Vec<&str> =
        d["blocked"].as_array().unwrap().iter().map(|b| b["node"].as_str().unwrap()).collect();
    assert_eq!(blocked, vec!["b", "p", "c"], "{d:#}");
    assert!(blocked_reason(d, "p").contains("PDB default/guarded allows 0"), "{d:#}");
}

#[test]
fn without_the_empty_node_the_small_nodes_are_consolidated_and_pods_moved() {
    let text = snapshot("0s")
        .replace("  name: e\n", "  name: e\n  annotations: {karpenter.sh/do-not-disrupt: 'true'}\n");
    let d = json(&text)["disruption"].clone();
    assert!(blocked_reason(&d, "e").contains("do-not-disrupt"), "{d:#}");
    let c = &d["commands"][0];
    assert_eq!(c["reason"], "Underutilized", "{d:#}");
    let candidates: Vec<&str> =
        c["candidates"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(candidates.contains(&"b") || candidates.contains(&"c"), "{d:#}");
    let moves = c["moves"].as_array().unwrap();
    assert!(!moves.is_empty(), "{d:#}");
    for m in moves {
        assert!(m["pod"].as_str().unwrap().starts_with("default/small-"), "{m}");
        let to = m["to"].as_str().unwrap();
        let replacement = c["replacements"].as_array().unwrap().iter().any(|r| r["name"] == to);
        assert!(replacement || ["e", "p", "system-1", "b", "c"].contains(&to), "{m}");
        assert!(!candidates.contains(&to), "a pod does not move to a node being removed: {m}");
    }
    for r in c["replacements"].as_array().unwrap() {
        for key in [
            "name",
            "nodepool",
            "instance_type",
            "instance_type_options",
            "zone",
            "capacity_type",
            "price_per_hour",
            "pods",
        ] {
            assert!(r.get(key).is_some(), "replacement shaped like a nodeclaims entry: {key}");
        }
    }
}

#[test]
fn now_drives_consolidate_after_and_the_table_shows_the_section() {
    // Nodes initialized at 08:00, pods started at 09:00: with consolidateAfter 5h nothing is
    // consolidatable at 12:00.
    let d = json(&snapshot("5h"))["disruption"].clone();
    assert_eq!(d["commands"], serde_json::json!([]), "{d:#}");
    assert!(blocked_reason(&d, "b").contains("consolidateAfter not elapsed (2h left)"), "{d:#}");
    assert!(blocked_reason(&d, "e").contains("consolidateAfter not elapsed (1h left)"), "{d:#}");
    let out = simulate(&snapshot("5h"), &[]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("Disruption at 2026-12-01T12:00:00Z: 4 managed nodes"), "{table}");
    assert!(table.contains("Not disrupted:") && table.contains("consolidateAfter not elapsed"), "{table}");
}

#[test]
fn bad_disruption_input_gives_one_line_naming_the_field() {
    let text = snapshot("0s").replace(
        "annotations: {x: y}\nspec:\n  nodeName: b",
        "annotations: {x: y, karpenter.sh/do-not-disrupt: soon}\nspec:\n  nodeName: b",
    );
    let out = simulate(&text, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("Pod/default/small-b")
            && err.contains("metadata.annotations[karpenter.sh/do-not-disrupt]"),
        "{err}"
    );
    let out = run(&["simulate", "--now", "yesterday"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RFC 3339"));
}

#[test]
fn replacements_are_never_named_like_a_node_or_nodeclaim_of_the_snapshot() {
    // The managed nodes carry the names planned NodeClaims of pool "general" would get
    // (`general-<n>`): general-1 runs one small pod, so it is replaced by a smaller size; general-2 is
    // full and general-3's pod is behind a PDB.
    let mut text = POOL.replace("CONSOLIDATE_AFTER", "0s");
    for (name, managed) in
        [("general-1", true), ("general-2", true), ("general-3", true), ("system-1", false)]
    {
        text.push_str(&node(name, managed));
    }
    text.push_str(&pod("small", "general-1", "500m", ""));
    text.push_str(&pod("big", "general-2", "3500m", ""));
    text.push_str(&pod("guarded", "general-3", "3500m", ""));
    text.push_str(&pod("system", "system-1", "3500m", ""));
    let d = json(&text)["disruption"].clone();
    let taken = ["general-1", "general-2", "general-3", "system-1"];
    let commands = d["commands"].as_array().unwrap();
    let replaced = commands.iter().any(|c| !c["replacements"].as_array().unwrap().is_empty());
    assert!(replaced, "a consolidation with a replacement: {d:#}");
    for c in commands {
        for r in c["replacements"].as_array().unwrap() {
            let name = r["name"].as_str().unwrap();
            assert!(!taken.contains(&name), "replacement {name} shares a name with the snapshot: {d:#}");
        }
        let candidates = c["candidates"].as_array().unwrap();
        for m in c["moves"].as_array().unwrap() {
            assert!(!candidates.contains(&m["to"]), "a move's target is unambiguous: {m}");
        }
    }
}

/// `simulate --explain` on the snapshot: one line per object, `object: decision: reason`.
fn explain(text: &str, objects: &[&str]) -> Vec<String> {
    let mut extra = vec![];
    for o in objects {
        extra.extend(["--explain", o]);
    }
    let out = simulate(text, &extra);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

#[test]
fn explain_names_the_cause_for_pods_and_nodes() {
    let mut text = snapshot("0s")
        .replace("  name: e\n", "  name: e\n  annotations: {karpenter.sh/do-not-disrupt: 'true'}\n");
    // A pending pod no NodePool can take: its selector asks for an architecture no size has.
    text.push_str(
        "---
apiVersion: v1
kind: Pod
metadata: {name: stuck, namespace: default}
spec:
  nodeSelector: {kubernetes.io/arch: s390x}
  containers: [{name: c, resources: {requests: {cpu: 100m}}}]
",
    );
    let lines =
        explain(&text, &["pod/default/stuck", "node/p", "node/e", "node/system-1", "pod/default/guarded"]);
    assert_eq!(lines.len(), 5, "{lines:#?}");
    assert!(
        lines[0].starts_with("pod/default/stuck: unschedulable: ") && lines[0].contains("s390x"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with("node/p: kept: ") && lines[1].contains("PDB default/guarded allows 0 evictions"),
        "{}",
        lines[1]
    );
    assert!(lines[2].starts_with("node/e: kept: ") && lines[2].contains("do-not-disrupt"), "{}", lines[2]);
    assert!(lines[3].starts_with("node/system-1: unmanaged: "), "{}", lines[3]);
    assert!(
        lines[4].starts_with("pod/default/guarded: stays: runs on p; the node is kept: PDB"),
        "{}",
        lines[4]
    );

    // The underused nodes: each is consolidated (or deleted) with the saving, and its pod moves.
    let d = json(&text)["disruption"].clone();
    let candidate = d["commands"][0]["candidates"][0].as_str().unwrap().to_string();
    let node_line = &explain(&text, &[&format!("node/{candidate}")])[0];
    assert!(
        node_line.starts_with(&format!("node/{candidate}: consolidated: Underutilized"))
            || node_line.starts_with(&format!("node/{candidate}: deleted: Underutilized")),
        "{node_line}"
    );
    assert!(node_line.contains("saving $"), "{node_line}");
    let pod = format!("pod/default/small-{candidate}");
    let pod_line = &explain(&text, &[&pod])[0];
    assert!(pod_line.starts_with(&format!("{pod}: moves: from {candidate} to ")), "{pod_line}");

    let out = simulate(&text, &["--explain", "pod/default/nothing"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pod/default/nothing is not in the input"));
    let out = simulate(&text, &["--explain", "deployment/web"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected pod/NAMESPACE/NAME"));

    let json_out = simulate(&text, &["--explain", "node/p", "--output", "json"]);
    let v: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(v["explain"][0]["object"], "node/p");
    assert_eq!(v["explain"][0]["decision"], "kept");
}
