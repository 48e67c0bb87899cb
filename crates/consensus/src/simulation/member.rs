//! One simulated member process: its `Node` (when running and initiated),
//! its oplog (a list of OpTimes; payloads do not matter to consensus), what
//! survives a crash (durable prefix, term and vote, configuration), its
//! clock, its oplog clock, and the state of its emulated oplog fetcher.

use crate::config::{MemberId, ReplSetConfig};
use crate::node::{Node, Persisted};
use slipstream_clock::{OpTime, Timestamp};

/// A request of the member's I/O layer that expects an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `RequestVote` for this term and kind.
    Vote { term: i64, dry_run: bool },
    /// A heartbeat sent under this `heartbeat_generation`.
    Heartbeat { generation: u64 },
}

/// A request awaiting its answer.
#[derive(Clone, Copy, Debug)]
pub struct Outstanding {
    /// The index of the member asked.
    pub to: usize,
    /// What was asked.
    pub request: Request,
    /// When (the member's clock).
    pub sent: u64,
}

/// One simulated member process.
#[derive(Debug)]
pub struct SimMember {
    /// `_id`.
    pub id: MemberId,
    /// `host`.
    pub host: String,
    /// True while the process runs (it may still lack a configuration).
    pub running: bool,
    /// The state machine: `Some` while running with a configuration.
    pub node: Option<Node>,
    /// The configuration made durable (`Action::PersistConfig`, or the one
    /// `replSetInitiate` gave); `None` for a member never initiated, which
    /// fetches one from the first member that heartbeats it.
    pub persisted_config: Option<ReplSetConfig>,
    /// The oplog.
    pub log: Vec<OpTime>,
    /// How much of `log` survives a crash.
    pub durable_len: usize,
    /// Term and vote as persisted.
    pub persisted: Persisted,
    /// This member's clock (ms).
    pub clock: u64,
    /// Offset of the clock against the global one (randomized runs).
    pub clock_offset: u64,
    /// The oplog clock (as storage's `OplogClock`): the last timestamp
    /// handed out or applied. Volatile: a restart resumes from the log.
    pub oplog_clock: Timestamp,
    /// The highest cluster time this member has seen (gossiped with every
    /// message, as `$clusterTime`). Volatile.
    pub cluster_time: Timestamp,
    /// The fetcher's source index (mirrors `Action::SetSyncSource`).
    pub fetch_source: Option<usize>,
    /// A pull in flight: (source, after, sent at).
    pub pull_in_flight: Option<(usize, OpTime, u64)>,
    /// Earliest time of the next pull.
    pub next_pull_at: u64,
    /// Vote and heartbeat requests awaiting an answer; one unanswered for
    /// its timeout fails, as the I/O layer's.
    pub outstanding: Vec<Outstanding>,
    /// Raised when the member becomes primary, and at each start: answers
    /// to heartbeats sent before are dropped, as the I/O layer drops them
    /// (`Event::HeartbeatFailed`). Survives crashes, so that answers meant
    /// for an earlier incarnation are dropped too.
    pub heartbeat_generation: u64,
    /// The last pull's entries, kept until the node says append or not.
    pub pending_batch: Vec<OpTime>,
    /// Commit point seen at the last check (this incarnation).
    pub last_commit_point: OpTime,
}

impl SimMember {
    /// A member process that is not running yet.
    pub fn new(id: MemberId, host: String, persisted_config: Option<ReplSetConfig>, clock_offset: u64) -> SimMember {
        SimMember {
            id,
            host,
            running: false,
            node: None,
            persisted_config,
            log: Vec::new(),
            durable_len: 0,
            persisted: Persisted::default(),
            clock: clock_offset,
            clock_offset,
            oplog_clock: Timestamp::ZERO,
            cluster_time: Timestamp::ZERO,
            fetch_source: None,
            pull_in_flight: None,
            next_pull_at: 0,
            outstanding: Vec::new(),
            heartbeat_generation: 0,
            pending_batch: Vec::new(),
            last_commit_point: OpTime::NULL,
        }
    }

    /// The durable prefix of the oplog.
    pub fn durable_log(&self) -> &[OpTime] {
        &self.log[..self.durable_len]
    }

    /// The oplog's last entry.
    pub fn last(&self) -> OpTime {
        self.log.last().copied().unwrap_or(OpTime::NULL)
    }

    /// The next timestamp of the oplog clock, as storage hands them out:
    /// the wall-clock second with increment 1 once the second is past
    /// everything seen, otherwise the next increment after the greater of
    /// the last timestamp and the cluster time (seed 001 A1.2: never at or
    /// below a cluster time this member has seen).
    pub fn next_timestamp(&mut self) -> Timestamp {
        let wall_secs = u32::try_from(self.clock / 1000).expect("simulated time fits in u32 seconds");
        let base = self.oplog_clock.max(self.cluster_time);
        let ts = if wall_secs > base.secs {
            Timestamp::new(wall_secs, 1)
        } else {
            Timestamp::new(base.secs, base.inc + 1)
        };
        assert!(ts > base);
        self.oplog_clock = ts;
        ts
    }

    /// The oplog clock ticks past applied entries (storage's `apply_batch`).
    pub fn observe_applied(&mut self, ts: Timestamp) {
        self.oplog_clock = self.oplog_clock.max(ts);
    }

    /// Resets what a crash loses: the non-durable oplog tail, the oplog
    /// clock (recovered from the log's end) and the gossiped cluster time.
    pub fn lose_volatile_state(&mut self) {
        self.log.truncate(self.durable_len);
        self.oplog_clock = self.last().ts;
        self.cluster_time = Timestamp::ZERO;
        self.node = None;
        self.running = false;
        self.fetch_source = None;
        self.pull_in_flight = None;
        self.outstanding.clear();
        self.heartbeat_generation += 1;
        self.pending_batch.clear();
    }
}
