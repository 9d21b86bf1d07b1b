//! MIN_VALUES_POLICY=BestEffort with the real controller: a NodePool asking for more instance types than
//! its sizes offer still gets a node, its NodeClaim carrying the lowered minValues and
//! `karpenter.sh/nodeclaim-min-values-relaxed: "true"` (upstream core's annotation), and the creation
//! counted with `min_values_relaxed="true"`.

use std::time::Duration;

use serde_json::json;

use super::lookups::claims_of;
use super::{cleanup, manifests, objects, prometheus, setup};

const NAME: &str = "e2e-min-values";
const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
/// More instance types than the pool's two sizes.
const MIN_VALUES: i64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn best_effort_launches_with_the_min_values_the_sizes_meet() {
    let client = super::cluster::shared().client().await;
    let controller = setup::controller(NAME).env("MIN_VALUES_POLICY", "BestEffort").start(&client).await;
    let class = manifests::node_class(NAME);
    let mut pool = manifests::node_pool(NAME, Some("D"));
    let requirements = pool["spec"]["template"]["spec"]["requirements"].as_array_mut().unwrap();
    requirements.push(
        json!({"key": "karpenter.azure.com/sku-name", "operator": "In", "values": ["Standard_D2s_v5", "Standard_D4s_v5"]}),
    );
    requirements.push(json!({"key": LABEL_INSTANCE_TYPE, "operator": "Exists", "minValues": MIN_VALUES}));
    setup::class_and_pool_ready(&client, &controller, &class, &pool).await;

    let deployment = manifests::deployment(NAME, "web", NAME, 1, "500m", "1Gi");
    objects::apply(&client, &deployment).await.expect("applying the Deployment");
    setup::running_pods(&client, NAME, "app=web", 1).within(Duration::from_secs(90)).wait(&controller).await;

    let claims = claims_of(&client, NAME).await.expect("listing NodeClaims");
    assert_eq!(claims.len(), 1, "one node for one pod");
    let claim = &claims[0];
    assert_eq!(claim["metadata"]["annotations"][RELAXED], "true", "{}", claim["metadata"]);
    let requirement = claim["spec"]["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == LABEL_INSTANCE_TYPE && r["minValues"].is_i64())
        .unwrap_or_else(|| panic!("the instance-type requirement keeps a minValues: {}", claim["spec"]));
    assert_eq!(requirement["minValues"], 2, "lowered to the pool's two sizes: {requirement}");

    let url = format!("http://127.0.0.1:{}/metrics", controller.metrics_port());
    let (_, text) = prometheus::get(&url).await.expect("scraping the controller");
    let samples = prometheus::parse(&text).expect("the exposition parses");
    let relaxed = [("nodepool", NAME), ("reason", "provisioned"), ("min_values_relaxed", "true")];
    assert_eq!(
        prometheus::sum(&samples, "karpenter_nodeclaims_created_total", &relaxed),
        Some(1.0),
        "{text}"
    );

    cleanup::remove(&client, NAME, &[deployment], || controller.exit_status().is_none()).await;
}
