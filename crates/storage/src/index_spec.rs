//! An index specification: what `createIndexes` asked for, what the catalog
//! keeps, what the `createIndexes` oplog entry carries and what
//! `listIndexes` shows, plus MongoDB's rule for comparing two of them.
//!
//! One document shape serves the oplog entry and the checkpoint catalog
//! (`to_document` / `from_document`), so that every member rebuilds the
//! same spec from the entry and a restart rebuilds it from the checkpoint.

use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::StorageError;

/// One index of a collection.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IndexSpec {
    pub name: String,
    /// The key pattern, e.g. `{a: 1, b: -1}`.
    pub key: Document,
    pub unique: bool,
    pub sparse: bool,
    /// A hidden index is maintained but the planner does not see it.
    pub hidden: bool,
    /// The index's collation as MongoDB fills it in (every field and
    /// `version`); `None` is the simple collation.
    pub collation: Option<Document>,
    /// A TTL index: the monitor deletes documents whose indexed date is
    /// this many seconds old (0 to `EXPIRE_AFTER_SECONDS_MAX`).
    pub expire_after_seconds: Option<i64>,
    /// A partial index holds entries only for the documents this filter
    /// matches (`partialFilterExpression`).
    pub partial_filter_expression: Option<Document>,
}

/// The largest `expireAfterSeconds` MongoDB 7.0 accepts (2^31 - 1).
pub const EXPIRE_AFTER_SECONDS_MAX: i64 = i32::MAX as i64;

/// What one `collMod` changes of one index (`None` leaves an option as it
/// is). Its document is the `index` field of the `collMod` oplog entry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IndexModification {
    pub hidden: Option<bool>,
    pub expire_after_seconds: Option<i64>,
}

impl IndexModification {
    pub fn to_document(&self, name: &str) -> Document {
        let mut document = Document::new();
        document.insert("name", name);
        if let Some(hidden) = self.hidden {
            document.insert("hidden", hidden);
        }
        if let Some(seconds) = self.expire_after_seconds {
            assert!((0..=EXPIRE_AFTER_SECONDS_MAX).contains(&seconds), "expireAfterSeconds {seconds} out of range");
            document.insert("expireAfterSeconds", seconds);
        }
        document
    }

    /// The index name and the change, from `to_document`'s shape.
    pub fn from_document(document: &Document) -> Result<(String, IndexModification), StorageError> {
        let corrupt = || StorageError::Corruption(format!("collMod entry with a malformed index: {document}"));
        let name = document.get_str("name").map_err(|_| corrupt())?.to_string();
        let hidden = match document.get("hidden") {
            None => None,
            Some(Bson::Boolean(hidden)) => Some(*hidden),
            Some(_) => return Err(corrupt()),
        };
        let expire_after_seconds = match document.get("expireAfterSeconds") {
            None => None,
            Some(Bson::Int64(seconds)) if (0..=EXPIRE_AFTER_SECONDS_MAX).contains(seconds) => Some(*seconds),
            Some(_) => return Err(corrupt()),
        };
        Ok((name, IndexModification { hidden, expire_after_seconds }))
    }

    pub fn is_empty(&self) -> bool {
        self.hidden.is_none() && self.expire_after_seconds.is_none()
    }

    /// `spec` with the change made.
    pub fn applied_to(&self, spec: &IndexSpec) -> IndexSpec {
        let mut changed = spec.clone();
        if let Some(hidden) = self.hidden {
            changed.hidden = hidden;
        }
        if let Some(seconds) = self.expire_after_seconds {
            changed.expire_after_seconds = Some(seconds);
        }
        changed
    }
}

/// How a requested index relates to an existing one, as MongoDB's
/// `IndexDescriptor::compareIndexOptions` decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexComparison {
    /// The key pattern or an option that identifies an index (its
    /// "signature": `unique`, `sparse`, `partialFilterExpression`) differs; both may coexist under
    /// different names.
    Different,
    /// Same signature, but another option (`hidden`, `expireAfterSeconds`)
    /// differs.
    Equivalent,
    /// The same index.
    Identical,
}

/// Key patterns compare field by field, values by BSON value (`1` equals `1.0`).
pub fn key_patterns_equal(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter().zip(b.iter()).all(|((ka, va), (kb, vb))| {
            ka == kb && slipstream_query::compare::compare_values(va, vb) == Ordering::Equal
        })
}

/// What a request for `wanted` means next to one `existing` index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No relation: both may exist.
    Unrelated,
    /// The requested index is this one; nothing to build.
    AlreadyExists,
    /// 85 IndexOptionsConflict or 86 IndexKeySpecsConflict.
    Conflict { code: i32, message: String },
}

/// MongoDB's rule (`IndexCatalogImpl::_doesSpecConflictWithExisting`):
/// under the same name, an identical index already exists, a different key
/// or signature is 86, another differing option 85; the same signature
/// under another name is 85.
pub fn verdict(existing: &IndexSpec, wanted: &IndexSpec) -> Verdict {
    let comparison = wanted.compare(existing);
    let same_name_message = || {
        format!(
            "An existing index has the same name as the requested index. When index names are not specified, they \
             are auto generated and can cause conflicts. Please refer to our documentation. Requested index: {}, \
             existing index: {}",
            wanted.to_document(),
            existing.to_document()
        )
    };
    if existing.name == wanted.name {
        return match comparison {
            IndexComparison::Identical => Verdict::AlreadyExists,
            IndexComparison::Equivalent => Verdict::Conflict {
                code: 85,
                message: same_name_message(),
            },
            IndexComparison::Different => Verdict::Conflict {
                code: 86,
                message: same_name_message(),
            },
        };
    }
    if comparison == IndexComparison::Different {
        return Verdict::Unrelated;
    }
    Verdict::Conflict {
        code: 85,
        message: format!("Index already exists with a different name: {}", existing.name),
    }
}

impl IndexSpec {
    pub fn is_id_index(&self) -> bool {
        self.name == "_id_"
    }

    /// Compares `self` (requested) with `existing`. The `_id_` index is
    /// unique by nature whatever a request for it says.
    pub fn compare(&self, existing: &IndexSpec) -> IndexComparison {
        if !key_patterns_equal(&self.key, &existing.key) {
            return IndexComparison::Different;
        }
        if !existing.is_id_index() && (self.unique != existing.unique || self.sparse != existing.sparse) {
            return IndexComparison::Different;
        }
        // The collation is part of an index's signature in MongoDB.
        if self.collation != existing.collation {
            return IndexComparison::Different;
        }
        if self.partial_filter_expression != existing.partial_filter_expression {
            return IndexComparison::Different;
        }
        if self.hidden != existing.hidden || self.expire_after_seconds != existing.expire_after_seconds {
            return IndexComparison::Equivalent;
        }
        IndexComparison::Identical
    }

    /// The options as stored in the catalog and the oplog entry (without
    /// the `createIndexes` field of the entry). Options at their default
    /// are left out, as `listIndexes` leaves them out.
    pub fn to_document(&self) -> Document {
        let mut document = Document::new();
        document.insert("v", 2);
        document.insert("key", self.key.clone());
        document.insert("name", self.name.clone());
        if self.unique {
            document.insert("unique", true);
        }
        if self.sparse {
            document.insert("sparse", true);
        }
        if self.hidden {
            document.insert("hidden", true);
        }
        if let Some(collation) = &self.collation {
            document.insert("collation", collation.clone());
        }
        if let Some(seconds) = self.expire_after_seconds {
            assert!((0..=EXPIRE_AFTER_SECONDS_MAX).contains(&seconds), "expireAfterSeconds {seconds} out of range");
            document.insert("expireAfterSeconds", seconds as i32);
        }
        if let Some(filter) = &self.partial_filter_expression {
            document.insert("partialFilterExpression", filter.clone());
        }
        document
    }

    /// The key pattern, keyed under the index's collation.
    pub fn pattern(&self) -> Result<slipstream_query::index_key::KeyPattern, slipstream_query::QueryError> {
        let pattern = slipstream_query::index_key::KeyPattern::parse(&self.key)?;
        let collation = match &self.collation {
            Some(collation) => slipstream_query::collation::Collation::parse(collation)?,
            None => None,
        };
        Ok(pattern.with_collation(collation))
    }

    /// Reads what `to_document` wrote (older catalogs wrote `unique` and
    /// `sparse` as explicit false, which reads the same).
    pub fn from_document(document: &Document) -> Result<IndexSpec, StorageError> {
        let corrupt = |what: &str| StorageError::Corruption(format!("index spec without {what}: {document}"));
        let flag = |name: &str| -> Result<bool, StorageError> {
            match document.get(name) {
                None => Ok(false),
                Some(Bson::Boolean(value)) => Ok(*value),
                Some(_) => Err(corrupt(name)),
            }
        };
        Ok(IndexSpec {
            name: document.get_str("name").map_err(|_| corrupt("name"))?.to_string(),
            key: document.get_document("key").map_err(|_| corrupt("key"))?.clone(),
            unique: flag("unique")?,
            sparse: flag("sparse")?,
            hidden: flag("hidden")?,
            collation: match document.get("collation") {
                None => None,
                Some(Bson::Document(collation)) => Some(collation.clone()),
                Some(_) => return Err(corrupt("collation")),
            },
            expire_after_seconds: match document.get("expireAfterSeconds") {
                None => None,
                Some(Bson::Int32(seconds)) if *seconds >= 0 => Some(i64::from(*seconds)),
                Some(_) => return Err(corrupt("a valid expireAfterSeconds")),
            },
            partial_filter_expression: match document.get("partialFilterExpression") {
                None => None,
                Some(Bson::Document(filter)) => Some(filter.clone()),
                Some(_) => return Err(corrupt("a valid partialFilterExpression")),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    fn spec(name: &str, key: Document) -> IndexSpec {
        IndexSpec {
            name: name.into(),
            key,
            ..IndexSpec::default()
        }
    }

    #[test]
    fn signature_options_make_indexes_different() {
        let existing = spec("a_1", doc! {"a": 1});
        assert_eq!(
            spec("x", doc! {"a": 1.0}).compare(&existing),
            IndexComparison::Identical
        );
        assert_eq!(spec("x", doc! {"a": -1}).compare(&existing), IndexComparison::Different);
        let unique = IndexSpec {
            unique: true,
            ..spec("x", doc! {"a": 1})
        };
        assert_eq!(unique.compare(&existing), IndexComparison::Different);
        let hidden = IndexSpec {
            hidden: true,
            ..spec("x", doc! {"a": 1})
        };
        assert_eq!(hidden.compare(&existing), IndexComparison::Equivalent);
    }

    #[test]
    fn verdicts_follow_mongodb() {
        let existing = spec("a_1", doc! {"a": 1});
        assert_eq!(verdict(&existing, &spec("a_1", doc! {"a": 1})), Verdict::AlreadyExists);
        assert_eq!(verdict(&existing, &spec("b_1", doc! {"b": 1})), Verdict::Unrelated);
        let code = |wanted: IndexSpec| match verdict(&existing, &wanted) {
            Verdict::Conflict { code, .. } => code,
            other => panic!("{other:?}"),
        };
        assert_eq!(code(spec("a_1", doc! {"b": 1})), 86);
        assert_eq!(
            code(IndexSpec {
                unique: true,
                ..spec("a_1", doc! {"a": 1})
            }),
            86
        );
        assert_eq!(
            code(IndexSpec {
                hidden: true,
                ..spec("a_1", doc! {"a": 1})
            }),
            85
        );
        assert_eq!(code(spec("other", doc! {"a": 1})), 85);
        assert_eq!(
            code(IndexSpec {
                hidden: true,
                ..spec("other", doc! {"a": 1})
            }),
            85
        );
        let unique = IndexSpec {
            unique: true,
            ..spec("other", doc! {"a": 1})
        };
        assert_eq!(verdict(&existing, &unique), Verdict::Unrelated);
    }

    #[test]
    fn documents_round_trip() {
        let full = IndexSpec {
            unique: true,
            sparse: true,
            hidden: true,
            expire_after_seconds: Some(3600),
            partial_filter_expression: Some(doc! {"a": {"$gt": 5}}),
            ..spec("a_1", doc! {"a": 1})
        };
        for value in [full, spec("b_1", doc! {"b": -1})] {
            assert_eq!(IndexSpec::from_document(&value.to_document()).unwrap(), value);
        }
        let old = doc! {"name": "a_1", "key": {"a": 1}, "unique": false, "sparse": false, "table": 4_i64};
        assert_eq!(IndexSpec::from_document(&old).unwrap(), spec("a_1", doc! {"a": 1}));
    }
}
