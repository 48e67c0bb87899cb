//! Feeds random and mutated messages to a running node over TCP (seeded,
//! a bounded number of batches within a bounded time) and checks after
//! each batch that a fresh connection still answers `ping`. Among them are
//! commands nested around and far past maxBSONDepth, intact or corrupted. Also checks
//! that a second node on the same data directory is refused.
//!
//! `SLIPSTREAM_FUZZ_SEED` and `SLIPSTREAM_FUZZ_BATCHES` override the
//! defaults; a failure prints the seed and batch that reproduce it.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use bson::doc;
use common::{serve_command, Client, Node};
use slipstream_wire::{encode_op_msg, encode_op_query, msg_flags, opcode, DocumentSequence};

/// Messages written per batch (each on its own connection or pipelined).
const MESSAGES_PER_BATCH: usize = 40;
const BATCHES_DEFAULT: usize = 25;
/// The whole run stops early (still checking `ping`) after this long.
const TIME_BUDGET: Duration = Duration::from_secs(60);
/// How long the fuzzer waits for the node's answer to a garbage message.
const READ_WAIT: Duration = Duration::from_millis(100);

struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

/// Valid messages the mutations start from. None of them, and no mutation
/// of them, can spell a command that stops the node.
fn seeds() -> Vec<Vec<u8>> {
    let documents = vec![doc! {"_id": 1, "a": "x"}, doc! {"_id": 2, "b": [1, 2, {"c": 3.5}]}];
    vec![
        encode_op_msg(1, 0, 0, &doc! {"ping": 1, "$db": "admin"}, &[]).unwrap(),
        encode_op_msg(2, 0, msg_flags::CHECKSUM_PRESENT, &doc! {"hello": 1, "helloOk": true, "$db": "admin"}, &[]).unwrap(),
        encode_op_msg(
            3,
            0,
            0,
            &doc! {"insert": "fuzz", "$db": "fuzzdb"},
            &[DocumentSequence { identifier: "documents".into(), documents }],
        )
        .unwrap(),
        encode_op_msg(4, 0, 0, &doc! {"find": "fuzz", "filter": {"a": {"$gt": 1}}, "$db": "fuzzdb"}, &[]).unwrap(),
        encode_op_msg(5, 0, msg_flags::MORE_TO_COME, &doc! {"endSessions": [], "$db": "admin"}, &[]).unwrap(),
        encode_op_query(6, 0, "admin.$cmd", 0, -1, &doc! {"isMaster": 1}).unwrap(),
        encode_op_msg(7, 0, 0, &doc! {"listCollections": 1, "$db": "fuzzdb"}, &[]).unwrap(),
    ]
}

fn set_length(message: &mut [u8]) {
    let length = (message.len() as i32).to_le_bytes();
    message[..4].copy_from_slice(&length);
}

/// `{a: {a: ... {a: 1}}}` (or `[[...[1]]]` under `a`) with `levels`
/// embedded documents, encoded in one pass, without recursion, so that any
/// depth can be built.
fn nested_bytes(levels: usize, arrays: bool) -> Vec<u8> {
    const INNERMOST_BYTES: usize = 12; // {k: int32}
    const LEVEL_BYTES: usize = 8;
    let (open_type, key) = if arrays { (0x04u8, b'0') } else { (0x03u8, b'a') };
    let mut out = Vec::with_capacity(INNERMOST_BYTES + LEVEL_BYTES * levels);
    for level in (1..=levels).rev() {
        out.extend_from_slice(&((INNERMOST_BYTES + LEVEL_BYTES * level) as i32).to_le_bytes());
        out.extend_from_slice(&[open_type, if level == levels { b'a' } else { key }, 0]);
    }
    out.extend_from_slice(&(INNERMOST_BYTES as i32).to_le_bytes());
    out.extend_from_slice(&[0x10, if levels == 0 { b'a' } else { key }, 0, 1, 0, 0, 0, 0]);
    out.resize(out.len() + levels, 0);
    out
}

/// The document `{key: value}` where `value` is the encoded document or
/// array `inner` (element type `element_type`), after the fields of
/// `before`.
fn wrap_bytes(before: &bson::Document, element_type: u8, key: &str, inner: &[u8]) -> Vec<u8> {
    let mut elements = before.to_vec().unwrap();
    elements.truncate(elements.len() - 1);
    elements.drain(..4);
    elements.push(element_type);
    elements.extend_from_slice(key.as_bytes());
    elements.push(0);
    elements.extend_from_slice(inner);
    let mut out = ((elements.len() + 5) as i32).to_le_bytes().to_vec();
    out.extend(elements);
    out.push(0);
    out
}

/// A command whose filter, document or stage nests `levels` deep, around
/// and past maxBSONDepth (200): every kind of command that walks it must
/// answer (Overflow past the limit), never overflow the node's stack.
fn deep_message(random: &mut Random) -> Vec<u8> {
    let levels = [199, 200, 201, 202, 1_000, 5_000, 150 + random.below(3_000)][random.below(7)];
    let nested = nested_bytes(levels, random.below(3) == 0);
    let database = doc! {"$db": "fuzzdb"};
    let body = match random.below(5) {
        0 => wrap_bytes(&doc! {"find": "fuzz"}, 0x03, "filter", &nested),
        1 => wrap_bytes(&doc! {"count": "fuzz"}, 0x03, "query", &nested),
        2 => wrap_bytes(&doc! {"insert": "fuzz"}, 0x04, "documents", &wrap_bytes(&doc! {}, 0x03, "0", &nested)),
        3 => {
            let stage = wrap_bytes(&doc! {}, 0x03, "$match", &nested);
            let pipeline = wrap_bytes(&doc! {}, 0x03, "0", &stage);
            wrap_bytes(&doc! {"aggregate": "fuzz", "cursor": {}}, 0x04, "pipeline", &pipeline)
        }
        _ => {
            let statement = wrap_bytes(&doc! {"u": {"$set": {"x": 1}}}, 0x03, "q", &nested);
            wrap_bytes(&doc! {"update": "fuzz"}, 0x04, "updates", &wrap_bytes(&doc! {}, 0x03, "0", &statement))
        }
    };
    // `$db` goes last: append its element before the body's terminator.
    let mut body = body;
    let db_element = &database.to_vec().unwrap()[4..];
    body.pop();
    body.extend_from_slice(db_element);
    let length = (body.len() as i32).to_le_bytes();
    body[..4].copy_from_slice(&length);
    let mut message = vec![0; 16];
    message.extend_from_slice(&0u32.to_le_bytes());
    message.push(0);
    message.extend(body);
    message[12..16].copy_from_slice(&opcode::OP_MSG.to_le_bytes());
    if random.below(3) == 0 {
        // Corrupt a few bytes of the nesting (lengths and types included).
        for _ in 0..=random.below(4) {
            let at = 21 + random.below(message.len() - 21);
            message[at] = random.next() as u8;
        }
    }
    set_length(&mut message);
    message
}

/// One garbage message: a mutated seed, random bytes, or deep nesting.
fn garbage(random: &mut Random, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut message = seeds[random.below(seeds.len())].clone();
    match random.below(10) {
        0 => {
            // Flip a few bytes past the length field, keep the framing.
            for _ in 0..=random.below(6) {
                let at = 4 + random.below(message.len() - 4);
                message[at] = random.next() as u8;
            }
        }
        1 => {
            // Truncate and fix the length: a well-framed short message.
            let keep = 16 + random.below(message.len() - 16);
            message.truncate(keep);
            set_length(&mut message);
        }
        2 => {
            // Declare a length larger than sent (the node must wait, then
            // see the connection close) or beyond the limits.
            let lengths = [message.len() as i32 + 1 + random.below(1000) as i32, 48_000_001, i32::MAX, -5, 3];
            message[..4].copy_from_slice(&lengths[random.below(lengths.len())].to_le_bytes());
        }
        3 => {
            // Unknown or unsupported opcodes.
            let codes = [opcode::OP_COMPRESSED, opcode::OP_INSERT, opcode::OP_REPLY, 0, 9999, random.next() as i32];
            message[12..16].copy_from_slice(&codes[random.below(codes.len())].to_le_bytes());
        }
        4 => {
            // Random flag bits on an OP_MSG.
            if message.len() > 20 {
                message[16..20].copy_from_slice(&(random.next() as u32).to_le_bytes());
            }
        }
        5 => {
            // Corrupt an inner BSON length.
            if message.len() > 25 {
                let value = [0i32, 4, 5, 16 * 1024 * 1024 + 20_000, i32::MAX, -1][random.below(6)];
                message[21..25].copy_from_slice(&value.to_le_bytes());
            }
        }
        6 => {
            // Entirely random bytes with a plausible header.
            let length = 16 + random.below(200);
            message = (0..length).map(|_| random.next() as u8).collect();
            set_length(&mut message);
        }
        7 => {
            // Random bytes, no framing at all.
            message = (0..random.below(64)).map(|_| random.next() as u8).collect();
        }
        8 => message = deep_message(random),
        _ => {
            // Append junk and fix the length (trailing section bytes).
            for _ in 0..=random.below(20) {
                message.push(random.next() as u8);
            }
            set_length(&mut message);
        }
    }
    message
}

/// Writes the batch: each message on its own connection or several
/// pipelined on one; reads whatever comes back within READ_WAIT.
fn send_batch(port: u16, random: &mut Random, seeds: &[Vec<u8>]) {
    let mut sent = 0;
    while sent < MESSAGES_PER_BATCH {
        let Ok(mut client) = Client::connect(port) else { return };
        client.stream.set_read_timeout(Some(READ_WAIT)).unwrap();
        let pipelined = 1 + random.below(4);
        for _ in 0..pipelined {
            if client.send(&garbage(random, seeds)).is_err() {
                break;
            }
            sent += 1;
        }
        let mut sink = [0u8; 4096];
        let deadline = Instant::now() + READ_WAIT * 2;
        while Instant::now() < deadline {
            match client.stream.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}

#[test]
fn random_and_mutated_messages_never_stop_the_node() {
    let seed: u64 = std::env::var("SLIPSTREAM_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_2026);
    let batches: usize = std::env::var("SLIPSTREAM_FUZZ_BATCHES").ok().and_then(|s| s.parse().ok()).unwrap_or(BATCHES_DEFAULT);
    let node = Node::start(&[]);
    let seeds = seeds();
    let mut random = Random(seed | 1);
    let started = Instant::now();
    for batch in 0..batches {
        send_batch(node.port, &mut random, &seeds);
        let reply = Client::connect(node.port)
            .and_then(|mut client| client.command(&doc! {"ping": 1, "$db": "admin"}))
            .unwrap_or_else(|err| panic!("ping failed after batch {batch} (SLIPSTREAM_FUZZ_SEED={seed}): {err}"));
        assert_eq!(reply.get_f64("ok").ok(), Some(1.0), "batch {batch} seed {seed}");
        if started.elapsed() > TIME_BUDGET {
            eprintln!("time budget reached after {} batches", batch + 1);
            break;
        }
    }
}

#[test]
fn deep_messages_are_answered_with_overflow_past_the_limit() {
    let node = Node::start(&[]);
    let mut random = Random(7);
    let mut client = node.client();
    let mut overflows = 0;
    for _ in 0..60 {
        let message = deep_message(&mut random);
        client.send(&message).unwrap();
        // Every message is answered (corrupted ones with an error), and the
        // connection stays usable.
        let Ok(slipstream_wire::Message::Msg(reply)) = client.receive() else { panic!("no OP_MSG reply") };
        if reply.body.get_i32("code").ok() == Some(15) {
            overflows += 1;
        }
    }
    assert!(overflows > 10, "{overflows} of 60 deep messages were refused as too deep");
    assert_eq!(client.command(&doc! {"ping": 1, "$db": "admin"}).unwrap().get_f64("ok").ok(), Some(1.0));
}

#[test]
fn second_node_on_the_same_dbpath_is_refused() {
    let first = Node::start(&[]);
    let port = common::free_port();
    let output = serve_command(&first.dbpath, port, &[])
        .stdout(std::process::Stdio::piped())
        .output()
        .expect("run a second slipstream serve");
    assert_eq!(output.status.code(), Some(100), "MongoDB's exit code for a dbpath in use");
    // The refusal is a line of the node's log (stdout without --logpath), as
    // mongod's is; stderr stays empty.
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let refusal = stdout
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("every line is JSON"))
        .find(|line| line["s"] == "E" && line["c"] == "STORAGE")
        .unwrap_or_else(|| panic!("no storage error in the log: {stdout}"));
    assert!(refusal["attr"]["error"].as_str().unwrap().contains("lock"), "the error names the lock: {refusal}");
    // The first node is unaffected.
    assert_eq!(first.client().command(&doc! {"ping": 1, "$db": "admin"}).unwrap().get_f64("ok").ok(), Some(1.0));
}
