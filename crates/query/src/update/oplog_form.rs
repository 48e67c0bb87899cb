//! The idempotent oplog form of an update (seed 000 4.2): the `$set` of
//! computed values and the `$unset` of removed fields, never `$inc` or
//! `$push`, so that replaying an entry any number of times gives the same
//! document. Unsets apply before sets, so a form may unset and set one
//! path (to keep the order of fields it adds). When a diff cannot reproduce the new document exactly (field
//! order included), the form is the whole new document.

use bson::{Bson, Document};

use super::same_bytes;
use super::same_document;
use super::target::array_index;
use crate::error::{codes, QueryError};

/// The idempotent oplog form of an update from `old` to `new`.
pub fn oplog_update(old: &Document, new: &Document) -> Document {
    let mut sets = Document::new();
    let mut unsets = Document::new();
    if !diff_level(old, new, "", &mut sets, &mut unsets) {
        return new.clone();
    }
    let mut form = Document::new();
    if !unsets.is_empty() {
        form.insert("$unset", unsets);
    }
    if !sets.is_empty() || form.is_empty() {
        form.insert("$set", sets);
    }
    // The diff is checked by applying it: a form that would not reproduce
    // `new` exactly is never logged.
    match apply_oplog_update(old, &form) {
        Ok(replayed) if same_document(&replayed, new) => form,
        _ => new.clone(),
    }
}

/// A field name a dotted `$set`/`$unset` path can address.
fn addressable(name: &str) -> bool {
    !name.is_empty() && !name.contains('.') && !name.starts_with('$')
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Diffs one document level; false when `$set` (which keeps existing
/// fields in place and appends new ones) cannot produce `new`'s order.
fn diff_level(
    old: &Document,
    new: &Document,
    prefix: &str,
    sets: &mut Document,
    unsets: &mut Document,
) -> bool {
    let survivors = old.keys().filter(|k| new.contains_key(k.as_str()));
    let added = new.keys().filter(|k| !old.contains_key(k.as_str()));
    if !survivors.chain(added).eq(new.keys()) {
        return false;
    }
    let mut level_sets = Document::new();
    let mut level_unsets = Document::new();
    for (key, value) in new {
        if !addressable(key) {
            return false;
        }
        let path = join(prefix, key);
        match old.get(key) {
            Some(previous) if same_bytes(previous, value) => {}
            Some(Bson::Document(previous)) => match value {
                Bson::Document(next) => {
                    let mut inner_sets = Document::new();
                    let mut inner_unsets = Document::new();
                    if diff_level(previous, next, &path, &mut inner_sets, &mut inner_unsets) {
                        level_sets.extend(inner_sets);
                        level_unsets.extend(inner_unsets);
                    } else {
                        level_sets.insert(path, value.clone());
                    }
                }
                _ => {
                    level_sets.insert(path, value.clone());
                }
            },
            _ => {
                level_sets.insert(path, value.clone());
            }
        }
    }
    for key in old.keys() {
        if !new.contains_key(key.as_str()) {
            if !addressable(key) {
                return false;
            }
            level_unsets.insert(join(prefix, key), true);
        }
    }
    // Fields this level gains are appended, in the `$set`'s order. Replayed
    // over a later state that already holds some of them, a plain `$set`
    // would leave those in place and append only the missing ones, so the
    // order would differ (`{$set: {a, b}}` over `{b}` gives `{b, a}`).
    // Unsetting every added field first (a no-op on the original state)
    // re-appends them at the end, as the original application did, so the
    // last entry that added a field decides its place on replay too.
    for key in new.keys().filter(|k| !old.contains_key(k.as_str())) {
        level_unsets.insert(join(prefix, key), true);
    }
    sets.extend(level_sets);
    unsets.extend(level_unsets);
    true
}

/// Applies an oplog update form: `{$set, $unset}` (unsets first, then sets
/// in the order listed) or a whole replacement document. A `$set` path
/// that runs into a scalar is skipped, so that replaying a run of entries
/// over a state some of them already produced ends in the same state.
pub fn apply_oplog_update(doc: &Document, form: &Document) -> Result<Document, QueryError> {
    let is_operators = form.keys().next().is_some_and(|k| k.starts_with('$'));
    if !is_operators {
        return Ok(form.clone());
    }
    for key in form.keys() {
        if key != "$set" && key != "$unset" {
            return Err(QueryError::failed_to_parse(format!(
                "Unknown oplog update operator: {key}"
            )));
        }
    }
    let mut result = doc.clone();
    if let Some(unsets) = form.get("$unset") {
        let Bson::Document(unsets) = unsets else {
            return Err(QueryError::failed_to_parse(
                "$unset in an oplog update must be a document",
            ));
        };
        for path in unsets.keys() {
            unset_path(&mut result, path);
        }
    }
    if let Some(sets) = form.get("$set") {
        let Bson::Document(sets) = sets else {
            return Err(QueryError::failed_to_parse(
                "$set in an oplog update must be a document",
            ));
        };
        for (path, value) in sets {
            match set_path(&mut result, path, value.clone()) {
                Ok(()) => {}
                // Replaying an older entry over a newer state may meet a
                // scalar where the entry set a subfield; a later entry
                // rewrites that field, so the path is skipped, as MongoDB's
                // oplog application skips it, and the other paths apply.
                Err(e) if e.code == codes::PATH_NOT_VIABLE => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(result)
}

fn set_path(root: &mut Document, path: &str, value: Bson) -> Result<(), QueryError> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut node = Bson::Document(std::mem::take(root));
    let result = set_in(&mut node, &parts, value, path);
    if let Bson::Document(doc) = node {
        *root = doc;
    }
    result
}

fn set_in(node: &mut Bson, parts: &[&str], value: Bson, path: &str) -> Result<(), QueryError> {
    let (first, rest) = parts.split_first().expect("paths have at least one part");
    let not_viable = || {
        QueryError::new(
            codes::PATH_NOT_VIABLE,
            format!("Cannot apply oplog $set of '{path}'"),
        )
    };
    let slot: &mut Bson = match node {
        Bson::Document(doc) => {
            if rest.is_empty() {
                doc.insert(*first, value);
                return Ok(());
            }
            if !doc.contains_key(*first) {
                doc.insert(*first, Document::new());
            }
            doc.get_mut(*first).expect("inserted above")
        }
        Bson::Array(items) => {
            let index = array_index(first).ok_or_else(not_viable)?;
            if index >= items.len() {
                items.resize(index + 1, Bson::Null);
                if !rest.is_empty() {
                    items[index] = Bson::Document(Document::new());
                }
            }
            if rest.is_empty() {
                items[index] = value;
                return Ok(());
            }
            &mut items[index]
        }
        _ => return Err(not_viable()),
    };
    set_in(slot, rest, value, path)
}

fn unset_path(root: &mut Document, path: &str) {
    let parts: Vec<&str> = path.split('.').collect();
    let mut node = Bson::Document(std::mem::take(root));
    unset_in(&mut node, &parts);
    if let Bson::Document(doc) = node {
        *root = doc;
    }
}

/// Removes the field at `parts`; a missing path is a no-op and an array
/// element becomes null, as `$unset` does.
fn unset_in(node: &mut Bson, parts: &[&str]) {
    let (first, rest) = parts.split_first().expect("paths have at least one part");
    if rest.is_empty() {
        match node {
            Bson::Document(doc) => {
                doc.remove(*first);
            }
            Bson::Array(items) => {
                if let Some(slot) = array_index(first).and_then(|i| items.get_mut(i)) {
                    *slot = Bson::Null;
                }
            }
            _ => {}
        }
        return;
    }
    let child = match node {
        Bson::Document(doc) => doc.get_mut(*first),
        Bson::Array(items) => array_index(first).and_then(|i| items.get_mut(i)),
        _ => None,
    };
    if let Some(child) = child {
        unset_in(child, rest);
    }
}
