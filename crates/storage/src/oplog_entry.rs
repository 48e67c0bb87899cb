//! Building and parsing oplog entries.
//!
//! An entry is a BSON document with MongoDB's field names and order (seed
//! 000, Figure 1): `{ts, t, op, ns, ui, o, o2, wall}`; `o2` only for
//! updates, `ui` only when the entry names a collection that exists. A
//! retryable write's entry adds, after `wall`, MongoDB's `lsid`,
//! `txnNumber`, `stmtId` and `prevOpTime`, and a findAndModify's entry
//! `needsRetryImage` (see `session.rs`).
//! Commands (`op: "c"`) use `ns: "<db>.$cmd"` and carry the command in
//! `o`, e.g. `{create: "coll", ...options}`. Updates carry the document's
//! `_id` in `o2` and the idempotent update (the `$set` of computed values,
//! or a full replacement) in `o`, so replaying an entry twice gives the
//! same state (seed 000, 4.2).

use bson::raw::{cstr, RawBinaryRef, RawDocument, RawDocumentBuf};
use bson::spec::BinarySubtype;
use bson::{Bson, Document};

use crate::session::{optime_document, parse_optime, EntrySession, RetryImage};
use crate::timestamp::TimestampBson;
use crate::{StorageError, Timestamp};

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
    /// The retryable-write fields, when the entry has `lsid` and `txnNumber`.
    pub session: Option<EntrySession>,
    pub needs_retry_image: Option<RetryImage>,
    /// The bytes `o` was read from, when the entry was parsed from BSON.
    pub o_bytes: ReadFrom,
}

/// The bytes of an entry's `o` as the entry held them (`from_bytes`): an
/// insert stores them as they are, as the primary stored them, instead of
/// serializing the parsed document again. Not part of what the entry is:
/// entries equal field by field are equal whatever they were read from.
#[derive(Clone, Default)]
pub struct ReadFrom(pub Option<crate::mvcc::Value>);

impl PartialEq for ReadFrom {
    fn eq(&self, _: &ReadFrom) -> bool {
        true
    }
}

impl std::fmt::Debug for ReadFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(bytes) => write!(f, "ReadFrom({} bytes)", bytes.len()),
            None => f.write_str("ReadFrom(none)"),
        }
    }
}

fn corrupt(message: String) -> StorageError {
    StorageError::Corruption(message)
}

/// The fields of an entry to serialize, with `o` (and `o2`) already BSON:
/// the insert path passes the document bytes it also stores, so the
/// document is serialized once.
pub struct EntryFields<'a> {
    pub ts: Timestamp,
    pub term: i64,
    pub op: OpKind,
    pub ns: &'a str,
    pub ui: Option<bson::Uuid>,
    pub o: &'a RawDocument,
    pub o2: Option<&'a RawDocument>,
    pub wall: bson::DateTime,
    pub session: Option<&'a EntrySession>,
    pub needs_retry_image: Option<RetryImage>,
}

impl<'a> EntryFields<'a> {
    /// An entry without retryable-write fields.
    pub fn plain(ts: Timestamp, term: i64, op: OpKind, ns: &'a str, o: &'a RawDocument, wall: bson::DateTime) -> Self {
        EntryFields { ts, term, op, ns, ui: None, o, o2: None, wall, session: None, needs_retry_image: None }
    }
}

/// Serializes an entry in the field order of seed 000's Figure 1, the
/// retryable-write fields last.
pub fn build_raw(fields: &EntryFields<'_>) -> Vec<u8> {
    let mut entry = RawDocumentBuf::new();
    entry.append(cstr!("ts"), fields.ts.to_bson());
    entry.append(cstr!("t"), fields.term);
    entry.append(cstr!("op"), fields.op.as_str());
    entry.append(cstr!("ns"), fields.ns);
    if let Some(uuid) = fields.ui {
        let bytes = uuid.bytes();
        entry.append(cstr!("ui"), RawBinaryRef { subtype: BinarySubtype::Uuid, bytes: &bytes });
    }
    entry.append(cstr!("o"), fields.o);
    if let Some(o2) = fields.o2 {
        entry.append(cstr!("o2"), o2);
    }
    entry.append(cstr!("wall"), fields.wall);
    if let Some(session) = fields.session {
        let lsid = RawDocumentBuf::try_from(&session.lsid).expect("an lsid that came in as BSON serializes");
        entry.append(cstr!("lsid"), lsid);
        entry.append(cstr!("txnNumber"), session.txn_number);
        if let Some(stmt_id) = session.stmt_id {
            entry.append(cstr!("stmtId"), stmt_id);
        }
        let prev = RawDocumentBuf::try_from(&optime_document(session.prev_op_time)).expect("an OpTime serializes");
        entry.append(cstr!("prevOpTime"), prev);
    }
    if let Some(kind) = fields.needs_retry_image {
        entry.append(cstr!("needsRetryImage"), kind.as_str());
    }
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
        Ok(build_raw(&EntryFields {
            ts: self.ts,
            term: self.term,
            op: self.op,
            ns: &self.ns,
            ui: self.ui,
            o: &o,
            o2: o2.as_deref(),
            wall: self.wall,
            session: self.session.as_ref(),
            needs_retry_image: self.needs_retry_image,
        }))
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
        if let Some(session) = &self.session {
            doc.insert("lsid", session.lsid.clone());
            doc.insert("txnNumber", session.txn_number);
            if let Some(stmt_id) = session.stmt_id {
                doc.insert("stmtId", stmt_id);
            }
            doc.insert("prevOpTime", optime_document(session.prev_op_time));
        }
        if let Some(kind) = self.needs_retry_image {
            doc.insert("needsRetryImage", kind.as_str());
        }
        doc
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<OplogEntry, StorageError> {
        // Parsed in place: the leading length must match the bytes present
        // (`Document::from_reader` would reserve whatever it claims first).
        // `o` (most of an entry's bytes) is decoded once, into the entry,
        // and its bytes kept; the other fields go through `from_document`.
        let not_bson = |e: bson::error::Error| corrupt(format!("oplog entry is not BSON: {e}"));
        let raw = RawDocument::from_bytes(bytes).map_err(not_bson)?;
        let mut envelope = Document::new();
        let mut o = None;
        for element in raw {
            let (key, value) = element.map_err(not_bson)?;
            match (key.as_str(), value) {
                ("o", bson::RawBsonRef::Document(document)) => {
                    envelope.remove("o");
                    o = Some(document);
                }
                (key, value) => {
                    if key == "o" {
                        o = None;
                    }
                    envelope.insert(key, Bson::try_from(value).map_err(not_bson)?);
                }
            }
        }
        let Some(o) = o else {
            return OplogEntry::from_document(&envelope);
        };
        let decoded = Document::try_from(o).map_err(not_bson)?;
        let mut entry = OplogEntry::from_fields(&envelope, Some(decoded))?;
        entry.o_bytes = ReadFrom(Some(crate::mvcc::Value::from(o.as_bytes())));
        Ok(entry)
    }

    pub fn from_document(doc: &Document) -> Result<OplogEntry, StorageError> {
        OplogEntry::from_fields(doc, None)
    }

    /// `doc`'s fields, with `o` given apart (decoded already) or read from
    /// `doc`.
    fn from_fields(doc: &Document, given_o: Option<Document>) -> Result<OplogEntry, StorageError> {
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
        let o = match (given_o, doc.get("o")) {
            (Some(o), _) => o,
            (None, Some(Bson::Document(o))) => o.clone(),
            (None, None) if op == OpKind::Noop => Document::new(),
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
        let session = parse_session(doc)?;
        let needs_retry_image = match doc.get("needsRetryImage") {
            None => None,
            Some(Bson::String(kind)) => Some(
                RetryImage::parse(kind).ok_or_else(|| corrupt(format!("oplog entry needsRetryImage {kind:?}")))?,
            ),
            Some(other) => return Err(corrupt(format!("oplog entry needsRetryImage is not a string: {other}"))),
        };
        Ok(OplogEntry { ts, term, op, ns, ui, o, o2, wall, session, needs_retry_image, o_bytes: ReadFrom::default() })
    }
}

/// The retryable-write fields: present when the entry has both `lsid` and
/// `txnNumber` (MongoDB's rule for "this entry belongs to a retryable
/// write").
fn parse_session(doc: &Document) -> Result<Option<EntrySession>, StorageError> {
    let (Some(lsid), Some(txn_number)) = (doc.get("lsid"), doc.get("txnNumber")) else {
        return Ok(None);
    };
    let lsid = lsid.as_document().ok_or_else(|| corrupt(format!("oplog entry lsid is not a document: {lsid}")))?;
    let txn_number = match txn_number {
        Bson::Int64(n) => *n,
        Bson::Int32(n) => i64::from(*n),
        other => return Err(corrupt(format!("oplog entry txnNumber is not a number: {other}"))),
    };
    let stmt_id = match doc.get("stmtId") {
        None => None,
        Some(Bson::Int32(id)) => Some(*id),
        Some(other) => return Err(corrupt(format!("oplog entry stmtId is not an int: {other}"))),
    };
    let prev_op_time = match doc.get("prevOpTime") {
        None => crate::OpTime::NULL,
        Some(Bson::Document(prev)) => {
            parse_optime(prev).ok_or_else(|| corrupt(format!("oplog entry prevOpTime is not an OpTime: {prev}")))?
        }
        Some(other) => return Err(corrupt(format!("oplog entry prevOpTime is not a document: {other}"))),
    };
    Ok(Some(EntrySession { lsid: lsid.clone(), txn_number, stmt_id, prev_op_time }))
}

/// The term and `wall` date (ms) of a serialized entry, without parsing the
/// rest (the journal keeps them with its durable position).
pub fn entry_term_and_wall(bytes: &[u8]) -> (i64, i64) {
    let mut term = crate::timestamp::UNINITIALIZED_TERM;
    let mut wall = None;
    let mut secs = 0u32;
    let Ok(raw) = RawDocument::from_bytes(bytes) else {
        return (term, 0);
    };
    for element in raw.into_iter().flatten() {
        match (element.0.as_str(), element.1) {
            ("ts", bson::RawBsonRef::Timestamp(ts)) => secs = ts.time,
            ("t", bson::RawBsonRef::Int64(t)) => term = t,
            ("t", bson::RawBsonRef::Int32(t)) => term = i64::from(t),
            ("wall", bson::RawBsonRef::DateTime(date)) => wall = Some(date.timestamp_millis()),
            _ => {}
        }
    }
    // Entries without a wall date stand for their timestamp's second, as
    // `from_document` reads them.
    (term, wall.unwrap_or(i64::from(secs) * 1000))
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
        let fields = EntryFields {
            ui: Some(uuid),
            o2: Some(&o2),
            ..EntryFields::plain(Timestamp::new(1_597_904_287, 12), 40, OpKind::Update, "test.c", &o, wall)
        };
        let bytes = build_raw(&fields);
        let doc = Document::from_reader(&bytes[..]).unwrap();
        let keys: Vec<&str> = doc.keys().map(String::as_str).collect();
        assert_eq!(keys, vec!["ts", "t", "op", "ns", "ui", "o", "o2", "wall"]);
        assert_eq!(entry_term_and_wall(&bytes), (40, 1_597_904_287_000));
        assert_eq!(doc.get_i64("t").unwrap(), 40);
        let entry = OplogEntry::from_bytes(&bytes).unwrap();
        assert_eq!(entry.ts, Timestamp::new(1_597_904_287, 12));
        assert_eq!(entry.ui, Some(uuid));
        assert_eq!(entry.o, doc! {"_id": 1, "x": 1});
        assert_eq!(entry.to_bytes().unwrap(), bytes);
        assert_eq!(entry_timestamp(&bytes).unwrap(), entry.ts);
    }

    #[test]
    fn retryable_write_fields_round_trip() {
        let o = RawDocumentBuf::try_from(&doc! {"_id": 1}).unwrap();
        let session = EntrySession {
            lsid: doc! {"id": bson::Uuid::new()},
            txn_number: 4,
            stmt_id: Some(2),
            prev_op_time: crate::OpTime::new(Timestamp::new(9, 1), 3),
        };
        let fields = EntryFields {
            session: Some(&session),
            needs_retry_image: Some(RetryImage::Pre),
            ..EntryFields::plain(Timestamp::new(10, 1), 3, OpKind::Delete, "db.c", &o, bson::DateTime::from_millis(5))
        };
        let bytes = build_raw(&fields);
        let doc = Document::from_reader(&bytes[..]).unwrap();
        let keys: Vec<&str> = doc.keys().map(String::as_str).collect();
        assert_eq!(keys, vec!["ts", "t", "op", "ns", "o", "wall", "lsid", "txnNumber", "stmtId", "prevOpTime", "needsRetryImage"]);
        assert_eq!(doc.get_i64("txnNumber").unwrap(), 4);
        assert_eq!(doc.get_i32("stmtId").unwrap(), 2);
        let entry = OplogEntry::from_bytes(&bytes).unwrap();
        assert_eq!(entry.session.as_ref(), Some(&session));
        assert_eq!(entry.needs_retry_image, Some(RetryImage::Pre));
        assert_eq!(entry.to_bytes().unwrap(), bytes);
        assert_eq!(OplogEntry::from_document(&entry.to_document()).unwrap(), entry);
        // An lsid without a txnNumber is not a retryable write.
        let mut plain = entry.to_document();
        plain.remove("txnNumber");
        assert_eq!(OplogEntry::from_document(&plain).unwrap().session, None);
    }

    #[test]
    fn parsing_keeps_the_bytes_of_o_and_reads_what_from_document_reads() {
        let ts = bson::Timestamp { time: 7, increment: 3 };
        let o = doc! {"_id": 1, "a": {"b": [1, "x"]}, "pad": "p".repeat(100)};
        let entry_doc = doc! {"ts": ts, "t": 2i64, "op": "i", "ns": "db.c", "o": o.clone(), "wall": bson::DateTime::from_millis(5)};
        let bytes = entry_doc.to_vec().unwrap();
        let parsed = OplogEntry::from_bytes(&bytes).unwrap();
        assert_eq!(parsed, OplogEntry::from_document(&entry_doc).unwrap());
        assert_eq!(parsed.o, o);
        assert_eq!(parsed.o_bytes.0.as_deref(), Some(&o.to_vec().unwrap()[..]), "the bytes of o as they were");
        assert!(OplogEntry::from_document(&entry_doc).unwrap().o_bytes.0.is_none());
        // A later `o` that is not a document wins, as in a decoded document.
        let mut twice = RawDocumentBuf::from_bytes(bytes.clone()).unwrap();
        twice.append(cstr!("o"), "not a document");
        assert!(matches!(OplogEntry::from_bytes(twice.as_bytes()), Err(StorageError::Corruption(_))));
        let noop = doc! {"ts": ts, "t": 2i64, "op": "n", "ns": "", "wall": bson::DateTime::from_millis(5)};
        assert_eq!(OplogEntry::from_bytes(&noop.to_vec().unwrap()).unwrap().o, Document::new());
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
