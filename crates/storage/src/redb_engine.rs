//! `KvEngine` over redb: the only file that names redb.
//!
//! Two tables: `data` (`&[u8] -> &[u8]`, every record and index entry of
//! the checkpoint) and `meta` (`&str -> &[u8]`, the checkpoint timestamp
//! and the catalog). A batch is one redb write transaction committed with
//! `Durability::Immediate`, so it is fsynced before `commit` returns and
//! redb's copy-on-write commit makes it atomic. A read snapshot is one
//! redb read transaction with both tables opened.
//!
//! redb reaches the file through the engine's `IoBackend` (`IoFileBackend`
//! below), as the journal does: the checkpoint's writes and fsyncs then go
//! through one place, which tests can fail or delay, and creating the file
//! is the engine's to make durable (an fsync of the data directory).

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use redb::{
    Database, Durability, ReadOnlyTable, ReadableDatabase, ReadableTable, StorageBackend, TableDefinition,
};

use crate::io::{IoBackend, IoFile};
use crate::kv::{FilePiece, KvBatch, KvCompaction, KvEngine, KvIter, KvOp, KvSnapshot, Result};
use crate::StorageError;

const DATA: TableDefinition<&[u8], &[u8]> = TableDefinition::new("data");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// redb's page cache; the checkpoint's hot pages are also in the
/// versioned store above it, so a moderate cache is enough.
pub const CACHE_SIZE_BYTES: usize = 256 * 1024 * 1024;
/// Bytes a checkpoint writes before it writes them back to the device and
/// waits (`IoFile::write_back`). Without it, a checkpoint's commit leaves
/// hundreds of megabytes dirty for one final fsync, and the journal's
/// fsyncs on the same file system wait for all of it (ext4 commits its
/// journal, and the data ordered before it, for every fsync): an
/// acknowledged `w: 1` write then stayed unsynced for a second. Written
/// back in pieces of this size, a journal fsync waits at most for one.
pub const CHECKPOINT_WRITE_BACK_BYTES: u64 = 4 * 1024 * 1024;

fn kv_error(context: &str, err: impl std::fmt::Display) -> StorageError {
    StorageError::Kv(format!("{context}: {err}"))
}

/// redb's storage: one file of the engine's I/O backend. redb's file
/// locks are not offered (redb then allows one writer, which is all the
/// engine uses); the data directory's lock file keeps other processes out.
struct IoFileBackend {
    path: PathBuf,
    file: Arc<dyn IoFile>,
    /// Bytes written since the last write-back or fsync.
    not_written_back: AtomicU64,
}

impl std::fmt::Debug for IoFileBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoFileBackend").field("path", &self.path).finish()
    }
}

impl StorageBackend for IoFileBackend {
    fn len(&self) -> std::io::Result<u64> {
        self.file.size_bytes()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.file.read_exact_at(out, offset)
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        self.not_written_back.store(0, Ordering::Relaxed);
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.file.write_all_at(data, offset)?;
        let written = self.not_written_back.fetch_add(data.len() as u64, Ordering::Relaxed) + data.len() as u64;
        if written >= CHECKPOINT_WRITE_BACK_BYTES {
            self.not_written_back.store(0, Ordering::Relaxed);
            self.file.write_back()?;
        }
        Ok(())
    }
}

/// Keys a compaction copies per write transaction of the new file: the
/// transaction's dirty pages stay in memory until it commits.
const COMPACT_KEYS_PER_COMMIT: usize = 20_000;
/// The new file a compaction writes before it replaces the checkpoint.
const COMPACT_SUFFIX: &str = "compacting";

pub struct RedbEngine {
    /// Behind a lock only so that `compact` can put a new file's database
    /// in its place; snapshots and commits take it shared. Each snapshot
    /// holds its database: redb fails the reads of a closed one.
    database: RwLock<Arc<Database>>,
    path: PathBuf,
    io: Arc<dyn IoBackend>,
    /// The page cache (`--cache-size-mb`), kept by a compacted file too.
    cache_bytes: usize,
    /// `KvEngine::file_generation`.
    generation: AtomicU64,
}

impl RedbEngine {
    /// Opens (or creates) the database file through `io` and makes sure
    /// both tables exist, so that snapshots can always open them. Returns
    /// whether the file was created: its name is durable only once the
    /// caller fsyncs the directory.
    pub fn open(path: &Path, io: &Arc<dyn IoBackend>) -> Result<(RedbEngine, bool)> {
        RedbEngine::open_with_cache(path, io, CACHE_SIZE_BYTES)
    }

    /// `open` with a page cache of `cache_bytes` (`--cache-size-mb`).
    pub fn open_with_cache(path: &Path, io: &Arc<dyn IoBackend>, cache_bytes: usize) -> Result<(RedbEngine, bool)> {
        let open_error = |e: std::io::Error| kv_error(&format!("opening {}", path.display()), e);
        let created = !io.exists(path).map_err(open_error)?;
        let file = if created { io.create(path) } else { io.open(path) }.map_err(open_error)?;
        let database = open_database(path, file, cache_bytes)?;
        let mut txn = database.begin_write().map_err(|e| kv_error("begin_write", e))?;
        txn.set_quick_repair(true);
        {
            txn.open_table(DATA).map_err(|e| kv_error("open data table", e))?;
            txn.open_table(META).map_err(|e| kv_error("open meta table", e))?;
        }
        txn.commit().map_err(|e| kv_error("commit", e))?;
        let engine = RedbEngine {
            database: RwLock::new(Arc::new(database)),
            path: path.to_path_buf(),
            io: io.clone(),
            cache_bytes,
            generation: AtomicU64::new(0),
        };
        Ok((engine, created))
    }

    /// Rewrites the checkpoint into a new file holding only live pages and
    /// puts it in place of the old one (redb's own `compact` needs every
    /// read transaction closed, and the versioned store always holds one).
    /// Commits and new snapshots wait until it is done; snapshots already
    /// taken keep reading the old file, whose space returns to the file
    /// system when the last of them is dropped. A crash before the rename
    /// leaves the old file in place and a stray new one, removed by the
    /// next compaction; after it, the new file holds the same pairs.
    fn compact_file(&self) -> Result<KvCompaction> {
        let mut database = self.database.write();
        self.generation.fetch_add(1, Ordering::SeqCst);
        let io_error = |context: &str, e: std::io::Error| kv_error(&format!("compact: {context}"), e);
        let bytes_before = self.io.open(&self.path).and_then(|f| f.size_bytes()).map_err(|e| io_error("size", e))?;
        let temp = self.path.with_extension(COMPACT_SUFFIX);
        if self.io.exists(&temp).map_err(|e| io_error("exists", e))? {
            self.io.remove_file(&temp).map_err(|e| io_error("remove stale file", e))?;
        }
        let file = self.io.create(&temp).map_err(|e| io_error("create", e))?;
        let fresh = open_database(&temp, file.clone(), self.cache_bytes)?;
        if let Err(err) = copy_tables(&database, &fresh) {
            drop(fresh);
            // The old file is untouched: the engine goes on with it.
            let _ = self.io.remove_file(&temp);
            return Err(err);
        }
        self.io.rename(&temp, &self.path).map_err(|e| io_error("rename", e))?;
        // From here on commits must go to the new file, the one the path names.
        *database = Arc::new(fresh);
        let parent = self.path.parent().unwrap_or(Path::new("."));
        if let Err(err) = self.io.sync_dir(parent) {
            // The rename may not survive a crash: the old file would come
            // back without the commits made from now on.
            return Err(StorageError::Poisoned(format!("compact: fsync of {} failed: {err}", parent.display())));
        }
        let bytes_after = file.size_bytes().map_err(|e| io_error("size", e))?;
        Ok(KvCompaction { bytes_before, bytes_after })
    }
}

/// Opens of a checkpoint file that had to walk every page to rebuild
/// redb's allocator state (a crash before any commit recorded it), since
/// the process started: with every commit recording it (`set_quick_repair`)
/// a restart after a crash stays independent of the data's size.
pub static FULL_REPAIRS: AtomicU64 = AtomicU64::new(0);

fn open_database(path: &Path, file: Arc<dyn IoFile>, cache_bytes: usize) -> Result<Database> {
    let backend = IoFileBackend { path: path.to_path_buf(), file, not_written_back: AtomicU64::new(0) };
    let repairing = std::sync::atomic::AtomicBool::new(false);
    let shown = path.display().to_string();
    Database::builder()
        .set_cache_size(cache_bytes)
        .set_repair_callback(move |session| {
            if !repairing.swap(true, Ordering::Relaxed) {
                FULL_REPAIRS.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target: "storage", file = %shown, progress = session.progress(),
                    "checkpoint file not closed cleanly and no allocator state recorded: walking every page");
            }
        })
        .create_with_backend(backend)
        .map_err(|e| kv_error(&format!("opening {}", path.display()), e))
}

/// Copies both tables of `from`'s latest commit into `to`, in key order,
/// each piece committed durably.
fn copy_tables(from: &Database, to: &Database) -> Result<()> {
    let read = from.begin_read().map_err(|e| kv_error("compact: begin_read", e))?;
    let data = read.open_table(DATA).map_err(|e| kv_error("compact: open data table", e))?;
    let mut rows = data.iter().map_err(|e| kv_error("compact: iter", e))?.peekable();
    loop {
        let mut txn = to.begin_write().map_err(|e| kv_error("compact: begin_write", e))?;
        txn.set_durability(Durability::Immediate).map_err(|e| kv_error("compact: set_durability", e))?;
        txn.set_quick_repair(true);
        {
            let mut table = txn.open_table(DATA).map_err(|e| kv_error("compact: open data table", e))?;
            for row in rows.by_ref().take(COMPACT_KEYS_PER_COMMIT) {
                let (key, value) = row.map_err(|e| kv_error("compact: read", e))?;
                table.insert(key.value(), value.value()).map_err(|e| kv_error("compact: insert", e))?;
            }
            let mut meta_out = txn.open_table(META).map_err(|e| kv_error("compact: open meta table", e))?;
            if rows.peek().is_none() {
                let meta = read.open_table(META).map_err(|e| kv_error("compact: open meta table", e))?;
                for row in meta.iter().map_err(|e| kv_error("compact: meta iter", e))? {
                    let (name, value) = row.map_err(|e| kv_error("compact: meta read", e))?;
                    meta_out.insert(name.value(), value.value()).map_err(|e| kv_error("compact: meta insert", e))?;
                }
            }
        }
        txn.commit().map_err(|e| kv_error("compact: commit", e))?;
        if rows.peek().is_none() {
            return Ok(());
        }
    }
}

/// One item of a redb range iterator over the `data` table.
type RedbItem = std::result::Result<
    (redb::AccessGuard<'static, &'static [u8]>, redb::AccessGuard<'static, &'static [u8]>),
    redb::StorageError,
>;

struct RedbSnapshot {
    data: ReadOnlyTable<&'static [u8], &'static [u8]>,
    meta: ReadOnlyTable<&'static str, &'static [u8]>,
    /// Dropped after the tables (fields drop in order): the database a
    /// compaction replaced closes when its last snapshot ends.
    _database: Arc<Database>,
}

/// Whether the bounds describe an empty range (redb panics on an
/// inverted one).
fn is_empty_range(start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s), Bound::Excluded(e)) => s >= e,
        (Bound::Excluded(s), Bound::Included(e)) => s >= e,
        (Bound::Excluded(s), Bound::Excluded(e)) => s >= e,
        _ => false,
    }
}

impl KvSnapshot for RedbSnapshot {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let value = self.data.get(key).map_err(|e| kv_error("get", e))?;
        Ok(value.map(|guard| guard.value().to_vec()))
    }

    fn range<'a>(&'a self, start: Bound<&[u8]>, end: Bound<&[u8]>, reverse: bool) -> Result<KvIter<'a>> {
        if is_empty_range(start, end) {
            return Ok(Box::new(std::iter::empty()));
        }
        let range = self.data.range::<&[u8]>((start, end)).map_err(|e| kv_error("range", e))?;
        let convert = |item: RedbItem| {
            item.map(|(k, v)| (k.value().to_vec(), v.value().to_vec())).map_err(|e| kv_error("range next", e))
        };
        if reverse {
            Ok(Box::new(range.rev().map(convert)))
        } else {
            Ok(Box::new(range.map(convert)))
        }
    }

    fn metadata(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let value = self.meta.get(name).map_err(|e| kv_error("metadata get", e))?;
        Ok(value.map(|guard| guard.value().to_vec()))
    }
}

impl KvEngine for RedbEngine {
    fn snapshot(&self) -> Result<Arc<dyn KvSnapshot>> {
        let database = self.database.read().clone();
        let txn = database.begin_read().map_err(|e| kv_error("begin_read", e))?;
        let data = txn.open_table(DATA).map_err(|e| kv_error("open data table", e))?;
        let meta = txn.open_table(META).map_err(|e| kv_error("open meta table", e))?;
        Ok(Arc::new(RedbSnapshot { data, meta, _database: database }))
    }

    fn commit(&self, batch: KvBatch) -> Result<()> {
        // Held until the commit ends, so that a compaction never copies
        // the file with this commit still to come.
        let database = self.database.read();
        self.generation.fetch_add(1, Ordering::SeqCst);
        let mut txn = database.begin_write().map_err(|e| kv_error("begin_write", e))?;
        txn.set_durability(Durability::Immediate).map_err(|e| kv_error("set_durability", e))?;
        // Each commit records redb's allocator state, so that opening the
        // file after a crash loads it instead of walking every page to
        // rebuild it: without it a restart after SIGKILL took time in
        // proportion to the data (0.98 s at 100 MB, 3.4 s at 1 GB), which
        // the fast restart must not (seed 003).
        txn.set_quick_repair(true);
        {
            let mut data = txn.open_table(DATA).map_err(|e| kv_error("open data table", e))?;
            for op in &batch.ops {
                match op {
                    KvOp::Put { key, value } => {
                        data.insert(key.as_slice(), value.as_slice()).map_err(|e| kv_error("insert", e))?;
                    }
                    KvOp::PutShared { key, value } => {
                        data.insert(key.as_slice(), &**value).map_err(|e| kv_error("insert", e))?;
                    }
                    KvOp::Delete { key } => {
                        data.remove(key.as_slice()).map_err(|e| kv_error("remove", e))?;
                    }
                    KvOp::DeleteRange { start, end } => {
                        if start < end {
                            data.retain_in::<&[u8], _>(start.as_slice()..end.as_slice(), |_, _| false)
                                .map_err(|e| kv_error("delete range", e))?;
                        }
                    }
                }
            }
            let mut meta = txn.open_table(META).map_err(|e| kv_error("open meta table", e))?;
            for (name, value) in &batch.metadata {
                meta.insert(name.as_str(), value.as_slice()).map_err(|e| kv_error("metadata insert", e))?;
            }
        }
        txn.commit().map_err(|e| kv_error("commit", e))
    }

    fn compact(&self) -> Result<KvCompaction> {
        self.compact_file()
    }

    fn cache_bytes_used(&self) -> usize {
        // redb keeps its write buffer under half the cache and the sum
        // under the cache for ordinary pages, but a large value's pages
        // (at least the value's size) stay cached while written: 16 MB
        // held at a 2 MB cache under 4 MB inserts. So no assertion here: it
        // made `serverStatus` fail with InternalError whenever documents
        // were larger than the cache; `serverStatus` shows the figure.
        self.database.read().cache_stats().used_bytes()
    }

    fn file_generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn file_bytes(&self) -> Result<u64> {
        let _database = self.database.read();
        self.io
            .open(&self.path)
            .and_then(|file| file.size_bytes())
            .map_err(|e| kv_error("file size", e))
    }

    fn read_file_at(&self, offset: u64, len: usize) -> Result<FilePiece> {
        // Shared: no compaction or replacement swaps the file meanwhile.
        let _database = self.database.read();
        let read_error = |e: std::io::Error| kv_error(&format!("reading {}", self.path.display()), e);
        let file = self.io.open(&self.path).map_err(read_error)?;
        let size = file.size_bytes().map_err(read_error)?;
        let span = size.saturating_sub(offset).min(len as u64);
        // redb grows its file by doubling it, and what it has not written
        // yet is a hole: half of a file just grown.
        let extents = file.data_extents(offset, span).map_err(read_error)?;
        let mut data = vec![0u8; extents.iter().map(|(_, n)| *n as usize).sum()];
        let mut at = 0usize;
        for &(start, n) in &extents {
            file.read_exact_at(&mut data[at..at + n as usize], start).map_err(read_error)?;
            at += n as usize;
        }
        Ok(FilePiece { offset, span, extents, data })
    }

    fn replace_file(&self, staged: &Path) -> Result<()> {
        let mut database = self.database.write();
        self.generation.fetch_add(1, Ordering::SeqCst);
        let io_error = |context: &str, e: std::io::Error| kv_error(&format!("replace: {context}"), e);
        // Opened (and checked by redb) under its staged name first: a copy
        // redb refuses leaves this engine's file as it was.
        let file = self.io.open(staged).map_err(|e| io_error("open the staged file", e))?;
        let fresh = open_database(staged, file, self.cache_bytes)?;
        drop(fresh);
        self.io.rename(staged, &self.path).map_err(|e| io_error("rename", e))?;
        let parent = self.path.parent().unwrap_or(Path::new("."));
        if let Err(err) = self.io.sync_dir(parent) {
            return Err(StorageError::Poisoned(format!("replace: fsync of {} failed: {err}", parent.display())));
        }
        let file = self.io.open(&self.path).map_err(|e| io_error("open", e))?;
        match open_database(&self.path, file, self.cache_bytes) {
            Ok(fresh) => {
                *database = Arc::new(fresh);
                Ok(())
            }
            Err(err) => Err(StorageError::Poisoned(format!("replace: the new file did not open: {err}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::StdIo;

    fn collect(snapshot: &dyn KvSnapshot, reverse: bool) -> Vec<Vec<u8>> {
        snapshot
            .range(Bound::Unbounded, Bound::Unbounded, reverse)
            .unwrap()
            .map(|item| item.unwrap().0)
            .collect()
    }

    #[test]
    fn batch_is_atomic_and_snapshots_are_stable() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, created) = RedbEngine::open(&dir.path().join("kv.redb"), &StdIo::new()).unwrap();
        assert!(created);
        let mut batch = KvBatch::default();
        for key in [b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()] {
            batch.put(key.clone(), key);
        }
        batch.set_metadata("ts", vec![1]);
        engine.commit(batch).unwrap();
        let before = engine.snapshot().unwrap();

        let mut batch = KvBatch::default();
        batch.delete_range(b"b".to_vec(), b"d".to_vec());
        batch.delete(b"a".to_vec());
        batch.set_metadata("ts", vec![2]);
        engine.commit(batch).unwrap();
        let after = engine.snapshot().unwrap();

        assert_eq!(collect(&*before, false), vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]);
        assert_eq!(collect(&*before, true), vec![b"d".to_vec(), b"c".to_vec(), b"b".to_vec(), b"a".to_vec()]);
        assert_eq!(collect(&*after, false), vec![b"d".to_vec()]);
        assert_eq!(before.metadata("ts").unwrap(), Some(vec![1]));
        assert_eq!(after.metadata("ts").unwrap(), Some(vec![2]));
        assert_eq!(after.get(b"d").unwrap(), Some(b"d".to_vec()));
        assert_eq!(after.get(b"a").unwrap(), None);
        let empty: Vec<_> = after
            .range(Bound::Included(&b"z"[..]), Bound::Excluded(&b"a"[..]), false)
            .unwrap()
            .collect();
        assert!(empty.is_empty());
    }

    #[test]
    fn a_crash_after_commits_reopens_without_walking_every_page() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.redb");
        let (engine, _) = RedbEngine::open(&path, &StdIo::new()).unwrap();
        for round in 0..20u32 {
            let mut batch = KvBatch::default();
            for i in 0..500u32 {
                batch.put(format!("{round:04}-{i:06}").into_bytes(), vec![7; 200]);
            }
            engine.commit(batch).unwrap();
        }
        // A crash: the file is never closed cleanly (redb's "repair needed"
        // flag stays set).
        std::mem::forget(engine);
        let repairs = FULL_REPAIRS.load(Ordering::Relaxed);
        let (reopened, created) = RedbEngine::open(&path, &StdIo::new()).unwrap();
        assert!(!created);
        assert_eq!(FULL_REPAIRS.load(Ordering::Relaxed), repairs, "the reopen walked every page");
        assert_eq!(collect(&*reopened.snapshot().unwrap(), false).len(), 10_000);
    }

    #[test]
    fn compact_shrinks_the_file_and_keeps_every_pair() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.redb");
        let (engine, _) = RedbEngine::open(&path, &StdIo::new()).unwrap();
        let key = |i: u32| i.to_be_bytes().to_vec();
        for chunk in 0..4u32 {
            let mut batch = KvBatch::default();
            for i in chunk * 1000..(chunk + 1) * 1000 {
                batch.put(key(i), vec![7u8; 1000]);
            }
            engine.commit(batch).unwrap();
        }
        let mut batch = KvBatch::default();
        batch.delete_range(key(0), key(3900));
        batch.set_metadata("ts", vec![9]);
        engine.commit(batch).unwrap();
        let held = engine.snapshot().unwrap();
        let compaction = engine.compact().unwrap();
        assert!(compaction.bytes_after * 4 < compaction.bytes_before, "{compaction:?}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), compaction.bytes_after);
        // A snapshot taken before still reads the old file.
        assert_eq!(collect(&*held, false).len(), 100);
        let after = engine.snapshot().unwrap();
        assert_eq!(collect(&*after, false), (3900..4000).map(key).collect::<Vec<_>>());
        assert_eq!(after.metadata("ts").unwrap(), Some(vec![9]));
        let mut batch = KvBatch::default();
        batch.put(b"later".to_vec(), b"v".to_vec());
        engine.commit(batch).unwrap();
        drop((held, after, engine));
        let (engine, _) = RedbEngine::open(&path, &StdIo::new()).unwrap();
        let reopened = engine.snapshot().unwrap();
        assert_eq!(reopened.get(b"later").unwrap(), Some(b"v".to_vec()));
        assert_eq!(collect(&*reopened, false).len(), 101);
    }

    #[test]
    fn page_cache_stays_within_its_size_and_reports_its_use() {
        const CACHE_BYTES: usize = 1024 * 1024;
        let dir = tempfile::tempdir().unwrap();
        let (engine, _) = RedbEngine::open_with_cache(&dir.path().join("kv.redb"), &StdIo::new(), CACHE_BYTES).unwrap();
        // 8 MB of values, eight times the cache, then all of it read back.
        for chunk in 0..8u32 {
            let mut batch = KvBatch::default();
            for i in chunk * 1000..(chunk + 1) * 1000 {
                batch.put(i.to_be_bytes().to_vec(), vec![3u8; 1024]);
            }
            engine.commit(batch).unwrap();
            assert!(engine.cache_bytes_used() <= CACHE_BYTES, "after a commit: {}", engine.cache_bytes_used());
        }
        assert_eq!(collect(&*engine.snapshot().unwrap(), false).len(), 8000);
        let used = engine.cache_bytes_used();
        assert!(used > 0, "a full scan leaves pages in the cache");
        assert!(used <= CACHE_BYTES, "after a scan: {used}");
    }

    #[test]
    fn reopen_keeps_committed_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.redb");
        {
            let (engine, _) = RedbEngine::open(&path, &StdIo::new()).unwrap();
            let mut batch = KvBatch::default();
            batch.put(b"k".to_vec(), b"v".to_vec());
            engine.commit(batch).unwrap();
        }
        let (engine, created) = RedbEngine::open(&path, &StdIo::new()).unwrap();
        assert!(!created);
        assert_eq!(engine.snapshot().unwrap().get(b"k").unwrap(), Some(b"v".to_vec()));
    }
}
