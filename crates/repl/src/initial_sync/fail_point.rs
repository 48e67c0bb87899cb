//! The initial sync's test-only fail points, set by `configureFailPoint`
//! (with `--enable-test-commands`), so that a test stops a sync at a known
//! place and kills the member there:
//!
//! - `initialSyncHangAfterCollection`: after each collection is copied in
//!   full and its progress is durable, wait while the point is on.
//! - `initialSyncHangAfterBatch`: after each batch is copied and its
//!   progress is durable, wait while on. `data: {batchDocuments: n}` makes
//!   the copy's batches hold at most `n` documents meanwhile, so that a
//!   small collection still stops half way; `data: {ns: "db.coll"}` hangs
//!   only after batches of that collection.
//!
//! They are process-wide (one member per process).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bson::{Bson, Document};
use parking_lot::Mutex;

pub const HANG_AFTER_COLLECTION: &str = "initialSyncHangAfterCollection";
pub const HANG_AFTER_BATCH: &str = "initialSyncHangAfterBatch";
/// How often a hung sync looks at its fail point again.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

static AFTER_COLLECTION: AtomicBool = AtomicBool::new(false);
static AFTER_BATCH: AtomicBool = AtomicBool::new(false);
/// 0: no override of the copy's batch size.
static BATCH_DOCUMENTS: AtomicU64 = AtomicU64::new(0);
/// Only batches of this namespace hang (`None`: every one).
static BATCH_NS: Mutex<Option<String>> = Mutex::new(None);

pub fn is_known(name: &str) -> bool {
    name == HANG_AFTER_COLLECTION || name == HANG_AFTER_BATCH
}

/// Why a fail point was not set.
#[derive(Debug, PartialEq, Eq)]
pub struct BadFailPoint(pub String);

/// Sets `name` from `configureFailPoint`'s `mode` (`"alwaysOn"` or
/// `"off"`) and `data`; returns whether it was on before.
pub fn configure(name: &str, body: &Document) -> Result<bool, BadFailPoint> {
    let on = match body.get("mode") {
        Some(Bson::String(mode)) if mode == "alwaysOn" => true,
        Some(Bson::String(mode)) if mode == "off" => false,
        _ => return Err(BadFailPoint(format!("{name} takes mode 'alwaysOn' or 'off'"))),
    };
    let flag = match name {
        HANG_AFTER_COLLECTION => &AFTER_COLLECTION,
        HANG_AFTER_BATCH => &AFTER_BATCH,
        _ => return Err(BadFailPoint(format!("unknown fail point {name}"))),
    };
    if name == HANG_AFTER_BATCH {
        let documents = match body.get_document("data").ok().and_then(|d| d.get("batchDocuments")) {
            None => 0,
            Some(value) => match crate::protocol::integral(value) {
                Some(n) if n > 0 && on => n as u64,
                Some(n) if n > 0 => 0,
                _ => return Err(BadFailPoint("batchDocuments must be a positive integer".into())),
            },
        };
        BATCH_DOCUMENTS.store(documents, Ordering::SeqCst);
        let ns = body
            .get_document("data")
            .ok()
            .and_then(|d| d.get_str("ns").ok())
            .map(str::to_owned);
        *BATCH_NS.lock() = ns.filter(|_| on);
    }
    Ok(flag.swap(on, Ordering::SeqCst))
}

/// The batch size a test asked for, if any.
pub fn batch_documents_override() -> Option<u64> {
    Some(BATCH_DOCUMENTS.load(Ordering::SeqCst)).filter(|n| *n > 0)
}

pub async fn after_collection(ns: &str) {
    hang_while(&AFTER_COLLECTION, HANG_AFTER_COLLECTION, ns).await
}

pub async fn after_batch(ns: &str) {
    let chosen = BATCH_NS.lock().clone();
    if chosen.is_none_or(|chosen| chosen == ns) {
        hang_while(&AFTER_BATCH, HANG_AFTER_BATCH, ns).await
    }
}

async fn hang_while(flag: &AtomicBool, name: &str, ns: &str) {
    if !flag.load(Ordering::SeqCst) {
        return;
    }
    tracing::info!(target: "repl", fail_point = name, ns, "initial sync fail point reached: hanging while it is on");
    while flag.load(Ordering::SeqCst) {
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
