//! The aggregation stages that write their input to a collection: `$out`
//! and `$merge`. The query crate's pipeline only reads, so `aggregate`
//! strips the final write stage, runs the rest, and hands the results to
//! `OutputStage::write`.
//!
//! `$out` replaces the target's contents as MongoDB does: the results go
//! into a temporary collection carrying the target's indexes, which is
//! then renamed over the target (one oplog entry), so readers see the old
//! contents or the new ones, never a mix. `$merge` writes document by
//! document, each write its own statement, as MongoDB's `$merge` is not
//! atomic either.

use bson::{doc, oid::ObjectId, Bson, Document};
use slipstream_query::expr::Variables;
use slipstream_query::update::{oplog_update, Update, UpdateContext};
use slipstream_storage::{Engine, OpTime};

use crate::error::CommandError;
use crate::exec::args::{check_writable, namespace, type_name};
use crate::exec::plan::{plan_query, QueryShape};
use crate::exec::query::collect_matches;
use crate::exec::stored_document::{check_inserted, check_updated};
use slipstream_query::filter::Filter;

/// Where a write stage writes.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub db: String,
    pub collection: String,
}

impl Target {
    fn ns(&self) -> String {
        namespace(&self.db, &self.collection)
    }

    /// A collection name, or `{db, coll}`; `db` defaults to the command's.
    fn parse(value: &Bson, default_db: &str, stage: &str, field: &str) -> Result<Target, CommandError> {
        let target = match value {
            Bson::String(collection) => Target {
                db: default_db.to_owned(),
                collection: collection.clone(),
            },
            Bson::Document(spec) => {
                let db = match spec.get("db") {
                    None => default_db.to_owned(),
                    Some(Bson::String(db)) => db.clone(),
                    Some(other) => {
                        return Err(CommandError::new(
                            14,
                            format!("{stage} '{field}.db' must be a string, not {}", type_name(other)),
                        ))
                    }
                };
                let collection = match spec.get("coll") {
                    Some(Bson::String(collection)) => collection.clone(),
                    _ => {
                        return Err(CommandError::new(
                            40414,
                            format!("BSON field '{stage}.{field}.coll' is missing but a required field"),
                        ))
                    }
                };
                for key in spec.keys() {
                    if key != "db" && key != "coll" {
                        return Err(CommandError::new(
                            40415,
                            format!("BSON field '{stage}.{field}.{key}' is an unknown field."),
                        ));
                    }
                }
                Target { db, collection }
            }
            other => {
                return Err(CommandError::new(
                    if stage == "$out" { 16990 } else { 51178 },
                    format!(
                        "{stage} '{field}' requires a string or a document with 'db' and 'coll', found {}",
                        type_name(other)
                    ),
                ))
            }
        };
        if target.collection.is_empty() {
            return Err(CommandError::new(
                73,
                format!("{stage} target collection name cannot be empty"),
            ));
        }
        check_writable(&target.db, &target.collection)?;
        Ok(target)
    }
}

/// `$merge`'s `whenMatched`.
#[derive(Debug)]
pub(crate) enum WhenMatched {
    Replace,
    KeepExisting,
    Merge,
    Fail,
    /// An update pipeline; `$$new` is the result document.
    Pipeline(Box<Update>),
}

/// `$merge`'s `whenNotMatched`.
#[derive(Debug, PartialEq)]
pub(crate) enum WhenNotMatched {
    Insert,
    Discard,
    Fail,
}

/// A parsed final write stage.
#[derive(Debug)]
pub(crate) enum OutputStage {
    Out(Target),
    Merge {
        target: Target,
        /// The `on` fields; `["_id"]` by default.
        on: Vec<String>,
        when_matched: WhenMatched,
        when_not_matched: WhenNotMatched,
    },
}

/// Whether a stage writes (and so must be the last).
pub(crate) fn is_write_stage(stage: &Document) -> bool {
    matches!(stage.keys().next().map(String::as_str), Some("$out" | "$merge"))
}

impl OutputStage {
    /// Splits a final `$out`/`$merge` off `stages`. A write stage anywhere
    /// else fails with 40601, as in MongoDB.
    pub(crate) fn split(stages: &mut Vec<Document>, db: &str) -> Result<Option<OutputStage>, CommandError> {
        for stage in stages.iter().rev().skip(1) {
            if is_write_stage(stage) {
                let name = stage.keys().next().cloned().unwrap_or_default();
                return Err(CommandError::new(
                    40601,
                    format!("{name} can only be the final stage in the pipeline"),
                ));
            }
        }
        match stages.last() {
            Some(stage) if is_write_stage(stage) => {
                let stage = stages.pop().expect("checked non-empty");
                OutputStage::parse(&stage, db).map(Some)
            }
            _ => Ok(None),
        }
    }

    fn parse(stage: &Document, db: &str) -> Result<OutputStage, CommandError> {
        let (name, spec) = stage.iter().next().expect("a write stage has a name");
        if stage.len() != 1 {
            return Err(CommandError::new(
                40323,
                "A pipeline stage specification object must contain exactly one field.",
            ));
        }
        if name == "$out" {
            return Ok(OutputStage::Out(Target::parse(spec, db, "$out", "$out")?));
        }
        let spec = match spec {
            Bson::String(_) => doc! {"into": spec.clone()},
            Bson::Document(spec) => spec.clone(),
            other => {
                return Err(CommandError::new(
                    51182,
                    format!(
                        "$merge requires a string or object argument, but found {}",
                        type_name(other)
                    ),
                ))
            }
        };
        let mut target = None;
        let mut on = vec!["_id".to_owned()];
        let mut when_matched = WhenMatched::Merge;
        let mut when_not_matched = WhenNotMatched::Insert;
        for (key, value) in &spec {
            match key.as_str() {
                "into" => target = Some(Target::parse(value, db, "$merge", "into")?),
                "on" => on = parse_on(value)?,
                "whenMatched" => {
                    when_matched = match value {
                        Bson::String(mode) => match mode.as_str() {
                            "replace" => WhenMatched::Replace,
                            "keepExisting" => WhenMatched::KeepExisting,
                            "merge" => WhenMatched::Merge,
                            "fail" => WhenMatched::Fail,
                            "pipeline" => {
                                return Err(CommandError::new(
                                    51186,
                                    "'whenMatched' of 'pipeline' must be given as the pipeline itself",
                                ))
                            }
                            other => {
                                return Err(CommandError::new(
                                    2,
                                    format!(
                                    "Enumeration value '{other}' for field '$merge.whenMatched' is not a valid value."
                                ),
                                ))
                            }
                        },
                        Bson::Array(_) => WhenMatched::Pipeline(Box::new(Update::parse(value, None)?)),
                        other => {
                            return Err(CommandError::new(
                                14,
                                format!(
                                    "$merge 'whenMatched' must be a string or an array, not {}",
                                    type_name(other)
                                ),
                            ))
                        }
                    }
                }
                "whenNotMatched" => {
                    when_not_matched = match value {
                        Bson::String(mode) if mode == "insert" => WhenNotMatched::Insert,
                        Bson::String(mode) if mode == "discard" => WhenNotMatched::Discard,
                        Bson::String(mode) if mode == "fail" => WhenNotMatched::Fail,
                        other => {
                            return Err(CommandError::new(
                                2,
                                format!("'{other}' is not a valid value for '$merge.whenNotMatched'"),
                            ))
                        }
                    }
                }
                "let" => {
                    return Err(CommandError::new(
                        115,
                        "$merge 'let' is not supported by Slipstream ($$new is always bound)",
                    ))
                }
                other => {
                    return Err(CommandError::new(
                        40415,
                        format!("BSON field '$merge.{other}' is an unknown field."),
                    ))
                }
            }
        }
        let target = target
            .ok_or_else(|| CommandError::new(40414, "BSON field '$merge.into' is missing but a required field"))?;
        Ok(OutputStage::Merge {
            target,
            on,
            when_matched,
            when_not_matched,
        })
    }

    /// The collection written.
    /// The stage's name as errors quote it.
    pub(crate) fn stage_name(&self) -> &'static str {
        match self {
            OutputStage::Out(_) => "$out",
            OutputStage::Merge { .. } => "$merge",
        }
    }

    pub(crate) fn target_ns(&self) -> String {
        match self {
            OutputStage::Out(target) | OutputStage::Merge { target, .. } => target.ns(),
        }
    }

    /// Writes `documents` to the target; returns the optime of the last
    /// write (for the write concern).
    pub(crate) fn write(&self, engine: &Engine, documents: Vec<Document>) -> Result<Option<OpTime>, CommandError> {
        crate::exec::views::refuse_view(
            engine,
            &self.target_ns(),
            if matches!(self, OutputStage::Out(_)) {
                "$out"
            } else {
                "$merge"
            },
        )?;
        match self {
            OutputStage::Out(target) => write_out(engine, target, documents),
            OutputStage::Merge {
                target,
                on,
                when_matched,
                when_not_matched,
            } => {
                let merge = Merge {
                    ns: target.ns(),
                    on,
                    when_matched,
                    when_not_matched,
                };
                merge.write(engine, documents)
            }
        }
    }
}

/// `$out`: fills a temporary collection with the target's indexes, then
/// renames it over the target. The temporary collection is dropped if any
/// step fails, so a failed `$out` leaves the target as it was.
fn write_out(engine: &Engine, target: &Target, documents: Vec<Document>) -> Result<Option<OpTime>, CommandError> {
    let ns = target.ns();
    let temp_ns = namespace(&target.db, &format!("tmp.agg_out.{}", ObjectId::new().to_hex()));
    let existing = engine.collection_info(&ns);
    // The replacement keeps the target's options as well as its indexes.
    let options = existing.as_ref().map(|info| info.options.clone()).unwrap_or_default();
    engine.create_collection(&temp_ns, options)?;
    let filled = (|| -> Result<OpTime, CommandError> {
        if let Some(info) = &existing {
            let secondary: Vec<_> = info
                .indexes
                .iter()
                .filter(|index| index.name != "_id_")
                .cloned()
                .collect();
            if !secondary.is_empty() {
                engine.create_indexes(&temp_ns, secondary)?;
            }
        }
        for document in documents {
            check_inserted(&document)?;
            let document = with_id(document);
            engine.writer().insert(&temp_ns, document)?;
        }
        Ok(engine.rename_collection(&temp_ns, &ns, true)?)
    })();
    match filled {
        Ok(optime) => Ok(Some(optime)),
        Err(error) => {
            // The target is untouched; the temporary collection goes. A
            // failure to drop it is secondary to the error being reported.
            let _ = engine.drop_collection(&temp_ns);
            Err(error)
        }
    }
}

/// A result document without `_id` gets a new ObjectId, first, as MongoDB
/// gives inserted documents.
fn with_id(document: Document) -> Document {
    if document.contains_key("_id") {
        return document;
    }
    let mut with_id = doc! {"_id": ObjectId::new()};
    with_id.extend(document);
    with_id
}

/// `$merge`'s `on`: a field name or a non-empty array of distinct names.
fn parse_on(value: &Bson) -> Result<Vec<String>, CommandError> {
    let fields: Vec<String> = match value {
        Bson::String(field) => vec![field.clone()],
        Bson::Array(items) if !items.is_empty() => items
            .iter()
            .map(|item| match item {
                Bson::String(field) => Ok(field.clone()),
                other => Err(CommandError::new(
                    51134,
                    format!(
                        "$merge 'on' array elements must be strings, but found {}",
                        type_name(other)
                    ),
                )),
            })
            .collect::<Result<_, _>>()?,
        Bson::Array(_) => {
            return Err(CommandError::new(
                51187,
                "If explicitly specifying $merge 'on', must include at least one field",
            ))
        }
        other => {
            return Err(CommandError::new(
                51186,
                format!(
                    "$merge 'on' field must be either a string or an array of strings, but found {}",
                    type_name(other)
                ),
            ))
        }
    };
    for (index, field) in fields.iter().enumerate() {
        if fields[..index].contains(field) {
            return Err(CommandError::new(31465, format!("Found a duplicate field '{field}'")));
        }
    }
    Ok(fields)
}

/// A `$merge` ready to write into `ns`.
struct Merge<'a> {
    ns: String,
    on: &'a [String],
    when_matched: &'a WhenMatched,
    when_not_matched: &'a WhenNotMatched,
}

impl Merge<'_> {
    fn on_id(&self) -> bool {
        self.on.len() == 1 && self.on[0] == "_id"
    }

    /// `on` fields other than `_id` must be the fields of a unique index
    /// of the target (in any order), as MongoDB requires, so that at most
    /// one document matches each result.
    fn check_unique_index(&self, engine: &Engine) -> Result<(), CommandError> {
        if self.on_id() {
            return Ok(());
        }
        let covered = engine.collection_info(&self.ns).is_some_and(|info| {
            info.indexes.iter().any(|index| {
                index.unique
                    && !index.sparse
                    && index.key.len() == self.on.len()
                    && self.on.iter().all(|field| index.key.contains_key(field))
            })
        });
        if !covered {
            return Err(CommandError::new(
                51183,
                "Cannot find index to verify that join fields will be unique",
            ));
        }
        Ok(())
    }

    /// The equality filter on the `on` fields of `document`; each must be
    /// present and neither null, undefined nor an array.
    fn match_filter(&self, document: &Document) -> Result<Document, CommandError> {
        let mut filter = Document::new();
        for field in self.on {
            let path: Vec<String> = field.split('.').map(str::to_owned).collect();
            match slipstream_query::expr::lookup_path_in_document(document, &path) {
                Some(Bson::Null | Bson::Undefined | Bson::Array(_)) | None => {
                    return Err(CommandError::new(
                        51132,
                        format!(
                            "$merge write error: 'on' field '{field}' cannot be missing, null, undefined or an array"
                        ),
                    ))
                }
                Some(value) => filter.insert(field.clone(), value),
            };
        }
        Ok(filter)
    }

    /// The target document that `document` matches, if any.
    fn find_match(
        &self,
        engine: &Engine,
        reader: &slipstream_storage::Reader,
        document: &Document,
    ) -> Result<Option<Document>, CommandError> {
        if self.on_id() {
            let id = document.get("_id").expect("with_id gives an _id");
            return Ok(reader.get(&self.ns, id)?);
        }
        let filter_document = self.match_filter(document)?;
        let filter = Filter::parse(&filter_document)?;
        let info = engine.collection_info(&self.ns);
        let shape = QueryShape::filter_only(&filter_document, &filter);
        let plan = plan_query(info.as_ref(), &shape)?;
        Ok(collect_matches(reader, &self.ns, &plan, &filter, None, Some(1))?.pop())
    }

    fn write(&self, engine: &Engine, documents: Vec<Document>) -> Result<Option<OpTime>, CommandError> {
        self.check_unique_index(engine)?;
        let mut last = None;
        for document in documents {
            // With `on: _id` a result without `_id` gets one before the
            // lookup; otherwise only when it is inserted, and an update
            // keeps the target's `_id`.
            let document = if self.on_id() { with_id(document) } else { document };
            let mut writer = engine.writer();
            let existing = self.find_match(engine, &writer.reader(), &document)?;
            let write = match existing {
                None => match self.when_not_matched {
                    WhenNotMatched::Insert => {
                        check_inserted(&document)?;
                        Some(writer.insert(&self.ns, with_id(document))?)
                    }
                    WhenNotMatched::Discard => None,
                    WhenNotMatched::Fail => {
                        return Err(CommandError::new(
                            13113,
                            "$merge could not find a matching document in the target collection for at least one document in the source collection",
                        ))
                    }
                },
                Some(old) => self.update_match(&mut writer, old, document)?,
            };
            last = write.or(last);
        }
        Ok(last)
    }

    /// Applies `whenMatched` to the matched target document `old`.
    fn update_match(
        &self,
        writer: &mut slipstream_storage::Writer<'_>,
        old: Document,
        document: Document,
    ) -> Result<Option<OpTime>, CommandError> {
        let id = old.get("_id").cloned().unwrap_or(Bson::Null);
        let new = match self.when_matched {
            WhenMatched::KeepExisting => None,
            WhenMatched::Replace => {
                let mut replacement = doc! {"_id": id.clone()};
                replacement.extend(document);
                Some(replacement)
            }
            WhenMatched::Merge => {
                let mut merged = old.clone();
                for (key, value) in document {
                    merged.insert(key, value);
                }
                Some(merged)
            }
            WhenMatched::Fail => {
                let mut key_pattern = Document::new();
                let mut key_value = Document::new();
                for field in self.on {
                    key_pattern.insert(field.clone(), 1);
                    let path: Vec<String> = field.split('.').map(str::to_owned).collect();
                    let value = slipstream_query::expr::lookup_path_in_document(&old, &path).unwrap_or(Bson::Null);
                    key_value.insert(field.clone(), value);
                }
                let mut error = CommandError::new(
                    11000,
                    format!(
                        "E11000 duplicate key error collection: {} dup key: {key_value}",
                        self.ns
                    ),
                );
                error.extra.insert("keyPattern", key_pattern);
                error.extra.insert("keyValue", key_value);
                return Err(error);
            }
            WhenMatched::Pipeline(update) => {
                let now = bson::DateTime::now();
                let mut variables = Variables::empty().with_now(now);
                variables.bind("new", Bson::Document(document));
                let context = UpdateContext {
                    positional: None,
                    now,
                    is_upsert_insert: false,
                };
                Some(update.apply_with_variables(&old, &context, &variables)?.document)
            }
        };
        if let Some(new) = &new {
            // Before comparing it with `old` or diffing it for the oplog.
            check_updated(new)?;
        }
        match new {
            Some(new) if new != old => {
                if new.get("_id") != Some(&id) {
                    return Err(CommandError::new(
                        66,
                        "$merge failed to update the matching document, did you attempt to modify the _id or the shard key?",
                    ));
                }
                let oplog_form = oplog_update(&old, &new);
                Ok(Some(writer.update(&self.ns, &id, new, oplog_form)?))
            }
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_stages_must_be_last() {
        let mut stages = vec![doc! {"$out": "a"}, doc! {"$match": {}}];
        assert_eq!(OutputStage::split(&mut stages, "db").unwrap_err().code, 40601);
        let mut stages = vec![doc! {"$match": {}}, doc! {"$merge": {"into": {"db": "x", "coll": "y"}}}];
        let output = OutputStage::split(&mut stages, "db").unwrap().unwrap();
        assert_eq!(output.target_ns(), "x.y");
        assert_eq!(stages.len(), 1);
    }

    #[test]
    fn merge_options_are_checked() {
        let mut stages = vec![doc! {"$merge": {"into": "t", "on": ["a", "a"]}}];
        assert_eq!(OutputStage::split(&mut stages, "db").unwrap_err().code, 31465);
        let mut stages = vec![doc! {"$merge": {"into": "t", "on": []}}];
        assert_eq!(OutputStage::split(&mut stages, "db").unwrap_err().code, 51187);
        let mut stages = vec![doc! {"$merge": {"into": "t", "whenMatched": "bogus"}}];
        assert_eq!(OutputStage::split(&mut stages, "db").unwrap_err().code, 2);
        let mut stages = vec![doc! {"$out": "system.views"}];
        assert_eq!(OutputStage::split(&mut stages, "db").unwrap_err().code, 73);
    }
}
