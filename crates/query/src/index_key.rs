//! Index key generation and the order-preserving key encoding.
//!
//! # The key encoding, byte by byte
//!
//! Storage keeps index entries and records in an ordered key-value engine
//! that compares keys with `memcmp`. Every BSON value is therefore encoded
//! so that the byte order of two encodings equals `compare::compare_values`
//! of the two values, values that compare equal (`1`, `1.0`,
//! `NumberLong(1)`) encode to the same bytes, and no encoding is a proper
//! prefix of another (encodings are *self-delimiting*). Because of the last
//! property, concatenating the encodings of the fields of a compound key
//! orders compound keys field by field.
//!
//! An encoding starts with one *type byte*, the value's canonical type rank
//! (`compare::canonical_type_rank`) plus 10, so that every type byte is at
//! least 9 and the byte 0x00 is free to terminate documents and arrays:
//!
//! | type                | type byte | body                                              |
//! |---------------------|-----------|---------------------------------------------------|
//! | MinKey              | 0x09      | none                                              |
//! | Undefined           | 0x0A      | none                                              |
//! | Null                | 0x0F      | none                                              |
//! | any number          | 0x14      | 8-byte order key of `f`, 2-byte tie-breaker `d`   |
//! | String, Symbol      | 0x19      | escaped string                                    |
//! | Document            | 0x1E      | elements, then 0x00                               |
//! | Array               | 0x23      | element values, then 0x00                         |
//! | Binary              | 0x28      | length u32 BE, subtype byte, the bytes            |
//! | ObjectId            | 0x2D      | the 12 bytes                                      |
//! | Boolean             | 0x32      | 0x00 false / 0x01 true                            |
//! | DateTime            | 0x37      | millis i64 BE with the sign bit flipped           |
//! | Timestamp           | 0x39      | time u32 BE, increment u32 BE                     |
//! | Regex               | 0x3C      | escaped pattern, escaped options                  |
//! | DbPointer           | 0x41      | escaped debug text (compare.rs orders it so)      |
//! | JavaScriptCode      | 0x46      | escaped code                                      |
//! | CodeWithScope       | 0x4B      | escaped code, then the scope as a Document body    |
//! | MaxKey              | 0x89      | none                                              |
//!
//! * **Escaped string**: the UTF-8 bytes with every 0x00 written as
//!   0x00 0xFF, followed by the terminator 0x00 0x00. A shorter string thus
//!   sorts before its extensions and the byte order is preserved.
//! * **Numbers** (Int32, Int64, Double, Decimal128 through its f64 value):
//!   the value `v` is written as the pair `(f, d)` where `f` is the largest
//!   f64 not above `v` and `d = v - f` (an exact integer below 2048, non-zero
//!   only for an Int64 that no f64 represents). `f` is written as its IEEE
//!   bits, big-endian, with all bits inverted when negative and only the
//!   sign bit flipped otherwise (so -0.0 is first normalised to 0.0); `d` as
//!   u16 big-endian. NaN is written as ten 0x00 bytes, below -Infinity
//!   (whose order key is 0x000F_FFFF_FFFF_FFFF), as MongoDB orders it. The
//!   pair orders exactly: if `f1 < f2` then `v1 < next_up(f1) <= f2 <= v2`.
//! * **Document elements**: the element value's type byte, the escaped field
//!   name, then the value's full encoding (type byte again, then body). This
//!   follows `compare_documents`: type rank, then name, then value. The
//!   terminator 0x00 sorts below every type byte, so a prefix document
//!   sorts first.
//! * **Array elements**: each element's full encoding; terminator 0x00.
//!
//! A **descending** field is the ascending encoding with every byte
//! inverted (`!b`). Since encodings are prefix-free, inversion exactly
//! reverses their order and keeps them self-delimiting.
//!
//! A **record key** (the `_id_` index and the record table) is the ascending
//! encoding of the `_id` value alone.

use bson::{Bson, Document};

use crate::compare::{as_number, canonical_type_rank, Number};
use crate::error::QueryError;

/// MongoDB error code CannotCreateIndex.
pub const CANNOT_CREATE_INDEX: i32 = 67;

/// Terminator of documents and arrays; below every type byte.
const END: u8 = 0x00;
/// Added to the canonical type rank (minimum -1) so type bytes are >= 9.
const TYPE_OFFSET: i32 = 10;
/// Number of bytes of a number's body: 8-byte order key, 2-byte tie-breaker.
const NUMBER_BODY_LEN: usize = 10;

fn type_byte(value: &Bson) -> u8 {
    let byte = canonical_type_rank(value) + TYPE_OFFSET;
    // Ranks are -1..=127, so the byte is 9..=137 and fits in u8.
    assert!((9..=255).contains(&byte), "type rank out of range");
    byte as u8
}

/// Appends the order-preserving encoding of one value: memcmp order of
/// encodings == compare_values order (reversed bytes-wise when
/// descending), values that compare equal (1, 1.0, NumberLong(1)) encode
/// identically, and encodings are self-delimiting so that concatenating
/// per-field encodings gives compound keys ordered field by field.
pub fn encode_value(out: &mut Vec<u8>, value: &Bson, descending: bool) {
    let start = out.len();
    encode_ascending(out, value);
    if descending {
        for byte in &mut out[start..] {
            *byte = !*byte;
        }
    }
}

/// Record key of a document: the encoding of its _id, ascending (the
/// `_id_` index and the record table share it).
pub fn record_key(id: &Bson) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    encode_value(&mut out, id, false);
    out
}

/// Smallest byte string greater than every string that starts with
/// `prefix`; None if none exists (all 0xFF).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last != 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The byte range `[start, end)` that holds the encoding of every value
/// of `value`'s canonical type (all numbers, all strings, ...) in one key
/// field, for type-bracketed range bounds (`{$gt: 5}` covers numbers
/// only). Append the result after the encoded prefix fields of a
/// compound key.
pub fn type_range(value: &Bson, descending: bool) -> (Vec<u8>, Vec<u8>) {
    let tag = type_byte(value);
    let first = if descending { !tag } else { tag };
    // Type bytes are 9..=137, so neither byte here can overflow.
    (vec![first], vec![first + 1])
}

fn encode_ascending(out: &mut Vec<u8>, value: &Bson) {
    out.push(type_byte(value));
    match value {
        Bson::MinKey | Bson::MaxKey | Bson::Null | Bson::Undefined => {}
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            // as_number is Some for exactly these four variants.
            let number = as_number(value).expect("numeric variant");
            encode_number(out, number);
        }
        Bson::String(s) | Bson::Symbol(s) => encode_str(out, s.as_bytes()),
        Bson::Document(doc) => encode_document_body(out, doc),
        Bson::Array(items) => {
            for item in items {
                encode_ascending(out, item);
            }
            out.push(END);
        }
        Bson::Binary(bin) => {
            // compare_values orders binaries by length, subtype, then bytes;
            // lengths are capped by the 16 MB document limit, so u32 is enough.
            let len = u32::try_from(bin.bytes.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.push(u8::from(bin.subtype));
            out.extend_from_slice(&bin.bytes);
        }
        Bson::ObjectId(oid) => out.extend_from_slice(&oid.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::DateTime(dt) => {
            let flipped = (dt.timestamp_millis() as u64) ^ (1u64 << 63);
            out.extend_from_slice(&flipped.to_be_bytes());
        }
        Bson::Timestamp(ts) => {
            out.extend_from_slice(&ts.time.to_be_bytes());
            out.extend_from_slice(&ts.increment.to_be_bytes());
        }
        Bson::RegularExpression(re) => {
            encode_str(out, re.pattern.as_str().as_bytes());
            encode_str(out, re.options.as_str().as_bytes());
        }
        Bson::DbPointer(p) => encode_str(out, format!("{p:?}").as_bytes()),
        Bson::JavaScriptCode(code) => encode_str(out, code.as_bytes()),
        Bson::JavaScriptCodeWithScope(cws) => {
            encode_str(out, cws.code.as_bytes());
            encode_document_body(out, &cws.scope);
        }
    }
}

fn encode_document_body(out: &mut Vec<u8>, doc: &Document) {
    for (name, value) in doc {
        out.push(type_byte(value));
        encode_str(out, name.as_bytes());
        encode_ascending(out, value);
    }
    out.push(END);
}

fn encode_str(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.push(0);
    out.push(0);
}

/// The order key of a non-NaN f64: bit pattern made memcmp-comparable.
fn float_order_key(f: f64) -> u64 {
    let f = if f == 0.0 { 0.0 } else { f };
    let bits = f.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits ^ (1u64 << 63)
    }
}

fn float_from_order_key(key: u64) -> f64 {
    if key >> 63 == 1 {
        f64::from_bits(key ^ (1u64 << 63))
    } else {
        f64::from_bits(!key)
    }
}

/// The largest f64 that is not above `x`, and the exact difference.
fn split_int(x: i64) -> (f64, u16) {
    let mut f = x as f64;
    if f as i128 > i128::from(x) {
        // Rounded up: step to the next float towards -infinity. f is not
        // zero here (0 is exact), so stepping the bits is well defined.
        f = if f > 0.0 {
            f64::from_bits(f.to_bits() - 1)
        } else {
            f64::from_bits(f.to_bits() + 1)
        };
    }
    let diff = i128::from(x) - f as i128;
    // Floats near 2^63 are 1024 apart, so the difference is below 2048.
    assert!((0..2048).contains(&diff), "tie-breaker out of range");
    (f, diff as u16)
}

fn encode_number(out: &mut Vec<u8>, number: Number) {
    let (f, d) = match number {
        Number::Int(x) => split_int(x),
        Number::Float(f) => {
            if f.is_nan() {
                out.extend_from_slice(&[0u8; NUMBER_BODY_LEN]);
                return;
            }
            (f, 0)
        }
    };
    out.extend_from_slice(&float_order_key(f).to_be_bytes());
    out.extend_from_slice(&d.to_be_bytes());
}

/// A key pattern field: the dotted path and its direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyField {
    pub path: String,
    pub descending: bool,
}

/// The parsed key pattern of an index, e.g. `{a: 1, "b.c": -1}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    pub fields: Vec<KeyField>,
}

impl KeyPattern {
    /// Parses an index key pattern. Only ascending/descending btree fields
    /// are supported; special index types answer CannotCreateIndex (67)
    /// naming the type, never a silently wrong index.
    pub fn parse(key: &Document) -> Result<KeyPattern, QueryError> {
        if key.is_empty() {
            return Err(QueryError::new(CANNOT_CREATE_INDEX, "Index keys cannot be empty."));
        }
        let mut fields = Vec::with_capacity(key.len());
        for (path, value) in key {
            if path.is_empty() || path.split('.').any(str::is_empty) {
                return Err(QueryError::new(
                    CANNOT_CREATE_INDEX,
                    format!("Index key contains an illegal field name: '{path}'"),
                ));
            }
            if path == "$**" || path.ends_with(".$**") {
                return Err(QueryError::new(
                    CANNOT_CREATE_INDEX,
                    format!("wildcard indexes are not supported (key '{path}')"),
                ));
            }
            if path.starts_with('$') {
                return Err(QueryError::new(
                    CANNOT_CREATE_INDEX,
                    format!("Index key contains an illegal field name: field name starts with '$': '{path}'"),
                ));
            }
            let descending = match value {
                Bson::String(kind) => {
                    let known = ["text", "2dsphere", "2d", "hashed", "geoHaystack", "columnstore"];
                    let message = if known.contains(&kind.as_str()) {
                        format!("'{kind}' indexes are not supported (key '{path}')")
                    } else {
                        format!("Unknown index plugin '{kind}'")
                    };
                    return Err(QueryError::new(CANNOT_CREATE_INDEX, message));
                }
                other => match as_number(other) {
                    Some(n) => {
                        let sign = match n {
                            Number::Int(i) => i.signum() as f64,
                            Number::Float(f) if f.is_nan() => 0.0,
                            Number::Float(f) => f,
                        };
                        if sign == 0.0 {
                            return Err(QueryError::new(
                                CANNOT_CREATE_INDEX,
                                format!("Values in v:2 index key pattern cannot be of value 0 (key '{path}')"),
                            ));
                        }
                        sign < 0.0
                    }
                    None => {
                        return Err(QueryError::new(
                            CANNOT_CREATE_INDEX,
                            format!(
                                "Values in v:2 index key pattern cannot be of type {} (key '{path}')",
                                type_name(other)
                            ),
                        ))
                    }
                },
            };
            fields.push(KeyField { path: path.clone(), descending });
        }
        Ok(KeyPattern { fields })
    }
}

fn type_name(value: &Bson) -> &'static str {
    match value {
        Bson::Boolean(_) => "bool",
        Bson::Null => "null",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::ObjectId(_) => "objectId",
        Bson::DateTime(_) => "date",
        _ => "non-numeric",
    }
}

/// The index keys of one document for one index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexKeys {
    /// Encoded keys, sorted and deduplicated.
    pub keys: Vec<Vec<u8>>,
    /// True when an array was expanded along an indexed path.
    pub multikey: bool,
}

/// A value the key generator points at for missing fields.
static NULL_VALUE: Bson = Bson::Null;
/// The key value of an empty array.
static UNDEFINED_VALUE: Bson = Bson::Undefined;

/// A container a remaining path is looked up in: a document, an array
/// addressed by decimal positions, or nothing (a non-document element).
#[derive(Clone, Copy)]
enum Container<'a> {
    Doc(&'a Document),
    Arr(&'a [Bson]),
    Empty,
}

fn field_of<'a>(container: Container<'a>, name: &str) -> Option<&'a Bson> {
    match container {
        Container::Doc(doc) => doc.get(name),
        Container::Arr(items) => positional(name).and_then(|i| items.get(i)),
        Container::Empty => None,
    }
}

/// Follows `path` through documents and stops at the first array (or at
/// the end): returns the element found, the path left after it, and the
/// element's field name. A scalar in the middle of the path finds nothing.
fn element_or_array<'a>(container: Container<'a>, path: &str) -> (Option<&'a Bson>, String, String) {
    let (first, rest) = path.split_once('.').unwrap_or((path, ""));
    let Some(found) = field_of(container, first) else {
        return (None, String::new(), first.to_string());
    };
    match found {
        Bson::Array(_) => (Some(found), rest.to_string(), first.to_string()),
        _ if rest.is_empty() => (Some(found), String::new(), first.to_string()),
        Bson::Document(doc) => element_or_array(Container::Doc(doc), rest),
        _ => (None, String::new(), first.to_string()),
    }
}

fn positional(part: &str) -> Option<usize> {
    // An array's field names are "0", "1", ...: only that spelling
    // addresses an element.
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if part.len() > 1 && part.starts_with('0') {
        return None;
    }
    part.parse().ok()
}

/// A key pattern field's path continued through one particular element
/// of the array being expanded (`a.1.b` indexes element 1 of `a`).
#[derive(Clone, Default)]
struct PositionalPath<'a> {
    indexed: Option<&'a Bson>,
    found: Option<&'a Bson>,
    remaining: String,
    name: String,
}

/// MongoDB's btree key generator: all indexed paths advance together
/// through the document; at most one array is expanded per level (two
/// different arrays are "parallel arrays"), and the keys of one element
/// of that array are generated together, so compound keys over paths
/// through one array stay correlated per element.
struct KeyGenerator<'a> {
    sparse: bool,
    width: usize,
    keys: Vec<Vec<&'a Bson>>,
    multikey: bool,
}

impl<'a> KeyGenerator<'a> {
    fn expand(
        &mut self,
        mut paths: Vec<String>,
        mut fixed: Vec<&'a Bson>,
        container: Container<'a>,
        mut not_found: usize,
        positional: &[PositionalPath<'a>],
    ) -> Result<(), QueryError> {
        let mut array: Option<(&'a Bson, String)> = None;
        let mut array_fields: Vec<usize> = Vec::new();
        let mut expand_unembedded = true;
        for i in 0..self.width {
            if paths[i].is_empty() {
                continue;
            }
            let first = paths[i].split('.').next().unwrap_or("").to_string();
            let in_container = field_of(container, &first).is_some();
            let position = &positional[i];
            if in_container && position.indexed.is_some() {
                return Err(QueryError::new(
                    16746,
                    format!(
                        "Ambiguous field name found in array (do not use numeric field names in embedded elements in an array), field: '{first}'"
                    ),
                ));
            }
            let (found, remaining, name) = if in_container {
                element_or_array(container, &paths[i])
            } else if let Some(indexed) = position.indexed {
                if let Bson::Array(_) = indexed {
                    expand_unembedded = false;
                }
                (position.found, position.remaining.clone(), position.name.clone())
            } else {
                (None, String::new(), first)
            };
            match found {
                None => {
                    fixed[i] = &NULL_VALUE;
                    paths[i] = String::new();
                    not_found += 1;
                }
                Some(value @ Bson::Array(_)) => {
                    paths[i] = remaining;
                    array_fields.push(i);
                    match &array {
                        None => array = Some((value, name)),
                        Some((existing, existing_name)) => {
                            if !std::ptr::eq(*existing, value) {
                                return Err(QueryError::new(
                                    crate::error::codes::CANNOT_INDEX_PARALLEL_ARRAYS,
                                    format!("cannot index parallel arrays [{name}] [{existing_name}]"),
                                ));
                            }
                        }
                    }
                }
                Some(value) => {
                    fixed[i] = value;
                    paths[i] = String::new();
                }
            }
        }
        let Some((array, _)) = array else {
            if !(self.sparse && not_found == self.width) {
                self.keys.push(fixed);
            }
            return Ok(());
        };
        let Bson::Array(items) = array else { unreachable!("only arrays are recorded") };
        let no_positional = vec![PositionalPath::default(); self.width];
        if items.is_empty() {
            // An empty array indexes as undefined where it ends a path and
            // as a missing field (null) where a path continues below it.
            if expand_unembedded {
                self.multikey = true;
            }
            return self.element(&paths, &fixed, &UNDEFINED_VALUE, not_found, array, &array_fields, true, &no_positional);
        }
        let mut below = no_positional.clone();
        for i in 0..self.width {
            let through_array = array_fields.contains(&i);
            if paths[i].is_empty() {
                if through_array && expand_unembedded {
                    self.multikey = true;
                }
                continue;
            }
            let part = paths[i].split('.').next().unwrap_or("");
            below[i].indexed = field_of(Container::Arr(items), part);
            if below[i].indexed.is_none() {
                self.multikey = true;
                continue;
            }
            let (found, remaining, name) = element_or_array(Container::Arr(items), &paths[i]);
            below[i].found = found;
            below[i].remaining = remaining;
            below[i].name = name;
        }
        for item in items {
            self.element(&paths, &fixed, item, not_found, array, &array_fields, expand_unembedded, &below)?;
        }
        Ok(())
    }

    /// Generates the keys of one element of the expanded array.
    #[allow(clippy::too_many_arguments)]
    fn element(
        &mut self,
        paths: &[String],
        fixed: &[&'a Bson],
        item: &'a Bson,
        not_found: usize,
        array: &'a Bson,
        array_fields: &[usize],
        expand_unembedded: bool,
        positional: &[PositionalPath<'a>],
    ) -> Result<(), QueryError> {
        let mut fixed = fixed.to_vec();
        for &i in array_fields {
            if paths[i].is_empty() {
                fixed[i] = if expand_unembedded { item } else { array };
            }
        }
        let container = match item {
            Bson::Document(doc) => Container::Doc(doc),
            _ => Container::Empty,
        };
        self.expand(paths.to_vec(), fixed, container, not_found, positional)
    }
}

/// Keys of one document for one index, MongoDB semantics: missing field
/// -> null; sparse index: no keys when every indexed field is missing;
/// arrays: one key per element (multikey), empty array -> undefined;
/// arrays at two indexed paths of one document -> error 171 "cannot index
/// parallel arrays [a] [b]"; dotted paths through arrays.
pub fn index_keys(doc: &Document, pattern: &KeyPattern, sparse: bool) -> Result<IndexKeys, QueryError> {
    let width = pattern.fields.len();
    let mut generator = KeyGenerator { sparse, width, keys: Vec::new(), multikey: false };
    let paths: Vec<String> = pattern.fields.iter().map(|f| f.path.clone()).collect();
    let fixed = vec![&NULL_VALUE; width];
    let positional = vec![PositionalPath::default(); width];
    generator.expand(paths, fixed, Container::Doc(doc), 0, &positional)?;
    if generator.keys.is_empty() && !sparse {
        generator.keys.push(vec![&NULL_VALUE; width]);
    }
    let mut keys: Vec<Vec<u8>> = generator
        .keys
        .iter()
        .map(|values| {
            let mut key = Vec::new();
            for (value, field) in values.iter().zip(&pattern.fields) {
                encode_value(&mut key, value, field.descending);
            }
            key
        })
        .collect();
    keys.sort();
    keys.dedup();
    let multikey = generator.multikey || keys.len() > 1;
    Ok(IndexKeys { keys, multikey })
}

/// Decodes a key back to {field: value} for error messages (DuplicateKey
/// keyValue) and explain; numeric types may come back normalised.
pub fn decode_key(key: &[u8], pattern: &KeyPattern) -> Result<Document, QueryError> {
    let mut out = Document::new();
    let mut reader = Reader { bytes: key, pos: 0, invert: false };
    for field in &pattern.fields {
        reader.invert = field.descending;
        let value = reader.value()?;
        out.insert(field.path.clone(), value);
    }
    if reader.pos != key.len() {
        return Err(corrupt("trailing bytes after the last key field"));
    }
    Ok(out)
}

fn corrupt(what: &str) -> QueryError {
    QueryError::new(crate::error::codes::BAD_VALUE, format!("malformed index key: {what}"))
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    invert: bool,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, QueryError> {
        let b = *self.bytes.get(self.pos).ok_or_else(|| corrupt("truncated"))?;
        self.pos += 1;
        Ok(if self.invert { !b } else { b })
    }

    fn peek(&self) -> Result<u8, QueryError> {
        let b = *self.bytes.get(self.pos).ok_or_else(|| corrupt("truncated"))?;
        Ok(if self.invert { !b } else { b })
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], QueryError> {
        let mut buf = [0u8; N];
        for slot in &mut buf {
            *slot = self.byte()?;
        }
        Ok(buf)
    }

    fn escaped(&mut self) -> Result<Vec<u8>, QueryError> {
        let mut bytes = Vec::new();
        loop {
            let b = self.byte()?;
            if b != 0 {
                bytes.push(b);
                continue;
            }
            match self.byte()? {
                0 => return Ok(bytes),
                0xFF => bytes.push(0),
                _ => return Err(corrupt("bad string escape")),
            }
        }
    }

    fn string(&mut self) -> Result<String, QueryError> {
        String::from_utf8(self.escaped()?).map_err(|_| corrupt("string is not UTF-8"))
    }

    fn document_body(&mut self) -> Result<Document, QueryError> {
        let mut doc = Document::new();
        loop {
            if self.byte()? == END {
                return Ok(doc);
            }
            let name = self.string()?;
            let value = self.value()?;
            doc.insert(name, value);
        }
    }

    fn value(&mut self) -> Result<Bson, QueryError> {
        let tag = i32::from(self.byte()?) - TYPE_OFFSET;
        Ok(match tag {
            -1 => Bson::MinKey,
            0 => Bson::Undefined,
            5 => Bson::Null,
            10 => {
                let key = u64::from_be_bytes(self.take::<8>()?);
                let diff = u16::from_be_bytes(self.take::<2>()?);
                if key == 0 && diff == 0 {
                    Bson::Double(f64::NAN)
                } else {
                    number_from_parts(float_from_order_key(key), diff)
                }
            }
            15 => Bson::String(self.string()?),
            20 => Bson::Document(self.document_body()?),
            25 => {
                let mut items = Vec::new();
                while self.peek()? != END {
                    items.push(self.value()?);
                }
                self.byte()?;
                Bson::Array(items)
            }
            30 => {
                let len = u32::from_be_bytes(self.take::<4>()?) as usize;
                let subtype = self.byte()?;
                if self.bytes.len() - self.pos < len {
                    return Err(corrupt("truncated binary"));
                }
                let mut bytes = Vec::with_capacity(len);
                for _ in 0..len {
                    bytes.push(self.byte()?);
                }
                Bson::Binary(bson::Binary { subtype: subtype.into(), bytes })
            }
            35 => Bson::ObjectId(bson::oid::ObjectId::from_bytes(self.take::<12>()?)),
            40 => Bson::Boolean(self.byte()? != 0),
            45 => {
                let raw = u64::from_be_bytes(self.take::<8>()?) ^ (1u64 << 63);
                Bson::DateTime(bson::DateTime::from_millis(raw as i64))
            }
            47 => {
                let time = u32::from_be_bytes(self.take::<4>()?);
                let increment = u32::from_be_bytes(self.take::<4>()?);
                Bson::Timestamp(bson::Timestamp { time, increment })
            }
            50 => {
                let pattern = self.string()?;
                let options = self.string()?;
                let pattern = pattern.try_into().map_err(|_| corrupt("regex pattern"))?;
                let options = options.try_into().map_err(|_| corrupt("regex options"))?;
                Bson::RegularExpression(bson::Regex { pattern, options })
            }
            // The pointer's parts are private in the bson crate; its text is
            // enough for error messages and explain.
            55 => Bson::String(self.string()?),
            60 => Bson::JavaScriptCode(self.string()?),
            65 => {
                let code = self.string()?;
                let scope = self.document_body()?;
                Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code, scope })
            }
            127 => Bson::MaxKey,
            _ => return Err(corrupt("unknown type byte")),
        })
    }
}

/// Rebuilds a number from its order key float and tie-breaker, choosing
/// the narrowest integer type that holds an integral value.
fn number_from_parts(f: f64, diff: u16) -> Bson {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if diff != 0 || (f.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&f)) {
        let whole = f as i128 + i128::from(diff);
        if let Ok(small) = i32::try_from(whole) {
            return Bson::Int32(small);
        }
        if let Ok(big) = i64::try_from(whole) {
            return Bson::Int64(big);
        }
    }
    Bson::Double(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn enc(v: &Bson) -> Vec<u8> {
        record_key(v)
    }

    #[test]
    fn equal_numbers_share_an_encoding() {
        assert_eq!(enc(&Bson::Int32(1)), enc(&Bson::Double(1.0)));
        assert_eq!(enc(&Bson::Int64(1)), enc(&Bson::Double(1.0)));
        assert_eq!(enc(&Bson::Double(-0.0)), enc(&Bson::Int32(0)));
    }

    #[test]
    fn large_int64_orders_against_doubles() {
        let big = (1i64 << 53) + 1;
        assert!(enc(&Bson::Int64(big)) > enc(&Bson::Double((1i64 << 53) as f64)));
        assert!(enc(&Bson::Int64(big)) < enc(&Bson::Double(((1i64 << 53) + 2) as f64)));
        assert!(enc(&Bson::Int64(i64::MAX)) < enc(&Bson::Double(9.3e18)));
        assert!(enc(&Bson::Int64(i64::MIN)) > enc(&Bson::Double(f64::NEG_INFINITY)));
        assert!(enc(&Bson::Double(f64::NAN)) < enc(&Bson::Double(f64::NEG_INFINITY)));
    }

    #[test]
    fn type_range_holds_exactly_one_type() {
        for descending in [false, true] {
            let (start, end) = type_range(&Bson::Int32(0), descending);
            let mut inside = Vec::new();
            for v in [Bson::Double(f64::NAN), Bson::Double(f64::INFINITY), Bson::Int64(i64::MIN)] {
                encode_value(&mut inside, &v, descending);
                assert!(start <= inside && inside < end);
                inside.clear();
            }
            for v in [Bson::Null, Bson::String(String::new()), Bson::MinKey, Bson::MaxKey] {
                encode_value(&mut inside, &v, descending);
                assert!(inside < start || inside >= end, "{v:?}");
                inside.clear();
            }
        }
    }

    #[test]
    fn prefix_end_increments_last_non_ff_byte() {
        assert_eq!(prefix_end(&[1, 2, 0xFF]), Some(vec![1, 3]));
        assert_eq!(prefix_end(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_end(&[]), None);
    }

    #[test]
    fn decode_round_trips() {
        let pattern = KeyPattern::parse(&doc! {"a": 1, "b": -1}).unwrap();
        let keys = index_keys(&doc! {"a": "x\u{0}y", "b": {"c": [1, 2.5]}}, &pattern, false).unwrap();
        let decoded = decode_key(&keys.keys[0], &pattern).unwrap();
        assert_eq!(decoded, doc! {"a": "x\u{0}y", "b": {"c": [1, 2.5]}});
    }
}
