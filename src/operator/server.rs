//! The metrics and health HTTP servers (upstream: controller-runtime's metrics server and health probes):
//! `GET /metrics` on METRICS_PORT, `GET /healthz` and `GET /readyz` on HEALTH_PROBE_PORT. Other paths get
//! 404, other methods 405.
//!
//! Both listen on every IPv4 address: in a pod, Prometheus scrapes and the kubelet probes the pod IP.
//! Binding happens before anything is served, so a port already taken stops start-up with one line naming
//! the setting. What is ready and which gauges to refresh before a scrape come from a [`Probes`], so
//! this module knows nothing of the controllers.
//!
//! `/metrics` is gzip-compressed when the scraper accepts it (Prometheus always does; so does
//! client_golang's promhttp handler upstream serves with): the text is written straight into the
//! encoder, so a scrape holds the compressed exposition, not the whole text, which at 1,000 nodes is
//! some 20 MB of per-node series with thirty labels each.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderMap, ACCEPT_ENCODING, ALLOW, CONTENT_ENCODING, CONTENT_TYPE, VARY};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::checks::setting;
use super::metrics;
use super::options::Setting;

/// Every IPv4 address of the pod.
pub const LISTEN_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
/// A client that has not sent its request headers by then is dropped, so idle connections cannot pile up.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed accept (e.g. out of file descriptors), a pause before the next, instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What the servers ask of the rest of the process.
pub trait Probes: Send + Sync + 'static {
    /// `/readyz`: `Err` says why the controller cannot act yet.
    fn ready(&self) -> Result<(), String>;
    /// `/healthz`: `Err` says why the process should be restarted.
    fn live(&self) -> Result<(), String>;
    /// Called before each `/metrics` scrape, to recompute the gauges that describe the cluster.
    fn refresh_metrics(&self);
}

/// METRICS_PORT and HEALTH_PROBE_PORT (0 picks a free port, for tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub metrics: u16,
    pub health: u16,
}

/// Why the servers could not start. The message is the whole story on one line (the OS error is in
/// it, not a source, so a `{:#}` chain does not repeat it).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{setting}: cannot listen on {address}: {error}")]
    Bind { setting: Setting, address: SocketAddr, error: std::io::Error },
}

impl ServerError {
    pub fn category(&self) -> &'static str {
        match self {
            ServerError::Bind { .. } => "ListenFailed",
        }
    }
}

/// Both listeners, bound and not yet serving.
pub struct Servers {
    metrics: TcpListener,
    health: TcpListener,
}

impl Servers {
    pub async fn bind(address: IpAddr, ports: Ports) -> Result<Servers, ServerError> {
        let listen = |setting: Setting, port: u16| async move {
            let address = SocketAddr::new(address, port);
            TcpListener::bind(address).await.map_err(|error| ServerError::Bind { setting, address, error })
        };
        Ok(Servers {
            metrics: listen(setting::METRICS_PORT, ports.metrics).await?,
            health: listen(setting::HEALTH_PROBE_PORT, ports.health).await?,
        })
    }

    /// The ports actually bound (differs from the request for port 0).
    pub fn local_ports(&self) -> Ports {
        let port = |l: &TcpListener| l.local_addr().map(|a| a.port()).unwrap_or(0);
        Ports { metrics: port(&self.metrics), health: port(&self.health) }
    }

    /// Serves both until the task is dropped.
    pub async fn serve(self, probes: Arc<dyn Probes>) {
        let scrape = Arc::new(Mutex::new(()));
        let metrics_probes = probes.clone();
        let metrics = accept_loop(self.metrics, move |req| {
            metrics_endpoint(req, metrics_probes.clone(), scrape.clone())
        });
        let health = accept_loop(self.health, move |req| health_endpoint(req, probes.clone()));
        tokio::join!(metrics, health);
    }
}

/// Binds METRICS_PORT and HEALTH_PROBE_PORT on every address and serves them from a task in `tasks`.
pub async fn start(
    ports: Ports,
    probes: Arc<dyn Probes>,
    tasks: &mut JoinSet<()>,
) -> Result<(), ServerError> {
    let servers = Servers::bind(LISTEN_ADDRESS, ports).await?;
    tracing::info!(
        metrics_port = ports.metrics,
        health_probe_port = ports.health,
        "serving metrics and health probes"
    );
    tasks.spawn(servers.serve(probes));
    Ok(())
}

type Body = Full<Bytes>;

async fn accept_loop<H, F>(listener: TcpListener, handler: H)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let response = handler(req);
                async move { Ok::<_, Infallible>(response.await) }
            });
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
            // A client hanging up mid-response is its business, not an error of ours.
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, "text/plain; charset=utf-8".parse().expect("a valid header"));
    response
}

/// 405 for anything but GET, 404 for any path but `paths`.
fn reject(req: &Request<Incoming>, paths: &[&str]) -> Option<Response<Body>> {
    if req.method() != Method::GET {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        response.headers_mut().insert(ALLOW, "GET".parse().expect("a valid header"));
        return Some(response);
    }
    (!paths.contains(&req.uri().path())).then(|| text(StatusCode::NOT_FOUND, "not found\n"))
}

async fn metrics_endpoint(
    req: Request<Incoming>,
    probes: Arc<dyn Probes>,
    scrape: Arc<Mutex<()>>,
) -> Response<Body> {
    if let Some(rejected) = reject(&req, &["/metrics"]) {
        return rejected;
    }
    let gzip = accepts_gzip(req.headers());
    // Refreshing walks the whole index; off the async workers, one scrape at a time so two scrapes
    // cannot interleave their reset-and-set of the same gauges.
    let rendered = tokio::task::spawn_blocking(move || {
        let _one_at_a_time = scrape.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        probes.refresh_metrics();
        render(gzip)
    })
    .await;
    match rendered {
        Ok(Ok(body)) => {
            let mut response = text(StatusCode::OK, body);
            let headers = response.headers_mut();
            headers.insert(CONTENT_TYPE, metrics::CONTENT_TYPE.parse().expect("a valid header"));
            headers.insert(VARY, ACCEPT_ENCODING.as_str().parse().expect("a valid header"));
            if gzip {
                headers.insert(CONTENT_ENCODING, "gzip".parse().expect("a valid header"));
            }
            response
        }
        Ok(Err(error)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {error}\n")),
        Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("collecting metrics: {error}\n")),
    }
}

/// The metrics text, compressed when `gzip`. The fastest level: a scrape's text is repetitive (the same
/// labels on every line), which even that level compresses well, and a scrape should stay cheap.
fn render(gzip: bool) -> Result<Vec<u8>, prometheus::Error> {
    if !gzip {
        // Straight into the body's bytes: `Metrics::render` would check the whole text is UTF-8 again.
        let mut out = Vec::new();
        metrics::get().render_to(&mut out)?;
        return Ok(out);
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    metrics::get().render_to(&mut encoder)?;
    Ok(encoder.finish()?)
}

/// Whether `Accept-Encoding` names gzip (or `*`) without `q=0` (RFC 9110 section 12.5.3).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    let listed = headers.get_all(ACCEPT_ENCODING).iter().filter_map(|value| value.to_str().ok());
    listed.flat_map(|value| value.split(',')).any(|coding| {
        let mut parts = coding.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default();
        let refused = parts.any(|param| {
            param.split_once('=').is_some_and(|(key, q)| {
                key.trim().eq_ignore_ascii_case("q") && q.trim().parse::<f32>().is_ok_and(|q| q == 0.0)
            })
        });
        (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
    })
}

async fn health_endpoint(req: Request<Incoming>, probes: Arc<dyn Probes>) -> Response<Body> {
    if let Some(rejected) = reject(&req, &["/healthz", "/readyz"]) {
        return rejected;
    }
    if req.uri().path() == "/healthz" {
        // Answering at all shows the runtime schedules tasks and the process accepts connections; the
        // probes say whether what runs on it still works.
        return match probes.live() {
            Ok(()) => text(StatusCode::OK, "ok\n"),
            Err(why) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("unhealthy: {why}\n")),
        };
    }
    match probes.ready() {
        Ok(()) => text(StatusCode::OK, "ok\n"),
        Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
