//! Round trips, one test per malformed-input class, the limits, and
//! property tests: no input makes the parser panic.

use bson::{doc, Document};
use proptest::prelude::*;
use slipstream_wire::*;

fn ping() -> Document {
    doc! { "ping": 1, "$db": "admin" }
}

fn msg(flags: u32, body: &Document, sequences: &[DocumentSequence]) -> Vec<u8> {
    encode_op_msg(7, 0, flags, body, sequences).unwrap()
}

#[test]
fn op_msg_round_trips_with_sequences() {
    let sequence = DocumentSequence {
        identifier: "documents".into(),
        documents: vec![doc! {"_id": 1}, doc! {"_id": 2, "x": "y"}],
    };
    let bytes = msg(0, &doc! {"insert": "c", "$db": "test"}, &[sequence.clone()]);
    assert_eq!(check_frame(&bytes), Ok(bytes.len()));
    let Message::Msg(parsed) = parse_message(&bytes).unwrap() else { panic!("not an OP_MSG") };
    assert_eq!(parsed.header.request_id, 7);
    assert_eq!(parsed.sequences, vec![sequence]);
    let body = parsed.into_command_body().unwrap();
    assert_eq!(body.get_array("documents").unwrap().len(), 2);
}

#[test]
fn checksum_is_verified() {
    let flags = msg_flags::CHECKSUM_PRESENT | msg_flags::MORE_TO_COME;
    let mut bytes = msg(flags, &ping(), &[]);
    let Message::Msg(parsed) = parse_message(&bytes).unwrap() else { panic!() };
    assert!(parsed.more_to_come());
    assert_eq!(parsed.body, ping());
    let last = bytes.len() - 6;
    bytes[last] ^= 0x40;
    assert!(matches!(parse_message(&bytes), Err(WireError::ChecksumMismatch { .. })));
}

#[test]
fn exhaust_flag_is_reported() {
    let bytes = msg(msg_flags::EXHAUST_ALLOWED, &ping(), &[]);
    let Message::Msg(parsed) = parse_message(&bytes).unwrap() else { panic!() };
    assert!(parsed.exhaust_allowed());
    assert!(!parsed.more_to_come());
}

#[test]
fn op_query_and_op_reply_round_trip() {
    let bytes = encode_op_query(3, 0, "admin.$cmd", 0, -1, &doc! {"isMaster": 1}).unwrap();
    let Message::Query(query) = parse_message(&bytes).unwrap() else { panic!() };
    assert_eq!(query.full_collection_name, "admin.$cmd");
    assert_eq!(query.number_to_return, -1);
    assert_eq!(query.query, doc! {"isMaster": 1});
    let reply = encode_op_reply(9, 3, 0, 0, &[doc! {"ok": 1.0}]).unwrap();
    let Message::Reply(parsed) = parse_message(&reply).unwrap() else { panic!() };
    assert_eq!(parsed.header.response_to, 3);
    assert_eq!(parsed.documents, vec![doc! {"ok": 1.0}]);
}

#[test]
fn compressed_and_unknown_opcodes_are_clear_errors() {
    let mut bytes = msg(0, &ping(), &[]);
    bytes[12..16].copy_from_slice(&opcode::OP_COMPRESSED.to_le_bytes());
    assert_eq!(parse_message(&bytes), Err(WireError::CompressionNotSupported));
    bytes[12..16].copy_from_slice(&opcode::OP_INSERT.to_le_bytes());
    assert_eq!(parse_message(&bytes), Err(WireError::UnsupportedOpCode(2002)));
}

#[test]
fn unknown_required_flag_bits_are_rejected() {
    let bytes = msg(1 << 5, &ping(), &[]);
    assert_eq!(parse_message(&bytes), Err(WireError::UnknownRequiredFlags(1 << 5)));
}

#[test]
fn missing_and_duplicate_bodies_are_rejected() {
    let mut bytes = msg(0, &ping(), &[]);
    bytes.truncate(20);
    bytes[..4].copy_from_slice(&20i32.to_le_bytes());
    assert!(matches!(parse_message(&bytes), Err(WireError::Malformed(_))));

    let mut twice = msg(0, &ping(), &[]);
    let body = twice[20..].to_vec();
    twice.extend_from_slice(&body);
    let length = (twice.len() as i32).to_le_bytes();
    twice[..4].copy_from_slice(&length);
    assert!(matches!(parse_message(&twice), Err(WireError::Malformed(_))));
}

#[test]
fn bad_section_kind_and_truncated_sequence_are_rejected() {
    let mut bytes = msg(0, &ping(), &[]);
    bytes[20] = 7;
    assert!(matches!(parse_message(&bytes), Err(WireError::Malformed(_))));

    let sequence = DocumentSequence { identifier: "d".into(), documents: vec![doc! {"a": 1}] };
    let mut bytes = msg(0, &ping(), &[sequence]);
    let body_len = ping().to_vec().unwrap().len();
    let size_at = 16 + 4 + 1 + body_len + 1;
    bytes[size_at..size_at + 4].copy_from_slice(&1000i32.to_le_bytes());
    assert!(matches!(parse_message(&bytes), Err(WireError::Malformed(_))));
}

#[test]
fn header_length_must_match_the_frame() {
    let mut bytes = msg(0, &ping(), &[]);
    bytes.push(0);
    assert!(matches!(parse_message(&bytes), Err(WireError::Malformed(_))));
}

#[test]
fn invalid_bson_is_rejected() {
    let mut bytes = msg(0, &ping(), &[]);
    // Corrupt the element type of the first body field.
    bytes[25] = 0x77;
    assert!(matches!(parse_message(&bytes), Err(WireError::InvalidBson(_))));
}

#[test]
fn oversized_document_is_rejected_before_decoding() {
    let mut bytes = msg(0, &ping(), &[]);
    let huge = (MAX_BSON_DOCUMENT_IN_MESSAGE_BYTES as i32 + 1).to_le_bytes();
    bytes[21..25].copy_from_slice(&huge);
    assert_eq!(parse_message(&bytes), Err(WireError::DocumentTooLarge(MAX_BSON_DOCUMENT_IN_MESSAGE_BYTES + 1)));
}

#[test]
fn sequence_identifier_clashing_with_body_field_is_rejected() {
    let sequence = DocumentSequence { identifier: "ping".into(), documents: vec![] };
    let Message::Msg(parsed) = parse_message(&msg(0, &ping(), &[sequence])).unwrap() else { panic!() };
    assert!(parsed.into_command_body().is_err());
}

#[test]
fn op_reply_count_must_match() {
    let mut reply = encode_op_reply(1, 1, 0, 0, &[doc! {"a": 1}]).unwrap();
    reply[32..36].copy_from_slice(&1_000_000i32.to_le_bytes());
    assert!(matches!(parse_message(&reply), Err(WireError::Malformed(_))));
}

fn arbitrary_document() -> impl Strategy<Value = Document> {
    prop::collection::vec(("[a-z]{1,8}", any::<i64>(), "[ -~]{0,20}"), 0..6).prop_map(|fields| {
        let mut document = Document::new();
        for (key, number, text) in fields {
            if number % 2 == 0 {
                document.insert(key, number);
            } else {
                document.insert(key, text);
            }
        }
        document
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn op_msg_round_trip(body in arbitrary_document(), docs in prop::collection::vec(arbitrary_document(), 0..5),
                         checksum in any::<bool>(), request_id in any::<i32>()) {
        let flags = if checksum { msg_flags::CHECKSUM_PRESENT } else { 0 };
        let sequence = DocumentSequence { identifier: "documents".into(), documents: docs };
        let bytes = encode_op_msg(request_id, 0, flags, &body, std::slice::from_ref(&sequence)).unwrap();
        prop_assert_eq!(check_frame(&bytes), Ok(bytes.len()));
        let Message::Msg(parsed) = parse_message(&bytes).unwrap() else { panic!("kind") };
        prop_assert_eq!(parsed.body, body);
        prop_assert_eq!(parsed.sequences, vec![sequence]);
        prop_assert_eq!(parsed.header.request_id, request_id);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = check_frame(&bytes);
        let _ = parse_message(&bytes);
    }

    #[test]
    fn mutated_messages_never_panic(body in arbitrary_document(),
                                    mutations in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
                                    cut in any::<prop::sample::Index>()) {
        let mut bytes = encode_op_msg(1, 0, 0, &body, &[DocumentSequence { identifier: "d".into(), documents: vec![body.clone()] }]).unwrap();
        for (index, value) in mutations {
            let at = index.index(bytes.len());
            bytes[at] = value;
        }
        let _ = parse_message(&bytes);
        let truncated = &bytes[..cut.index(bytes.len())];
        if let Ok(length) = check_frame(truncated) {
            let _ = parse_message(&truncated[..length]);
        }
    }

    #[test]
    fn declared_lengths_are_checked_against_bytes_present(declared in any::<i32>(), present in 0usize..64) {
        let mut bytes = declared.to_le_bytes().to_vec();
        bytes.resize(4 + present, 0);
        match check_frame(&bytes) {
            Ok(length) => prop_assert!(length <= bytes.len() && length >= 16),
            Err(WireError::Incomplete) => prop_assert!(declared as i64 > bytes.len() as i64),
            Err(WireError::MessageTooSmall(_)) => prop_assert!(declared < 16),
            Err(WireError::MessageTooLarge(_)) => prop_assert!(declared as i64 > MAX_MESSAGE_SIZE_BYTES as i64),
            Err(other) => prop_assert!(false, "unexpected {other:?}"),
        }
    }
}
