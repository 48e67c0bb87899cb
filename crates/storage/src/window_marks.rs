//! Where the snapshot window's memory goes: samples of (visible timestamp,
//! bytes of versions ever written to memory), taken by the checkpoint
//! thread each time it wakes (every 100 ms). From them a checkpoint learns
//! how far up it must go so that what stays in memory above it costs no
//! more than the window's share: the versions above a sample's timestamp
//! cost about what was written since that sample.
//!
//! Without them the window held every checkpoint back until memory passed
//! its bound and then wrote everything it held in one go: under a steady
//! 1 KB insert load, each member of a set wrote about a minute of data
//! (224,000 keys in 10 s) once a minute, all three at the same moment on
//! a shared machine, and the set ran at a tenth of its speed meanwhile.
//! Sliding the window a little each interval spreads the same writes out
//! evenly, and keeps the window as long as memory allows instead of
//! dropping it to nothing after each such checkpoint.

use std::collections::VecDeque;

use crate::Timestamp;

/// Most samples kept: 300 s at one per 100 ms, with room. Past it the
/// oldest go (the window then reaches less far back than it could).
const MARKS_MAX: usize = 4096;

#[derive(Debug, Default)]
pub struct WindowMarks {
    /// (visible timestamp, bytes written by then), oldest first; both grow.
    marks: VecDeque<(Timestamp, u64)>,
}

impl WindowMarks {
    /// The samples of an engine just opened: at its checkpoint `base`, no
    /// bytes were written yet (what recovery replayed counts as later).
    pub fn starting_at(base: Timestamp) -> WindowMarks {
        WindowMarks {
            marks: VecDeque::from([(base, 0)]),
        }
    }

    /// Records that by the time `visible` was the newest readable
    /// timestamp, `written` bytes of versions had gone into memory.
    pub fn sample(&mut self, visible: Timestamp, written: u64) {
        match self.marks.back() {
            // Nothing new became visible: the first count at a timestamp
            // stays (later bytes count as above it, which errs on the side
            // of keeping less in memory).
            Some(&(last, _)) if visible == last => return,
            // The newest readable timestamp went back: a rollback undid
            // what the samples above it describe.
            Some(&(last, _)) if visible < last => self.marks.clear(),
            _ => {}
        }
        if self.marks.len() == MARKS_MAX {
            self.marks.pop_front();
        }
        self.marks.push_back((visible, written));
    }

    /// The oldest sampled timestamp above which the versions cost at most
    /// `budget` bytes, with `written` the byte count now: a checkpoint at
    /// or past it keeps memory within the budget. None when every sample
    /// is within budget (memory does not force the window to move).
    /// When even the newest sample is over budget, the newest.
    pub fn start_within(&self, written: u64, budget: u64) -> Option<Timestamp> {
        let oldest = self.marks.front()?;
        if written.saturating_sub(oldest.1) <= budget {
            return None;
        }
        // Samples grow in bytes: the first within budget, by binary search.
        let within = self
            .marks
            .partition_point(|&(_, at)| written.saturating_sub(at) > budget);
        let index = within.min(self.marks.len() - 1);
        Some(self.marks[index].0)
    }

    /// Forgets the samples at or below `ts` but the newest of them (a
    /// checkpoint reached `ts`: versions there are on disk now).
    pub fn forget_below(&mut self, ts: Timestamp) {
        while self.marks.len() > 1 && self.marks[1].0 <= ts {
            self.marks.pop_front();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.marks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(secs: u32) -> Timestamp {
        Timestamp::new(secs, 1)
    }

    fn marks(samples: &[(u32, u64)]) -> WindowMarks {
        let mut marks = WindowMarks::default();
        for &(secs, written) in samples {
            marks.sample(ts(secs), written);
        }
        marks
    }

    #[test]
    fn what_recovery_replayed_counts_as_written_after_the_checkpoint() {
        let mut m = WindowMarks::starting_at(ts(1));
        m.sample(ts(5), 1_000);
        assert_eq!(m.start_within(1_000, 500), Some(ts(5)));
        assert_eq!(m.start_within(1_000, 1_000), None);
    }

    #[test]
    fn no_start_while_everything_fits() {
        let m = marks(&[(1, 0), (2, 100), (3, 200)]);
        assert_eq!(m.start_within(250, 250), None);
        assert_eq!(WindowMarks::default().start_within(1_000, 10), None);
    }

    #[test]
    fn start_is_the_oldest_sample_whose_later_writes_fit() {
        let m = marks(&[(1, 0), (2, 100), (3, 200), (4, 300)]);
        // Above 2 lie 400 - 100 = 300 bytes: too many for 250; above 3, 200.
        assert_eq!(m.start_within(400, 250), Some(ts(3)));
        assert_eq!(m.start_within(400, 300), Some(ts(2)));
        // Over budget even above the newest sample: the newest.
        assert_eq!(m.start_within(1_000, 10), Some(ts(4)));
    }

    #[test]
    fn a_sample_at_the_same_timestamp_keeps_the_first_count_and_a_rollback_starts_over() {
        let mut m = marks(&[(1, 0), (2, 100)]);
        m.sample(ts(2), 150);
        assert_eq!(m.len(), 2);
        assert_eq!(m.start_within(400, 260), Some(ts(2)));
        m.sample(ts(1), 500);
        assert_eq!(m.len(), 1);
        assert_eq!(m.start_within(600, 50), Some(ts(1)));
    }

    #[test]
    fn forget_below_keeps_the_newest_sample_at_or_below() {
        let mut m = marks(&[(1, 0), (2, 100), (3, 200), (4, 300)]);
        m.forget_below(ts(3));
        assert_eq!(m.len(), 2);
        assert_eq!(m.start_within(400, 150), Some(ts(4)));
        m.forget_below(ts(9));
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn the_oldest_samples_go_past_the_cap() {
        let mut m = WindowMarks::default();
        for i in 0..(MARKS_MAX as u32 + 10) {
            m.sample(ts(i + 1), u64::from(i) * 10);
        }
        assert_eq!(m.len(), MARKS_MAX);
        assert_eq!(m.start_within(u64::MAX / 2, 0), Some(ts(MARKS_MAX as u32 + 10)));
    }
}
