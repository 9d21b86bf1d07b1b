//! A `NodeRegistrar` that joins like a real kubelet, from nothing but the VM's custom data.
//!
//! The AKS node image's kubelet starts with a bootstrap kubeconfig made of `API_SERVER_NAME`,
//! `KUBE_CA_CRT` and `TLS_BOOTSTRAP_TOKEN`, and then (kubelet TLS bootstrapping):
//! 1. dials `https://API_SERVER_NAME:443` and verifies the serving certificate against `KUBE_CA_CRT`
//!    for that name;
//! 2. authenticates with the bootstrap token (`system:bootstrap:<id>`, group `system:bootstrappers`),
//!    which the API server checks against the `bootstrap-token-<id>` Secret in kube-system;
//! 3. creates a CertificateSigningRequest for `system:node:<name>` (group `system:nodes`) with signer
//!    `kubernetes.io/kube-apiserver-client-kubelet`, which kube-controller-manager's csrapproving
//!    controller approves and its csrsigning controller signs;
//! 4. registers its Node with that client certificate, where NodeRestriction admission limits it to
//!    its own Node and to labels a kubelet may set.
//!
//! Here `API_SERVER_NAME:443` reaches the API server at `api_server` (the test environment's stand-in
//! for DNS and the cluster's load balancer). A step that fails leaves the VM without a Node, and the
//! reason goes to stderr, as a kubelet's log would have it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use futures::future::BoxFuture;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{DeleteParams, PostParams};
use kube::Api;

use super::boot::{BootedVm, JoinVars, NodeRegistrar};
use super::node::node_for;

/// The signer and usages of a kubelet client certificate (what csrapproving auto-approves).
const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// Registers booted VMs by TLS bootstrapping against the API server at `api_server`.
#[derive(Clone)]
pub struct TlsBootstrapKubelet {
    api_server: SocketAddr,
    /// Removes Nodes of VMs the platform deleted (the cloud node manager's job, not the kubelet's).
    admin: kube::Client,
    /// How long the kubelet waits for its CSR to be signed.
    csr_timeout: Duration,
    /// Why each failed join failed, in order (the kubelet's log).
    failures: Arc<Mutex<Vec<String>>>,
}

impl TlsBootstrapKubelet {
    pub fn new(api_server: SocketAddr, admin: kube::Client) -> TlsBootstrapKubelet {
        TlsBootstrapKubelet {
            api_server,
            admin,
            csr_timeout: Duration::from_secs(60),
            failures: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Why the joins so far failed, oldest first.
    pub fn failures(&self) -> Vec<String> {
        self.failures.lock().unwrap().clone()
    }
}

impl NodeRegistrar for TlsBootstrapKubelet {
    fn register(&self, vm: BootedVm) -> BoxFuture<'static, Result<(), String>> {
        let this = self.clone();
        Box::pin(async move {
            let result = this.join(vm).await;
            if let Err(reason) = &result {
                this.failures.lock().unwrap().push(reason.clone());
            }
            result
        })
    }

    fn deregister(&self, vm_name: String) -> BoxFuture<'static, Result<(), String>> {
        let nodes: Api<Node> = Api::all(self.admin.clone());
        Box::pin(async move {
            match nodes.delete(&vm_name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(err) => Err(format!("deleting node {vm_name}: {err}")),
            }
        })
    }
}

impl TlsBootstrapKubelet {
    async fn join(&self, vm: BootedVm) -> Result<(), String> {
        let join = vm.join.clone().ok_or("the custom data has no bootstrap variables")?;
        let (ca, server_name, token) = bootstrap_inputs(&join)?;
        let bootstrap = self.client(&ca, &server_name, |auth| auth.token = Some(token.clone().into()))?;
        let (key_pem, csr_pem) = key_and_csr(&vm.name).await?;
        let certificate = self.signed_certificate(&bootstrap, &vm.name, &csr_pem).await?;
        let node_client = self.client(&ca, &server_name, |auth| {
            auth.client_certificate_data =
                Some(base64::engine::general_purpose::STANDARD.encode(&certificate));
            auth.client_key_data = Some(base64::engine::general_purpose::STANDARD.encode(&key_pem).into());
        })?;
        let nodes: Api<Node> = Api::all(node_client);
        match nodes.create(&PostParams::default(), &node_for(&vm)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(err) => Err(format!("creating node {} as system:node:{0}: {err}", vm.name)),
        }
    }

    /// A client for `https://<server_name>:443`, reached at `api_server`, trusting only `ca`.
    fn client(
        &self,
        ca: &[Vec<u8>],
        server_name: &str,
        credentials: impl FnOnce(&mut kube::config::AuthInfo),
    ) -> Result<kube::Client, String> {
        let url =
            format!("https://{}", self.api_server).parse().map_err(|e| format!("API server URL: {e}"))?;
        let mut config = kube::Config::new(url);
        config.root_cert = Some(ca.to_vec());
        config.tls_server_name = Some(server_name.to_string());
        config.connect_timeout = Some(Duration::from_secs(5));
        credentials(&mut config.auth_info);
        kube::Client::try_from(config).map_err(|e| format!("kubelet client for {server_name}: {e}"))
    }

    /// Creates the CSR and waits until it is approved and signed; the signed certificate (PEM).
    async fn signed_certificate(
        &self,
        bootstrap: &kube::Client,
        node: &str,
        csr_pem: &[u8],
    ) -> Result<Vec<u8>, String> {
        let csrs: Api<CertificateSigningRequest> = Api::all(bootstrap.clone());
        let name = format!("node-csr-{node}");
        let csr = CertificateSigningRequest {
            metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
            spec: CertificateSigningRequestSpec {
                request: ByteString(csr_pem.to_vec()),
                signer_name: KUBELET_CLIENT_SIGNER.to_string(),
                usages: Some(vec!["digital signature".into(), "client auth".into()]),
                ..CertificateSigningRequestSpec::default()
            },
            status: None,
        };
        match csrs.create(&PostParams::default(), &csr).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => {
                return Err(format!(
                    "TLS bootstrap: creating CertificateSigningRequest {name}: {}",
                    chain(&err)
                ))
            }
        }
        let deadline = tokio::time::Instant::now() + self.csr_timeout;
        loop {
            let current =
                csrs.get(&name).await.map_err(|e| format!("TLS bootstrap: reading CSR {name}: {e}"))?;
            let status = current.status.unwrap_or_default();
            if let Some(denied) =
                status.conditions.iter().flatten().find(|c| c.type_ == "Denied" || c.type_ == "Failed")
            {
                return Err(format!("TLS bootstrap: CSR {name} {}: {:?}", denied.type_, denied.message));
            }
            if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty()) {
                return Ok(cert.0);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("TLS bootstrap: CSR {name} not signed within {:?}", self.csr_timeout));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// An error with its causes, so a TLS failure says why (e.g. the certificate's unknown issuer).
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The CA certificates (DER), the API server name and the token; the first missing or malformed one is
/// the reason the kubelet cannot start.
pub fn bootstrap_inputs(join: &JoinVars) -> Result<(Vec<Vec<u8>>, String, String), String> {
    let missing =
        |name: &str| format!("{name} is missing from the custom data; the kubelet cannot bootstrap");
    let ca_b64 =
        join.kube_ca_crt.as_deref().filter(|v| !v.is_empty()).ok_or_else(|| missing("KUBE_CA_CRT"))?;
    let server_name =
        join.api_server_name.clone().filter(|v| !v.is_empty()).ok_or_else(|| missing("API_SERVER_NAME"))?;
    let token = join
        .tls_bootstrap_token
        .clone()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| missing("TLS_BOOTSTRAP_TOKEN"))?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca_b64)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or("KUBE_CA_CRT is not base64 of a PEM bundle")?;
    let ca = pem_certificates(&pem);
    if ca.is_empty() {
        return Err("KUBE_CA_CRT holds no PEM certificate".into());
    }
    Ok((ca, server_name, token))
}

/// The DER bodies of the PEM certificates in `pem`.
fn pem_certificates(pem: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for line in pem.lines().map(str::trim) {
        match (line, &mut body) {
            ("-----BEGIN CERTIFICATE-----", _) => body = Some(String::new()),
            ("-----END CERTIFICATE-----", Some(b64)) => {
                if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b64.as_bytes()) {
                    out.push(der);
                }
                body = None;
            }
            (_, Some(b64)) => b64.push_str(line),
            _ => {}
        }
    }
    out
}

/// A fresh P-256 key and a CSR for `system:node:<node>` in `system:nodes` (PEM each), made with the
/// openssl command line as the e2e PKI is.
async fn key_and_csr(node: &str) -> Result<(Vec<u8>, Vec<u8>), String> {
    let node = node.to_string();
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
        let key = dir.path().join("kubelet.key");
        let run = |args: &[&str]| -> Result<Vec<u8>, String> {
            let out = std::process::Command::new("openssl")
                .args(args)
                .output()
                .map_err(|e| format!("running openssl: {e}"))?;
            if out.status.success() {
                Ok(out.stdout)
            } else {
                Err(format!("openssl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)))
            }
        };
        let key_path = key.display().to_string();
        run(&["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", &key_path])?;
        let subject = format!("/O=system:nodes/CN=system:node:{node}");
        let csr = run(&["req", "-new", "-key", &key_path, "-subj", &subject])?;
        let key_pem = std::fs::read(&key).map_err(|e| format!("reading the kubelet key: {e}"))?;
        Ok((key_pem, csr))
    })
    .await
    .map_err(|e| format!("generating the kubelet key: {e}"))?
}
