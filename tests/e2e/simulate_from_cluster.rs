//! `simulate --from-cluster --explain` against the real control plane: the objects are listed from the
//! API server (no controller runs), kube-scheduler has marked the impossible pod Unschedulable and
//! kube-controller-manager has computed the PDB's allowance, and each explanation names the cause: the
//! impossible selector, the PDB, the do-not-disrupt pod, the saving of consolidating an underused node.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use serde_json::json;

use super::crds::{self, AKSNODECLASSES, NODECLAIMS, NODEPOOLS};
use super::{cluster, kwok, manifests, objects, wait};

const NAME: &str = "e2e-explain";
const NODES: [&str; 4] = ["explain-pdb", "explain-dnd", "explain-small", "explain-full"];

/// A pod of `cpu` bound to `node` (no scheduler involved), kept to this test's nodes by its selector.
fn bound_pod(name: &str, node: &str, cpu: &str, annotations: serde_json::Value) -> Pod {
    let mut pod = kwok::pod(
        name,
        json!({"app": name}),
        json!({"nodeName": node, "nodeSelector": {"karpenter.sh/nodepool": NAME}}),
    );
    pod.spec.as_mut().unwrap().containers[0].resources =
        Some(serde_json::from_value(json!({"requests": {"cpu": cpu, "memory": "1Gi"}})).expect("requests"));
    pod.metadata.annotations = serde_json::from_value(annotations).expect("annotations");
    pod
}

/// `simulate --from-cluster` with `args`, as the cluster's admin; its stdout lines.
fn simulate(kubeconfig: &std::path::Path, args: &[&str]) -> Result<Vec<String>, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-azure"))
        .env("KUBECONFIG", kubeconfig)
        .args(["simulate", "--from-cluster", "--region", "eastus"])
        .args(args)
        .output()
        .map_err(|err| format!("running simulate: {err}"))?;
    if !out.status.success() {
        return Err(format!("simulate failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_from_cluster_explains_why_pods_wait_and_nodes_stay_or_go() {
    let cluster = cluster::shared();
    let client = cluster.client().await;
    crds::ensure_installed(&client, &[NODEPOOLS, NODECLAIMS, AKSNODECLASSES]).await;
    objects::namespace(&client, NAME).await;
    let class = manifests::node_class(NAME);
    let mut pool = manifests::node_pool(NAME, Some("D"));
    pool["spec"]["disruption"] = json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]});
    objects::apply(&client, &class).await.expect("applying the AKSNodeClass");
    objects::apply(&client, &pool).await.expect("applying the NodePool");

    // Four managed Standard_D4s_v5 nodes of the pool, as the controller would have left them.
    for name in NODES {
        let mut vm = kwok::booted_vm(name);
        vm.labels.insert("karpenter.sh/nodepool".into(), NAME.into());
        vm.labels.insert("karpenter.sh/initialized".into(), "true".into());
        vm.labels.insert("karpenter.sh/capacity-type".into(), "on-demand".into());
        kwok::register(&client, vm).await;
        kwok::ready_node(&client, name).await;
    }
    let pods = [
        bound_pod("guarded", "explain-pdb", "3", json!({})),
        bound_pod("pinned", "explain-dnd", "3", json!({"karpenter.sh/do-not-disrupt": "true"})),
        bound_pod("small", "explain-small", "500m", json!({})),
        bound_pod("full", "explain-full", "3500m", json!({})),
    ];
    for pod in &pods {
        kwok::create_pod(&client, NAME, pod).await;
    }
    for pod in &pods {
        kwok::running_pod(&client, NAME, pod.metadata.name.as_deref().unwrap()).await;
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NAME);
    let pdb = serde_json::from_value(json!({"metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}))
    .expect("a PDB");
    pdbs.create(&PostParams::default(), &pdb).await.expect("creating the PDB");
    wait::until(
        "kube-controller-manager to compute the PDB's allowance",
        Duration::from_secs(60),
        || async {
            let status = pdbs.get("guarded").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
            match (status.current_healthy, status.disruptions_allowed) {
                (1, 0) => Ok(()),
                other => Err(format!("currentHealthy, disruptionsAllowed = {other:?}")),
            }
        },
    )
    .await;
    // A pod no size can take: kube-scheduler marks it Unschedulable.
    let stuck =
        kwok::pod("stuck", json!({"app": "stuck"}), json!({"nodeSelector": {"kubernetes.io/arch": "s390x"}}));
    kwok::create_pod(&client, NAME, &stuck).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), NAME);
    wait::until("kube-scheduler to mark the pod Unschedulable", Duration::from_secs(60), || async {
        let pod = api.get("stuck").await.map_err(|e| e.to_string())?;
        let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
        match conditions.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False") {
            true => Ok(()),
            false => Err(format!("conditions {conditions:?}")),
        }
    })
    .await;

    let asked = [
        "pod/e2e-explain/stuck",
        "node/explain-pdb",
        "node/explain-dnd",
        "node/explain-small",
        "pod/e2e-explain/small",
    ];
    let mut args = vec![];
    for object in asked {
        args.extend(["--explain", object]);
    }
    // Other tests share the cluster: a run that reads their objects mid-change is tried again.
    let lines = wait::until("simulate --from-cluster to explain", Duration::from_secs(60), || async {
        simulate(&cluster.kubeconfig, &args)
    })
    .await;
    println!("simulate --from-cluster --explain:\n{}", lines.join("\n"));
    assert_eq!(lines.len(), asked.len(), "{lines:#?}");
    let line = |i: usize| lines[i].as_str();
    assert!(
        line(0).starts_with("pod/e2e-explain/stuck: unschedulable: ") && line(0).contains("s390x"),
        "{}",
        line(0)
    );
    assert!(
        line(1).starts_with("node/explain-pdb: kept: PDB e2e-explain/guarded allows 0 evictions"),
        "{}",
        line(1)
    );
    assert!(
        line(2).starts_with("node/explain-dnd: kept: do-not-disrupt pod e2e-explain/pinned"),
        "{}",
        line(2)
    );
    let small = line(3);
    assert!(
        (small.starts_with("node/explain-small: deleted: Underutilized")
            || small.starts_with("node/explain-small: consolidated: Underutilized"))
            && small.contains("saving $"),
        "{small}"
    );
    assert!(line(4).starts_with("pod/e2e-explain/small: moves: from explain-small to "), "{}", line(4));

    let pools = objects::api_for(&client, &pool).await.expect("the NodePool API");
    let _ = pools.delete(NAME, &DeleteParams::default()).await;
    let classes = objects::api_for(&client, &class).await.expect("the AKSNodeClass API");
    let _ = classes.delete(NAME, &DeleteParams::default()).await;
    let _ = pdbs.delete("guarded", &DeleteParams::default()).await;
    for pod in pods.iter().map(|p| p.metadata.name.clone().unwrap()).chain(["stuck".to_string()]) {
        let _ = api.delete(&pod, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for name in NODES {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
}
