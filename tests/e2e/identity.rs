//! The identity the controller tests run as: the chart's ServiceAccount, not the cluster admin, so a
//! permission the controller needs but the chart does not grant fails a test (a 403 in the controller's
//! log) instead of going unnoticed until a real install.
//!
//! Once per test binary the chart is installed (release `karpenter-azure`, namespace `karpenter`, the CI
//! values: no pod runs), a token is requested for its ServiceAccount through the TokenRequest API, and a
//! kubeconfig with that token and the cluster's server and CA is written into the cluster directory.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::OnceCell;

use super::cluster::Cluster;
use super::crds::{self, AKSNODECLASSES, NODECLAIMS, NODEPOOLS};
use super::helm::{Helm, CHART, CI_VALUES};

/// Where the controller runs in a real install, and so where its Lease lives.
pub const NAMESPACE: &str = "karpenter";
pub const RELEASE: &str = "karpenter-azure";
/// The chart names the ServiceAccount after the release.
pub const SERVICE_ACCOUNT: &str = "karpenter-azure";
/// Longer than any run of the suite; the API server caps nothing below this by default.
const TOKEN_SECONDS: i64 = 2 * 60 * 60;

static KUBECONFIG: OnceCell<PathBuf> = OnceCell::const_new();

/// The kubeconfig of the chart's ServiceAccount; the first call installs the chart and writes it.
pub async fn controller_kubeconfig(cluster: &Cluster, client: &Client) -> PathBuf {
    KUBECONFIG.get_or_init(|| install_and_issue(cluster, client)).await.clone()
}

async fn install_and_issue(cluster: &Cluster, client: &Client) -> PathBuf {
    // Helm leaves CRDs that exist alone; installing ours first means every test sees the same ones.
    crds::ensure_installed(client, &[AKSNODECLASSES, NODECLAIMS, NODEPOOLS]).await;
    // upgrade --install: a test that failed half-way through this leaves a release the next one reuses.
    let args = [
        "upgrade",
        "--install",
        RELEASE,
        CHART,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--values",
        CI_VALUES,
    ];
    Helm::for_cluster(cluster).run(&args).unwrap_or_else(|err| panic!("{err}"));

    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let request = TokenRequest {
        spec: TokenRequestSpec { expiration_seconds: Some(TOKEN_SECONDS), ..TokenRequestSpec::default() },
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|err| panic!("requesting a token for {NAMESPACE}/{SERVICE_ACCOUNT}: {err}"));
    let token = issued.status.expect("a TokenRequest answer has a status").token;

    let path = cluster.dir.join("controller.kubeconfig");
    write_private(&path, &kubeconfig(cluster, &token));
    path
}

/// A kubeconfig for `token` against the admin kubeconfig's server, trusting the same CA.
fn kubeconfig(cluster: &Cluster, token: &str) -> String {
    let admin = std::fs::read_to_string(&cluster.kubeconfig)
        .unwrap_or_else(|err| panic!("{}: {err}", cluster.kubeconfig.display()));
    let admin: serde_yaml::Value = serde_yaml::from_str(&admin).expect("the admin kubeconfig is YAML");
    let server = &admin["clusters"][0]["cluster"];
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {
            "server": server["server"].as_str().expect("server"),
            "certificate-authority-data": server["certificate-authority-data"].as_str().expect("CA data"),
        }}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "controller", "context": {
            "cluster": "e2e", "user": SERVICE_ACCOUNT, "namespace": NAMESPACE,
        }}],
        "current-context": "controller",
    });
    serde_yaml::to_string(&config).expect("kubeconfig serializes")
}

/// Writes a file only its owner can read: it holds a bearer token.
fn write_private(path: &std::path::Path, text: &str) {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    file.write_all(text.as_bytes()).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
}
