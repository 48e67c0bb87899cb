//! Helpers shared by the journal tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use slipstream_storage::io::{IoBackend, StdIo};
use slipstream_storage::journal::{Journal, JournalOptions};
use slipstream_storage::Timestamp;
use slipstream_storage::TimestampBson;

/// The i-th timestamp of a test: several increments per second, so that
/// both halves of the timestamp take part in ordering.
pub fn ts(i: u32) -> Timestamp {
    Timestamp::new(1_700_000_000 + i / 7, 1 + i % 7)
}

/// An oplog-entry-shaped BSON document for `ts`, padded to about `size`
/// bytes; its content is derived from `ts`, so any entry can be checked.
pub fn entry(ts: Timestamp, size: usize) -> Vec<u8> {
    let pad_len = size.saturating_sub(80);
    let pad: String = (0..pad_len).map(|i| (b'a' + ((i as u64 + ts.as_u64()) % 26) as u8) as char).collect();
    bson::doc! {
        "ts": ts.to_bson(),
        "t": -1i64,
        "op": "i",
        "ns": "test.journal",
        "o": {"_id": ts.as_u64() as i64, "pad": pad},
    }
    .to_vec()
    .unwrap()
}

/// Checks that `bytes` is exactly the entry the tests wrote for `ts`.
pub fn assert_entry(ts: Timestamp, bytes: &[u8]) {
    let document = bson::Document::from_reader(bytes).expect("a BSON entry");
    let stored = document.get_timestamp("ts").expect("ts field");
    assert_eq!(Timestamp::from_bson(stored), ts, "entry holds another timestamp");
    let pad_len = document.get_document("o").unwrap().get_str("pad").unwrap().len();
    assert_eq!(bytes, entry(ts, pad_len + 80).as_slice(), "entry {ts} content differs");
}

/// Options for tests: small segments, a short commit interval, no cap.
pub fn small_options() -> JournalOptions {
    JournalOptions {
        commit_interval_ms: 5,
        segment_size_bytes: 4096,
        size_cap_bytes: u64::MAX,
        ..JournalOptions::default()
    }
}

pub fn std_io() -> Arc<dyn IoBackend> {
    StdIo::new()
}

pub fn open(dir: &Path, options: JournalOptions) -> Journal {
    Journal::open(dir, std_io(), options).expect("journal opens")
}

/// Every entry of the journal, in order.
pub fn read_all(journal: &Journal) -> Vec<(Timestamp, Vec<u8>)> {
    journal.read(std::ops::Bound::Unbounded, usize::MAX, usize::MAX).expect("read")
}

/// Every timestamp of the journal, checking each entry's content.
pub fn all_timestamps(journal: &Journal) -> Vec<Timestamp> {
    read_all(journal)
        .into_iter()
        .map(|(ts, bytes)| {
            assert_entry(ts, &bytes);
            ts
        })
        .collect()
}
