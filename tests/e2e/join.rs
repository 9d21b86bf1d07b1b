//! Nodes that join like real kubelets: the VM's Node is registered by `TlsBootstrapKubelet`, which has
//! nothing but the custom data the controller rendered. It verifies the API server with `KUBE_CA_CRT`,
//! authenticates with `TLS_BOOTSTRAP_TOKEN` against a real bootstrap-token Secret, gets its client
//! certificate from a CSR that kube-controller-manager approves and signs, and creates its Node under
//! NodeRestriction. A wrong CA, an unknown token or an expired one leaves the VM without a Node, and
//! the NodeClaim ends in the registration timeout with a clear event.
//!
//! The cluster side is what an AKS cluster (or a self-hosted one following docs/install-aks.md) has: the
//! bootstrap-token Secret and the two ClusterRoleBindings that let `system:bootstrappers` request node
//! client certificates and have them approved.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::{json, Value};

use super::controller::Controller;
use super::lookups::nodeclaims;
use super::{cleanup, cluster, manifests, objects, setup};
use fake_azure::arm::TlsBootstrapKubelet;

const STAGE: Duration = Duration::from_secs(60);
const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";
/// Short, so the negative cases end within the test; the event is the same as after 15 minutes.
const REGISTRATION_TIMEOUT: &str = "25s";

/// The RBAC every TLS-bootstrapping cluster has (kubeadm and AKS create the same bindings).
fn bootstrapper_bindings() -> Vec<Value> {
    let binding = |name: &str, role: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:bootstrappers"}]})
    };
    vec![
        binding("e2e-bootstrappers-create-csrs", "system:node-bootstrapper"),
        binding(
            "e2e-bootstrappers-auto-approve",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        ),
    ]
}

/// A bootstrap token `<id>.<secret>` and its Secret in kube-system, expiring at `expiration`.
fn bootstrap_token(id: &str, expiration: &str) -> (String, Value) {
    let secret = format!("{id}{}", "0123456789"); // 16 characters with the 6 of the id
    let token = format!("{id}.{secret}");
    let object = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": id, "token-secret": secret, "expiration": expiration,
            "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true"}});
    (token, object)
}

fn pod(name: &str) -> Value {
    pod_requesting(name, json!({"cpu": "500m", "memory": "1Gi"}))
}

/// The pod, with the GPU a size with the NVIDIA driver provides.
fn gpu_pod(name: &str) -> Value {
    pod_requesting(name, json!({"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}))
}

fn pod_requesting(name: &str, requests: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "joiner", "namespace": name},
    "spec": {
        "nodeSelector": {LABEL_NODEPOOL: name},
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": requests.clone(), "limits": requests.get("nvidia.com/gpu")
                .map_or(json!({}), |g| json!({"nvidia.com/gpu": g}))}}]
    }})
}

/// The events about pod `joiner` in `namespace`, oldest first: who bound, evicted or deleted it.
async fn pod_events(client: &Client, namespace: &str) -> String {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    match events.list(&ListParams::default()).await {
        Ok(list) => {
            let mut about: Vec<_> = list
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("joiner"))
                .map(|e| {
                    let when = (e.event_time.as_ref().map(|t| t.0.to_string()))
                        .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| t.0.to_string()))
                        .unwrap_or_default();
                    let by = e.reporting_controller.unwrap_or_default();
                    format!("{when} {by} {}: {}", e.reason.unwrap_or_default(), e.note.unwrap_or_default())
                })
                .collect();
            about.sort();
            format!("events about the pod: {about:?}")
        }
        Err(error) => format!("listing the pod's events: {error}"),
    }
}

/// Waits for pod `joiner` (created from `pod`) to run in `namespace`, and returns its node.
///
/// kube-controller-manager's taint-eviction controller may delete a pod bound in the instant the
/// claim's `karpenter.sh/unregistered:NoExecute` taint is removed: kube-scheduler binds on the Node
/// without the taint, while the eviction controller's own Node cache may still hold it (the two watch
/// streams are not ordered). A workload's controller creates such a pod again; so does this wait, up
/// to twice, and only when the pod's events name that eviction.
async fn joiner_node(
    client: &Client,
    controller: &Controller,
    namespace: &str,
    pod: &Value,
    kubelet: &TlsBootstrapKubelet,
) -> String {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    let recreated = AtomicUsize::new(0);
    controller
        .wait_until("the pod to run on the joined node", STAGE, || async {
            let found = match pods.get_opt("joiner").await {
                Ok(found) => found,
                Err(error) => return Err(format!("reading the pod: {error}")),
            };
            let Some(found) = found else {
                let events = pod_events(client, namespace).await;
                let evicted = events.matches("TaintManagerEviction").count();
                if evicted > recreated.load(Ordering::SeqCst) && evicted <= 2 {
                    recreated.store(evicted, Ordering::SeqCst);
                    println!("e2e join: the pod was evicted by a stale taint; created again ({events})");
                    objects::apply(client, pod).await.map_err(|e| format!("creating the pod again: {e}"))?;
                }
                return Err(format!("the pod is gone; {events}"));
            };
            let phase = found.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            let node = found.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            if phase == "Running" {
                Ok(node)
            } else {
                Err(format!("pod phase {phase:?} on {node:?}; kubelet failures {:?}", kubelet.failures()))
            }
        })
        .await
}

/// Sets up the cluster side and a controller whose VMs join by TLS bootstrapping through `kubelet`.
async fn start(
    client: &Client,
    name: &str,
    extra_env: &[(&'static str, String)],
    kubelet: Arc<TlsBootstrapKubelet>,
    pod: Value,
) -> Controller {
    for binding in bootstrapper_bindings() {
        objects::apply(client, &binding).await.expect("applying the bootstrapper bindings");
    }
    let controller = setup::controller(name).envs(extra_env).registrar(kubelet).start(client).await;
    let (class, pool) = (manifests::node_class(name), manifests::node_pool(name, None));
    setup::class_and_pool_ready(client, &controller, &class, &pool).await;
    objects::apply(client, &pod).await.expect("creating the pod");
    controller
}

async fn claim_of(client: &Client, controller: &Controller, name: &str) -> String {
    controller
        .wait_until("a NodeClaim for the pod", STAGE, || async {
            let list = nodeclaims(client)
                .list(&ListParams::default().labels(&format!("{LABEL_NODEPOOL}={name}")))
                .await
                .map_err(|e| format!("listing NodeClaims: {e}"))?;
            list.items.into_iter().find_map(|c| c.metadata.name).ok_or_else(|| "no NodeClaim yet".to_string())
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_joins_with_only_its_custom_data_through_tls_bootstrapping() {
    const NAME: &str = "e2e-join";
    let client = cluster::shared().client().await;
    let (token, secret) = bootstrap_token("e2ej01", "2099-01-01T00:00:00Z");
    objects::apply(&client, &secret).await.expect("applying the bootstrap-token Secret");
    let kubelet = Arc::new(TlsBootstrapKubelet::new(cluster::shared().api_server_addr(), client.clone()));
    let controller =
        start(&client, NAME, &[("KUBELET_BOOTSTRAP_TOKEN", token)], kubelet.clone(), pod(NAME)).await;
    let claim = claim_of(&client, &controller, NAME).await;
    let node_name = joiner_node(&client, &controller, NAME, &pod(NAME), &kubelet).await;

    // The Node's client certificate came from a CSR the bootstrap token made, approved and signed by
    // kube-controller-manager.
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr = csrs.get(&format!("node-csr-{node_name}")).await.expect("the kubelet's CSR");
    assert_eq!(csr.spec.username.as_deref(), Some("system:bootstrap:e2ej01"));
    assert_eq!(csr.spec.signer_name, "kubernetes.io/kube-apiserver-client-kubelet");
    let conditions = csr.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    assert!(conditions.iter().any(|c| c.type_ == "Approved" && c.status == "True"), "{conditions:?}");
    assert!(csr.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some_and(|c| !c.0.is_empty()));

    // Labels from KUBELET_NODE_LABELS, the claim's name, capacity from max-pods.
    let node = Api::<Node>::all(client.clone()).get(&node_name).await.expect("the joined node");
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(LABEL_NODEPOOL).map(String::as_str), Some(NAME));
    assert_eq!(labels.get("kubernetes.azure.com/ebpf-dataplane").map(String::as_str), Some("cilium"));
    assert_eq!(labels.get("kubernetes.azure.com/mode").map(String::as_str), Some("user"));
    assert_eq!(labels.get("karpenter.sh/registered").map(String::as_str), Some("true"));
    let pods_capacity =
        node.status.as_ref().and_then(|s| s.capacity.as_ref()).and_then(|c| c.get("pods").cloned());
    assert_eq!(pods_capacity.map(|q| q.0), Some("250".to_string()), "max-pods under Azure CNI overlay");
    let claim_json = serde_json::to_value(nodeclaims(&client).get(&claim).await.unwrap()).unwrap();
    assert_eq!(claim_json["status"]["nodeName"], node_name);
    assert!(kubelet.failures().is_empty(), "{:?}", kubelet.failures());

    cleanup::remove(&client, NAME, &[pod(NAME)], || controller.exit_status().is_none()).await;
}

/// Starts a controller whose nodes cannot join, checks the kubelet failed for `why`, and waits for the
/// claim's RegistrationTimeout event.
async fn never_joins(name: &str, extra_env: Vec<(&'static str, String)>, why: &str) {
    let client = cluster::shared().client().await;
    let mut env = vec![("KARPENTER_REGISTRATION_TIMEOUT", REGISTRATION_TIMEOUT.to_string())];
    env.extend(extra_env);
    let kubelet = Arc::new(TlsBootstrapKubelet::new(cluster::shared().api_server_addr(), client.clone()));
    let controller = start(&client, name, &env, kubelet.clone(), pod(name)).await;
    let claim = claim_of(&client, &controller, name).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let note = controller
        .wait_until("a RegistrationTimeout event on the NodeClaim", Duration::from_secs(90), || async {
            let list = events.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("RegistrationTimeout")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(claim.as_str())
                })
                .and_then(|e| e.note)
                .ok_or_else(|| "no RegistrationTimeout event yet".to_string())
        })
        .await;
    assert!(note.contains("Node not registered within 25s"), "{note}");
    assert!(note.contains("KUBE_CA_CRT") && note.contains("TLS_BOOTSTRAP_TOKEN"), "{note}");
    // No Node was ever created for the claim's VM.
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.unwrap();
    let ours: Vec<String> = nodes
        .items
        .iter()
        .filter(|n| {
            n.metadata.labels.as_ref().and_then(|l| l.get(LABEL_NODEPOOL)).map(String::as_str) == Some(name)
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    assert!(ours.is_empty(), "nodes joined although they should not: {ours:?}");
    let failures = kubelet.failures();
    assert!(
        !failures.is_empty() && failures.iter().all(|f| f.contains(why)),
        "expected {why:?} in {failures:?}"
    );
    cleanup::remove(&client, name, &[pod(name)], || controller.exit_status().is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_bootstrap_token_never_joins_and_ends_in_the_registration_timeout() {
    // Well-formed, but there is no bootstrap-token-e2ej02 Secret.
    never_joins(
        "e2e-join-unknown-token",
        vec![("KUBELET_BOOTSTRAP_TOKEN", "e2ej02.0000000000000000".into())],
        "401",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_bootstrap_token_never_joins_and_ends_in_the_registration_timeout() {
    let client = cluster::shared().client().await;
    let (token, secret) = bootstrap_token("e2ej03", "2020-01-01T00:00:00Z");
    objects::apply(&client, &secret).await.expect("applying the expired bootstrap-token Secret");
    never_joins("e2e-join-expired-token", vec![("KUBELET_BOOTSTRAP_TOKEN", token)], "401").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_cluster_ca_never_joins_and_ends_in_the_registration_timeout() {
    let client = cluster::shared().client().await;
    let (token, secret) = bootstrap_token("e2ej04", "2099-01-01T00:00:00Z");
    objects::apply(&client, &secret).await.expect("applying the bootstrap-token Secret");
    // A CA that did not sign the API server's certificate: the front-proxy CA of the same cluster.
    let wrong_ca = std::fs::read_to_string(cluster::shared().dir.join("pki/front-proxy-ca.crt"))
        .expect("front-proxy CA");
    never_joins(
        "e2e-join-wrong-ca",
        vec![("KUBELET_BOOTSTRAP_TOKEN", token), ("CLUSTER_CA_BUNDLE", wrong_ca)],
        "UnknownIssuer",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_size_joins_with_the_driver_and_offers_nvidia_gpus() {
    const NAME: &str = "e2e-join-gpu";
    let client = cluster::shared().client().await;
    let (token, secret) = bootstrap_token("e2ej05", "2099-01-01T00:00:00Z");
    objects::apply(&client, &secret).await.expect("applying the bootstrap-token Secret");
    let kubelet = Arc::new(TlsBootstrapKubelet::new(cluster::shared().api_server_addr(), client.clone()));
    let env = [("KUBELET_BOOTSTRAP_TOKEN", token)];
    let controller = start(&client, NAME, &env, kubelet.clone(), gpu_pod(NAME)).await;
    let node_name = joiner_node(&client, &controller, NAME, &gpu_pod(NAME), &kubelet).await;
    let node = Api::<Node>::all(client.clone()).get(&node_name).await.expect("the joined node");
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.clone()).unwrap_or_default();
    let gpus: u32 = allocatable.get("nvidia.com/gpu").map_or(0, |q| q.0.parse().unwrap_or(0));
    assert!(gpus >= 1, "nvidia.com/gpu allocatable on {node_name}: {allocatable:?}");
    let size = node.metadata.labels.as_ref().and_then(|l| l.get("node.kubernetes.io/instance-type").cloned());
    assert!(
        size.as_deref().is_some_and(karpenter_azure::cloud::azure::bootstrap::gpu::is_nvidia_size),
        "{size:?} is a size AKS installs the NVIDIA driver on"
    );
    cleanup::remove(&client, NAME, &[gpu_pod(NAME)], || controller.exit_status().is_none()).await;
}
