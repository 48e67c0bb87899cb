//! Oplog holds: an initial sync reading from this member (its source)
//! leases the entry its copy began at, so that the capped oplog keeps
//! every entry from there on until the sync has applied them (issue 8,
//! item 5). Without it a source whose oplog rolls over during a long copy
//! drops the begin point and the sync must start over, forever on a busy
//! set.
//!
//! A hold is named by its holder (the syncing member's host) and expires
//! unless renewed: a syncing member that dies does not pin the oplog for
//! ever. Checkpoints let the journal delete segments only below the
//! oldest live hold (`retain_floor`). The journal's retention bound only
//! grows, so a hold below what a checkpoint already released protects
//! nothing: the sync learns it when it finds its begin point gone.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::Engine;
use crate::Timestamp;

/// Holders at most (one per syncing member; a bound on a map a remote
/// command fills).
pub const OPLOG_HOLDS_MAX: usize = 64;
/// Longest lease one request may take.
pub const OPLOG_HOLD_LEASE_MAX: Duration = Duration::from_secs(600);

/// Why a hold was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum OplogHoldError {
    TooManyHolders(usize),
}

impl std::fmt::Display for OplogHoldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OplogHoldError::TooManyHolders(n) => write!(f, "{n} oplog holds already (at most {OPLOG_HOLDS_MAX})"),
        }
    }
}

/// The live holds: holder -> (oldest entry to keep, lease end).
#[derive(Default)]
pub struct OplogHolds {
    holds: BTreeMap<String, (Timestamp, Instant)>,
}

impl OplogHolds {
    fn set(&mut self, holder: &str, from: Timestamp, lease: Duration, now: Instant) -> Result<(), OplogHoldError> {
        self.holds.retain(|_, (_, until)| *until > now);
        if lease.is_zero() {
            self.holds.remove(holder);
            return Ok(());
        }
        if !self.holds.contains_key(holder) && self.holds.len() >= OPLOG_HOLDS_MAX {
            return Err(OplogHoldError::TooManyHolders(self.holds.len()));
        }
        self.holds
            .insert(holder.to_owned(), (from, now + lease.min(OPLOG_HOLD_LEASE_MAX)));
        Ok(())
    }

    /// The oldest entry a live hold needs.
    pub(crate) fn floor(&self, now: Instant) -> Option<Timestamp> {
        self.holds
            .values()
            .filter(|(_, until)| *until > now)
            .map(|(from, _)| *from)
            .min()
    }
}

impl Engine {
    /// Holds the oplog from `from` on for `lease` on behalf of `holder`
    /// (replacing its previous hold); a zero lease releases it.
    pub fn hold_oplog(&self, holder: &str, from: Timestamp, lease: Duration) -> Result<(), OplogHoldError> {
        let result = self.inner.oplog_holds.lock().set(holder, from, lease, Instant::now());
        if result.is_ok() {
            tracing::debug!(target: "storage", holder, from = %from, lease_ms = lease.as_millis() as u64, "oplog hold");
        }
        result
    }

    /// The oldest entry an unexpired hold needs, if any.
    pub fn oplog_hold_floor(&self) -> Option<Timestamp> {
        self.inner.oplog_holds.lock().floor(Instant::now())
    }
}

/// What a checkpoint at `stable` lets the journal release: up to `stable`,
/// but not past a hold.
pub(crate) fn retain_floor(stable: Timestamp, hold: Option<Timestamp>) -> Timestamp {
    hold.map_or(stable, |hold| hold.min(stable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(secs: u32) -> Timestamp {
        Timestamp::new(secs, 0)
    }

    #[test]
    fn the_oldest_live_hold_bounds_what_a_checkpoint_releases() {
        let now = Instant::now();
        let mut holds = OplogHolds::default();
        assert_eq!(holds.floor(now), None);
        holds.set("a:1", ts(20), Duration::from_secs(60), now).unwrap();
        holds.set("b:2", ts(10), Duration::from_secs(1), now).unwrap();
        assert_eq!(holds.floor(now), Some(ts(10)));
        assert_eq!(retain_floor(ts(30), holds.floor(now)), ts(10));
        assert_eq!(
            retain_floor(ts(5), holds.floor(now)),
            ts(5),
            "never past the stable timestamp"
        );
        // b's lease ran out: only a's hold counts.
        assert_eq!(holds.floor(now + Duration::from_secs(2)), Some(ts(20)));
        // A zero lease releases.
        holds.set("a:1", ts(20), Duration::ZERO, now).unwrap();
        assert_eq!(holds.floor(now + Duration::from_secs(2)), None);
    }

    #[test]
    fn holders_are_bounded_and_leases_capped() {
        let now = Instant::now();
        let mut holds = OplogHolds::default();
        for i in 0..OPLOG_HOLDS_MAX {
            holds
                .set(&format!("h:{i}"), ts(1), Duration::from_secs(60), now)
                .unwrap();
        }
        assert_eq!(
            holds.set("one:more", ts(1), Duration::from_secs(60), now),
            Err(OplogHoldError::TooManyHolders(OPLOG_HOLDS_MAX))
        );
        holds.set("h:0", ts(2), Duration::from_secs(1_000_000), now).unwrap();
        assert!(holds.holds["h:0"].1 <= now + OPLOG_HOLD_LEASE_MAX);
    }
}
