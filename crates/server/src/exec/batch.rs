//! How many documents go into one reply batch: the client's `batchSize`,
//! the remaining `limit`, and the 16 MiB cap on a batch's bytes. A batch
//! always takes its first document, however large, so that a cursor makes
//! progress.

use bson::Document;

use super::limits::{FIND_DEFAULT_FIRST_BATCH_DOCUMENTS, REPLY_BATCH_BYTES_MAX};
use super::size::{decimal_digits, document_size};

/// The bounds of one batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    /// At most this many documents (`None`: only the byte cap applies).
    pub documents_max: Option<usize>,
    pub bytes_max: usize,
}

impl BatchLimits {
    /// The first batch of `find` (and `aggregate`): `batchSize` or 101
    /// documents, never more than the remaining limit.
    pub fn first_batch(batch_size: Option<usize>, limit_remaining: Option<u64>) -> Self {
        let requested = batch_size.unwrap_or(FIND_DEFAULT_FIRST_BATCH_DOCUMENTS);
        BatchLimits {
            documents_max: Some(cap_by_limit(Some(requested), limit_remaining).unwrap_or(requested)),
            bytes_max: REPLY_BATCH_BYTES_MAX,
        }
    }

    /// A `getMore` batch: `batchSize` documents if given (else only the
    /// byte cap), never more than the remaining limit.
    pub fn get_more(batch_size: Option<usize>, limit_remaining: Option<u64>) -> Self {
        BatchLimits {
            documents_max: cap_by_limit(batch_size, limit_remaining),
            bytes_max: REPLY_BATCH_BYTES_MAX,
        }
    }
}

fn cap_by_limit(batch_size: Option<usize>, limit_remaining: Option<u64>) -> Option<usize> {
    let limit = limit_remaining.map(|remaining| usize::try_from(remaining).unwrap_or(usize::MAX));
    match (batch_size, limit) {
        (Some(size), Some(limit)) => Some(size.min(limit)),
        (Some(size), None) => Some(size),
        (None, limit) => limit,
    }
}

/// One reply batch being filled.
#[derive(Debug)]
pub struct Batch {
    limits: BatchLimits,
    documents: Vec<Document>,
    bytes: usize,
}

impl Batch {
    pub fn new(limits: BatchLimits) -> Self {
        Batch {
            limits,
            documents: Vec::new(),
            bytes: 0,
        }
    }

    /// No further document may be added (the document count is reached).
    pub fn is_full(&self) -> bool {
        self.limits.documents_max.is_some_and(|max| self.documents.len() >= max)
    }

    /// Adds `document`, or hands it back when it does not fit (count
    /// reached, or its bytes would pass the cap); the caller keeps it for
    /// the next batch.
    pub fn push(&mut self, document: Document) -> Result<(), Document> {
        if self.is_full() {
            return Err(document);
        }
        // The document's bytes plus its array element header in the reply
        // (type byte, decimal index, NUL), so that the encoded batch, not
        // just its documents, stays under the cap.
        let size = document_size(&document) + 2 + decimal_digits(self.documents.len());
        if !self.documents.is_empty() && self.bytes + size > self.limits.bytes_max {
            return Err(document);
        }
        self.bytes += size;
        self.documents.push(document);
        Ok(())
    }

    /// Documents the count limit still admits (the byte cap may admit
    /// fewer).
    pub fn room(&self) -> usize {
        self.limits
            .documents_max
            .map_or(usize::MAX, |max| max.saturating_sub(self.documents.len()))
    }

    pub fn len(&self) -> usize {
        self.documents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.documents.is_empty()
    }

    pub fn into_documents(self) -> Vec<Document> {
        self.documents
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn first_batch_defaults_to_101_documents() {
        let limits = BatchLimits::first_batch(None, None);
        assert_eq!(limits.documents_max, Some(101));
        let mut batch = Batch::new(limits);
        for i in 0..101 {
            assert!(batch.push(doc! {"i": i}).is_ok());
        }
        assert!(batch.is_full());
        assert!(batch.push(doc! {"i": 101}).is_err());
    }

    #[test]
    fn limit_caps_the_batch_size() {
        assert_eq!(BatchLimits::first_batch(Some(50), Some(7)).documents_max, Some(7));
        assert_eq!(BatchLimits::first_batch(None, Some(500)).documents_max, Some(101));
        assert_eq!(BatchLimits::get_more(None, Some(3)).documents_max, Some(3));
        assert_eq!(BatchLimits::get_more(None, None).documents_max, None);
        assert_eq!(BatchLimits::get_more(Some(4), None).documents_max, Some(4));
    }

    #[test]
    fn batch_size_zero_gives_an_empty_batch() {
        let mut batch = Batch::new(BatchLimits::first_batch(Some(0), None));
        assert!(batch.is_full());
        assert!(batch.push(doc! {}).is_err());
        assert!(batch.is_empty());
    }

    #[test]
    fn byte_cap_cuts_the_batch_but_always_admits_one_document() {
        let big = doc! {"s": "x".repeat(100)};
        // Each element also costs its array header: type byte, index, NUL.
        let size = document_size(&big) + 3;
        let mut batch = Batch::new(BatchLimits {
            documents_max: None,
            bytes_max: size * 2 + size / 2,
        });
        assert!(batch.push(big.clone()).is_ok());
        assert!(batch.push(big.clone()).is_ok());
        assert!(batch.push(big.clone()).is_err());
        assert_eq!(batch.len(), 2);

        let mut tiny = Batch::new(BatchLimits {
            documents_max: None,
            bytes_max: 1,
        });
        assert!(tiny.push(big.clone()).is_ok());
        assert!(tiny.push(big).is_err());
    }

    #[test]
    fn encoded_batch_stays_under_the_cap() {
        let document = doc! {"pad": "x".repeat(1000)};
        let cap = 200_000;
        let mut batch = Batch::new(BatchLimits {
            documents_max: None,
            bytes_max: cap,
        });
        while batch.push(document.clone()).is_ok() {}
        let encoded = doc! {"batch": batch.into_documents()}.to_vec().unwrap().len();
        assert!(
            encoded <= cap + 32,
            "encoded batch of {encoded} bytes passes the cap of {cap}"
        );
    }
}
