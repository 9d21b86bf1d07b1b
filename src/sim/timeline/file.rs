//! The timeline file: settings, the objects the cluster starts with, and events at virtual times.
//!
//! ```yaml
//! settings:
//!   start: 2026-01-05T00:00:00Z   # the virtual clock's start (UTC); budget schedules use it
//!   duration: 24h                 # how long to run
//!   bootDelay: 90s                # NodeClaim launched -> node Ready and initialized
//!   sampleEvery: 5m               # one output row per this much virtual time (and per decision)
//! objects:                        # Kubernetes objects, as `simulate` reads them
//!   - {apiVersion: karpenter.sh/v1, kind: NodePool, ...}
//! events:
//!   - {at: 2h, scale: {deployment: default/web, replicas: 40}}
//!   - {at: 3h, apply: {apiVersion: karpenter.azure.com/v1beta1, kind: AKSNodeClass, ...}}
//!   - {at: 4h, delete: {kind: Pod, namespace: default, name: batch-1}}
//!   - {at: 5h, evictSpot: {count: 1}}        # or {node: <name>}
//! ```
//!
//! Every mistake names the event (by index and time) and the field, and nothing runs until the whole
//! file is read.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde_json::Value;

use crate::apis::duration;
use crate::apis::manifest::{self, ManifestError, RawObject};

/// A timeline file that cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum TimelineFileError {
    #[error("{file}: not valid YAML or JSON: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: {field}: {message}")]
    Field { file: String, field: String, message: String },
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

impl TimelineFileError {
    pub fn category(&self) -> &'static str {
        match self {
            Self::Syntax { .. } => "Syntax",
            Self::Field { .. } => "Field",
            Self::Manifest(_) => "Manifest",
        }
    }
}

/// How the virtual cluster runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub start: Timestamp,
    pub duration: Duration,
    pub boot_delay: Duration,
    pub sample_every: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            start: "2026-01-05T00:00:00Z".parse().expect("a valid timestamp"),
            duration: Duration::from_secs(24 * 3600),
            boot_delay: Duration::from_secs(90),
            sample_every: Duration::from_secs(300),
        }
    }
}

/// What happens at an event.
#[derive(Clone, Debug)]
pub enum Action {
    /// Set a Deployment's replicas (`namespace/name`).
    Scale { deployment: String, replicas: u32 },
    /// Create or replace an object (matched by kind, namespace and name).
    Apply(RawObject),
    /// Delete an object (a Pod, Deployment, NodePool, AKSNodeClass, PodDisruptionBudget).
    Delete { kind: String, namespace: Option<String>, name: String },
    /// Azure takes spot capacity back: the named node, or the `count` oldest spot nodes.
    EvictSpot { node: Option<String>, count: u32 },
}

#[derive(Clone, Debug)]
pub struct Event {
    /// Offset from the start.
    pub at: Duration,
    pub action: Action,
    /// One line for the decision table (`scale default/web to 40`).
    pub describe: String,
}

/// A whole timeline.
#[derive(Clone, Debug)]
pub struct Timeline {
    pub settings: Settings,
    pub objects: Vec<RawObject>,
    /// Sorted by time; events at the same time keep file order.
    pub events: Vec<Event>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    #[serde(default)]
    settings: Option<SettingsShape>,
    #[serde(default)]
    objects: Vec<Value>,
    #[serde(default)]
    events: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SettingsShape {
    start: Option<String>,
    duration: Option<String>,
    boot_delay: Option<String>,
    sample_every: Option<String>,
}

/// Parses a timeline file's text; `file` names it in messages.
pub fn parse(file: &str, text: &str) -> Result<Timeline, TimelineFileError> {
    let shape: FileShape = serde_yaml::from_str(text)
        .map_err(|e| TimelineFileError::Syntax { file: file.into(), message: e.to_string() })?;
    let field = |field: &str, message: String| TimelineFileError::Field {
        file: file.into(),
        field: field.into(),
        message,
    };
    let mut settings = Settings::default();
    if let Some(s) = shape.settings {
        let dur = |name: &str,
                   value: Option<String>,
                   default: Duration|
         -> Result<Duration, TimelineFileError> {
            match value {
                None => Ok(default),
                Some(v) => duration::parse(&v).map_err(|e| field(&format!("settings.{name}"), e.to_string())),
            }
        };
        settings.duration = dur("duration", s.duration, settings.duration)?;
        settings.boot_delay = dur("bootDelay", s.boot_delay, settings.boot_delay)?;
        settings.sample_every = dur("sampleEvery", s.sample_every, settings.sample_every)?;
        if let Some(start) = s.start {
            settings.start = start.parse().map_err(|e| {
                field(
                    "settings.start",
                    format!("{start:?} is not an RFC 3339 time such as 2026-01-05T00:00:00Z: {e}"),
                )
            })?;
        }
        if settings.sample_every.is_zero() {
            return Err(field("settings.sampleEvery", "must be more than 0s".into()));
        }
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": shape.objects});
    let objects = manifest::parse_objects(&format!("{file}: objects"), &list.to_string())?;
    let mut events = vec![];
    for (i, raw) in shape.events.into_iter().enumerate() {
        events.push(event(file, i, raw)?);
    }
    // Stable: events at the same time keep their order in the file.
    events.sort_by_key(|e| e.at);
    Ok(Timeline { settings, objects, events })
}

fn event(file: &str, index: usize, raw: Value) -> Result<Event, TimelineFileError> {
    let name = format!("events[{index}]");
    let field = |f: &str, message: String| TimelineFileError::Field {
        file: file.into(),
        field: format!("{name}{f}"),
        message,
    };
    let Value::Object(map) = raw else {
        return Err(field("", "must be a mapping with `at` and one action".into()));
    };
    let at = map
        .get("at")
        .and_then(Value::as_str)
        .ok_or_else(|| field(".at", "is required: a duration from the start such as 90s or 2h30m".into()))?;
    let at = duration::parse(at).map_err(|e| field(".at", e.to_string()))?;
    let actions: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| k.as_str() != "at").collect();
    let [(key, value)] = actions.as_slice() else {
        return Err(field(
            "",
            format!(
                "needs exactly one action of scale, apply, delete, evictSpot; found {}",
                actions.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(", ")
            ),
        ));
    };
    let text = |v: &Value, f: &str| -> Result<String, TimelineFileError> {
        v.get(f)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| field(&format!(".{key}.{f}"), "is required (a string)".into()))
    };
    let (action, describe) = match key.as_str() {
        "scale" => {
            let deployment = text(value, "deployment")?;
            if deployment.split('/').count() != 2 {
                return Err(field(".scale.deployment", format!("{deployment:?} must be namespace/name")));
            }
            let replicas = value
                .get("replicas")
                .and_then(Value::as_u64)
                .and_then(|r| u32::try_from(r).ok())
                .ok_or_else(|| field(".scale.replicas", "is required (a whole number, 0 or more)".into()))?;
            let describe = format!("scale {deployment} to {replicas}");
            (Action::Scale { deployment, replicas }, describe)
        }
        "apply" => {
            let objects = manifest::parse_objects(&format!("{file}: {name}.apply"), &value.to_string())?;
            let [object] = <[RawObject; 1]>::try_from(objects)
                .map_err(|_| field(".apply", "must be exactly one Kubernetes object".into()))?;
            let describe = format!("apply {}", object.display);
            (Action::Apply(object), describe)
        }
        "delete" => {
            let kind = text(value, "kind")?;
            let name_ = text(value, "name")?;
            let namespace = value.get("namespace").and_then(Value::as_str).map(str::to_string);
            let describe = match &namespace {
                Some(ns) => format!("delete {kind}/{ns}/{name_}"),
                None => format!("delete {kind}/{name_}"),
            };
            (Action::Delete { kind, namespace, name: name_ }, describe)
        }
        "evictSpot" => {
            let node = value.get("node").and_then(Value::as_str).map(str::to_string);
            let count = match value.get("count") {
                None => 1,
                Some(c) => c
                    .as_u64()
                    .and_then(|c| u32::try_from(c).ok())
                    .filter(|c| *c > 0)
                    .ok_or_else(|| field(".evictSpot.count", "must be a whole number above 0".into()))?,
            };
            let describe = match &node {
                Some(n) => format!("spot eviction of {n}"),
                None => format!("spot eviction of {count} node(s)"),
            };
            (Action::EvictSpot { node, count }, describe)
        }
        other => {
            return Err(field(
                &format!(".{other}"),
                "is not an action; use one of scale, apply, delete, evictSpot".into(),
            ))
        }
    };
    Ok(Event { at, action, describe })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_settings_objects_and_sorted_events() {
        let t = parse(
            "t.yaml",
            "settings: {duration: 2h, bootDelay: 1m}\nobjects:\n- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\nevents:\n- {at: 1h, scale: {deployment: default/web, replicas: 3}}\n- {at: 10m, evictSpot: {}}\n",
        )
        .unwrap();
        assert_eq!(t.settings.duration, Duration::from_secs(7200));
        assert_eq!(t.settings.boot_delay, Duration::from_secs(60));
        assert_eq!(t.objects.len(), 1);
        let times: Vec<u64> = t.events.iter().map(|e| e.at.as_secs()).collect();
        assert_eq!(times, [600, 3600]);
        assert_eq!(t.events[1].describe, "scale default/web to 3");
    }

    #[test]
    fn mistakes_name_the_event_and_field() {
        let err = |text: &str| parse("t.yaml", text).unwrap_err().to_string();
        assert!(
            err("events:\n- {scale: {deployment: a/b, replicas: 1}}").contains("events[0].at: is required")
        );
        assert!(err("events:\n- {at: 1h, scale: {deployment: web, replicas: 1}}")
            .contains("events[0].scale.deployment: \"web\" must be namespace/name"));
        assert!(err("events:\n- {at: 1h, reboot: {}}").contains("events[0].reboot: is not an action"));
        assert!(err("events:\n- {at: 1h, evictSpot: {}, delete: {}}").contains("exactly one action"));
        assert!(err("settings: {duration: soon}").contains("settings.duration"));
        assert!(err("settings: {start: yesterday}").contains("settings.start"));
        assert!(err("setings: {}").contains("unknown field"));
    }
}
