//! Polling until the cluster reaches a state: controllers (kube-scheduler, kube-controller-manager, kwok)
//! act asynchronously, so every assertion about their work waits with a deadline instead of sleeping.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is re-checked; short, because every check is one cheap request to a local server.
const POLL: Duration = Duration::from_millis(200);

/// Calls `probe` until it returns `Ok`, and returns that value. Panics after `timeout` with `what` and the
/// last `Err` the probe gave (what it saw instead), so a failure says where the cluster got stuck.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    match within(timeout, probe).await {
        Ok(value) => value,
        Err(last) => panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}"),
    }
}

/// Like [`until`] for a step that may give up: after `timeout`, the probe's last `Err` instead of a panic
/// (cleanup, or a measurement that reports what it saw by then).
pub async fn within<T, F, Fut>(timeout: Duration, probe: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    within_every(timeout, POLL, probe).await
}

/// Like [`within`], probing every `every`: for probes too heavy to repeat five times a second.
pub async fn within_every<T, F, Fut>(timeout: Duration, every: Duration, mut probe: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(value) => return Ok(value),
            Err(last) if Instant::now() >= deadline => return Err(last),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}
