//! Live prices end to end: the controller reads the Retail Prices API (a fake one, `fake_azure::retail`)
//! at start and then on its refresh interval, and the next plan uses what it read. A seed-like NodePool (spot and on-demand, three zones) launches on-demand while spot is dearer, and spot
//! once a refresh has made spot cheaper; the price-age gauge says the prices are live.

use std::collections::BTreeMap;
use std::time::Duration;

use karpenter_azure::catalog::PriceTable;
use kube::Client;
use serde_json::{json, Value};

use super::lookups::{claims_of, condition_is_true};
use super::manifests::{node_class, pod_spec};
use super::{cleanup, cluster, objects, prometheus, setup};
use fake_azure::retail::{FakeRetail, Price};

const NAME: &str = "e2e-live-prices";
const STAGE: Duration = Duration::from_secs(60);
const LABEL_CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// Pods carrying it repel each other per node, so each Deployment gets a node of its own.
const ONE_PER_NODE: &str = "e2e-live-prices/one-per-node";

/// eastus's static on-demand prices, with spot at `spot_ratio` of on-demand.
fn prices(spot_ratio: f64) -> BTreeMap<String, Price> {
    PriceTable::static_for_region("eastus")
        .iter()
        .filter_map(|(sku, p)| {
            let on_demand = p.on_demand?;
            Some((sku.to_string(), Price { on_demand: Some(on_demand), spot: Some(on_demand * spot_ratio) }))
        })
        .collect()
}

/// The seed article's example pool, limited to the D family (sold as spot), never consolidating.
fn seed_pool() -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": NAME},
    "spec": {
        "template": {"spec": {
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In",
                 "values": ["eastus-1", "eastus-2", "eastus-3"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D"]}
            ],
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": NAME}
        }},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "Never"}
    }})
}

/// One pod that wants a node of its own.
fn deployment(app: &str) -> Value {
    let mut spec = pod_spec(NAME, "500m", "1Gi");
    spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {ONE_PER_NODE: "yes"}}, "topologyKey": "kubernetes.io/hostname"}
    ]}});
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app, "namespace": NAME},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": app}},
        "template": {"metadata": {"labels": {"app": app, ONE_PER_NODE: "yes"}}, "spec": spec}
    }})
}

/// The launched claims' capacity types, by claim name.
async fn launched(client: &Client) -> Result<BTreeMap<String, (String, String)>, String> {
    let claims = claims_of(client, NAME).await?;
    let mut out = BTreeMap::new();
    for claim in &claims {
        let name = claim["metadata"]["name"].as_str().unwrap_or_default().to_string();
        if !condition_is_true(claim, "Launched") {
            return Err(format!("NodeClaim {name} has not launched: {}", claim["status"]));
        }
        let label = |key: &str| claim["metadata"]["labels"][key].as_str().unwrap_or_default().to_string();
        out.insert(name, (label(LABEL_CAPACITY_TYPE), label(LABEL_INSTANCE_TYPE)));
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_price_change_alters_the_next_plan() {
    let client = cluster::shared().client().await;
    let retail = FakeRetail::start("eastus", prices(2.0), 500).await;
    let controller = setup::controller(NAME)
        .env("RETAIL_PRICES_URL", retail.base_url())
        .env("KARPENTER_PRICE_REFRESH_INTERVAL", "2s")
        .start(&client)
        .await;
    controller
        .wait_until("the first price refresh", STAGE, || async {
            (retail.complete_passes(1) > 0).then_some(()).ok_or(format!("requests: {:?}", retail.requests()))
        })
        .await;
    setup::class_and_pool_ready(&client, &controller, &node_class(NAME), &seed_pool()).await;

    // Spot at twice on-demand: the plan, and so the launch, is on-demand.
    objects::apply(&client, &deployment("dear-spot")).await.expect("applying the first Deployment");
    let first = controller
        .wait_until("a launched NodeClaim for the first pod", STAGE, || async {
            let claims = launched(&client).await?;
            if claims.len() == 1 {
                Ok(claims)
            } else {
                Err(format!("claims: {claims:?}"))
            }
        })
        .await;
    let (first_name, (first_type, first_size)) = first.into_iter().next().unwrap();
    assert_eq!(first_type, "on-demand", "spot is dearer: {first_name} ({first_size})");

    // Spot at a fifth of on-demand: after the next refresh the next plan is spot.
    let cheap = retail.set_prices(prices(0.2));
    controller
        .wait_until("a refresh with cheap spot prices", STAGE, || async {
            // Two complete passes of the new table: the first has certainly been installed.
            (retail.complete_passes(cheap) > 1).then_some(()).ok_or("not yet served".to_string())
        })
        .await;
    objects::apply(&client, &deployment("cheap-spot")).await.expect("applying the second Deployment");
    let both = controller
        .wait_until("a launched NodeClaim for the second pod", STAGE, || async {
            let claims = launched(&client).await?;
            if claims.len() == 2 {
                Ok(claims)
            } else {
                Err(format!("claims: {claims:?}"))
            }
        })
        .await;
    let (second_name, (second_type, second_size)) =
        both.into_iter().find(|(name, _)| *name != first_name).expect("a second claim");
    assert_eq!(second_type, "spot", "spot is cheaper now: {second_name} ({second_size})");
    let vm = controller.fake().vm(&format!("aks-{second_name}")).expect("its VM");
    assert!(vm.spot, "the VM of {second_name} is a spot VM");

    let url = format!("http://127.0.0.1:{}/metrics", controller.metrics_port());
    let (_, text) = prometheus::get(&url).await.expect("scraping the controller");
    let samples = prometheus::parse(&text).expect("valid metrics");
    let age = prometheus::sum(&samples, "karpenter_azure_pricing_age_seconds", &[("source", "live")]);
    assert!(age.is_some_and(|a| a < 60.0), "live prices, refreshed moments ago: {age:?}");

    cleanup::remove(&client, NAME, &[deployment("dear-spot"), deployment("cheap-spot")], || {
        controller.exit_status().is_none()
    })
    .await;
}
