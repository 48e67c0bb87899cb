//! File-copy initial sync (`initialSyncMethod: "fileCopyBased"`, the
//! default; MongoDB Enterprise has an option of that name): instead of
//! reading every document and inserting it again, the syncing member
//! copies the source's checkpoint file byte for byte, installs it, and
//! applies the source's oplog from the checkpoint's entry on. The file is
//! the source's state at one timestamp (storage's
//! `engine/checkpoint_copy.rs`), so the copy needs no idempotent repair
//! and no index builds: its indexes are in it.
//!
//! Member to member, `replSetCheckpointCopy` on `admin`:
//! - `{replSetCheckpointCopy: "begin", holder}`: the source checkpoints and
//!   pins its file; replies `{copyId, entry, fileBytes}` (`entry`: its
//!   journal entry at the checkpoint's timestamp);
//! - `{replSetCheckpointCopy: "read", holder, copyId, offset, length,
//!   sparse: true}`: `{data: BinData, span, extents: [[offset, length]]}`,
//!   the stretch's parts that hold data (the file's holes, half of a file
//!   redb just grew, are not sent; they read as zeros), at most
//!   `CHECKPOINT_COPY_READ_BYTES_MAX`; without `sparse`, `{data}` with
//!   every byte. Refused (code 20) once the file changed, then the copy
//!   cannot go on;
//! - `{replSetCheckpointCopy: "end", holder}`: the pin goes.
//!
//! The syncing member (`copy`):
//! 1. Begin on the source. A refusal (history past the commit point,
//!    nothing checkpointed, a member without the command) falls back to
//!    the logical copy (`SyncError::FileCopyUnavailable`).
//! 2. With a record of a copy of the same file from the same source
//!    (same copy id and rollback id): resume at the length both the record
//!    and the staged file hold. Otherwise drop anything copied before and
//!    record the new copy (log: "initial sync begins").
//! 3. Read the file `COPY_READ_BYTES` at a time, `READS_AHEAD` replies
//!    ahead of the writes; every `SYNC_EVERY_BYTES` sync the staged file,
//!    then record the bytes copied. A read refused because the file
//!    changed falls back to the logical copy too.
//! 4. Sync, install (`Engine::install_checkpoint_copy`), and record the
//!    phase `applying` from the checkpoint's entry to the source's newest
//!    entry (`minValid`): the ordinary oplog catch-up follows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bson::{doc, Bson, Document, RawDocumentBuf};
use slipstream_clock::OpTime;
use slipstream_consensus::MemberState;
use slipstream_storage::engine::CHECKPOINT_COPY_READ_BYTES_MAX;
use slipstream_storage::kv::FilePiece;
use slipstream_storage::StorageError;

use super::cloner::{blocking, save_progress};
use super::progress::{FileCopyRecord, Phase, Progress, Status};
use super::source;
use super::SyncError;
use crate::error::ReplError;
use crate::network::NetError;
use crate::protocol::{integral, optime_document, parse_optime};
use crate::replica_set::Shared;

/// Bytes one read asks for.
pub const COPY_READ_BYTES: usize = 8 * 1024 * 1024;
/// Replies read ahead of the one being written (each `COPY_READ_BYTES`).
pub const READS_AHEAD: usize = 2;
/// Bytes written between two syncs of the staged file and its record.
pub const SYNC_EVERY_BYTES: u64 = 64 * 1024 * 1024;

/// `initialSyncMethod`: whether a sync copies the source's checkpoint file
/// (`"fileCopyBased"`) or its documents (`"logical"`). Process-wide, as a
/// server parameter is.
static FILE_COPY_BASED: AtomicBool = AtomicBool::new(true);

pub const METHOD_FILE_COPY: &str = "fileCopyBased";
pub const METHOD_LOGICAL: &str = "logical";

/// The current `initialSyncMethod`.
pub fn method() -> &'static str {
    if FILE_COPY_BASED.load(Ordering::Acquire) {
        METHOD_FILE_COPY
    } else {
        METHOD_LOGICAL
    }
}

/// Sets `initialSyncMethod`; returns the previous value, or `None` for a
/// name that is neither method.
pub fn set_method(name: &str) -> Option<&'static str> {
    let file_copy = match name {
        METHOD_FILE_COPY => true,
        METHOD_LOGICAL => false,
        _ => return None,
    };
    let previous = FILE_COPY_BASED.swap(file_copy, Ordering::AcqRel);
    Some(if previous { METHOD_FILE_COPY } else { METHOD_LOGICAL })
}

/// The source's side: `replSetCheckpointCopy`.
pub async fn serve(shared: &Shared, body: &Document) -> Result<Document, ReplError> {
    let snapshot = shared.snapshot();
    if snapshot.config.is_none() {
        return Err(ReplError::NotYetInitialized);
    }
    let holder = super::oplog_hold::holder_of(body, "replSetCheckpointCopy")?.to_owned();
    let engine = shared.engine.clone();
    match body.get_str("replSetCheckpointCopy") {
        Ok("begin") => {
            // Only a member with a consistent state of its own is copied
            // (one in initial sync, rollback or recovery is not).
            if !matches!(snapshot.state, MemberState::Primary | MemberState::Secondary) {
                return Err(ReplError::NotPrimaryOrSecondary);
            }
            let copy = run_blocking(move || engine.begin_checkpoint_copy(&holder)).await?;
            let entry = Document::try_from(copy.entry.as_ref())
                .map_err(|err| ReplError::coded(8, format!("the checkpoint's entry: {err}")))?;
            Ok(doc! {
                "copyId": copy.id,
                "entry": entry,
                "optime": optime_document(copy.optime),
                "fileBytes": copy.file_bytes as i64,
            })
        }
        Ok("read") => {
            let id = body
                .get_str("copyId")
                .map_err(|_| ReplError::type_mismatch("replSetCheckpointCopy read needs a string 'copyId'"))?
                .to_owned();
            let offset = body.get("offset").and_then(integral).filter(|n| *n >= 0);
            let length = body
                .get("length")
                .and_then(integral)
                .filter(|n| (1..=CHECKPOINT_COPY_READ_BYTES_MAX as i64).contains(n));
            let (Some(offset), Some(length)) = (offset, length) else {
                return Err(ReplError::bad_value(format!(
                    "replSetCheckpointCopy read needs an 'offset' of at least 0 and a 'length' from 1 to {}",
                    CHECKPOINT_COPY_READ_BYTES_MAX
                )));
            };
            let sparse = match body.get("sparse") {
                None => false,
                Some(Bson::Boolean(sparse)) => *sparse,
                Some(_) => return Err(ReplError::type_mismatch("replSetCheckpointCopy read's 'sparse' must be a boolean")),
            };
            let piece =
                run_blocking(move || engine.read_checkpoint_copy(&holder, &id, offset as u64, length as usize))
                    .await?;
            Ok(piece_reply(piece, sparse))
        }
        Ok("end") => {
            engine.end_checkpoint_copy(&holder);
            Ok(Document::new())
        }
        _ => Err(ReplError::bad_value(
            "replSetCheckpointCopy takes \"begin\", \"read\" or \"end\"",
        )),
    }
}

/// A read's reply: with `sparse` (what this version's syncing members
/// ask), `{data, span, extents: [[offset, length], ...]}`, the data of the
/// extents only; without it (an older member), `{data}` with every byte of
/// the stretch, zeros in its holes.
fn piece_reply(piece: FilePiece, sparse: bool) -> Document {
    let binary = |bytes: Vec<u8>| Bson::Binary(bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes });
    if !sparse {
        return doc! {"data": binary(piece.to_dense())};
    }
    let extents: Vec<Bson> = piece
        .extents
        .iter()
        .map(|&(start, len)| Bson::Array(vec![Bson::Int64(start as i64), Bson::Int64(len as i64)]))
        .collect();
    doc! {"data": binary(piece.data), "span": piece.span as i64, "extents": extents}
}

/// A read reply's `data` where it arrived: the reply's buffer and the
/// binary's place in it, so that the piece is written without a copy.
struct ReplyData {
    reply: Vec<u8>,
    at: std::ops::Range<usize>,
}

impl AsRef<[u8]> for ReplyData {
    fn as_ref(&self) -> &[u8] {
        &self.reply[self.at.clone()]
    }
}

/// The piece a read's reply carries for `[offset, offset + expected)`: the
/// sparse form, or a dense `data` from a source that sends every byte.
/// `None` when the reply is not such a piece.
fn reply_piece(reply: RawDocumentBuf, offset: u64, expected: u64) -> Option<FilePiece<ReplyData>> {
    let data = reply.get_binary("data").ok()?.bytes;
    // `data` borrows from the reply's buffer: its place there.
    let start = data.as_ptr() as usize - reply.as_bytes().as_ptr() as usize;
    let at = start..start + data.len();
    // `None`: a dense reply, every byte of the stretch in `data`.
    let sparse = match reply.get_array("extents") {
        Err(_) => None,
        Ok(extents) => {
            let span = reply.get("span").ok().flatten().and_then(|span| span.as_i64().or(span.as_i32().map(i64::from)))?;
            let mut parsed = Vec::new();
            for extent in extents {
                let pair = extent.ok()?.as_array()?;
                let mut numbers = pair.into_iter().map(|n| n.ok().and_then(|n| n.as_i64()));
                let (Some(Some(start)), Some(Some(len)), None) = (numbers.next(), numbers.next(), numbers.next()) else {
                    return None;
                };
                parsed.push((u64::try_from(start).ok()?, u64::try_from(len).ok()?));
            }
            Some((u64::try_from(span).ok()?, parsed))
        }
    };
    let data = ReplyData { reply: reply.into_bytes(), at };
    let piece = match sparse {
        None => FilePiece::dense(offset, data),
        Some((span, extents)) => FilePiece { offset, span, extents, data },
    };
    (piece.span == expected && piece.is_well_formed()).then_some(piece)
}

async fn run_blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, ReplError> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|err| ReplError::coded(1, format!("checkpoint copy task: {err}")))?
        .map_err(|err| match err {
            // What the syncing member takes as "copy logically instead".
            StorageError::IllegalOperation(message) => ReplError::IllegalOperation(message),
            other => ReplError::from(other),
        })
}

/// What `begin` answered.
struct Begun {
    id: String,
    entry: RawDocumentBuf,
    optime: OpTime,
    file_bytes: u64,
}

/// Whether a source's refusal means it cannot serve a checkpoint copy at
/// all (the logical copy then runs) rather than a failure to retry.
fn unavailable(err: NetError) -> SyncError {
    match err {
        // IllegalOperation (history, nothing checkpointed, the file changed),
        // CommandNotFound and CommandNotSupported (a member without it).
        // NotPrimaryOrSecondary (13436) is left to the retry: the member
        // was a candidate a moment ago.
        NetError::Command { code: 20 | 59 | 115, message, .. } => SyncError::FileCopyUnavailable(message),
        other => SyncError::Source(other),
    }
}

async fn begin(shared: &Arc<Shared>, host: &str) -> Result<Begun, SyncError> {
    let body = doc! {"replSetCheckpointCopy": "begin", "holder": shared.me_host()};
    let reply = source::command(shared, host, "admin", body).await.map_err(unavailable)?;
    let entry = reply
        .get_document("entry")
        .map_err(|_| SyncError::protocol("replSetCheckpointCopy begin"))?;
    let entry = RawDocumentBuf::try_from(entry).map_err(|_| SyncError::protocol("replSetCheckpointCopy entry"))?;
    let optime =
        parse_optime(reply.get("optime"), "optime").map_err(|_| SyncError::protocol("replSetCheckpointCopy optime"))?;
    let file_bytes = reply
        .get("fileBytes")
        .and_then(integral)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| SyncError::protocol("replSetCheckpointCopy fileBytes"))?;
    let id = reply
        .get_str("copyId")
        .map_err(|_| SyncError::protocol("replSetCheckpointCopy copyId"))?
        .to_owned();
    Ok(Begun {
        id,
        entry,
        optime,
        file_bytes,
    })
}

/// Releases the pin on `host` (after the oplog hold that follows is in
/// place); a failure only leaves it to lapse.
pub async fn end(shared: &Arc<Shared>, host: &str) {
    let body = doc! {"replSetCheckpointCopy": "end", "holder": shared.me_host()};
    if let Err(err) = source::command(shared, host, "admin", body).await {
        tracing::debug!(target: "repl", source = host, error = %err, "initial sync could not end its checkpoint copy");
    }
}

/// Steps 1 to 4 (module doc); returns the record in the phase `applying`.
pub async fn copy(
    shared: &Arc<Shared>,
    status: &Status,
    host: &str,
    rbid: i32,
    recorded: Option<Progress>,
) -> Result<Progress, SyncError> {
    let engine = shared.engine.clone();
    let recorded = recorded.filter(|progress| progress.phase == Phase::CopyingFile);
    if let Some(progress) = &recorded {
        if !engine.last_applied().is_null() {
            // Installed, and a crash came before the record said so.
            return applying(shared, host, progress.clone(), engine.last_applied()).await;
        }
    }
    let begun = begin(shared, host).await?;
    let resumed = recorded.filter(|progress| {
        progress.source == host
            && progress.source_rbid == rbid
            && progress.file_copy.as_ref().is_some_and(|copy| copy.id == begun.id)
    });
    let (mut progress, mut offset) = match resumed {
        Some(progress) => {
            let staged = blocking({
                let engine = engine.clone();
                move || engine.staged_checkpoint_bytes()
            })
            .await?;
            let copied = progress.file_copy.as_ref().map_or(0, |copy| copy.copied);
            let offset = copied.min(staged);
            tracing::info!(target: "repl", id = 21_204, source = host, offset, file_bytes = begun.file_bytes,
                "resuming initial sync's checkpoint copy at byte {offset} of {}", begun.file_bytes);
            (progress, offset)
        }
        None => (start_over(shared, host, rbid, &begun).await?, 0),
    };
    status.set_total_bytes(begun.file_bytes);
    status.resumed_with(0, offset);
    // A test's small steps: `initialSyncHangAfterBatch`'s `batchBytes`.
    let step = super::cloner::test_data(shared, "batchBytes")
        .map_or(COPY_READ_BYTES as u64, |bytes| bytes as u64);
    let sync_every = if step < COPY_READ_BYTES as u64 { step } else { SYNC_EVERY_BYTES };
    let mut reads = Reads::start(shared.clone(), host.to_owned(), begun.id.clone(), offset, begun.file_bytes, step);
    let mut unsynced = 0u64;
    // What crossed the network: the file less its holes.
    let mut transferred = 0u64;
    while offset < begun.file_bytes {
        let expected = (begun.file_bytes - offset).min(step);
        let reply = match reads.next().await {
            Some(reply) => reply?,
            None => return Err(SyncError::protocol("replSetCheckpointCopy read (the reader stopped)")),
        };
        let Some(piece) = reply_piece(reply, offset, expected) else {
            return Err(SyncError::protocol("replSetCheckpointCopy read (not the bytes asked for)"));
        };
        transferred += piece.data.as_ref().len() as u64;
        let written = piece.span;
        blocking({
            let engine = engine.clone();
            move || engine.write_staged_checkpoint(&piece)
        })
        .await?;
        offset += written;
        unsynced += written;
        status.file_bytes_copied(written);
        if unsynced >= sync_every || offset >= begun.file_bytes {
            unsynced = 0;
            record_copied(shared, &mut progress, offset).await?;
            super::cloner::hang_after_batch(shared, "checkpoint").await;
        }
    }
    drop(reads);
    let entry = begun.entry;
    let installed = blocking(move || engine.install_checkpoint_copy(&entry)).await?;
    tracing::info!(target: "repl", id = 21_173, source = host, file_bytes = begun.file_bytes, transferred_bytes = transferred,
        checkpoint = ?installed, "initial sync installed the source's checkpoint copy; applying the oplog");
    applying(shared, host, progress, installed).await
}

/// Step 2 without a copy to resume.
async fn start_over(shared: &Arc<Shared>, host: &str, rbid: i32, begun: &Begun) -> Result<Progress, SyncError> {
    if !shared.engine.last_applied().is_null() {
        return Err(SyncError::Storage(StorageError::IllegalOperation(
            "initial sync cannot start over after applying entries; resync with an empty data directory".into(),
        )));
    }
    let engine = shared.engine.clone();
    blocking(move || {
        engine.bulk_reset()?;
        engine.discard_staged_checkpoint()
    })
    .await?;
    let copy = FileCopyRecord {
        id: begun.id.clone(),
        file_bytes: begun.file_bytes,
        copied: 0,
    };
    let progress = Progress::file_copy(host.to_owned(), rbid, begun.optime, copy);
    save_progress(shared, progress.clone()).await?;
    tracing::info!(target: "repl", id = 21_173, source = host, rbid, method = METHOD_FILE_COPY,
        checkpoint = ?begun.optime, file_bytes = begun.file_bytes, "initial sync begins");
    Ok(progress)
}

/// Step 3's sync and record.
async fn record_copied(shared: &Arc<Shared>, progress: &mut Progress, copied: u64) -> Result<(), SyncError> {
    let engine = shared.engine.clone();
    blocking(move || engine.sync_staged_checkpoint()).await?;
    if let Some(copy) = progress.file_copy.as_mut() {
        copy.copied = copied;
    }
    save_progress(shared, progress.clone()).await
}

/// Step 4's record: the oplog is applied from `installed` to the source's
/// newest entry.
async fn applying(
    shared: &Arc<Shared>,
    host: &str,
    mut progress: Progress,
    installed: OpTime,
) -> Result<Progress, SyncError> {
    let end = source::last_entry(shared, host).await?;
    progress.phase = Phase::Applying;
    progress.begin = installed;
    progress.max_seen = installed.ts;
    progress.min_valid = end.ts.max(installed.ts);
    progress.file_copy = None;
    save_progress(shared, progress.clone()).await?;
    Ok(progress)
}

/// Reads the file on its own task, `READS_AHEAD` replies ahead of the
/// writes; stops when dropped.
struct Reads {
    replies: tokio::sync::mpsc::Receiver<Result<RawDocumentBuf, SyncError>>,
    task: tokio::task::JoinHandle<()>,
}

impl Reads {
    fn start(shared: Arc<Shared>, host: String, id: String, from: u64, file_bytes: u64, step: u64) -> Reads {
        let (sender, replies) = tokio::sync::mpsc::channel(READS_AHEAD);
        let task = tokio::spawn(async move {
            let mut offset = from;
            while offset < file_bytes {
                let length = (file_bytes - offset).min(step);
                let body = doc! {
                    "replSetCheckpointCopy": "read", "holder": shared.me_host(), "copyId": &id,
                    "offset": offset as i64, "length": length as i64, "sparse": true,
                };
                let reply = source::command_raw(&shared, &host, "admin", body).await.map_err(unavailable);
                let failed = reply.is_err();
                if sender.send(reply).await.is_err() || failed {
                    return;
                }
                offset += length;
            }
        });
        Reads { replies, task }
    }

    async fn next(&mut self) -> Option<Result<RawDocumentBuf, SyncError>> {
        self.replies.recv().await
    }
}

impl Drop for Reads {
    fn drop(&mut self) {
        self.task.abort();
    }
}
