//! The raw-bytes nesting check (issue 6): its depth agrees with a naive
//! recursive count on every document the `bson` crate can build, hostile
//! depths are refused without recursion, malformed bytes never make it
//! panic or read outside the slice, and every document a message carries
//! goes through it before decoding.

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document, JavaScriptCodeWithScope};
use proptest::prelude::*;
use slipstream_wire::*;

/// The deliberately naive reference: recursion over the decoded value,
/// counted as MongoDB counts (a code-with-scope value is two levels).
fn naive_depth(document: &Document) -> usize {
    document.values().map(value_depth).max().unwrap_or(0)
}

fn value_depth(value: &Bson) -> usize {
    match value {
        Bson::Document(inner) => 1 + naive_depth(inner),
        Bson::Array(items) => 1 + items.iter().map(value_depth).max().unwrap_or(0),
        Bson::JavaScriptCodeWithScope(code) => 2 + naive_depth(&code.scope),
        _ => 0,
    }
}

/// A document whose innermost value sits `depth` levels below the top,
/// `{a: {a: ... {a: 1}}}` or with arrays `{a: [[...[1]]]}`, encoded in one
/// pass without recursion so that depths far past any stack's reach can be
/// built: each level is a length, a type byte, a one-byte key and its NUL
/// in front, and a terminating zero behind.
fn nested_bytes(depth: usize, arrays: bool) -> Vec<u8> {
    const INNERMOST_BYTES: usize = 12; // {k: int32}
    const LEVEL_BYTES: usize = 8;
    let (open_type, key) = if arrays { (0x04u8, b'0') } else { (0x03u8, b'a') };
    let mut out = Vec::with_capacity(INNERMOST_BYTES + LEVEL_BYTES * depth);
    for level in (1..=depth).rev() {
        let size = INNERMOST_BYTES + LEVEL_BYTES * level;
        out.extend_from_slice(&(size as i32).to_le_bytes());
        // The top level always names its field `a`.
        out.extend_from_slice(&[open_type, if level == depth { b'a' } else { key }, 0]);
    }
    out.extend_from_slice(&(INNERMOST_BYTES as i32).to_le_bytes());
    out.extend_from_slice(&[0x10, if depth == 0 { b'a' } else { key }, 0, 1, 0, 0, 0, 0]);
    out.resize(out.len() + depth, 0);
    out
}

fn element(element_type: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![element_type];
    out.extend_from_slice(key);
    out.push(0);
    out.extend_from_slice(value);
    out
}

fn wrap(elements: &[u8]) -> Vec<u8> {
    let mut out = ((elements.len() + 5) as i32).to_le_bytes().to_vec();
    out.extend_from_slice(elements);
    out.push(0);
    out
}

/// `{a: {a: ... {a: 1}}}` with the 1 at `depth`, built by the bson crate.
fn nested_document(depth: usize) -> Document {
    nested_document_with_key(depth, "a")
}

fn nested_document_with_key(depth: usize, key: &str) -> Document {
    let mut value = Bson::Int32(1);
    for _ in 0..=depth {
        value = Bson::Document(doc! {key: value});
    }
    let Bson::Document(document) = value else { unreachable!("wrapped at least once") };
    document
}

#[test]
fn the_builders_agree_with_the_bson_crate() {
    for depth in [0, 1, 2, 7] {
        let bytes = nested_bytes(depth, false);
        let decoded = Document::from_reader(&bytes[..]).unwrap();
        assert_eq!(naive_depth(&decoded), depth);
        assert_eq!(bytes, nested_document(depth).to_vec().unwrap());
        let arrays = Document::from_reader(&nested_bytes(depth, true)[..]).unwrap();
        assert_eq!(naive_depth(&arrays), depth);
    }
}

#[test]
fn depth_200_passes_and_201_is_overflow() {
    for arrays in [false, true] {
        assert_eq!(check_nesting_depth(&nested_bytes(MAX_BSON_DEPTH, arrays), MAX_BSON_DEPTH), Ok(()));
        let too_deep = check_nesting_depth(&nested_bytes(MAX_BSON_DEPTH + 1, arrays), MAX_BSON_DEPTH);
        let Err(WireError::NestingTooDeep(path)) = too_deep else { panic!("{too_deep:?}") };
        // The path names every level down to the element that went past.
        assert_eq!(path.split('.').count(), MAX_BSON_DEPTH + 1);
        assert!(path.starts_with(if arrays { "a.0.0" } else { "a.a.a" }), "{path}");
    }
    let error = WireError::NestingTooDeep("a.a".into());
    assert_eq!((error.code(), error.code_name()), (15, "Overflow"));
    assert!(error
        .to_string()
        .starts_with("BSONObj exceeds maximum nested object depth in element with field name 'a.a'"));
}

#[test]
fn hostile_depths_are_refused_without_recursion() {
    // A million levels: any recursive walk would overflow the test
    // thread's stack long before the end.
    let bytes = nested_bytes(1_000_000, false);
    let Err(WireError::NestingTooDeep(path)) = check_nesting_depth(&bytes, MAX_BSON_DEPTH) else { panic!() };
    assert_eq!(path.split('.').count(), MAX_BSON_DEPTH + 1);
}

#[test]
fn the_quoted_path_is_bounded() {
    let bytes = nested_document_with_key(MAX_BSON_DEPTH + 1, &"k".repeat(100)).to_vec().unwrap();
    let Err(WireError::NestingTooDeep(path)) = check_nesting_depth(&bytes, MAX_BSON_DEPTH) else { panic!() };
    assert!(path.len() <= 1024 + 3, "{} bytes", path.len());
    assert!(path.ends_with("..."));
}

#[test]
fn code_with_scope_counts_two_levels() {
    let code = |scope: Document| Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code: "f()".into(), scope });
    let document = doc! {"c": code(nested_document(3))};
    let bytes = document.to_vec().unwrap();
    assert_eq!(naive_depth(&document), 5);
    assert_eq!(check_nesting_depth(&bytes, 5), Ok(()));
    assert!(matches!(check_nesting_depth(&bytes, 4), Err(WireError::NestingTooDeep(_))));
}

#[test]
fn malformed_lengths_are_invalid_not_panics() {
    let good = doc! {"a": {"b": [1, "x", {"c": true}]}, "d": 2.5}.to_vec().unwrap();
    assert_eq!(check_nesting_depth(&good, 10), Ok(()));
    let invalid = |bytes: &[u8]| matches!(check_nesting_depth(bytes, 10), Err(WireError::InvalidBson(_)));
    // Shorter than a document, a length that disagrees with the slice, no
    // terminating zero.
    assert!(invalid(&[]));
    assert!(invalid(&[5, 0, 0]));
    assert!(invalid(&[4, 0, 0, 0, 0]));
    assert!(invalid(&[5, 0, 0, 0, 1]));
    assert!(invalid(&good[..good.len() - 1]));
    // The embedded document claims to run past its parent.
    let mut past_parent = good.clone();
    past_parent[7] = 0x7f;
    assert!(invalid(&past_parent));
    // The embedded document claims less than its elements need.
    let mut short = good.clone();
    short[7] -= 1;
    assert!(invalid(&short));
    // Negative and tiny nested lengths.
    let mut negative = good.clone();
    negative[7..11].copy_from_slice(&(-1i32).to_le_bytes());
    assert!(invalid(&negative));
    let mut tiny = good.clone();
    tiny[7..11].copy_from_slice(&4i32.to_le_bytes());
    assert!(invalid(&tiny));
    // An unknown element type.
    let mut unknown = good.clone();
    unknown[4] = 0x42;
    assert!(invalid(&unknown));
    // Every truncation, with the length fixed up to match.
    for cut in 0..good.len() {
        let mut truncated = good[..cut].to_vec();
        if truncated.len() >= 4 {
            let length = (truncated.len() as i32).to_le_bytes();
            truncated[..4].copy_from_slice(&length);
        }
        assert!(check_nesting_depth(&truncated, 10).is_err(), "cut at {cut}");
    }
}

#[test]
fn every_element_type_is_walked() {
    let document = doc! {
        "double": 1.5, "string": "s", "doc": {"x": 1}, "array": [1, [2]],
        "binary": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] },
        "undefined": Bson::Undefined, "oid": bson::oid::ObjectId::from_bytes([7; 12]), "bool": true,
        "date": bson::DateTime::from_millis(5), "null": Bson::Null,
        "regex": Bson::RegularExpression(bson::Regex { pattern: "a+".to_string().try_into().unwrap(), options: "i".to_string().try_into().unwrap() }),
        "code": Bson::JavaScriptCode("f()".into()), "symbol": Bson::Symbol("sym".into()),
        "cws": Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code: "g()".into(), scope: doc! {"y": [1]} }),
        "int": 3, "ts": bson::Timestamp { time: 1, increment: 2 }, "long": 4i64,
        "decimal": bson::Decimal128::from_bytes([0; 16]), "min": Bson::MinKey, "max": Bson::MaxKey,
    };
    // The bson crate cannot build a DBPointer (0x0C): append one by hand.
    let mut elements = document.to_vec().unwrap()[4..].to_vec();
    elements.pop();
    let mut pointer = 3i32.to_le_bytes().to_vec();
    pointer.extend_from_slice(b"ns\0");
    pointer.extend_from_slice(&[9; 12]);
    elements.extend(element(0x0C, b"pointer", &pointer));
    let bytes = wrap(&elements);
    assert_eq!(Document::from_reader(&bytes[..]).unwrap().len(), document.len() + 1);
    assert_eq!(check_nesting_depth(&bytes, 3), Ok(()));
    assert!(matches!(check_nesting_depth(&bytes, 2), Err(WireError::NestingTooDeep(_))));
}

fn op_msg_with_body(body: &[u8]) -> Vec<u8> {
    let mut out = vec![0; 16];
    out.extend_from_slice(&0u32.to_le_bytes());
    out.push(0);
    out.extend_from_slice(body);
    let length = (out.len() as i32).to_le_bytes();
    out[..4].copy_from_slice(&length);
    out[12..16].copy_from_slice(&opcode::OP_MSG.to_le_bytes());
    out
}

#[test]
fn every_document_of_a_message_is_checked_before_decoding() {
    // Body: {find: "c", filter: <depth 200 below the filter>, $db: "test"}
    // puts the innermost value at depth 201.
    let body = |depth: usize| {
        let mut elements = element(0x02, b"find", &[2, 0, 0, 0, b'c', 0]);
        elements.extend(element(0x03, b"filter", &nested_bytes(depth, false)));
        elements.extend(element(0x02, b"$db", &[5, 0, 0, 0, b't', b'e', b's', b't', 0]));
        wrap(&elements)
    };
    assert!(parse_message(&op_msg_with_body(&body(MAX_BSON_DEPTH - 1))).is_ok());
    assert!(matches!(parse_message(&op_msg_with_body(&body(MAX_BSON_DEPTH))), Err(WireError::NestingTooDeep(_))));
    assert!(matches!(parse_message(&op_msg_with_body(&body(5_000))), Err(WireError::NestingTooDeep(_))));

    // A document-sequence document counts from its own top level.
    let sequence = |depth: usize| {
        let mut message = encode_op_msg(1, 0, 0, &doc! {"insert": "c", "$db": "test"}, &[]).unwrap();
        let mut section = vec![1u8, 0, 0, 0, 0];
        section.extend_from_slice(b"documents\0");
        section.extend(nested_bytes(depth, true));
        let size = (section.len() as i32 - 1).to_le_bytes();
        section[1..5].copy_from_slice(&size);
        message.extend(section);
        let length = (message.len() as i32).to_le_bytes();
        message[..4].copy_from_slice(&length);
        message
    };
    assert!(parse_message(&sequence(MAX_BSON_DEPTH)).is_ok());
    assert!(matches!(parse_message(&sequence(MAX_BSON_DEPTH + 1)), Err(WireError::NestingTooDeep(_))));

    // The legacy OP_QUERY's query document.
    let mut query = encode_op_query(1, 0, "admin.$cmd", 0, -1, &doc! {"isMaster": 1}).unwrap();
    let query_at = query.len() - doc! {"isMaster": 1}.to_vec().unwrap().len();
    query.truncate(query_at);
    query.extend(nested_bytes(MAX_BSON_DEPTH + 1, false));
    let length = (query.len() as i32).to_le_bytes();
    query[..4].copy_from_slice(&length);
    assert!(matches!(parse_message(&query), Err(WireError::NestingTooDeep(_))));
}

/// Documents of every shape the `bson` crate builds, nested a few levels.
fn arbitrary_value() -> impl Strategy<Value = Bson> {
    let leaf = prop_oneof![
        any::<i32>().prop_map(Bson::Int32),
        any::<i64>().prop_map(Bson::Int64),
        "[a-z]{0,6}".prop_map(Bson::String),
        any::<bool>().prop_map(Bson::Boolean),
        Just(Bson::Null),
        prop::collection::vec(any::<u8>(), 0..6)
            .prop_map(|bytes| Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes })),
    ];
    leaf.prop_recursive(6, 48, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
            prop::collection::vec(("[a-z]{1,3}", inner.clone()), 0..4)
                .prop_map(|fields| Bson::Document(fields.into_iter().collect())),
            prop::collection::vec(("[a-z]{1,3}", inner), 0..3).prop_map(|fields| {
                Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                    code: "c".into(),
                    scope: fields.into_iter().collect(),
                })
            }),
        ]
    })
}

fn arbitrary_document() -> impl Strategy<Value = Document> {
    prop::collection::vec(("[a-z]{1,3}", arbitrary_value()), 0..4).prop_map(|fields| fields.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// On well-formed documents the check passes exactly when the naive
    /// depth is within the limit.
    #[test]
    fn agrees_with_the_naive_depth(document in arbitrary_document(), limit in 0usize..16) {
        let bytes = document.to_vec().unwrap();
        let depth = naive_depth(&document);
        match check_nesting_depth(&bytes, limit) {
            Ok(()) => prop_assert!(depth <= limit, "depth {depth} passed limit {limit}"),
            Err(WireError::NestingTooDeep(_)) => prop_assert!(depth > limit, "depth {depth} refused at {limit}"),
            Err(other) => prop_assert!(false, "valid bytes refused: {other:?}"),
        }
    }

    /// On corrupted bytes the check never panics, and whatever it lets
    /// through decodes (if at all) to a document within the limit: no
    /// nesting can hide in bytes the walk skipped.
    #[test]
    fn corrupted_bytes_never_hide_depth(document in arbitrary_document(), limit in 0usize..8,
                                        mutations in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let mut bytes = document.to_vec().unwrap();
        for (index, value) in mutations {
            let at = index.index(bytes.len());
            bytes[at] = value;
        }
        if check_nesting_depth(&bytes, limit).is_ok() {
            if let Ok(decoded) = Document::from_reader(&bytes[..]) {
                prop_assert!(naive_depth(&decoded) <= limit);
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200), limit in 0usize..4) {
        let _ = check_nesting_depth(&bytes, limit);
    }
}
