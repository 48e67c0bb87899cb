//! Feeds arbitrary bytes to the framing check and the message parser; any
//! panic is a bug. Messages that parse are re-encoded and must parse again
//! to the same value (compared as bytes, re-encoded once more), except
//! those holding a document with two `_id` fields: the decoder marks those
//! with a field no BSON can carry, so they cannot be re-encoded (and
//! cannot be stored). OP_COMPRESSED frames are opened first, as the node
//! does, and the message inside goes through the same checks.
#![no_main]

use bson::{Bson, Document};
use libfuzzer_sys::fuzz_target;
use slipstream_wire::{
    check_frame, decompress_message, encode_op_msg, opcode, parse_message, Message, OpMsg, DUPLICATE_ID_MARKER,
};

/// Whether the decoder marked a document of `msg` as holding `_id` twice.
fn marked(msg: &OpMsg) -> bool {
    let has = |document: &Document| document.contains_key(DUPLICATE_ID_MARKER);
    let in_arrays = |document: &Document| {
        document.values().any(|value| match value {
            Bson::Array(items) => items
                .iter()
                .any(|item| matches!(item, Bson::Document(inner) if has(inner))),
            _ => false,
        })
    };
    has(&msg.body) || in_arrays(&msg.body) || msg.sequences.iter().flat_map(|s| &s.documents).any(has)
}

fuzz_target!(|data: &[u8]| {
    let Ok(length) = check_frame(data) else { return };
    let frame = &data[..length];
    if frame.get(12..16) == Some(&opcode::OP_COMPRESSED.to_le_bytes()[..]) {
        if let Ok(opened) = decompress_message(frame) {
            assert_eq!(
                check_frame(&opened.message),
                Ok(opened.message.len()),
                "an opened message frames"
            );
            round_trip(&opened.message);
        }
        return;
    }
    round_trip(frame);
});

fn round_trip(frame: &[u8]) {
    if let Ok(Message::Msg(msg)) = parse_message(frame) {
        if marked(&msg) {
            return;
        }
        let flags = msg.flags & !slipstream_wire::msg_flags::CHECKSUM_PRESENT;
        let bytes = encode_op_msg(
            msg.header.request_id,
            msg.header.response_to,
            flags,
            &msg.body,
            &msg.sequences,
        )
        .expect("a parsed message re-encodes");
        match parse_message(&bytes).expect("a re-encoded message parses") {
            // Compared as bytes: a NaN in a document is not equal to itself.
            Message::Msg(again) => {
                let again = encode_op_msg(
                    again.header.request_id,
                    again.header.response_to,
                    flags,
                    &again.body,
                    &again.sequences,
                )
                .expect("a parsed message re-encodes");
                assert_eq!(again, bytes);
            }
            other => panic!("re-encoded OP_MSG parsed as {other:?}"),
        }
    }
}
