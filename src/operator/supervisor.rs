//! Long-running tasks that come back: a controller loop that panics or returns is logged, counted in
//! `karpenter_azure_task_restarts_total{task}` and started again after a backoff ([`FIRST_BACKOFF`]
//! doubling to [`MAX_BACKOFF`], back to the first once a run lasted [`HEALTHY_RUN`]). A task that keeps
//! ending — [`CRASH_LOOP`] ends within [`CRASH_WINDOW`] — makes [`Supervisor::health`] fail, and with it
//! `/healthz`, so the kubelet restarts the pod rather than leaving a replica that holds the lease and
//! does nothing.
//!
//! The supervised future runs inside the supervising one (no task of its own), so aborting the
//! supervisor — a lost lease, shutdown — stops the task with it.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use super::metrics;

/// The wait before the first restart.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between restarts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A run this long counts as healthy: the next restart waits [`FIRST_BACKOFF`] again.
pub const HEALTHY_RUN: Duration = Duration::from_secs(10 * 60);
/// How many ends within [`CRASH_WINDOW`] make the process unhealthy.
pub const CRASH_LOOP: usize = 5;
pub const CRASH_WINDOW: Duration = Duration::from_secs(10 * 60);

/// The supervised tasks of a process and their recent ends.
#[derive(Debug)]
pub struct Supervisor {
    ends: Mutex<BTreeMap<&'static str, VecDeque<Instant>>>,
    first_backoff: Duration,
    max_backoff: Duration,
}

impl Default for Supervisor {
    fn default() -> Self {
        Supervisor::with_backoff(FIRST_BACKOFF, MAX_BACKOFF)
    }
}

impl Supervisor {
    pub fn new() -> Self {
        Self::default()
    }

    /// A supervisor that waits `first` before the first restart, doubling up to `max`.
    pub fn with_backoff(first: Duration, max: Duration) -> Self {
        Supervisor { ends: Mutex::new(BTreeMap::new()), first_backoff: first, max_backoff: max }
    }

    /// Runs `make()` until it is aborted, starting it again whenever it ends or panics.
    pub fn run<F, Fut>(
        self: &Arc<Self>,
        task: &'static str,
        make: F,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let supervisor = self.clone();
        async move {
            let mut backoff = supervisor.first_backoff;
            loop {
                let started = Instant::now();
                let outcome = AssertUnwindSafe(make()).catch_unwind().await;
                let why = match &outcome {
                    Ok(()) => "ended".to_string(),
                    Err(panic) => format!("panicked: {}", panic_message(panic.as_ref())),
                };
                if started.elapsed() >= HEALTHY_RUN {
                    backoff = supervisor.first_backoff;
                }
                supervisor.record_end(task, Instant::now());
                metrics::get().task_restarted(task);
                tracing::error!(task, %why, restart_in_s = backoff.as_secs_f64(), "a controller task stopped; restarting it");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(supervisor.max_backoff);
            }
        }
    }

    fn record_end(&self, task: &'static str, at: Instant) {
        let mut ends = self.ends.lock().unwrap_or_else(|p| p.into_inner());
        let recent = ends.entry(task).or_default();
        recent.push_back(at);
        while recent.front().is_some_and(|t| at.duration_since(*t) > CRASH_WINDOW) {
            recent.pop_front();
        }
    }

    /// `Err` naming the tasks that ended [`CRASH_LOOP`] times within the last [`CRASH_WINDOW`] before
    /// `now`.
    pub fn health(&self, now: Instant) -> Result<(), String> {
        let ends = self.ends.lock().unwrap_or_else(|p| p.into_inner());
        let looping: Vec<String> = ends
            .iter()
            .filter_map(|(task, at)| {
                let recent = at.iter().filter(|t| now.saturating_duration_since(**t) <= CRASH_WINDOW).count();
                (recent >= CRASH_LOOP).then(|| format!("{task} stopped {recent} times"))
            })
            .collect();
        if looping.is_empty() {
            Ok(())
        } else {
            Err(format!("{} in {} min", looping.join(", "), CRASH_WINDOW.as_secs() / 60))
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".to_string())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_task_that_panics_or_ends_is_restarted_with_backoff_and_a_crash_loop_is_unhealthy() {
        let ms = Duration::from_millis;
        let supervisor = Arc::new(Supervisor::with_backoff(ms(100), ms(1000)));
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let task = tokio::spawn(supervisor.run("flaky", move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if n.is_multiple_of(2) {
                    panic!("run {n} failed");
                }
            }
        }));
        // Restarts after 100, 200, 400 and 800 ms; the fifth end makes a crash loop.
        let started = Instant::now();
        while runs.load(Ordering::SeqCst) < 4 {
            tokio::time::sleep(ms(10)).await;
        }
        assert!(supervisor.health(Instant::now()).is_ok(), "four ends are not a loop yet");
        let unhealthy = loop {
            if let Err(why) = supervisor.health(Instant::now()) {
                break why;
            }
            tokio::time::sleep(ms(10)).await;
        };
        assert!(unhealthy.contains("flaky stopped 5 times"), "{unhealthy}");
        assert_eq!(runs.load(Ordering::SeqCst), 5);
        assert!(started.elapsed() >= ms(1500), "backoff 100 + 200 + 400 + 800 ms: {:?}", started.elapsed());
        // Aborting the supervisor stops the task for good.
        task.abort();
        let _ = task.await;
        tokio::time::sleep(ms(2000)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 5, "no run after the abort");
    }

    #[test]
    fn only_ends_within_the_window_count() {
        let supervisor = Supervisor::new();
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        for i in 0..CRASH_LOOP as u64 {
            supervisor.record_end("slow", at(i * 200));
        }
        assert!(supervisor.health(at(800)).is_ok(), "five ends over 800 s: four within the last 600");
        for i in 0..CRASH_LOOP as u64 {
            supervisor.record_end("fast", at(1000 + i * 100));
        }
        assert!(supervisor.health(at(1400)).is_err(), "five ends over 400 s");
        assert!(supervisor.health(at(2001)).is_ok(), "all of them older than the window");
    }
}
