//! `local.oplog.rs` as the catalog commands show it on a replica set
//! member: the oplog is the storage engine's journal, not a catalog
//! collection, but `listCollections` of `local` names it (a capped
//! collection with the oplog's size cap, no `_id` index, as MongoDB's) and
//! `collStats` of it reports its entries, size and `maxSize`, which
//! mongosh's `db.getReplicationInfo()` / `rs.printReplicationInfo()` read.

use bson::{doc, Document};
use slipstream_storage::Engine;

/// The oplog's namespace.
pub const OPLOG_NS: &str = "local.oplog.rs";

/// The `listCollections` entry of `oplog.rs`.
pub fn list_entry(engine: &Engine) -> Document {
    let stats = engine.stats();
    doc! {
        "name": "oplog.rs",
        "type": "collection",
        "options": {"capped": true, "size": stats.oplog_size_cap_bytes as i64},
        "info": {"readOnly": false},
    }
}

/// `collStats` of `local.oplog.rs`, sizes divided by `scale`.
pub fn coll_stats(engine: &Engine, scale: i64) -> Document {
    let stats = engine.stats();
    let count = stats.journal_entries as i64;
    let size = stats.oplog_size_bytes as i64;
    doc! {
        "ns": OPLOG_NS,
        "count": count,
        "size": size / scale,
        "avgObjSize": if count > 0 { size / count } else { 0 },
        "storageSize": size / scale,
        "freeStorageSize": 0_i64,
        "capped": true,
        "max": 0_i64,
        "maxSize": stats.oplog_size_cap_bytes as i64 / scale,
        "nindexes": 0_i32,
        "indexSizes": {},
        "totalIndexSize": 0_i64,
        "totalSize": size / scale,
        "scaleFactor": scale,
    }
}
