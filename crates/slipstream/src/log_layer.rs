//! The `tracing` layer that turns every event, from any crate, into a line
//! of the node's [`Log`], so that storage's recovery, checkpoint and
//! rollback lines land in `--logpath` and `getLog` beside the server's own
//! and nothing is written to stderr.
//!
//! How an event becomes a MongoDB line:
//! - `s` from the level: ERROR `E`, WARN `W`, INFO `I`, DEBUG `D1`, TRACE `D2`.
//! - `c` from the target, through [`COMPONENTS`]; an explicit target the
//!   table does not know falls back on the module path, so that a new
//!   `target: "..."` in a slipstream crate is not taken for a dependency's.
//!   A dependency's events get MongoDB's default component `-` and their
//!   target in `attr.target`.
//! - `id` from a field `id = N` (MongoDB's ids are numbers that name a
//!   message, not an occurrence); without one, [`derived_id`] hashes the
//!   target and the message text, so an id stays the same from run to run
//!   and build to build until someone rewords the message.
//! - `ctx` from the innermost span's name (MongoDB's thread names, such as
//!   `initandlisten`), else the thread's name.
//! - `msg` from the message; every other field goes into `attr`.
//!
//! Which events pass: slipstream's own at info (one `-v` adds debug, two
//! add trace) and dependencies' at warn; `RUST_LOG` replaces that policy
//! with its directives, matched against the same targets.

use std::fmt;

use serde_json::{Map, Number, Value};
use slipstream_server::log::{Log, Severity};
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::{EnvFilter, FilterExt};
use tracing_subscriber::layer::{Context, Filter, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// Target prefixes and the MongoDB component of their events. A prefix
/// matches a whole target or its leading `::`-separated segments; the
/// first match wins, so a module comes before its crate.
pub const COMPONENTS: &[(&str, &str)] = &[
    // Storage names its targets after its subsystems rather than its
    // modules.
    ("journal", "JOURNAL"),
    ("storage", "STORAGE"),
    ("slipstream_storage::journal", "JOURNAL"),
    ("slipstream_storage", "STORAGE"),
    ("slipstream_server::listener", "NETWORK"),
    ("slipstream_server::connection", "NETWORK"),
    ("slipstream_server", "COMMAND"),
    ("slipstream_wire", "NETWORK"),
    ("slipstream_query", "QUERY"),
    ("slipstream_consensus", "REPL"),
    ("slipstream_repl", "REPL"),
    ("slipstream", "CONTROL"),
];

/// MongoDB's default component, for events from dependencies.
pub const DEFAULT_COMPONENT: &str = "-";

/// Dependencies speak only when something is wrong.
pub const DEPENDENCY_LEVEL: LevelFilter = LevelFilter::WARN;

/// Derived ids start here, in a range of their own far above the ids
/// MongoDB assigns by hand, so that a reader can tell an assigned id from a
/// hashed one.
pub const DERIVED_ID_MIN: u32 = 1_000_000_000;

/// The component of events with `target`, or None for a dependency.
pub fn component(target: &str) -> Option<&'static str> {
    COMPONENTS.iter().find(|(prefix, _)| covers(prefix, target)).map(|(_, component)| *component)
}

/// The component of an event from its metadata: the target first, then
/// the module path. None for a dependency.
fn component_of(metadata: &Metadata<'_>) -> Option<&'static str> {
    component(metadata.target()).or_else(|| metadata.module_path().and_then(component))
}

fn covers(prefix: &str, target: &str) -> bool {
    match target.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with("::"),
        None => false,
    }
}

pub fn severity(level: Level) -> Severity {
    match level {
        Level::ERROR => Severity::Error,
        Level::WARN => Severity::Warning,
        Level::INFO => Severity::Info,
        Level::DEBUG => Severity::Debug(1),
        Level::TRACE => Severity::Debug(2),
    }
}

/// The most verbose level of slipstream's own events for `-v` given
/// `verbosity` times, as MongoDB's `-v` raises its default verbosity.
pub fn level_for_verbosity(verbosity: u8) -> LevelFilter {
    match verbosity {
        0 => LevelFilter::INFO,
        1 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// A stable id for an event that names none: FNV-1a (32-bit) over the
/// target and the message, folded into `DERIVED_ID_MIN..=u32::MAX`. A
/// message that interpolates values gets one id per text; such values
/// belong in fields instead.
pub fn derived_id(target: &str, message: &str) -> u32 {
    const FNV_OFFSET: u32 = 0x811c_9dc5;
    const FNV_PRIME: u32 = 0x0100_0193;
    // 0xff never occurs in UTF-8, so "ab"+"c" and "a"+"bc" hash apart.
    let bytes = target.bytes().chain([0xff]).chain(message.bytes());
    let hash = bytes.fold(FNV_OFFSET, |hash, byte| (hash ^ u32::from(byte)).wrapping_mul(FNV_PRIME));
    DERIVED_ID_MIN + hash % (u32::MAX - DERIVED_ID_MIN + 1)
}

/// Installs the layer as the process's subscriber (and, through
/// tracing-subscriber's `tracing-log` feature, as the `log` crate's
/// logger). An invalid `RUST_LOG` is reported as a startup warning and the
/// default policy is used instead.
pub fn install(log: &Log, verbosity: u8) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => match EnvFilter::builder().parse(&directives) {
            Ok(env_filter) => FilterExt::boxed(env_filter),
            Err(err) => {
                log.startup_warning(
                    derived_id("slipstream::log_layer", "RUST_LOG ignored"),
                    "RUST_LOG ignored",
                    serde_json::json!({"RUST_LOG": directives, "error": err.to_string()}),
                );
                NodeFilter::new(verbosity).boxed()
            }
        },
        _ => NodeFilter::new(verbosity).boxed(),
    };
    let installed = tracing_subscriber::registry().with(LogLayer::new(log.clone()).with_filter(filter)).try_init();
    if let Err(err) = installed {
        let attr = serde_json::json!({"error": err.to_string()});
        log.warning(
            "CONTROL",
            derived_id("slipstream::log_layer", "tracing not bridged"),
            "initandlisten",
            "tracing not bridged",
            attr,
        );
    }
}

/// The default policy: slipstream's events up to `ours`, dependencies'
/// up to `DEPENDENCY_LEVEL`. It depends on an event's metadata alone, so
/// each callsite is decided once.
#[derive(Clone, Copy, Debug)]
pub struct NodeFilter {
    ours: LevelFilter,
}

impl NodeFilter {
    pub fn new(verbosity: u8) -> NodeFilter {
        NodeFilter { ours: level_for_verbosity(verbosity) }
    }

    fn passes(&self, metadata: &Metadata<'_>) -> bool {
        let most_verbose = if component_of(metadata).is_some() { self.ours } else { DEPENDENCY_LEVEL };
        *metadata.level() <= most_verbose
    }
}

impl<S> Filter<S> for NodeFilter {
    fn enabled(&self, metadata: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        self.passes(metadata)
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.passes(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.ours.max(DEPENDENCY_LEVEL))
    }
}

/// Writes each event it is given into the node's log.
pub struct LogLayer {
    log: Log,
}

impl LogLayer {
    pub fn new(log: Log) -> LogLayer {
        LogLayer { log }
    }
}

impl<S> Layer<S> for LogLayer
where
    S: Subscriber + for<'lookup> LookupSpan<'lookup>,
{
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        // Events bridged from the `log` crate carry their real target as
        // a field; their metadata is the bridge's, not the caller's.
        let (target, module_path) = match fields.log_target.take() {
            Some(target) => (target, None),
            None => (event.metadata().target().to_owned(), event.metadata().module_path()),
        };
        let component = match component(&target).or_else(|| module_path.and_then(component)) {
            Some(component) => component,
            None => {
                fields.attr.insert("target".to_owned(), Value::String(target.clone()));
                DEFAULT_COMPONENT
            }
        };
        let id = fields.id.unwrap_or_else(|| derived_id(&target, &fields.message));
        let context = match ctx.event_span(event) {
            Some(span) => span.name().to_owned(),
            None => std::thread::current().name().unwrap_or(DEFAULT_COMPONENT).to_owned(),
        };
        let attr = if fields.attr.is_empty() { Value::Null } else { Value::Object(fields.attr) };
        self.log.write(severity(*event.metadata().level()), component, id, &context, &fields.message, attr);
    }
}

/// One event's fields, sorted into MongoDB's `msg`, `id` and `attr`.
#[derive(Default)]
struct Fields {
    message: String,
    id: Option<u32>,
    attr: Map<String, Value>,
    log_target: Option<String>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match (field.name(), value) {
            ("message", Value::String(text)) => self.message = text,
            ("id", Value::Number(number)) if number.as_u64().is_some_and(|id| u32::try_from(id).is_ok()) => {
                self.id = number.as_u64().map(|id| id as u32);
            }
            ("log.target", Value::String(target)) => self.log_target = Some(target),
            // The rest of the `log` crate's bookkeeping (module path, file,
            // line) says where, which the target already does well enough.
            (name, _) if name.starts_with("log.") => {}
            (name, value) => {
                self.attr.insert(name.to_owned(), value);
            }
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::Number(value.into()));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::Number(value.into()));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        let number = i64::try_from(value).map(Number::from).ok();
        self.put(field, number.map_or_else(|| Value::String(value.to_string()), Value::Number));
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        let number = u64::try_from(value).map(Number::from).ok();
        self.put(field, number.map_or_else(|| Value::String(value.to_string()), Value::Number));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        // JSON has no NaN or infinity; those become their names.
        let number = Number::from_f64(value);
        self.put(field, number.map_or_else(|| Value::String(value.to_string()), Value::Number));
    }
}

#[cfg(test)]
mod tests {
    use std::io::{self, Write};
    use std::sync::{Arc, Mutex};

    use tracing::callsite::{DefaultCallsite, Identifier};
    use tracing::field::FieldSet;
    use tracing::metadata::Kind;

    use super::*;

    /// A sink that keeps what was written, to compare the file with the ring.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Runs `emit` under the layer with the default policy at `verbosity`
    /// and returns the lines as the ring kept them, parsed, after checking
    /// that the sink received the same lines.
    fn lines_of(verbosity: u8, emit: impl FnOnce()) -> Vec<Value> {
        let sink = Captured::default();
        let log = Log::with_sink(Box::new(sink.clone()));
        let layer = LogLayer::new(log.clone()).with_filter(NodeFilter::new(verbosity));
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        let (total, lines) = log.recent();
        assert_eq!(total, lines.len() as u64);
        let written = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert_eq!(written.lines().collect::<Vec<_>>(), lines);
        lines.iter().map(|line| serde_json::from_str(line).unwrap()).collect()
    }

    #[test]
    fn an_event_becomes_one_line_in_mongodb_shape() {
        let lines = lines_of(0, || {
            tracing::info!(target: "storage", checkpoint = %"Timestamp(5, 1)", replayed = 42u64, clean = true, "recovered");
        });
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        assert_eq!(line["s"], "I");
        assert_eq!(line["c"], "STORAGE");
        assert_eq!(line["msg"], "recovered");
        assert_eq!(line["attr"], serde_json::json!({"checkpoint": "Timestamp(5, 1)", "replayed": 42, "clean": true}));
        assert_eq!(line["id"], derived_id("storage", "recovered"));
        assert!(line["t"]["$date"].as_str().unwrap().contains('T'));
        // Outside any span, ctx is the thread's name (the test's own).
        assert!(line["ctx"].as_str().unwrap().contains("an_event_becomes_one_line"), "{line}");
    }

    #[test]
    fn an_explicit_id_wins_and_a_span_names_the_context() {
        let lines = lines_of(0, || {
            let span = tracing::info_span!("initandlisten");
            let _entered = span.enter();
            tracing::warn!(target: "journal", id = 22430u32, offset = 17u64, "cutting a torn tail off the journal");
            // An id that is not a u32 stays an attribute.
            tracing::warn!(target: "journal", id = -3i64, "odd id");
        });
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["s"], "W");
        assert_eq!(lines[0]["c"], "JOURNAL");
        assert_eq!(lines[0]["id"], 22430);
        assert_eq!(lines[0]["ctx"], "initandlisten");
        assert_eq!(lines[0]["attr"], serde_json::json!({"offset": 17}));
        assert_eq!(lines[1]["id"], derived_id("journal", "odd id"));
        assert_eq!(lines[1]["attr"]["id"], -3);
    }

    #[test]
    fn levels_map_to_mongodb_severities_and_verbosity_lets_debug_through() {
        let emit = || {
            tracing::error!(target: "slipstream_storage::checkpoint", "e");
            tracing::warn!(target: "slipstream_storage::checkpoint", "w");
            tracing::info!(target: "slipstream_storage::checkpoint", "i");
            tracing::debug!(target: "slipstream_storage::checkpoint", "d");
            tracing::trace!(target: "slipstream_storage::checkpoint", "t");
        };
        let severities =
            |lines: Vec<Value>| lines.iter().map(|line| line["s"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
        assert_eq!(severities(lines_of(0, emit)), ["E", "W", "I"]);
        assert_eq!(severities(lines_of(1, emit)), ["E", "W", "I", "D1"]);
        assert_eq!(severities(lines_of(2, emit)), ["E", "W", "I", "D1", "D2"]);
    }

    /// Declares a callsite as `redb::tree` would have it. tracing's macros
    /// always record the calling module's path, which here would make the
    /// event slipstream's own.
    macro_rules! foreign_callsite {
        ($callsite:ident, $metadata:ident, $level:expr) => {
            static $callsite: DefaultCallsite = DefaultCallsite::new(&$metadata);
            static $metadata: Metadata<'static> = Metadata::new(
                "event from redb",
                "redb::tree",
                $level,
                None,
                None,
                Some("redb::tree"),
                FieldSet::new(&["message", "pages"], Identifier(&$callsite)),
                Kind::EVENT,
            );
        };
    }

    foreign_callsite!(FOREIGN_INFO_CALLSITE, FOREIGN_INFO, Level::INFO);
    foreign_callsite!(FOREIGN_WARN_CALLSITE, FOREIGN_WARN, Level::WARN);

    /// What `tracing::event!` does: register, ask the filter, then dispatch.
    fn emit_foreign(callsite: &'static DefaultCallsite, metadata: &'static Metadata<'static>, message: &str) {
        callsite.register();
        tracing::dispatcher::get_default(|dispatch| {
            if dispatch.enabled(metadata) {
                let fields = metadata.fields();
                let (message_field, pages_field) = (fields.field("message").unwrap(), fields.field("pages").unwrap());
                let message = format_args!("{message}");
                let values: [(&Field, Option<&dyn tracing::Value>); 2] =
                    [(&message_field, Some(&message)), (&pages_field, Some(&3u64))];
                dispatch.event(&Event::new(metadata, &fields.value_set(&values)));
            }
        });
    }

    #[test]
    fn dependencies_speak_only_from_warn_and_say_who_they_are() {
        let lines = lines_of(2, || {
            emit_foreign(&FOREIGN_INFO_CALLSITE, &FOREIGN_INFO, "chatty");
            emit_foreign(&FOREIGN_WARN_CALLSITE, &FOREIGN_WARN, "repairing");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["c"], DEFAULT_COMPONENT);
        assert_eq!(lines[0]["msg"], "repairing");
        assert_eq!(lines[0]["attr"], serde_json::json!({"pages": 3, "target": "redb::tree"}));
    }

    #[test]
    fn a_target_the_table_does_not_know_falls_back_on_the_module_path() {
        // This module's path starts with `slipstream::`, so the event is
        // ours (CONTROL) and passes at info, where a dependency's would not.
        let lines = lines_of(0, || tracing::info!(target: "recovery", replayed = 3u64, "recovered"));
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["c"], "CONTROL");
        assert_eq!(lines[0]["attr"], serde_json::json!({"replayed": 3}));
        assert_eq!(lines[0]["id"], derived_id("recovery", "recovered"));
    }

    #[test]
    fn the_component_table() {
        let cases = [
            ("storage", Some("STORAGE")),
            ("journal", Some("JOURNAL")),
            ("slipstream_storage::recovery", Some("STORAGE")),
            ("slipstream_storage::journal::recovery", Some("JOURNAL")),
            ("slipstream_server::listener", Some("NETWORK")),
            ("slipstream_server::commands::admin", Some("COMMAND")),
            ("slipstream_repl::applier", Some("REPL")),
            ("slipstream_consensus", Some("REPL")),
            ("slipstream::serve", Some("CONTROL")),
            // Whole segments only: these are not ours.
            ("storage_engine", None),
            ("slipstream_storagex", None),
            ("journald", None),
            ("tokio::runtime", None),
        ];
        for (target, expected) in cases {
            assert_eq!(component(target), expected, "{target}");
        }
    }

    #[test]
    fn no_component_entry_is_shadowed_by_an_earlier_one() {
        for (later, (prefix, _)) in COMPONENTS.iter().enumerate() {
            for (earlier, _) in &COMPONENTS[..later] {
                assert!(!covers(earlier, prefix), "{earlier} hides {prefix}");
            }
        }
    }

    #[test]
    fn derived_ids_are_stable_distinct_and_in_their_own_range() {
        assert_eq!(derived_id("storage", "recovered"), derived_id("storage", "recovered"));
        assert_ne!(derived_id("storage", "recovered"), derived_id("journal", "recovered"));
        assert_ne!(derived_id("ab", "c"), derived_id("a", "bc"));
        for (target, message) in [("", ""), ("storage", "checkpoint"), ("journal", "journal truncated")] {
            assert!(derived_id(target, message) >= DERIVED_ID_MIN);
        }
        // Pinned, so that a change to the hash (which would renumber every
        // derived id in the field) is a deliberate one.
        assert_eq!(derived_id("storage", "recovered"), 1_640_201_808);
    }
}
