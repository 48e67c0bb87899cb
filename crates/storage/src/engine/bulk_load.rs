//! Bulk load: how an initial sync's clone writes what it copies straight
//! into the checkpoint store, without oplog entries.
//!
//! A member in initial sync has an empty oplog; the documents it copies
//! belong to no entry of its own, so they cannot go through the journal.
//! Each call here is instead one atomic, fsynced commit of the key-value
//! store at the checkpoint timestamp (zero: nothing was ever checkpointed
//! on an empty member), that then becomes the base every new reader reads:
//!
//! 1. Under the write lock and `checkpoint_lock`, check the engine is still
//!    empty of entries: no applied entry, no version in memory, no catalog
//!    version above the checkpoint. Bulk loads are refused once the oplog
//!    catch-up has applied anything (`IllegalOperation`).
//! 2. Compute the changes with the replay applier (`Strictness::Replay`):
//!    a document copied again after a resume replaces the one stored and
//!    its old index keys leave, exactly as an insert replayed from the
//!    oplog does; creating what exists is a no-op.
//! 3. Commit changes and catalog in one key-value batch (one fsync). A
//!    failure poisons the engine, as a failed checkpoint does.
//! 4. Install the new snapshot as the base and the catalog as the catalog
//!    history's base.
//!
//! A crash before 3 leaves the previous load; after 3, the new one. The
//! oplog entries applied later commit above timestamp zero as any
//! secondary's do, and recovery replays the journal over this checkpoint
//! (a journal starting after a zero checkpoint is not a loss).

use std::sync::Arc;

use bson::{Document, RawDocumentBuf};

use super::{Engine, Result};
use crate::apply::{table_prefix, Applier, Strictness};
use crate::catalog::{Catalog, CatalogHistory, FIRST_TABLE_ID};
use crate::engine::IndexSpec;
use crate::kv::KvBatch;
use crate::mvcc::{BaseView, Value};
use crate::poison::FailedPart;
use crate::recovery::{CHECKPOINT_FORMAT_VERSION, META_CATALOG, META_CHECKPOINT_TS, META_FORMAT_VERSION};
use crate::{StorageError, Timestamp};

/// Most documents one `bulk_insert` takes (bounds the batch in memory
/// together with the caller's byte bound).
pub const BULK_INSERT_DOCUMENTS_MAX: usize = 100_000;

impl Engine {
    /// Creates a collection with its options, UUID and secondary indexes
    /// (a no-op for what exists). Refused once the oplog holds an entry.
    pub fn bulk_create_collection(
        &self,
        ns: &str,
        options: Document,
        uuid: bson::Uuid,
        indexes: Vec<IndexSpec>,
    ) -> Result<()> {
        self.bulk_commit(|applier| {
            applier.create_collection(ns, options, uuid)?;
            for spec in indexes {
                applier.create_index(ns, spec)?;
            }
            Ok(())
        })
    }

    /// Writes copied documents (each with an `_id`) into `ns`, replacing
    /// any stored under the same `_id`, and their secondary index keys.
    /// Returns the bytes written.
    pub fn bulk_insert(&self, ns: &str, documents: &[RawDocumentBuf]) -> Result<u64> {
        self.bulk_insert_with(ns, documents, false)
    }

    /// `bulk_insert` without the secondary indexes: their keys are left
    /// for `bulk_build_indexes` once the collection's copy is complete
    /// (`index_build.rs`); until then those indexes are incomplete.
    pub fn bulk_insert_records(&self, ns: &str, documents: &[RawDocumentBuf]) -> Result<u64> {
        self.bulk_insert_with(ns, documents, true)
    }

    fn bulk_insert_with(&self, ns: &str, documents: &[RawDocumentBuf], defer_indexes: bool) -> Result<u64> {
        if documents.len() > BULK_INSERT_DOCUMENTS_MAX {
            return Err(StorageError::InvalidDocument(format!(
                "a bulk load of {} documents is over the limit of {BULK_INSERT_DOCUMENTS_MAX}",
                documents.len()
            )));
        }
        let mut bytes = 0u64;
        self.bulk_commit(|applier| {
            applier.defer_secondary_indexes = defer_indexes;
            for raw in documents {
                let document = Document::try_from(raw.as_ref())
                    .map_err(|err| StorageError::InvalidDocument(format!("a copied document is not BSON: {err}")))?;
                let value: Value = Arc::from(raw.as_bytes());
                bytes += value.len() as u64;
                applier.insert(ns, &document, value)?;
            }
            Ok(())
        })?;
        Ok(bytes)
    }

    /// Drops everything bulk loads wrote (an initial sync starting over):
    /// every table and the catalog, in one commit.
    pub fn bulk_reset(&self) -> Result<()> {
        let _state = self.inner.write.lock();
        let _checkpoint = self.inner.checkpoint_lock.lock();
        self.check_bulk_loadable()?;
        let next_table = self.inner.catalog.read().latest().next_table_id;
        let mut batch = KvBatch::default();
        batch.delete_range(
            table_prefix(FIRST_TABLE_ID).to_vec(),
            table_prefix(next_table.max(FIRST_TABLE_ID)).to_vec(),
        );
        self.commit_bulk(batch, Catalog::default())
    }

    /// Step 1: nothing but bulk loads has written yet.
    pub(super) fn check_bulk_loadable(&self) -> Result<()> {
        self.inner.check_writable()?;
        let inner = &self.inner;
        let applied = inner.applied.load().optime;
        let empty = applied.is_null() || applied.ts == Timestamp::ZERO;
        if !empty || inner.store.versions_in_memory() > 0 || inner.catalog.read().version_count() > 0 {
            return Err(StorageError::IllegalOperation(format!(
                "bulk loads are for an empty member only (last applied {applied})"
            )));
        }
        Ok(())
    }

    /// Steps 1 to 4 for the changes `load` computes.
    pub(super) fn bulk_commit(&self, load: impl FnOnce(&mut Applier<'_>) -> Result<()>) -> Result<()> {
        let _state = self.inner.write.lock();
        let _checkpoint = self.inner.checkpoint_lock.lock();
        self.check_bulk_loadable()?;
        let catalog = self.inner.catalog.read().latest();
        let mut applier = Applier::new(&self.inner.store, &catalog, Strictness::Replay);
        applier.capped_after_last = true;
        load(&mut applier)?;
        let catalog = applier.catalog;
        let mut changes = applier.changes;
        // In key order: the store's B-tree then takes each page's inserts
        // one after another instead of walking to a random leaf per key
        // (index keys arrive in document order, not key order). Stable, so
        // a key deleted and written again in one load keeps that order.
        changes.sort_by(|a, b| a.0.cmp(&b.0));
        let mut batch = KvBatch::default();
        for (key, value) in changes {
            match value {
                // Shared, not copied: the load's values are its documents.
                Some(value) => batch.put_shared(key, value),
                None => batch.delete(key),
            }
        }
        self.commit_bulk(batch, (*catalog).clone())
    }

    /// Steps 3 and 4.
    pub(super) fn commit_bulk(&self, mut batch: KvBatch, catalog: Catalog) -> Result<()> {
        let inner = &self.inner;
        let ts = inner.store.checkpoint_ts();
        batch.set_metadata(META_FORMAT_VERSION, CHECKPOINT_FORMAT_VERSION.to_be_bytes().to_vec());
        batch.set_metadata(META_CHECKPOINT_TS, ts.as_u64().to_be_bytes().to_vec());
        batch.set_metadata(META_CATALOG, catalog.to_bytes());
        if let Err(err) = inner.kv.commit(batch) {
            let reason = format!("bulk load commit failed: {err}");
            inner.options.poison_policy.on_failure(FailedPart::Checkpoint, &reason);
            *inner.poisoned.lock() = Some(reason.clone());
            return Err(StorageError::Poisoned(reason));
        }
        let snapshot = inner.kv.snapshot()?;
        // The catalog first: a reader taking a view in between sees the
        // new catalog over the old base, so at worst a collection without
        // its newest documents, never documents without their collection.
        *inner.catalog.write() = CatalogHistory::new(catalog);
        inner.store.install_base(BaseView { kv: snapshot, ts, floor: None });
        Ok(())
    }
}
