//! Tests of the metrics and health servers over real loopback connections.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[derive(Default)]
struct Stub {
    ready: AtomicBool,
    broken: AtomicBool,
    refreshes: AtomicUsize,
}

impl Probes for Stub {
    fn ready(&self) -> Result<(), String> {
        if self.ready.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err("the Pod watch has not finished its initial list".into())
        }
    }

    fn live(&self) -> Result<(), String> {
        if self.broken.load(Ordering::SeqCst) {
            Err("gc stopped 5 times in 10 min".into())
        } else {
            Ok(())
        }
    }

    fn refresh_metrics(&self) {
        self.refreshes.fetch_add(1, Ordering::SeqCst);
    }
}

async fn serve(stub: Arc<Stub>) -> Ports {
    let servers = Servers::bind(LOOPBACK, Ports { metrics: 0, health: 0 }).await.expect("binding free ports");
    let ports = servers.local_ports();
    tokio::spawn(servers.serve(stub));
    ports
}

async fn call(method: reqwest::Method, port: u16, path: &str) -> (u16, String, String) {
    let response = reqwest::Client::new()
        .request(method, format!("http://127.0.0.1:{port}{path}"))
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    let content_type =
        response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    (status, content_type, response.text().await.expect("a text body"))
}

async fn get(port: u16, path: &str) -> (u16, String, String) {
    call(reqwest::Method::GET, port, path).await
}

#[tokio::test]
async fn healthz_answers_and_readyz_follows_the_probe() {
    let stub = Arc::new(Stub::default());
    let ports = serve(stub.clone()).await;
    assert_eq!(get(ports.health, "/healthz").await.0, 200);
    let (status, _, body) = get(ports.health, "/readyz").await;
    assert_eq!(status, 503);
    assert!(body.contains("Pod watch"), "{body}");
    stub.ready.store(true, Ordering::SeqCst);
    assert_eq!(get(ports.health, "/readyz").await.0, 200);
    // Probes with a query string still hit the endpoint.
    assert_eq!(get(ports.health, "/readyz?verbose").await.0, 200);
}

#[tokio::test]
async fn healthz_fails_with_the_reason_while_the_probe_says_the_process_is_broken() {
    let stub = Arc::new(Stub::default());
    let ports = serve(stub.clone()).await;
    stub.broken.store(true, Ordering::SeqCst);
    let (status, _, body) = get(ports.health, "/healthz").await;
    assert_eq!(status, 500);
    assert!(body.contains("gc stopped 5 times"), "{body}");
    stub.broken.store(false, Ordering::SeqCst);
    assert_eq!(get(ports.health, "/healthz").await.0, 200);
}

#[tokio::test]
async fn metrics_refreshes_the_gauges_and_serves_the_text_format() {
    let stub = Arc::new(Stub::default());
    let ports = serve(stub.clone()).await;
    let (status, content_type, body) = get(ports.metrics, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "text/plain; version=0.0.4");
    assert!(
        body.contains("# TYPE karpenter_voluntary_disruption_consolidation_timeouts_total counter"),
        "{body}"
    );
    get(ports.metrics, "/metrics").await;
    assert_eq!(stub.refreshes.load(Ordering::SeqCst), 2, "one refresh per scrape");
}

/// The family names a metrics text declares, in order.
fn families(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split(' ').next()).collect()
}

#[tokio::test]
async fn metrics_are_gzipped_for_a_scraper_that_accepts_it() {
    use std::io::Read;

    let ports = serve(Arc::new(Stub::default())).await;
    let url = format!("http://127.0.0.1:{}/metrics", ports.metrics);
    let client = reqwest::Client::new();
    let response = client.get(&url).header(ACCEPT_ENCODING, "gzip").send().await.expect("the server answers");
    assert_eq!(response.status().as_u16(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers.get(CONTENT_ENCODING).map(|v| v.to_str().unwrap()), Some("gzip"));
    assert_eq!(headers.get(CONTENT_TYPE).map(|v| v.to_str().unwrap()), Some("text/plain; version=0.0.4"));
    assert_eq!(headers.get(VARY).map(|v| v.to_str().unwrap()), Some("accept-encoding"));
    let compressed = response.bytes().await.expect("a body");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&compressed[..]).read_to_string(&mut text).expect("a gzip stream");
    // The same families as the plain text (their values move between scrapes: process CPU, ...).
    let (_, _, plain) = get(ports.metrics, "/metrics").await;
    assert!(families(&text).contains(&"karpenter_voluntary_disruption_consolidation_timeouts_total"));
    assert_eq!(families(&text), families(&plain));
    assert!(compressed.len() < plain.len() / 2, "{} compressed of {}", compressed.len(), plain.len());

    // Refused by q=0, or not named: plain text.
    for accept in ["gzip;q=0", "br", "identity"] {
        let response =
            client.get(&url).header(ACCEPT_ENCODING, accept).send().await.expect("the server answers");
        assert!(response.headers().get(CONTENT_ENCODING).is_none(), "{accept}");
        assert!(response.text().await.unwrap().contains("# TYPE "), "{accept}");
    }
}

#[test]
fn accept_encoding_is_read_as_rfc_9110_says() {
    let accepts = |values: &[&str]| {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(ACCEPT_ENCODING, value.parse().unwrap());
        }
        accepts_gzip(&headers)
    };
    assert!(accepts(&["gzip"]));
    assert!(accepts(&["deflate, GZIP;q=0.5"]));
    assert!(accepts(&["br", "gzip"]));
    assert!(accepts(&["*"]));
    assert!(accepts(&["gzip;q=1.0, identity;q=0"]));
    assert!(!accepts(&[]));
    assert!(!accepts(&["identity"]));
    assert!(!accepts(&["gzip;q=0"]));
    assert!(!accepts(&["gzip; q=0.000"]));
    assert!(!accepts(&["x-gzip-like"]));
}

#[tokio::test]
async fn unknown_paths_are_404_and_other_methods_405() {
    let stub = Arc::new(Stub::default());
    let ports = serve(stub.clone()).await;
    assert_eq!(get(ports.metrics, "/").await.0, 404);
    assert_eq!(get(ports.metrics, "/healthz").await.0, 404, "health lives on its own port");
    assert_eq!(get(ports.health, "/metrics").await.0, 404);
    for (port, path) in [(ports.metrics, "/metrics"), (ports.health, "/healthz"), (ports.health, "/readyz")] {
        let (status, _, _) = call(reqwest::Method::POST, port, path).await;
        assert_eq!(status, 405, "POST {path}");
    }
    assert_eq!(stub.refreshes.load(Ordering::SeqCst), 0, "a rejected request does not collect");
}

#[tokio::test]
async fn a_taken_port_names_its_setting() {
    let taken = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    let error =
        Servers::bind(LOOPBACK, Ports { metrics: port, health: 0 }).await.err().expect("the port is taken");
    let message = error.to_string();
    assert!(message.starts_with("--metrics-port (METRICS_PORT): cannot listen on 127.0.0.1:"), "{message}");
    assert!(!message.contains('\n'), "one line: {message}");
    let error =
        Servers::bind(LOOPBACK, Ports { metrics: 0, health: port }).await.err().expect("the port is taken");
    assert!(error.to_string().contains("HEALTH_PROBE_PORT"), "{error}");
    assert_eq!(error.category(), "ListenFailed");
}
