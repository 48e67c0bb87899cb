//! A primary's majority writes waiting for the commit point, ordered by the
//! timestamp each one waits for, so that a commit point that moves wakes
//! only the writes it reaches.
//!
//! Why not the commit point's watch alone: a watch wakes every receiver on
//! every change. Under 64 connections of `w: "majority"` writes about 60
//! writes wait at any time and the commit point moves at each secondary's
//! durable report (one to two thousand times a second here), so nearly
//! every wake found its write still ahead of the commit point, re-armed
//! its futures and slept again: tens of thousands of wasted task polls a
//! second on the runtime that also serves the writes.
//!
//! The coordinator publishes the commit point on its watch first and then
//! calls `release_through`; a waiter registers first and then reads the
//! watch again. So a waiter either sees the new commit point on that second
//! read or is registered before the release and is woken by it: no wake is
//! lost between the two.

use std::collections::BTreeMap;

use parking_lot::Mutex;
use slipstream_clock::Timestamp;
use tokio::sync::oneshot;

/// The writes waiting, by (timestamp waited for, registration number).
#[derive(Default)]
pub struct CommitWaiters {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    waiting: BTreeMap<(Timestamp, u64), oneshot::Sender<()>>,
}

/// One registered wait; dropping it takes it out of the registry.
pub struct Registration<'a> {
    waiters: &'a CommitWaiters,
    key: (Timestamp, u64),
    /// Fires when a commit point at or past the timestamp is published.
    pub released: oneshot::Receiver<()>,
}

impl CommitWaiters {
    /// Registers a wait for a commit point at or past `ts`.
    pub fn register(&self, ts: Timestamp) -> Registration<'_> {
        let (sender, released) = oneshot::channel();
        let mut inner = self.inner.lock();
        let key = (ts, inner.next_id);
        inner.next_id += 1;
        inner.waiting.insert(key, sender);
        Registration { waiters: self, key, released }
    }

    /// Wakes every wait for a timestamp at or below `ts`.
    pub fn release_through(&self, ts: Timestamp) {
        let due = {
            let mut inner = self.inner.lock();
            // Registration numbers never reach u64::MAX: the split leaves
            // every key of `ts` itself in `due`.
            let later = inner.waiting.split_off(&(ts, u64::MAX));
            std::mem::replace(&mut inner.waiting, later)
        };
        for sender in due.into_values() {
            // A waiter that gave up meanwhile dropped its receiver.
            let _ = sender.send(());
        }
    }

    /// Waits registered and not yet released (for tests and diagnostics).
    pub fn len(&self) -> usize {
        self.inner.lock().waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.waiters.inner.lock().waiting.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(inc: u32) -> Timestamp {
        Timestamp::new(100, inc)
    }

    #[test]
    fn a_release_wakes_only_the_waits_it_reaches() {
        let waiters = CommitWaiters::default();
        let mut first = waiters.register(ts(1));
        let mut second = waiters.register(ts(2));
        let mut same_ts = waiters.register(ts(2));
        let mut later = waiters.register(ts(3));
        waiters.release_through(ts(2));
        assert!(first.released.try_recv().is_ok());
        assert!(second.released.try_recv().is_ok());
        assert!(same_ts.released.try_recv().is_ok());
        assert!(later.released.try_recv().is_err(), "a wait past the commit point was woken");
        assert_eq!(waiters.len(), 1);
        waiters.release_through(ts(5));
        assert!(later.released.try_recv().is_ok());
        assert!(waiters.is_empty());
    }

    #[test]
    fn a_dropped_registration_leaves_the_registry() {
        let waiters = CommitWaiters::default();
        let kept = waiters.register(ts(4));
        drop(waiters.register(ts(3)));
        assert_eq!(waiters.len(), 1);
        drop(kept);
        assert!(waiters.is_empty());
        // Releasing after the waiter left is harmless.
        waiters.release_through(ts(9));
    }
}
