//! Dotted field paths and MongoDB's rules for following them through
//! embedded documents and arrays.
//!
//! A query path such as `a.b.c` does not name one value: wherever it meets
//! an array it fans out over the array's elements, and a numeric component
//! names both an array position and a field of embedded documents. The
//! matcher, the sort-key generator and the planner all need the same list of
//! *candidate values* a path reaches, so the walk lives here once.
//!
//! The rules (MongoDB's `BSONElementIterator`, checked against
//! `jstests/core/null2.js`):
//! - In a document, a missing field yields one *missing* candidate; a scalar
//!   where the path continues also yields *missing* (`{a: 5}` has no `a.b`).
//! - In an array, each element that is a document is followed with the same
//!   remaining path; the element whose position equals the next component
//!   (when that component is a number) is followed by position instead.
//!   Other scalars and nested arrays yield nothing (`{a: [5]}` has no `a.b`,
//!   and an empty array yields nothing at all).
//! - At the end of the path, a value is a candidate; an array there is a
//!   candidate itself and, when the caller asks for it, so is each of its
//!   elements (one level only).

use bson::{Bson, Document};

/// A parsed dotted path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath {
    dotted: String,
    parts: Vec<String>,
}

impl FieldPath {
    /// Splits `a.b.c` into its components (`""` is one empty field name,
    /// which MongoDB allows in documents).
    pub fn new(dotted: &str) -> FieldPath {
        FieldPath {
            dotted: dotted.to_string(),
            parts: dotted.split('.').map(str::to_string).collect(),
        }
    }

    /// The path with no components: the value under test itself, as the
    /// operators inside `$elemMatch` on values see it.
    pub fn element() -> FieldPath {
        FieldPath {
            dotted: String::new(),
            parts: Vec::new(),
        }
    }

    pub fn dotted(&self) -> &str {
        &self.dotted
    }

    pub fn parts(&self) -> &[String] {
        &self.parts
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }
}

/// How the end of a path treats an array found there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafArrays {
    /// The array itself is the only candidate (`$size`, `$elemMatch`).
    Whole,
    /// The array and each of its elements are candidates (equality, ranges).
    WholeAndElements,
    /// Only the elements are candidates; an empty array yields `undefined`
    /// (sort keys and index keys).
    ElementsOnly,
}

/// One value a path reaches: `None` when the path is missing there.
/// `array_position` is the position in the outermost array the walk went
/// through, which the positional `$` operator needs.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    pub value: Option<&'a Bson>,
    pub array_position: Option<usize>,
}

/// Calls `visit` for each candidate the path reaches in `doc`, stopping as
/// soon as `visit` returns true; returns whether it stopped early.
pub fn any_candidate<'a>(
    doc: &'a Document,
    path: &FieldPath,
    leaf: LeafArrays,
    visit: &mut dyn FnMut(Candidate<'a>) -> bool,
) -> bool {
    if path.parts.is_empty() {
        // `FieldPath::element()` names the value itself; only `$elemMatch`
        // on values builds one, and it evaluates against values, not documents.
        return false;
    }
    let walker = Walker {
        parts: &path.parts,
        leaf,
        visit,
    };
    let mut walker = walker;
    walker.in_document(doc, 0, None)
}

/// Collects every candidate (convenience for callers that need them all).
pub fn candidates<'a>(doc: &'a Document, path: &FieldPath, leaf: LeafArrays) -> Vec<Candidate<'a>> {
    let mut out = Vec::new();
    any_candidate(doc, path, leaf, &mut |c| {
        out.push(c);
        false
    });
    out
}

struct Walker<'p, 'v, 'a> {
    parts: &'p [String],
    leaf: LeafArrays,
    visit: &'v mut dyn FnMut(Candidate<'a>) -> bool,
}

impl<'p, 'v, 'a> Walker<'p, 'v, 'a> {
    fn emit(&mut self, value: Option<&'a Bson>, array_position: Option<usize>) -> bool {
        (self.visit)(Candidate {
            value,
            array_position,
        })
    }

    /// `doc` is where component `index` is looked up.
    fn in_document(&mut self, doc: &'a Document, index: usize, position: Option<usize>) -> bool {
        match doc.get(&self.parts[index]) {
            None => self.emit(None, position),
            Some(value) => self.at_value(value, index, position),
        }
    }

    /// `value` is what components `0..=index` reached.
    fn at_value(&mut self, value: &'a Bson, index: usize, position: Option<usize>) -> bool {
        if index + 1 == self.parts.len() {
            return self.at_leaf(value, position);
        }
        match value {
            Bson::Document(doc) => self.in_document(doc, index + 1, position),
            Bson::Array(items) => self.in_array(items, index + 1, position),
            _ => self.emit(None, position),
        }
    }

    fn at_leaf(&mut self, value: &'a Bson, position: Option<usize>) -> bool {
        let items = match (value, self.leaf) {
            (Bson::Array(items), LeafArrays::WholeAndElements | LeafArrays::ElementsOnly) => items,
            _ => return self.emit(Some(value), position),
        };
        if self.leaf == LeafArrays::WholeAndElements && self.emit(Some(value), position) {
            return true;
        }
        if self.leaf == LeafArrays::ElementsOnly && items.is_empty() {
            return self.emit(Some(&UNDEFINED), position);
        }
        for (offset, item) in items.iter().enumerate() {
            if self.emit(Some(item), position.or(Some(offset))) {
                return true;
            }
        }
        false
    }

    /// Component `index` is applied to each element of `items`.
    fn in_array(&mut self, items: &'a [Bson], index: usize, position: Option<usize>) -> bool {
        let offset_target = array_offset(&self.parts[index]);
        for (offset, item) in items.iter().enumerate() {
            let here = position.or(Some(offset));
            let stop = if offset_target == Some(offset) {
                self.at_value(item, index, here)
            } else if let Bson::Document(doc) = item {
                self.in_document(doc, index, here)
            } else {
                false
            };
            if stop {
                return true;
            }
        }
        false
    }
}

static UNDEFINED: Bson = Bson::Undefined;

/// The array position a path component names, if it is a canonical
/// non-negative integer (`"0"`, `"12"`; not `"01"` or `"-1"`).
pub fn array_offset(component: &str) -> Option<usize> {
    if component.is_empty() || !component.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if component.len() > 1 && component.starts_with('0') {
        return None;
    }
    component.parse().ok()
}

/// The single value at a dotted path without fanning out over arrays
/// (numeric components index arrays), as `$set`/projection address fields.
pub fn get_exact<'a>(doc: &'a Document, dotted: &str) -> Option<&'a Bson> {
    let mut parts = dotted.split('.');
    let mut current = doc.get(parts.next()?)?;
    for part in parts {
        current = match current {
            Bson::Document(d) => d.get(part)?,
            Bson::Array(items) => items.get(array_offset(part)?)?,
            _ => return None,
        };
    }
    Some(current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn values(doc: &Document, path: &str, leaf: LeafArrays) -> Vec<Option<Bson>> {
        candidates(doc, &FieldPath::new(path), leaf)
            .into_iter()
            .map(|c| c.value.cloned())
            .collect()
    }

    #[test]
    fn missing_field_in_array_element_is_a_missing_candidate() {
        // jstests/core/null2.js: {a: [{}, {b: 5}]} matches {"a.b": null}.
        let d = doc! {"a": [{}, {"b": 5}]};
        assert_eq!(
            values(&d, "a.b", LeafArrays::Whole),
            vec![None, Some(Bson::Int32(5))]
        );
    }

    #[test]
    fn scalars_and_empty_arrays_yield_nothing() {
        // jstests/core/null2.js: {a: [5, {b: 5}]} and {a: []} do not match {"a.b": null}.
        assert_eq!(
            values(&doc! {"a": [5, {"b": 5}]}, "a.b", LeafArrays::Whole),
            vec![Some(Bson::Int32(5))]
        );
        assert!(values(&doc! {"a": []}, "a.b", LeafArrays::Whole).is_empty());
    }

    #[test]
    fn numeric_component_is_an_offset_and_a_field_name() {
        let d = doc! {"a": [{"0": 7}, {"0": 8}]};
        let got = values(&d, "a.0", LeafArrays::Whole);
        assert_eq!(
            got,
            vec![Some(Bson::Document(doc! {"0": 7})), Some(Bson::Int32(8))]
        );
    }

    #[test]
    fn leaf_arrays_expand_one_level() {
        let d = doc! {"a": [[1], 2]};
        let got = values(&d, "a", LeafArrays::WholeAndElements);
        assert_eq!(got.len(), 3);
        assert_eq!(
            values(&doc! {"a": []}, "a", LeafArrays::ElementsOnly),
            vec![Some(Bson::Undefined)]
        );
    }

    #[test]
    fn positions_are_those_of_the_outermost_array() {
        let d = doc! {"a": [{"b": [1, 2]}, {"b": [3, 4]}]};
        let got: Vec<_> = candidates(&d, &FieldPath::new("a.b"), LeafArrays::WholeAndElements)
            .into_iter()
            .map(|c| c.array_position)
            .collect();
        assert_eq!(
            got,
            vec![Some(0), Some(0), Some(0), Some(1), Some(1), Some(1)]
        );
    }
}
