//! The array operators' own work: `$push` with its modifiers and the
//! element test of `$pull`.

use std::cmp::Ordering;

use bson::{Bson, Document};

use super::spec::{PullCondition, PushSort, PushSpec, WRAPPER_FIELD};
use super::target::array_index;
use crate::collation::{compare_with, Collation};

/// `$push` with `$each`, `$position`, `$sort` and `$slice`, in MongoDB's
/// order: insert, then sort, then slice.
pub fn push(mut items: Vec<Bson>, spec: &PushSpec, collation: Option<&Collation>) -> Vec<Bson> {
    let len = items.len() as i64;
    let at = match spec.position {
        None => len,
        Some(p) if p >= 0 => p.min(len),
        Some(p) => (len + p).max(0),
    } as usize;
    items.splice(at..at, spec.each.iter().cloned());
    if let Some(sort) = &spec.sort {
        match sort {
            PushSort::Value { descending } => items.sort_by(|a, b| {
                let order = compare_with(collation, a, b);
                if *descending {
                    order.reverse()
                } else {
                    order
                }
            }),
            PushSort::Fields(fields) => items.sort_by(|a, b| {
                for (path, descending) in fields {
                    let order = compare_with(collation, &sort_key(a, path), &sort_key(b, path));
                    let order = if *descending { order.reverse() } else { order };
                    if order != Ordering::Equal {
                        return order;
                    }
                }
                Ordering::Equal
            }),
        }
    }
    if let Some(n) = spec.slice {
        if n >= 0 {
            items.truncate(n as usize);
        } else {
            let keep = n.unsigned_abs().min(items.len() as u64) as usize;
            items.drain(..items.len() - keep);
        }
    }
    items
}

/// The value an element sorts by for one `$sort` field: the value at the
/// dotted path, null when missing. As in MongoDB, a non-document element
/// has no fields (it sorts as null) and an array value compares whole.
fn sort_key(element: &Bson, path: &str) -> Bson {
    let mut current = element;
    for part in path.split('.') {
        let next = match current {
            Bson::Document(doc) => doc.get(part),
            Bson::Array(items) if !std::ptr::eq(current, element) => {
                array_index(part).and_then(|i| items.get(i))
            }
            _ => None,
        };
        match next {
            Some(value) => current = value,
            None => return Bson::Null,
        }
    }
    current.clone()
}

pub fn pull_matches(condition: &PullCondition, item: &Bson, collation: Option<&Collation>) -> bool {
    match condition {
        PullCondition::Equals(value) => compare_with(collation, item, value).is_eq(),
        PullCondition::Query(filter) => match item {
            Bson::Document(doc) => filter.matches(doc),
            _ => false,
        },
        PullCondition::Operators(filter) => {
            let mut wrapper = Document::new();
            wrapper.insert(WRAPPER_FIELD, item.clone());
            filter.matches(&wrapper)
        }
    }
}
