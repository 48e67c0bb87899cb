//! The sessions this node knows (MongoDB's session catalog and logical
//! session cache in one).
//!
//! A command that carries an `lsid` checks its session out for its whole
//! run and checks it in when done (the guard's drop): one command per
//! session at a time, as in MongoDB, where a second command of the same
//! session waits until the first is done (or until its own `maxTimeMS`
//! passes: MaxTimeMSExpired, 50). Each session keeps its last use (for
//! `$listLocalSessions` and expiry) and the highest transaction number a
//! command has started on it, so that an older one is refused
//! (TransactionTooOld, 225) even when the newer one wrote nothing.
//!
//! A session unused for `logicalSessionTimeoutMinutes` is forgotten: it is
//! swept from the map at most once per `REAP_INTERVAL`, by the next use.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bson::Document;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::lsid::map_key;
use crate::error::CommandError;

/// How long an unused session is kept (advertised by `hello`).
pub use crate::commands::handshake::LOGICAL_SESSION_TIMEOUT_MINUTES;

/// The most sessions a node keeps at once (MongoDB's `maxSessions`
/// default); a new session beyond it is refused with TooManyLogicalSessions
/// (261).
pub const SESSIONS_MAX: usize = 1_000_000;

/// How often a use of the catalog sweeps it for expired sessions.
const REAP_INTERVAL: Duration = Duration::from_secs(60);

/// One known session.
struct Entry {
    lsid: Document,
    /// When it was last checked in or refreshed (wall clock, for
    /// `$listLocalSessions`' `lastUse`) and the same on the monotonic
    /// clock (for expiry).
    last_use_wall: SystemTime,
    last_use: Instant,
    /// A command has it checked out.
    checked_out: bool,
    /// Ended (`endSessions`) or killed while checked out: forgotten when
    /// checked in.
    ended: bool,
    /// The highest transaction number a command started on it.
    txn_number: Option<i64>,
    /// Woken when the session is checked in.
    released: Arc<Notify>,
}

impl Entry {
    fn new(lsid: Document, now: Instant) -> Entry {
        Entry {
            lsid,
            last_use_wall: SystemTime::now(),
            last_use: now,
            checked_out: false,
            ended: false,
            txn_number: None,
            released: Arc::new(Notify::new()),
        }
    }
}

struct Sessions {
    map: HashMap<Vec<u8>, Entry>,
    last_reap: Instant,
}

/// What `$listLocalSessions` shows of a session.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionView {
    pub lsid: Document,
    pub last_use: SystemTime,
}

/// The node's sessions; locks internally.
pub struct SessionCatalog {
    sessions: Mutex<Sessions>,
    timeout: Duration,
}

impl Default for SessionCatalog {
    fn default() -> Self {
        SessionCatalog::with_timeout(Duration::from_secs(LOGICAL_SESSION_TIMEOUT_MINUTES as u64 * 60))
    }
}

impl SessionCatalog {
    pub fn with_timeout(timeout: Duration) -> SessionCatalog {
        SessionCatalog {
            sessions: Mutex::new(Sessions {
                map: HashMap::new(),
                last_reap: Instant::now(),
            }),
            timeout,
        }
    }

    /// Checks the session out for one command, waiting while another
    /// command has it (until `deadline`: MaxTimeMSExpired). The future is
    /// cancel-safe: dropped while waiting, it holds nothing.
    pub async fn check_out(
        &self,
        lsid: Document,
        deadline: Option<Instant>,
    ) -> Result<CheckedOutSession<'_>, CommandError> {
        let key = map_key(&lsid);
        loop {
            let released = {
                let mut sessions = self.sessions.lock();
                let now = Instant::now();
                self.reap_if_due(&mut sessions, now);
                if !sessions.map.contains_key(&key) && sessions.map.len() >= SESSIONS_MAX {
                    return Err(too_many_sessions());
                }
                let entry = sessions
                    .map
                    .entry(key.clone())
                    .or_insert_with(|| Entry::new(lsid.clone(), now));
                if !entry.checked_out {
                    entry.checked_out = true;
                    entry.ended = false;
                    return Ok(CheckedOutSession {
                        catalog: self,
                        key,
                        lsid: entry.lsid.clone(),
                    });
                }
                Arc::clone(&entry.released)
            };
            let notified = released.notified();
            tokio::pin!(notified);
            // Registered before the second look, so a check-in between the
            // look and the wait is not missed.
            notified.as_mut().enable();
            if !self.is_checked_out(&key) {
                continue;
            }
            match deadline {
                None => notified.await,
                Some(deadline) => {
                    let timeout = tokio::time::timeout_at(deadline.into(), notified);
                    if timeout.await.is_err() {
                        return Err(CommandError::new(
                            50,
                            "operation exceeded time limit while waiting to check out the session",
                        ));
                    }
                }
            }
        }
    }

    fn is_checked_out(&self, key: &[u8]) -> bool {
        self.sessions.lock().map.get(key).is_some_and(|entry| entry.checked_out)
    }

    /// Records a use of sessions without running a command in them
    /// (`startSession`, `refreshSessions`): known from now on, last used now.
    pub fn refresh(&self, lsids: &[Document]) -> Result<(), CommandError> {
        let mut sessions = self.sessions.lock();
        let now = Instant::now();
        self.reap_if_due(&mut sessions, now);
        for lsid in lsids {
            let key = map_key(lsid);
            if !sessions.map.contains_key(&key) && sessions.map.len() >= SESSIONS_MAX {
                return Err(too_many_sessions());
            }
            let entry = sessions.map.entry(key).or_insert_with(|| Entry::new(lsid.clone(), now));
            entry.last_use = now;
            entry.last_use_wall = SystemTime::now();
        }
        Ok(())
    }

    /// Forgets sessions (`endSessions`, `killSessions`); one checked out
    /// now is forgotten when its command checks it in. Returns how many
    /// were known.
    pub fn end(&self, lsids: &[Document]) -> usize {
        let mut sessions = self.sessions.lock();
        let mut known = 0;
        for lsid in lsids {
            let key = map_key(lsid);
            let Some(entry) = sessions.map.get_mut(&key) else {
                continue;
            };
            known += 1;
            if entry.checked_out {
                entry.ended = true;
            } else {
                sessions.map.remove(&key);
            }
        }
        known
    }

    /// Every known session, for `$listLocalSessions`, in the order of
    /// their keys (not the map's, which varies from run to run).
    pub fn list(&self) -> Vec<SessionView> {
        let mut sessions = self.sessions.lock();
        self.reap_if_due(&mut sessions, Instant::now());
        let mut listed: Vec<(&Vec<u8>, &Entry)> = sessions.map.iter().filter(|(_, entry)| !entry.ended).collect();
        listed.sort_by(|a, b| a.0.cmp(b.0));
        listed
            .into_iter()
            .map(|(_, entry)| SessionView {
                lsid: entry.lsid.clone(),
                last_use: entry.last_use_wall,
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.sessions.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets sessions unused for the timeout (not one checked out), at
    /// most once per `REAP_INTERVAL`.
    fn reap_if_due(&self, sessions: &mut Sessions, now: Instant) {
        if now.duration_since(sessions.last_reap) < REAP_INTERVAL.min(self.timeout) {
            return;
        }
        sessions.last_reap = now;
        let timeout = self.timeout;
        sessions
            .map
            .retain(|_, entry| entry.checked_out || now.duration_since(entry.last_use) < timeout);
    }

    fn check_in(&self, key: &[u8]) {
        let mut sessions = self.sessions.lock();
        let Some(entry) = sessions.map.get_mut(key) else {
            return;
        };
        assert!(entry.checked_out, "a session is checked in only by its holder");
        entry.checked_out = false;
        entry.last_use = Instant::now();
        entry.last_use_wall = SystemTime::now();
        let released = Arc::clone(&entry.released);
        if entry.ended {
            sessions.map.remove(key);
        }
        released.notify_waiters();
    }
}

fn too_many_sessions() -> CommandError {
    CommandError::new(
        261,
        format!("Unable to add session into the cache because the number of active sessions is too high (limit {SESSIONS_MAX})"),
    )
}

/// A session checked out by one command; checked in when dropped.
pub struct CheckedOutSession<'a> {
    catalog: &'a SessionCatalog,
    key: Vec<u8>,
    lsid: Document,
}

impl CheckedOutSession<'_> {
    /// The session's id, `{id, uid}`.
    pub fn lsid(&self) -> &Document {
        &self.lsid
    }

    /// Starts (or continues) transaction number `txn_number` on the
    /// session: TransactionTooOld (225) below the highest one started.
    pub fn begin_transaction(&self, txn_number: i64) -> Result<(), CommandError> {
        let mut sessions = self.catalog.sessions.lock();
        let entry = sessions
            .map
            .get_mut(&self.key)
            .expect("a checked-out session stays in the map");
        if let Some(newest) = entry.txn_number.filter(|newest| *newest > txn_number) {
            return Err(super::retryable::transaction_too_old(txn_number, newest, &self.lsid));
        }
        entry.txn_number = Some(txn_number);
        Ok(())
    }
}

impl Drop for CheckedOutSession<'_> {
    fn drop(&mut self) {
        self.catalog.check_in(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Uuid};

    fn lsid() -> Document {
        doc! {"id": Uuid::new(), "uid": super::super::lsid::anonymous_uid()}
    }

    #[tokio::test]
    async fn a_second_command_waits_for_the_first() {
        let catalog = Arc::new(SessionCatalog::default());
        let id = lsid();
        let first = catalog.check_out(id.clone(), None).await.unwrap();
        let soon = Instant::now() + Duration::from_millis(50);
        assert_eq!(catalog.check_out(id.clone(), Some(soon)).await.err().unwrap().code, 50);
        let waiter = {
            let catalog = Arc::clone(&catalog);
            let id = id.clone();
            tokio::spawn(async move { catalog.check_out(id, None).await.map(|session| session.lsid().clone()) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(first);
        assert_eq!(waiter.await.unwrap().unwrap(), id);
        // Another session is independent.
        let _other = catalog.check_out(lsid(), None).await.unwrap();
        assert_eq!(catalog.len(), 2);
    }

    #[tokio::test]
    async fn transaction_numbers_only_grow() {
        let catalog = SessionCatalog::default();
        let session = catalog.check_out(lsid(), None).await.unwrap();
        session.begin_transaction(5).unwrap();
        session.begin_transaction(5).unwrap();
        assert_eq!(session.begin_transaction(4).unwrap_err().code, 225);
        session.begin_transaction(6).unwrap();
    }

    #[tokio::test]
    async fn ended_sessions_are_forgotten_at_check_in() {
        let catalog = SessionCatalog::default();
        let (a, b) = (lsid(), lsid());
        catalog.refresh(std::slice::from_ref(&a)).unwrap();
        let held = catalog.check_out(b.clone(), None).await.unwrap();
        assert_eq!(catalog.list().len(), 2);
        assert_eq!(catalog.end(&[a.clone(), b.clone(), lsid()]), 2);
        assert!(catalog.list().is_empty());
        assert_eq!(catalog.len(), 1);
        drop(held);
        assert!(catalog.is_empty());
    }

    #[tokio::test]
    async fn unused_sessions_expire() {
        let catalog = SessionCatalog::with_timeout(Duration::from_millis(30));
        catalog.refresh(&[lsid()]).unwrap();
        let held = catalog.check_out(lsid(), None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        let listed = catalog.list();
        assert_eq!(listed.len(), 1, "only the checked-out session survives");
        assert_eq!(&listed[0].lsid, held.lsid());
    }
}
