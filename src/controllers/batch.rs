//! The provisioning batch window (upstream core `provisioning/batcher.go`): it opens with the first
//! trigger and closes after `idle` without a trigger for a pod not yet in the window, or at `max` after it
//! opened, whichever is first. A pod already in the window does not extend it. Pure: the caller passes
//! the time, so the rule is tested without sleeping.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Window {
    opened: Instant,
    last_new: Instant,
    idle: Duration,
    max: Duration,
    seen: BTreeSet<String>,
}

impl Window {
    /// Opens a window with its first trigger.
    pub fn open(first: String, now: Instant, idle: Duration, max: Duration) -> Window {
        Window { opened: now, last_new: now, idle, max, seen: BTreeSet::from([first]) }
    }

    /// Records a trigger; returns whether it was new (and so extended the idle timer).
    pub fn add(&mut self, key: String, now: Instant) -> bool {
        let new = self.seen.insert(key);
        if new {
            self.last_new = now;
        }
        new
    }

    /// When the window closes unless a new pod arrives first.
    pub fn deadline(&self) -> Instant {
        (self.last_new + self.idle).min(self.opened + self.max)
    }

    pub fn is_closed(&self, now: Instant) -> bool {
        now >= self.deadline()
    }

    /// Distinct pods seen in the window.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(10);

    #[test]
    fn closes_after_idle_without_new_pods() {
        let t0 = Instant::now();
        let mut w = Window::open("a".into(), t0, IDLE, MAX);
        assert_eq!(w.deadline(), t0 + IDLE);
        assert!(w.add("b".into(), t0 + Duration::from_millis(500)));
        assert_eq!(w.deadline(), t0 + Duration::from_millis(1500));
        // A pod already in the window does not extend it.
        assert!(!w.add("a".into(), t0 + Duration::from_millis(1400)));
        assert!(!w.is_closed(t0 + Duration::from_millis(1499)));
        assert!(w.is_closed(t0 + Duration::from_millis(1500)));
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn closes_at_max_under_a_steady_stream() {
        let t0 = Instant::now();
        let mut w = Window::open("p0".into(), t0, IDLE, MAX);
        for i in 1..40 {
            w.add(format!("p{i}"), t0 + Duration::from_millis(500 * i));
        }
        assert_eq!(w.deadline(), t0 + MAX);
    }
}
