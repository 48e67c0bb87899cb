//! The database profiler (`profile`): per database a level (0 off, 1 slow
//! operations, 2 all), one node-wide `slowms` and `sampleRate`, and the
//! `<db>.system.profile` documents written after each profiled command.
//!
//! MongoDB keeps `system.profile` capped (1 MB by default). Slipstream has
//! no capped collections yet, so it is an ordinary collection kept to the
//! newest `PROFILE_DOCUMENTS_MAX` documents: the oldest are deleted as new
//! ones arrive. Its writes go through the oplog like any other, so a
//! replica set member would replicate them; MongoDB writes them locally
//! only. A member therefore refuses levels 1 and 2 for now.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use parking_lot::Mutex;
use serde_json::json;

use crate::commands::{CommandContext, CommandRequest};
use crate::error::CommandError;

/// The most documents a `system.profile` keeps.
pub const PROFILE_DOCUMENTS_MAX: u64 = 1000;

/// MongoDB's default `slowms`.
pub const SLOW_MS_DEFAULT: i64 = 100;

/// The settings `profile` reads and changes.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileSettings {
    pub level: i32,
    pub slow_ms: i64,
    pub sample_rate: f64,
}

/// Profiling state of the node (one mutex, held only to read or change
/// the settings, never while writing a profile document).
pub struct Profiler {
    state: Mutex<ProfilerState>,
    /// Drives `sampleRate` (a counter through a mixing function, so that
    /// sampling needs no random source).
    samples: AtomicU64,
}

struct ProfilerState {
    /// Databases with a level other than 0.
    levels: HashMap<String, i32>,
    slow_ms: i64,
    sample_rate: f64,
}

impl Default for Profiler {
    fn default() -> Self {
        Profiler {
            state: Mutex::new(ProfilerState {
                levels: HashMap::new(),
                slow_ms: SLOW_MS_DEFAULT,
                sample_rate: 1.0,
            }),
            samples: AtomicU64::new(0),
        }
    }
}

impl Profiler {
    pub fn settings(&self, db: &str) -> ProfileSettings {
        let state = self.state.lock();
        ProfileSettings {
            level: state.levels.get(db).copied().unwrap_or(0),
            slow_ms: state.slow_ms,
            sample_rate: state.sample_rate,
        }
    }

    /// Applies a `profile` command's changes; returns the settings before.
    pub fn change(
        &self,
        db: &str,
        level: Option<i32>,
        slow_ms: Option<i64>,
        sample_rate: Option<f64>,
    ) -> ProfileSettings {
        let before = self.settings(db);
        let mut state = self.state.lock();
        match level {
            Some(0) => {
                state.levels.remove(db);
            }
            Some(level) if level > 0 => {
                state.levels.insert(db.to_owned(), level);
            }
            _ => {}
        }
        if let Some(slow_ms) = slow_ms {
            state.slow_ms = slow_ms;
        }
        if let Some(sample_rate) = sample_rate {
            state.sample_rate = sample_rate;
        }
        before
    }

    /// Whether a command on `db` that ran `elapsed` is profiled.
    fn should_profile(&self, db: &str, elapsed: Duration) -> bool {
        let settings = self.settings(db);
        let slow = elapsed.as_millis() as i64 > settings.slow_ms;
        let chosen = match settings.level {
            2 => true,
            1 => slow,
            _ => false,
        };
        chosen && self.sampled(settings.sample_rate)
    }

    fn sampled(&self, rate: f64) -> bool {
        if rate >= 1.0 {
            return true;
        }
        // splitmix64 of a counter: evenly spread, reproducible.
        let mut x = self
            .samples
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        (x as f64 / u64::MAX as f64) < rate
    }
}

/// After a command: writes its profile document when its database
/// profiles it. The profile commands themselves and reads of
/// `system.profile` are not profiled, so that looking does not add.
pub fn after_command(ctx: &CommandContext, request: &CommandRequest, reply: &Document, elapsed: Duration) {
    if request.name == "profile" || crate::operation::operation_namespace(request).ends_with(".system.profile") {
        return;
    }
    if !ctx.state.profiler.should_profile(&request.db, elapsed) {
        return;
    }
    let document = profile_document(ctx, request, reply, elapsed);
    let ns = format!("{}.system.profile", request.db);
    let written = crate::exec::off_async_workers(|| write_profile(&ctx.state.engine, &ns, document));
    if let Err(error) = written {
        // Profiling is diagnostics: a failed profile write never fails the
        // command it describes.
        ctx.state.log.warning(
            "COMMAND",
            4915703,
            &format!("conn{}", ctx.connection_id),
            "could not write a profile document",
            json!({"ns": ns, "error": error.to_string()}),
        );
    }
}

fn profile_document(ctx: &CommandContext, request: &CommandRequest, reply: &Document, elapsed: Duration) -> Document {
    let mut document = doc! {
        "_id": ObjectId::new(),
        "op": crate::operations::op_kind(&request.name),
        "ns": crate::operation::operation_namespace(request),
        "command": crate::operations::command_preview(&request.body),
    };
    if let Ok(cursor) = reply.get_document("cursor") {
        let batch = cursor
            .get_array("firstBatch")
            .or_else(|_| cursor.get_array("nextBatch"));
        if let Ok(batch) = batch {
            document.insert("nreturned", batch.len() as i64);
        }
        if let Ok(id) = cursor.get_i64("id") {
            if id != 0 {
                document.insert("cursorid", id);
            }
        }
    }
    if let Ok(n) = reply.get_i32("n") {
        document.insert("n", n);
    }
    if reply.get_f64("ok").ok() != Some(1.0) {
        document.insert("ok", 0.0);
        if let Ok(code) = reply.get_i32("code") {
            document.insert("errCode", code);
        }
        if let Ok(message) = reply.get_str("errmsg") {
            document.insert("errMsg", message);
        }
    }
    document.insert("responseLength", reply.to_vec().map_or(0, |bytes| bytes.len() as i64));
    document.insert("protocol", "op_msg");
    document.insert("millis", elapsed.as_millis() as i64);
    document.insert("ts", DateTime::now());
    document.insert("client", ctx.client_address.clone());
    if let Some(app_name) = ctx.app_name.lock().clone() {
        document.insert("appName", app_name);
    }
    document.insert("allUsers", Bson::Array(vec![]));
    document.insert("user", "");
    document
}

/// Inserts one profile document and deletes the oldest beyond
/// `PROFILE_DOCUMENTS_MAX` (ids are ObjectIds made here, so `_id` order is
/// age order).
fn write_profile(engine: &slipstream_storage::Engine, ns: &str, document: Document) -> Result<(), CommandError> {
    let mut writer = engine.writer();
    writer.insert(ns, document)?;
    let reader = writer.reader();
    let count = reader.count(ns)?;
    if count > PROFILE_DOCUMENTS_MAX {
        let excess = (count - PROFILE_DOCUMENTS_MAX) as usize;
        for (_, oldest) in reader.scan(ns, Bound::Unbounded, Bound::Unbounded, false, excess)? {
            if let Some(id) = oldest.get("_id") {
                writer.delete(ns, id)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_per_database_and_slowms_is_global() {
        let profiler = Profiler::default();
        let before = profiler.change("a", Some(2), Some(5), None);
        assert_eq!(
            before,
            ProfileSettings {
                level: 0,
                slow_ms: SLOW_MS_DEFAULT,
                sample_rate: 1.0
            }
        );
        assert_eq!(profiler.settings("a").level, 2);
        assert_eq!(
            profiler.settings("b"),
            ProfileSettings {
                level: 0,
                slow_ms: 5,
                sample_rate: 1.0
            }
        );
        assert!(profiler.should_profile("a", Duration::ZERO));
        assert!(!profiler.should_profile("b", Duration::from_secs(1)));
        profiler.change("b", Some(1), None, None);
        assert!(!profiler.should_profile("b", Duration::from_millis(5)));
        assert!(profiler.should_profile("b", Duration::from_millis(6)));
        profiler.change("a", Some(0), None, None);
        assert!(!profiler.should_profile("a", Duration::from_secs(1)));
    }

    #[test]
    fn sample_rate_takes_about_that_share() {
        let profiler = Profiler::default();
        let taken = (0..10_000).filter(|_| profiler.sampled(0.25)).count();
        assert!((2000..3000).contains(&taken), "{taken}");
        assert_eq!((0..100).filter(|_| profiler.sampled(0.0)).count(), 0);
    }
}
