//! Retryable-write bookkeeping: what a write of a logical session carries
//! into its oplog entry, and the two derived collections every member
//! keeps from those entries.
//!
//! A retryable write's entry carries MongoDB's fields `lsid`, `txnNumber`,
//! `stmtId` and `prevOpTime` (the previous entry of the same session and
//! transaction number, or the null OpTime), and a findAndModify's update or
//! delete carries `needsRetryImage: "preImage" | "postImage"`.
//!
//! Applying such an entry, wherever that happens (the primary's commit, a
//! secondary's `apply_batch`, recovery), changes two collections in the
//! same commit, at the entry's timestamp, without an oplog entry of their
//! own:
//! - `config.transactions`: `{_id: lsid, txnNum, lastWriteOpTime: {ts, t},
//!   lastWriteDate}`, the newest write of the session;
//! - `config.image_collection` (entries with `needsRetryImage` only):
//!   `{_id: lsid, txnNum, ts, imageKind, image}`, the document as it was
//!   before (or after) the write, which a retried findAndModify answers with
//!   (`invalidated: true` when the document was not there to take, as on a
//!   replay over a state that no longer holds it).
//!
//! Both are derived changes: every member computes them from the entry and
//! its own data, which is identical at that timestamp, so they need no
//! entry, never make an entry bigger than the document it logs (MongoDB
//! 5.0+ keeps images out of the oplog for the same reason), and roll back
//! with the entry that made them. Each collection is created on first use
//! inside that commit, with a UUID derived from its name and the entry's
//! timestamp, so every member (and every recovery) creates the same one.

use bson::{doc, Bson, Document};

use crate::{OpTime, Timestamp};

/// Where each session's newest write is recorded.
pub const TRANSACTIONS_NS: &str = "config.transactions";
/// Where findAndModify images are kept for retries.
pub const IMAGE_COLLECTION_NS: &str = "config.image_collection";

/// The statement of a retryable write a `Writer` performs: the logical
/// session, its transaction number and the statement's id within it.
#[derive(Clone, Debug, PartialEq)]
pub struct StatementSession {
    pub lsid: Document,
    pub txn_number: i64,
    pub stmt_id: i32,
}

/// Which image of the document a findAndModify retry returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryImage {
    /// The document before the write (`new: false`, and every remove).
    Pre,
    /// The document after the write (`new: true`).
    Post,
}

impl RetryImage {
    /// The oplog's `needsRetryImage` value and the image's `imageKind`.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryImage::Pre => "preImage",
            RetryImage::Post => "postImage",
        }
    }

    pub fn parse(value: &str) -> Option<RetryImage> {
        match value {
            "preImage" => Some(RetryImage::Pre),
            "postImage" => Some(RetryImage::Post),
            _ => None,
        }
    }
}

/// The retryable-write fields of an oplog entry.
#[derive(Clone, Debug, PartialEq)]
pub struct EntrySession {
    pub lsid: Document,
    pub txn_number: i64,
    /// Absent on entries that belong to a session but to no statement.
    pub stmt_id: Option<i32>,
    pub prev_op_time: OpTime,
}

/// `{ts, t}`, the BSON form of an OpTime in entries and records.
pub fn optime_document(optime: OpTime) -> Document {
    doc! {"ts": crate::bson_timestamp(optime.ts), "t": optime.term}
}

/// The OpTime of an `{ts, t}` document, if it is one.
pub fn parse_optime(document: &Document) -> Option<OpTime> {
    let ts = document.get_timestamp("ts").ok()?;
    let term = match document.get("t")? {
        Bson::Int64(term) => *term,
        Bson::Int32(term) => i64::from(*term),
        _ => return None,
    };
    Some(OpTime::new(crate::from_bson_timestamp(ts), term))
}

/// The `config.transactions` record after a write of `lsid`/`txn_number`
/// at `optime`.
pub fn transaction_record(lsid: &Document, txn_number: i64, optime: OpTime, wall: bson::DateTime) -> Document {
    doc! {
        "_id": lsid.clone(),
        "txnNum": txn_number,
        "lastWriteOpTime": optime_document(optime),
        "lastWriteDate": wall,
    }
}

/// The `config.image_collection` document for a write at `ts`; `None` for
/// the image records an image that could not be taken.
pub fn image_record(
    lsid: &Document,
    txn_number: i64,
    ts: Timestamp,
    kind: RetryImage,
    image: Option<Document>,
) -> Document {
    let mut record = doc! {
        "_id": lsid.clone(),
        "txnNum": txn_number,
        "ts": crate::bson_timestamp(ts),
        "imageKind": kind.as_str(),
    };
    match image {
        Some(image) => record.insert("image", image),
        None => record.insert("invalidated", true),
    };
    record
}

/// The UUID of a derived collection created by the entry at `ts`: the
/// same on every member and in every recovery (a name-based UUID, version
/// 3 layout, over the namespace and the timestamp).
pub fn derived_collection_uuid(ns: &str, ts: Timestamp) -> bson::Uuid {
    use md5::{Digest, Md5};
    let mut hasher = Md5::new();
    hasher.update(ns.as_bytes());
    hasher.update(ts.as_u64().to_be_bytes());
    let mut bytes: [u8; 16] = hasher.finalize().into();
    bytes[6] = (bytes[6] & 0x0f) | 0x30;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    bson::Uuid::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optimes_round_trip_and_uuids_are_stable() {
        let optime = OpTime::new(Timestamp::new(7, 3), 2);
        assert_eq!(parse_optime(&optime_document(optime)), Some(optime));
        assert_eq!(parse_optime(&doc! {"ts": 1}), None);
        let a = derived_collection_uuid(TRANSACTIONS_NS, Timestamp::new(5, 1));
        assert_eq!(a, derived_collection_uuid(TRANSACTIONS_NS, Timestamp::new(5, 1)));
        assert_ne!(a, derived_collection_uuid(TRANSACTIONS_NS, Timestamp::new(5, 2)));
        assert_ne!(a, derived_collection_uuid(IMAGE_COLLECTION_NS, Timestamp::new(5, 1)));
        assert_eq!(RetryImage::parse(RetryImage::Post.as_str()), Some(RetryImage::Post));
    }
}
