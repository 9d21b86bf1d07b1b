//! The Retail Prices client against a local HTTP server speaking the real page shape: paging, row
//! classification, and all-or-nothing refresh.

use std::sync::{Arc, Mutex};

use karpenter_azure::catalog::{PriceSource, PriceTable, PricingProvider};
use karpenter_azure::cloud::azure::retail::{wall_time, RetailError, RetailPricesClient};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// How the fake serves the second page.
#[derive(Clone, Copy)]
enum SecondPage {
    Good,
    ServerError,
    InvalidJson,
}

struct FakePricesApi {
    base_url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

fn row(arm_sku: &str, sku_name: &str, meter: &str, product: &str, price: f64) -> Value {
    json!({
        "currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
        "armRegionName": "eastus", "location": "US East", "effectiveStartDate": "2023-06-01T00:00:00Z",
        "meterId": "00000000-0000-0000-0000-000000000000", "meterName": meter,
        "productId": "DZH318Z0BQ4L", "skuId": "DZH318Z0BQ4L/00TG", "productName": product,
        "skuName": sku_name, "serviceName": "Virtual Machines", "serviceId": "DZH313Z7MMC8",
        "serviceFamily": "Compute", "unitOfMeasure": "1 Hour", "type": "Consumption",
        "isPrimaryMeterRegion": true, "armSkuName": arm_sku
    })
}

fn page(items: Vec<Value>, next: Option<String>) -> String {
    json!({
        "BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
        "Count": items.len(), "Items": items, "NextPageLink": next
    })
    .to_string()
}

async fn start(second: SecondPage) -> FakePricesApi {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let base_url = format!("http://{addr}/api/retail/prices");
    let requests = Arc::new(Mutex::new(Vec::new()));
    let log = requests.clone();
    let next_link = format!("{base_url}?api-version=2023-01-01-preview&$skip=100");
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf).to_string();
            let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
            log.lock().unwrap().push(target.clone());
            let (status, body) = if target.contains("skip=100") {
                match second {
                    SecondPage::Good => ("200 OK", page(second_page_rows(), None)),
                    SecondPage::ServerError => ("500 Internal Server Error", "oops".to_string()),
                    SecondPage::InvalidJson => ("200 OK", "{\"Items\": [".to_string()),
                }
            } else {
                ("200 OK", page(first_page_rows(), Some(next_link.clone())))
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    FakePricesApi { base_url, requests }
}

fn first_page_rows() -> Vec<Value> {
    vec![
        row("Standard_D4s_v5", "D4s v5", "D4s v5", "Virtual Machines Dsv5 Series", 0.2),
        row("Standard_D4s_v5", "D4s v5 Spot", "D4s v5 Spot", "Virtual Machines Dsv5 Series", 0.025),
        row("Standard_D4s_v5", "D4s v5", "D4s v5", "Virtual Machines Dsv5 Series Windows", 0.376),
        row(
            "Standard_D4s_v5",
            "D4s v5 Low Priority",
            "D4s v5 Low Priority",
            "Virtual Machines Dsv5 Series",
            0.04,
        ),
    ]
}

fn second_page_rows() -> Vec<Value> {
    vec![
        row("Standard_E8s_v5", "E8s v5", "E8s v5", "Virtual Machines Esv5 Series", 0.5),
        row("Standard_E8s_v5", "E8s v5 Spot", "E8s v5 Spot", "Virtual Machines Esv5 Series", 0.06),
    ]
}

fn client(api: &FakePricesApi) -> RetailPricesClient {
    RetailPricesClient::new(reqwest::Client::new(), &api.base_url).unwrap()
}

#[tokio::test]
async fn follows_next_page_link_and_classifies_rows() {
    let api = start(SecondPage::Good).await;
    let table = client(&api).fetch_price_table("eastus").await.unwrap();
    assert_eq!(table.on_demand("Standard_D4s_v5"), Some(0.2));
    assert_eq!(table.spot("Standard_D4s_v5"), Some(0.025));
    assert_eq!(table.on_demand("Standard_E8s_v5"), Some(0.5));
    assert_eq!(table.spot("Standard_E8s_v5"), Some(0.06));
    assert_eq!(table.len(), 2);

    let requests = api.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    let first = url::Url::parse(&format!("http://x{}", requests[0])).unwrap();
    let query: std::collections::BTreeMap<_, _> = first.query_pairs().into_owned().collect();
    assert_eq!(query["api-version"], "2023-01-01-preview");
    assert_eq!(
        query["$filter"],
        "priceType eq 'Consumption' and currencyCode eq 'USD' and serviceFamily eq 'Compute' and \
         serviceName eq 'Virtual Machines' and armRegionName eq 'eastus'"
    );
    assert!(requests[1].contains("skip=100"));
}

#[tokio::test]
async fn refresh_installs_live_prices_over_static() {
    let api = start(SecondPage::Good).await;
    let provider = PricingProvider::new("eastus", wall_time());
    assert_eq!(provider.current().on_demand("Standard_D4s_v5"), Some(0.192));
    assert_eq!((provider.version(), provider.updated()), (0, None), "static until refreshed");
    let far = std::time::Duration::from_secs(u64::from(u32::MAX) * 4);
    assert_eq!(provider.age(far).0, PriceSource::Static);
    let summary = client(&api).refresh(&provider).await.unwrap();
    let current = provider.current();
    assert_eq!(summary.priced, current.len());
    assert_eq!(summary.spot, 2, "D4s_v5 and E8s_v5 have live spot prices");
    assert_eq!(provider.version(), 1);
    let updated = provider.updated().expect("a live update");
    let (source, age) = provider.age(updated + std::time::Duration::from_secs(60));
    assert_eq!((source, age.as_secs()), (PriceSource::Live, 60));
    assert_eq!(current.on_demand("Standard_D4s_v5"), Some(0.2));
    assert_eq!(current.spot("Standard_D4s_v5"), Some(0.025));
    // Sizes the live answer lacks keep their static price.
    assert_eq!(current.on_demand("Standard_D2s_v5"), Some(0.096));
}

#[tokio::test]
async fn failing_second_page_keeps_old_prices() {
    for (second, category) in [(SecondPage::ServerError, "HTTPStatus"), (SecondPage::InvalidJson, "Decode")] {
        let good = start(SecondPage::Good).await;
        let broken = start(second).await;
        let provider = PricingProvider::new("eastus", wall_time());
        client(&good).refresh(&provider).await.unwrap();
        let before = provider.current();
        let (version, updated) = (provider.version(), provider.updated());

        let err = client(&broken).refresh(&provider).await.unwrap_err();
        assert_eq!(err.category(), category, "{err}");
        assert_eq!(*provider.current(), *before, "a failed refresh changes nothing");
        assert_eq!((provider.version(), provider.updated()), (version, updated));
        assert_eq!(provider.current().spot("Standard_D4s_v5"), Some(0.025));
        assert_eq!(broken.requests.lock().unwrap().len(), 2, "failed on the second page");
    }
}

#[tokio::test]
async fn static_only_provider_survives_unreachable_api() {
    // Nothing listens on this port once the listener is dropped.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client =
        RetailPricesClient::new(reqwest::Client::new(), &format!("http://127.0.0.1:{port}/prices")).unwrap();
    let provider = PricingProvider::new("eastus", wall_time());
    let err = client.refresh(&provider).await.unwrap_err();
    assert!(matches!(err, RetailError::Transport { .. }), "{err}");
    assert_eq!(*provider.current(), PriceTable::static_for_region("eastus"));
}

#[test]
fn rejects_invalid_base_url() {
    let err = RetailPricesClient::new(reqwest::Client::new(), "not a url").unwrap_err();
    assert_eq!(err.category(), "InvalidURL");
}
