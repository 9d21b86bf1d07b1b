//! Whether the controller's view of the cluster is current. A watch that fails backs off and retries
//! on its own, and while it does the index of its kind stops changing without anything saying so:
//! decisions would be made on a cluster that is gone. [`WatchHealth`] keeps, per kind, the streak of
//! failures in progress, and one more streak for the API server itself (fed by the leader-election
//! calls, which every replica makes each second). A streak longer than the stale limit makes `/readyz`
//! fail (so traffic and attention go elsewhere), and every failing kind shows in
//! `karpenter_azure_watch_failing_seconds{kind}`.
//!
//! A watch that recovers says nothing (a quiet kind sends no events), so a streak ends when an event
//! arrives or when the watcher would have reported its next failure by now and has not:
//! [`retry_window`] follows kube-runtime's default backoff (`watcher::DefaultBackoff`: 0.8 s doubling
//! to 30 s, with jitter up to the delay again) plus the client's connect timeout (kube-client's
//! `DEFAULT_CONNECT_TIMEOUT`, 30 s), the longest a retry against an unreachable server takes to fail.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::state::Kind;

/// The default stale limit: a watch failing this long makes `/readyz` fail.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(5 * 60);
/// kube-runtime's default watcher backoff: the first delay, and the most it doubles to.
const BACKOFF_FIRST: Duration = Duration::from_millis(800);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// kube-client's connect timeout (the controller keeps the default).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Time for the failed request itself and for scheduling.
const SLACK: Duration = Duration::from_secs(1);

/// How long after the `failures`-th failure in a row the watcher has surely reported the next one if
/// it still fails: the longest backoff with jitter, then a retry that fails at the connect timeout.
fn retry_window(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    let backoff = BACKOFF_FIRST.saturating_mul(1 << doublings).min(BACKOFF_MAX);
    backoff * 2 + CONNECT_TIMEOUT + SLACK
}

#[derive(Clone, Copy, Debug)]
struct Streak {
    first: Instant,
    last: Instant,
    failures: u32,
}

impl Streak {
    fn new(now: Instant) -> Streak {
        Streak { first: now, last: now, failures: 1 }
    }

    /// Whether the streak still goes on at `now`: its next failure is not overdue.
    fn in_progress(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last) <= retry_window(self.failures)
    }

    /// Adds a failure at `now`, or starts a new streak when this one had ended.
    fn extend(self, now: Instant) -> Streak {
        if self.in_progress(now) {
            Streak { last: now, failures: self.failures.saturating_add(1), ..self }
        } else {
            Streak::new(now)
        }
    }
}

/// The failure streaks of the watches and of the API server.
#[derive(Debug)]
pub struct WatchHealth {
    streaks: Mutex<BTreeMap<Kind, Streak>>,
    /// Calls that reached no API server, in a row; `None` once one got an answer.
    api_server: Mutex<Option<Streak>>,
    stale_after: Duration,
}

impl WatchHealth {
    pub fn new(stale_after: Duration) -> Self {
        WatchHealth { streaks: Mutex::new(BTreeMap::new()), api_server: Mutex::new(None), stale_after }
    }

    /// The watch of `kind` failed at `now`.
    pub fn failed(&self, kind: Kind, now: Instant) {
        let mut streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        let streak = streaks.get(&kind).map_or(Streak::new(now), |s| s.extend(now));
        streaks.insert(kind, streak);
    }

    /// The watch of `kind` delivered an event: it gets through.
    pub fn delivered(&self, kind: Kind) {
        let mut streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        if !streaks.is_empty() {
            streaks.remove(&kind);
        }
    }

    /// A call to the API server at `now` got an answer (`answered`, whatever its status) or reached no
    /// server (refused, timed out).
    pub fn api_call(&self, answered: bool, now: Instant) {
        let mut streak = self.api_server.lock().unwrap_or_else(|p| p.into_inner());
        *streak = if answered { None } else { Some(streak.map_or(Streak::new(now), |s| s.extend(now))) };
    }

    /// The kinds whose watch is failing at `now`, with for how long.
    pub fn failing(&self, now: Instant) -> Vec<(Kind, Duration)> {
        let streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        streaks
            .iter()
            .filter(|(_, s)| s.in_progress(now))
            .map(|(kind, s)| (*kind, now.saturating_duration_since(s.first)))
            .collect()
    }

    /// How long the API server has been out of reach at `now`, if it is.
    pub fn api_server_unreachable(&self, now: Instant) -> Option<Duration> {
        let streak = self.api_server.lock().unwrap_or_else(|p| p.into_inner());
        streak.filter(|s| s.in_progress(now)).map(|s| now.saturating_duration_since(s.first))
    }

    /// `Err` naming what has been failing for longer than the stale limit: the API server, or the
    /// watches of some kinds.
    pub fn ready(&self, now: Instant) -> Result<(), String> {
        let api_server = self
            .api_server_unreachable(now)
            .filter(|failing| *failing > self.stale_after)
            .map(|failing| format!("API server unreachable for {} s", failing.as_secs()));
        let watches = self
            .failing(now)
            .into_iter()
            .filter(|(_, failing)| *failing > self.stale_after)
            .map(|(kind, failing)| format!("{} watch failing for {} s", kind.name(), failing.as_secs()));
        let stale: Vec<String> = api_server.into_iter().chain(watches).collect();
        if stale.is_empty() {
            Ok(())
        } else {
            Err(stale.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_window_follows_the_watcher_backoff_and_the_connect_timeout() {
        assert_eq!(retry_window(1), Duration::from_millis(1600) + CONNECT_TIMEOUT + SLACK);
        assert_eq!(retry_window(3), Duration::from_millis(6400) + CONNECT_TIMEOUT + SLACK);
        assert_eq!(retry_window(7), Duration::from_secs(60) + CONNECT_TIMEOUT + SLACK, "capped at 30 s");
        assert_eq!(retry_window(u32::MAX), retry_window(7));
    }

    #[test]
    fn a_watch_failing_past_the_limit_is_stale_until_it_delivers_or_stops_failing() {
        let health = WatchHealth::new(Duration::from_secs(300));
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        for secs in (0..=330).step_by(30) {
            health.failed(Kind::NodeClaim, at(secs));
        }
        assert_eq!(health.failing(at(330)), [(Kind::NodeClaim, Duration::from_secs(330))]);
        let why = health.ready(at(330)).unwrap_err();
        assert!(why.contains("NodeClaim watch failing for 330 s"), "{why}");
        assert!(health.ready(at(330 + 92)).is_ok(), "no failure for longer than a retry: recovered");
        health.failed(Kind::NodeClaim, at(500));
        assert_eq!(health.failing(at(500)), [(Kind::NodeClaim, Duration::ZERO)], "a new streak");
        health.delivered(Kind::NodeClaim);
        assert!(health.failing(at(500)).is_empty());
    }

    #[test]
    fn one_failure_of_a_quiet_watch_ends_once_its_retry_is_overdue() {
        // A watch that fails once and reconnects sends nothing more; it must not stay failing.
        let health = WatchHealth::new(Duration::from_secs(5));
        let t0 = Instant::now();
        health.failed(Kind::DaemonSet, t0);
        assert!(health.ready(t0 + Duration::from_secs(10)).is_err(), "the retry may still be connecting");
        let overdue = t0 + retry_window(1) + Duration::from_millis(1);
        assert!(health.failing(overdue).is_empty());
        assert!(health.ready(overdue).is_ok());
    }

    #[test]
    fn the_api_server_out_of_reach_past_the_limit_fails_readiness_until_it_answers() {
        let health = WatchHealth::new(Duration::from_secs(5));
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        for secs in 0..=6 {
            health.api_call(false, at(secs));
        }
        assert_eq!(health.api_server_unreachable(at(6)), Some(Duration::from_secs(6)));
        let why = health.ready(at(6)).unwrap_err();
        assert!(why.contains("API server unreachable for 6 s"), "{why}");
        health.api_call(true, at(7));
        assert_eq!(health.api_server_unreachable(at(7)), None);
        assert!(health.ready(at(7)).is_ok());
    }
}
