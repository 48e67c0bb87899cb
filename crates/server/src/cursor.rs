//! Server-side cursors: every open cursor of the node, by id.
//!
//! A cursor is checked out of the manager for the duration of one `getMore`
//! and checked back in afterwards, so that no lock is held while the query
//! runs and a second `getMore` on the same cursor fails instead of
//! interleaving with the first. Time is passed in (`now`) by the caller
//! rather than read here, so that expiry is tested with an injected clock.
//!
//! What a cursor holds (its plan position, or buffered results for
//! in-memory sorts) is the body type `B`, defined by query execution
//! (`exec::CursorBody`); the manager itself only knows ids, namespaces and
//! idle times.
//!
//! States of one slot:
//!
//! ```text
//!   register --> Idle --check_out--> InUse --check_in--> Idle
//!                  |                   |
//!      kill/expire |          kill     | (kill_requested: dropped at check_in)
//!                  v                   v
//!               removed             removed at check_in
//! ```

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Weak;
use std::time::{Duration, Instant};

use bson::Document;
use parking_lot::Mutex;

use crate::error::CommandError;
use crate::exec::limits::{CURSOR_TIMEOUT_MS, OPEN_CURSORS_MAX};

/// One open cursor.
pub struct Cursor<B> {
    /// `db.collection` the cursor reads (a `getMore` must name the same).
    pub ns: String,
    /// Exempt from the idle timeout (`noCursorTimeout`).
    pub no_cursor_timeout: bool,
    /// What is left of the opening command's `maxTimeMS`: as in MongoDB,
    /// the limit covers the time the cursor's commands spend executing
    /// (not the idle time between them), so each `getMore` may use only
    /// what the earlier ones left. `None`: no limit.
    pub time_left: Option<Duration>,
    /// Query execution's state: plan position, buffered results.
    pub body: B,
    /// The session that opened it (its `{id, uid}`), if any: only that
    /// session may continue it, and `killSessions` closes it.
    pub lsid: Option<Document>,
    /// Opened with `readConcern: linearizable`: each `getMore` proves its
    /// batch linearizable too (MongoDB's getmore_cmd), so a deposed
    /// primary cannot serve stale batches.
    pub linearizable: bool,
    /// The UUID of the collection it reads, when it reads one (not in
    /// `local`): a `getMore` after the collection was dropped or replaced,
    /// by a command here or by an oplog entry a secondary applied, is
    /// QueryPlanKilled (175), as MongoDB answers.
    pub collection: Option<bson::Uuid>,
}

/// The map of cursors and when it was last swept for expired ones.
struct Slots<B> {
    map: HashMap<i64, Slot<B>>,
    last_reap: Option<Instant>,
    /// Cursors closed because their namespace went away (newest last,
    /// at most `DROPPED_REMEMBERED`): their next `getMore` is
    /// QueryPlanKilled (175), as MongoDB answers, not CursorNotFound.
    dropped: std::collections::VecDeque<i64>,
}

/// How many cursors closed by a drop or rename are remembered.
const DROPPED_REMEMBERED: usize = 4096;

impl<B> Slots<B> {
    fn remember_dropped(&mut self, id: i64) {
        if self.dropped.len() == DROPPED_REMEMBERED {
            self.dropped.pop_front();
        }
        self.dropped.push_back(id);
    }
}

/// How often cursor operations sweep the whole map for expired cursors;
/// between sweeps, an expired cursor is still refused when it is used.
const REAP_INTERVAL_MS: u64 = 1000;

enum Slot<B> {
    Idle {
        cursor: Cursor<B>,
        last_used: Instant,
    },
    /// Checked out by a running `getMore`. `ns` is kept for `killCursors`
    /// checks; a kill while in use takes effect at check-in.
    InUse {
        ns: String,
        kill_requested: bool,
        lsid: Option<Document>,
    },
}

/// What `killCursors` reports, as MongoDB does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KillReport {
    pub killed: Vec<i64>,
    pub not_found: Vec<i64>,
    pub alive: Vec<i64>,
    pub unknown: Vec<i64>,
}

/// Every open cursor of the node (locks internally).
pub struct CursorManager<B = crate::exec::CursorBody> {
    /// Guarded by its own mutex, held only for map operations (never while
    /// a query runs).
    slots: Mutex<Slots<B>>,
    /// Source of cursor ids: a per-process random key hashed with a counter,
    /// so ids are unpredictable, non-zero and never repeat within a process
    /// in practice.
    id_key: RandomState,
    id_counter: AtomicU64,
    idle_timeout: Duration,
    /// Cursors closed by the idle timeout since start (`serverStatus`'s
    /// `metrics.cursor.timedOut`).
    timed_out: AtomicU64,
    /// Whether the periodic reaping task runs (`start_reaper`).
    reaper_started: AtomicBool,
}

impl<B> Default for CursorManager<B> {
    fn default() -> Self {
        Self::with_idle_timeout(Duration::from_millis(CURSOR_TIMEOUT_MS))
    }
}

/// CursorNotFound (43), worded as MongoDB words it.
pub fn cursor_not_found(id: i64) -> CommandError {
    CommandError::new(43, format!("cursor id {id} not found"))
}

impl<B> CursorManager<B> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_idle_timeout(idle_timeout: Duration) -> Self {
        CursorManager {
            slots: Mutex::new(Slots {
                map: HashMap::new(),
                last_reap: None,
                dropped: std::collections::VecDeque::new(),
            }),
            id_key: RandomState::new(),
            id_counter: AtomicU64::new(0),
            idle_timeout,
            timed_out: AtomicU64::new(0),
            reaper_started: AtomicBool::new(false),
        }
    }

    fn next_id(&self, slots: &HashMap<i64, Slot<B>>) -> i64 {
        loop {
            let mut hasher = self.id_key.build_hasher();
            hasher.write_u64(self.id_counter.fetch_add(1, Ordering::Relaxed));
            // Positive ids: some tools print or parse them as unsigned.
            let id = (hasher.finish() & (i64::MAX as u64)) as i64;
            if id != 0 && !slots.contains_key(&id) {
                return id;
            }
        }
    }

    /// Stores a new cursor and returns its id. Expired cursors are reaped
    /// first; beyond `OPEN_CURSORS_MAX` open cursors the call fails.
    pub fn register(&self, cursor: Cursor<B>, now: Instant) -> Result<i64, CommandError> {
        let mut guard = self.slots.lock();
        self.maybe_reap(&mut guard, now);
        let slots = &mut guard.map;
        if slots.len() >= OPEN_CURSORS_MAX {
            return Err(CommandError::new(
                96,
                format!("too many open cursors (the limit is {OPEN_CURSORS_MAX}); close cursors or let them time out"),
            ));
        }
        let id = self.next_id(slots);
        slots.insert(id, Slot::Idle { cursor, last_used: now });
        Ok(id)
    }

    /// Takes the cursor out for one `getMore` on namespace `ns`.
    pub fn check_out(&self, id: i64, ns: &str, now: Instant) -> Result<Cursor<B>, CommandError> {
        let mut guard = self.slots.lock();
        self.maybe_reap(&mut guard, now);
        let slots = &mut guard.map;
        match slots.get(&id) {
            None => {
                if let Some(at) = guard.dropped.iter().position(|dropped| *dropped == id) {
                    guard.dropped.remove(at);
                    return Err(CommandError::new(
                        175,
                        format!(
                            "PlanExecutor error during getMore :: caused by :: cursor {id}'s collection was dropped \
                             or renamed"
                        ),
                    ));
                }
                return Err(cursor_not_found(id));
            }
            Some(Slot::Idle { cursor, last_used }) if self.expired(cursor, *last_used, now) => {
                slots.remove(&id);
                self.timed_out.fetch_add(1, Ordering::Relaxed);
                return Err(cursor_not_found(id));
            }
            Some(Slot::InUse { .. }) => {
                return Err(CommandError::new(96, format!("cursor id {id} is already in use")));
            }
            Some(Slot::Idle { cursor, .. }) if cursor.ns != ns => {
                return Err(CommandError::new(
                    13,
                    format!(
                        "Requested getMore on namespace '{ns}', but cursor belongs to a different namespace {}",
                        cursor.ns
                    ),
                ));
            }
            Some(Slot::Idle { .. }) => {}
        }
        let ns = ns.to_string();
        let lsid = match slots.get(&id) {
            Some(Slot::Idle { cursor, .. }) => cursor.lsid.clone(),
            _ => None,
        };
        match slots.insert(
            id,
            Slot::InUse {
                ns,
                kill_requested: false,
                lsid,
            },
        ) {
            Some(Slot::Idle { cursor, .. }) => Ok(cursor),
            _ => unreachable!("the slot was checked to be idle under the same lock"),
        }
    }

    /// Returns a cursor after a `getMore` that left it open. Returns false
    /// (and drops it) when it was killed meanwhile.
    pub fn check_in(&self, id: i64, cursor: Cursor<B>, now: Instant) -> bool {
        let slots = &mut self.slots.lock().map;
        match slots.get(&id) {
            Some(Slot::InUse {
                kill_requested: false, ..
            }) => {
                slots.insert(id, Slot::Idle { cursor, last_used: now });
                true
            }
            _ => {
                slots.remove(&id);
                false
            }
        }
    }

    /// Forgets a checked-out cursor that its `getMore` exhausted or failed.
    pub fn release(&self, id: i64) {
        let slots = &mut self.slots.lock().map;
        if matches!(slots.get(&id), Some(Slot::InUse { .. })) {
            slots.remove(&id);
        }
    }

    /// `killCursors` on namespace `ns`. Cursors of another namespace are
    /// reported as not found, as MongoDB does.
    pub fn kill(&self, ns: &str, ids: &[i64], now: Instant) -> KillReport {
        let mut guard = self.slots.lock();
        self.maybe_reap(&mut guard, now);
        let slots = &mut guard.map;
        let mut report = KillReport::default();
        for &id in ids {
            match slots.get_mut(&id) {
                Some(Slot::Idle { cursor, .. }) if cursor.ns == ns => {
                    slots.remove(&id);
                    report.killed.push(id);
                }
                Some(Slot::InUse {
                    ns: cursor_ns,
                    kill_requested,
                    ..
                }) if cursor_ns == ns => {
                    *kill_requested = true;
                    report.killed.push(id);
                }
                _ => report.not_found.push(id),
            }
        }
        report
    }

    /// Closes every cursor reading a namespace that `gone` says no longer
    /// exists (a dropped collection or database, a renamed collection), as
    /// MongoDB kills them: their next `getMore` is QueryPlanKilled. A cursor
    /// checked out by a running `getMore` is closed when it is checked in.
    /// Returns how many were closed.
    pub fn kill_namespaces(&self, gone: impl Fn(&str) -> bool) -> usize {
        let mut guard = self.slots.lock();
        let mut closed = Vec::new();
        guard.map.retain(|id, slot| match slot {
            Slot::Idle { cursor, .. } if gone(&cursor.ns) => {
                closed.push(*id);
                false
            }
            Slot::InUse { ns, kill_requested, .. } if gone(ns) => {
                *kill_requested = true;
                closed.push(*id);
                true
            }
            _ => true,
        });
        for id in &closed {
            guard.remember_dropped(*id);
        }
        closed.len()
    }

    /// Refuses a `getMore` on cursor `id` from another session than the
    /// one that opened it (`lsid`: the getMore's session, if any), with
    /// MongoDB's codes: 50736 (opened outside a session), 50737 (no
    /// session now), 50738 (another session). Unknown or busy cursors pass:
    /// `check_out` answers for them.
    pub fn check_session(&self, id: i64, lsid: Option<&Document>) -> Result<(), CommandError> {
        let slots = &self.slots.lock().map;
        let Some(Slot::Idle { cursor, .. }) = slots.get(&id) else {
            return Ok(());
        };
        match (&cursor.lsid, lsid) {
            (None, Some(now)) => Err(CommandError::new(
                50736,
                format!("Cannot run getMore on cursor {id}, which was not created in a session, in session {now}"),
            )),
            (Some(opened), None) => Err(CommandError::new(
                50737,
                format!("Cannot run getMore on cursor {id}, which was created in session {opened}, without an lsid"),
            )),
            (Some(opened), Some(now)) if opened != now => Err(CommandError::new(
                50738,
                format!("Cannot run getMore on cursor {id}, which was created in session {opened}, in session {now}"),
            )),
            _ => Ok(()),
        }
    }

    /// Closes every cursor opened in one of these sessions (`killSessions`);
    /// one checked out now is closed when it is checked in. Returns how
    /// many were closed.
    pub fn kill_sessions(&self, lsids: &[Document]) -> usize {
        let slots = &mut self.slots.lock().map;
        let mut closed = 0;
        let killed = |lsid: &Option<Document>| lsid.as_ref().is_some_and(|lsid| lsids.contains(lsid));
        slots.retain(|_, slot| match slot {
            Slot::Idle { cursor, .. } if killed(&cursor.lsid) => {
                closed += 1;
                false
            }
            Slot::InUse {
                kill_requested, lsid, ..
            } if killed(lsid) => {
                *kill_requested = true;
                closed += 1;
                true
            }
            _ => true,
        });
        closed
    }

    /// Closes every idle cursor unused for longer than the idle timeout
    /// (except `noCursorTimeout` ones); returns how many were closed.
    pub fn reap(&self, now: Instant) -> usize {
        let mut guard = self.slots.lock();
        guard.last_reap = Some(now);
        let before = guard.map.len();
        guard.map.retain(|_, slot| match slot {
            Slot::Idle { cursor, last_used } => !self.expired(cursor, *last_used, now),
            Slot::InUse { .. } => true,
        });
        let closed = before - guard.map.len();
        self.timed_out.fetch_add(closed as u64, Ordering::Relaxed);
        closed
    }

    fn expired(&self, cursor: &Cursor<B>, last_used: Instant, now: Instant) -> bool {
        !cursor.no_cursor_timeout && now.saturating_duration_since(last_used) > self.idle_timeout
    }

    /// Sweeps for expired cursors at most every `REAP_INTERVAL_MS`, so that
    /// a node with many open cursors does not walk them all on every use.
    fn maybe_reap(&self, slots: &mut Slots<B>, now: Instant) {
        let due = slots
            .last_reap
            .is_none_or(|last| now.saturating_duration_since(last) >= Duration::from_millis(REAP_INTERVAL_MS));
        if !due {
            return;
        }
        slots.last_reap = Some(now);
        let before = slots.map.len();
        slots.map.retain(|_, slot| match slot {
            Slot::Idle { cursor, last_used } => !self.expired(cursor, *last_used, now),
            Slot::InUse { .. } => true,
        });
        self.timed_out
            .fetch_add((before - slots.map.len()) as u64, Ordering::Relaxed);
    }

    /// Starts, once per manager, a task on the current tokio runtime that
    /// reaps expired cursors every `REAP_INTERVAL_MS`, so that abandoned
    /// cursors are closed (and their memory freed) even when no other
    /// cursor operation comes along to sweep them. The task holds its
    /// owner (the node's state, which holds this manager) only weakly and
    /// ends with it. Without a runtime (unit tests) nothing starts, and
    /// reaping stays lazy.
    pub fn start_reaper<T>(&self, owner: Weak<T>, manager: fn(&T) -> &CursorManager<B>)
    where
        T: Send + Sync + 'static,
        B: 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.reaper_started.swap(true, Ordering::AcqRel) {
            return;
        }
        runtime.spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_millis(REAP_INTERVAL_MS));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(owner) = owner.upgrade() else {
                    break;
                };
                manager(&owner).reap(Instant::now());
            }
        });
    }

    /// Open cursors (idle or in use), for `serverStatus`.
    pub fn open_count(&self) -> usize {
        self.slots.lock().map.len()
    }

    /// Cursors closed by the idle timeout since start, for `serverStatus`.
    pub fn timed_out_count(&self) -> u64 {
        self.timed_out.load(Ordering::Relaxed)
    }

    /// Open cursors exempt from the timeout, for `serverStatus`.
    pub fn open_no_timeout_count(&self) -> usize {
        self.slots
            .lock()
            .map
            .values()
            .filter(|slot| matches!(slot, Slot::Idle { cursor, .. } if cursor.no_cursor_timeout))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(ns: &str, no_cursor_timeout: bool) -> Cursor<&'static str> {
        Cursor {
            ns: ns.to_string(),
            no_cursor_timeout,
            time_left: None,
            body: "body",
            lsid: None,
            linearizable: false,
            collection: None,
        }
    }

    fn manager() -> CursorManager<&'static str> {
        CursorManager::with_idle_timeout(Duration::from_secs(600))
    }

    #[test]
    fn only_the_opening_session_continues_a_cursor_and_killing_it_closes_them() {
        let cursors = manager();
        let now = Instant::now();
        let (mine, other) = (bson::doc! {"id": 1}, bson::doc! {"id": 2});
        let owned = cursors
            .register(
                Cursor {
                    lsid: Some(mine.clone()),
                    linearizable: false,
                    collection: None,
                    ..cursor("db.a", false)
                },
                now,
            )
            .unwrap();
        let free = cursors.register(cursor("db.a", false), now).unwrap();
        assert!(cursors.check_session(owned, Some(&mine)).is_ok());
        assert_eq!(cursors.check_session(owned, Some(&other)).unwrap_err().code, 50738);
        assert_eq!(cursors.check_session(owned, None).unwrap_err().code, 50737);
        assert_eq!(cursors.check_session(free, Some(&mine)).unwrap_err().code, 50736);
        assert!(cursors.check_session(free, None).is_ok());
        let busy = cursors
            .register(
                Cursor {
                    lsid: Some(mine.clone()),
                    linearizable: false,
                    collection: None,
                    ..cursor("db.a", false)
                },
                now,
            )
            .unwrap();
        let taken = cursors.check_out(busy, "db.a", now).unwrap();
        assert_eq!(cursors.kill_sessions(&[mine]), 2);
        assert_eq!(cursors.check_out(owned, "db.a", now).err().unwrap().code, 43);
        assert!(!cursors.check_in(busy, taken, now), "killed while in use");
        assert!(cursors.check_out(free, "db.a", now).is_ok());
    }

    #[tokio::test]
    async fn the_reaper_closes_expired_cursors_without_other_cursor_operations() {
        let cursors = std::sync::Arc::new(CursorManager::<&'static str>::with_idle_timeout(Duration::from_millis(
            50,
        )));
        cursors.start_reaper(std::sync::Arc::downgrade(&cursors), |manager| manager);
        cursors.register(cursor("db.a", false), Instant::now()).unwrap();
        assert_eq!(cursors.open_count(), 1);
        // The next sweep, one interval later, finds the cursor expired.
        tokio::time::sleep(Duration::from_millis(REAP_INTERVAL_MS + 300)).await;
        assert_eq!(cursors.open_count(), 0);
        assert_eq!(cursors.timed_out_count(), 1);
    }

    #[test]
    fn killing_a_namespace_closes_its_cursors_idle_or_in_use() {
        let cursors = manager();
        let now = Instant::now();
        let idle = cursors.register(cursor("db.a", false), now).unwrap();
        let busy = cursors.register(cursor("db.a", true), now).unwrap();
        let other = cursors.register(cursor("db.ab", false), now).unwrap();
        let checked_out = cursors.check_out(busy, "db.a", now).unwrap();
        assert_eq!(cursors.kill_namespaces(|ns| ns == "db.a"), 2);
        assert_eq!(cursors.check_out(idle, "db.a", now).err().map(|e| e.code), Some(175));
        assert_eq!(cursors.check_out(idle, "db.a", now).err().map(|e| e.code), Some(43), "said once");
        assert!(!cursors.check_in(busy, checked_out, now), "killed while in use");
        assert_eq!(cursors.check_out(busy, "db.a", now).err().map(|e| e.code), Some(175));
        assert!(cursors.check_out(other, "db.ab", now).is_ok());
    }

    #[test]
    fn ids_are_nonzero_and_distinct() {
        let cursors = manager();
        let now = Instant::now();
        let mut ids = std::collections::HashSet::new();
        for _ in 0..1000 {
            let id = cursors.register(cursor("db.c", false), now).unwrap();
            assert!(id > 0);
            assert!(ids.insert(id));
        }
        assert_eq!(cursors.open_count(), 1000);
    }

    #[test]
    fn idle_cursor_expires_after_the_timeout_only() {
        let cursors = manager();
        let start = Instant::now();
        let id = cursors.register(cursor("db.c", false), start).unwrap();
        assert_eq!(cursors.reap(start + Duration::from_secs(600)), 0);
        assert_eq!(cursors.reap(start + Duration::from_secs(601)), 1);
        let err = cursors
            .check_out(id, "db.c", start + Duration::from_secs(602))
            .err()
            .unwrap();
        assert_eq!(err.code, 43);
    }

    #[test]
    fn expired_cursor_is_refused_between_sweeps() {
        let cursors = manager();
        let start = Instant::now();
        let keep_sweeping = cursors.register(cursor("db.c", false), start).unwrap();
        let id = cursors
            .register(cursor("db.c", false), start + Duration::from_millis(10))
            .unwrap();
        // A sweep right after the timeout passes for the first cursor only.
        assert_eq!(cursors.reap(start + Duration::from_millis(600_005)), 1);
        assert_eq!(cursors.check_out(keep_sweeping, "db.c", start).err().unwrap().code, 43);
        // Within the sweep interval the second cursor expires; using it is
        // refused even though no sweep ran.
        let err = cursors
            .check_out(id, "db.c", start + Duration::from_millis(600_020))
            .err()
            .unwrap();
        assert_eq!(err.code, 43);
        assert_eq!(cursors.open_count(), 0);
        assert_eq!(cursors.timed_out_count(), 2);
    }

    #[test]
    fn use_resets_the_idle_clock() {
        let cursors = manager();
        let start = Instant::now();
        let id = cursors.register(cursor("db.c", false), start).unwrap();
        let later = start + Duration::from_secs(500);
        let taken = cursors.check_out(id, "db.c", later).unwrap();
        assert!(cursors.check_in(id, taken, later));
        assert!(cursors.check_out(id, "db.c", later + Duration::from_secs(500)).is_ok());
    }

    #[test]
    fn no_cursor_timeout_cursors_never_expire() {
        let cursors = manager();
        let start = Instant::now();
        let id = cursors.register(cursor("db.c", true), start).unwrap();
        assert_eq!(cursors.reap(start + Duration::from_secs(100_000)), 0);
        assert!(cursors
            .check_out(id, "db.c", start + Duration::from_secs(100_000))
            .is_ok());
    }

    #[test]
    fn checked_out_cursor_is_busy_and_not_reaped() {
        let cursors = manager();
        let start = Instant::now();
        let id = cursors.register(cursor("db.c", false), start).unwrap();
        let taken = cursors.check_out(id, "db.c", start).unwrap();
        assert_eq!(cursors.check_out(id, "db.c", start).err().unwrap().code, 96);
        assert_eq!(cursors.reap(start + Duration::from_secs(10_000)), 0);
        assert!(cursors.check_in(id, taken, start + Duration::from_secs(10_000)));
    }

    #[test]
    fn getmore_on_another_namespace_is_refused() {
        let cursors = manager();
        let now = Instant::now();
        let id = cursors.register(cursor("db.c", false), now).unwrap();
        assert_eq!(cursors.check_out(id, "db.other", now).err().unwrap().code, 13);
        assert!(cursors.check_out(id, "db.c", now).is_ok());
    }

    #[test]
    fn kill_reports_killed_and_not_found_and_kills_in_use_cursors_at_check_in() {
        let cursors = manager();
        let now = Instant::now();
        let idle = cursors.register(cursor("db.c", false), now).unwrap();
        let busy = cursors.register(cursor("db.c", false), now).unwrap();
        let other_ns = cursors.register(cursor("db.d", false), now).unwrap();
        let taken = cursors.check_out(busy, "db.c", now).unwrap();
        let report = cursors.kill("db.c", &[idle, busy, other_ns, 12345], now);
        assert_eq!(report.killed, vec![idle, busy]);
        assert_eq!(report.not_found, vec![other_ns, 12345]);
        assert!(!cursors.check_in(busy, taken, now));
        assert_eq!(cursors.open_count(), 1);
    }

    #[test]
    fn release_forgets_an_exhausted_cursor() {
        let cursors = manager();
        let now = Instant::now();
        let id = cursors.register(cursor("db.c", false), now).unwrap();
        let _taken = cursors.check_out(id, "db.c", now).unwrap();
        cursors.release(id);
        assert_eq!(cursors.open_count(), 0);
    }
}
