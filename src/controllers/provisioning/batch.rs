//! The provisioning batch window (upstream core `provisioning/batcher.go`): it opens with the first
//! trigger and closes after `idle` without a trigger for a pod not yet in the window, or at `max` after it
//! opened, whichever is first. A pod already in the window does not extend it. Also [`DecisionClock`]:
//! how long each pod waited between the controller first seeing it pending and the first plan that
//! decided its place. Pure: the caller passes the time, so the rules are tested without sleeping.

use std::collections::{BTreeSet, HashMap, HashSet};
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

/// Upstream `karpenter_pods_scheduling_decision_duration_seconds` (core `state.Cluster`
/// `AckPods`/`MarkPodSchedulingDecisions`): the wait from the first trigger for a pending pod to the
/// first plan that placed it or declared it unschedulable. A pod planned again later (its claim was
/// deleted, or kube-scheduler bound another pod in its place) is not counted again. Only pods still
/// provisionable are remembered ([`DecisionClock::retain`]).
#[derive(Debug, Default)]
pub struct DecisionClock {
    /// Pods triggered and not yet decided, with when they were first seen.
    waiting: HashMap<String, Instant>,
    /// Pods decided and still provisionable.
    decided: HashSet<String>,
}

/// What one plan decided for the first time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirstDecisions {
    /// Pods no earlier plan had decided.
    pub pods: usize,
    /// The longest of their waits.
    pub longest_wait: Duration,
}

impl DecisionClock {
    /// A trigger for `pod` at `now`; only the first one before its decision counts.
    pub fn seen(&mut self, pod: &str, now: Instant) {
        if !self.decided.contains(pod) && !self.waiting.contains_key(pod) {
            self.waiting.insert(pod.to_string(), now);
        }
    }

    /// A plan made at `now` decided `pods` (the provisionable ones it holds); calls `observe` with the
    /// wait of each pod decided for the first time. A pod without a trigger (pending when the controller
    /// started) is taken as seen at `round_started`.
    pub fn decide<'a>(
        &mut self,
        pods: impl IntoIterator<Item = &'a str>,
        round_started: Instant,
        now: Instant,
        mut observe: impl FnMut(Duration),
    ) -> FirstDecisions {
        let mut first = FirstDecisions::default();
        for pod in pods {
            if self.decided.contains(pod) {
                continue;
            }
            let since = self.waiting.remove(pod).unwrap_or(round_started).min(now);
            let wait = now - since;
            observe(wait);
            first.pods += 1;
            first.longest_wait = first.longest_wait.max(wait);
            self.decided.insert(pod.to_string());
        }
        first
    }

    /// Forgets every pod not in `provisionable`: bound, deleted, or no longer waiting for capacity.
    pub fn retain(&mut self, provisionable: &HashSet<&str>) {
        self.waiting.retain(|pod, _| provisionable.contains(pod.as_str()));
        self.decided.retain(|pod| provisionable.contains(pod.as_str()));
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

    #[test]
    fn a_decision_counts_the_wait_from_the_first_trigger_once() {
        let t0 = Instant::now();
        let secs = |s: u64| t0 + Duration::from_secs(s);
        let mut clock = DecisionClock::default();
        clock.seen("ns/a", t0);
        clock.seen("ns/a", secs(3)); // a second trigger does not restart the clock
        clock.seen("ns/b", secs(4));
        let mut waits = Vec::new();
        let first = clock.decide(["ns/a", "ns/b"], secs(5), secs(6), |w| waits.push(w));
        assert_eq!(first, FirstDecisions { pods: 2, longest_wait: Duration::from_secs(6) });
        assert_eq!(waits, [Duration::from_secs(6), Duration::from_secs(2)]);

        // Planned again (its claim went away) while still pending: not a first decision.
        clock.seen("ns/a", secs(20));
        let again = clock.decide(["ns/a"], secs(21), secs(22), |_| panic!("no first decision"));
        assert_eq!(again, FirstDecisions::default());
    }

    #[test]
    fn a_pod_without_a_trigger_counts_from_the_round_and_bound_pods_are_forgotten() {
        let t0 = Instant::now();
        let secs = |s: u64| t0 + Duration::from_secs(s);
        let mut clock = DecisionClock::default();
        let first = clock.decide(["ns/old"], secs(1), secs(3), |_| {});
        assert_eq!(first, FirstDecisions { pods: 1, longest_wait: Duration::from_secs(2) });
        clock.seen("ns/new", secs(4));
        clock.retain(&HashSet::new());
        assert_eq!((clock.waiting.len(), clock.decided.len()), (0, 0));
        // A pod of the same name created again is a new pod.
        clock.seen("ns/old", secs(5));
        let first = clock.decide(["ns/old"], secs(6), secs(7), |_| {});
        assert_eq!(first, FirstDecisions { pods: 1, longest_wait: Duration::from_secs(2) });
    }
}
