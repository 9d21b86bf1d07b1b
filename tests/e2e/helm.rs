//! The Helm chart lints and installs into the e2e cluster, with the pinned helm binary of the control-plane
//! cache. Until `charts/karpenter-azure/Chart.yaml` exists the test says so and passes.

use std::path::Path;
use std::process::Command;

use super::cluster;
use super::crds::{self, AKSNODECLASSES, NODECLAIMS, NODEPOOLS};

const CHART: &str = "charts/karpenter-azure";

/// Runs helm with its cache, config and data under the cluster directory, so nothing lands in $HOME.
fn helm(cluster: &cluster::Cluster, args: &[&str]) -> String {
    let home = cluster.dir.join("helm");
    let output = Command::new(cluster.bin_dir.join("helm"))
        .args(args)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running helm");
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "helm {}:\n{text}", args.join(" "));
    text
}

#[tokio::test]
async fn the_helm_chart_lints_and_installs() {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join(CHART);
    if !chart.join("Chart.yaml").is_file() {
        eprintln!("note: {CHART}/Chart.yaml does not exist yet; skipping helm lint and helm install");
        return;
    }
    let cluster = cluster::shared();
    let client = cluster.client().await;
    // Helm leaves CRDs that exist alone; installing ours first makes the chart's copies irrelevant here.
    crds::ensure_installed(&client, &[AKSNODECLASSES, NODECLAIMS, NODEPOOLS]).await;

    // Charts keep CI values in ci/*-values.yaml (the chart-testing convention).
    let values = chart.join("ci/e2e-values.yaml");
    let mut extra = Vec::new();
    if values.is_file() {
        extra = vec!["--values", values.to_str().expect("UTF-8 path")];
    }
    helm(cluster, &[&["lint", CHART], extra.as_slice()].concat());
    let install = [
        &["install", "karpenter-azure", CHART, "--namespace", "karpenter", "--create-namespace"],
        extra.as_slice(),
    ];
    helm(cluster, &install.concat());
    let status = helm(cluster, &["status", "karpenter-azure", "--namespace", "karpenter"]);
    assert!(status.contains("STATUS: deployed"), "{status}");
}
