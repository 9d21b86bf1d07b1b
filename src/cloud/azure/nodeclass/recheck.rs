//! When to ask Azure again about something the AKSNodeClass status depends on (an image definition's
//! versions, a subnet): per key, the last answer, the last failure, and when the next attempt is due —
//! `every` after a success, an exponential backoff after failures. Pure: the caller passes `now`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::cloud::CloudError;

/// How often to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// After a success.
    pub every: Duration,
    /// After the first failure; doubled for each further one.
    pub first_retry: Duration,
    /// The longest wait after failures.
    pub max_retry: Duration,
}

/// What is known about one key.
#[derive(Debug, Clone)]
struct Entry<V> {
    ok: Option<V>,
    error: Option<CloudError>,
    failures: u32,
    next: Instant,
}

/// Answers and due times per key.
#[derive(Debug, Clone)]
pub struct Rechecks<K, V> {
    schedule: Schedule,
    entries: BTreeMap<K, Entry<V>>,
}

impl<K: Ord, V> Rechecks<K, V> {
    pub fn new(schedule: Schedule) -> Self {
        Rechecks { schedule, entries: BTreeMap::new() }
    }

    /// Whether `key` should be asked about now: never asked, or its next attempt is due.
    pub fn due(&self, key: &K, now: Instant) -> bool {
        self.entries.get(key).is_none_or(|e| now >= e.next)
    }

    /// The last successful answer, however old, and the failure since then, if any.
    pub fn last(&self, key: &K) -> (Option<&V>, Option<&CloudError>) {
        self.entries.get(key).map_or((None, None), |e| (e.ok.as_ref(), e.error.as_ref()))
    }

    pub fn succeeded(&mut self, key: K, value: V, now: Instant) {
        let next = now + self.schedule.every;
        self.entries.insert(key, Entry { ok: Some(value), error: None, failures: 0, next });
    }

    /// Records a failure, keeping the last successful answer; returns the wait before the next attempt.
    pub fn failed(&mut self, key: K, error: CloudError, now: Instant) -> Duration {
        let schedule = self.schedule;
        let entry =
            self.entries.entry(key).or_insert(Entry { ok: None, error: None, failures: 0, next: now });
        entry.failures = entry.failures.saturating_add(1);
        let doublings = entry.failures.saturating_sub(1).min(16);
        let wait = schedule.first_retry.saturating_mul(1 << doublings).min(schedule.max_retry);
        entry.error = Some(error);
        entry.next = now + wait;
        wait
    }

    /// Drops keys nothing asks about any more (a class deleted, a version superseded).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.entries.retain(|k, _| keep(k));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEDULE: Schedule = Schedule {
        every: Duration::from_secs(600),
        first_retry: Duration::from_secs(5),
        max_retry: Duration::from_secs(60),
    };

    fn transient() -> CloudError {
        CloudError::Transient("500".into())
    }

    #[test]
    fn unknown_keys_are_due_and_successes_wait_the_full_interval() {
        let t0 = Instant::now();
        let mut checks: Rechecks<&str, u32> = Rechecks::new(SCHEDULE);
        assert!(checks.due(&"a", t0));
        assert_eq!(checks.last(&"a"), (None, None));
        checks.succeeded("a", 1, t0);
        assert!(!checks.due(&"a", t0 + Duration::from_secs(599)));
        assert!(checks.due(&"a", t0 + Duration::from_secs(600)));
        assert_eq!(checks.last(&"a"), (Some(&1), None));
    }

    #[test]
    fn failures_back_off_exponentially_up_to_the_cap_and_keep_the_last_answer() {
        let t0 = Instant::now();
        let mut checks: Rechecks<&str, u32> = Rechecks::new(SCHEDULE);
        checks.succeeded("a", 7, t0);
        let waits: Vec<u64> = (0..6).map(|_| checks.failed("a", transient(), t0).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 60, 60]);
        assert!(!checks.due(&"a", t0 + Duration::from_secs(59)));
        assert!(checks.due(&"a", t0 + Duration::from_secs(60)));
        assert_eq!(checks.last(&"a"), (Some(&7), Some(&transient())));
        // A success resets the backoff and clears the failure.
        checks.succeeded("a", 8, t0);
        assert_eq!(checks.last(&"a"), (Some(&8), None));
        assert_eq!(checks.failed("a", transient(), t0).as_secs(), 5);
    }

    #[test]
    fn many_failures_do_not_overflow() {
        let t0 = Instant::now();
        let mut checks: Rechecks<u8, ()> = Rechecks::new(SCHEDULE);
        for _ in 0..100 {
            assert!(checks.failed(1, transient(), t0) <= SCHEDULE.max_retry);
        }
        checks.retain(|k| *k != 1);
        assert!(checks.is_empty());
    }
}
