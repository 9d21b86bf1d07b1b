//! Scheduling inputs beyond the pod spec, end to end: a StatefulSet whose persistent volumes sit in zone
//! 2 gets its node in zone 2 (the controller watches PVCs and PVs), and a pod whose affinity selects a
//! namespace by label lands beside the pods of that namespace (the controller watches Namespaces).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::{Api, Client};
use serde_json::{json, Value};

use super::controller::Controller;
use super::lookups::{claims_of, get_json, is_running, list_pods};
use super::manifests::{node_class, node_pool, pod_spec};
use super::{cleanup, cluster, objects, setup};

const STAGE: Duration = Duration::from_secs(60);
const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// Namespace, class and on-demand D-family pool named `name`, and a controller, with the pool Ready.
async fn set_up(name: &str) -> (Client, Controller) {
    let client = cluster::shared().client().await;
    let controller = setup::controller(name).start(&client).await;
    setup::class_and_pool_ready(&client, &controller, &node_class(name), &node_pool(name, Some("D"))).await;
    (client, controller)
}

/// The zone of the node the pod runs on, once it runs.
async fn running_zone(client: &Client, controller: &Controller, namespace: &str, app: &str) -> String {
    let pods = controller
        .wait_until(&format!("pod {namespace}/{app} to run"), STAGE, || async {
            let pods = list_pods(client, namespace, app).await?;
            if !pods.is_empty() && pods.iter().all(is_running) {
                Ok(pods)
            } else {
                let claims = claims_of(client, namespace).await.unwrap_or_default();
                let conditions: Vec<String> = pods
                    .iter()
                    .filter_map(|p| p.status.as_ref().and_then(|s| s.conditions.clone()))
                    .flatten()
                    .map(|c| format!("{}={} {}", c.type_, c.status, c.message.unwrap_or_default()))
                    .collect();
                let zones: Vec<Value> =
                    claims.iter().map(|c| c["metadata"]["labels"][LABEL_ZONE].clone()).collect();
                Err(format!("{} pods {conditions:?}, claims in zones {zones:?}", pods.len()))
            }
        })
        .await;
    let node = pods[0].spec.as_ref().and_then(|s| s.node_name.clone()).expect("bound");
    let node = get_json(client, &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
        .await
        .expect("its node");
    node["metadata"]["labels"][LABEL_ZONE].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_whose_volumes_sit_in_zone_2_gets_its_node_in_zone_2() {
    let name = "e2e-volume-zone";
    let (client, controller) = set_up(name).await;
    // A volume already made in eastus-2, bound in advance to the claim the StatefulSet's pod will use
    // (kube-controller-manager's volume binder completes the binding).
    let volume = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": format!("{name}-pv")},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "e2e-manual", "hostPath": {"path": "/tmp/e2e-volume-zone"},
            "claimRef": {"namespace": name, "name": "data-db-0"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": LABEL_ZONE, "operator": "In", "values": ["eastus-2"]}]}]}}}});
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-db-0", "namespace": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "e2e-manual",
            "volumeName": format!("{name}-pv"), "resources": {"requests": {"storage": "1Gi"}}}});
    objects::apply(&client, &volume).await.expect("applying the PersistentVolume");
    objects::apply(&client, &claim).await.expect("applying the PersistentVolumeClaim");
    // Bound before the pod exists, so kube-scheduler judges the pod on the volume's zone at once.
    controller
        .wait_until("the claim to bind to the volume", STAGE, || async {
            let claim = get_json(&client, &claim).await?;
            (claim["status"]["phase"] == "Bound").then_some(()).ok_or(format!("{}", claim["status"]))
        })
        .await;
    let statefulset = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": name},
        "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": pod_spec(name, "500m", "1Gi")},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "e2e-manual",
                    "resources": {"requests": {"storage": "1Gi"}}}}]}});
    let mut statefulset = statefulset;
    statefulset["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data"}]);
    objects::apply(&client, &statefulset).await.expect("applying the StatefulSet");

    let zone = running_zone(&client, &controller, name, "db").await;
    assert_eq!(zone, "eastus-2", "the node is where the volume is");
    let claims = claims_of(&client, name).await.unwrap();
    assert_eq!(claims.len(), 1, "one node for the one pod");
    assert_eq!(claims[0]["metadata"]["labels"][LABEL_ZONE], "eastus-2");

    cleanup::remove(&client, name, &[statefulset], || controller.exit_status().is_none()).await;
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client.clone());
    let _ = pvs.delete(&format!("{name}-pv"), &DeleteParams::background()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_affinity_selects_a_namespace_by_label_lands_beside_its_pods() {
    let name = "e2e-ns-selector";
    let caches = "e2e-ns-selector-caches";
    let (client, controller) = set_up(name).await;
    objects::apply(
        &client,
        &json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": caches, "labels": {"e2e-team": "cache"}}}),
    )
    .await
    .expect("applying the labelled namespace");
    objects::namespace(&client, caches).await;
    // The cache runs in eastus-3, pinned there.
    let mut cache_spec = pod_spec(name, "500m", "1Gi");
    cache_spec["nodeSelector"][LABEL_ZONE] = json!("eastus-3");
    let cache = deployment(caches, "cache", cache_spec);
    objects::apply(&client, &cache).await.expect("applying the cache");
    assert_eq!(running_zone(&client, &controller, caches, "cache").await, "eastus-3");

    // Too big to share the cache's node; must be in the zone of pods labelled app=cache in namespaces
    // labelled e2e-team=cache.
    let mut web_spec = pod_spec(name, "3", "2Gi");
    web_spec["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"app": "cache"}},
        "namespaceSelector": {"matchLabels": {"e2e-team": "cache"}},
        "topologyKey": LABEL_ZONE}]}});
    let web = deployment(name, "web", web_spec);
    objects::apply(&client, &web).await.expect("applying the web Deployment");
    assert_eq!(running_zone(&client, &controller, name, "web").await, "eastus-3", "beside the cache");
    let claims = claims_of(&client, name).await.unwrap();
    assert!(claims.iter().all(|c| c["metadata"]["labels"][LABEL_ZONE] == "eastus-3"), "{claims:?}");

    let pods: Api<Pod> = Api::namespaced(client.clone(), caches);
    let _ = pods.delete_collection(&DeleteParams::background(), &Default::default()).await;
    cleanup::remove(&client, name, &[web, cache], || controller.exit_status().is_none()).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(caches, &DeleteParams::background()).await;
}

fn deployment(namespace: &str, app: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app, "namespace": namespace},
    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}},
        "template": {"metadata": {"labels": {"app": app}}, "spec": spec}}})
}
