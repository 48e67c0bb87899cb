//! Feeds random and mutated messages to a running node over TCP (seeded,
//! a bounded number of batches within a bounded time) and checks after
//! each batch that a fresh connection still answers `ping`. Also checks
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

/// One garbage message: a mutated seed or random bytes.
fn garbage(random: &mut Random, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut message = seeds[random.below(seeds.len())].clone();
    match random.below(9) {
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
