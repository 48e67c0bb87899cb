//! The file I/O backend behind the journal.
//!
//! The journal never touches `std::fs` directly: it goes through
//! `IoBackend` and `IoFile`, so that tests can put `FaultyIo` in between
//! and make the Nth write or fsync fail, then simulate a crash that loses
//! everything that was not fsynced (as redb's crash-consistency tests do).
//!
//! `StdIo` is the real implementation: positional reads and writes
//! (`pread`/`pwrite`) on `std::fs::File`, `fdatasync` through
//! `File::sync_data`, and an fsync of the directory after files are created,
//! renamed or removed. The local documents (`local_store.rs`) go through
//! it too.
//!
//! `FaultyIo` is public (not `cfg(test)`) so that integration tests and the
//! engine's own tests can use it; nothing in the server should. Tests that
//! let it fail something open the journal with
//! `PoisonPolicy::RefuseLaterCalls`, or the process would abort.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

/// One open file. Every method is positional, so one handle can be shared
/// by the group-commit thread (writing) and readers (reading) at once.
pub trait IoFile: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `offset` (an error if the file is
    /// shorter).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// `fdatasync`: the data written so far (and the size, if it grew) is
    /// on stable storage when this returns.
    fn sync_data(&self) -> io::Result<()>;
    /// `fsync`: data and every metadata change (used after `set_len`).
    fn sync_all(&self) -> io::Result<()>;
    /// Writes the file's dirty pages to the device and waits for them
    /// (`sync_file_range`), without flushing the device's cache or the
    /// file's metadata: NOT a durability point. The checkpoint calls it
    /// every few megabytes so that its final fsync, which the journal's
    /// fsyncs queue behind on the same file system, has little left to do.
    fn write_back(&self) -> io::Result<()>;
    fn size_bytes(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// The stretches of `[offset, offset + len)` that hold data, in order,
    /// as `(offset, length)`; the rest of the range (within the file's
    /// size) reads as zeros: holes, such as what `set_len` adds until it is
    /// written. A backend that cannot tell answers the whole range, clipped
    /// to the file's size. A copy of a sparse file reads and sends only
    /// these (`engine/checkpoint_copy.rs`).
    fn data_extents(&self, offset: u64, len: u64) -> io::Result<Vec<(u64, u64)>> {
        Ok(whole_range(offset, len, self.size_bytes()?))
    }
}

/// `[offset, offset + len)` clipped to `size`, as one extent (none if empty).
fn whole_range(offset: u64, len: u64, size: u64) -> Vec<(u64, u64)> {
    let end = offset.saturating_add(len).min(size);
    if offset < end {
        vec![(offset, end - offset)]
    } else {
        Vec::new()
    }
}

/// The file system as the journal sees it.
pub trait IoBackend: Send + Sync {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// The names of the regular files directly inside `dir`.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn IoFile>>;
    /// Creates a new file for reading and writing (an error if it exists).
    fn create(&self, path: &Path) -> io::Result<Arc<dyn IoFile>>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to` atomically if it exists; the
    /// new name is durable once the directory is fsynced.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// fsyncs the directory itself, so that created and removed names
    /// survive a crash.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates `path` (an error if it exists) holding `len` zero bytes that
    /// are written and fsynced, so that later writes inside it change
    /// neither the file's size nor its block map (the journal's spare
    /// segment). The name is not made durable: the caller renames the file
    /// into place and fsyncs the directory then. Checks `cancelled` between
    /// pieces of `ZERO_FILL_PIECE_BYTES`; when it turns true the file is
    /// removed and the answer is false.
    fn create_zeroed(&self, path: &Path, len: u64, cancelled: &dyn Fn() -> bool) -> io::Result<bool>;
    /// Creates `path` (an error if it exists) holding `bytes`, without any
    /// fsync: for a file whose loss or tearing costs only time, because
    /// its reader checks it whole (a journal segment's index file).
    fn write_unsynced_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Opens an existing file for writing that bypasses the page cache
    /// (`O_DIRECT`): every write's buffer address, offset and length must
    /// be multiples of `DIRECT_IO_ALIGN`. `None` when the backend or the
    /// file system has no such mode (the caller then writes through
    /// `open`). A bulk copy written this way saves the kernel's copy of
    /// every byte into the page cache, the most of a copy's CPU here.
    fn open_direct(&self, _path: &Path) -> io::Result<Option<Arc<dyn IoFile>>> {
        Ok(None)
    }
}

/// The alignment `open_direct` writes need (the largest logical block
/// size of the devices in use; 4096 covers them).
pub const DIRECT_IO_ALIGN: usize = 4096;

/// Zeros written per call by `create_zeroed`, and how often it looks
/// whether it was cancelled.
pub const ZERO_FILL_PIECE_BYTES: usize = 1024 * 1024;

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdIo;

impl StdIo {
    /// The real file system as a shared backend (what every caller wants;
    /// `StdIo` itself holds nothing).
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> Arc<dyn IoBackend> {
        Arc::new(StdIo)
    }
}

struct StdFile {
    file: File,
}

impl IoFile for StdFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn write_back(&self) -> io::Result<()> {
        write_back_range(&self.file, 0, 0)
    }

    fn size_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn data_extents(&self, offset: u64, len: u64) -> io::Result<Vec<(u64, u64)>> {
        let size = self.size_bytes()?;
        let end = offset.saturating_add(len).min(size);
        let fd = self.file.as_raw_fd();
        // `lseek` moves the descriptor's offset, which nothing here uses:
        // every read and write names its own (pread, pwrite).
        let seek = |from: u64, whence: libc::c_int| -> io::Result<Option<u64>> {
            // SAFETY: lseek on a descriptor we own; it touches no memory.
            let at = unsafe { libc::lseek(fd, from as libc::off_t, whence) };
            if at >= 0 {
                return Ok(Some(at as u64));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                // No data at or after `from`.
                Some(libc::ENXIO) => Ok(None),
                _ => Err(err),
            }
        };
        let mut extents = Vec::new();
        let mut at = offset;
        while at < end {
            let data = match seek(at, libc::SEEK_DATA) {
                Ok(Some(data)) => data,
                Ok(None) => break,
                // A file system without SEEK_DATA: all of it is data.
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => return Ok(whole_range(offset, len, size)),
                Err(err) => return Err(err),
            };
            if data >= end {
                break;
            }
            // Every file ends in a (virtual) hole, so SEEK_HOLE finds one.
            let hole = seek(data, libc::SEEK_HOLE)?.unwrap_or(end).min(end);
            extents.push((data, hole - data));
            at = hole;
        }
        Ok(extents)
    }
}

/// `sync_file_range` over `len` bytes at `offset` (0 bytes: to the end of
/// the file): writes those dirty pages to the device and waits for them,
/// without flushing the device's cache or the file's metadata.
fn write_back_range(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: sync_file_range on a descriptor we own; it touches no memory
    // of ours.
    let result = unsafe { libc::sync_file_range(file.as_raw_fd(), offset as libc::off64_t, len as libc::off64_t, flags) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl IoBackend for StdIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                if let Some(name) = entry.file_name().to_str() {
                    names.push(name.to_string());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn IoFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(StdFile { file }))
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn IoFile>> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        Ok(Arc::new(StdFile { file }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn open_direct(&self, path: &Path) -> io::Result<Option<Arc<dyn IoFile>>> {
        use std::os::unix::fs::OpenOptionsExt;
        match OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path) {
            Ok(file) => Ok(Some(Arc::new(StdFile { file }))),
            // tmpfs and some others refuse the flag.
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => Ok(None),
            Err(err) => Err(err),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn write_unsynced_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write;
        OpenOptions::new().write(true).create_new(true).open(path)?.write_all(bytes)
    }

    fn create_zeroed(&self, path: &Path, len: u64, cancelled: &dyn Fn() -> bool) -> io::Result<bool> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        let zeros = vec![0u8; ZERO_FILL_PIECE_BYTES];
        let mut offset = 0;
        while offset < len {
            if cancelled() {
                drop(file);
                std::fs::remove_file(path)?;
                return Ok(false);
            }
            let piece = zeros.len().min((len - offset) as usize);
            file.write_all_at(&zeros[..piece], offset)?;
            offset += piece as u64;
            // Written back piece by piece: one final fsync of the whole
            // file would put it all in the device's queue at once, ahead of
            // the journal's own fsyncs on the same disk.
            write_back_range(&file, offset - piece as u64, piece as u64)?;
        }
        // Data and size both: the point is that nothing about the file
        // changes when it is overwritten later.
        file.sync_all()?;
        Ok(true)
    }
}

/// Which operation a `FaultyIo` makes fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The Nth write from now (1-based) fails. When `partial_bytes` is
    /// given, that many bytes of it reach the file first (a torn write).
    Write { nth: u64, partial_bytes: Option<usize> },
    /// The Nth fsync from now (1-based, file or directory) fails.
    Sync { nth: u64 },
    /// The Nth write from now panics, as a bug in the thread doing it would.
    WritePanics { nth: u64 },
    /// The Nth fsync from now (file or directory) panics.
    SyncPanics { nth: u64 },
}

/// What a `FaultyIo` has counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounters {
    pub writes: u64,
    pub syncs: u64,
    /// Whether the armed fault has fired.
    pub fired: bool,
    /// Writes and syncs attempted after the fault fired: a poisoned journal
    /// must attempt none (it never retries an fsync). `ops_after_fault_under`
    /// counts those of one directory.
    pub ops_after_fault: u64,
    /// `IoFile::write_back` calls (not durability points, not counted as
    /// syncs).
    pub write_backs: u64,
}

/// Per-file bookkeeping that lets `crash` drop unsynced data.
#[derive(Debug, Default)]
struct FileModel {
    /// Length of the file as of its last successful fsync.
    synced_len: u64,
    /// Whether the file's name is durable (the directory was fsynced after
    /// it was created).
    name_durable: bool,
    /// Bytes written to the file since its last fsync.
    written_since_sync: u64,
    /// Bytes written to the file and fsynced afterwards, in all (a file
    /// overwritten in place shows its progress here, not in its length).
    written_and_synced: u64,
    /// What the path durably held before a rename put this file there:
    /// until the directory is fsynced, a crash brings it back.
    restore_on_crash: Option<Vec<u8>>,
    /// Writes since the last fsync that overwrote bytes inside the file,
    /// oldest first, each with the bytes it replaced: a crash puts those
    /// back (a preallocated journal segment is only ever overwritten).
    unsynced_overwrites: Vec<Overwrite>,
}

/// One unsynced write over existing bytes.
#[derive(Debug)]
struct Overwrite {
    offset: u64,
    /// The bytes at `offset` before the write (only the part that lay
    /// inside the file; a write past the end is undone by the length).
    replaced: Vec<u8>,
}

/// Where a held fsync is (see `FaultyIo::hold_next_sync`).
#[derive(Debug, PartialEq, Eq)]
enum Hold {
    /// The next fsync of this file after at least this many bytes were
    /// written to it since its previous fsync will wait.
    Armed(PathBuf, u64),
    /// An fsync of this file is waiting for `release_held_sync`.
    Holding(PathBuf),
    /// The waiting fsync may go on.
    Released,
}

#[derive(Default)]
struct FaultState {
    fault: Option<Fault>,
    hold: Option<Hold>,
    /// The paths of the writes and syncs counted in `ops_after_fault`.
    paths_after_fault: Vec<PathBuf>,
    /// Directories created through this backend, and whether each one's
    /// name is durable (its parent was fsynced after it was created).
    dirs: BTreeMap<PathBuf, bool>,
    writes_since_arm: u64,
    syncs_since_arm: u64,
    counters: FaultCounters,
    /// After `power_off`, every write and fsync fails.
    powered_off: bool,
    files: BTreeMap<PathBuf, FileModel>,
}

/// An `IoBackend` over another one (normally `StdIo`) that fails the Nth
/// write or fsync and can simulate a crash: `crash` cuts every file it has
/// seen back to its last fsynced length (optionally keeping some of the
/// unsynced bytes, as a torn write would) and removes files and
/// directories whose names were never made durable by an fsync of the
/// directory holding them. Unsynced writes over existing bytes (a
/// preallocated journal segment, the checkpoint's pages) are undone too:
/// each write remembers the bytes it replaced until the next fsync.
///
/// `create_zeroed` and `write_unsynced_file` are not fault points: they
/// run on background threads at times no test can count on, and a failure
/// there loses nothing (the journal creates its next segment the old way;
/// a segment without its index file is scanned at open). Their files are
/// modelled like any other: a crash leaves of an unsynced file nothing
/// (its name is lost) or an empty file.
#[derive(Clone)]
pub struct FaultyIo {
    inner: Arc<dyn IoBackend>,
    state: Arc<Mutex<FaultState>>,
    /// Signalled when a held fsync starts waiting or is released
    /// (guarded by `state`).
    hold_changed: Arc<Condvar>,
}

impl FaultyIo {
    pub fn new(inner: Arc<dyn IoBackend>) -> FaultyIo {
        FaultyIo { inner, state: Arc::new(Mutex::new(FaultState::default())), hold_changed: Arc::new(Condvar::new()) }
    }

    /// Over the real file system.
    pub fn over_std() -> FaultyIo {
        FaultyIo::new(StdIo::new())
    }

    pub fn as_backend(&self) -> Arc<dyn IoBackend> {
        Arc::new(self.clone())
    }

    /// Arms one fault, counting from now.
    pub fn arm(&self, fault: Fault) {
        let mut state = self.state.lock();
        state.fault = Some(fault);
        state.writes_since_arm = 0;
        state.syncs_since_arm = 0;
        state.counters.fired = false;
        state.counters.ops_after_fault = 0;
        state.paths_after_fault.clear();
    }

    pub fn counters(&self) -> FaultCounters {
        self.state.lock().counters
    }

    /// Writes and syncs attempted after the fault fired on files in `dir`
    /// (or on `dir` itself).
    pub fn ops_after_fault_under(&self, dir: &Path) -> u64 {
        self.state.lock().paths_after_fault.iter().filter(|path| path.starts_with(dir)).count() as u64
    }

    /// Makes the next fsync of `path` wait until `release_held_sync`, as a
    /// slow disk would: a test can then order what happens while it is in
    /// flight. The fsync runs (or fails, after `power_off`) once released.
    pub fn hold_next_sync(&self, path: &Path) {
        let mut state = self.state.lock();
        assert!(state.hold.is_none(), "one held fsync at a time");
        state.hold = Some(Hold::Armed(path.to_path_buf(), 0));
    }

    /// `hold_next_sync` for the first fsync of `path` that follows at
    /// least `written_bytes` written to it since its previous fsync (a
    /// commit's final fsync, not one made while the file grows).
    pub fn hold_next_sync_after_writes(&self, path: &Path, written_bytes: u64) {
        let mut state = self.state.lock();
        assert!(state.hold.is_none(), "one held fsync at a time");
        state.hold = Some(Hold::Armed(path.to_path_buf(), written_bytes));
    }

    /// Waits until the held fsync has started waiting; false after `timeout`.
    pub fn wait_until_sync_held(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut state = self.state.lock();
        while !matches!(state.hold, Some(Hold::Holding(_))) {
            if self.hold_changed.wait_until(&mut state, deadline).timed_out() {
                return false;
            }
        }
        true
    }

    /// Lets the held fsync go on.
    pub fn release_held_sync(&self) {
        let mut state = self.state.lock();
        state.hold = Some(Hold::Released);
        self.hold_changed.notify_all();
    }

    /// Lets a held fsync go on and disarms an armed one, for a test's
    /// teardown: an fsync left held blocks its thread for ever, and with it
    /// the drop of the runtime that thread belongs to. Returns what was
    /// left, if anything.
    pub fn release_any_hold(&self) -> Option<String> {
        let mut state = self.state.lock();
        let left = match &state.hold {
            Some(Hold::Armed(path, _)) => format!("an armed hold on {}", path.display()),
            Some(Hold::Holding(path)) => format!("a held fsync of {}", path.display()),
            Some(Hold::Released) | None => return None,
        };
        state.hold = match state.hold {
            Some(Hold::Holding(_)) => Some(Hold::Released),
            _ => None,
        };
        self.hold_changed.notify_all();
        Some(left)
    }

    /// The length `path` had at its last successful fsync through this
    /// backend (what a crash keeps), if it has seen the file.
    pub fn synced_len(&self, path: &Path) -> Option<u64> {
        self.state.lock().files.get(path).map(|model| model.synced_len)
    }

    /// Bytes written to `path` through this backend and fsynced afterwards,
    /// in all, if it has seen the file (moves with the file on a rename).
    pub fn written_and_synced(&self, path: &Path) -> Option<u64> {
        self.state.lock().files.get(path).map(|model| model.written_and_synced)
    }

    /// Waits here if this fsync of `path` is the one to hold.
    fn hold_if_armed(&self, path: &Path) {
        let mut state = self.state.lock();
        let written = state.files.get(path).map_or(0, |model| model.written_since_sync);
        if !matches!(&state.hold, Some(Hold::Armed(armed, at_least)) if armed == path && written >= *at_least) {
            return;
        }
        state.hold = Some(Hold::Holding(path.to_path_buf()));
        self.hold_changed.notify_all();
        while state.hold != Some(Hold::Released) {
            self.hold_changed.wait(&mut state);
        }
        state.hold = None;
    }

    /// Makes every later write and fsync fail, as if the machine lost
    /// power at this instant: a journal dropped afterwards cannot sync
    /// anything more, so `crash` then sees exactly what was fsynced before.
    pub fn power_off(&self) {
        self.state.lock().powered_off = true;
    }

    /// Simulates a power loss: every file is cut back to the length it had
    /// at its last successful fsync plus `keep_unsynced_bytes` of whatever
    /// was written after it (a torn write keeps a prefix), unsynced writes
    /// over existing bytes are undone except for the first
    /// `keep_unsynced_bytes` of them (in write order), and files whose
    /// directory entry was never fsynced disappear. Call it after the
    /// journal is dropped, then reopen over the real file system.
    pub fn crash(&self, keep_unsynced_bytes: u64) -> io::Result<()> {
        let state = self.state.lock();
        for (dir, name_durable) in &state.dirs {
            // A directory whose name is lost takes everything in it along.
            if !name_durable && dir.exists() {
                std::fs::remove_dir_all(dir)?;
            }
        }
        for (path, model) in &state.files {
            if !path.exists() {
                continue;
            }
            if !model.name_durable {
                match &model.restore_on_crash {
                    // A rename that never became durable: the old file
                    // is back under the name.
                    Some(old) => {
                        std::fs::write(path, old)?;
                        File::open(path)?.sync_all()?;
                    }
                    None => std::fs::remove_file(path)?,
                }
                continue;
            }
            let file = OpenOptions::new().write(true).open(path)?;
            undo_overwrites(&file, &model.unsynced_overwrites, keep_unsynced_bytes)?;
            let len = file.metadata()?.len();
            let keep = len.min(model.synced_len.saturating_add(keep_unsynced_bytes));
            file.set_len(keep)?;
            file.sync_all()?;
        }
        Ok(())
    }

    /// Counts one write; returns Some(partial) if this write must fail.
    fn on_write(&self, path: &Path) -> Option<Option<usize>> {
        let mut state = self.state.lock();
        if state.powered_off {
            return Some(None);
        }
        state.counters.writes += 1;
        if state.counters.fired {
            state.counters.ops_after_fault += 1;
            state.paths_after_fault.push(path.to_path_buf());
        }
        state.writes_since_arm += 1;
        match state.fault {
            Some(Fault::Write { nth, partial_bytes }) if state.writes_since_arm == nth => {
                state.counters.fired = true;
                Some(partial_bytes)
            }
            Some(Fault::WritePanics { nth }) if state.writes_since_arm == nth => {
                state.counters.fired = true;
                drop(state);
                panic!("injected panic in write {nth}");
            }
            _ => None,
        }
    }

    /// Counts one fsync; true if it must fail.
    fn on_sync(&self, path: &Path) -> bool {
        let mut state = self.state.lock();
        if state.powered_off {
            return true;
        }
        state.counters.syncs += 1;
        if state.counters.fired {
            state.counters.ops_after_fault += 1;
            state.paths_after_fault.push(path.to_path_buf());
        }
        state.syncs_since_arm += 1;
        match state.fault {
            Some(Fault::Sync { nth }) if state.syncs_since_arm == nth => {
                state.counters.fired = true;
                true
            }
            Some(Fault::SyncPanics { nth }) if state.syncs_since_arm == nth => {
                state.counters.fired = true;
                drop(state);
                panic!("injected panic in fsync {nth}");
            }
            _ => false,
        }
    }
}

impl FaultyIo {
    /// Fails metadata changes (create, remove, set_len) after `power_off`.
    fn check_power(&self) -> io::Result<()> {
        if self.state.lock().powered_off {
            return Err(injected("operation after power off"));
        }
        Ok(())
    }
}

/// Puts back what unsynced writes overwrote, newest first, except the
/// first `keep_bytes` bytes written (in write order): a torn write keeps a
/// prefix of what was written, as it does for a file that grew. Nothing is
/// put back past the file's current end (a later shrink cut it).
fn undo_overwrites(file: &File, overwrites: &[Overwrite], keep_bytes: u64) -> io::Result<()> {
    let len = file.metadata()?.len();
    let mut budget = keep_bytes;
    let kept: Vec<u64> = overwrites
        .iter()
        .map(|overwrite| {
            let kept = budget.min(overwrite.replaced.len() as u64);
            budget -= kept;
            kept
        })
        .collect();
    for (overwrite, kept) in overwrites.iter().zip(kept).rev() {
        let start = overwrite.offset + kept;
        let end = (overwrite.offset + overwrite.replaced.len() as u64).min(len);
        if start < end {
            let from = (start - overwrite.offset) as usize;
            let to = (end - overwrite.offset) as usize;
            file.write_all_at(&overwrite.replaced[from..to], start)?;
        }
    }
    Ok(())
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected {what} failure"))
}

struct FaultyFile {
    inner: Arc<dyn IoFile>,
    path: PathBuf,
    io: FaultyIo,
}

impl IoFile for FaultyFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.remember_overwritten(buf.len(), offset)?;
        if let Some(partial) = self.io.on_write(&self.path) {
            if let Some(bytes) = partial {
                let bytes = bytes.min(buf.len());
                self.inner.write_all_at(&buf[..bytes], offset)?;
            }
            return Err(injected("write"));
        }
        self.inner.write_all_at(buf, offset)?;
        let mut state = self.io.state.lock();
        state.files.entry(self.path.clone()).or_default().written_since_sync += buf.len() as u64;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.io.hold_if_armed(&self.path);
        if self.io.on_sync(&self.path) {
            return Err(injected("fsync"));
        }
        self.inner.sync_data()?;
        self.record_synced()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.io.hold_if_armed(&self.path);
        if self.io.on_sync(&self.path) {
            return Err(injected("fsync"));
        }
        self.inner.sync_all()?;
        self.record_synced()
    }

    fn data_extents(&self, offset: u64, len: u64) -> io::Result<Vec<(u64, u64)>> {
        self.inner.data_extents(offset, len)
    }

    fn write_back(&self) -> io::Result<()> {
        // Not a durability point: a crash may still drop what it wrote, so
        // the crash model does not change.
        self.io.check_power()?;
        self.io.state.lock().counters.write_backs += 1;
        self.inner.write_back()
    }

    fn size_bytes(&self) -> io::Result<u64> {
        self.inner.size_bytes()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.io.check_power()?;
        self.inner.set_len(len)?;
        // A shrink lowers what a crash can keep at once; the journal fsyncs
        // right after, which is what makes the shrink itself durable.
        let mut state = self.io.state.lock();
        let model = state.files.entry(self.path.clone()).or_default();
        model.synced_len = model.synced_len.min(len);
        Ok(())
    }
}

impl FaultyFile {
    fn record_synced(&self) -> io::Result<()> {
        let len = self.inner.size_bytes()?;
        let mut state = self.io.state.lock();
        let model = state.files.entry(self.path.clone()).or_default();
        model.synced_len = len;
        model.written_and_synced += model.written_since_sync;
        model.written_since_sync = 0;
        model.unsynced_overwrites.clear();
        Ok(())
    }

    /// Keeps the bytes a write of `len` at `offset` is about to replace, so
    /// that a crash can put them back.
    fn remember_overwritten(&self, len: usize, offset: u64) -> io::Result<()> {
        let file_len = self.inner.size_bytes()?;
        let end = (offset + len as u64).min(file_len);
        if offset >= end {
            return Ok(());
        }
        let mut replaced = vec![0u8; (end - offset) as usize];
        self.inner.read_exact_at(&mut replaced, offset)?;
        let mut state = self.io.state.lock();
        let model = state.files.entry(self.path.clone()).or_default();
        model.unsynced_overwrites.push(Overwrite { offset, replaced });
        Ok(())
    }
}

impl IoBackend for FaultyIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut created = Vec::new();
        let mut missing = Some(dir);
        while let Some(path) = missing.filter(|path| !path.exists()) {
            created.push(path.to_path_buf());
            missing = path.parent();
        }
        self.inner.create_dir_all(dir)?;
        let mut state = self.state.lock();
        for path in created {
            state.dirs.insert(path, false);
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.inner.exists(path)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn IoFile>> {
        let inner = self.inner.open(path)?;
        {
            // A file that existed before this backend saw it is taken as
            // fully durable (it was opened, not created, by this process).
            let len = inner.size_bytes()?;
            let mut state = self.state.lock();
            let model = FileModel { synced_len: len, name_durable: true, ..FileModel::default() };
            state.files.entry(path.to_path_buf()).or_insert(model);
        }
        Ok(Arc::new(FaultyFile { inner, path: path.to_path_buf(), io: self.clone() }))
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn IoFile>> {
        self.check_power()?;
        let inner = self.inner.create(path)?;
        self.state.lock().files.insert(path.to_path_buf(), FileModel::default());
        Ok(Arc::new(FaultyFile { inner, path: path.to_path_buf(), io: self.clone() }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check_power()?;
        self.inner.remove_file(path)?;
        self.state.lock().files.remove(path);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check_power()?;
        // What `to` durably holds now, if anything (its synced bytes): a
        // crash before the directory is fsynced restores it.
        let replaced = {
            let state = self.state.lock();
            match state.files.get(to) {
                Some(model) if model.name_durable => {
                    let mut bytes = std::fs::read(to)?;
                    bytes.truncate(model.synced_len as usize);
                    Some(bytes)
                }
                Some(_) => None,
                None if to.exists() => Some(std::fs::read(to)?),
                None => None,
            }
        };
        self.inner.rename(from, to)?;
        let mut state = self.state.lock();
        let mut model = state.files.remove(from).unwrap_or_default();
        model.name_durable = false;
        model.restore_on_crash = replaced;
        state.files.insert(to.to_path_buf(), model);
        Ok(())
    }

    fn create_zeroed(&self, path: &Path, len: u64, cancelled: &dyn Fn() -> bool) -> io::Result<bool> {
        self.check_power()?;
        let finished = self.inner.create_zeroed(path, len, cancelled)?;
        if finished {
            // Its data is durable, its name is not (no directory fsync).
            let model = FileModel { synced_len: len, ..FileModel::default() };
            self.state.lock().files.insert(path.to_path_buf(), model);
        }
        Ok(finished)
    }

    fn write_unsynced_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.check_power()?;
        self.inner.write_unsynced_file(path, bytes)?;
        self.state.lock().files.insert(path.to_path_buf(), FileModel::default());
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if self.on_sync(dir) {
            return Err(injected("directory fsync"));
        }
        self.inner.sync_dir(dir)?;
        let mut state = self.state.lock();
        for (path, model) in state.files.iter_mut() {
            if path.parent() == Some(dir) {
                model.name_durable = true;
                model.restore_on_crash = None;
            }
        }
        for (path, name_durable) in state.dirs.iter_mut() {
            if path.parent() == Some(dir) {
                *name_durable = true;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{FaultyIo, StdIo};

    #[test]
    fn release_any_hold_frees_a_held_fsync_and_disarms_an_armed_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let faulty = FaultyIo::over_std();
        let io = faulty.as_backend();
        let file = io.create(&path).unwrap();
        assert_eq!(faulty.release_any_hold(), None);
        faulty.hold_next_sync(&path);
        assert!(faulty.release_any_hold().is_some_and(|left| left.starts_with("an armed hold")));
        file.sync_data().unwrap(); // disarmed: not held
        faulty.hold_next_sync(&path);
        let held = std::thread::spawn({
            let file = file.clone();
            move || file.sync_data().unwrap()
        });
        assert!(faulty.wait_until_sync_held(std::time::Duration::from_secs(10)));
        assert!(faulty.release_any_hold().is_some_and(|left| left.starts_with("a held fsync")));
        held.join().unwrap();
    }

    #[test]
    fn data_extents_name_the_written_stretches_and_skip_the_holes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse");
        let io = StdIo::new();
        let file = io.create(&path).unwrap();
        let block = vec![1u8; 4096];
        file.write_all_at(&block, 0).unwrap();
        file.set_len(1 << 20).unwrap();
        file.write_all_at(&block, 512 * 1024).unwrap();
        file.sync_all().unwrap();
        let whole = file.data_extents(0, 1 << 20).unwrap();
        // tmpfs and ext4 keep holes at the block size; a file system
        // without SEEK_DATA answers the whole file, which is also right.
        if whole != vec![(0, 1 << 20)] {
            assert_eq!(whole, vec![(0, 4096), (512 * 1024, 4096)]);
            assert_eq!(file.data_extents(2048, 600 * 1024).unwrap(), vec![(2048, 2048), (512 * 1024, 4096)]);
            assert_eq!(file.data_extents(8192, 4096).unwrap(), vec![], "inside a hole");
            assert_eq!(file.data_extents(512 * 1024 + 100, 10).unwrap(), vec![(512 * 1024 + 100, 10)]);
        }
        assert_eq!(file.data_extents(2 << 20, 4096).unwrap(), vec![], "past the end");
        let tail: u64 = file.data_extents((1 << 20) - 10, 4096).unwrap().iter().map(|e| e.1).sum();
        assert!(tail <= 10, "clipped to the file's size");
    }
}
