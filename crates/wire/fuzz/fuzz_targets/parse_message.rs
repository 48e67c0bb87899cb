//! Feeds arbitrary bytes to the framing check and the message parser; any
//! panic is a bug. Messages that parse are re-encoded and must parse again
//! to the same value (compared as bytes, re-encoded once more).
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipstream_wire::{check_frame, encode_op_msg, parse_message, Message};

fuzz_target!(|data: &[u8]| {
    let Ok(length) = check_frame(data) else { return };
    if let Ok(Message::Msg(msg)) = parse_message(&data[..length]) {
        let flags = msg.flags & !slipstream_wire::msg_flags::CHECKSUM_PRESENT;
        let bytes = encode_op_msg(msg.header.request_id, msg.header.response_to, flags, &msg.body, &msg.sequences)
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
});
