//! A fake Azure Retail Prices API for tests: serves the Linux on-demand and spot rows of the prices it is
//! given, in the real page shape (`Items`, `NextPageLink`, at most `page_size` rows a page), and can be
//! told to fail. Prices are changed while it runs with [`FakeRetail::set_prices`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// On-demand and spot $/hour of a size; None leaves that row out.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Price {
    pub on_demand: Option<f64>,
    pub spot: Option<f64>,
}

#[derive(Default)]
struct State {
    region: String,
    prices: BTreeMap<String, Price>,
    page_size: usize,
    /// Answer every request with HTTP 500 while set.
    failing: bool,
    /// Request targets (path and query), in order.
    requests: Vec<String>,
    /// Complete passes: the last page of a table version served.
    served_versions: Vec<u64>,
    version: u64,
}

/// The running fake; dropping it leaves the listener task running until the test's runtime ends.
#[derive(Clone)]
pub struct FakeRetail {
    base_url: String,
    state: Arc<Mutex<State>>,
}

impl FakeRetail {
    /// Starts serving `region`'s `prices` on a free local port, `page_size` rows a page.
    pub async fn start(region: &str, prices: BTreeMap<String, Price>, page_size: usize) -> FakeRetail {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding the fake retail API");
        let base_url = format!("http://{}/api/retail/prices", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            region: region.to_string(),
            prices,
            page_size: page_size.max(1),
            version: 1,
            ..State::default()
        }));
        let fake = FakeRetail { base_url, state };
        let server = fake.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let server = server.clone();
                tokio::spawn(async move {
                    let target = read_target(&mut socket).await;
                    let (status, body) = server.answer(&target);
                    let response = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        fake
    }

    /// The endpoint, for `RETAIL_PRICES_URL`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Replaces the prices served from the next request on; returns the new table version.
    pub fn set_prices(&self, prices: BTreeMap<String, Price>) -> u64 {
        let mut state = self.state.lock().unwrap();
        state.prices = prices;
        state.version += 1;
        state.version
    }

    pub fn set_failing(&self, failing: bool) {
        self.state.lock().unwrap().failing = failing;
    }

    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }

    /// How many times the whole table of `version` was served, through its last page.
    pub fn complete_passes(&self, version: u64) -> usize {
        self.state.lock().unwrap().served_versions.iter().filter(|v| **v == version).count()
    }

    fn answer(&self, target: &str) -> (&'static str, String) {
        let mut state = self.state.lock().unwrap();
        state.requests.push(target.to_string());
        if state.failing {
            return ("500 Internal Server Error", "{\"error\": \"fake retail API told to fail\"}".into());
        }
        let query: BTreeMap<String, String> = url::Url::parse(&format!("http://x{target}"))
            .map(|u| u.query_pairs().into_owned().collect())
            .unwrap_or_default();
        let filter = query.get("$filter").cloned().unwrap_or_default();
        if !filter.contains(&format!("armRegionName eq '{}'", state.region)) {
            return ("200 OK", page(vec![], None));
        }
        let skip: usize = query.get("$skip").and_then(|s| s.parse().ok()).unwrap_or(0);
        let rows = rows(&state.region, &state.prices);
        let end = (skip + state.page_size).min(rows.len());
        let items = rows.get(skip..end).map(<[Value]>::to_vec).unwrap_or_default();
        let next = (end < rows.len()).then(|| {
            let mut url = url::Url::parse(&format!("{}{}", self.base_url_origin(), target)).unwrap();
            let kept: Vec<(String, String)> =
                url.query_pairs().into_owned().filter(|(k, _)| k != "$skip").collect();
            url.query_pairs_mut().clear().extend_pairs(kept).append_pair("$skip", &end.to_string());
            url.to_string()
        });
        if next.is_none() {
            let version = state.version;
            state.served_versions.push(version);
        }
        ("200 OK", page(items, next))
    }

    fn base_url_origin(&self) -> String {
        let url = url::Url::parse(&self.base_url).unwrap();
        url.origin().ascii_serialization()
    }
}

/// The request target of an HTTP/1.1 request head.
async fn read_target(socket: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&buf).split_whitespace().nth(1).unwrap_or("").to_string()
}

/// The Linux rows of `prices` as the API has them: a pay-as-you-go row and a "Spot" row per size.
fn rows(region: &str, prices: &BTreeMap<String, Price>) -> Vec<Value> {
    let mut out = Vec::new();
    for (sku, price) in prices {
        let short = sku.trim_start_matches("Standard_").replace('_', " ");
        if let Some(p) = price.on_demand {
            out.push(row(region, sku, &short, p));
        }
        if let Some(p) = price.spot {
            out.push(row(region, sku, &format!("{short} Spot"), p));
        }
    }
    out
}

fn row(region: &str, arm_sku: &str, sku_name: &str, price: f64) -> Value {
    json!({
        "currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
        "armRegionName": region, "location": region, "effectiveStartDate": "2025-01-01T00:00:00Z",
        "meterName": sku_name, "productName": "Virtual Machines Series", "skuName": sku_name,
        "serviceName": "Virtual Machines", "serviceFamily": "Compute", "unitOfMeasure": "1 Hour",
        "type": "Consumption", "isPrimaryMeterRegion": true, "armSkuName": arm_sku
    })
}

fn page(items: Vec<Value>, next: Option<String>) -> String {
    json!({"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
           "Count": items.len(), "Items": items, "NextPageLink": next})
    .to_string()
}
