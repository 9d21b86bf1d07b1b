//! Whether each watch gets through. A watch that fails backs off and retries on its own, and while it
//! does the index of its kind stops changing without anything saying so: decisions would be made on a
//! cluster that is gone. [`WatchHealth`] keeps, per kind, the streak of failures in progress; a kind
//! failing for longer than the stale limit makes `/readyz` fail (so traffic and attention go elsewhere)
//! and every failing kind shows in `karpenter_azure_watch_failing_seconds{kind}`.
//!
//! A watch that recovers says nothing (a quiet kind sends no events), so a streak ends when an event
//! arrives or when no failure has come for [`RECOVERED_AFTER`], longer than the watcher's longest
//! backoff between retries (kube-runtime's default backoff waits at most 30 s).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::state::Kind;

/// How long after its last failure a watch that has sent nothing since counts as recovered.
pub const RECOVERED_AFTER: Duration = Duration::from_secs(90);
/// The default stale limit: a watch failing this long makes `/readyz` fail.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(5 * 60);

#[derive(Clone, Copy, Debug)]
struct Streak {
    first: Instant,
    last: Instant,
}

/// The failure streaks of the watches.
#[derive(Debug)]
pub struct WatchHealth {
    streaks: Mutex<BTreeMap<Kind, Streak>>,
    stale_after: Duration,
}

impl WatchHealth {
    pub fn new(stale_after: Duration) -> Self {
        WatchHealth { streaks: Mutex::new(BTreeMap::new()), stale_after }
    }

    /// The watch of `kind` failed at `now`.
    pub fn failed(&self, kind: Kind, now: Instant) {
        let mut streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        let streak = streaks.entry(kind).or_insert(Streak { first: now, last: now });
        if now.saturating_duration_since(streak.last) > RECOVERED_AFTER {
            streak.first = now;
        }
        streak.last = now;
    }

    /// The watch of `kind` delivered an event: it gets through.
    pub fn delivered(&self, kind: Kind) {
        let mut streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        if !streaks.is_empty() {
            streaks.remove(&kind);
        }
    }

    /// The kinds whose watch is failing at `now`, with for how long.
    pub fn failing(&self, now: Instant) -> Vec<(Kind, Duration)> {
        let streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        streaks
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.last) <= RECOVERED_AFTER)
            .map(|(kind, s)| (*kind, now.saturating_duration_since(s.first)))
            .collect()
    }

    /// `Err` naming the kinds whose watch has been failing for longer than the stale limit.
    pub fn ready(&self, now: Instant) -> Result<(), String> {
        let stale: Vec<String> = self
            .failing(now)
            .into_iter()
            .filter(|(_, failing)| *failing > self.stale_after)
            .map(|(kind, failing)| format!("{} watch failing for {} s", kind.name(), failing.as_secs()))
            .collect();
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
        assert!(health.ready(at(330 + 91)).is_ok(), "no failure for longer than a backoff: recovered");
        health.failed(Kind::NodeClaim, at(500));
        assert_eq!(health.failing(at(500)), [(Kind::NodeClaim, Duration::ZERO)], "a new streak");
        health.delivered(Kind::NodeClaim);
        assert!(health.failing(at(500)).is_empty());
    }
}
