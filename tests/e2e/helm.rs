//! The one helm runner of the suite (the pinned helm binary of the control-plane cache), and the test that
//! the chart installs into the e2e cluster and upgrades in place.
//!
//! `helm template` and `helm lint` need no cluster ([`Helm::offline`]); install and upgrade talk to the
//! e2e cluster with its admin kubeconfig ([`Helm::for_cluster`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use serde_json::Value;

use super::cluster::{self, Cluster};
use super::crds::{self, AKSNODECLASSES, NODECLAIMS, NODEPOOLS};
use super::objects;

/// The chart, from the crate root.
pub const CHART: &str = "charts/karpenter-azure";
/// The values CI installs with (the chart-testing convention: ci/*-values.yaml).
pub const CI_VALUES: &str = "charts/karpenter-azure/ci/e2e-values.yaml";

/// The pinned helm binary, optionally pointed at a cluster.
pub struct Helm {
    bin: PathBuf,
    kubeconfig: Option<PathBuf>,
}

impl Helm {
    /// For commands that render or check the chart only.
    pub fn offline() -> Helm {
        let bin = cluster::built_bin_dir().unwrap_or_else(|reason| panic!("{reason}")).join("helm");
        Helm { bin, kubeconfig: None }
    }

    /// For commands against the e2e cluster, as its admin.
    pub fn for_cluster(cluster: &Cluster) -> Helm {
        Helm { bin: cluster.bin_dir.join("helm"), kubeconfig: Some(cluster.kubeconfig.clone()) }
    }

    /// Runs helm in the crate root; stdout and stderr together, as `Err` when helm fails.
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        // Helm's cache, config and data go to cargo's scratch directory for tests, so nothing lands in
        // $HOME and no user configuration (repositories, plugins) changes what a test sees.
        let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm");
        let mut command = Command::new(&self.bin);
        command
            .args(args)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        match &self.kubeconfig {
            Some(kubeconfig) => command.env("KUBECONFIG", kubeconfig),
            // No cluster by accident: a kubeconfig that does not exist.
            None => command.env("KUBECONFIG", home.join("no-cluster")),
        };
        let output = command.output().unwrap_or_else(|err| panic!("running {}: {err}", self.bin.display()));
        let text =
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        if output.status.success() {
            Ok(text)
        } else {
            Err(format!("helm {} failed ({}):\n{text}", args.join(" "), output.status))
        }
    }

    /// `helm template` of release `karpenter-azure` in namespace `karpenter` with `args` (values files,
    /// --set ...), as parsed documents; `Err` is helm's message.
    pub fn template(&self, args: &[&str]) -> Result<Vec<Value>, String> {
        let base = ["template", "karpenter-azure", CHART, "--namespace", "karpenter"];
        let text = self.run(&[&base[..], args].concat())?;
        Ok(objects::yaml_documents(&text))
    }
}

/// The one document of `kind` (and `name`, when given) in rendered output.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: Option<&str>) -> &'a Value {
    let mut matching =
        docs.iter().filter(|d| d["kind"] == kind && name.is_none_or(|n| d["metadata"]["name"] == n));
    let found = matching.next().unwrap_or_else(|| panic!("no {kind} {name:?} in the rendered chart"));
    assert!(matching.next().is_none(), "more than one {kind} {name:?} in the rendered chart");
    found
}

/// The value of the Deployment container's env var `name` (None when unset or taken from a reference).
fn env_value(deployment: &Deployment, name: &str) -> Option<String> {
    let spec = deployment.spec.as_ref()?.template.spec.as_ref()?;
    let env = spec.containers.first()?.env.as_ref()?;
    env.iter().find(|e| e.name == name)?.value.clone()
}

#[tokio::test]
async fn the_helm_chart_installs_and_upgrades_in_place() {
    let cluster = cluster::shared();
    let client = cluster.client().await;
    // Helm leaves CRDs that exist alone; installing ours first makes the chart's copies irrelevant here.
    crds::ensure_installed(&client, &[AKSNODECLASSES, NODECLAIMS, NODEPOOLS]).await;
    let helm = Helm::for_cluster(cluster);
    // A release of its own (the controller tests use release karpenter-azure in namespace karpenter),
    // so upgrading it cannot change the identity they run with.
    let (release, namespace) = ("upgrade-check", "karpenter-upgrade");
    let install =
        ["install", release, CHART, "--namespace", namespace, "--create-namespace", "--values", CI_VALUES];
    helm.run(&install).unwrap_or_else(|err| panic!("{err}"));
    let status = helm.run(&["status", release, "--namespace", namespace]).unwrap_or_else(|e| panic!("{e}"));
    assert!(status.contains("STATUS: deployed"), "{status}");

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let name = format!("{release}-karpenter-azure");
    let installed = deployments.get(&name).await.expect("the chart's Deployment exists");
    assert_eq!(installed.spec.as_ref().and_then(|s| s.replicas), Some(0), "ci values run no pod");
    assert_eq!(env_value(&installed, "LOG_LEVEL").as_deref(), Some("info"));

    let upgrade = |set: &str| {
        helm.run(&["upgrade", release, CHART, "--namespace", namespace, "--reuse-values", "--set", set])
    };
    upgrade("logLevel=debug").unwrap_or_else(|err| panic!("{err}"));
    let upgraded = deployments.get(&name).await.expect("the Deployment is still there");
    assert_eq!(
        env_value(&upgraded, "LOG_LEVEL").as_deref(),
        Some("debug"),
        "the upgrade reached the pod template"
    );
    assert!(
        upgraded.metadata.generation > installed.metadata.generation,
        "the upgrade changed the Deployment's spec ({:?} -> {:?})",
        installed.metadata.generation,
        upgraded.metadata.generation
    );
    let history = helm.run(&["history", release, "--namespace", namespace]).unwrap_or_else(|e| panic!("{e}"));
    assert!(history.lines().any(|l| l.starts_with('2') && l.contains("deployed")), "{history}");

    // A value the schema rejects stops the upgrade before anything changes.
    let message = upgrade("replicas=two").expect_err("replicas=two is refused");
    assert!(message.contains("/replicas") && message.contains("want integer"), "{message}");
    let unchanged = deployments.get(&name).await.expect("the Deployment is still there");
    assert_eq!(unchanged.metadata.generation, upgraded.metadata.generation);
}
