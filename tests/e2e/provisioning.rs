//! The controller end to end: the `karpenter-azure controller` binary against the
//! real control plane and the fake ARM, from pending pods to running pods on launched VMs, and from
//! deleted NodeClaims back to nothing.
//!
//! Each test has its own namespace, AKSNodeClass and NodePool (all named after the test), its own
//! controller and fake ARM, and removes what it created. The Deployment's pods select their NodePool with
//! `karpenter.sh/nodepool`, so they land only on nodes launched for them, never on other tests' kwok nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_azure::catalog::{embedded_sku, instancetype};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};
use serde_json::Value;

use super::controller::{Controller, CLUSTER_NAME};
use super::lookups::{claims_of, condition_is_true, is_running, list_pods, nodeclaims};
use super::manifests::Scenario;
use super::setup::{self, conditions_summary};
use super::{cleanup, cluster, objects};

/// How long each stage may take: the "within about 60 s".
const STAGE: Duration = Duration::from_secs(60);
/// Status conditions may be written just after the Node is usable; a little slack for that write.
const STATUS_SETTLE: Duration = Duration::from_secs(15);

const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";
const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const LABEL_SKU_FAMILY: &str = "karpenter.azure.com/sku-family";
const TAINT_UNREGISTERED: &str = "karpenter.sh/unregistered";
const TAG_CLUSTER: &str = "karpenter.azure.com_cluster";
const TAG_NODEPOOL: &str = "karpenter.sh_nodepool";
const APP: &str = super::manifests::SCENARIO_APP;

/// What `provision` saw, for the test's own checks.
struct Provisioned {
    first_claim_after: Duration,
    pods_running_after: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_pending_pods_become_nodeclaims_vms_and_nodes_and_all_run() {
    let scenario = Scenario { name: "e2e-prov-burst" };
    let replicas = 30;
    let client = cluster::shared().client().await;
    let controller = set_up(&client, &scenario).await;

    let provisioned = provision(&client, &controller, &scenario, replicas).await;
    let claims = wait_for_claim_conditions(&client, &controller, &scenario).await;
    let nodes = list_nodes(&client).await;
    let pods = list_pods(&client, scenario.name, APP).await.expect("listing pods");
    let mut problems = Vec::new();
    let mut our_nodes = BTreeSet::new();
    for claim in &claims {
        problems.extend(check_claim(claim, scenario.name, &controller, &nodes));
        if let Some(node) = node_for(claim, &nodes) {
            our_nodes.insert(node.metadata.name.clone().unwrap_or_default());
        }
    }
    problems.extend(check_one_vm_per_claim(&claims, scenario.name, &controller));
    problems.extend(check_each_step_once(&claims, &controller.log()));
    for pod in &pods {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        if !our_nodes.contains(&node) {
            problems.push(format!(
                "pod {} runs on {node:?}, not on a node of the scenario's NodeClaims",
                name(pod)
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} NodeClaims for {replicas} pods, but:\n- {}",
        claims.len(),
        problems.join("\n- ")
    );

    let sizes: BTreeMap<String, usize> = claims.iter().fold(BTreeMap::new(), |mut sizes, claim| {
        *sizes.entry(claim_label(claim, LABEL_INSTANCE_TYPE).to_string()).or_default() += 1;
        sizes
    });
    let pods_per_node: BTreeMap<String, usize> = pods.iter().fold(BTreeMap::new(), |mut counts, pod| {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        *counts.entry(node).or_default() += 1;
        counts
    });
    println!(
        "e2e provisioning: {replicas} pods → {} NodeClaims {sizes:?}; after the Deployment was created: \
         first NodeClaim {:.1?}, all pods Running {:.1?}; pods per node {pods_per_node:?}",
        claims.len(),
        provisioned.first_claim_after,
        provisioned.pods_running_after
    );
    cleanup::remove(&client, scenario.name, &[scenario.deployment(0)], || controller.exit_status().is_none())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_to_zero_and_deleting_the_nodeclaims_removes_vms_nics_nodes_and_finalizers() {
    let scenario = Scenario { name: "e2e-prov-scale-down" };
    let client = cluster::shared().client().await;
    let controller = set_up(&client, &scenario).await;
    let provisioned = provision(&client, &controller, &scenario, 6).await;
    let claims = wait_for_claim_conditions(&client, &controller, &scenario).await;
    let claim_names: Vec<String> = claims.iter().map(|c| object_name(c).to_string()).collect();
    let vm_names: BTreeSet<String> =
        claims.iter().filter_map(vm_name_of).map(str::to_ascii_lowercase).collect();
    let nodes = list_nodes(&client).await;
    let node_names: Vec<String> =
        claims.iter().filter_map(|c| node_for(c, &nodes)).filter_map(|n| n.metadata.name.clone()).collect();
    assert_eq!(vm_names.len(), claims.len(), "every NodeClaim has a providerID naming its VM: {claims:#?}");
    assert_eq!(node_names.len(), claims.len(), "every NodeClaim has a Node; claims {claim_names:?}");

    objects::apply(&client, &scenario.deployment(0)).await.expect("scaling the Deployment to zero");
    let pods_gone = Instant::now();
    controller
        .wait_until("the Deployment's pods to be gone after scaling to zero", STAGE, || async {
            let pods = list_pods(&client, scenario.name, APP).await?;
            if pods.is_empty() {
                Ok(())
            } else {
                Err(format!("{} pods left", pods.len()))
            }
        })
        .await;
    let pods_gone_after = pods_gone.elapsed();

    let deleted = Instant::now();
    let deadline = deleted + STAGE;
    let claims_api = nodeclaims(&client);
    for claim in &claim_names {
        match claims_api.delete(claim, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => panic!("deleting NodeClaim {claim}: {err}"),
        }
    }
    let fake = controller.fake();
    controller
        .wait_until("the NodeClaims' VMs and NICs to be gone from the fake ARM", left(deadline), || async {
            let vms: Vec<String> = fake
                .vms()
                .into_iter()
                .filter(|vm| vm_names.contains(&vm.name.to_ascii_lowercase()))
                .map(|vm| format!("VM {} ({})", vm.name, vm.provisioning_state))
                .collect();
            let nics: Vec<String> = fake
                .nics()
                .iter()
                .filter_map(|nic| nic["name"].as_str())
                .filter(|nic| vm_names.contains(&nic.to_ascii_lowercase()))
                .map(|nic| format!("NIC {nic}"))
                .collect();
            if vms.is_empty() && nics.is_empty() {
                Ok(())
            } else {
                Err([vms, nics].concat().join(", "))
            }
        })
        .await;
    let azure_gone_after = deleted.elapsed();
    let nodes_api: Api<Node> = Api::all(client.clone());
    controller
        .wait_until("the NodeClaims' Nodes to be deleted", left(deadline), || async {
            let mut left = Vec::new();
            for node in &node_names {
                if let Some(found) = nodes_api.get_opt(node).await.map_err(|err| err.to_string())? {
                    left.push(format!("{node} (finalizers {:?})", found.metadata.finalizers));
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(left.join(", "))
            }
        })
        .await;
    controller
        .wait_until("the NodeClaims to be gone (finalizers removed)", left(deadline), || async {
            let mut left = Vec::new();
            for claim in &claim_names {
                if let Some(found) = claims_api.get_opt(claim).await.map_err(|err| err.to_string())? {
                    left.push(format!(
                        "{claim} (deletionTimestamp {:?}, finalizers {:?}, conditions {})",
                        found.metadata.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
                        &found.metadata.finalizers,
                        conditions_summary(&serde_json::to_value(&found).unwrap_or_default())
                    ));
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(left.join("; "))
            }
        })
        .await;
    println!(
        "e2e scale-down: {} NodeClaims (pods Running {:.1?} after the Deployment); pods gone \
         {pods_gone_after:.1?} after scaling to zero; after deleting the NodeClaims: VMs and NICs gone \
         {azure_gone_after:.1?}, Nodes and NodeClaims gone {:.1?}",
        claim_names.len(),
        provisioned.pods_running_after,
        deleted.elapsed()
    );
    cleanup::remove(&client, scenario.name, &[scenario.deployment(0)], || controller.exit_status().is_none())
        .await;
}

/// The controller, then the AKSNodeClass and NodePool, Ready (it provisions only for Ready pools).
async fn set_up(client: &Client, scenario: &Scenario) -> Controller {
    let controller = setup::controller(scenario.name).start(client).await;
    setup::class_and_pool_ready(client, &controller, &scenario.node_class(), &scenario.node_pool()).await;
    controller
}

/// Creates the Deployment and waits until NodeClaims appear and every pod runs.
async fn provision(
    client: &Client,
    controller: &Controller,
    scenario: &Scenario,
    replicas: usize,
) -> Provisioned {
    let created = Instant::now();
    objects::apply(client, &scenario.deployment(replicas as u32)).await.expect("applying the Deployment");
    controller
        .wait_until("NodeClaims labelled with the NodePool", STAGE, || async {
            let claims = claims_of(client, scenario.name).await?;
            if claims.is_empty() {
                Err(pending_pods_summary(client, scenario.name).await)
            } else {
                Ok(())
            }
        })
        .await;
    let first_claim_after = created.elapsed();
    let what = format!("all {replicas} pods of the Deployment to be bound and Running");
    controller
        .wait_until(&what, STAGE.saturating_sub(first_claim_after), || async {
            let pods = list_pods(client, scenario.name, APP).await?;
            let running = pods.iter().filter(|pod| is_running(pod)).count();
            if running == replicas && pods.len() == replicas {
                return Ok(());
            }
            let claims = claims_of(client, scenario.name).await?;
            let summaries: Vec<String> = claims.iter().map(claim_summary).collect();
            Err(format!(
                "{running} of {} pods Running; {}; NodeClaims: [{}]",
                pods.len(),
                pending_pods_summary(client, scenario.name).await,
                summaries.join("; ")
            ))
        })
        .await;
    Provisioned { first_claim_after, pods_running_after: created.elapsed() }
}

/// The scenario's NodeClaims once each has Launched and Registered True.
async fn wait_for_claim_conditions(
    client: &Client,
    controller: &Controller,
    scenario: &Scenario,
) -> Vec<Value> {
    controller
        .wait_until("every NodeClaim to have Launched and Registered True", STATUS_SETTLE, || async {
            let claims = claims_of(client, scenario.name).await?;
            let unsettled: Vec<String> = claims
                .iter()
                .filter(|c| !condition_is_true(c, "Launched") || !condition_is_true(c, "Registered"))
                .map(claim_summary)
                .collect();
            if unsettled.is_empty() {
                Ok(claims)
            } else {
                Err(unsettled.join("; "))
            }
        })
        .await
}

/// What test 1 expects of one NodeClaim, its VM and its Node; each problem found, as a sentence.
fn check_claim(claim: &Value, pool: &str, controller: &Controller, nodes: &[Node]) -> Vec<String> {
    let name = object_name(claim);
    let mut problems = Vec::new();
    let mut problem = |text: String| problems.push(format!("NodeClaim {name}: {text}"));
    if claim_label(claim, LABEL_NODEPOOL) != pool {
        problem(format!("label {LABEL_NODEPOOL} should be {pool:?}"));
    }
    let Some(vm_name) = vm_name_of(claim) else {
        problem(format!("no status.providerID; {}", claim_summary(claim)));
        return problems;
    };
    let options = instance_type_options(claim);
    let Some(vm) = controller.fake().vm(vm_name) else {
        problem(format!("its VM {vm_name} is not in the fake ARM"));
        return problems;
    };
    match options.first() {
        None => problem(format!("no {LABEL_INSTANCE_TYPE} In requirement in spec.requirements")),
        Some(first) if *first != vm.vm_size => problem(format!(
            "launched {} but the first (best) of its instance-type options is {first}; options {options:?}",
            vm.vm_size
        )),
        Some(_) => {}
    }
    if claim_label(claim, LABEL_INSTANCE_TYPE) != vm.vm_size {
        problem(format!("label {LABEL_INSTANCE_TYPE} should be the launched size {}", vm.vm_size));
    }
    match embedded_sku(&vm.vm_size).map(|sku| instancetype::labels_for(sku, "eastus")) {
        Some(labels) => {
            let (family, arch) = (&labels[LABEL_SKU_FAMILY], &labels["kubernetes.io/arch"]);
            if family != "D" || arch != "amd64" {
                problem(format!("size {} is family {family} / {arch}, not D / amd64", vm.vm_size));
            }
        }
        None => problem(format!("size {} is not in the embedded catalog", vm.vm_size)),
    }
    if vm.spot {
        problem(format!("VM {vm_name} is spot; the NodePool allows on-demand only"));
    }
    let tags = &vm.document["tags"];
    if tags[TAG_CLUSTER] != CLUSTER_NAME || tags[TAG_NODEPOOL] != pool {
        problem(format!(
            "VM {vm_name} should be tagged {TAG_CLUSTER}={CLUSTER_NAME}, {TAG_NODEPOOL}={pool}: {tags}"
        ));
    }
    for condition in ["Launched", "Registered"] {
        if !condition_is_true(claim, condition) {
            problem(format!("condition {condition} is not True: {}", conditions_summary(claim)));
        }
    }
    let Some(node) = node_for(claim, nodes) else {
        problem(format!("no Node has its providerID {}", claim["status"]["providerID"]));
        return problems;
    };
    let node_name = node.metadata.name.clone().unwrap_or_default();
    if claim["status"]["nodeName"] != node_name.as_str() {
        problem(format!("status.nodeName {} should be {node_name}", claim["status"]["nodeName"]));
    }
    let node_labels = node.metadata.labels.clone().unwrap_or_default();
    let claim_labels = claim["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    for (key, value) in &claim_labels {
        if node_labels.get(key).map(String::as_str) != value.as_str() {
            problem(format!(
                "Node {node_name} lacks the claim's label {key}={value} (has {:?})",
                node_labels.get(key)
            ));
        }
    }
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    if taints.iter().any(|t| t.key == TAINT_UNREGISTERED) {
        problem(format!("Node {node_name} still has the {TAINT_UNREGISTERED} taint"));
    }
    problems
}

/// The fake ARM holds exactly one VM per NodeClaim among those tagged with the scenario's NodePool.
fn check_one_vm_per_claim(claims: &[Value], pool: &str, controller: &Controller) -> Vec<String> {
    let expected: BTreeSet<String> =
        claims.iter().filter_map(vm_name_of).map(str::to_ascii_lowercase).collect();
    let tagged: BTreeSet<String> = controller
        .fake()
        .vms()
        .iter()
        .filter(|vm| vm.document["tags"][TAG_NODEPOOL] == pool)
        .map(|vm| vm.name.to_ascii_lowercase())
        .collect();
    if expected == tagged {
        Vec::new()
    } else {
        vec![format!(
            "VMs tagged {TAG_NODEPOOL}={pool} {tagged:?} should be exactly the claims' VMs {expected:?}"
        )]
    }
}

/// Each claim is launched, registered and initialized once: a reconcile handed a claim older than the
/// controller's last write (a Node event can overtake the claim's own) must not take the step again,
/// which would count `karpenter_nodes_created_total` twice and report the claim twice.
fn check_each_step_once(claims: &[Value], log: &str) -> Vec<String> {
    let mut taken: BTreeMap<(String, String), usize> = BTreeMap::new();
    for line in log.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else { continue };
        let (Some(message), Some(claim)) = (entry["message"].as_str(), entry["nodeclaim"].as_str()) else {
            continue;
        };
        *taken.entry((claim.to_string(), message.to_string())).or_default() += 1;
    }
    let mut problems = Vec::new();
    for claim in claims.iter().map(object_name) {
        for step in ["launched nodeclaim", "registered nodeclaim", "initialized nodeclaim"] {
            let n = taken.get(&(claim.to_string(), step.to_string())).copied().unwrap_or(0);
            if n != 1 {
                problems.push(format!("the log says {step:?} {n} times for {claim}, want once"));
            }
        }
    }
    problems
}

async fn list_nodes(client: &Client) -> Vec<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.list(&ListParams::default()).await.expect("listing nodes").items
}

/// How many pods are not Running, and the scheduler's message for one of them.
async fn pending_pods_summary(client: &Client, namespace: &str) -> String {
    let pods = match list_pods(client, namespace, APP).await {
        Ok(pods) => pods,
        Err(err) => return err,
    };
    let waiting: Vec<&Pod> = pods.iter().filter(|pod| !is_running(pod)).collect();
    let reason = waiting.iter().find_map(|pod| {
        let conditions = pod.status.as_ref()?.conditions.as_ref()?;
        let scheduled = conditions.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
        Some(format!("{}: {}", name(pod), scheduled.message.clone().unwrap_or_default()))
    });
    format!("{} of {} pods not Running (e.g. {})", waiting.len(), pods.len(), reason.unwrap_or_default())
}

fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

fn object_name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

fn claim_label<'a>(claim: &'a Value, key: &str) -> &'a str {
    claim["metadata"]["labels"][key].as_str().unwrap_or_default()
}

/// The VM name: the last segment of `status.providerID`.
fn vm_name_of(claim: &Value) -> Option<&str> {
    let provider_id = claim["status"]["providerID"].as_str().filter(|id| !id.is_empty())?;
    provider_id.rsplit('/').next()
}

/// The values of the claim's `node.kubernetes.io/instance-type In` requirement, in stored order.
fn instance_type_options(claim: &Value) -> Vec<String> {
    let requirements = claim["spec"]["requirements"].as_array().cloned().unwrap_or_default();
    requirements
        .iter()
        .find(|r| r["key"] == LABEL_INSTANCE_TYPE && r["operator"] == "In")
        .and_then(|r| r["values"].as_array())
        .map(|values| values.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// The Node whose providerID is the claim's (case-insensitively: the resource group's case varies).
fn node_for<'a>(claim: &Value, nodes: &'a [Node]) -> Option<&'a Node> {
    let provider_id = claim["status"]["providerID"].as_str().filter(|id| !id.is_empty())?;
    nodes.iter().find(|node| {
        let id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).unwrap_or_default();
        id.eq_ignore_ascii_case(provider_id)
    })
}

fn claim_summary(claim: &Value) -> String {
    format!(
        "{} providerID {} conditions {}",
        object_name(claim),
        claim["status"]["providerID"].as_str().unwrap_or("-"),
        conditions_summary(claim)
    )
}

/// Time until `deadline`, at least a moment so a last probe still runs.
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1))
}
