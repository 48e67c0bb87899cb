//! Test-only fail points of replication, set by `configureFailPoint` (with
//! `--enable-test-commands`) through `Topology::configure_fail_point`.
//!
//! The server keeps its own fail points (`failCommand`, ...); these are the
//! ones only replication's companions consult, by MongoDB's names:
//!
//! - `stopReplProducer`: the oplog fetcher stops pulling new batches until
//!   the fail point is off (pymongo's suite uses it on a secondary to make a
//!   `w: <all>` write time out).
//! - `hangAfterMajorityReadPointChosen` (ours; MongoDB has none by that
//!   name): a `majority` read waits, after choosing the commit point it
//!   reads at, until the fail point is off, so that a test can move the
//!   commit point and a checkpoint past it before the read opens its
//!   snapshot.
//! - `hangBeforeWaitingForWriteConcern`: an operation that wrote waits,
//!   before its write concern wait begins, until the fail point is off (so
//!   that a test can make its primary step down and roll the write back
//!   in between).
//! - `initialSyncHangAfterCollection`: the initial sync's cloner waits
//!   while on, after each collection is copied and its progress durable.
//! - `initialSyncHangAfterBatch`: the cloner waits while on, after each
//!   batch is copied and its progress durable. Its `data`:
//!   `{batchDocuments: n}` makes the copy's replies hold at most `n`
//!   documents while on (so that a small collection still stops half way),
//!   `{loadDocuments: m}` stores `m` documents a bulk load (several
//!   replies; `batchDocuments` when not given),
//!   `{ns: "db.coll"}` hangs only after batches of that collection.
//! - `resyncHangBeforeWipe` (ours): a too-stale member that decided to
//!   resync (its marker written, STARTUP2) waits while on before it wipes
//!   its data, so that a test can kill it there (`resync.rs`, step 4).
//!
//! A companion either asks `is_on` at a step, or parks in `wait_while_on`.
//! Modes are MongoDB's `alwaysOn`, `off` and `{times: n}` (each `is_on` that
//! answers true uses one turn; `wait_while_on` waits while any turn is
//! left, without using one). `data` is kept for companions that need it.

use std::collections::BTreeMap;

use bson::{doc, Bson, Document};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::error::ReplError;

/// The oplog fetcher pauses while on.
pub const STOP_REPL_PRODUCER: &str = "stopReplProducer";
/// The initial sync's cloner pauses after a collection while on.
pub const INITIAL_SYNC_HANG_AFTER_COLLECTION: &str = "initialSyncHangAfterCollection";
/// The initial sync's cloner pauses after a batch while on.
pub const INITIAL_SYNC_HANG_AFTER_BATCH: &str = "initialSyncHangAfterBatch";
/// The initial sync's cloner pauses between a collection's documents and
/// its index build while on.
pub const INITIAL_SYNC_HANG_BEFORE_INDEX_BUILD: &str = "initialSyncHangBeforeIndexBuild";

/// A resync waits before wiping the data while on.
pub const RESYNC_HANG_BEFORE_WIPE: &str = "resyncHangBeforeWipe";

/// A `majority` read waits after choosing its read point while on.
pub const HANG_AFTER_MAJORITY_READ_POINT: &str = "hangAfterMajorityReadPointChosen";

/// An operation waits before its write concern wait while on.
pub const HANG_BEFORE_WAITING_FOR_WRITE_CONCERN: &str = "hangBeforeWaitingForWriteConcern";
/// Every fail point this crate knows, in the order `configureFailPoint`'s
/// refusals list them.
pub const NAMES: &[&str] = &[
    STOP_REPL_PRODUCER,
    INITIAL_SYNC_HANG_AFTER_COLLECTION,
    INITIAL_SYNC_HANG_AFTER_BATCH,
    INITIAL_SYNC_HANG_BEFORE_INDEX_BUILD,
    HANG_AFTER_MAJORITY_READ_POINT,
    RESYNC_HANG_BEFORE_WIPE,
    HANG_BEFORE_WAITING_FOR_WRITE_CONCERN,
];

#[derive(Clone, Debug, PartialEq)]
enum Mode {
    AlwaysOn,
    Times(i64),
}

#[derive(Clone, Debug)]
struct Setting {
    mode: Mode,
    data: Document,
}

#[derive(Default)]
struct State {
    settings: Vec<(&'static str, Setting)>,
    /// How many times each fail point fired (or held a waiter) since the
    /// start: `configureFailPoint`'s `count`.
    fired: BTreeMap<&'static str, i64>,
}

/// The configured fail points of one member.
pub struct ReplFailPoints {
    state: Mutex<State>,
    /// Bumped on every change, so that `wait_while_on` looks again.
    generation: watch::Sender<u64>,
}

impl Default for ReplFailPoints {
    fn default() -> Self {
        ReplFailPoints {
            state: Mutex::new(State::default()),
            generation: watch::channel(0).0,
        }
    }
}

impl ReplFailPoints {
    /// `configureFailPoint` for one of `NAMES`, or `None` when the name is
    /// not replication's (the server then looks at its own). The reply is
    /// MongoDB's `{count}`: how many times the fail point fired before.
    pub fn configure(&self, body: &Document) -> Option<Result<Document, ReplError>> {
        let given = body.get_str("configureFailPoint").ok()?;
        let name = NAMES.iter().copied().find(|name| *name == given)?;
        Some(self.set(name, body))
    }

    fn set(&self, name: &'static str, body: &Document) -> Result<Document, ReplError> {
        let mode = match body.get("mode") {
            Some(Bson::String(mode)) if mode == "off" => None,
            Some(Bson::String(mode)) if mode == "alwaysOn" => Some(Mode::AlwaysOn),
            Some(Bson::Document(mode)) => match mode.get("times") {
                Some(times @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
                    let times = match times {
                        Bson::Int32(n) => *n as i64,
                        Bson::Int64(n) => *n,
                        Bson::Double(n) if n.fract() == 0.0 => *n as i64,
                        _ => return Err(ReplError::bad_value("'times' must be an integer")),
                    };
                    if times < 0 {
                        return Err(ReplError::bad_value("'times' option to 'mode' must be positive"));
                    }
                    Some(Mode::Times(times))
                }
                _ => {
                    return Err(ReplError::bad_value(format!(
                        "{name} takes mode 'alwaysOn', 'off' or {{times: n}}"
                    )))
                }
            },
            _ => {
                return Err(ReplError::bad_value(format!(
                    "{name} takes mode 'alwaysOn', 'off' or {{times: n}}"
                )))
            }
        };
        let data = match body.get("data") {
            None => Document::new(),
            Some(Bson::Document(data)) => data.clone(),
            Some(_) => return Err(ReplError::type_mismatch("the 'data' of a fail point must be an object")),
        };
        let mut state = self.state.lock();
        state.settings.retain(|(set, _)| *set != name);
        if let Some(mode) = mode {
            state.settings.push((name, Setting { mode, data }));
        }
        let count = state.fired.get(name).copied().unwrap_or(0);
        drop(state);
        tracing::info!(target: "repl", fail_point = name, "fail point set");
        self.generation.send_modify(|generation| *generation += 1);
        Ok(doc! {"count": count})
    }

    /// Whether `name` fires now (using one of its `times`), with its data.
    pub fn fire(&self, name: &str) -> Option<Document> {
        let mut state = self.state.lock();
        let index = state.settings.iter().position(|(set, _)| *set == name)?;
        let (name, setting) = &mut state.settings[index];
        let name = *name;
        let data = setting.data.clone();
        match &mut setting.mode {
            Mode::AlwaysOn => {}
            Mode::Times(left) if *left <= 1 => {
                state.settings.remove(index);
            }
            Mode::Times(left) => *left -= 1,
        }
        *state.fired.entry(name).or_insert(0) += 1;
        Some(data)
    }

    /// The `data` of `name` while it is on, without using a turn.
    pub fn data_while_on(&self, name: &str) -> Option<Document> {
        self.state
            .lock()
            .settings
            .iter()
            .find(|(set, setting)| *set == name && setting.mode != Mode::Times(0))
            .map(|(_, setting)| setting.data.clone())
    }

    /// Whether `name` is on, without using a turn.
    pub fn is_on(&self, name: &str) -> bool {
        self.state
            .lock()
            .settings
            .iter()
            .any(|(set, setting)| *set == name && setting.mode != Mode::Times(0))
    }

    /// Resolves once `name` is off (at once if it is).
    pub async fn wait_while_on(&self, name: &str) {
        // Subscribed before the first look, so that a change between the
        // look and the wait still wakes the wait.
        let mut changes = self.generation.subscribe();
        if !self.is_on(name) {
            return;
        }
        if let Some(known) = NAMES.iter().copied().find(|known| *known == name) {
            *self.state.lock().fired.entry(known).or_insert(0) += 1;
        }
        while self.is_on(name) {
            // The sender lives as long as `self`.
            if changes.changed().await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn set(points: &ReplFailPoints, mode: Bson) -> Result<Document, ReplError> {
        points
            .configure(&doc! {"configureFailPoint": STOP_REPL_PRODUCER, "mode": mode})
            .expect("a replication fail point")
    }

    #[test]
    fn only_replication_names_are_taken() {
        let points = ReplFailPoints::default();
        assert!(points
            .configure(&doc! {"configureFailPoint": "failCommand", "mode": "alwaysOn"})
            .is_none());
        assert!(set(&points, Bson::String("sometimes".into())).is_err());
        assert!(set(&points, Bson::Document(doc! {"times": -1})).is_err());
    }

    #[test]
    fn times_are_used_by_fire_and_off_clears() {
        let points = ReplFailPoints::default();
        set(&points, Bson::Document(doc! {"times": 2})).unwrap();
        assert!(points.fire(STOP_REPL_PRODUCER).is_some());
        assert!(points.is_on(STOP_REPL_PRODUCER));
        assert!(points.fire(STOP_REPL_PRODUCER).is_some());
        assert!(points.fire(STOP_REPL_PRODUCER).is_none());
        assert!(!points.is_on(STOP_REPL_PRODUCER));
        set(&points, Bson::String("alwaysOn".into())).unwrap();
        assert!(points.fire(STOP_REPL_PRODUCER).is_some() && points.fire(STOP_REPL_PRODUCER).is_some());
        let off = set(&points, Bson::String("off".into())).unwrap();
        assert_eq!(off.get_i64("count").unwrap(), 4, "two times, then two always-on fires");
        assert!(!points.is_on(STOP_REPL_PRODUCER));
    }

    #[test]
    fn a_waiter_wakes_when_the_fail_point_goes_off() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let points = Arc::new(ReplFailPoints::default());
            set(&points, Bson::String("alwaysOn".into())).unwrap();
            let waiter = {
                let points = points.clone();
                tokio::spawn(async move { points.wait_while_on(STOP_REPL_PRODUCER).await })
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!waiter.is_finished(), "still on");
            set(&points, Bson::String("off".into())).unwrap();
            tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .unwrap()
                .unwrap();
        });
    }
}
