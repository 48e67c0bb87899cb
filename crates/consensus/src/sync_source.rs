//! Sync source choice (seed 000 section 3.4): pull only from a member whose
//! oplog is newer than ours, nearest by round-trip time, obeying
//! `chainingAllowed`; re-chosen when the source dies, lags too far behind
//! the primary (by the wall-clock dates of their last applied entries, as
//! MongoDB's `maxSyncSourceLagSecs`), stops being ahead, or a clearly
//! nearer one appears.
//! Because a source must be strictly ahead, sources cannot form a cycle
//! (a source an operator names with `replSetSyncFrom` may be level with us;
//! one that syncs from us is refused, and the idle rule repairs longer
//! cycles of equals).

use crate::config::MemberId;
use crate::io::Action;
use crate::node::{Node, Role, DENY_LIST_MAX};
use crate::state::MemberState;

impl Node {
    /// True if this member should be pulling at all.
    fn wants_sync_source(&self) -> bool {
        let pulling_role = match self.role {
            Role::Secondary | Role::Candidate => true,
            // A new primary keeps pulling until catch-up ends (section 4.3).
            Role::Primary => self.catch_up.is_some(),
            Role::Arbiter | Role::Removed => false,
        };
        pulling_role
            && self.config.members[self.my_index()].is_data_bearing()
            && !self.rolling_back
            && self.io_state != Some(MemberState::Startup2)
    }

    pub(crate) fn choose_sync_source_if_needed(&mut self) {
        self.deny_list.retain(|&(_, until)| until > self.now);
        if !self.wants_sync_source() {
            self.clear_sync_source();
            return;
        }
        if let Some(source) = self.sync_source {
            if self.should_change_sync_source(source) {
                self.clear_sync_source();
            }
        }
        if self.sync_source.is_some() || self.append_in_flight {
            return;
        }
        if let Some(source) = self.pick_sync_source() {
            self.sync_source = Some(source);
            self.sync_source_chosen_at = self.now;
            self.sync_source_idle_since = None;
            self.positions_dirty = true;
            self.out.push(Action::SetSyncSource(Some(source)));
        }
    }

    pub(crate) fn clear_sync_source(&mut self) {
        self.sync_source_idle_since = None;
        if self.sync_source.take().is_some() {
            self.sync_source_forced = false;
            self.out.push(Action::SetSyncSource(None));
        }
    }

    /// Keeps `member` out of the choice for an election timeout.
    pub(crate) fn deny(&mut self, member: MemberId) {
        let until = self.now.plus(self.config.settings.election_timeout_ms);
        self.deny_list.retain(|&(m, _)| m != member);
        if self.deny_list.len() < DENY_LIST_MAX {
            self.deny_list.push((member, until));
        }
    }

    fn should_change_sync_source(&self, source: MemberId) -> bool {
        let Some(index) = self.config.index_of(source) else {
            return true;
        };
        let member = &self.members[index];
        if !self.is_up(index) || !member.state.is_some_and(|s| s.is_readable()) {
            return true;
        }
        // A source that syncs from us closes a cycle.
        if member.sync_source == Some(self.me) {
            return true;
        }
        // An operator's `replSetSyncFrom` that could not be followed when
        // it came (the heartbeats then showed the member a moment behind
        // us) is followed once it can: it waited for the current source to
        // fail, which on a healthy set is never.
        if self
            .requested_sync_source
            .is_some_and(|requested| requested != source && self.forced_source_is_safe(requested))
        {
            return true;
        }
        // A source that has had nothing new for a while, while another
        // member is ahead of us: it may be stuck behind us or in a cycle of
        // equals (heartbeats are stale, so the choice can err; this repairs it).
        let idle_limit_ms = self.config.settings.election_timeout_ms / 2;
        if self
            .sync_source_idle_since
            .is_some_and(|t| self.now.since(t) >= idle_limit_ms)
            && self.eligible_sources().any(|i| i != index)
        {
            return true;
        }
        if self.sync_source_forced {
            return false;
        }
        let settings = &self.config.settings;
        if let Some(p) = self.known_primary_index() {
            if !settings.chaining_allowed && p != index {
                return true;
            }
            if p != index && self.lags_primary(index, p) {
                return true;
            }
        }
        // A clearly nearer source, looked for only once the current one has
        // served for an election timeout, so that sources do not flap.
        if self.now.since(self.sync_source_chosen_at) < settings.election_timeout_ms {
            return false;
        }
        let current_rtt = member.rtt_ms.unwrap_or(u64::MAX / 4);
        self.eligible_sources().any(|i| {
            i != index
                && self.members[i].rtt_ms.unwrap_or(u64::MAX / 4) + settings.change_sync_source_threshold_ms
                    < current_rtt
        })
    }

    /// Indices of members we may pull from now, ignoring round-trip time.
    fn eligible_sources(&self) -> impl Iterator<Item = usize> + '_ {
        let primary = self.known_primary_index();
        let i_am_primary = self.role == Role::Primary;
        let settings = &self.config.settings;
        (0..self.config.members.len()).filter(move |&i| {
            let member = &self.members[i];
            let config = &self.config.members[i];
            if Some(i) == self.my_index || !config.is_data_bearing() || !self.is_up(i) {
                return false;
            }
            if !member.state.is_some_and(|s| s.is_readable()) || member.sync_source == Some(self.me) {
                return false;
            }
            if member.seen_applied <= self.last_applied || self.deny_list.iter().any(|&(m, _)| m == config.id) {
                return false;
            }
            if !settings.chaining_allowed && !i_am_primary && primary != Some(i) {
                return false;
            }
            match primary {
                Some(p) if p != i => !self.lags_primary(i, p),
                _ => true,
            }
        })
    }

    /// True if member `index`'s last applied entry is older, by wall-clock
    /// date, than the primary's by more than `maxSyncSourceLagSecs`.
    fn lags_primary(&self, index: usize, primary: usize) -> bool {
        let lag_ms = self.config.settings.max_sync_source_lag_ms as i64;
        self.members[index].seen_applied_wall_ms + lag_ms < self.members[primary].seen_applied_wall_ms
    }

    fn pick_sync_source(&mut self) -> Option<MemberId> {
        if let Some(requested) = self.requested_sync_source.take() {
            if self.forced_source_is_safe(requested) {
                self.sync_source_forced = true;
                return Some(requested);
            }
        }
        self.sync_source_forced = false;
        self.eligible_sources()
            .min_by_key(|&i| {
                (
                    self.members[i].rtt_ms.unwrap_or(u64::MAX / 4),
                    self.config.members[i].id,
                )
            })
            .map(|i| self.config.members[i].id)
    }

    /// `replSetSyncFrom` is honoured when the member is up, holds data, is
    /// ahead of us and does not sync from us; `chainingAllowed` and
    /// round-trip time are overridden.
    fn forced_source_is_safe(&self, member: MemberId) -> bool {
        let Some(index) = self.config.index_of(member) else {
            return false;
        };
        let data = &self.members[index];
        Some(index) != self.my_index
            && self.config.members[index].is_data_bearing()
            && self.is_up(index)
            && data.state.is_some_and(|s| s.is_readable())
            // Level with us is enough, as in MongoDB (an operator's
            // `replSetSyncFrom` names a caught-up peer as a rule); a source
            // behind us could not serve our next entry.
            && data.seen_applied >= self.last_applied
            && data.sync_source != Some(self.me)
    }

    pub(crate) fn on_sync_from(&mut self, member: Option<MemberId>) {
        self.requested_sync_source = member;
        if member.is_some_and(|m| self.forced_source_is_safe(m)) && self.sync_source != member {
            self.clear_sync_source();
        }
    }
}
