//! The cluster time (seed 001, A1): the greatest timestamp this node has
//! seen, from its own oplog clock, from applied entries, or gossiped in by
//! `$clusterTime`. Advancing it takes no lock (one atomic maximum); the
//! oplog clock moves past it before every tick, so the node never hands
//! out a timestamp at or below a cluster time it has seen (A1.2). A value
//! more than `MAX_ACCEPTABLE_CLOCK_DRIFT_SECS` ahead of the wall clock is
//! refused (A1.5), so that a bad clock or client cannot push the oplog to
//! the end of time. Rollback never moves it back.

use std::sync::atomic::Ordering;

use slipstream_clock::{ClusterTime, ClusterTimeDrift};

use super::{wall_clock_secs, Engine, Inner};
use crate::timestamp::OplogClock;
use crate::Timestamp;

impl Inner {
    /// The next oplog timestamp: above the clock's last and above the
    /// cluster time. Called under the write lock (the clock's guard).
    pub(crate) fn tick(&self, clock: &mut OplogClock) -> Timestamp {
        clock.advance_to(Timestamp::from_u64(self.cluster_time.load(Ordering::Acquire)));
        let ts = clock.tick(wall_clock_secs());
        self.cluster_time.fetch_max(ts.as_u64(), Ordering::AcqRel);
        ts
    }
}

impl Engine {
    /// Takes in a cluster time received from outside (`$clusterTime` of a
    /// request or reply): later timestamps this node hands out are above
    /// it. Refused when it is too far ahead of the wall clock.
    pub fn advance_cluster_time(&self, ts: Timestamp) -> Result<(), ClusterTimeDrift> {
        ClusterTime::check_drift(ts, wall_clock_secs())?;
        self.inner.cluster_time.fetch_max(ts.as_u64(), Ordering::AcqRel);
        Ok(())
    }

    /// The greatest of the timestamps this node has handed out or applied
    /// and the cluster times it has been told about.
    pub fn cluster_time(&self) -> Timestamp {
        Timestamp::from_u64(self.inner.cluster_time.load(Ordering::Acquire))
    }
}
