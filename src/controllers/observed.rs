//! Ages on the controller's own clock. Timeouts compare `now` with timestamps other clocks wrote (the
//! API server's `creationTimestamp`, a kubelet's Ready transition, Azure's `timeCreated`); a controller
//! clock minutes fast would make every new NodeClaim look timed out and every young VM look orphaned,
//! and one minutes slow would keep a stuck claim too long. [`FirstSeen`] remembers, on this process's
//! monotonic clock, when it first saw each thing a timeout is about; a timeout then uses the smaller of
//! the wall-clock age and the age this process observed ([`FirstSeen::guarded`]), so no skew of either
//! sign makes it fire early. The price: after a restart a timeout counts again from the restart, which
//! delays it, never advances it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When this process first saw each tracked thing, by a key the caller chooses.
#[derive(Debug, Default)]
pub struct FirstSeen {
    seen: Mutex<BTreeMap<String, Instant>>,
}

impl FirstSeen {
    /// How long ago this process first saw `key` (zero the first time).
    pub fn age(&self, key: &str, now: Instant) -> Duration {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let first = *seen.entry(key.to_string()).or_insert(now);
        now.saturating_duration_since(first)
    }

    /// The age a timeout about `key` may use: the smaller of `wall_age` (from a timestamp another clock
    /// wrote) and how long this process has seen it.
    pub fn guarded(&self, key: &str, wall_age: Duration, now: Instant) -> Duration {
        wall_age.min(self.age(key, now))
    }

    /// Forgets the keys `keep` refuses (things that are gone), so memory follows what exists.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).retain(|key, _| keep(key));
    }

    pub fn len(&self) -> usize {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_clock_cannot_age_what_was_just_seen_and_a_slow_one_keeps_its_own_age() {
        let seen = FirstSeen::default();
        let t0 = Instant::now();
        let minutes = |m: u64| Duration::from_secs(60 * m);
        // Created "6 minutes ago" by a clock 5 minutes fast, first seen now: 0 s old.
        assert_eq!(seen.guarded("claim/u1", minutes(6), t0), Duration::ZERO);
        assert_eq!(seen.guarded("claim/u1", minutes(7), t0 + minutes(1)), minutes(1));
        // A slow clock says 30 s while this process has seen it for a minute: 30 s.
        assert_eq!(
            seen.guarded("claim/u1", Duration::from_secs(30), t0 + minutes(1)),
            Duration::from_secs(30)
        );
        seen.retain(|key| key != "claim/u1");
        assert!(seen.is_empty());
    }
}
