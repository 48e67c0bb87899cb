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

mod decode;
mod encode;
mod generate;
mod pattern;

pub use decode::decode_key;
pub use encode::{encode_value, prefix_end, record_key, type_range};
pub use generate::index_keys;
pub use pattern::{KeyField, KeyPattern, CANNOT_CREATE_INDEX};

/// The index keys of one document for one index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexKeys {
    /// Encoded keys, sorted and deduplicated.
    pub keys: Vec<Vec<u8>>,
    /// True when an array was expanded along an indexed path.
    pub multikey: bool,
}
