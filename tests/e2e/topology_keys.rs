//! Topology on a key of the NodePool's own: the pool lists three racks in a requirement on
//! `example.com/rack`, a Deployment spreads over that key (`DoNotSchedule`, maxSkew 1) with one pod per
//! node (hostname anti-affinity). The controller pins each NodeClaim to a rack, the Nodes carry the rack
//! label, and kube-scheduler, which judges the spread itself, runs every pod: two per rack.

use std::collections::BTreeMap;

use serde_json::json;

use super::lookups::claims_of;
use super::{cleanup, manifests, objects, setup};

const NAME: &str = "e2e-topology-keys";
const RACK: &str = "example.com/rack";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spread_on_a_nodepool_label_key_runs_two_pods_per_rack() {
    let client = super::cluster::shared().client().await;
    objects::namespace(&client, NAME).await;
    let controller = setup::controller(NAME).start(&client).await;
    let class = manifests::node_class(NAME);
    let mut pool = manifests::node_pool(NAME, Some("D"));
    let requirements = pool["spec"]["template"]["spec"]["requirements"].as_array_mut().unwrap();
    requirements.push(json!({"key": RACK, "operator": "In", "values": ["rack-a", "rack-b", "rack-c"]}));
    setup::class_and_pool_ready(&client, &controller, &class, &pool).await;

    let mut web = manifests::deployment(NAME, "web", NAME, 6, "500m", "1Gi");
    let selector = json!({"matchLabels": {"app": "web"}});
    web["spec"]["template"]["spec"]["topologySpreadConstraints"] = json!([
        {"maxSkew": 1, "topologyKey": RACK, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}
    ]);
    web["spec"]["template"]["spec"]["affinity"] = json!({"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}
        ]
    }});
    objects::apply(&client, &web).await.expect("applying the Deployment");
    let pods = setup::running_pods(&client, NAME, "app=web", 6).wait(&controller).await;

    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let mut per_rack: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &pods {
        let node_name =
            pod.spec.as_ref().and_then(|s| s.node_name.clone()).expect("a running pod has a node");
        let node = nodes.get(&node_name).await.expect("the pod's Node");
        let rack = node.metadata.labels.unwrap_or_default().get(RACK).cloned();
        *per_rack.entry(rack.unwrap_or_else(|| format!("{node_name} has no {RACK} label"))).or_default() += 1;
    }
    let want: BTreeMap<String, usize> =
        ["rack-a", "rack-b", "rack-c"].iter().map(|r| (r.to_string(), 2)).collect();
    assert_eq!(per_rack, want, "pods per rack");

    let claims = claims_of(&client, NAME).await.expect("listing NodeClaims");
    for claim in &claims {
        let label = claim["metadata"]["labels"][RACK].as_str();
        let requirement = claim["spec"]["requirements"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["key"] == RACK)
            .map(|r| r["values"].clone());
        assert!(label.is_some(), "NodeClaim {} carries a rack label", claim["metadata"]["name"]);
        assert_eq!(
            requirement,
            Some(json!([label])),
            "NodeClaim {} pins its rack",
            claim["metadata"]["name"]
        );
    }

    let pools = objects::api_for(&client, &pool).await.expect("the NodePool API");
    pools.delete(NAME, &Default::default()).await.expect("deleting the NodePool");
    cleanup::remove(&client, NAME, &[web], || controller.exit_status().is_none()).await;
}
