//! The cadence of polling a long-running ARM operation.
//!
//! ARM says on each answer of an accepted operation when to ask again: `Retry-After` in whole seconds,
//! or `retry-after-ms` / `x-ms-retry-after-ms` in milliseconds (azure-core reads the same three headers,
//! azure_core's `policies/retry_policies/retry_policy.rs`). A poll follows that advice, but never waits longer than
//! the configured interval (upstream polls VM creates every 3 s, `pkg/providers/instance/poller.go`), so an
//! advice of a minute does not slow a launch, and never less than [`MIN_POLL`]. The operation is given
//! up at a deadline (interval × polls), not after a count of polls, so a quicker cadence does not shorten
//! how long a slow create may take. The cadence is pure: the caller reads the headers and the clock.
//!
//! [`Polling`] carries the cadence and the provider's concurrency limit into a wait: each request of the
//! wait (the first call and every poll) takes a permit and gives it back before sleeping, so a thousand
//! VMs being created or deleted hold no permit while they wait, and their polls queue behind the limit
//! like any other ARM call.

use std::future::Future;
use std::time::Duration;

use tokio::sync::Semaphore;

/// How a long-running operation is waited for: the concurrency limit its requests share with every other
/// ARM call of the provider, and the cadence.
#[derive(Debug, Clone, Copy)]
pub struct Polling<'a> {
    pub limiter: &'a Semaphore,
    pub interval: Duration,
    pub max_polls: u32,
}

impl Polling<'_> {
    /// Runs one request under the concurrency limit.
    pub async fn call<T>(&self, request: impl Future<Output = T>) -> T {
        // The semaphore is never closed, so acquire cannot fail; run unlimited rather than panic if it did.
        let _permit = self.limiter.acquire().await.ok();
        request.await
    }

    /// How long the operation may run (see [`deadline`]).
    pub fn deadline(&self) -> Duration {
        deadline(self.interval, self.max_polls)
    }
}

/// The shortest wait between two polls, whatever ARM advises: ARM's own unit is the second, and a burst
/// of launches polls once per VM per wait, so a shorter advice would turn a burst into a flood of reads
/// against the subscription's ARM read limit.
pub const MIN_POLL: Duration = Duration::from_secs(1);

/// ARM's advice on when to poll again, from a header lookup (`name` is lower-case; HTTP names are
/// case-insensitive). Milliseconds win over seconds; an HTTP-date `Retry-After` is ignored.
pub fn retry_after<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Option<Duration> {
    let number = |name: &str| header(name).and_then(|v| v.trim().parse::<u64>().ok());
    number("retry-after-ms")
        .or_else(|| number("x-ms-retry-after-ms"))
        .map(Duration::from_millis)
        .or_else(|| number("retry-after").map(Duration::from_secs))
}

/// How long to wait before the next poll: ARM's advice within [`MIN_POLL`, `interval`], or `interval`
/// without advice. An `interval` below [`MIN_POLL`] (tests) is used as it is.
pub fn next_wait(advised: Option<Duration>, interval: Duration) -> Duration {
    let floor = MIN_POLL.min(interval);
    advised.map_or(interval, |advice| advice.clamp(floor, interval))
}

/// How long an operation may run before it is given up: what `max_polls` polls at `interval` take.
pub fn deadline(interval: Duration, max_polls: u32) -> Duration {
    interval.saturating_mul(max_polls.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |name| pairs.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    }

    #[test]
    fn milliseconds_win_over_seconds_and_a_date_is_no_advice() {
        assert_eq!(
            retry_after(headers(&[("Retry-After", "1"), ("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        assert_eq!(retry_after(headers(&[("x-ms-retry-after-ms", "40")])), Some(Duration::from_millis(40)));
        assert_eq!(retry_after(headers(&[("Retry-After", " 10 ")])), Some(Duration::from_secs(10)));
        assert_eq!(retry_after(headers(&[("Retry-After", "Wed, 21 Oct 2026 07:28:00 GMT")])), None);
        assert_eq!(retry_after(headers(&[])), None);
    }

    #[test]
    fn the_advice_is_followed_within_the_floor_and_the_interval() {
        let three = Duration::from_secs(3);
        assert_eq!(next_wait(None, three), three);
        assert_eq!(next_wait(Some(Duration::from_secs(2)), three), Duration::from_secs(2));
        assert_eq!(next_wait(Some(Duration::from_millis(300)), three), MIN_POLL);
        assert_eq!(next_wait(Some(Duration::from_secs(60)), three), three);
        assert_eq!(next_wait(Some(Duration::ZERO), three), MIN_POLL);
        // A test's interval below the floor is kept.
        let fast = Duration::from_millis(30);
        assert_eq!(next_wait(Some(Duration::from_secs(1)), fast), fast);
        assert_eq!(next_wait(Some(Duration::ZERO), fast), fast);
    }

    #[test]
    fn the_deadline_is_what_the_polls_at_the_interval_take() {
        assert_eq!(deadline(Duration::from_secs(3), 200), Duration::from_secs(600));
        assert_eq!(deadline(Duration::from_secs(3), 0), Duration::from_secs(3));
    }
}
