//! The dashboards against a real Prometheus: the controller provisions a spot and an on-demand NodePool,
//! consolidates after a scale-down, replaces drifted nodes and terminates everything, while Prometheus
//! scrapes it. Then every panel query of the chart's dashboards, and every query of upstream's published
//! Karpenter dashboards (`tests/fixtures/upstream/grafana-dashboard-queries.yaml`), returns data over the
//! run; and while the nodes ran, the node count per capacity type and the spot share that Prometheus
//! computed equal what the API server held.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use super::chart_monitoring::{as_promql, dashboards, upstream_dashboard_queries};
use super::lookups::{claims_of, nodeclaims};
use super::prometheus::Prometheus;
use super::{cluster, manifests, objects, setup};

const NAME: &str = "e2e-dashboards";
const SPOT: &str = "e2e-dashboards-spot";
const STAGE: Duration = Duration::from_secs(120);

fn now_seconds() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs_f64()
}

/// A pool of the test's class that consolidates at once, of one capacity type.
fn pool(name: &str, capacity_type: &str) -> Value {
    let mut pool = manifests::node_pool(name, Some("D"));
    pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!(NAME);
    pool["spec"]["template"]["spec"]["requirements"][1]["values"] = json!([capacity_type]);
    pool["spec"]["disruption"] = json!({"consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]});
    // Limits, so the NodePool panels have a limit to divide by.
    pool["spec"]["limits"] = json!({"cpu": "1000", "memory": "4000Gi"});
    pool
}

/// A range query over `[start, now]` at 1 s steps: its series, each with at least one value.
async fn query_range(prometheus_port: u16, query: &str, start: f64) -> Result<Vec<Value>, String> {
    let url = format!("http://127.0.0.1:{prometheus_port}/api/v1/query_range");
    let end = now_seconds();
    let response = reqwest::Client::new()
        .get(&url)
        .query(&[("query", query), ("start", &start.to_string()), ("end", &end.to_string()), ("step", "1")])
        .send()
        .await
        .map_err(|err| format!("{query}: {err}"))?;
    let body: Value = response.json().await.map_err(|err| format!("{query}: {err}"))?;
    if body["status"] != "success" {
        return Err(format!("{query}: {body}"));
    }
    Ok(body["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// Nodes of `pool` by capacity type, as the API server holds them.
async fn nodes_by_capacity_type(client: &Client, pools: &[&str]) -> BTreeMap<String, f64> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut out = BTreeMap::new();
    for pool in pools {
        let list = nodes.list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}"))).await;
        for node in list.map(|l| l.items).unwrap_or_default() {
            let labels = node.metadata.labels.unwrap_or_default();
            let capacity_type = labels.get("karpenter.sh/capacity-type").cloned().unwrap_or_default();
            *out.entry(capacity_type).or_default() += 1.0;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_panel_shows_data_from_a_real_prometheus() {
    let cluster = cluster::shared();
    let client = cluster.client().await;
    let controller = setup::controller(NAME).start(&client).await;
    let target = format!("127.0.0.1:{}", controller.metrics_port());
    let server = Prometheus::start(&target, &cluster.dir.join("logs").join(format!("prometheus-{NAME}.log")));
    let started = now_seconds();

    // Provisioning: on-demand and spot nodes.
    let class = manifests::node_class(NAME);
    let (on_demand, spot) = (pool(NAME, "on-demand"), pool(SPOT, "spot"));
    setup::class_and_pool_ready(&client, &controller, &class, &on_demand).await;
    setup::class_and_pool_ready(&client, &controller, &class, &spot).await;
    let web = manifests::deployment(NAME, "web", NAME, 6, "1", "1Gi");
    let batch = manifests::deployment(NAME, "batch", SPOT, 4, "1", "1Gi");
    for d in [&web, &batch] {
        objects::apply(&client, d).await.expect("applying a Deployment");
    }
    setup::running_pods(&client, NAME, "app=web", 6).within(STAGE).wait(&controller).await;
    setup::running_pods(&client, NAME, "app=batch", 4).within(STAGE).wait(&controller).await;

    // While the nodes run: Prometheus's count per capacity type and spot share equal the API server's.
    let pools = [NAME, SPOT];
    controller
        .wait_until("Prometheus's node counts to match the API server's", STAGE, || async {
            let want = nodes_by_capacity_type(&client, &pools).await;
            let query = format!(
                "count by (capacity_type) (karpenter_nodes_allocatable{{resource_type=\"cpu\",nodepool=~\"{NAME}|{SPOT}\"}})"
            );
            let url = format!("http://127.0.0.1:{}/api/v1/query", server.port());
            let body: Value = reqwest::Client::new()
                .get(&url)
                .query(&[("query", query.as_str())])
                .send()
                .await
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            let got: BTreeMap<String, f64> = body["data"]["result"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| {
                    let ct = s["metric"]["capacity_type"].as_str().unwrap_or_default().to_string();
                    (ct, s["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(0.0))
                })
                .collect();
            let spot_share = server
                .query_one(&format!(
                    "(count(karpenter_nodes_allocatable{{resource_type=\"cpu\",capacity_type=\"spot\",nodepool=~\"{NAME}|{SPOT}\"}}) or vector(0)) / count(karpenter_nodes_allocatable{{resource_type=\"cpu\",nodepool=~\"{NAME}|{SPOT}\"}})"
                ))
                .await?;
            let total: f64 = want.values().sum();
            let want_share = want.get("spot").copied().unwrap_or(0.0) / total;
            if got == want && want.len() == 2 && (spot_share - want_share).abs() < 1e-9 {
                Ok(())
            } else {
                Err(format!("Prometheus {got:?} share {spot_share}, API server {want:?} share {want_share}"))
            }
        })
        .await;

    // Consolidation: scale down, so nodes are emptied or repacked.
    let mut fewer = web.clone();
    fewer["spec"]["replicas"] = json!(1);
    objects::apply(&client, &fewer).await.expect("scaling down");
    controller
        .wait_until("a consolidation decision", STAGE, || async {
            let decided =
                server.query_one("sum(karpenter_voluntary_disruption_decisions_total) or vector(0)").await?;
            if decided > 0.0 {
                Ok(())
            } else {
                Err("no decision yet".to_string())
            }
        })
        .await;

    // Drift: a larger OS disk is part of the class's hash, so every node of both pools drifts.
    objects::merge_patch(&client, &class, &json!({"spec": {"osDiskSizeGB": 256}}))
        .await
        .expect("changing the AKSNodeClass");
    controller
        .wait_until("a drift decision", STAGE, || async {
            let drifted = server
                .query_one(
                    "sum(karpenter_voluntary_disruption_decisions_total{reason=\"drifted\"}) or vector(0)",
                )
                .await?;
            if drifted > 0.0 {
                Ok(())
            } else {
                Err("no drift decision yet".to_string())
            }
        })
        .await;

    // Termination: everything goes.
    let background = DeleteParams::background();
    for d in [&web, &batch] {
        if let Ok(api) = objects::api_for(&client, d).await {
            let _ = api.delete(d["metadata"]["name"].as_str().unwrap(), &background).await;
        }
    }
    for pool_name in pools {
        for claim in claims_of(&client, pool_name).await.unwrap_or_default() {
            let name = claim["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let _ = nodeclaims(&client).delete(&name, &background).await;
        }
    }
    controller
        .wait_until("the NodeClaims to be terminated", STAGE, || async {
            let left = claims_of(&client, NAME).await?.len() + claims_of(&client, SPOT).await?.len();
            let terminated =
                server.query_one("sum(karpenter_nodeclaims_terminated_total) or vector(0)").await?;
            if left == 0 && terminated > 0.0 {
                Ok(())
            } else {
                Err(format!("{left} NodeClaims left, {terminated} terminated"))
            }
        })
        .await;
    // Let Prometheus take a few more scrapes.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Every panel query of ours and of upstream's dashboards returned data during the run.
    let mut queries: Vec<(String, String)> = vec![];
    for (name, dashboard) in dashboards() {
        let panels = dashboard["panels"].as_array().cloned().unwrap_or_default();
        for panel in panels {
            for target in panel["targets"].as_array().cloned().unwrap_or_default() {
                let expr = target["expr"].as_str().unwrap_or_default();
                queries.push((format!("{name}: {}", panel["title"]), as_promql(expr)));
            }
        }
    }
    // Upstream's Node Summary also sums a `pods` resource of the requests, which upstream's own controller
    // does not record either (pod requests carry no `pods` resource): that one query stays empty for both.
    let upstream =
        upstream_dashboard_queries().into_iter().filter(|(_, q)| !q.contains("resource_type=\"pods\""));
    queries.extend(upstream.map(|(panel, q)| (format!("upstream {panel}"), q)));
    let mut empty = vec![];
    for (panel, query) in &queries {
        match query_range(server.port(), query, started).await {
            Ok(series) if !series.is_empty() => {}
            Ok(_) => empty.push(format!("{panel}: {query}: no data")),
            Err(err) => empty.push(format!("{panel}: {err}")),
        }
    }
    println!("e2e dashboards: {} panel queries, {} without data", queries.len(), empty.len());
    assert!(empty.is_empty(), "panel queries without data:\n{}", empty.join("\n"));

    for object in [pool(NAME, "on-demand"), pool(SPOT, "spot"), class] {
        if let Ok(api) = objects::api_for(&client, &object).await {
            let _ = api.delete(object["metadata"]["name"].as_str().unwrap(), &background).await;
        }
    }
}
