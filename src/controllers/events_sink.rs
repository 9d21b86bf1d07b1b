//! Writes events to the API server (`events.k8s.io/v1`), folding repeats into one Event as client-go's
//! recorder does: an event that repeats one published within [`SERIES_WINDOW`] (same object, type,
//! reason, action and related object) updates that Event's `series` (count, last observed) instead of
//! creating another.
//!
//! The table of published events is bounded at [`MAX_SERIES`] entries (client-go's event correlator
//! keeps an LRU of 4096, `maxLruCacheEntries` in `tools/record/events_cache.go`); the oldest go first.
//! So a burst of thousands of pods costs a fixed amount of memory, and each publish costs the same
//! however many went before. (kube's `Recorder` keeps every event for six minutes and scans them all
//! on each publish.)

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use serde_json::json;

/// How long a published event stays the one its repeats update (kube's recorder: 6 minutes).
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);
/// Published events remembered at most.
pub const MAX_SERIES: usize = 4096;

/// Publishes events as one reporting controller.
pub struct Sink {
    client: kube::Client,
    controller: String,
    instance: String,
    published: Mutex<Published>,
}

impl Sink {
    pub fn new(client: kube::Client, reporter: Reporter) -> Sink {
        let instance = reporter.instance.clone().unwrap_or_else(|| reporter.controller.clone());
        Sink {
            client,
            controller: reporter.controller,
            instance,
            published: Mutex::new(Published::default()),
        }
    }

    /// Creates the event, or updates the series of the Event it repeats.
    pub async fn publish(&self, ev: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = series_key(ev, regarding);
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".to_string());
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let repeat = self.published().repeat(&key, now);
        if let Some(Repeat { name, count }) = repeat {
            let series = json!({ "series": { "count": count, "lastObservedTime": MicroTime(now) } });
            events.patch(&name, &PatchParams::default(), &Patch::Merge(&series)).await?;
            return Ok(());
        }
        let event = self.event(ev, regarding, &namespace, now);
        let created = events.create(&PostParams::default(), &event).await?;
        let name = created.metadata.name.unwrap_or_default();
        self.published().remember(key, name, now);
        Ok(())
    }

    fn published(&self) -> std::sync::MutexGuard<'_, Published> {
        self.published.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn event(&self, ev: &Event, regarding: &ObjectReference, namespace: &str, now: Timestamp) -> K8sEvent {
        let object = regarding.name.as_deref().unwrap_or(&self.controller);
        K8sEvent {
            metadata: ObjectMeta {
                namespace: Some(namespace.to_string()),
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                ..ObjectMeta::default()
            },
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(event_type(ev.type_).to_string()),
            ..K8sEvent::default()
        }
    }
}

fn event_type(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// What makes two events the same series: the object, type, reason, action and related object.
pub fn series_key(ev: &Event, regarding: &ObjectReference) -> String {
    let reference = |r: &ObjectReference| {
        format!(
            "{}/{}/{}/{}/{}",
            r.api_version.as_deref().unwrap_or_default(),
            r.kind.as_deref().unwrap_or_default(),
            r.namespace.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default(),
            r.uid.as_deref().unwrap_or_default(),
        )
    };
    format!(
        "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
        reference(regarding),
        event_type(ev.type_),
        ev.reason,
        ev.action,
        ev.secondary.as_ref().map(reference).unwrap_or_default(),
    )
}

/// A repeat of a published event: the Event to update and its new count.
#[derive(Debug, PartialEq)]
pub struct Repeat {
    pub name: String,
    pub count: i32,
}

/// The published events repeats may update, oldest first.
#[derive(Debug, Default)]
pub struct Published {
    by_key: HashMap<String, Series>,
    /// Keys in the order they were first published; a key is here once while it is in `by_key`.
    order: VecDeque<String>,
}

#[derive(Debug)]
struct Series {
    name: String,
    count: i32,
    last: Timestamp,
}

impl Published {
    /// When `key` repeats an event published within [`SERIES_WINDOW`] of `now`, counts the repeat and
    /// says which Event to update.
    pub fn repeat(&mut self, key: &str, now: Timestamp) -> Option<Repeat> {
        let series = self.by_key.get_mut(key)?;
        if now.duration_since(series.last) >= SERIES_WINDOW {
            return None;
        }
        series.count += 1;
        series.last = now;
        Some(Repeat { name: series.name.clone(), count: series.count })
    }

    /// Records a created Event as the one `key`'s repeats update, forgetting the oldest beyond
    /// [`MAX_SERIES`].
    pub fn remember(&mut self, key: String, name: String, now: Timestamp) {
        let series = Series { name, count: 1, last: now };
        if self.by_key.insert(key.clone(), series).is_some() {
            // A new Event for a key whose series had ended: it keeps its place in the order.
            return;
        }
        self.order.push_back(key);
        while self.order.len() > MAX_SERIES {
            if let Some(oldest) = self.order.pop_front() {
                self.by_key.remove(&oldest);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn pod(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    fn nominated(note: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: "Nominated".into(),
            note: Some(note.into()),
            action: "Nominated".into(),
            secondary: None,
        }
    }

    #[test]
    fn a_repeat_within_the_window_updates_the_series_and_one_after_it_starts_a_new_event() {
        let mut published = Published::default();
        let key = series_key(&nominated("a"), &pod("p"));
        assert_eq!(published.repeat(&key, at(0)), None);
        published.remember(key.clone(), "p.1".into(), at(0));
        assert_eq!(published.repeat(&key, at(60)), Some(Repeat { name: "p.1".into(), count: 2 }));
        assert_eq!(published.repeat(&key, at(120)), Some(Repeat { name: "p.1".into(), count: 3 }));
        // The window counts from the last repeat.
        let last = 120 + SERIES_WINDOW.as_secs();
        assert_eq!(published.repeat(&key, at(last - 1)), Some(Repeat { name: "p.1".into(), count: 4 }));
        assert_eq!(published.repeat(&key, at(2 * last)), None);
        published.remember(key.clone(), "p.2".into(), at(2 * last));
        assert_eq!(published.len(), 1);
        assert_eq!(published.repeat(&key, at(2 * last + 1)), Some(Repeat { name: "p.2".into(), count: 2 }));
    }

    #[test]
    fn the_series_key_ignores_the_note_and_tells_objects_reasons_and_types_apart() {
        let base = series_key(&nominated("on node a"), &pod("p"));
        assert_eq!(base, series_key(&nominated("on node b"), &pod("p")));
        assert_ne!(base, series_key(&nominated("a"), &pod("q")));
        let warning = Event { type_: EventType::Warning, ..nominated("a") };
        assert_ne!(base, series_key(&warning, &pod("p")));
        let other_reason = Event { reason: "FailedScheduling".into(), ..nominated("a") };
        assert_ne!(base, series_key(&other_reason, &pod("p")));
        let related = Event { secondary: Some(pod("q")), ..nominated("a") };
        assert_ne!(base, series_key(&related, &pod("p")));
    }

    #[test]
    fn the_table_keeps_the_newest_events_up_to_its_bound() {
        let mut published = Published::default();
        let key = |i: usize| series_key(&nominated("a"), &pod(&format!("p{i}")));
        for i in 0..MAX_SERIES + 10 {
            published.remember(key(i), format!("p{i}.1"), at(0));
        }
        assert_eq!(published.len(), MAX_SERIES);
        assert_eq!(published.order.len(), MAX_SERIES);
        for i in 0..10 {
            assert_eq!(published.repeat(&key(i), at(1)), None, "the oldest are forgotten");
        }
        let newest = MAX_SERIES + 9;
        assert_eq!(
            published.repeat(&key(newest), at(1)),
            Some(Repeat { name: format!("p{newest}.1"), count: 2 })
        );
    }
}
