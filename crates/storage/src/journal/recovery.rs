//! Opening a journal: scan every segment that has no usable index file,
//! check every frame, cut a torn tail, refuse anything else.
//!
//! Steps (a crash between any two leaves a journal this scan accepts):
//! 1. List `oplog-<seq>.seg` files; their sequence numbers must be
//!    consecutive (a gap means a lost segment: corruption).
//! 2. For each segment in order: a sealed one (not the last) whose index
//!    file passes its checks (`index_file.rs`) is taken from it unread.
//!    Any other is read piece by piece while it holds only valid frames
//!    and then zeros (`clean_scan.rs`); if it holds anything else it is
//!    read whole: check the header, then walk the frames:
//!    each must be whole, pass its CRC, and carry a timestamp above the one
//!    before it (across segments too).
//!    A frame that fails where the rest of the file is zero is where the
//!    segment's frames end (a preallocated segment, `segment.rs`): a
//!    frame's length field is at least 5, so its first four bytes are
//!    never all zero. This holds in every segment.
//! 3. The first frame that fails in the LAST segment is a torn tail when no
//!    valid frame starts after the end it declares: the group commit
//!    appends at the end only, so a crash can leave a partial or garbled
//!    frame at the end but never a good frame after a bad one. Offsets
//!    inside the bad frame do not count, because its payload is a user's
//!    document and may hold bytes that form a valid frame; so a frame that
//!    runs past the end of the file is a torn tail. The torn bytes are cut
//!    (the file is shortened to the bad frame) or, when zeros follow them
//!    (a preallocated segment), overwritten with zeros, so that the segment
//!    keeps its size; then it is fsynced and the cut is logged. Only bytes
//!    before the last nonzero one can start a valid frame, so the search
//!    stops there. A last segment whose header
//!    is torn and that holds no valid frame was being created when the
//!    process died (frames are written only after the header is fsynced):
//!    it is removed.
//! 4. Any other failure (in an earlier segment, or with a valid frame after
//!    it) is corruption: open fails naming the file and the offset.
//! 5. A leftover spare file (`SPARE_FILE_NAME`: the next segment being
//!    zero-filled, finished or not, when the process stopped) is removed;
//!    the journal prepares a new one when it needs it.
//! 6. Index files of no sealed segment (the last segment's, which may take
//!    more frames, or a segment's the size cap deleted) are removed; one
//!    that failed its checks is left for the indexer to replace.
//!
//! No length read from a file is trusted before it is checked: a segment
//! file larger than any the journal writes is refused before it is read,
//! and a frame's length is checked against its range and the bytes present
//! before anything is read or computed over it (`frame.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::io::{IoBackend, IoFile};
use crate::journal::clean_scan;
use crate::journal::frame::{check_frame, is_valid_frame_start, FrameCheck, FRAME_HEADER_BYTES};
use crate::journal::index::Location;
use crate::journal::index_file::{parse_index_file_name, read_index_file, remove_index_file, SegmentIndex};
use crate::journal::frame::{ENTRY_BYTES_MAX, ENTRY_BYTES_MIN};
use crate::journal::segment::{
    check_header, parse_segment_file_name, segment_path, SEGMENT_FILE_BYTES_MAX, SEGMENT_HEADER_BYTES,
    SPARE_FILE_NAME,
};
use crate::{StorageError, Timestamp};

/// One segment as found on disk.
pub struct RecoveredSegment {
    pub seq: u64,
    pub path: PathBuf,
    pub file: Arc<dyn IoFile>,
    /// Where its frames end (after any torn tail was cut).
    pub end: u64,
    /// The file's length after any torn tail was cut: above `end` when the
    /// segment was preallocated.
    pub file_bytes: u64,
    pub first_ts: Option<Timestamp>,
    pub last_ts: Option<Timestamp>,
    /// Taken from its index file, unread (its frames were fsynced before
    /// the index was written).
    pub from_index: bool,
}

/// What the scan found.
pub struct Recovered {
    pub segments: Vec<RecoveredSegment>,
    pub entries: Vec<(Timestamp, Location)>,
    /// Bytes cut from a torn tail (0 if none).
    pub torn_bytes_cut: u64,
    /// Segments read and checked frame by frame.
    pub segments_scanned: u64,
}

fn io_error(path: &Path, what: &str, err: std::io::Error) -> StorageError {
    StorageError::Io(std::io::Error::new(err.kind(), format!("{what} {}: {err}", path.display())))
}

fn corruption(path: &Path, offset: u64, reason: &str) -> StorageError {
    StorageError::Corruption(format!("{} at offset {offset}: {reason}", path.display()))
}

/// The first offset at or after `from` and below `dirty_end` (past the
/// last nonzero byte, where no frame can start) at which a valid frame
/// starts, if any.
fn find_valid_frame_after(data: &[u8], from: usize, dirty_end: usize) -> Option<usize> {
    let last_start = data.len().checked_sub(FRAME_HEADER_BYTES)?.min(dirty_end);
    (from..last_start).find(|&start| is_valid_frame_start(&data[start..]))
}

/// The offset just past the last nonzero byte of `data` (0 if all zero):
/// zero blocks skipped from the end a word at a time, then byte by byte.
fn dirty_end(data: &[u8]) -> usize {
    const BLOCK_BYTES: usize = 256;
    let mut end = data.len();
    while end >= BLOCK_BYTES && clean_scan::all_zero(&data[end - BLOCK_BYTES..end]) {
        end -= BLOCK_BYTES;
    }
    data[..end].iter().rposition(|&byte| byte != 0).map_or(0, |last| last + 1)
}

fn read_u32_le(bytes: &[u8]) -> usize {
    u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize
}

fn is_plausible_payload_len(len: usize) -> bool {
    (ENTRY_BYTES_MIN..=ENTRY_BYTES_MAX).contains(&len)
}

/// Where a valid frame starts after the bad frame at `offset` of the last
/// segment, if one does: then the damage is not a torn tail.
///
/// Only offsets after the end the bad frame declares are candidates: its
/// payload is a user's document, which may hold bytes forming a valid
/// frame. A frame that runs past the end of the file therefore has nothing
/// after it. Two refinements keep damage from hiding behind that rule:
/// - a length field that disagrees with the payload's own leading length
///   was damaged (the journal writes them equal); if a valid frame starts
///   where the payload says the frame ends, that is corruption;
/// - a length field out of range tells nothing: the payload's length is
///   used if plausible, otherwise every later offset is a candidate.
fn valid_frame_after_bad_one(data: &[u8], offset: usize, dirty_end: usize) -> Option<usize> {
    let frame = &data[offset..];
    if frame.len() < FRAME_HEADER_BYTES {
        return None;
    }
    let declared = read_u32_le(&frame[0..4]);
    let payload_declared = frame
        .get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + 4)
        .map(read_u32_le)
        .filter(|len| is_plausible_payload_len(*len));
    if let Some(payload_len) = payload_declared.filter(|len| *len != declared) {
        let end = offset + FRAME_HEADER_BYTES + payload_len;
        if end < data.len() && is_valid_frame_start(&data[end..]) {
            return Some(end);
        }
    }
    let search_from = if is_plausible_payload_len(declared) {
        offset + FRAME_HEADER_BYTES + declared
    } else if let Some(payload_len) = payload_declared {
        offset + FRAME_HEADER_BYTES + payload_len
    } else {
        offset + 1
    };
    find_valid_frame_after(data, search_from, dirty_end)
}

pub fn recover(dir: &Path, io: &Arc<dyn IoBackend>) -> Result<Recovered, StorageError> {
    let created = !io.exists(dir).map_err(|err| io_error(dir, "looking for the journal directory", err))?;
    io.create_dir_all(dir).map_err(|err| io_error(dir, "creating journal directory", err))?;
    if created {
        // The directory's own name must be durable before any entry in it
        // is called durable.
        let parent = dir.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
        io.sync_dir(parent).map_err(|err| io_error(parent, "fsyncing", err))?;
    }
    let names = io.list_dir(dir).map_err(|err| io_error(dir, "listing journal directory", err))?;
    if names.iter().any(|name| name == SPARE_FILE_NAME) {
        // Its name was never made durable on purpose; removing it needs no
        // directory fsync either.
        let spare = dir.join(SPARE_FILE_NAME);
        io.remove_file(&spare).map_err(|err| io_error(&spare, "removing the leftover spare segment", err))?;
    }
    let index_files: Vec<u64> = names.iter().filter_map(|name| parse_index_file_name(name)).collect();
    let mut seqs: Vec<u64> = names.iter().filter_map(|name| parse_segment_file_name(name)).collect();
    seqs.sort_unstable();
    for pair in seqs.windows(2) {
        if pair[1] != pair[0] + 1 {
            return Err(StorageError::Corruption(format!(
                "journal segment {} is missing between {} and {} in {}",
                pair[0] + 1,
                pair[0],
                pair[1],
                dir.display()
            )));
        }
    }

    let mut recovered = Recovered { segments: Vec::new(), entries: Vec::new(), torn_bytes_cut: 0, segments_scanned: 0 };
    let mut previous_ts: Option<Timestamp> = None;
    for (position, &seq) in seqs.iter().enumerate() {
        let is_last = position + 1 == seqs.len();
        let path = segment_path(dir, seq);
        let file = io.open(&path).map_err(|err| io_error(&path, "opening journal segment", err))?;
        if !is_last && index_files.contains(&seq) {
            if let Some(index) = usable_index(dir, io, &path, &*file, seq, previous_ts) {
                previous_ts = Some(index.last_ts());
                recovered.entries.extend(
                    index.with_offsets().map(|(ts, offset, len)| (ts, Location { seq, offset, len })),
                );
                recovered.segments.push(RecoveredSegment {
                    seq,
                    path,
                    file,
                    end: index.end,
                    file_bytes: index.file_bytes,
                    first_ts: Some(index.first_ts()),
                    last_ts: Some(index.last_ts()),
                    from_index: true,
                });
                continue;
            }
        }
        recovered.segments_scanned += 1;
        let len = file.size_bytes().map_err(|err| io_error(&path, "reading the length of", err))?;
        if len > SEGMENT_FILE_BYTES_MAX {
            let limit = SEGMENT_FILE_BYTES_MAX;
            let reason = format!("the file is {len} bytes, larger than any segment the journal writes ({limit} bytes)");
            return Err(corruption(&path, 0, &reason));
        }
        let clean = clean_scan::scan(&*file, len, seq, previous_ts).map_err(|err| io_error(&path, "reading", err))?;
        if let Some(clean) = clean {
            previous_ts = clean.last_ts.or(previous_ts);
            recovered.entries.extend(clean.entries);
            recovered.segments.push(RecoveredSegment {
                seq,
                path,
                file,
                end: clean.end,
                file_bytes: len,
                first_ts: clean.first_ts,
                last_ts: clean.last_ts,
                from_index: false,
            });
            continue;
        }
        let mut data = vec![0u8; len as usize];
        file.read_exact_at(&mut data, 0).map_err(|err| io_error(&path, "reading", err))?;

        let dirty_end = dirty_end(&data);
        if let Err(reason) = check_header(&data, seq) {
            if is_last && find_valid_frame_after(&data, 0, dirty_end).is_none() {
                tracing::warn!(
                    target: "journal",
                    file = %path.display(),
                    reason = %reason,
                    "removing a journal segment whose creation was interrupted"
                );
                drop(file);
                io.remove_file(&path).map_err(|err| io_error(&path, "removing torn segment", err))?;
                io.sync_dir(dir).map_err(|err| io_error(dir, "fsyncing", err))?;
                // Only the bytes that held anything count: a spare renamed into
                // place and never written is all zeros.
                recovered.torn_bytes_cut += dirty_end as u64;
                continue;
            }
            return Err(corruption(&path, 0, &reason));
        }

        let scan = FrameScan { path: &path, seq, data: &data, dirty_end, is_last };
        let segment = scan_frames(&scan, &mut previous_ts, &mut recovered.entries)?;
        let mut file_bytes = len;
        if let Some((offset, reason)) = segment.torn_at {
            file_bytes = cut_torn_tail(&path, &file, offset, dirty_end as u64, len, &reason)?;
            recovered.torn_bytes_cut += dirty_end as u64 - offset;
        }
        recovered.segments.push(RecoveredSegment {
            seq,
            path,
            file,
            end: segment.end,
            file_bytes,
            first_ts: segment.first_ts,
            last_ts: segment.last_ts,
            from_index: false,
        });
    }
    remove_stray_index_files(dir, io, &index_files, &recovered.segments);
    Ok(recovered)
}

/// The index of sealed segment `seq` if its file passes every check
/// (`index_file.rs`); otherwise None, logged: the segment is scanned.
fn usable_index(
    dir: &Path,
    io: &Arc<dyn IoBackend>,
    path: &Path,
    file: &dyn IoFile,
    seq: u64,
    previous_ts: Option<Timestamp>,
) -> Option<SegmentIndex> {
    let checked = read_index_file(io, dir, seq).and_then(|index| match index {
        Some(index) => index.check_against(file, previous_ts).map(|()| Some(index)),
        None => Ok(None),
    });
    match checked {
        Ok(index) => index,
        Err(reason) => {
            tracing::warn!(
                target: "journal",
                file = %path.display(),
                reason = %reason,
                "the segment's index file cannot be used; scanning the segment"
            );
            None
        }
    }
}

/// Removes index files that belong to no sealed segment: the last
/// segment's (it may take more frames) and those of segments no longer
/// there. Best effort: one left behind fails its checks at a later open.
fn remove_stray_index_files(dir: &Path, io: &Arc<dyn IoBackend>, index_files: &[u64], segments: &[RecoveredSegment]) {
    let last = segments.last().map(|segment| segment.seq);
    for &seq in index_files {
        let sealed = segments.iter().any(|segment| segment.seq == seq) && Some(seq) != last;
        if sealed {
            continue;
        }
        if let Err(err) = remove_index_file(io, dir, seq) {
            tracing::warn!(target: "journal", seq, error = %err, "removing a stray segment index file failed");
        }
    }
}

/// Removes the torn bytes `[offset, dirty_end)` of a last segment that is
/// `len` bytes long, durably; returns the file's new length. A segment
/// with zeros after them (preallocated) keeps its size: the torn bytes are
/// overwritten with zeros, so that appends go on overwriting.
fn cut_torn_tail(
    path: &Path,
    file: &Arc<dyn IoFile>,
    offset: u64,
    dirty_end: u64,
    len: u64,
    reason: &str,
) -> Result<u64, StorageError> {
    assert!(offset < dirty_end);
    assert!(dirty_end <= len);
    tracing::warn!(
        target: "journal",
        file = %path.display(),
        offset,
        bytes_cut = dirty_end - offset,
        reason = %reason,
        "cutting a torn tail off the journal"
    );
    let file_bytes = if dirty_end < len {
        let zeros = vec![0u8; (dirty_end - offset) as usize];
        file.write_all_at(&zeros, offset).map_err(|err| io_error(path, "zeroing the torn tail of", err))?;
        len
    } else {
        file.set_len(offset).map_err(|err| io_error(path, "truncating torn tail of", err))?;
        offset
    };
    file.sync_all().map_err(|err| io_error(path, "fsyncing", err))?;
    Ok(file_bytes)
}

/// One segment's bytes as `scan_frames` reads them.
struct FrameScan<'a> {
    path: &'a Path,
    seq: u64,
    data: &'a [u8],
    /// Past the last nonzero byte of `data`.
    dirty_end: usize,
    is_last: bool,
}

struct ScannedSegment {
    first_ts: Option<Timestamp>,
    last_ts: Option<Timestamp>,
    /// Where the segment's frames end (a torn tail starts there).
    end: u64,
    /// Where a torn tail starts, and why the frame there failed.
    torn_at: Option<(u64, String)>,
}

fn scan_frames(
    scan: &FrameScan<'_>,
    previous_ts: &mut Option<Timestamp>,
    entries: &mut Vec<(Timestamp, Location)>,
) -> Result<ScannedSegment, StorageError> {
    let FrameScan { path, seq, data, dirty_end, is_last } = *scan;
    let mut scanned = ScannedSegment { first_ts: None, last_ts: None, end: data.len() as u64, torn_at: None };
    let mut offset = SEGMENT_HEADER_BYTES as usize;
    while offset < data.len() {
        let reason = match check_frame(&data[offset..]) {
            FrameCheck::Valid { ts, payload_len } => {
                if let Some(previous) = *previous_ts {
                    if ts <= previous {
                        return Err(corruption(
                            path,
                            offset as u64,
                            &format!("timestamp {ts} does not follow {previous}"),
                        ));
                    }
                }
                *previous_ts = Some(ts);
                scanned.first_ts.get_or_insert(ts);
                scanned.last_ts = Some(ts);
                entries.push((ts, Location { seq, offset: offset as u64, len: payload_len as u32 }));
                offset += FRAME_HEADER_BYTES + payload_len;
                continue;
            }
            FrameCheck::Incomplete => "the frame runs past the end of the file".to_string(),
            FrameCheck::Bad(reason) => reason,
        };
        scanned.end = offset as u64;
        if offset >= dirty_end {
            // Only zeros from here: the preallocated rest of the segment.
            break;
        }
        if !is_last {
            return Err(corruption(path, offset as u64, &format!("{reason} (not the last segment)")));
        }
        if let Some(valid) = valid_frame_after_bad_one(data, offset, dirty_end) {
            return Err(corruption(
                path,
                offset as u64,
                &format!("{reason}, and a valid frame follows at offset {valid}: not a torn tail"),
            ));
        }
        scanned.torn_at = Some((offset as u64, reason));
        break;
    }
    Ok(scanned)
}
