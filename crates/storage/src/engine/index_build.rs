//! Sorted index build: an initial sync's secondary indexes, built once a
//! collection's documents are all copied, from their keys sorted.
//!
//! Why: maintained while documents arrive, each bulk load puts index keys
//! in random order, so every load rewrites leaves all over each index's
//! B-tree, and the rewriting grows with the index (at 1 GB the syncer
//! wrote four times the data). Built afterwards in key order, each leaf is
//! written once, as the record table's already are (`_id` order).
//!
//! Memory is bounded: keys are gathered into runs of `SORT_RUN_BYTES`;
//! a run that fills is sorted and written to a file under the data
//! directory (`SORT_DIRECTORY`), and the runs are then merged. Keys go to
//! the store in commits of `BUILD_COMMIT_BYTES`.
//!
//! Steps (a crash between any two leaves documents intact and an index
//! the next build rewrites whole):
//! 1. Under the write lock, check the engine takes bulk loads (no entry
//!    applied); remove runs a crashed build left.
//! 2. Read every record of the collection, compute each secondary index's
//!    keys, spill full runs sorted.
//! 3. Commit the keys in key order, the first commit clearing the indexes'
//!    tables (a crashed build's keys).
//! 4. Commit each index's key count and multikey flag (catalog, totals);
//!    remove the run files.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Engine, Result};
use crate::apply::{index_store_key, parse_document, table_range, BuiltIndex};
use crate::catalog::Catalog;
use crate::kv::KvBatch;
use crate::{StorageError, Timestamp};

/// Bytes of keys (with their bookkeeping) held in memory before a run is
/// sorted and spilled to disk.
pub const SORT_RUN_BYTES: usize = 64 * 1024 * 1024;
/// Bytes of keys one commit of the build writes.
pub const BUILD_COMMIT_BYTES: usize = 32 * 1024 * 1024;
/// Records read from the store at a time.
const SCAN_BATCH_RECORDS: usize = 4096;
/// The run files' directory, under the data directory.
pub const SORT_DIRECTORY: &str = "index-build-sort";
/// Most runs one build may spill (each open at once in the merge): with
/// `SORT_RUN_BYTES` runs, far more keys than a collection's documents.
const RUNS_MAX: usize = 4096;
/// What a key costs in memory beyond its bytes (the vector, its length,
/// the allocator's rounding), counted against `SORT_RUN_BYTES`.
const KEY_OVERHEAD_BYTES: usize = 48;
/// A run file's reader and writer buffers.
const RUN_BUFFER_BYTES: usize = 256 * 1024;
/// The longest store key a run file may hold (an index key is at most a
/// few KB in MongoDB; the bound rejects a corrupt run).
const RUN_KEY_BYTES_MAX: usize = 16 * 1024 * 1024;

/// One key of the sort: the store key (table, index key, record key) and
/// the index key's length, which is the entry's stored value.
type SortKey = (Vec<u8>, u32);

/// What a build did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexBuildReport {
    pub keys: u64,
    pub runs_spilled: usize,
    pub commits: usize,
}

impl Engine {
    /// Builds `ns`'s secondary indexes from its stored documents, replacing
    /// whatever their tables held. For collections whose copy was bulk
    /// loaded with `bulk_insert_records`; refused once the oplog holds an
    /// entry, as every bulk load.
    pub fn bulk_build_indexes(&self, ns: &str) -> Result<IndexBuildReport> {
        self.bulk_build_indexes_with(ns, SORT_RUN_BYTES, BUILD_COMMIT_BYTES)
    }

    /// `bulk_build_indexes` with its memory bounds given (tests spill).
    pub fn bulk_build_indexes_with(&self, ns: &str, run_bytes: usize, commit_bytes: usize) -> Result<IndexBuildReport> {
        assert!(run_bytes > 0 && commit_bytes > 0, "index build bounds must be positive");
        let directory = self.dbpath().join(SORT_DIRECTORY);
        remove_runs(&directory)?;
        let mut report = IndexBuildReport::default();
        let built = {
            let _state = self.inner.write.lock();
            let _checkpoint = self.inner.checkpoint_lock.lock();
            self.check_bulk_loadable()?;
            let catalog = self.inner.catalog.read().latest();
            let Some(collection) = catalog.get(ns).cloned() else {
                return Err(StorageError::NamespaceNotFound(ns.to_string()));
            };
            if collection.indexes.is_empty() {
                return Ok(report);
            }
            let mut sorter = Sorter::new(directory.clone(), run_bytes);
            let built = self.gather_keys(&collection, &mut sorter)?;
            report.runs_spilled = sorter.runs.len();
            let mut writer = KeyWriter::new(&catalog, commit_bytes);
            for table in built.keys() {
                let (start, end) = table_range(*table);
                writer.batch.delete_range(start, end);
            }
            sorter.drain(|key| writer.put(self, key))?;
            writer.flush(self)?;
            report.commits = writer.commits;
            built
        };
        let built: Vec<BuiltIndex> = built.into_values().collect();
        report.keys = built.iter().map(|index| index.keys).sum();
        self.bulk_commit(|applier| applier.finish_index_build(ns, &built))?;
        remove_runs(&directory)?;
        Ok(report)
    }

    /// Step 2: every record's keys for every secondary index, into `sorter`.
    fn gather_keys(
        &self,
        collection: &crate::catalog::CollectionMeta,
        sorter: &mut Sorter,
    ) -> Result<BTreeMap<u32, BuiltIndex>> {
        let mut built: BTreeMap<u32, BuiltIndex> = collection
            .indexes
            .iter()
            .map(|index| {
                (
                    index.table,
                    BuiltIndex {
                        table: index.table,
                        keys: 0,
                        multikey: false,
                    },
                )
            })
            .collect();
        let store = &self.inner.store;
        let view = store.view(Timestamp::MAX).expect("the newest state is always readable");
        let (start, end) = table_range(collection.record_table);
        let mut from = Bound::Included(start);
        loop {
            let batch = store.scan(
                &view,
                from.clone(),
                Bound::Excluded(end.clone()),
                false,
                SCAN_BATCH_RECORDS,
            )?;
            let Some((last, _)) = batch.last() else { break };
            from = Bound::Excluded(last.clone());
            for (key, bytes) in &batch {
                let document = parse_document(bytes.as_ref())?;
                let record_key = &key[4..];
                for index in &collection.indexes {
                    let keys = index.keys_of(&document)?;
                    let counts = built.get_mut(&index.table).expect("every index counted");
                    counts.multikey |= keys.multikey;
                    counts.keys += keys.keys.len() as u64;
                    for index_key in keys.keys {
                        let length = u32::try_from(index_key.len()).expect("an index key under 4 GB");
                        sorter.push((index_store_key(index.table, &index_key, record_key), length))?;
                    }
                }
            }
            if batch.len() < SCAN_BATCH_RECORDS {
                break;
            }
        }
        Ok(built)
    }
}

/// Step 3's commits: keys gathered up to a byte bound, each commit at the
/// checkpoint timestamp with the catalog unchanged.
struct KeyWriter {
    catalog: Catalog,
    batch: KvBatch,
    bytes: usize,
    commit_bytes: usize,
    commits: usize,
}

impl KeyWriter {
    fn new(catalog: &Arc<Catalog>, commit_bytes: usize) -> KeyWriter {
        KeyWriter {
            catalog: (**catalog).clone(),
            batch: KvBatch::default(),
            bytes: 0,
            commit_bytes,
            commits: 0,
        }
    }

    fn put(&mut self, engine: &Engine, (key, length): SortKey) -> Result<()> {
        self.bytes += key.len() + 4;
        self.batch.put(key, length.to_be_bytes().to_vec());
        if self.bytes >= self.commit_bytes {
            self.flush(engine)?;
        }
        Ok(())
    }

    fn flush(&mut self, engine: &Engine) -> Result<()> {
        if self.batch.ops.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.bytes = 0;
        self.commits += 1;
        engine.commit_bulk(batch, self.catalog.clone())
    }
}

/// An external sort of `SortKey`s within a memory bound.
struct Sorter {
    directory: PathBuf,
    run_bytes: usize,
    run: Vec<SortKey>,
    bytes: usize,
    runs: Vec<PathBuf>,
}

impl Sorter {
    fn new(directory: PathBuf, run_bytes: usize) -> Sorter {
        Sorter {
            directory,
            run_bytes,
            run: Vec::new(),
            bytes: 0,
            runs: Vec::new(),
        }
    }

    fn push(&mut self, key: SortKey) -> Result<()> {
        self.bytes += key.0.len() + KEY_OVERHEAD_BYTES;
        self.run.push(key);
        if self.bytes >= self.run_bytes {
            self.spill()?;
        }
        Ok(())
    }

    /// Sorts the run in memory and writes it to its own file.
    fn spill(&mut self) -> Result<()> {
        if self.runs.len() >= RUNS_MAX {
            return Err(StorageError::IllegalOperation(format!(
                "an index build needs more than {RUNS_MAX} sorted runs"
            )));
        }
        std::fs::create_dir_all(&self.directory)?;
        let path = self.directory.join(format!("run-{:05}", self.runs.len()));
        let mut run = std::mem::take(&mut self.run);
        self.bytes = 0;
        run.sort_unstable();
        let mut out = BufWriter::with_capacity(RUN_BUFFER_BYTES, File::create(&path)?);
        for (key, length) in &run {
            let key_len = u32::try_from(key.len()).expect("a store key under 4 GB");
            out.write_all(&key_len.to_le_bytes())?;
            out.write_all(&length.to_le_bytes())?;
            out.write_all(key)?;
        }
        // No fsync: a run lives only as long as this build; a crash
        // restarts the build from the documents.
        out.flush()?;
        self.runs.push(path);
        Ok(())
    }

    /// Every key pushed, in order, to `sink`.
    fn drain(&mut self, mut sink: impl FnMut(SortKey) -> Result<()>) -> Result<()> {
        let mut run = std::mem::take(&mut self.run);
        run.sort_unstable();
        if self.runs.is_empty() {
            return run.into_iter().try_for_each(sink);
        }
        // The last run merges from memory beside the spilled ones.
        let mut sources: Vec<RunSource> = Vec::with_capacity(self.runs.len() + 1);
        for path in &self.runs {
            sources.push(RunSource::File(BufReader::with_capacity(
                RUN_BUFFER_BYTES,
                File::open(path)?,
            )));
        }
        sources.push(RunSource::Memory(run.into_iter()));
        let mut heap = BinaryHeap::with_capacity(sources.len());
        for (at, source) in sources.iter_mut().enumerate() {
            if let Some(key) = source.next()? {
                heap.push(Reverse((key, at)));
            }
        }
        while let Some(Reverse((key, at))) = heap.pop() {
            if let Some(next) = sources[at].next()? {
                heap.push(Reverse((next, at)));
            }
            sink(key)?;
        }
        Ok(())
    }
}

/// One sorted run being merged.
enum RunSource {
    File(BufReader<File>),
    Memory(std::vec::IntoIter<SortKey>),
}

impl RunSource {
    fn next(&mut self) -> Result<Option<SortKey>> {
        let reader = match self {
            RunSource::Memory(keys) => return Ok(keys.next()),
            RunSource::File(reader) => reader,
        };
        let mut header = [0u8; 8];
        match reader.read_exact(&mut header[..4]) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(err) => return Err(err.into()),
        }
        reader.read_exact(&mut header[4..])?;
        let key_len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let length = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        if key_len > RUN_KEY_BYTES_MAX {
            return Err(StorageError::Corruption(format!(
                "a sorted run's key of {key_len} bytes"
            )));
        }
        let mut key = vec![0u8; key_len];
        reader.read_exact(&mut key)?;
        Ok(Some((key, length)))
    }
}

/// Removes a build's run files (a crashed build's, or this one's).
fn remove_runs(directory: &Path) -> Result<()> {
    match std::fs::remove_dir_all(directory) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err.into()),
    }
}
