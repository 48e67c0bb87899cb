//! `find`'s `min` and `max`: the results are the hinted index's entries
//! from `min` (inclusive) up to `max` (exclusive), in the index's own key
//! order (so descending fields and cross-type order follow the index).
//! A document is in range when one of its index keys is (a multikey
//! document has several). The bounds are compared as encoded index keys,
//! the same bytes the index stores.

use bson::{Bson, Document};
use slipstream_query::index_key::{encode_value, index_keys, KeyPattern};
use slipstream_storage::CollectionInfo;

use crate::error::CommandError;
use crate::exec::plan::hinted_index;

/// The key range of a find with `min` and/or `max`, on its hinted index.
#[derive(Debug)]
pub(super) struct IndexBounds {
    pattern: KeyPattern,
    sparse: bool,
    min: Option<Vec<u8>>,
    max: Option<Vec<u8>>,
}

impl IndexBounds {
    /// Checks `min`/`max` against the hinted index: a hint is required
    /// (51173), and each bound names exactly the index's fields in order
    /// (51174). `None` when neither bound is given.
    pub(super) fn resolve(
        info: Option<&CollectionInfo>,
        hint: Option<&Bson>,
        min: Option<&Document>,
        max: Option<&Document>,
    ) -> Result<Option<IndexBounds>, CommandError> {
        if min.is_none() && max.is_none() {
            return Ok(None);
        }
        let Some(hint) = hint else {
            return Err(CommandError::new(
                51173,
                "When using min()/max() a hint of which index to use must be provided",
            ));
        };
        let Some(info) = info else {
            // No collection: nothing to return, whatever the bounds.
            return Ok(None);
        };
        let Some(index) = hinted_index(info, hint)? else {
            return Err(CommandError::new(
                51174,
                "min()/max() cannot be used with a $natural hint",
            ));
        };
        let pattern = KeyPattern::parse(&index.key)?;
        let encode = |bound: &Document| -> Result<Vec<u8>, CommandError> {
            let names: Vec<&str> = bound.keys().map(String::as_str).collect();
            let expected: Vec<&str> = pattern.fields.iter().map(|field| field.path.as_str()).collect();
            if names != expected {
                return Err(CommandError::new(
                    51174,
                    "The index chosen is not consistent with min/max",
                ));
            }
            let mut key = Vec::new();
            for ((_, value), field) in bound.iter().zip(&pattern.fields) {
                encode_value(&mut key, value, field.descending);
            }
            Ok(key)
        };
        Ok(Some(IndexBounds {
            min: min.map(encode).transpose()?,
            max: max.map(encode).transpose()?,
            sparse: index.sparse,
            pattern,
        }))
    }

    /// Whether one of `document`'s keys in the index lies in the range.
    pub(super) fn contains(&self, document: &Document) -> Result<bool, CommandError> {
        let keys = index_keys(document, &self.pattern, self.sparse)?;
        Ok(keys
            .keys
            .iter()
            .any(|key| self.min.as_ref().is_none_or(|min| key >= min) && self.max.as_ref().is_none_or(|max| key < max)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use slipstream_storage::IndexSpec;

    fn info(key: Document) -> CollectionInfo {
        CollectionInfo {
            ns: "db.c".into(),
            uuid: bson::Uuid::new(),
            options: Document::new(),
            indexes: vec![IndexSpec {
                name: "i".into(),
                key,
                unique: false,
                sparse: false,
                ..Default::default()
            }],
            multikey_indexes: Vec::new(),
        }
    }

    #[test]
    fn bounds_follow_the_index_order() {
        let info = info(doc! {"j": 1, "k": -1});
        let hint = Bson::String("i".into());
        let bounds = IndexBounds::resolve(
            Some(&info),
            Some(&hint),
            Some(&doc! {"j": 2, "k": 5}),
            Some(&doc! {"j": 4, "k": 0}),
        )
        .unwrap()
        .unwrap();
        assert!(bounds.contains(&doc! {"j": 2, "k": 5}).unwrap(), "min is inclusive");
        assert!(bounds.contains(&doc! {"j": 2, "k": 1}).unwrap(), "k descends");
        assert!(!bounds.contains(&doc! {"j": 2, "k": 6}).unwrap());
        assert!(bounds.contains(&doc! {"j": 4, "k": 3}).unwrap());
        assert!(!bounds.contains(&doc! {"j": 4, "k": 0}).unwrap(), "max is exclusive");
        assert!(
            bounds.contains(&doc! {"j": [0, 3], "k": 1}).unwrap(),
            "one multikey key in range"
        );
    }

    #[test]
    fn bounds_need_a_hint_and_the_index_fields() {
        let info = info(doc! {"j": 1, "k": 1});
        let hint = Bson::String("i".into());
        let min = doc! {"k": 1, "j": 1};
        assert_eq!(
            IndexBounds::resolve(Some(&info), None, Some(&min), None)
                .unwrap_err()
                .code,
            51173
        );
        assert_eq!(
            IndexBounds::resolve(Some(&info), Some(&hint), Some(&min), None)
                .unwrap_err()
                .code,
            51174
        );
    }
}
