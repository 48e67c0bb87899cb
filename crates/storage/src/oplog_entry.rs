//! Building and parsing oplog entries.
//!
//! An entry is a BSON document with MongoDB's field names and order (seed
//! 000, Figure 1): `{ts, t, op, ns, ui, o, o2, wall}`; `o2` only for
//! updates, `ui` only when the entry names a collection that exists.
//! Commands (`op: "c"`) use `ns: "<db>.$cmd"` and carry the command in
//! `o`, e.g. `{create: "coll", ...options}`. Updates carry the document's
//! `_id` in `o2` and the idempotent update (the `$set` of computed values,
//! or a full replacement) in `o`, so replaying an entry twice gives the
//! same state (seed 000, 4.2).

use bson::raw::{cstr, RawBinaryRef, RawDocument, RawDocumentBuf};
use bson::spec::BinarySubtype;
use bson::{Bson, Document};

use crate::{StorageError, Timestamp};
use crate::timestamp::TimestampBson;

/// The operation of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Insert,
    Update,
    Delete,
    Command,
    Noop,
}

impl OpKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Insert => "i",
            OpKind::Update => "u",
            OpKind::Delete => "d",
            OpKind::Command => "c",
            OpKind::Noop => "n",
        }
    }

    pub fn parse(op: &str) -> Option<OpKind> {
        match op {
            "i" => Some(OpKind::Insert),
            "u" => Some(OpKind::Update),
            "d" => Some(OpKind::Delete),
            "c" => Some(OpKind::Command),
            "n" => Some(OpKind::Noop),
            _ => None,
        }
    }
}

/// A parsed oplog entry.
#[derive(Clone, Debug, PartialEq)]
pub struct OplogEntry {
    pub ts: Timestamp,
    pub term: i64,
    pub op: OpKind,
    pub ns: String,
    pub ui: Option<bson::Uuid>,
    pub o: Document,
    pub o2: Option<Document>,
    pub wall: bson::DateTime,
}

fn corrupt(message: String) -> StorageError {
    StorageError::Corruption(message)
}

/// Serializes an entry whose `o` (and `o2`) are already BSON bytes, in the
/// field order of seed 000's Figure 1. The insert path passes the document
/// bytes it also stores, so the document is serialized once.
#[allow(clippy::too_many_arguments)]
pub fn build_raw(
    ts: Timestamp,
    term: i64,
    op: OpKind,
    ns: &str,
    ui: Option<bson::Uuid>,
    o: &RawDocument,
    o2: Option<&RawDocument>,
    wall: bson::DateTime,
) -> Vec<u8> {
    let mut entry = RawDocumentBuf::new();
    entry.append(cstr!("ts"), ts.to_bson());
    entry.append(cstr!("t"), term);
    entry.append(cstr!("op"), op.as_str());
    entry.append(cstr!("ns"), ns);
    if let Some(uuid) = ui {
        let bytes = uuid.bytes();
        entry.append(cstr!("ui"), RawBinaryRef { subtype: BinarySubtype::Uuid, bytes: &bytes });
    }
    entry.append(cstr!("o"), o);
    if let Some(o2) = o2 {
        entry.append(cstr!("o2"), o2);
    }
    entry.append(cstr!("wall"), wall);
    entry.into_bytes()
}

impl OplogEntry {
    /// The entry as BSON bytes (what the journal stores).
    pub fn to_bytes(&self) -> Result<Vec<u8>, StorageError> {
        let o = RawDocumentBuf::try_from(&self.o).map_err(|e| StorageError::InvalidDocument(e.to_string()))?;
        let o2 = match &self.o2 {
            Some(doc) => Some(RawDocumentBuf::try_from(doc).map_err(|e| StorageError::InvalidDocument(e.to_string()))?),
            None => None,
        };
        Ok(build_raw(self.ts, self.term, self.op, &self.ns, self.ui, &o, o2.as_deref(), self.wall))
    }

    pub fn to_document(&self) -> Document {
        let mut doc = Document::new();
        doc.insert("ts", self.ts.to_bson());
        doc.insert("t", self.term);
        doc.insert("op", self.op.as_str());
        doc.insert("ns", self.ns.clone());
        if let Some(uuid) = self.ui {
            doc.insert("ui", uuid);
        }
        doc.insert("o", self.o.clone());
        if let Some(o2) = &self.o2 {
            doc.insert("o2", o2.clone());
        }
        doc.insert("wall", self.wall);
        doc
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<OplogEntry, StorageError> {
        // Parsed in place: the leading length must match the bytes present
        // (`Document::from_reader` would reserve whatever it claims first).
        let parse = |bytes| Document::try_from(RawDocument::from_bytes(bytes)?);
        let doc = parse(bytes).map_err(|e: bson::error::Error| corrupt(format!("oplog entry is not BSON: {e}")))?;
        OplogEntry::from_document(&doc)
    }

    pub fn from_document(doc: &Document) -> Result<OplogEntry, StorageError> {
        let ts = match doc.get("ts") {
            Some(Bson::Timestamp(ts)) => Timestamp::from_bson(*ts),
            _ => return Err(corrupt(format!("oplog entry without a timestamp ts: {doc}"))),
        };
        let term = match doc.get("t") {
            Some(Bson::Int64(t)) => *t,
            Some(Bson::Int32(t)) => i64::from(*t),
            None => crate::timestamp::UNINITIALIZED_TERM,
            Some(other) => return Err(corrupt(format!("oplog entry term t is not a number: {other}"))),
        };
        let op = doc
            .get_str("op")
            .ok()
            .and_then(OpKind::parse)
            .ok_or_else(|| corrupt(format!("oplog entry with an unknown op: {doc}")))?;
        let ns = doc.get_str("ns").map_err(|_| corrupt(format!("oplog entry without ns: {doc}")))?.to_string();
        let ui = match doc.get("ui") {
            Some(Bson::Binary(binary)) if binary.subtype == BinarySubtype::Uuid && binary.bytes.len() == 16 => {
                let mut bytes = [0u8; 16];
                bytes.copy_from_slice(&binary.bytes);
                Some(bson::Uuid::from_bytes(bytes))
            }
            None => None,
            Some(other) => return Err(corrupt(format!("oplog entry ui is not a UUID: {other}"))),
        };
        let o = match doc.get("o") {
            Some(Bson::Document(o)) => o.clone(),
            None if op == OpKind::Noop => Document::new(),
            _ => return Err(corrupt(format!("oplog entry without an object o: {doc}"))),
        };
        let o2 = match doc.get("o2") {
            Some(Bson::Document(o2)) => Some(o2.clone()),
            None => None,
            Some(other) => return Err(corrupt(format!("oplog entry o2 is not a document: {other}"))),
        };
        if op == OpKind::Update && o2.is_none() {
            return Err(corrupt(format!("update oplog entry without o2: {doc}")));
        }
        let wall = match doc.get("wall") {
            Some(Bson::DateTime(wall)) => *wall,
            _ => bson::DateTime::from_millis(i64::from(ts.secs) * 1000),
        };
        Ok(OplogEntry { ts, term, op, ns, ui, o, o2, wall })
    }
}

/// The timestamp of a serialized entry, without parsing the rest.
pub fn entry_timestamp(bytes: &[u8]) -> Result<Timestamp, StorageError> {
    let raw = RawDocument::from_bytes(bytes).map_err(|e| corrupt(format!("oplog entry is not BSON: {e}")))?;
    let ts = raw.get_timestamp("ts").map_err(|e| corrupt(format!("oplog entry without ts: {e}")))?;
    Ok(Timestamp::from_bson(ts))
}

/// Splits `db.coll` into `("db", "coll")`; `None` without a dot.
pub fn split_namespace(ns: &str) -> Option<(&str, &str)> {
    let dot = ns.find('.')?;
    let (db, coll) = (&ns[..dot], &ns[dot + 1..]);
    if db.is_empty() || coll.is_empty() {
        return None;
    }
    Some((db, coll))
}

/// The command namespace of a database, `db.$cmd`.
pub fn command_namespace(db: &str) -> String {
    format!("{db}.$cmd")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_that_claims_more_than_the_bytes_present_is_refused() {
        let mut bytes = bson::doc! {"ts": bson::Timestamp { time: 1, increment: 1 }}.to_vec().unwrap();
        bytes[0..4].copy_from_slice(&i32::MAX.to_le_bytes());
        assert!(matches!(OplogEntry::from_bytes(&bytes), Err(StorageError::Corruption(_))));
    }
    use bson::doc;

    #[test]
    fn fields_follow_figure_1_order_and_round_trip() {
        let uuid = bson::Uuid::new();
        let o = RawDocumentBuf::try_from(&doc! {"_id": 1, "x": 1}).unwrap();
        let o2 = RawDocumentBuf::try_from(&doc! {"_id": 1}).unwrap();
        let wall = bson::DateTime::from_millis(1_597_904_287_000);
        let bytes = build_raw(Timestamp::new(1_597_904_287, 12), 40, OpKind::Update, "test.c", Some(uuid), &o, Some(&o2), wall);
        let doc = Document::from_reader(&bytes[..]).unwrap();
        let keys: Vec<&str> = doc.keys().map(String::as_str).collect();
        assert_eq!(keys, vec!["ts", "t", "op", "ns", "ui", "o", "o2", "wall"]);
        assert_eq!(doc.get_i64("t").unwrap(), 40);
        let entry = OplogEntry::from_bytes(&bytes).unwrap();
        assert_eq!(entry.ts, Timestamp::new(1_597_904_287, 12));
        assert_eq!(entry.ui, Some(uuid));
        assert_eq!(entry.o, doc! {"_id": 1, "x": 1});
        assert_eq!(entry.to_bytes().unwrap(), bytes);
        assert_eq!(entry_timestamp(&bytes).unwrap(), entry.ts);
    }

    #[test]
    fn rejects_entries_without_timestamp() {
        let bytes = doc! {"op": "i", "ns": "a.b", "o": {}}.to_vec().unwrap();
        assert!(matches!(OplogEntry::from_bytes(&bytes), Err(StorageError::Corruption(_))));
    }

    #[test]
    fn namespaces_split_at_first_dot() {
        assert_eq!(split_namespace("db.a.b"), Some(("db", "a.b")));
        assert_eq!(split_namespace("db"), None);
        assert_eq!(split_namespace(".x"), None);
    }
}
