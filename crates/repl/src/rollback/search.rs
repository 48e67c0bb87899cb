//! The common point search: the newest entry both oplogs share, read
//! backwards a page at a time from each side, with no limit on how far back
//! it goes (a member that took writes for an hour alone has an hour to
//! undo). It ends because each page starts strictly below the previous one;
//! it fails when either oplog runs out first ("no common point": the member
//! needs a resync).

use std::time::Duration;

use bson::{doc, Bson};
use slipstream_clock::{OpTime, Timestamp};
use slipstream_storage::{bson_timestamp, from_bson_timestamp};

use crate::protocol::parse_optime;
use crate::replica_set::Shared;

/// Entries read from each oplog on the search's first page: the common
/// point is almost always among the last few entries, and a page costs the
/// source a read of whole entries (a Jepsen run's oplog held 8 KB entries:
/// a first page of 10,000 read 60 MB, which a loaded source did not finish
/// within the timeout, so every retry of the rollback timed out again).
pub const SEARCH_FIRST_PAGE_ENTRIES: usize = 100;
/// Each next page reads this many times more entries than the last ...
const SEARCH_PAGE_GROWTH: usize = 4;
/// ... up to this many.
pub const SEARCH_PAGE_ENTRIES: usize = 10_000;
/// Longest one page's query waits (also its `maxTimeMS`, so that the
/// source stops reading when this side has given up).
const SEARCH_TIMEOUT_MS: u64 = 30_000;

/// Entries per side on page `page` (1, 2, ...) of a search.
fn page_entries(page: usize) -> usize {
    let growth = SEARCH_PAGE_GROWTH.saturating_pow(page.saturating_sub(1).min(16) as u32);
    SEARCH_FIRST_PAGE_ENTRIES
        .saturating_mul(growth)
        .min(SEARCH_PAGE_ENTRIES)
}

/// What the search found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommonPoint {
    pub common_point: OpTime,
    /// The source's last entry and commit point, read with the first page.
    pub source_last: OpTime,
    pub source_commit_point: OpTime,
    /// Pages read from each side.
    pub pages: usize,
}

/// Why a search failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SearchError {
    /// The source did not answer, or answered something unreadable.
    Source(String),
    /// Our own oplog could not be read.
    Local(String),
    /// Every entry of the source's oplog is newer than our last one: what
    /// we missed has fallen off its capped oplog (MongoDB's "too stale").
    TooStale { our_last: OpTime },
    /// One oplog ran out before an entry of the other was found in it.
    NoCommonPoint {
        our_oldest: Option<OpTime>,
        source_oldest: Option<OpTime>,
    },
}

impl std::fmt::Display for SearchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SearchError::Source(why) => write!(f, "the sync source's oplog could not be read: {why}"),
            SearchError::Local(why) => write!(f, "this member's oplog could not be read: {why}"),
            SearchError::TooStale { our_last } => write!(
                f,
                "too stale to catch up: every entry of the sync source's oplog is newer than this member's last \
                 entry {}; it needs a resync (initial sync)",
                super::optime_text(*our_last)
            ),
            SearchError::NoCommonPoint {
                our_oldest,
                source_oldest,
            } => write!(
                f,
                "no common point: the oplogs share no entry (our oldest entry read {}, the source's {}); \
                 this member needs a resync",
                our_oldest.map_or("none".to_owned(), super::optime_text),
                source_oldest.map_or("none".to_owned(), super::optime_text),
            ),
        }
    }
}

/// A page of the source's oplog, newest first, with its position fields.
struct SourcePage {
    entries: Vec<OpTime>,
    last: OpTime,
    commit_point: OpTime,
}

pub async fn search(shared: &Shared, host: &str) -> Result<CommonPoint, SearchError> {
    let mut below_or_at = shared.engine.last_applied().ts;
    let mut first: Option<(OpTime, OpTime)> = None;
    let mut pages = 0;
    loop {
        pages += 1;
        let entries = page_entries(pages);
        let theirs = source_page(shared, host, below_or_at, entries).await?;
        let (source_last, source_commit_point) = *first.get_or_insert((theirs.last, theirs.commit_point));
        if pages == 1 && theirs.entries.is_empty() {
            return Err(SearchError::TooStale {
                our_last: shared.engine.last_applied(),
            });
        }
        let ours = our_page(shared, below_or_at, entries)?;
        match step(&ours, &theirs.entries, below_or_at) {
            Step::Found(common) => {
                return Ok(CommonPoint {
                    common_point: common,
                    source_last: source_last.max(common),
                    source_commit_point: source_commit_point.min(source_last.max(common)),
                    pages,
                })
            }
            Step::Next(next) => below_or_at = next,
            Step::NoCommonPoint {
                our_oldest,
                source_oldest,
            } => {
                return Err(SearchError::NoCommonPoint {
                    our_oldest,
                    source_oldest,
                })
            }
        }
    }
}

/// What one pair of pages (each newest first, both of entries at or below
/// the same timestamp) says.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Found(OpTime),
    /// Read the next pair at or below this timestamp.
    Next(Timestamp),
    NoCommonPoint {
        our_oldest: Option<OpTime>,
        source_oldest: Option<OpTime>,
    },
}

fn step(ours: &[OpTime], theirs: &[OpTime], below_or_at: Timestamp) -> Step {
    if let Some(common) = newest_common(ours, theirs) {
        return Step::Found(common);
    }
    let (Some(our_oldest), Some(their_oldest)) = (ours.last(), theirs.last()) else {
        return Step::NoCommonPoint {
            our_oldest: ours.last().copied(),
            source_oldest: theirs.last().copied(),
        };
    };
    // Every entry at or above the newer of the two pages' oldest was on
    // both pages and matched nothing: the next pair starts below it.
    let next_from = our_oldest.ts.max(their_oldest.ts);
    if next_from.is_zero() {
        return Step::NoCommonPoint {
            our_oldest: Some(*our_oldest),
            source_oldest: Some(*their_oldest),
        };
    }
    let next = Timestamp::from_u64(next_from.as_u64() - 1);
    assert!(next < below_or_at, "the search moves strictly back");
    Step::Next(next)
}

async fn source_page(
    shared: &Shared,
    host: &str,
    below_or_at: Timestamp,
    entries: usize,
) -> Result<SourcePage, SearchError> {
    let find = doc! {
        "find": "oplog.rs",
        "filter": {"ts": {"$lte": bson_timestamp(below_or_at)}},
        "projection": {"ts": 1, "t": 1},
        "sort": {"$natural": -1},
        "batchSize": entries as i64,
        "limit": entries as i64,
        "singleBatch": true,
        "maxTimeMS": SEARCH_TIMEOUT_MS as i64,
        "$readPreference": {"mode": "secondaryPreferred"},
        "$replData": 1,
        "$oplogQueryData": 1,
    };
    let timeout = Duration::from_millis(SEARCH_TIMEOUT_MS);
    let reply = shared
        .network
        .run(host, "local", find, timeout)
        .await
        .map_err(|e| SearchError::Source(e.to_string()))?;
    let source = |why: &str| SearchError::Source(why.to_owned());
    let query_data = reply
        .get_document("$oplogQueryData")
        .map_err(|_| source("reply without $oplogQueryData"))?;
    let last = parse_optime(query_data.get("lastOpApplied"), "lastOpApplied").map_err(|e| source(&e.to_string()))?;
    let commit_point =
        parse_optime(query_data.get("lastOpCommitted"), "lastOpCommitted").map_err(|e| source(&e.to_string()))?;
    let batch = reply
        .get_document("cursor")
        .and_then(|cursor| cursor.get_array("firstBatch"))
        .map_err(|_| source("reply without a batch"))?;
    Ok(SourcePage {
        entries: batch.iter().filter_map(entry_optime).collect(),
        last,
        commit_point,
    })
}

fn our_page(shared: &Shared, below_or_at: Timestamp, entries: usize) -> Result<Vec<OpTime>, SearchError> {
    let ours = shared
        .engine
        .oplog_read_newest_at_or_before(below_or_at, entries)
        .map_err(|e| SearchError::Local(e.to_string()))?;
    // Read in place: a page is up to SEARCH_PAGE_ENTRIES whole entries.
    Ok(ours
        .iter()
        .filter_map(|entry| {
            let ts = from_bson_timestamp(entry.get_timestamp("ts").ok()?);
            let term = entry
                .get_i64("t")
                .ok()
                .or_else(|| entry.get_i32("t").ok().map(i64::from))
                .unwrap_or(-1);
            Some(OpTime::new(ts, term))
        })
        .collect())
}

/// The newest OpTime in both lists (each newest first).
pub fn newest_common(ours: &[OpTime], theirs: &[OpTime]) -> Option<OpTime> {
    let (mut i, mut j) = (0, 0);
    while i < ours.len() && j < theirs.len() {
        match ours[i].ts.cmp(&theirs[j].ts) {
            std::cmp::Ordering::Equal if ours[i].term == theirs[j].term => return Some(ours[i]),
            std::cmp::Ordering::Equal => {
                i += 1;
                j += 1;
            }
            std::cmp::Ordering::Greater => i += 1,
            std::cmp::Ordering::Less => j += 1,
        }
    }
    None
}

fn entry_optime(entry: &Bson) -> Option<OpTime> {
    let Bson::Document(entry) = entry else {
        return None;
    };
    let ts = match entry.get("ts") {
        Some(Bson::Timestamp(ts)) => from_bson_timestamp(*ts),
        _ => return None,
    };
    let term = match entry.get("t") {
        Some(Bson::Int64(t)) => *t,
        Some(Bson::Int32(t)) => i64::from(*t),
        _ => -1,
    };
    Some(OpTime::new(ts, term))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_shared_entry_is_the_common_point() {
        let op = |secs, term| OpTime::new(Timestamp::new(secs, 1), term);
        let ours = [op(9, 2), op(7, 2), op(5, 1), op(3, 1)];
        let theirs = [op(10, 3), op(8, 3), op(7, 3), op(5, 1), op(3, 1)];
        // (7, t2) and (7, t3) share a timestamp but not a term.
        assert_eq!(newest_common(&ours, &theirs), Some(op(5, 1)));
        assert_eq!(newest_common(&ours[..2], &theirs), None);
    }

    /// Runs the search over two in-memory oplogs (oldest first) with pages
    /// of `page` entries; returns the result and the pages read.
    fn paged(ours: &[OpTime], theirs: &[OpTime], page: usize) -> (Step, usize) {
        let newest_at_or_below = |log: &[OpTime], ts: Timestamp| -> Vec<OpTime> {
            log.iter().rev().filter(|op| op.ts <= ts).take(page).copied().collect()
        };
        let mut below_or_at = ours.last().unwrap().ts;
        for pages in 1.. {
            let step = step(
                &newest_at_or_below(ours, below_or_at),
                &newest_at_or_below(theirs, below_or_at),
                below_or_at,
            );
            match step {
                Step::Next(next) => below_or_at = next,
                done => return (done, pages),
            }
        }
        unreachable!()
    }

    #[test]
    fn pages_start_small_and_grow_to_the_bound() {
        assert_eq!(page_entries(1), SEARCH_FIRST_PAGE_ENTRIES);
        assert_eq!(page_entries(2), SEARCH_FIRST_PAGE_ENTRIES * SEARCH_PAGE_GROWTH);
        assert!((1..100).all(|page| page_entries(page) <= page_entries(page + 1)));
        assert_eq!(page_entries(100), SEARCH_PAGE_ENTRIES);
        assert_eq!(page_entries(usize::MAX), SEARCH_PAGE_ENTRIES);
    }

    #[test]
    fn the_search_pages_back_as_far_as_the_divergence_goes() {
        let op = |secs, term| OpTime::new(Timestamp::new(secs, 1), term);
        let shared: Vec<OpTime> = (1..=5).map(|s| op(s, 1)).collect();
        // 50 entries of ours in term 2 against 30 of theirs in term 3,
        // interleaved in time.
        let ours: Vec<OpTime> = shared
            .iter()
            .copied()
            .chain((0..50).map(|i| op(10 + 2 * i, 2)))
            .collect();
        let theirs: Vec<OpTime> = shared
            .iter()
            .copied()
            .chain((0..30).map(|i| op(11 + 3 * i, 3)))
            .collect();
        let (found, pages) = paged(&ours, &theirs, 7);
        assert_eq!(found, Step::Found(op(5, 1)));
        assert!(pages > 5, "{pages} pages");
        assert_eq!(paged(&ours, &theirs, 1_000), (Step::Found(op(5, 1)), 1));
        // Nothing shared: it ends, it does not loop.
        let (none, _) = paged(&ours[5..], &theirs[5..], 7);
        assert!(matches!(none, Step::NoCommonPoint { .. }), "{none:?}");
    }
}
