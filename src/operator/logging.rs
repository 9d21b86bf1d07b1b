//! The controller's log lines: JSON for log pipelines (the default), text for a human at a terminal
//! (`LOG_FORMAT=text`).
//!
//! A JSON line has upstream Karpenter's shape (zap's production encoder as core configures it in
//! `pkg/operator/logging/logging.go`): `level` in capitals, `time` in RFC 3339 with milliseconds,
//! `logger`, `message`, then every field of the event at the top level, so `jq 'select(.nodeclaim ==
//! "general-abcde")'` works as it does on upstream's logs. Our own lines carry `logger: "controller"`
//! and, when they come from a controller, `controller` names it the way controller-runtime names
//! upstream's (`nodeclaim.lifecycle`, from the module path); lines of libraries name the library.

use std::fmt;
use std::io::IsTerminal;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use super::settings::LogFormat;

/// This crate's module path prefix, and that of its controllers.
const CRATE: &str = "karpenter_azure";
const CONTROLLERS: &str = "karpenter_azure::controllers::";

/// Installs the global subscriber: `level` for this crate, info for libraries, in `format`.
pub fn init(level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(format!("info,{CRATE}={level}"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder.event_format(JsonLines).init(),
        LogFormat::Text => builder.with_ansi(std::io::stdout().is_terminal()).init(),
    }
}

/// The JSON line encoder (see the module doc).
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let now = time::OffsetDateTime::now_utc();
        writeln!(writer, "{}", line(now, event))
    }
}

/// One event as a JSON object, its fields after the fixed keys.
fn line(now: time::OffsetDateTime, event: &Event<'_>) -> Value {
    let meta = event.metadata();
    let mut fields = Fields::default();
    event.record(&mut fields);
    let mut out = Map::new();
    out.insert("level".into(), Value::String(meta.level().as_str().to_string()));
    out.insert("time".into(), Value::String(rfc3339_millis(now)));
    out.insert("logger".into(), Value::String(logger(meta.target()).to_string()));
    out.insert("message".into(), fields.message.take().unwrap_or_default());
    if let Some(controller) = controller(meta.target()) {
        out.insert("controller".into(), Value::String(controller));
    }
    for (key, value) in fields.rest {
        out.insert(key, value);
    }
    Value::Object(out)
}

/// `controller` for this crate's lines, else the library's crate name.
fn logger(target: &str) -> &str {
    match target.split("::").next().unwrap_or(target) {
        CRATE => "controller",
        library => library,
    }
}

/// The controller a line of `karpenter_azure::controllers::<a>::<b>` comes from, as `a.b`.
fn controller(target: &str) -> Option<String> {
    let path = target.strip_prefix(CONTROLLERS)?;
    Some(path.replace("::", "."))
}

/// `2026-12-04T13:05:09.123Z`.
fn rfc3339_millis(t: time::OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// An event's fields: the message apart, the others in the order they were written.
#[derive(Default)]
struct Fields {
    message: Option<Value>,
    rest: Vec<(String, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match field.name() {
            "message" => self.message = Some(value),
            name => {
                // A later field of the same name replaces the earlier, as in a JSON object.
                self.rest.retain(|(k, _)| k != name);
                self.rest.push((name.to_string(), value));
            }
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// The lines a subscriber with [`JsonLines`] writes while `f` runs.
    fn captured(f: impl FnOnce()) -> Vec<Value> {
        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .event_format(JsonLines)
            .with_writer(move || writer.clone())
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = sink.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    #[test]
    fn a_json_line_has_upstreams_keys_and_flat_fields() {
        let lines = captured(|| {
            tracing::info!(target: "karpenter_azure::controllers::nodeclaim::lifecycle",
                nodeclaim = "general-abcde", pods = 3_u64, ready = true, "launched");
            tracing::warn!(target: "kube_runtime::watcher", error = "gone", "watch restarted");
        });
        let ours = &lines[0];
        assert_eq!(ours["level"], "INFO");
        assert_eq!(ours["logger"], "controller");
        assert_eq!(ours["controller"], "nodeclaim.lifecycle");
        assert_eq!(ours["message"], "launched");
        assert_eq!(ours["nodeclaim"], "general-abcde");
        assert_eq!(ours["pods"], 3);
        assert_eq!(ours["ready"], true);
        assert!(ours.get("fields").is_none(), "fields are not nested: {ours}");
        let time = ours["time"].as_str().unwrap();
        assert!(time.len() == 24 && time.ends_with('Z') && time.as_bytes()[19] == b'.', "{time}");
        let library = &lines[1];
        assert_eq!(library["level"], "WARN");
        assert_eq!(library["logger"], "kube_runtime");
        assert!(library.get("controller").is_none());
        assert_eq!(library["error"], "gone");
    }

    #[test]
    fn the_time_has_milliseconds_and_a_z() {
        let t = time::OffsetDateTime::from_unix_timestamp_nanos(1_796_389_509_123_456_000).unwrap();
        assert_eq!(rfc3339_millis(t), "2026-12-04T13:05:09.123Z");
    }
}
