//! Model test: random appends, syncs, waits, truncations, crashes and
//! clean reopens, every one mirrored in a plain `Vec` (the model). After a
//! crash that keeps nothing unsynced, the reopened journal holds exactly
//! the synced prefix, in order; when some unsynced bytes survive, it holds
//! a prefix of what was appended that includes the synced part.

mod journal_common;

use std::ops::Bound;

use journal_common::*;
use proptest::prelude::*;
use slipstream_storage::io::FaultyIo;
use slipstream_storage::poison::PoisonPolicy;
use slipstream_storage::journal::{Journal, JournalOptions};
use slipstream_storage::Timestamp;

#[derive(Clone, Debug)]
enum Op {
    Append { count: u32, size: usize },
    Sync,
    /// Waits for the entry at this fraction of the appended ones.
    WaitDurable { fraction: f64 },
    /// The same through `sync_through` (the write and fsync on the caller).
    SyncThrough { fraction: f64 },
    /// Truncates after the entry at this fraction (0.0 = before all).
    TruncateAfter { fraction: f64 },
    Read { fraction: f64, max_entries: usize, max_bytes: usize },
    ReadNewest { max_entries: usize },
    Crash { keep_unsynced_bytes: u64 },
    CleanReopen,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u32..6, 5usize..1500).prop_map(|(count, size)| Op::Append { count, size }),
        2 => Just(Op::Sync),
        2 => (0.0f64..1.0).prop_map(|fraction| Op::WaitDurable { fraction }),
        2 => (0.0f64..1.0).prop_map(|fraction| Op::SyncThrough { fraction }),
        1 => (0.0f64..1.0).prop_map(|fraction| Op::TruncateAfter { fraction }),
        2 => (0.0f64..1.0, 1usize..20, 1usize..5000)
            .prop_map(|(fraction, max_entries, max_bytes)| Op::Read { fraction, max_entries, max_bytes }),
        1 => (1usize..10).prop_map(|max_entries| Op::ReadNewest { max_entries }),
        1 => prop_oneof![Just(0u64), 1u64..3000].prop_map(|keep_unsynced_bytes| Op::Crash { keep_unsynced_bytes }),
        1 => Just(Op::CleanReopen),
    ]
}

fn model_options() -> JournalOptions {
    // Syncs happen only when asked, so the model knows the synced prefix.
    JournalOptions {
        commit_interval_ms: 3_600_000,
        segment_size_bytes: 2048,
        size_cap_bytes: u64::MAX,
        poison_policy: PoisonPolicy::RefuseLaterCalls,
        preallocate_segments: true,
        ..JournalOptions::default()
    }
}

struct Model {
    /// (timestamp, entry size) of every entry the journal should hold.
    entries: Vec<(Timestamp, usize)>,
    /// How many of `entries` are known durable.
    synced: usize,
    /// The next timestamp counter (never reused, so entries stay distinct).
    next: u32,
}

fn position_at(fraction: f64, len: usize) -> usize {
    ((fraction * len as f64) as usize).min(len.saturating_sub(1))
}

fn check_matches(journal: &Journal, model: &Model) {
    let expected: Vec<Timestamp> = model.entries.iter().map(|(t, _)| *t).collect();
    assert_eq!(all_timestamps(journal), expected);
    assert_eq!(journal.last_ts(), expected.last().copied());
    assert_eq!(journal.first_ts(), expected.first().copied());
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut io = FaultyIo::over_std();
    let mut journal = Journal::open(dir.path(), io.as_backend(), model_options()).unwrap();
    let mut model = Model { entries: Vec::new(), synced: 0, next: 0 };
    for op in ops {
        match op {
            Op::Append { count, size } => {
                for _ in 0..count {
                    let t = ts(model.next);
                    model.next += 1;
                    journal.append(t, &entry(t, size)).unwrap();
                    model.entries.push((t, size));
                }
            }
            Op::Sync => {
                journal.sync_now().unwrap();
                model.synced = model.entries.len();
                assert_eq!(journal.durable_ts(), model.entries.last().map(|(t, _)| *t).unwrap_or(journal.durable_ts()));
            }
            Op::WaitDurable { fraction } | Op::SyncThrough { fraction } => {
                if model.entries.is_empty() {
                    continue;
                }
                let position = position_at(fraction, model.entries.len());
                if matches!(op, Op::SyncThrough { .. }) {
                    journal.sync_through(model.entries[position].0).unwrap();
                } else {
                    journal.wait_durable(model.entries[position].0).unwrap();
                }
                // One batch takes everything pending, so more than the
                // entry asked for may be durable: the journal's durable
                // timestamp says how much, and a crash must keep exactly that.
                let durable = journal.durable_ts();
                assert!(durable >= model.entries[position].0);
                model.synced = model.entries.iter().filter(|(t, _)| *t <= durable).count();
            }
            Op::TruncateAfter { fraction } => {
                if model.entries.is_empty() {
                    continue;
                }
                let keep = ((fraction * (model.entries.len() + 1) as f64) as usize).min(model.entries.len());
                let cut_ts = if keep == 0 { Timestamp::new(1, 0) } else { model.entries[keep - 1].0 };
                journal.truncate_after(cut_ts).unwrap();
                model.entries.truncate(keep);
                // Truncation flushes first and is durable when it returns.
                model.synced = model.entries.len();
                check_matches(&journal, &model);
            }
            Op::Read { fraction, max_entries, max_bytes } => {
                if model.entries.is_empty() {
                    assert!(journal.read(Bound::Unbounded, max_entries, max_bytes).unwrap().is_empty());
                    continue;
                }
                let start = position_at(fraction, model.entries.len());
                let got = journal.read(Bound::Included(model.entries[start].0), max_entries, max_bytes).unwrap();
                assert!(!got.is_empty() && got.len() <= max_entries);
                for (offset, (t, bytes)) in got.iter().enumerate() {
                    assert_eq!(*t, model.entries[start + offset].0);
                    assert_entry(*t, bytes);
                }
                let bytes_before_last: usize = got[..got.len() - 1].iter().map(|(_, b)| b.len()).sum();
                assert!(bytes_before_last < max_bytes, "read went past max_bytes");
            }
            Op::ReadNewest { max_entries } => {
                let got = journal.read_newest(max_entries).unwrap();
                let expected: Vec<Timestamp> = model.entries.iter().rev().take(max_entries).map(|(t, _)| *t).collect();
                assert_eq!(got.iter().map(|(t, _)| *t).collect::<Vec<_>>(), expected);
            }
            Op::Crash { keep_unsynced_bytes } => {
                io.power_off();
                drop(journal);
                io.crash(keep_unsynced_bytes).unwrap();
                io = FaultyIo::over_std();
                journal = Journal::open(dir.path(), io.as_backend(), model_options()).unwrap();
                let recovered = all_timestamps(&journal);
                let appended: Vec<Timestamp> = model.entries.iter().map(|(t, _)| *t).collect();
                if keep_unsynced_bytes == 0 {
                    assert_eq!(recovered, appended[..model.synced].to_vec(), "not exactly the synced prefix");
                } else {
                    assert!(recovered.len() >= model.synced, "lost synced entries");
                    assert_eq!(recovered, appended[..recovered.len()].to_vec(), "not a prefix of the appended entries");
                }
                model.entries.truncate(recovered.len());
                model.synced = model.entries.len();
            }
            Op::CleanReopen => {
                journal.close().unwrap();
                drop(journal);
                io = FaultyIo::over_std();
                journal = Journal::open(dir.path(), io.as_backend(), model_options()).unwrap();
                model.synced = model.entries.len();
                check_matches(&journal, &model);
            }
        }
    }
    check_matches(&journal, &model);
}

proptest! {
    // PROPTEST_CASES raises the count for a longer hunt.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|cases| cases.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_journal_matches_its_model(ops in proptest::collection::vec(op_strategy(), 1..60)) {
        run(ops);
    }
}

#[test]
fn a_crash_right_after_a_truncation_keeps_the_truncation() {
    run(vec![
        Op::Append { count: 30, size: 300 },
        Op::Sync,
        Op::TruncateAfter { fraction: 0.3 },
        Op::Append { count: 4, size: 300 },
        Op::Crash { keep_unsynced_bytes: 0 },
        Op::Append { count: 3, size: 300 },
        Op::Sync,
        Op::CleanReopen,
    ]);
}
