//! Failed writes and fsyncs: the journal poisons itself, never retries, and
//! a reopen after a simulated power loss recovers exactly what was durable
//! (plus, at most, entries of the batch that was being written), never a
//! torn middle.

mod journal_common;

use journal_common::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use slipstream_storage::io::{Fault, FaultyIo};
use slipstream_storage::poison::PoisonPolicy;
use slipstream_storage::journal::{
    segment_file_name, Journal, JournalOptions, FRAME_HEADER_BYTES, SEGMENT_BYTES_MAX, SEGMENT_HEADER_BYTES,
};
use slipstream_storage::{StorageError, Timestamp};

const ENTRIES_PER_ROUND: u32 = 3;
const ROUNDS_MAX: u32 = 40;

fn fault_options() -> JournalOptions {
    // The thread syncs only when asked, so durability is exactly what the
    // test asked for.
    JournalOptions {
        commit_interval_ms: 3_600_000,
        segment_size_bytes: 4096,
        size_cap_bytes: u64::MAX,
        poison_policy: PoisonPolicy::RefuseLaterCalls,
        preallocate_segments: true,
        ..JournalOptions::default()
    }
}

/// Segments large enough that no batch of these tests rolls over: each
/// batch is one write and one fsync, so a crash that keeps nothing unsynced
/// must bring back exactly the acknowledged entries.
fn one_segment_options() -> JournalOptions {
    JournalOptions { segment_size_bytes: SEGMENT_BYTES_MAX, ..fault_options() }
}

/// What a run against a faulty backend observed.
struct Run {
    appended: Vec<Timestamp>,
    acknowledged: Vec<Timestamp>,
    /// The entries of the round whose sync failed.
    failed_round: Vec<Timestamp>,
}

/// Appends rounds of entries, waiting for each round to be durable, until
/// the armed fault fires; checks that every call afterwards is refused.
fn run_until_fault(dir: &std::path::Path, io: &FaultyIo, fault: Fault, options: JournalOptions) -> Option<Run> {
    let journal = Journal::open(dir, io.as_backend(), options).unwrap();
    io.arm(fault);
    let mut run = Run { appended: Vec::new(), acknowledged: Vec::new(), failed_round: Vec::new() };
    let mut next = 0;
    for _ in 0..ROUNDS_MAX {
        let mut round = Vec::new();
        for _ in 0..ENTRIES_PER_ROUND {
            let t = ts(next);
            next += 1;
            journal.append(t, &entry(t, 300)).unwrap();
            run.appended.push(t);
            round.push(t);
        }
        match journal.wait_durable(*round.last().unwrap()) {
            Ok(()) => run.acknowledged.extend(round),
            Err(StorageError::Poisoned(_)) => {
                run.failed_round = round;
                break;
            }
            Err(other) => panic!("expected Poisoned, got {other:?}"),
        }
    }
    if !io.counters().fired {
        return None;
    }
    assert!(!run.failed_round.is_empty(), "the fault fired but no wait failed");
    // Poisoned for good: appends, waits, syncs, reads, truncation.
    let t = ts(next);
    assert!(matches!(journal.append(t, &entry(t, 300)), Err(StorageError::Poisoned(_))));
    assert!(matches!(journal.wait_durable(run.appended[0]), Err(StorageError::Poisoned(_))));
    assert!(matches!(journal.sync_now(), Err(StorageError::Poisoned(_))));
    assert!(matches!(journal.read(std::ops::Bound::Unbounded, 10, 1000), Err(StorageError::Poisoned(_))));
    assert!(matches!(journal.truncate_after(ts(0)), Err(StorageError::Poisoned(_))));
    assert!(journal.durable_ts() <= run.acknowledged.last().copied().unwrap_or(Timestamp::ZERO));
    assert!(matches!(journal.close(), Err(StorageError::Poisoned(_))));
    drop(journal);
    assert_eq!(io.counters().ops_after_fault, 0, "a poisoned journal touched the disk again");
    Some(run)
}

/// Reopens over the real file system and checks what survived.
fn check_recovery(dir: &std::path::Path, run: &Run, exact: bool) -> Vec<Timestamp> {
    let journal = open(dir, fault_options());
    let recovered = all_timestamps(&journal);
    assert!(recovered.len() >= run.acknowledged.len(), "lost acknowledged entries: {recovered:?} vs {:?}", run.acknowledged);
    assert_eq!(&recovered[..run.acknowledged.len()], run.acknowledged.as_slice());
    assert_eq!(&recovered[..], &run.appended[..recovered.len()], "recovered entries are not a prefix of the appended ones");
    let extra = &recovered[run.acknowledged.len()..];
    assert!(extra.iter().all(|t| run.failed_round.contains(t)), "recovered entries beyond the failed batch: {extra:?}");
    if exact {
        assert!(extra.is_empty(), "entries of the failed batch survived a crash that kept nothing unsynced: {extra:?}");
    }
    // The recovered journal takes new appends after its last entry and
    // keeps them across another reopen: no torn middle was left behind.
    let next = ts(10_000);
    journal.append(next, &entry(next, 300)).unwrap();
    journal.sync_now().unwrap();
    drop(journal);
    let journal = open(dir, fault_options());
    let again = all_timestamps(&journal);
    assert_eq!(&again[..recovered.len()], recovered.as_slice());
    assert_eq!(again.last(), Some(&next));
    recovered
}

#[test]
fn the_nth_write_failing_poisons_and_loses_nothing_durable() {
    // With small segments a batch may fsync an earlier segment before it
    // fails in a new one, so entries of the failed batch may survive (they
    // were never acknowledged; keeping them is allowed). With one segment,
    // recovery must return exactly the acknowledged entries.
    for (options, exact) in [(fault_options(), false), (one_segment_options(), true)] {
        let mut fired = 0;
        for nth in 1..=30 {
            for partial in [None, Some(7), Some(200)] {
                let dir = tempfile::tempdir().unwrap();
                let io = FaultyIo::over_std();
                let fault = Fault::Write { nth, partial_bytes: partial };
                let Some(run) = run_until_fault(dir.path(), &io, fault, options.clone()) else {
                    continue;
                };
                fired += 1;
                io.crash(0).unwrap();
                check_recovery(dir.path(), &run, exact);
            }
        }
        assert!(fired >= 60, "only {fired} write faults fired");
    }
}

#[test]
fn the_nth_fsync_failing_poisons_and_loses_nothing_durable() {
    for (options, exact) in [(fault_options(), false), (one_segment_options(), true)] {
        let mut fired = 0;
        for nth in 1..=40 {
            let dir = tempfile::tempdir().unwrap();
            let io = FaultyIo::over_std();
            let Some(run) = run_until_fault(dir.path(), &io, Fault::Sync { nth }, options.clone()) else {
                continue;
            };
            fired += 1;
            io.crash(0).unwrap();
            check_recovery(dir.path(), &run, exact);
        }
        assert!(fired >= 30, "only {fired} fsync faults fired");
    }
}

#[test]
fn unsynced_bytes_that_survive_a_crash_are_a_clean_prefix() {
    // After a failed write or fsync the disk may hold any prefix of what
    // was written but not synced: recovery must keep acknowledged entries,
    // cut the torn frame, and never invent or reorder entries.
    for nth in [2, 5, 9, 14] {
        for keep in [1u64, 16, 100, 333, 640, 5000] {
            for fault in [Fault::Write { nth, partial_bytes: Some(500) }, Fault::Sync { nth }] {
                let dir = tempfile::tempdir().unwrap();
                let io = FaultyIo::over_std();
                let Some(run) = run_until_fault(dir.path(), &io, fault, fault_options()) else { continue };
                io.crash(keep).unwrap();
                check_recovery(dir.path(), &run, false);
            }
        }
    }
}

#[test]
fn a_power_loss_without_errors_keeps_exactly_the_synced_entries() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::over_std();
    let journal = Journal::open(dir.path(), io.as_backend(), fault_options()).unwrap();
    for i in 0..30 {
        journal.append(ts(i), &entry(ts(i), 300)).unwrap();
    }
    journal.wait_durable(ts(19)).unwrap();
    let durable = journal.durable_ts();
    assert!(durable >= ts(19));
    io.power_off();
    drop(journal);
    io.crash(0).unwrap();
    let journal = open(dir.path(), fault_options());
    let recovered = all_timestamps(&journal);
    assert_eq!(recovered.last(), Some(&durable));
    assert_eq!(recovered, (0..30).map(ts).filter(|t| *t <= durable).collect::<Vec<_>>());
}

#[test]
fn a_failed_fsync_during_truncation_poisons() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::over_std();
    let journal = Journal::open(dir.path(), io.as_backend(), fault_options()).unwrap();
    for i in 0..30 {
        journal.append(ts(i), &entry(ts(i), 300)).unwrap();
    }
    journal.sync_now().unwrap();
    io.arm(Fault::Sync { nth: 1 });
    assert!(matches!(journal.truncate_after(ts(10)), Err(StorageError::Poisoned(_))));
    assert!(matches!(journal.append(ts(40), &entry(ts(40), 300)), Err(StorageError::Poisoned(_))));
    drop(journal);
    assert_eq!(io.counters().ops_after_fault, 0);
    // The cut itself may or may not have reached the disk, but what is
    // there is a clean prefix holding everything up to the cut point.
    let journal = open(dir.path(), fault_options());
    let recovered = all_timestamps(&journal);
    assert!(recovered.len() >= 11);
    assert_eq!(recovered, (0..recovered.len() as u32).map(ts).collect::<Vec<_>>());
}

#[test]
fn a_failed_directory_fsync_while_deleting_old_segments_poisons() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::over_std();
    let options = JournalOptions { size_cap_bytes: 8192, ..fault_options() };
    let journal = Journal::open(dir.path(), io.as_backend(), options.clone()).unwrap();
    for i in 0..60 {
        journal.append(ts(i), &entry(ts(i), 300)).unwrap();
    }
    journal.sync_now().unwrap();
    io.arm(Fault::Sync { nth: 1 });
    journal.set_retain_from(ts(59));
    // Nothing is pending, so sync_now alone never reaches the disk: the
    // poison can only come from the cap's directory fsync.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match journal.sync_now() {
            Err(StorageError::Poisoned(_)) => break,
            Ok(_) => assert!(std::time::Instant::now() < deadline, "the cap never ran"),
            Err(other) => panic!("{other:?}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(io.counters().fired);
    assert!(journal.stats().segments_deleted > 0);
    assert!(matches!(journal.append(ts(70), &entry(ts(70), 300)), Err(StorageError::Poisoned(_))));
    drop(journal);
    let journal = open(dir.path(), options);
    let recovered = all_timestamps(&journal);
    assert_eq!(recovered.last(), Some(&ts(59)));
}

/// Entries of `ROLLOVER_ENTRY_BYTES` fill a 4096-byte segment after this
/// many (the next one starts segment 2).
const ENTRIES_PER_SEGMENT: u32 = 12;
const ROLLOVER_ENTRY_BYTES: usize = 300;
/// How long a test waits for the journal's threads to reach a point.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

#[test]
fn a_segment_becomes_durable_only_after_the_previous_one_is() {
    // Segment 1's last entry and segment 2's first fall in two batches; the
    // first batch's fsync is held (a slow disk) while the second creates
    // segment 2 and fsyncs it. Then the power fails. Recovery must find a
    // prefix of what was appended: never segment 2 without the end of
    // segment 1 (lost silently), nor a torn frame in segment 1 followed by
    // segment 2 (the node would refuse to start).
    for keep_unsynced_bytes in [0u64, 100] {
        let dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::over_std();
        // Segments that grow as they are written, the layout this test
        // counts bytes in (the next test rolls over into a spare).
        let options = JournalOptions { preallocate_segments: false, ..fault_options() };
        let journal = Arc::new(Journal::open(dir.path(), io.as_backend(), options).unwrap());
        let entry_bytes = entry(ts(0), ROLLOVER_ENTRY_BYTES).len();
        let frame_bytes = (FRAME_HEADER_BYTES + entry_bytes) as u64;
        assert!(SEGMENT_HEADER_BYTES + u64::from(ENTRIES_PER_SEGMENT) * frame_bytes <= 4096);
        assert!(SEGMENT_HEADER_BYTES + u64::from(ENTRIES_PER_SEGMENT + 1) * frame_bytes > 4096);
        for i in 0..ENTRIES_PER_SEGMENT - 1 {
            journal.append(ts(i), &entry(ts(i), ROLLOVER_ENTRY_BYTES)).unwrap();
        }
        journal.sync_now().unwrap();
        let durable = journal.durable_ts();

        // Batch k: the last entry of segment 1, its fsync held.
        io.hold_next_sync(&dir.path().join(segment_file_name(1)));
        let last_of_first = ts(ENTRIES_PER_SEGMENT - 1);
        journal.append(last_of_first, &entry(last_of_first, ROLLOVER_ENTRY_BYTES)).unwrap();
        let waiter_k = {
            let journal = journal.clone();
            std::thread::spawn(move || journal.wait_durable(last_of_first))
        };
        assert!(io.wait_until_sync_held(STEP_TIMEOUT), "batch k never reached its fsync");

        // Batch k + 1: two entries that start segment 2.
        let appended: Vec<_> = (0..ENTRIES_PER_SEGMENT + 2).map(ts).collect();
        for &t in &appended[ENTRIES_PER_SEGMENT as usize..] {
            journal.append(t, &entry(t, ROLLOVER_ENTRY_BYTES)).unwrap();
        }
        let waiter_k1 = {
            let journal = journal.clone();
            let last = *appended.last().unwrap();
            std::thread::spawn(move || journal.wait_durable(last))
        };
        let second = dir.path().join(segment_file_name(2));
        let second_end = SEGMENT_HEADER_BYTES + 2 * frame_bytes;
        let deadline = Instant::now() + STEP_TIMEOUT;
        while io.synced_len(&second).is_none_or(|len| len < second_end) {
            assert!(Instant::now() < deadline, "batch k + 1 was never fsynced");
            std::thread::sleep(Duration::from_millis(2));
        }
        // Neither batch is acknowledged: k's fsync has not returned.
        assert_eq!(journal.durable_ts(), durable);

        io.power_off();
        io.release_held_sync();
        assert!(matches!(waiter_k.join().unwrap(), Err(StorageError::Poisoned(_))));
        assert!(matches!(waiter_k1.join().unwrap(), Err(StorageError::Poisoned(_))));
        drop(journal);
        io.crash(keep_unsynced_bytes).unwrap();

        let reopened = Journal::open(dir.path(), std_io(), fault_options())
            .unwrap_or_else(|err| panic!("keep {keep_unsynced_bytes}: the journal does not open: {err}"));
        let recovered = all_timestamps(&reopened);
        assert_eq!(
            &recovered[..],
            &appended[..recovered.len()],
            "keep {keep_unsynced_bytes}: recovered entries are not a prefix of the appended ones"
        );
        assert!(recovered.last() >= Some(&durable), "keep {keep_unsynced_bytes}: lost durable entries");
    }
}

#[test]
fn a_spare_becomes_a_segment_only_after_the_previous_one_is_durable() {
    // As above, with preallocated segments: the active segment S was a
    // spare, a new spare is ready, batch k writes S's last entry (its fsync
    // held) and batch k + 1 renames the spare into place as S + 1. A size
    // model cannot see S lose its last frame (the file's size never moves),
    // and a lost frame followed by zeros reads as the end of S, so only the
    // fsync of S before the rename keeps S + 1 from holding entries that
    // follow a gap.
    for keep_unsynced_bytes in [0u64, 100] {
        let dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::over_std();
        let journal = Arc::new(Journal::open(dir.path(), io.as_backend(), fault_options()).unwrap());
        let frame_bytes = (FRAME_HEADER_BYTES + entry(ts(0), ROLLOVER_ENTRY_BYTES).len()) as u64;
        let mut appended = Vec::new();
        // Until the active segment is a spare with room for exactly one
        // more frame, and the next spare is ready (its zeros counted too).
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let stats = journal.stats();
            let active_zeros = stats.preallocated_bytes.saturating_sub(4096);
            if stats.spares_prepared >= 2 && (frame_bytes..2 * frame_bytes).contains(&active_zeros) {
                break;
            }
            assert!(Instant::now() < deadline, "never reached the setup: {stats:?}");
            let t = ts(appended.len() as u32);
            journal.append(t, &entry(t, ROLLOVER_ENTRY_BYTES)).unwrap();
            journal.sync_now().unwrap();
            appended.push(t);
            std::thread::sleep(Duration::from_millis(2));
        }
        let durable = journal.durable_ts();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".seg"))
            .collect();
        let active_seq = names.len() as u64;
        let active = dir.path().join(segment_file_name(active_seq));
        assert_eq!(std::fs::metadata(&active).unwrap().len(), 4096, "the active segment is not a spare");

        // Batch k: S's last entry, its fsync held.
        io.hold_next_sync_after_writes(&active, 1);
        let last_of_active = ts(appended.len() as u32);
        journal.append(last_of_active, &entry(last_of_active, ROLLOVER_ENTRY_BYTES)).unwrap();
        appended.push(last_of_active);
        let waiter_k = {
            let journal = journal.clone();
            std::thread::spawn(move || journal.wait_durable(last_of_active))
        };
        assert!(io.wait_until_sync_held(STEP_TIMEOUT), "batch k never reached its fsync");

        // Batch k + 1: two entries, into the spare renamed as S + 1.
        for _ in 0..2 {
            let t = ts(appended.len() as u32);
            journal.append(t, &entry(t, ROLLOVER_ENTRY_BYTES)).unwrap();
            appended.push(t);
        }
        let waiter_k1 = {
            let journal = journal.clone();
            let last = *appended.last().unwrap();
            std::thread::spawn(move || journal.wait_durable(last))
        };
        let next = dir.path().join(segment_file_name(active_seq + 1));
        let next_written = SEGMENT_HEADER_BYTES + 2 * frame_bytes;
        let deadline = Instant::now() + STEP_TIMEOUT;
        while io.written_and_synced(&next).is_none_or(|bytes| bytes < next_written) {
            assert!(Instant::now() < deadline, "batch k + 1 was never fsynced");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(std::fs::metadata(&next).unwrap().len(), 4096, "S + 1 is not the spare");
        assert_eq!(journal.durable_ts(), durable);

        io.power_off();
        io.release_held_sync();
        assert!(matches!(waiter_k.join().unwrap(), Err(StorageError::Poisoned(_))));
        assert!(matches!(waiter_k1.join().unwrap(), Err(StorageError::Poisoned(_))));
        drop(journal);
        io.crash(keep_unsynced_bytes).unwrap();

        let reopened = Journal::open(dir.path(), std_io(), fault_options())
            .unwrap_or_else(|err| panic!("keep {keep_unsynced_bytes}: the journal does not open: {err}"));
        let recovered = all_timestamps(&reopened);
        assert_eq!(
            &recovered[..],
            &appended[..recovered.len()],
            "keep {keep_unsynced_bytes}: recovered entries are not a prefix of the appended ones"
        );
        assert!(recovered.last() >= Some(&durable), "keep {keep_unsynced_bytes}: lost durable entries");
    }
}

/// Joins `handle` if it finishes within `timeout`.
fn join_within<T>(handle: std::thread::JoinHandle<T>, timeout: Duration) -> Option<T> {
    let deadline = Instant::now() + timeout;
    while !handle.is_finished() {
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Some(handle.join().unwrap())
}

#[test]
fn a_panic_in_a_journal_thread_poisons_instead_of_leaving_waiters_blocked() {
    // A panic while writing a batch (the group-commit thread) and while
    // fsyncing it (a sync worker): the journal must refuse everything
    // afterwards, as after a failed fsync, and wake every waiter.
    for fault in [Fault::WritePanics { nth: 1 }, Fault::SyncPanics { nth: 1 }] {
        let dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::over_std();
        let journal = Arc::new(Journal::open(dir.path(), io.as_backend(), fault_options()).unwrap());
        journal.append(ts(0), &entry(ts(0), 300)).unwrap();
        journal.sync_now().unwrap();
        io.arm(fault);
        journal.append(ts(1), &entry(ts(1), 300)).unwrap();
        let waiter = {
            let journal = journal.clone();
            std::thread::spawn(move || journal.wait_durable(ts(1)))
        };
        let result = join_within(waiter, STEP_TIMEOUT);
        assert!(io.counters().fired, "{fault:?} never fired");
        assert!(matches!(result, Some(Err(StorageError::Poisoned(_)))), "{fault:?}: the waiter got {result:?}");
        let mut counted = false;
        assert!(matches!(journal.request_durable(ts(1), &mut counted), Err(StorageError::Poisoned(_))));
        assert!(matches!(journal.append(ts(2), &entry(ts(2), 300)), Err(StorageError::Poisoned(_))));
        assert!(matches!(journal.close(), Err(StorageError::Poisoned(_))));
        drop(journal);
        let reopened = open(dir.path(), fault_options());
        assert_eq!(all_timestamps(&reopened).first(), Some(&ts(0)));
    }
}

#[test]
fn a_journal_directory_the_journal_creates_survives_a_power_loss() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("journal");
    let io = FaultyIo::over_std();
    let journal = Journal::open(&dir, io.as_backend(), fault_options()).unwrap();
    for i in 0..5 {
        journal.append(ts(i), &entry(ts(i), 300)).unwrap();
    }
    journal.sync_now().unwrap();
    io.power_off();
    drop(journal);
    io.crash(0).unwrap();
    let journal = open(&dir, fault_options());
    assert_eq!(all_timestamps(&journal), (0..5).map(ts).collect::<Vec<_>>());
}
