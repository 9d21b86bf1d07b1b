//! What a background watch has seen of one kind of object, for the tests that time a burst (`burst`,
//! `scale`): how many objects arrived and when the newest did, and for pods how many are bound and
//! running, when the last was first seen bound, and when the last got kube-scheduler's verdict
//! (unschedulable, which makes it the controller's to provision, or bound).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, ObjectMeta};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;

/// What the watch has seen so far.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Distinct objects seen (deletions are not subtracted).
    pub count: usize,
    /// When this process first saw the newest of them, by its monotonic and its wall clock.
    pub last_arrival: Option<Instant>,
    pub last_arrival_wall: Option<Timestamp>,
    /// The latest `creationTimestamp`, in Unix seconds.
    pub latest_created: Option<i64>,
    /// Pods only: with `spec.nodeName`, and bound and Running, as last reported.
    pub bound: usize,
    pub running: usize,
    /// Pods only: when the last of them was first seen bound.
    pub last_bound: Option<Instant>,
    /// Pods only: when the last of them was first seen with kube-scheduler's verdict.
    pub last_marked: Option<Instant>,
}

/// What a pod's status says of kube-scheduler's work on it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PodFlags {
    /// `PodScheduled=False` with reason `Unschedulable`.
    pub unschedulable: bool,
    pub bound: bool,
    /// Bound, and in phase Running.
    pub running: bool,
}

impl PodFlags {
    fn marked(&self) -> bool {
        self.unschedulable || self.bound
    }
}

/// What the tracker needs of an object.
pub trait Tracked {
    fn meta(&self) -> &ObjectMeta;
    fn flags(&self) -> PodFlags {
        PodFlags::default()
    }
}

impl Tracked for Pod {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn flags(&self) -> PodFlags {
        let bound = self.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let status = self.status.as_ref();
        let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
        let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or_default();
        let unschedulable = conditions.iter().any(|c| {
            c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
        });
        PodFlags { unschedulable, bound, running: bound && running }
    }
}

impl Tracked for DynamicObject {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

/// Notes every object a watch reports, by uid; cheap to clone.
#[derive(Clone, Default)]
pub struct Tracker {
    inner: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    objects: HashMap<String, Known>,
    seen: Seen,
}

#[derive(Clone, Copy, Default)]
struct Known {
    flags: PodFlags,
    /// Once given, kube-scheduler's verdict stays given (a bound pod's status may still show the old
    /// condition for a moment).
    marked: bool,
}

impl Tracker {
    pub fn snapshot(&self) -> Seen {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).seen.clone()
    }

    pub fn note<K: Tracked>(&self, object: &K) {
        let Some(uid) = object.meta().uid.clone() else { return };
        let flags = object.flags();
        let now = Instant::now();
        let mut state = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let old = state.objects.get(&uid).copied();
        let was_marked = old.is_some_and(|k| k.marked);
        state.objects.insert(uid, Known { flags, marked: was_marked || flags.marked() });
        let seen = &mut state.seen;
        if old.is_none() {
            seen.count += 1;
            seen.last_arrival = Some(now);
            seen.last_arrival_wall = Some(Timestamp::now());
            let created = object.meta().creation_timestamp.as_ref().map(|t| t.0.as_second());
            seen.latest_created = seen.latest_created.max(created);
        }
        let was = old.map(|k| k.flags).unwrap_or_default();
        seen.bound = seen.bound + usize::from(flags.bound) - usize::from(was.bound);
        seen.running = seen.running + usize::from(flags.running) - usize::from(was.running);
        if flags.bound && !was.bound {
            seen.last_bound = Some(now);
        }
        if flags.marked() && !was_marked {
            seen.last_marked = Some(now);
        }
    }

    /// Runs a watch in the background, noting every object it reports; abort the handle to stop it.
    /// `test` names the test in the messages of watch errors.
    pub fn watch<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        test: &'static str,
    ) -> tokio::task::JoinHandle<()>
    where
        K: Tracked + kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let tracker = self.clone();
        tokio::spawn(async move {
            let mut events = watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(Event::Apply(object) | Event::InitApply(object)) => tracker.note(&object),
                    Ok(_) => {}
                    Err(err) => eprintln!("{test}: watch error (retrying): {err}"),
                }
            }
        })
    }
}

/// Seconds from `from` to `to`, negative when `to` came first.
pub fn signed_seconds(from: Instant, to: Instant) -> f64 {
    if to >= from {
        (to - from).as_secs_f64()
    } else {
        -(from - to).as_secs_f64()
    }
}
