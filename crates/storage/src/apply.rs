//! Applying one oplog entry to the versioned store.
//!
//! The write path, recovery and (later) secondaries all go through
//! `Applier`: it reads the current state (the newest version of every
//! key), computes the changes of one entry (the record, every index key
//! removed or added, catalog changes) without touching the store, and the
//! caller commits them at the entry's timestamp only once nothing can fail
//! any more (after the journal append on the write path).
//!
//! Replay is idempotent (seed 000, 4.2): an insert of an `_id` that exists
//! replaces the document, an update or delete of a missing `_id` is
//! ignored, and commands whose effect is already there are no-ops, because
//! recovery and initial sync may apply an entry whose effect the state
//! already holds. The write path asks for the strict checks instead
//! (`Strictness::Write`): duplicate `_id`, unique indexes.
//!
//! Key layout (see `docs/storage/checkpoint-format.md`):
//! - record: `table id (u32 BE) ++ record key` -> document BSON;
//! - index entry: `table id ++ index key ++ record key` -> index-key length
//!   (u32 BE). Index keys are self-delimiting, so all entries of one index
//!   key share the prefix `table id ++ index key`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document};
use slipstream_query::index_key::{decode_key, prefix_end, record_key};
use slipstream_query::update::apply_oplog_update;

use crate::catalog::{id_index_spec, Catalog, CollectionMeta, IndexMeta};
use crate::collection_totals::{self, CollectionTotals, TotalsDelta};
use crate::engine::IndexSpec;
use crate::index_spec::IndexModification;
use crate::mvcc::{ReadView, Value, VersionedStore};
use crate::oplog_entry::{split_namespace, OpKind, OplogEntry};
use crate::session::{
    derived_collection_uuid, image_record, parse_optime, transaction_record, EntrySession, RetryImage,
    StatementSession, IMAGE_COLLECTION_NS, TRANSACTIONS_NS,
};
use crate::{OpTime, StorageError, Timestamp};

pub type Result<T> = std::result::Result<T, StorageError>;

/// MongoDB's maximum BSON document size.
pub const DOCUMENT_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Records read per batch while an index is built.
const INDEX_BUILD_BATCH_MAX: usize = 1024;

/// The prefix of every key of a table.
pub fn table_prefix(table: u32) -> [u8; 4] {
    table.to_be_bytes()
}

/// The key range `[start, end)` of a whole table.
pub fn table_range(table: u32) -> (Vec<u8>, Vec<u8>) {
    assert!(table < u32::MAX, "table id out of range");
    (table_prefix(table).to_vec(), table_prefix(table + 1).to_vec())
}

pub fn record_store_key(table: u32, record_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(4 + record_key.len());
    key.extend_from_slice(&table_prefix(table));
    key.extend_from_slice(record_key);
    key
}

pub fn index_store_key(table: u32, index_key: &[u8], record_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(4 + index_key.len() + record_key.len());
    key.extend_from_slice(&table_prefix(table));
    key.extend_from_slice(index_key);
    key.extend_from_slice(record_key);
    key
}

/// Splits an index entry (store key and value) into (index key, record key).
pub fn split_index_entry<'k>(store_key: &'k [u8], value: &[u8]) -> Result<(&'k [u8], &'k [u8])> {
    let length: [u8; 4] = value
        .try_into()
        .map_err(|_| StorageError::Corruption(format!("index entry value of {} bytes, expected 4", value.len())))?;
    let index_key_len = u32::from_be_bytes(length) as usize;
    if store_key.len() < 4 + index_key_len {
        return Err(StorageError::Corruption("index entry shorter than its index key".to_string()));
    }
    Ok((&store_key[4..4 + index_key_len], &store_key[4 + index_key_len..]))
}

pub fn parse_document(bytes: &[u8]) -> Result<Document> {
    Document::from_reader(bytes).map_err(|e| StorageError::Corruption(format!("stored document is not BSON: {e}")))
}

/// Which checks an application makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strictness {
    /// The write path: duplicate `_id` and unique index keys are errors.
    Write,
    /// Replay (recovery, secondaries): idempotent, nothing is refused.
    Replay,
}

/// The changes of one oplog entry, computed against the newest state.
pub struct Applier<'a> {
    store: &'a VersionedStore,
    /// The newest state: every committed version, over the current base.
    view: ReadView,
    /// The catalog being changed (starts as the newest one; copied on the
    /// first change).
    pub catalog: Arc<Catalog>,
    pub catalog_changed: bool,
    /// Key changes to commit at the entry's timestamp.
    pub changes: Vec<(Vec<u8>, Option<Value>)>,
    strictness: Strictness,
    /// Keep the documents before and after the next document write
    /// (a findAndModify's retry image); off unless asked for.
    pub capture_images: bool,
    /// What the last document write replaced and wrote, when captured.
    images: Option<Images>,
    /// The timestamp of the entry being applied: a capped collection's
    /// insert takes its place in the order from it (`capped.rs`).
    pub entry_ts: Timestamp,
    /// Capped inserts go after the collection's last record instead of at
    /// `entry_ts` (an initial sync's bulk load, which has no entries).
    pub capped_after_last: bool,
    /// Writes leave secondary indexes alone (an initial sync's copy: its
    /// indexes are built afterwards from sorted keys, `index_build.rs`).
    pub defer_secondary_indexes: bool,
    /// Capped collections' totals after this applier's writes so far.
    capped_totals: HashMap<u32, crate::capped::Totals>,
    /// Collections' totals after this applier's writes so far, by stats
    /// table, with the place in `changes` of the one write of each: an
    /// entry (or a bulk load of many documents) writes them once.
    totals: HashMap<u32, (CollectionTotals, usize)>,
}

/// What a sorted index build wrote into one index's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltIndex {
    pub table: u32,
    pub keys: u64,
    pub multikey: bool,
}

/// A document before and after one write.
struct Images {
    pre: Option<Document>,
    post: Option<Document>,
}

impl<'a> Applier<'a> {
    pub fn new(store: &'a VersionedStore, catalog: &Arc<Catalog>, strictness: Strictness) -> Applier<'a> {
        let view = store.view(Timestamp::MAX).expect("the newest state is always readable");
        Applier {
            store,
            view,
            catalog: catalog.clone(),
            catalog_changed: false,
            changes: Vec::new(),
            strictness,
            capture_images: false,
            images: None,
            entry_ts: Timestamp::ZERO,
            capped_after_last: false,
            defer_secondary_indexes: false,
            capped_totals: HashMap::new(),
            totals: HashMap::new(),
        }
    }

    /// The catalog for changing: marks it changed.
    fn catalog_mut(&mut self) -> &mut Catalog {
        self.catalog_changed = true;
        Arc::make_mut(&mut self.catalog)
    }

    fn read_document(&self, table: u32, record_key: &[u8]) -> Result<Option<Document>> {
        Ok(self.read_record(table, record_key)?.map(|(document, _)| document))
    }

    /// A stored document with its stored size in bytes (what the totals
    /// counted when it was written).
    fn read_record(&self, table: u32, record_key: &[u8]) -> Result<Option<(Document, usize)>> {
        match self.store.get(&self.view, &record_store_key(table, record_key))? {
            Some(bytes) => Ok(Some((parse_document(bytes.as_ref())?, bytes.as_ref().len()))),
            None => Ok(None),
        }
    }

    /// Changes the totals of the collection whose stats table is
    /// `stats_table`: the first change of this applier reads them from the
    /// newest state and adds their write to `changes`, later ones rewrite
    /// that write in place.
    fn change_totals(&mut self, stats_table: u32, change: impl FnOnce(&mut CollectionTotals)) -> Result<()> {
        let (totals, place) = match self.totals.remove(&stats_table) {
            Some(pending) => pending,
            None => {
                let totals = collection_totals::read(self.store, &self.view, stats_table)?;
                self.changes.push((collection_totals::totals_key(stats_table), None));
                (totals, self.changes.len() - 1)
            }
        };
        let mut totals = totals;
        change(&mut totals);
        assert!(self.changes[place].0 == collection_totals::totals_key(stats_table), "totals write moved");
        self.changes[place].1 = Some(totals.to_value());
        self.totals.insert(stats_table, (totals, place));
        Ok(())
    }

    /// Inserts (or, on replay, replaces) a document.
    pub fn insert(&mut self, ns: &str, document: &Document, bytes: Value) -> Result<()> {
        let Some(collection) = self.catalog.get(ns).cloned() else {
            return self.missing(ns);
        };
        let id = document
            .get("_id")
            .ok_or_else(|| StorageError::InvalidDocument("document to insert has no _id".to_string()))?;
        let record_key = record_key(id);
        let old = self.read_record(collection.record_table, &record_key)?;
        if old.is_some() && self.strictness == Strictness::Write {
            let spec = id_index_spec();
            return Err(StorageError::DuplicateKey {
                namespace: ns.to_string(),
                index_name: spec.name,
                key_pattern: spec.key,
                key_value: bson::doc! {"_id": id.clone()},
            });
        }
        let old = old.as_ref().map(|(document, size)| (document, *size));
        self.write_document(&collection, &record_key, old, Some((document, bytes)))
    }

    /// Replaces the document with `_id == id` by `new_document` (the write
    /// path passes the post-image it computed).
    pub fn update_to(&mut self, ns: &str, id: &Bson, new_document: &Document, bytes: Value) -> Result<bool> {
        let Some(collection) = self.catalog.get(ns).cloned() else {
            self.missing(ns)?;
            return Ok(false);
        };
        match new_document.get("_id") {
            Some(new_id) if slipstream_query::compare::values_equal(new_id, id) => {}
            _ => return Err(StorageError::InvalidDocument("an update may not change or remove _id".to_string())),
        }
        let record_key = record_key(id);
        let Some((old, old_size)) = self.read_record(collection.record_table, &record_key)? else {
            return Ok(false);
        };
        self.write_document(&collection, &record_key, Some((&old, old_size)), Some((new_document, bytes)))?;
        Ok(true)
    }

    /// Applies an update in oplog form (`o`) to the document `o2._id`.
    pub fn update_oplog_form(&mut self, ns: &str, o2: &Document, form: &Document) -> Result<()> {
        let Some(collection) = self.catalog.get(ns).cloned() else {
            return self.missing(ns);
        };
        let id = o2.get("_id").ok_or_else(|| StorageError::Corruption(format!("update entry o2 without _id: {o2}")))?;
        let record_key = record_key(id);
        let Some((old, old_size)) = self.read_record(collection.record_table, &record_key)? else {
            return Ok(());
        };
        let new_document = apply_oplog_update(&old, form)?;
        let bytes = encode_document(&new_document)?;
        self.write_document(&collection, &record_key, Some((&old, old_size)), Some((&new_document, bytes)))
    }

    /// Deletes the document with `_id == id`; false if there was none.
    pub fn delete(&mut self, ns: &str, id: &Bson) -> Result<bool> {
        let Some(collection) = self.catalog.get(ns).cloned() else {
            self.missing(ns)?;
            return Ok(false);
        };
        let record_key = record_key(id);
        let Some((old, old_size)) = self.read_record(collection.record_table, &record_key)? else {
            return Ok(false);
        };
        self.write_document(&collection, &record_key, Some((&old, old_size)), None)?;
        Ok(true)
    }

    /// A data entry for a collection the catalog does not have: an error on
    /// the write path, ignored on replay (the collection was dropped later
    /// in the history being replayed, as MongoDB's oplog application does).
    fn missing(&self, ns: &str) -> Result<()> {
        match self.strictness {
            Strictness::Write => Err(StorageError::NamespaceNotFound(ns.to_string())),
            Strictness::Replay => {
                tracing::warn!(target: "storage", ns, "oplog entry for a missing collection ignored");
                Ok(())
            }
        }
    }

    /// The record change plus, for every index, the keys that leave and
    /// the keys that arrive.
    fn write_document(
        &mut self,
        collection: &Arc<CollectionMeta>,
        record_key: &[u8],
        old: Option<(&Document, usize)>,
        new: Option<(&Document, Value)>,
    ) -> Result<()> {
        let old_size = old.map(|(_, size)| size);
        let old = old.map(|(document, _)| document);
        let mut multikey_now = Vec::new();
        let mut index_changes = Vec::new();
        let mut totals_delta = TotalsDelta {
            old_bytes: old_size,
            new_bytes: new.as_ref().map(|(_, bytes)| bytes.len()),
            index_keys: Vec::new(),
        };
        // The collated `_id` table is maintained (and unique) like an index.
        let secondary = if self.defer_secondary_indexes { &collection.indexes[..0] } else { &collection.indexes[..] };
        let positioned = secondary.iter().enumerate().map(|(position, index)| (Some(position), index));
        for (position, index) in positioned.chain(collection.id_collated.iter().map(|index| (None, index))) {
            let old_keys = match old {
                Some(doc) => index.keys_of(doc)?.keys,
                None => Vec::new(),
            };
            let (new_keys, multikey) = match &new {
                Some((doc, _)) => {
                    let keys = index.keys_of(doc)?;
                    (keys.keys, keys.multikey)
                }
                None => (Vec::new(), false),
            };
            if let (true, false, Some(position)) = (multikey, index.multikey, position) {
                multikey_now.push(position);
            }
            let old_set: BTreeSet<&Vec<u8>> = old_keys.iter().collect();
            let new_set: BTreeSet<&Vec<u8>> = new_keys.iter().collect();
            if position.is_some() {
                let removed = old_set.difference(&new_set).count() as u64;
                let added = new_set.difference(&old_set).count() as u64;
                totals_delta.index_keys.push((index.table, removed, added));
            }
            for key in old_set.difference(&new_set) {
                index_changes.push((index_store_key(index.table, key, record_key), None));
            }
            for key in new_set.difference(&old_set) {
                if index.spec.unique && self.strictness == Strictness::Write {
                    self.check_unique(&collection.ns, index, key, record_key)?;
                }
                let value: Value = Arc::from(&(key.len() as u32).to_be_bytes()[..]);
                index_changes.push((index_store_key(index.table, key, record_key), Some(value)));
            }
        }
        if self.capture_images {
            self.images = Some(Images { pre: old.cloned(), post: new.as_ref().map(|(doc, _)| (*doc).clone()) });
        }
        if let Some(table) = collection.order_table {
            let change = crate::capped::RecordChange {
                record_key,
                old_bytes: old_size,
                new_bytes: new.as_ref().map(|(_, bytes)| bytes.len()),
                place: if self.capped_after_last {
                    crate::capped::OrderPlace::AfterLast
                } else {
                    crate::capped::OrderPlace::At(self.entry_ts)
                },
            };
            index_changes.extend(crate::capped::changes(
                self.store,
                &self.view,
                table,
                &change,
                &mut self.capped_totals,
            )?);
        }
        let record_value = new.map(|(_, bytes)| bytes);
        self.changes.push((record_store_key(collection.record_table, record_key), record_value));
        self.changes.extend(index_changes);
        if let Some(stats_table) = collection.stats_table {
            self.change_totals(stats_table, |totals| totals.apply(&totals_delta))?;
        }
        if !multikey_now.is_empty() {
            let mut changed = (**collection).clone();
            for position in multikey_now {
                changed.indexes[position].multikey = true;
            }
            self.catalog_mut().collections.insert(changed.ns.clone(), Arc::new(changed));
        }
        Ok(())
    }

    /// DuplicateKey if another record holds `index_key` in `index`.
    fn check_unique(&self, ns: &str, index: &IndexMeta, index_key: &[u8], record_key: &[u8]) -> Result<()> {
        let prefix = index_store_key(index.table, index_key, &[]);
        let end = match prefix_end(&prefix) {
            Some(end) => Bound::Excluded(end),
            None => Bound::Unbounded,
        };
        let found = self.store.scan(&self.view, Bound::Included(prefix.clone()), end, false, 2)?;
        for (key, _) in &found {
            if &key[prefix.len()..] != record_key {
                return Err(duplicate_key(ns, index, index_key));
            }
        }
        Ok(())
    }

    /// Creates a collection; false if it exists (a no-op on replay).
    pub fn create_collection(&mut self, ns: &str, options: Document, uuid: bson::Uuid) -> Result<bool> {
        if self.catalog.get(ns).is_some() {
            return match self.strictness {
                Strictness::Write => Err(StorageError::NamespaceExists(ns.to_string())),
                Strictness::Replay => Ok(false),
            };
        }
        let catalog = self.catalog_mut();
        let record_table = catalog.allocate_table();
        let order_table = crate::capped::is_capped(&options).then(|| catalog.allocate_table());
        let id_collated = crate::catalog::id_collated_index(&options, || catalog.allocate_table())?;
        let stats_table = Some(catalog.allocate_table());
        let meta = CollectionMeta {
            ns: ns.to_string(),
            uuid,
            options,
            record_table,
            indexes: Vec::new(),
            order_table,
            id_collated,
            stats_table,
        };
        catalog.collections.insert(ns.to_string(), Arc::new(meta));
        Ok(true)
    }

    /// Drops a collection: its tables are deleted by the checkpoint that
    /// covers `ts`.
    pub fn drop_collection(&mut self, ns: &str, ts: Timestamp) -> Result<bool> {
        let Some(meta) = self.catalog.get(ns).cloned() else {
            return match self.strictness {
                Strictness::Write => Err(StorageError::NamespaceNotFound(ns.to_string())),
                Strictness::Replay => Ok(false),
            };
        };
        let catalog = self.catalog_mut();
        catalog.collections.remove(ns);
        for table in meta.tables() {
            catalog.dropped_tables.insert(table, ts);
        }
        Ok(true)
    }

    pub fn drop_database(&mut self, db: &str, ts: Timestamp) -> Result<usize> {
        let names: Vec<String> = self.catalog.collections_in(db).iter().map(|c| c.ns.clone()).collect();
        for ns in &names {
            self.drop_collection(ns, ts)?;
        }
        Ok(names.len())
    }

    /// Renames a collection (its tables move with it).
    pub fn rename_collection(&mut self, from: &str, to: &str, drop_target: bool, ts: Timestamp) -> Result<bool> {
        if from == to {
            // Dropping the "target" would drop the collection's own tables.
            return match self.strictness {
                Strictness::Write => Err(StorageError::InvalidDocument("Can't rename a collection to itself".to_string())),
                Strictness::Replay => Ok(false),
            };
        }
        let Some(meta) = self.catalog.get(from).cloned() else {
            return match self.strictness {
                Strictness::Write => Err(StorageError::NamespaceNotFound(from.to_string())),
                Strictness::Replay => Ok(false),
            };
        };
        if self.catalog.get(to).is_some() {
            if !drop_target && self.strictness == Strictness::Write {
                return Err(StorageError::NamespaceExists(to.to_string()));
            }
            self.drop_collection(to, ts)?;
        }
        let mut renamed = (*meta).clone();
        renamed.ns = to.to_string();
        let catalog = self.catalog_mut();
        catalog.collections.remove(from);
        catalog.collections.insert(to.to_string(), Arc::new(renamed));
        Ok(true)
    }

    /// Creates an index and builds it from the collection's documents;
    /// false if an index of that name exists (a no-op).
    pub fn create_index(&mut self, ns: &str, spec: IndexSpec) -> Result<bool> {
        let Some(collection) = self.catalog.get(ns).cloned() else {
            self.missing(ns)?;
            return Ok(false);
        };
        if spec.name == "_id_" || collection.index(&spec.name).is_some() {
            return Ok(false);
        }
        let table = self.catalog_mut().allocate_table();
        let mut index = IndexMeta::new(spec, table)?;
        let mut unique_keys: BTreeMap<Vec<u8>, ()> = BTreeMap::new();
        let mut keys_built = 0u64;
        let (start, end) = table_range(collection.record_table);
        let mut from = Bound::Included(start);
        loop {
            let batch = self.store.scan(&self.view, from.clone(), Bound::Excluded(end.clone()), false, INDEX_BUILD_BATCH_MAX)?;
            let Some((last, _)) = batch.last() else { break };
            from = Bound::Excluded(last.clone());
            for (key, bytes) in &batch {
                let document = parse_document(bytes.as_ref())?;
                let keys = index.keys_of(&document)?;
                index.multikey |= keys.multikey;
                let record_key = &key[4..];
                for index_key in keys.keys {
                    if index.spec.unique && self.strictness == Strictness::Write && unique_keys.insert(index_key.clone(), ()).is_some() {
                        return Err(duplicate_key(ns, &index, &index_key));
                    }
                    let value: Value = Arc::from(&(index_key.len() as u32).to_be_bytes()[..]);
                    self.changes.push((index_store_key(table, &index_key, record_key), Some(value)));
                    keys_built += 1;
                }
            }
            if batch.len() < INDEX_BUILD_BATCH_MAX {
                break;
            }
        }
        if let Some(stats_table) = collection.stats_table {
            self.change_totals(stats_table, |totals| {
                let previous = totals.index_keys.insert(table, keys_built);
                assert!(previous.is_none(), "a new index table {table} already counted");
            })?;
        }
        let mut changed = (*collection).clone();
        changed.indexes.push(index);
        self.catalog_mut().collections.insert(ns.to_string(), Arc::new(changed));
        Ok(true)
    }

    /// Records a sorted build's outcome (`index_build.rs`): each index's
    /// key count in the collection's totals and its multikey flag.
    pub fn finish_index_build(&mut self, ns: &str, built: &[BuiltIndex]) -> Result<()> {
        let Some(collection) = self.catalog.get(ns).cloned() else {
            return self.missing(ns);
        };
        if let Some(stats_table) = collection.stats_table {
            self.change_totals(stats_table, |totals| {
                for index in built {
                    totals.index_keys.insert(index.table, index.keys);
                }
            })?;
        }
        let mut changed = (*collection).clone();
        for index in changed.indexes.iter_mut() {
            index.multikey |= built.iter().any(|b| b.table == index.table && b.multikey);
        }
        if changed != *collection {
            self.catalog_mut().collections.insert(ns.to_string(), Arc::new(changed));
        }
        Ok(())
    }

    pub fn drop_index(&mut self, ns: &str, name: &str, ts: Timestamp) -> Result<bool> {
        let Some(collection) = self.catalog.get(ns).cloned() else {
            self.missing(ns)?;
            return Ok(false);
        };
        let Some(position) = collection.indexes.iter().position(|i| i.spec.name == name) else {
            return match self.strictness {
                Strictness::Write => Err(StorageError::IndexNotFound(format!("index not found with name [{name}]"))),
                Strictness::Replay => Ok(false),
            };
        };
        let mut changed = (*collection).clone();
        let removed = changed.indexes.remove(position);
        if let Some(stats_table) = collection.stats_table {
            self.change_totals(stats_table, |totals| {
                totals.index_keys.remove(&removed.table);
            })?;
        }
        let catalog = self.catalog_mut();
        catalog.dropped_tables.insert(removed.table, ts);
        catalog.collections.insert(ns.to_string(), Arc::new(changed));
        Ok(true)
    }

    /// `collMod` with `index: {name, hidden?, expireAfterSeconds?}`: hides
    /// the index from the planner or shows it again (it stays maintained
    /// either way), or sets its TTL.
    pub fn modify_index(&mut self, ns: &str, name: &str, modification: &IndexModification) -> Result<bool> {
        let Some(collection) = self.catalog.get(ns).cloned() else {
            self.missing(ns)?;
            return Ok(false);
        };
        let Some(position) = collection.indexes.iter().position(|i| i.spec.name == name) else {
            return match self.strictness {
                Strictness::Write => Err(StorageError::IndexNotFound(format!("cannot find index {name} for ns {ns}"))),
                Strictness::Replay => Ok(false),
            };
        };
        let mut changed = (*collection).clone();
        changed.indexes[position].spec = modification.applied_to(&changed.indexes[position].spec);
        self.catalog_mut().collections.insert(ns.to_string(), Arc::new(changed));
        Ok(true)
    }

    /// `collMod` of collection options (`validator`, `validationLevel`,
    /// `validationAction`): each field of `changes` replaces the option of
    /// that name.
    pub fn modify_collection_options(&mut self, ns: &str, changes: &Document) -> Result<bool> {
        let Some(collection) = self.catalog.get(ns).cloned() else {
            self.missing(ns)?;
            return Ok(false);
        };
        let mut changed = (*collection).clone();
        changed.options.extend(changes.clone());
        self.catalog_mut().collections.insert(ns.to_string(), Arc::new(changed));
        Ok(true)
    }

    /// Applies a parsed oplog entry (replay or a secondary), with the
    /// session bookkeeping of a retryable write's entry.
    pub fn apply_entry(&mut self, entry: &OplogEntry) -> Result<()> {
        self.entry_ts = entry.ts;
        self.capture_images = entry.needs_retry_image.is_some();
        self.apply_operation(entry)?;
        if let Some(session) = &entry.session {
            let optime = OpTime::new(entry.ts, entry.term);
            let images = self.images.take();
            self.upsert_transaction(&session.lsid, session.txn_number, optime, entry.wall)?;
            if let Some(kind) = entry.needs_retry_image {
                self.upsert_image(&session.lsid, session.txn_number, entry.ts, kind, images)?;
            }
        }
        Ok(())
    }

    /// The bookkeeping of a client's retryable write, after its document
    /// write: the session's previous write of the same transaction number
    /// (for the entry's `prevOpTime`), the new `config.transactions`
    /// record and, when asked, the retry image. `TransactionTooOld` when
    /// the session has written with a higher transaction number.
    pub fn record_statement(
        &mut self,
        session: &StatementSession,
        retry_image: Option<RetryImage>,
        optime: OpTime,
        wall: bson::DateTime,
    ) -> Result<EntrySession> {
        let images = self.images.take();
        let prev_op_time = match self.transaction_record(&session.lsid)? {
            Some(record) => {
                let txn_num = record.get_i64("txnNum").map_err(|_| bad_record(&record))?;
                if txn_num > session.txn_number {
                    return Err(StorageError::TransactionTooOld(format!(
                        "Cannot start transaction {} on session {} because a newer transaction {txn_num} has already started",
                        session.txn_number, session.lsid
                    )));
                }
                let last = record.get_document("lastWriteOpTime").ok().and_then(parse_optime);
                match (txn_num == session.txn_number, last) {
                    (true, Some(last)) => last,
                    (true, None) => return Err(bad_record(&record)),
                    (false, _) => OpTime::NULL,
                }
            }
            None => OpTime::NULL,
        };
        self.upsert_transaction(&session.lsid, session.txn_number, optime, wall)?;
        if let Some(kind) = retry_image {
            self.upsert_image(&session.lsid, session.txn_number, optime.ts, kind, images)?;
        }
        Ok(EntrySession {
            lsid: session.lsid.clone(),
            txn_number: session.txn_number,
            stmt_id: Some(session.stmt_id),
            prev_op_time,
        })
    }

    /// The session's `config.transactions` record in the newest state.
    fn transaction_record(&self, lsid: &Document) -> Result<Option<Document>> {
        let Some(collection) = self.catalog.get(TRANSACTIONS_NS) else {
            return Ok(None);
        };
        self.read_document(collection.record_table, &record_key(&Bson::Document(lsid.clone())))
    }

    fn upsert_transaction(&mut self, lsid: &Document, txn_number: i64, optime: OpTime, wall: bson::DateTime) -> Result<()> {
        self.upsert_derived(TRANSACTIONS_NS, optime.ts, transaction_record(lsid, txn_number, optime, wall))
    }

    fn upsert_image(
        &mut self,
        lsid: &Document,
        txn_number: i64,
        ts: Timestamp,
        kind: RetryImage,
        images: Option<Images>,
    ) -> Result<()> {
        let image = images.and_then(|images| match kind {
            RetryImage::Pre => images.pre,
            RetryImage::Post => images.post,
        });
        self.upsert_derived(IMAGE_COLLECTION_NS, ts, image_record(lsid, txn_number, ts, kind, image))
    }

    /// Writes a derived document (see `session.rs`), creating its
    /// collection on first use with a UUID every member derives alike.
    fn upsert_derived(&mut self, ns: &str, ts: Timestamp, document: Document) -> Result<()> {
        if self.catalog.get(ns).is_none() {
            let uuid = derived_collection_uuid(ns, ts);
            let catalog = self.catalog_mut();
            let record_table = catalog.allocate_table();
            let stats_table = Some(catalog.allocate_table());
            let meta = CollectionMeta {
                ns: ns.to_string(),
                uuid,
                options: Document::new(),
                record_table,
                indexes: Vec::new(),
                order_table: None,
                id_collated: None,
                stats_table,
            };
            catalog.collections.insert(ns.to_string(), Arc::new(meta));
        }
        let collection = self.catalog.get(ns).expect("created above").clone();
        let id = document.get("_id").expect("derived documents have an _id").clone();
        let record_key = record_key(&id);
        let old = self.read_record(collection.record_table, &record_key)?;
        let old = old.as_ref().map(|(document, size)| (document, *size));
        let bytes = encode_internal_document(&document)?;
        let capture = std::mem::replace(&mut self.capture_images, false);
        let result = self.write_document(&collection, &record_key, old, Some((&document, bytes)));
        self.capture_images = capture;
        result
    }

    fn apply_operation(&mut self, entry: &OplogEntry) -> Result<()> {
        match entry.op {
            OpKind::Noop => Ok(()),
            OpKind::Insert => {
                let bytes = match &entry.o_bytes.0 {
                    Some(bytes) if bytes.len() <= DOCUMENT_BYTES_MAX => bytes.clone(),
                    _ => encode_document(&entry.o)?,
                };
                self.insert(&entry.ns, &entry.o, bytes)
            }
            OpKind::Update => {
                let o2 = entry.o2.as_ref().expect("parsed update entries have o2");
                self.update_oplog_form(&entry.ns, o2, &entry.o)
            }
            OpKind::Delete => {
                let id = entry
                    .o
                    .get("_id")
                    .ok_or_else(|| StorageError::Corruption(format!("delete entry without _id: {}", entry.o)))?;
                self.delete(&entry.ns, id).map(|_| ())
            }
            OpKind::Command => self.apply_command(entry),
        }
    }

    fn apply_command(&mut self, entry: &OplogEntry) -> Result<()> {
        let (db, _) = split_namespace(&entry.ns)
            .ok_or_else(|| StorageError::Corruption(format!("command entry with namespace {}", entry.ns)))?;
        let o = &entry.o;
        let (name, value) = o
            .iter()
            .next()
            .ok_or_else(|| StorageError::Corruption("command entry with an empty o".to_string()))?;
        let collection_ns = |value: &Bson| -> Result<String> {
            value
                .as_str()
                .map(|coll| format!("{db}.{coll}"))
                .ok_or_else(|| StorageError::Corruption(format!("command entry {name} without a collection name")))
        };
        match name.as_str() {
            "create" => {
                let ns = collection_ns(value)?;
                let mut options = o.clone();
                options.remove("create");
                // The UUID must come from the entry: every member must
                // give the collection the same one.
                let uuid = entry.ui.ok_or_else(|| StorageError::Corruption(format!("create entry without ui: {o}")))?;
                self.create_collection(&ns, options, uuid).map(|_| ())
            }
            "drop" => self.drop_collection(&collection_ns(value)?, entry.ts).map(|_| ()),
            "dropDatabase" => self.drop_database(db, entry.ts).map(|_| ()),
            "renameCollection" => {
                let from = value.as_str().ok_or_else(|| StorageError::Corruption("renameCollection without a source".into()))?;
                let to = o.get_str("to").map_err(|_| StorageError::Corruption("renameCollection without to".into()))?;
                let drop_target = o.get_bool("dropTarget").unwrap_or(false);
                self.rename_collection(from, to, drop_target, entry.ts).map(|_| ())
            }
            "createIndexes" => {
                let ns = collection_ns(value)?;
                let spec = IndexSpec::from_document(o)?;
                self.create_index(&ns, spec).map(|_| ())
            }
            "collMod" => {
                let ns = collection_ns(value)?;
                if let Ok(index) = o.get_document("index") {
                    let (name, modification) = IndexModification::from_document(index)?;
                    return self.modify_index(&ns, &name, &modification).map(|_| ());
                }
                let mut changes = o.clone();
                changes.remove("collMod");
                self.modify_collection_options(&ns, &changes).map(|_| ())
            }
            "dropIndexes" => {
                let ns = collection_ns(value)?;
                let index = o.get_str("index").map_err(|_| StorageError::Corruption("dropIndexes without index".into()))?;
                self.drop_index(&ns, index, entry.ts).map(|_| ())
            }
            other => Err(StorageError::Corruption(format!("unknown command in the oplog: {other}"))),
        }
    }
}

fn bad_record(record: &Document) -> StorageError {
    StorageError::Corruption(format!("{TRANSACTIONS_NS} holds a malformed record: {record}"))
}

pub fn duplicate_key(ns: &str, index: &IndexMeta, index_key: &[u8]) -> StorageError {
    let key_value = decode_key(index_key, &index.pattern).unwrap_or_default();
    StorageError::DuplicateKey {
        namespace: ns.to_string(),
        index_name: index.spec.name.clone(),
        key_pattern: index.spec.key.clone(),
        key_value,
    }
}

/// A document's BSON, refusing documents over 16 MB.
pub fn encode_document(document: &Document) -> Result<Value> {
    encode_with_limit(document, DOCUMENT_BYTES_MAX)
}

/// The BSON of a document the server writes for itself around a client's
/// (a retryable write's image: the client's document of up to 16 MB plus
/// the record's fields), refused only past 16 MB + 16 KB, MongoDB's
/// `BSONObjMaxInternalSize`. At 16 MB a `findAndModify` of a document
/// near the limit failed whenever retryable writes were on.
pub fn encode_internal_document(document: &Document) -> Result<Value> {
    encode_with_limit(document, crate::journal::ENTRY_BYTES_MAX)
}

fn encode_with_limit(document: &Document, limit: usize) -> Result<Value> {
    let bytes = document.to_vec().map_err(|e| StorageError::InvalidDocument(e.to_string()))?;
    if bytes.len() > limit {
        return Err(StorageError::DocumentTooLarge(format!(
            "object to insert too large. size in bytes: {}, max size: {limit}",
            bytes.len()
        )));
    }
    Ok(Arc::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of docs/storage/checkpoint-format.md.
    #[test]
    fn key_layout_matches_the_format_document() {
        let rk = record_key(&Bson::Int32(1));
        let record = record_store_key(1, &rk);
        assert_eq!(record, vec![0, 0, 0, 1, 0x14, 0xBF, 0xF0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let pattern = slipstream_query::index_key::KeyPattern::parse(&bson::doc! {"x": 1}).unwrap();
        let keys = slipstream_query::index_key::index_keys(&bson::doc! {"_id": 1, "x": "a"}, &pattern, false).unwrap().keys;
        assert_eq!(keys, vec![vec![0x19, 0x61, 0x00, 0x00]]);
        let entry = index_store_key(2, &keys[0], &rk);
        assert_eq!(entry, vec![0, 0, 0, 2, 0x19, 0x61, 0, 0, 0x14, 0xBF, 0xF0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let value = (keys[0].len() as u32).to_be_bytes();
        let (index_key, record) = split_index_entry(&entry, &value).unwrap();
        assert_eq!(index_key, &keys[0][..]);
        assert_eq!(record, &rk[..]);
        assert!(split_index_entry(&entry, &[0, 0, 0]).is_err());
    }
}
