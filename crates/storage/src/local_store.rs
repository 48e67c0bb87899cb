//! The durable documents of the `local` database that are not oplog
//! entries: a replica set member's term and vote (`replset.election`), its
//! config (`system.replset`), its rollback id (`replset.rbid`), later its
//! initial-sync progress. They never replicate and never roll back, so
//! they live beside the data, not in it: one file per document under
//! `dbpath/local/`, `<name>.bson`, holding the document's BSON and nothing
//! else.
//!
//! A write is durable before it returns, and a crash at any point of it
//! leaves either the old document or the new one, never a mix:
//! 1. Write the new document to `<name>.bson.tmp` (a new file).
//! 2. fsync it: the bytes are on disk under the temporary name.
//! 3. Rename it over `<name>.bson` (atomic: the name points at the old
//!    file or the new one).
//! 4. fsync the directory: the rename itself survives a power loss.
//!
//! A crash before 3 leaves the old file and a temporary one, which the next
//! open deletes; a crash between 3 and 4 may bring the old name back, with
//! the old (complete) file. A failed write, fsync or rename poisons the
//! store (under the default policy the process aborts, as for the
//! journal): after a failed fsync nothing may be retried.
//!
//! Names are restricted to `[A-Za-z0-9_.-]`, at most
//! `LOCAL_NAME_BYTES_MAX` bytes, not starting with a dot and not
//! `oplog.rs` (the oplog is the journal); a document must have an `_id`
//! (it is readable through `find` as the one document of the read-only
//! collection `local.<name>`) and at most `LOCAL_DOCUMENT_BYTES_MAX`
//! bytes; a store holds at most `LOCAL_DOCUMENTS_MAX` documents. Every
//! document is kept in memory too (they are few and small), so a read
//! touches no file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bson::Document;
use parking_lot::{Mutex, RwLock};

use crate::io::IoBackend;
use crate::poison::{FailedPart, PoisonPolicy};
use crate::StorageError;

/// The directory under the dbpath.
pub const LOCAL_DIR_NAME: &str = "local";
/// The longest document name, in bytes.
pub const LOCAL_NAME_BYTES_MAX: usize = 64;
/// The largest document (MongoDB's document limit).
pub const LOCAL_DOCUMENT_BYTES_MAX: usize = 16 * 1024 * 1024;
/// The most documents a store holds.
pub const LOCAL_DOCUMENTS_MAX: usize = 64;
const DOCUMENT_SUFFIX: &str = ".bson";
const TEMP_SUFFIX: &str = ".tmp";
/// The name of the oplog's collection, which is the journal, not a document.
const RESERVED_NAME: &str = "oplog.rs";

type Result<T> = std::result::Result<T, StorageError>;

/// The documents as of the last write, shared with readers.
pub type LocalDocuments = Arc<BTreeMap<String, Document>>;

pub struct LocalStore {
    dir: PathBuf,
    io: Arc<dyn IoBackend>,
    poison_policy: PoisonPolicy,
    /// Every document as last made durable; replaced (never changed in
    /// place) by a write after its step 4, so that a reader's snapshot
    /// stays what it was.
    documents: RwLock<LocalDocuments>,
    /// Serializes writes across their four steps.
    write_lock: Mutex<()>,
    /// Set by the first failed write; never cleared.
    poisoned: Mutex<Option<String>>,
}

/// Refuses a name that is not a safe file name and collection name.
pub fn check_name(name: &str) -> Result<()> {
    let safe = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-';
    if name.is_empty() || name.len() > LOCAL_NAME_BYTES_MAX || name.starts_with('.') || !name.chars().all(safe) {
        return Err(StorageError::InvalidNamespace(format!(
            "invalid local document name {name:?}: 1 to {LOCAL_NAME_BYTES_MAX} characters of [A-Za-z0-9_.-], not starting with a dot"
        )));
    }
    if name == RESERVED_NAME {
        return Err(StorageError::InvalidNamespace(format!("local.{RESERVED_NAME} is the oplog, not a document")));
    }
    Ok(())
}

impl LocalStore {
    /// Opens `dbpath/local/` (creating it, durably), deletes temporary
    /// files a crash left behind and loads every document.
    pub(crate) fn open(dbpath: &Path, io: Arc<dyn IoBackend>, poison_policy: PoisonPolicy) -> Result<LocalStore> {
        let dir = dbpath.join(LOCAL_DIR_NAME);
        if !io.exists(&dir)? {
            io.create_dir_all(&dir)?;
            io.sync_dir(dbpath)?;
        }
        let mut documents = BTreeMap::new();
        let mut removed = false;
        for file_name in io.list_dir(&dir)? {
            if file_name.ends_with(TEMP_SUFFIX) {
                // Steps 1-2 of a write that never reached its rename.
                io.remove_file(&dir.join(&file_name))?;
                removed = true;
                continue;
            }
            let Some(name) = file_name.strip_suffix(DOCUMENT_SUFFIX) else {
                tracing::warn!(target: "storage", file = %dir.join(&file_name).display(), "unknown file in the local documents directory");
                continue;
            };
            check_name(name).map_err(|_| corrupt(&dir, &file_name, "not a valid document name"))?;
            documents.insert(name.to_string(), read_file(&*io, &dir, &file_name)?);
        }
        if removed {
            io.sync_dir(&dir)?;
        }
        assert!(documents.len() <= LOCAL_DOCUMENTS_MAX, "{} local documents on disk", documents.len());
        Ok(LocalStore {
            dir,
            io,
            poison_policy,
            documents: RwLock::new(Arc::new(documents)),
            write_lock: Mutex::new(()),
            poisoned: Mutex::new(None),
        })
    }

    /// The document `name`, as last written.
    pub fn read(&self, name: &str) -> Result<Option<Document>> {
        check_name(name)?;
        Ok(self.documents.read().get(name).cloned())
    }

    /// Replaces the document `name` (steps above); durable when it returns.
    pub fn write(&self, name: &str, document: &Document) -> Result<()> {
        check_name(name)?;
        if !document.contains_key("_id") {
            return Err(StorageError::InvalidDocument(format!("local document {name} has no _id")));
        }
        let bytes = document.to_vec().map_err(|e| StorageError::InvalidDocument(e.to_string()))?;
        if bytes.len() > LOCAL_DOCUMENT_BYTES_MAX {
            return Err(StorageError::DocumentTooLarge(format!(
                "local document {name} of {} bytes, max size: {LOCAL_DOCUMENT_BYTES_MAX}",
                bytes.len()
            )));
        }
        let _write = self.write_lock.lock();
        if let Some(reason) = &*self.poisoned.lock() {
            return Err(StorageError::Poisoned(reason.clone()));
        }
        let current = self.documents.read().clone();
        if !current.contains_key(name) && current.len() >= LOCAL_DOCUMENTS_MAX {
            return Err(StorageError::IllegalOperation(format!(
                "the local store already holds {LOCAL_DOCUMENTS_MAX} documents"
            )));
        }
        if let Err(err) = self.write_file(name, &bytes) {
            let reason = format!("writing the local document {name}: {err}");
            self.poison_policy.on_failure(FailedPart::LocalStore, &reason);
            self.poisoned.lock().get_or_insert(reason.clone());
            return Err(StorageError::Poisoned(reason));
        }
        let mut next = (*current).clone();
        next.insert(name.to_string(), document.clone());
        *self.documents.write() = Arc::new(next);
        Ok(())
    }

    /// Steps 1-4.
    fn write_file(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.dir.join(format!("{name}{DOCUMENT_SUFFIX}"));
        let temp = self.dir.join(format!("{name}{DOCUMENT_SUFFIX}{TEMP_SUFFIX}"));
        if self.io.exists(&temp)? {
            self.io.remove_file(&temp)?;
        }
        let file = self.io.create(&temp)?;
        file.write_all_at(bytes, 0)?;
        file.sync_all()?;
        drop(file);
        self.io.rename(&temp, &path)?;
        self.io.sync_dir(&self.dir)
    }

    /// Every document's name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.documents.read().keys().cloned().collect()
    }

    /// The documents now, for a reader (a snapshot: later writes do not
    /// change it).
    pub fn snapshot(&self) -> LocalDocuments {
        self.documents.read().clone()
    }
}

fn corrupt(dir: &Path, file_name: &str, what: &str) -> StorageError {
    StorageError::Corruption(format!("local document {}: {what}", dir.join(file_name).display()))
}

/// One document file, checked: within the size limit, and exactly one BSON
/// document (a rename never exposes a partial file, so anything else is
/// damage, not a torn write).
fn read_file(io: &dyn IoBackend, dir: &Path, file_name: &str) -> Result<Document> {
    let file = io.open(&dir.join(file_name))?;
    let len = file.size_bytes()?;
    if len > LOCAL_DOCUMENT_BYTES_MAX as u64 {
        return Err(corrupt(dir, file_name, &format!("{len} bytes, over the limit")));
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)?;
    let raw = bson::RawDocument::from_bytes(&bytes).map_err(|e| corrupt(dir, file_name, &e.to_string()))?;
    Document::try_from(raw).map_err(|e| corrupt(dir, file_name, &e.to_string()))
}
