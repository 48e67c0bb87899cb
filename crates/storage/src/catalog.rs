//! The catalog: collections, their UUIDs, table ids and indexes.
//!
//! Every collection owns a record table (the `_id_` index doubles as it:
//! record keys are the encoded `_id`) and one table per secondary index.
//! Table ids are allocated from `next_table_id` and never reused while
//! data under them can exist: a dropped table's id stays in
//! `dropped_tables` until the checkpoint that deletes its keys.
//!
//! The catalog changes only through oplog command entries (and the
//! multikey flag through the write that first indexes an array), so it is
//! versioned by timestamp exactly like data: `CatalogHistory` keeps the
//! checkpointed catalog plus one version per change since, which gives
//! the catalog as of any readable timestamp, rollback, and the catalog to
//! checkpoint at the stable timestamp.

use std::collections::BTreeMap;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_query::filter::Filter;
use slipstream_query::index_key::{index_keys, IndexKeys, KeyPattern};

use crate::engine::{CollectionInfo, IndexSpec};
use crate::{StorageError, Timestamp};
use crate::timestamp::TimestampBson;

/// Format version of the serialized catalog.
const CATALOG_FORMAT_VERSION: i32 = 1;
/// The first table id handed out (ids below are reserved).
pub const FIRST_TABLE_ID: u32 = 1;

/// A secondary index (every index but `_id_`).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexMeta {
    pub spec: IndexSpec,
    pub pattern: KeyPattern,
    /// The parsed `partialFilterExpression`, if any.
    pub partial: Option<PartialFilter>,
    pub table: u32,
    pub multikey: bool,
}

/// A partial index's filter, parsed once; equal when their documents are.
#[derive(Clone, Debug)]
pub struct PartialFilter(Arc<Filter>);

impl PartialEq for PartialFilter {
    fn eq(&self, other: &Self) -> bool {
        self.0.source() == other.0.source()
    }
}

impl IndexMeta {
    pub fn new(spec: IndexSpec, table: u32) -> Result<IndexMeta, StorageError> {
        // Keyed under the index's collation (strings as its sort keys).
        let pattern = spec.pattern()?;
        let partial = match &spec.partial_filter_expression {
            // Its strings compare under the index's collation, as MongoDB's do.
            Some(filter) => Some(PartialFilter(Arc::new(Filter::parse_collated(filter, pattern.collation.clone())?))),
            None => None,
        };
        Ok(IndexMeta { spec, pattern, partial, table, multikey: false })
    }

    /// The keys `document` has in this index: none when a partial index's
    /// filter does not admit it.
    pub fn keys_of(&self, document: &Document) -> Result<IndexKeys, StorageError> {
        if let Some(PartialFilter(filter)) = &self.partial {
            if !filter.matches(document) {
                return Ok(IndexKeys { keys: Vec::new(), multikey: false });
            }
        }
        Ok(index_keys(document, &self.pattern, self.spec.sparse)?)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct CollectionMeta {
    pub ns: String,
    pub uuid: bson::Uuid,
    pub options: Document,
    pub record_table: u32,
    /// Secondary indexes in creation order.
    pub indexes: Vec<IndexMeta>,
    /// A capped collection's insertion order (`capped.rs`); None otherwise.
    pub order_table: Option<u32>,
    /// Under a default collation, the `_id`s keyed by that collation: a
    /// unique table beside the record table (whose keys stay the `_id`
    /// bytes, which the oplog and replication rely on), so that `_id`
    /// uniqueness follows the collation as MongoDB's `_id` index does.
    /// Kept out of `info()`: the planner must not bound the record table
    /// by collated keys. None under the simple collation.
    pub id_collated: Option<IndexMeta>,
    /// The running count, BSON bytes and index key counts
    /// (`collection_totals.rs`); None for a collection created before the
    /// totals existed, whose statistics are counted by a scan.
    pub stats_table: Option<u32>,
}

/// The spec of the `_id_` index every collection has.
pub fn id_index_spec() -> IndexSpec {
    IndexSpec { name: "_id_".to_string(), key: doc! {"_id": 1}, unique: true, ..IndexSpec::default() }
}

/// The `id_collated` index of a collection created with `options`, in
/// table `table()` (called only when there is one).
pub fn id_collated_index(options: &Document, table: impl FnOnce() -> u32) -> Result<Option<IndexMeta>, StorageError> {
    // `create` keeps only a non-simple collation, as a full document.
    let Some(Bson::Document(collation)) = options.get("collation") else {
        return Ok(None);
    };
    let spec = IndexSpec { collation: Some(collation.clone()), ..id_index_spec() };
    Ok(Some(IndexMeta::new(spec, table())?))
}

impl CollectionMeta {
    pub fn info(&self) -> CollectionInfo {
        // `_id_` reports the collation its uniqueness follows (as MongoDB
        // lists it); its keys, the record table's, stay the `_id` bytes.
        let mut id_spec = id_index_spec();
        id_spec.collation = self.id_collated.as_ref().and_then(|index| index.spec.collation.clone());
        let mut indexes = vec![id_spec];
        indexes.extend(self.indexes.iter().map(|index| index.spec.clone()));
        let multikey_indexes = self.indexes.iter().filter(|index| index.multikey).map(|index| index.spec.name.clone()).collect();
        CollectionInfo { ns: self.ns.clone(), uuid: self.uuid, options: self.options.clone(), indexes, multikey_indexes }
    }

    pub fn index(&self, name: &str) -> Option<&IndexMeta> {
        self.indexes.iter().find(|index| index.spec.name == name)
    }

    pub fn db(&self) -> &str {
        self.ns.split('.').next().unwrap_or("")
    }

    /// Every table of the collection.
    pub fn tables(&self) -> Vec<u32> {
        let mut tables = vec![self.record_table];
        tables.extend(self.indexes.iter().map(|index| index.table));
        tables.extend(self.order_table);
        tables.extend(self.id_collated.iter().map(|index| index.table));
        tables.extend(self.stats_table);
        tables
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Catalog {
    pub collections: BTreeMap<String, Arc<CollectionMeta>>,
    pub next_table_id: u32,
    /// Tables dropped since the last checkpoint, with the drop's timestamp;
    /// the checkpoint that covers the drop deletes their keys.
    pub dropped_tables: BTreeMap<u32, Timestamp>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog { collections: BTreeMap::new(), next_table_id: FIRST_TABLE_ID, dropped_tables: BTreeMap::new() }
    }
}

fn bad_catalog(what: &str) -> StorageError {
    StorageError::Corruption(format!("checkpoint catalog: {what}"))
}

impl Catalog {
    pub fn get(&self, ns: &str) -> Option<&Arc<CollectionMeta>> {
        self.collections.get(ns)
    }

    pub fn allocate_table(&mut self) -> u32 {
        let id = self.next_table_id;
        assert!(id < u32::MAX, "table ids exhausted");
        self.next_table_id += 1;
        id
    }

    /// Databases that hold at least one collection, sorted.
    pub fn databases(&self) -> Vec<String> {
        let mut dbs: Vec<String> = self.collections.values().map(|c| c.db().to_string()).collect();
        // Namespaces sort with the dot, so "a-b.x" comes before "a.x".
        dbs.sort();
        dbs.dedup();
        dbs
    }

    pub fn collections_in(&self, db: &str) -> Vec<Arc<CollectionMeta>> {
        let prefix = format!("{db}.");
        self.collections
            .range(prefix.clone()..)
            .take_while(|(ns, _)| ns.starts_with(&prefix))
            .map(|(_, meta)| meta.clone())
            .collect()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let collections: Vec<Bson> = self
            .collections
            .values()
            .map(|c| {
                let indexes: Vec<Bson> = c
                    .indexes
                    .iter()
                    .map(|i| {
                        let mut entry = i.spec.to_document();
                        entry.insert("table", i64::from(i.table));
                        entry.insert("multikey", i.multikey);
                        Bson::Document(entry)
                    })
                    .collect();
                let mut entry = doc! {
                    "ns": c.ns.clone(),
                    "uuid": c.uuid,
                    "options": c.options.clone(),
                    "recordTable": i64::from(c.record_table),
                    "indexes": indexes,
                };
                if let Some(order_table) = c.order_table {
                    entry.insert("orderTable", i64::from(order_table));
                }
                if let Some(index) = &c.id_collated {
                    entry.insert("idCollatedTable", i64::from(index.table));
                }
                if let Some(stats_table) = c.stats_table {
                    entry.insert("statsTable", i64::from(stats_table));
                }
                Bson::Document(entry)
            })
            .collect();
        let dropped: Vec<Bson> = self
            .dropped_tables
            .iter()
            .map(|(table, ts)| Bson::Document(doc! {"table": i64::from(*table), "ts": ts.to_bson()}))
            .collect();
        let document = doc! {
            "formatVersion": CATALOG_FORMAT_VERSION,
            "nextTableId": i64::from(self.next_table_id),
            "collections": collections,
            "droppedTables": dropped,
        };
        document.to_vec().expect("the catalog serializes")
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Catalog, StorageError> {
        // Parsed in place: the leading length must match the bytes present.
        let parse = |bytes| Document::try_from(bson::RawDocument::from_bytes(bytes)?);
        let document = parse(bytes).map_err(|e: bson::error::Error| bad_catalog(&e.to_string()))?;
        if document.get_i32("formatVersion").ok() != Some(CATALOG_FORMAT_VERSION) {
            return Err(bad_catalog("unknown formatVersion"));
        }
        let table = |d: &Document, key: &str| -> Result<u32, StorageError> {
            d.get_i64(key).ok().and_then(|v| u32::try_from(v).ok()).ok_or_else(|| bad_catalog(key))
        };
        let mut catalog = Catalog { next_table_id: table(&document, "nextTableId")?, ..Catalog::default() };
        for item in document.get_array("collections").map_err(|_| bad_catalog("collections"))? {
            let c = item.as_document().ok_or_else(|| bad_catalog("collection"))?;
            let uuid = match c.get("uuid") {
                Some(Bson::Binary(b)) if b.bytes.len() == 16 => {
                    let mut bytes = [0u8; 16];
                    bytes.copy_from_slice(&b.bytes);
                    bson::Uuid::from_bytes(bytes)
                }
                _ => return Err(bad_catalog("uuid")),
            };
            let mut indexes = Vec::new();
            for index in c.get_array("indexes").map_err(|_| bad_catalog("indexes"))? {
                let i = index.as_document().ok_or_else(|| bad_catalog("index"))?;
                let spec = IndexSpec::from_document(i).map_err(|e| bad_catalog(&e.to_string()))?;
                let mut meta = IndexMeta::new(spec, table(i, "table")?).map_err(|e| bad_catalog(&e.to_string()))?;
                meta.multikey = i.get_bool("multikey").unwrap_or(false);
                indexes.push(meta);
            }
            let meta = CollectionMeta {
                ns: c.get_str("ns").map_err(|_| bad_catalog("ns"))?.to_string(),
                uuid,
                options: c.get_document("options").map_err(|_| bad_catalog("options"))?.clone(),
                record_table: table(c, "recordTable")?,
                indexes,
                order_table: if c.contains_key("orderTable") { Some(table(c, "orderTable")?) } else { None },
                id_collated: None,
                stats_table: if c.contains_key("statsTable") { Some(table(c, "statsTable")?) } else { None },
            };
            let meta = match c.contains_key("idCollatedTable") {
                true => {
                    let id_table = table(c, "idCollatedTable")?;
                    let index = id_collated_index(&meta.options, || id_table).map_err(|e| bad_catalog(&e.to_string()))?;
                    CollectionMeta { id_collated: Some(index.ok_or_else(|| bad_catalog("idCollatedTable"))?), ..meta }
                }
                false => meta,
            };
            catalog.collections.insert(meta.ns.clone(), Arc::new(meta));
        }
        for item in document.get_array("droppedTables").map_err(|_| bad_catalog("droppedTables"))? {
            let d = item.as_document().ok_or_else(|| bad_catalog("dropped table"))?;
            let ts = d.get_timestamp("ts").map_err(|_| bad_catalog("dropped ts"))?;
            catalog.dropped_tables.insert(table(d, "table")?, Timestamp::from_bson(ts));
        }
        Ok(catalog)
    }
}

/// The catalog as of every timestamp since the checkpoint.
#[derive(Debug)]
pub struct CatalogHistory {
    /// The catalog as of the checkpoint.
    base: Arc<Catalog>,
    /// One version per change above the checkpoint, in timestamp order.
    versions: Vec<(Timestamp, Arc<Catalog>)>,
}

impl CatalogHistory {
    pub fn new(base: Catalog) -> CatalogHistory {
        CatalogHistory { base: Arc::new(base), versions: Vec::new() }
    }

    pub fn latest(&self) -> Arc<Catalog> {
        self.versions.last().map(|(_, c)| c.clone()).unwrap_or_else(|| self.base.clone())
    }

    /// The catalog as of `ts` (the newest version at or below it).
    pub fn at(&self, ts: Timestamp) -> Arc<Catalog> {
        let position = self.versions.partition_point(|(version_ts, _)| *version_ts <= ts);
        if position == 0 {
            self.base.clone()
        } else {
            self.versions[position - 1].1.clone()
        }
    }

    pub fn push(&mut self, ts: Timestamp, catalog: Arc<Catalog>) {
        if let Some((last, _)) = self.versions.last_mut() {
            assert!(*last <= ts, "catalog version at {ts} below {last}");
            if *last == ts {
                self.versions.pop();
            }
        }
        self.versions.push((ts, catalog));
    }

    pub fn rollback_to(&mut self, ts: Timestamp) {
        self.versions.retain(|(version_ts, _)| *version_ts <= ts);
    }

    pub fn version_count(&self) -> usize {
        self.versions.len()
    }

    /// The versions above `after` and at or below `up_to` (a checkpoint past
    /// the commit point keeps them in its history).
    pub fn versions_between(&self, after: Timestamp, up_to: Timestamp) -> Vec<(Timestamp, Arc<Catalog>)> {
        self.versions.iter().filter(|(ts, _)| *ts > after && *ts <= up_to).cloned().collect()
    }

    /// After a checkpoint at `stable` is committed: the catalog as of
    /// `stable` becomes the base, and the tables whose drop it carried out
    /// (those dropped at or below `drops_done_to`, which is `stable` unless
    /// the checkpoint keeps history) are forgotten (their keys are gone).
    pub fn fold_to(&mut self, stable: Timestamp, drops_done_to: Timestamp) {
        let mut base = (*self.at(stable)).clone();
        base.dropped_tables.retain(|_, dropped_at| *dropped_at > drops_done_to);
        self.base = Arc::new(base);
        self.versions.retain(|(version_ts, _)| *version_ts > stable);
        for (_, version) in &mut self.versions {
            if version.dropped_tables.values().any(|dropped_at| *dropped_at <= drops_done_to) {
                let mut changed = (**version).clone();
                changed.dropped_tables.retain(|_, dropped_at| *dropped_at > drops_done_to);
                *version = Arc::new(changed);
            }
        }
    }
}

/// The catalog to persist with a checkpoint at `stable`: as of `stable`,
/// without the drops the same checkpoint carries out (those at or below
/// `drops_done_to`).
pub fn checkpoint_catalog(history: &CatalogHistory, stable: Timestamp, drops_done_to: Timestamp) -> Catalog {
    let mut catalog = (*history.at(stable)).clone();
    catalog.dropped_tables.retain(|_, dropped_at| *dropped_at > drops_done_to);
    catalog
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Catalog {
        let mut catalog = Catalog::default();
        let record_table = catalog.allocate_table();
        let index_table = catalog.allocate_table();
        let key = doc! {"a": 1, "b": -1};
        let options = doc! {"capped": false, "collation": {"locale": "en", "strength": 2}};
        let meta = CollectionMeta {
            ns: "db.c".into(),
            uuid: bson::Uuid::new(),
            id_collated: id_collated_index(&options, || 10).unwrap(),
            options,
            record_table,
            indexes: vec![IndexMeta {
                multikey: true,
                ..IndexMeta::new(
                    IndexSpec {
                        name: "a_1_b_-1".into(),
                        key: key.clone(),
                        unique: true,
                        partial_filter_expression: Some(doc! {"a": {"$gt": 1}}),
                        ..IndexSpec::default()
                    },
                    index_table,
                )
                .unwrap()
            }],
            order_table: Some(9),
            stats_table: Some(11),
        };
        catalog.collections.insert("db.c".into(), Arc::new(meta));
        catalog.dropped_tables.insert(7, Timestamp::new(5, 1));
        catalog
    }

    #[test]
    fn serialization_round_trips() {
        let catalog = sample();
        assert_eq!(Catalog::from_bytes(&catalog.to_bytes()).unwrap(), catalog);
        let info = catalog.get("db.c").unwrap().info();
        assert_eq!(info.indexes[0].name, "_id_");
        assert_eq!(info.multikey_indexes, vec!["a_1_b_-1".to_string()]);
    }

    #[test]
    fn history_answers_as_of_and_rolls_back() {
        let mut history = CatalogHistory::new(Catalog::default());
        history.push(Timestamp::new(2, 1), Arc::new(sample()));
        assert!(history.at(Timestamp::new(1, 9)).collections.is_empty());
        assert_eq!(history.at(Timestamp::new(2, 1)).collections.len(), 1);
        history.rollback_to(Timestamp::new(1, 9));
        assert!(history.latest().collections.is_empty());
        history.push(Timestamp::new(6, 1), Arc::new(sample()));
        history.fold_to(Timestamp::new(6, 1), Timestamp::new(6, 1));
        assert_eq!(history.version_count(), 0);
        assert!(history.latest().dropped_tables.is_empty(), "drop at 5 is covered by the checkpoint at 6");
    }
}
