//! Polling until the cluster reaches a state: controllers (kube-scheduler, kube-controller-manager, kwok)
//! act asynchronously, so every assertion about their work waits with a deadline instead of sleeping.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is re-checked; short, because every check is one cheap request to a local server.
const POLL: Duration = Duration::from_millis(200);

/// Calls `probe` until it returns `Ok`, and returns that value. Panics after `timeout` with `what` and the
/// last `Err` the probe gave (what it saw instead), so a failure says where the cluster got stuck.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}
