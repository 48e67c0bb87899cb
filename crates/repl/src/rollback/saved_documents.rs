//! What a rollback saves before it truncates: every document an undone
//! entry touched, as it is on this member now (MongoDB writes the current
//! version; an undone delete leaves nothing to write), and every document
//! of a collection created after the common point (the collection goes
//! away with the rollback). A collection dropped after the common point
//! comes back whole with the truncation, so nothing of it is saved; a
//! renamed one comes back under its old name, so only the documents undone
//! entries touched are saved, under the name they live at now.
//!
//! The undone entries are read a page at a time; the documents are looked up
//! in one reader at the newest state and streamed into one rollback file per
//! namespace (`slipstream_storage::rollback_files`).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document, RawDocument};
use slipstream_clock::OpTime;
use slipstream_query::index_key::record_key;
use slipstream_storage::rollback_files::RollbackFile;
use slipstream_storage::{from_bson_timestamp, Engine, ReadAt, Reader, StorageError};

use crate::error::ReplError;

/// Undone entries read per page.
const UNDONE_READ_ENTRIES: usize = 1_000;
const UNDONE_READ_BYTES: usize = 16 * 1024 * 1024;
/// Documents read per page of a created collection's scan.
const SCAN_PAGE_DOCUMENTS: usize = 1_000;

/// What the undone entries touched, by namespace as it is now.
#[derive(Debug, Default, PartialEq)]
pub struct Touched {
    /// `_id`s per namespace, by record key (so each is saved once).
    pub ids: BTreeMap<String, BTreeMap<Vec<u8>, Bson>>,
    /// Collections created after the common point (saved whole).
    pub created: BTreeSet<String>,
    /// Entries after the common point.
    pub undone_entries: u64,
}

fn corrupt(message: String) -> ReplError {
    ReplError::from(StorageError::Corruption(message))
}

/// What was saved.
#[derive(Debug, Default)]
pub struct Saved {
    pub undone_entries: u64,
    pub documents: u64,
    /// `(namespace, file path)` of each file written.
    pub files: Vec<(String, String)>,
}

impl Touched {
    /// `add` reading the entry in place: only a command is parsed whole
    /// (a rollback reads every undone entry; most are CRUD).
    pub fn add_raw(&mut self, entry: &RawDocument) -> Result<(), ReplError> {
        let op = entry.get_str("op").unwrap_or_default();
        let holder = match op {
            "i" | "d" => "o",
            "u" => "o2",
            _ => {
                self.add(&entry_document(entry)?);
                return Ok(());
            }
        };
        self.undone_entries += 1;
        let ns = entry.get_str("ns").unwrap_or_default();
        let id = entry
            .get_document(holder)
            .ok()
            .and_then(|holder| holder.get("_id").ok().flatten());
        if let Some(id) = id {
            let id = Bson::try_from(id).map_err(|err| corrupt(format!("an oplog entry's _id: {err}")))?;
            self.touch(ns, &id);
        }
        Ok(())
    }

    /// Accounts for one undone entry (in oplog order).
    pub fn add(&mut self, entry: &Document) {
        self.undone_entries += 1;
        let ns = entry.get_str("ns").unwrap_or_default();
        let o = entry.get_document("o");
        match entry.get_str("op").unwrap_or_default() {
            "i" | "d" => {
                if let Some(id) = o.ok().and_then(|o| o.get("_id")) {
                    self.touch(ns, id);
                }
            }
            "u" => {
                if let Some(id) = entry.get_document("o2").ok().and_then(|o2| o2.get("_id")) {
                    self.touch(ns, id);
                }
            }
            "c" => {
                if let Ok(o) = o {
                    self.command(ns, o);
                }
            }
            _ => {}
        }
    }

    fn touch(&mut self, ns: &str, id: &Bson) {
        if ns.is_empty() {
            return;
        }
        self.ids
            .entry(ns.to_owned())
            .or_default()
            .insert(record_key(id), id.clone());
    }

    fn command(&mut self, cmd_ns: &str, o: &Document) {
        let db = cmd_ns.strip_suffix(".$cmd").unwrap_or(cmd_ns);
        let Some((name, value)) = o.iter().next() else {
            return;
        };
        match (name.as_str(), value) {
            ("create", Bson::String(coll)) => {
                self.created.insert(format!("{db}.{coll}"));
            }
            ("drop", Bson::String(coll)) => {
                // The collection comes back as it was at the common point;
                // what undone entries wrote to it is gone with it.
                let ns = format!("{db}.{coll}");
                self.ids.remove(&ns);
                self.created.remove(&ns);
            }
            ("dropDatabase", _) => {
                let prefix = format!("{db}.");
                self.ids.retain(|ns, _| !ns.starts_with(&prefix));
                self.created.retain(|ns| !ns.starts_with(&prefix));
            }
            ("renameCollection", Bson::String(from)) => {
                let Ok(to) = o.get_str("to") else {
                    return;
                };
                // A dropped target comes back whole; the documents touched
                // under the old name now live under the new one.
                self.ids.remove(to);
                self.created.remove(to);
                if let Some(ids) = self.ids.remove(from.as_str()) {
                    self.ids.insert(to.to_owned(), ids);
                }
                if self.created.remove(from.as_str()) {
                    self.created.insert(to.to_owned());
                }
            }
            _ => {}
        }
    }
}

/// Reads every entry after `common_point` into a `Touched`.
pub fn collect(engine: &Engine, common_point: OpTime) -> Result<Touched, ReplError> {
    let mut touched = Touched::default();
    let mut from = Bound::Excluded(common_point.ts);
    loop {
        let entries = engine.oplog_read(from, UNDONE_READ_ENTRIES, UNDONE_READ_BYTES)?;
        let Some(last) = entries.last() else {
            return Ok(touched);
        };
        let last_ts = last
            .get_timestamp("ts")
            .map_err(|_| corrupt("an oplog entry without ts".into()))?;
        for entry in &entries {
            touched.add_raw(entry)?;
        }
        from = Bound::Excluded(from_bson_timestamp(last_ts));
    }
}

fn entry_document(entry: &RawDocument) -> Result<Document, ReplError> {
    Document::try_from(entry).map_err(|err| corrupt(format!("an oplog entry: {err}")))
}

/// Writes the rollback files of `touched` (one per namespace with anything
/// to save), each durable before this returns.
pub fn save(engine: &Arc<Engine>, touched: &Touched, wall_ms: i64) -> Result<Saved, ReplError> {
    let reader = engine.reader(ReadAt::Latest)?;
    let mut saved = Saved {
        undone_entries: touched.undone_entries,
        ..Saved::default()
    };
    let namespaces: BTreeSet<&String> = touched.ids.keys().chain(touched.created.iter()).collect();
    for ns in namespaces {
        let mut file: Option<RollbackFile> = None;
        if touched.created.contains(ns) {
            save_collection(engine, &reader, ns, wall_ms, &mut file)?;
        } else if let Some(ids) = touched.ids.get(ns) {
            for id in ids.values() {
                if let Some(document) = reader.get(ns, id)? {
                    append(engine, ns, wall_ms, &mut file, &document)?;
                }
            }
        }
        if let Some(file) = file {
            saved.documents += file.documents();
            let path = file.finish()?;
            tracing::info!(target: "repl", ns = %ns, file = %path.display(), "rollback saved documents");
            saved.files.push((ns.clone(), path.display().to_string()));
        }
    }
    Ok(saved)
}

/// Every document of `ns`, a page at a time.
fn save_collection(
    engine: &Engine,
    reader: &Reader,
    ns: &str,
    wall_ms: i64,
    file: &mut Option<RollbackFile>,
) -> Result<(), ReplError> {
    let mut start = Bound::Unbounded;
    loop {
        let page = reader.scan(ns, start, Bound::Unbounded, false, SCAN_PAGE_DOCUMENTS)?;
        let Some((last_key, _)) = page.last() else {
            return Ok(());
        };
        let next = Bound::Excluded(last_key.clone());
        for (_, document) in &page {
            append(engine, ns, wall_ms, file, document)?;
        }
        start = next;
    }
}

fn append(
    engine: &Engine,
    ns: &str,
    wall_ms: i64,
    file: &mut Option<RollbackFile>,
    document: &Document,
) -> Result<(), ReplError> {
    if file.is_none() {
        *file = Some(RollbackFile::create(engine.dbpath(), ns, wall_ms)?);
    }
    Ok(file.as_mut().expect("created above").append(document)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn touched(entries: &[Document]) -> Touched {
        let mut touched = Touched::default();
        for entry in entries {
            touched.add(entry);
        }
        touched
    }

    fn ids(touched: &Touched, ns: &str) -> Vec<Bson> {
        touched
            .ids
            .get(ns)
            .map(|ids| ids.values().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn crud_entries_touch_their_id_once() {
        let t = touched(&[
            doc! {"op": "i", "ns": "d.c", "o": {"_id": 1, "a": 1}},
            doc! {"op": "u", "ns": "d.c", "o": {"$set": {"a": 2}}, "o2": {"_id": 1}},
            doc! {"op": "d", "ns": "d.c", "o": {"_id": 2}},
            doc! {"op": "n", "ns": "", "o": {"msg": "x"}},
        ]);
        assert_eq!(t.undone_entries, 4);
        assert_eq!(ids(&t, "d.c"), vec![Bson::Int32(1), Bson::Int32(2)]);
        assert!(t.created.is_empty());
    }

    #[test]
    fn reading_in_place_finds_what_parsing_finds() {
        let entries = [
            doc! {"op": "i", "ns": "d.c", "o": {"_id": 1, "a": 1}},
            doc! {"op": "u", "ns": "d.c", "o": {"$set": {"a": 2}}, "o2": {"_id": "s"}},
            doc! {"op": "d", "ns": "d.e", "o": {"_id": {"k": 1}}},
            doc! {"op": "c", "ns": "d.$cmd", "o": {"create": "new"}},
            doc! {"op": "n", "ns": "", "o": {"msg": "x"}},
        ];
        let mut raw = Touched::default();
        for entry in &entries {
            raw.add_raw(&bson::RawDocumentBuf::try_from(entry).unwrap()).unwrap();
        }
        assert_eq!(raw, touched(&entries));
    }

    #[test]
    fn collection_commands_move_what_is_saved() {
        let t = touched(&[
            doc! {"op": "c", "ns": "d.$cmd", "o": {"create": "new"}},
            doc! {"op": "i", "ns": "d.new", "o": {"_id": 1}},
            doc! {"op": "i", "ns": "d.old", "o": {"_id": 2}},
            doc! {"op": "c", "ns": "d.$cmd", "o": {"renameCollection": "d.old", "to": "d.moved"}},
            doc! {"op": "i", "ns": "d.gone", "o": {"_id": 3}},
            doc! {"op": "c", "ns": "d.$cmd", "o": {"drop": "gone"}},
        ]);
        assert!(t.created.contains("d.new"));
        assert_eq!(ids(&t, "d.moved"), vec![Bson::Int32(2)]);
        assert!(ids(&t, "d.old").is_empty());
        assert!(ids(&t, "d.gone").is_empty(), "a dropped collection comes back whole");
        let t = touched(&[
            doc! {"op": "i", "ns": "x.c", "o": {"_id": 1}},
            doc! {"op": "c", "ns": "x.$cmd", "o": {"dropDatabase": 1}},
        ]);
        assert!(t.ids.is_empty());
    }
}
