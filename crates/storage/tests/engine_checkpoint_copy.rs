//! Checkpoint copies (`engine/checkpoint_copy.rs`): a member that copies a
//! source's checkpoint file byte for byte, installs it with the entry at
//! its timestamp, and applies the source's entries after it holds what the
//! source holds, across a restart, and keeps its local documents; a copy
//! whose file changes under it fails instead of installing a mix; an
//! interrupted installation reopens empty.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use slipstream_storage::engine::{EngineOptions, INSTALL_MARKER_FILE_NAME, STAGED_FILE_NAME};
use slipstream_storage::kv::FilePiece;
use slipstream_storage::{Engine, IndexSpec, ReadAt, StorageError, WriteGate};

const LOCAL_NAME: &str = "replset.election";
const HOLDER: &str = "syncing:27017";

/// A member's options: background checkpoints every
/// `checkpoint_interval_ms`, no snapshot window holding them back.
fn options(dir: &std::path::Path, checkpoint_interval_ms: u64) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.replicated = true;
    options.journal_commit_interval_ms = 2;
    options.checkpoint_interval_ms = checkpoint_interval_ms;
    options.snapshot_history_window_secs = 0;
    options
}

fn open(dir: &std::path::Path) -> Arc<Engine> {
    Engine::open(options(dir, 60_000)).unwrap()
}

/// `count` users (with an index on `email`) from `first`, and a second
/// database; the stable timestamp moves to the last entry.
fn write_users(engine: &Arc<Engine>, first: i32, count: i32) {
    engine.set_write_gate(WriteGate::Open { term: 3 });
    engine
        .create_indexes(
            "app.users",
            vec![IndexSpec {
                name: "email_1".into(),
                key: doc! {"email": 1},
                ..Default::default()
            }],
        )
        .unwrap();
    let mut writer = engine.writer();
    for i in first..first + count {
        writer
            .insert("app.users", doc! {"_id": i, "email": format!("u{i}"), "pad": "x".repeat(300)})
            .unwrap();
        writer.insert("other.c", doc! {"_id": i}).unwrap();
    }
    drop(writer);
    let last = engine.last_applied();
    engine.wait_durable(last.ts).unwrap();
    engine.set_stable_timestamp(last.ts);
}

fn documents(engine: &Arc<Engine>, ns: &str) -> Vec<Document> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    reader
        .scan(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(_, document)| document)
        .collect()
}

/// The `email_1` index's entries (key and record id).
fn email_index(engine: &Arc<Engine>) -> usize {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    reader
        .scan_index("app.users", "email_1", Bound::Unbounded, Bound::Unbounded, false, None, usize::MAX)
        .unwrap()
        .len()
}

/// Copies the source's checkpoint file into `target`'s staged file in
/// `chunk`-byte reads, syncing as it goes; returns the bytes the reads
/// carried (the file less its holes).
fn copy_file(source: &Arc<Engine>, target: &Arc<Engine>, id: &str, file_bytes: u64, chunk: usize) -> u64 {
    let mut offset = 0u64;
    let mut carried = 0u64;
    while offset < file_bytes {
        let piece = source.read_checkpoint_copy(HOLDER, id, offset, chunk).unwrap();
        assert!(piece.span > 0, "the file ended at {offset} of {file_bytes}");
        assert_eq!(piece.offset, offset);
        carried += piece.data.len() as u64;
        target.write_staged_checkpoint(&piece).unwrap();
        offset += piece.span;
    }
    target.sync_staged_checkpoint().unwrap();
    assert_eq!(target.staged_checkpoint_bytes().unwrap(), file_bytes);
    carried
}

#[test]
fn a_copied_checkpoint_and_the_entries_after_it_make_the_sources_data() {
    let source_dir = tempfile::tempdir().unwrap();
    let source = open(source_dir.path());
    write_users(&source, 0, 2_000);
    let copy = source.begin_checkpoint_copy(HOLDER).unwrap();
    assert_eq!(source.checkpoint_timestamp(), copy.optime.ts, "begin checkpoints at the stable timestamp");
    assert_eq!(copy.optime, source.last_applied());
    // Writes after the copy began change memory and the journal, not the file.
    write_users(&source, 2_000, 300);
    source.writer().delete("app.users", &bson::Bson::Int32(5)).unwrap();
    source.wait_durable(source.last_applied().ts).unwrap();

    let target_dir = tempfile::tempdir().unwrap();
    let target = open(target_dir.path());
    target.local().write(LOCAL_NAME, &doc! {"_id": "election", "term": 9i64}).unwrap();
    copy_file(&source, &target, &copy.id, copy.file_bytes, 256 * 1024);
    source.end_checkpoint_copy(HOLDER);
    assert_eq!(target.install_checkpoint_copy(&copy.entry).unwrap(), copy.optime);
    assert_eq!(target.last_applied(), copy.optime);
    assert!(!target_dir.path().join(STAGED_FILE_NAME).exists());
    assert!(!target_dir.path().join(INSTALL_MARKER_FILE_NAME).exists());
    let entries = target.oplog_read(Bound::Unbounded, 10, 1 << 20).unwrap();
    assert_eq!(entries.len(), 1, "the oplog starts at the checkpoint's entry");
    assert_eq!(entries[0].as_bytes(), copy.entry.as_bytes());

    let after = source.oplog_read(Bound::Excluded(copy.optime.ts), 100_000, usize::MAX).unwrap();
    assert!(!after.is_empty());
    assert_eq!(target.apply_batch(&after).unwrap(), source.last_applied());
    for ns in ["app.users", "other.c"] {
        assert_eq!(documents(&target, ns), documents(&source, ns), "{ns}");
    }
    assert_eq!(email_index(&target), 2_299, "the index copied and maintained");
    assert_eq!(documents(&target, "app.users").len(), 2_299);

    target.wait_durable(target.last_applied().ts).unwrap();
    target.shutdown().unwrap();
    drop(target);
    let target = open(target_dir.path());
    assert_eq!(target.last_applied(), source.last_applied());
    for ns in ["app.users", "other.c"] {
        assert_eq!(documents(&target, ns), documents(&source, ns), "{ns} after a restart");
    }
    assert_eq!(
        target.local().read(LOCAL_NAME).unwrap(),
        Some(doc! {"_id": "election", "term": 9i64}),
        "the member's own local documents stay"
    );
    target.shutdown().unwrap();
    source.shutdown().unwrap();
}

#[test]
fn a_copy_whose_file_changes_under_it_fails_and_a_new_one_starts() {
    let dir = tempfile::tempdir().unwrap();
    let source = open(dir.path());
    write_users(&source, 0, 200);
    let copy = source.begin_checkpoint_copy(HOLDER).unwrap();
    source.read_checkpoint_copy(HOLDER, &copy.id, 0, 4096).unwrap();
    write_users(&source, 200, 10);
    source.checkpoint_now().unwrap();
    let err = source.read_checkpoint_copy(HOLDER, &copy.id, 4096, 4096).unwrap_err();
    assert!(
        matches!(&err, StorageError::IllegalOperation(message) if message.contains("changed since the copy")),
        "{err:?}"
    );
    let again = source.begin_checkpoint_copy(HOLDER).unwrap();
    assert_ne!(again.id, copy.id);
    assert_eq!(again.optime, source.last_applied());
    source.read_checkpoint_copy(HOLDER, &again.id, 0, 4096).unwrap();
    source.shutdown().unwrap();
}

#[test]
fn flush_syncs_the_journal_and_leaves_a_pinned_file_alone_until_the_pin_goes() {
    let dir = tempfile::tempdir().unwrap();
    let source = open(dir.path());
    write_users(&source, 0, 200);
    let copy = source.begin_checkpoint_copy(HOLDER).unwrap();
    write_users(&source, 200, 10);
    // The writes are durable in the journal; the file the copy reads stays.
    assert_eq!(source.flush().unwrap(), copy.optime.ts);
    assert_eq!(source.last_durable(), source.last_applied());
    source.read_checkpoint_copy(HOLDER, &copy.id, 0, 4096).unwrap();
    source.end_checkpoint_copy(HOLDER);
    assert_eq!(source.flush().unwrap(), source.last_applied().ts);
    assert!(source.read_checkpoint_copy(HOLDER, &copy.id, 0, 4096).is_err());
    source.shutdown().unwrap();
}

#[test]
fn nothing_checkpointed_yet_cannot_be_copied() {
    let dir = tempfile::tempdir().unwrap();
    let source = open(dir.path());
    source.set_write_gate(WriteGate::Open { term: 1 });
    source.writer().insert("app.c", doc! {"_id": 1}).unwrap();
    // No commit point yet: the stable timestamp is zero.
    let err = source.begin_checkpoint_copy(HOLDER).unwrap_err();
    assert!(matches!(&err, StorageError::IllegalOperation(_)), "{err:?}");
    source.shutdown().unwrap();
}

#[test]
fn background_checkpoints_wait_while_a_copy_is_pinned_even_past_the_oplog_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path(), 20);
    options.oplog_size_bytes = 1024 * 1024;
    let source = Engine::open(options).unwrap();
    write_users(&source, 0, 50);
    let copy = source.begin_checkpoint_copy(HOLDER).unwrap();
    // Past the 1 MB cap: the journal grows rather than the copy failing.
    write_users(&source, 50, 4_000);
    assert!(source.stats().oplog_size_bytes > 1024 * 1024, "{:?}", source.stats());
    // Many checkpoint intervals pass: none rewrites the file.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(source.checkpoint_timestamp(), copy.optime.ts);
    source.read_checkpoint_copy(HOLDER, &copy.id, 0, 4096).unwrap();
    source.end_checkpoint_copy(HOLDER);
    assert!(!source.checkpoint_copy_pinned());
    let deadline = Instant::now() + Duration::from_secs(30);
    while source.checkpoint_timestamp() == copy.optime.ts {
        assert!(Instant::now() < deadline, "no checkpoint after the copy ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(source.read_checkpoint_copy(HOLDER, &copy.id, 0, 4096).is_err());
    source.shutdown().unwrap();
}

#[test]
fn an_installation_a_crash_interrupted_reopens_empty() {
    let source_dir = tempfile::tempdir().unwrap();
    let source = open(source_dir.path());
    write_users(&source, 0, 100);
    let copy = source.begin_checkpoint_copy(HOLDER).unwrap();
    let target_dir = tempfile::tempdir().unwrap();
    let target = open(target_dir.path());
    copy_file(&source, &target, &copy.id, copy.file_bytes, 1 << 20);
    target.install_checkpoint_copy(&copy.entry).unwrap();
    // A crash between steps 2 and 6 leaves the marker beside the new files.
    std::fs::write(target_dir.path().join(INSTALL_MARKER_FILE_NAME), b"interrupted").unwrap();
    drop(target);
    let target = open(target_dir.path());
    assert!(target.last_applied().is_null(), "{:?}", target.last_applied());
    assert!(documents(&target, "app.users").is_empty());
    assert!(!target_dir.path().join(INSTALL_MARKER_FILE_NAME).exists());
    // Installed again from a new copy, it holds the source's data.
    copy_file(&source, &target, &copy.id, copy.file_bytes, 1 << 20);
    target.install_checkpoint_copy(&copy.entry).unwrap();
    assert_eq!(documents(&target, "app.users"), documents(&source, "app.users"));
    target.shutdown().unwrap();
    source.shutdown().unwrap();
}

#[test]
fn a_copy_carries_the_files_data_and_not_its_holes() {
    let source_dir = tempfile::tempdir().unwrap();
    let source = open(source_dir.path());
    // Checkpoints in between: redb grows its file by doubling it, and
    // what it has not written of the new half is a hole.
    for round in 0..4 {
        write_users(&source, round * 1_500, 1_500);
        source.checkpoint_now().unwrap();
    }
    let copy = source.begin_checkpoint_copy(HOLDER).unwrap();
    let target_dir = tempfile::tempdir().unwrap();
    let target = open(target_dir.path());
    let carried = copy_file(&source, &target, &copy.id, copy.file_bytes, 1 << 20);
    let source_file = std::fs::read(source_dir.path().join("checkpoint.redb")).unwrap();
    let staged = std::fs::read(target_dir.path().join(STAGED_FILE_NAME)).unwrap();
    assert_eq!(source_file.len() as u64, copy.file_bytes);
    assert!(staged == source_file, "the staged copy differs from the source's file");
    assert!(
        carried < copy.file_bytes,
        "the reads carried {carried} bytes of a {} byte file with holes",
        copy.file_bytes
    );
    source.end_checkpoint_copy(HOLDER);
    target.install_checkpoint_copy(&copy.entry).unwrap();
    assert_eq!(documents(&target, "app.users"), documents(&source, "app.users"));
    target.shutdown().unwrap();
    source.shutdown().unwrap();
}

#[test]
fn a_resumed_copy_cuts_what_it_wrote_after_its_offset() {
    let source_dir = tempfile::tempdir().unwrap();
    let source = open(source_dir.path());
    write_users(&source, 0, 500);
    let copy = source.begin_checkpoint_copy(HOLDER).unwrap();
    let target_dir = tempfile::tempdir().unwrap();
    let target = open(target_dir.path());
    let first = source.read_checkpoint_copy(HOLDER, &copy.id, 0, 64 * 1024).unwrap();
    target.write_staged_checkpoint(&first).unwrap();
    target.write_staged_checkpoint(&FilePiece::dense(first.span, vec![0xAB; 5000])).unwrap();
    target.sync_staged_checkpoint().unwrap();
    drop(target);
    // Restarted, it resumes at the length it had recorded (the first read).
    let target = open(target_dir.path());
    assert_eq!(target.staged_checkpoint_bytes().unwrap(), first.span + 5000);
    let mut offset = first.span;
    while offset < copy.file_bytes {
        let piece = source.read_checkpoint_copy(HOLDER, &copy.id, offset, 64 * 1024).unwrap();
        target.write_staged_checkpoint(&piece).unwrap();
        offset += piece.span;
    }
    target.sync_staged_checkpoint().unwrap();
    assert_eq!(target.staged_checkpoint_bytes().unwrap(), copy.file_bytes);
    target.install_checkpoint_copy(&copy.entry).unwrap();
    assert_eq!(documents(&target, "app.users"), documents(&source, "app.users"));
    target.shutdown().unwrap();
    source.shutdown().unwrap();
}

#[test]
fn a_checkpoint_with_history_past_the_commit_point_cannot_be_copied() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path(), 20);
    // Memory's bound is small, and the commit point stays at the first
    // write (a P-S-A set with its secondary down): checkpoints go past it.
    options.history_bytes_max = 64 * 1024;
    let source = Engine::open(options).unwrap();
    write_users(&source, 0, 1);
    let stalled = source.last_applied().ts;
    let mut writer = source.writer();
    for i in 1..2_000 {
        writer.insert("app.users", doc! {"_id": i, "email": format!("u{i}"), "pad": "x".repeat(300)}).unwrap();
    }
    drop(writer);
    source.wait_durable(source.last_applied().ts).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while source.checkpoint_timestamp() <= stalled {
        assert!(Instant::now() < deadline, "no checkpoint past the commit point");
        std::thread::sleep(Duration::from_millis(20));
    }
    let err = source.begin_checkpoint_copy(HOLDER).unwrap_err();
    assert!(
        matches!(&err, StorageError::IllegalOperation(message) if message.contains("holds history")),
        "{err:?}"
    );
    assert!(!source.checkpoint_copy_pinned(), "a refused copy pins nothing");
    source.shutdown().unwrap();
}
