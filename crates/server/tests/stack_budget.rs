//! The stack a node's threads need, measured (issue 6).
//!
//! A node is served on a runtime whose threads have half of
//! `THREAD_STACK_BYTES`, and the inputs that recurse deepest go through the
//! real connection path (framing, parsing, dispatch, the reply's encoding):
//! the deepest body a message may carry in every shape the measurements
//! found costly, and the longest chains of pipeline stages the limits
//! allow. A stack overflow aborts this test's process, so passing proves a
//! margin of two over what the node runs with, in a debug build (whose
//! frames are the largest). The high-water mark of the threads' stacks is
//! printed (`--nocapture`) from their resident pages.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use bson::{doc, Bson, Document, RawDocumentBuf};
use slipstream_query::aggregate::ACTIVE_STAGES_MAX;
use slipstream_query::depth::document_exceeds;
use slipstream_repl::{MemberBlocklist, Standalone};
use slipstream_server::log::Log;
use slipstream_server::{ServerOptions, ServerState, THREAD_STACK_BYTES};
use slipstream_storage::{Engine, EngineOptions};
use slipstream_wire::{check_frame, encode_op_msg, MAX_BSON_DEPTH};

const TEST_STACK_BYTES: usize = THREAD_STACK_BYTES / 2;

struct Served {
    runtime: tokio::runtime::Runtime,
    state: Arc<ServerState>,
    port: u16,
    _dir: tempfile::TempDir,
}

fn serve() -> Served {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(TEST_STACK_BYTES)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineOptions::new(dir.path())).unwrap();
    let topology = Arc::new(Standalone::new(engine.clone()));
    let state = Arc::new(ServerState::new(
        engine,
        topology,
        Arc::new(MemberBlocklist::default()),
        ServerOptions::new(dir.path(), 0),
        Log::with_sink(Box::new(std::io::sink())),
    ));
    let listeners = runtime.block_on(slipstream_server::listener::bind("127.0.0.1", 0)).unwrap();
    let port = listeners[0].local_addr().unwrap().port();
    runtime.spawn(slipstream_server::serve(state.clone(), listeners));
    Served { runtime, state, port, _dir: dir }
}

/// Sends `body` (with `$db: test`) and returns the reply's raw body. The
/// reply is not decoded: it may nest a few levels past maxBSONDepth
/// (explain output quotes the filter inside its plan), which the wire
/// layer refuses to decode, as it refuses any message that deep.
fn command(port: u16, mut body: Document) -> RawDocumentBuf {
    body.insert("$db", "test");
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(&encode_op_msg(1, 0, 0, &body, &[]).unwrap()).unwrap();
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let length = loop {
        if let Ok(length) = check_frame(&buffer) {
            break length;
        }
        let read = stream.read(&mut chunk).unwrap();
        assert!(read > 0, "the node closed the connection");
        buffer.extend_from_slice(&chunk[..read]);
    };
    // Header (16 bytes), flags (4), section kind 0 (1), then the body.
    assert_eq!(buffer[12..16], 2013i32.to_le_bytes(), "an OP_MSG reply");
    RawDocumentBuf::from_bytes(buffer[21..length].to_vec()).unwrap()
}

fn ok(reply: &RawDocumentBuf) -> f64 {
    reply.get_f64("ok").unwrap()
}

/// `wrap` applied `levels` times around `leaf`.
fn chain(levels: usize, leaf: Bson, wrap: impl Fn(Bson) -> Bson) -> Bson {
    (0..levels).fold(leaf, |inner, _| wrap(inner))
}

fn nest(levels: usize) -> Bson {
    chain(levels, Bson::Int32(1), |inner| Bson::Document(doc! {"a": inner}))
}

fn and_chain(levels: usize) -> Bson {
    chain(levels, Bson::Document(doc! {"a": 1}), |inner| Bson::Document(doc! {"$and": [inner]}))
}

fn add_chain(levels: usize) -> Bson {
    chain(levels, Bson::Int32(1), |inner| Bson::Document(doc! {"$add": [inner, 1]}))
}

/// `build(n)` for the largest n whose body stays within maxBSONDepth once
/// `$db` is added (a top-level string: no depth).
fn deepest(build: impl Fn(usize) -> Document) -> Document {
    let fits = |n: usize| !document_exceeds(&build(n), MAX_BSON_DEPTH);
    let mut high = 1;
    while fits(high) {
        high *= 2;
    }
    let mut low = 0;
    while high - low > 1 {
        let middle = (low + high) / 2;
        if fits(middle) {
            low = middle;
        } else {
            high = middle;
        }
    }
    let body = build(low);
    assert!(document_exceeds(&body, MAX_BSON_DEPTH - 2), "the builder reaches the limit");
    body
}

/// The deepest bodies of the shapes measured to cost the most stack.
fn deepest_bodies() -> Vec<(&'static str, Document)> {
    vec![
        ("find filter equality", deepest(|n| doc! {"find": "c", "filter": {"a": nest(n)}})),
        ("find filter $and", deepest(|n| doc! {"find": "c", "filter": and_chain(n)})),
        (
            "find filter $elemMatch",
            deepest(
                |n| doc! {"find": "c", "filter": chain(n, Bson::Document(doc! {"a": 1}), |i| Bson::Document(doc! {"arr": {"$elemMatch": i}}))},
            ),
        ),
        ("find filter $expr", deepest(|n| doc! {"find": "c", "filter": {"$expr": {"$eq": [add_chain(n), 5]}}})),
        ("find projection nested", deepest(|n| doc! {"find": "c", "projection": nest(n)})),
        ("find projection expression", deepest(|n| doc! {"find": "c", "projection": {"x": add_chain(n)}})),
        ("explain find", deepest(|n| doc! {"explain": {"find": "c", "filter": and_chain(n)}})),
        ("count", deepest(|n| doc! {"count": "c", "query": and_chain(n)})),
        ("insert too deep to store", deepest(|n| doc! {"insert": "c", "documents": [nest(n)]})),
        (
            "update $set",
            deepest(|n| doc! {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"y": nest(n)}}}]}),
        ),
        (
            "update upsert seed",
            deepest(
                |n| doc! {"update": "c", "updates": [{"q": {"_id": 9, "a": nest(n)}, "u": {"$set": {"y": 1}}, "upsert": true}]},
            ),
        ),
        (
            "update pipeline",
            deepest(|n| doc! {"update": "c", "updates": [{"q": {"_id": 1}, "u": [{"$set": {"y": add_chain(n)}}]}]}),
        ),
        (
            "findAndModify fields",
            deepest(
                |n| doc! {"findAndModify": "c", "query": {"_id": 1}, "update": {"$set": {"y": 1}}, "fields": nest(n)},
            ),
        ),
        (
            "aggregate $group",
            deepest(
                |n| doc! {"aggregate": "c", "pipeline": [{"$group": {"_id": {"$literal": nest(n)}, "all": {"$push": {"$literal": nest(n)}}}}], "cursor": {}},
            ),
        ),
        (
            "aggregate $lookup nested",
            deepest(|n| {
                let innermost = vec![Bson::Document(doc! {"$match": and_chain(n)})];
                // Each level joins one document, so the levels cost one run
                // each rather than doubling.
                let pipeline = (0..19).fold(innermost, |inner, _| {
                    vec![
                        Bson::Document(doc! {"$match": {"_id": 1}}),
                        Bson::Document(doc! {"$lookup": {"from": "c", "as": "j", "pipeline": inner}}),
                    ]
                });
                doc! {"aggregate": "c", "pipeline": pipeline, "cursor": {}}
            }),
        ),
        (
            "error message quoting a deep document",
            deepest(
                |n| doc! {"aggregate": "c", "pipeline": [{"$project": {"x": {"$add": [chain(n, Bson::Document(doc! {"$a": 1, "$b": 2}), |i| Bson::Document(doc! {"a": i}))]}}}], "cursor": {}},
            ),
        ),
    ]
}

/// `width` copies of the costliest stage measured, the first of them a
/// `$lookup` running `inner`.
fn stages_around(inner: Vec<Bson>, width: usize) -> Vec<Bson> {
    let costly = Bson::Document(doc! {"$addFields": {"q": {"$add": ["$x", 1]}}});
    let mut stages = vec![Bson::Document(doc! {"$lookup": {"from": "c", "as": "j", "pipeline": inner}})];
    stages.extend(std::iter::repeat_n(costly, width - 1));
    stages
}

/// The highest resident size of this process's thread stacks of the test
/// size: how deep any of the runtime's threads has been.
fn stack_high_water_kib() -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut size = 0u64;
    let mut highest = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if let Some((low, high)) = first.split_once('-') {
            if let (Ok(low), Ok(high)) = (u64::from_str_radix(low, 16), u64::from_str_radix(high, 16)) {
                size = high - low;
            }
        } else if first == "Rss:" && (TEST_STACK_BYTES as u64..=TEST_STACK_BYTES as u64 + 65536).contains(&size) {
            let kib = fields.next().and_then(|kib| kib.parse().ok()).unwrap_or(0);
            highest = highest.max(Some(kib));
        }
    }
    highest
}

#[test]
fn the_costliest_inputs_fit_in_half_the_thread_stack() {
    let served = serve();
    let port = served.port;
    let mut stored = nest(slipstream_query::validate::STORED_DEPTH_MAX - 2);
    if let Bson::Document(deepest_stored) = &mut stored {
        deepest_stored.insert("_id", 2);
    }
    let inserted =
        command(port, doc! {"insert": "c", "documents": [{"_id": 1, "a": 1, "x": 1, "arr": [{"a": 1}]}, stored]});
    assert_eq!(inserted.get_i32("n").ok(), Some(2), "{inserted:?}");

    for (name, body) in deepest_bodies() {
        let reply = command(port, body);
        // An error answer is fine (too deep to store, an expression that
        // does not parse); an internal error or a dead node is not.
        let code = reply.get_i32("code").ok();
        assert_ne!(code, Some(1), "{name}: {:?}", reply.get_str("errmsg"));
        println!("{name}: ok {} code {code:?}", ok(&reply));
    }

    // The longest chains of stages: one maximum-length pipeline whose
    // `$lookup` runs another, every stage on the stack at once.
    // The innermost `$lookup`'s empty pipeline counts as one stage.
    let half = ACTIVE_STAGES_MAX / 2;
    let inner = stages_around(vec![], half - 1);
    let pipeline = stages_around(inner, half);
    let reply = command(port, doc! {"aggregate": "c", "pipeline": pipeline, "cursor": {}});
    assert_eq!(ok(&reply), 1.0, "{:?}", reply.get_str("errmsg"));
    // Stage after stage wrapping a field, up to the depth limit.
    let wrap = Bson::Document(doc! {"$addFields": {"x": {"a": "$x"}}});
    let reply = command(port, doc! {"aggregate": "c", "pipeline": vec![wrap; MAX_BSON_DEPTH], "cursor": {}});
    assert_eq!(ok(&reply), 1.0, "{:?}", reply.get_str("errmsg"));
    // Within one stage a value may nest past the limit before the stage's
    // output is checked: a `$group` key wrapping a field that is itself
    // nested to the limit, compared with another such key (two documents).
    let literal_levels = MAX_BSON_DEPTH - 10;
    let key = chain(literal_levels, Bson::String("$x".into()), |inner| Bson::Document(doc! {"a": inner}));
    let pipeline = vec![
        Bson::Document(doc! {"$addFields": {"x": {"$literal": nest(MAX_BSON_DEPTH - 10)}}}),
        Bson::Document(doc! {"$group": {"_id": key}}),
    ];
    let reply = command(port, doc! {"aggregate": "c", "pipeline": pipeline, "cursor": {}});
    assert_eq!(reply.get_i32("code").ok(), Some(15), "{:?}", reply.get_str("errmsg"));
    // $reduce wrapping its value up to the limit.
    let reduce = doc! {"$reduce": {"input": {"$range": [0, MAX_BSON_DEPTH as i32 - 1]}, "initialValue": {}, "in": {"a": "$$value"}}};
    let reply = command(port, doc! {"aggregate": "c", "pipeline": [{"$project": {"r": reduce}}], "cursor": {}});
    assert_eq!(ok(&reply), 1.0, "{:?}", reply.get_str("errmsg"));

    println!("thread stacks of {} KiB reached {:?} KiB", TEST_STACK_BYTES / 1024, stack_high_water_kib());
    served.state.shutdown.trigger();
    drop(served.runtime);
    served.state.engine.shutdown().unwrap();
}

/// What a log line or an error message does with the deepest command:
/// JSON text of it (as a `serde_json::Value`, the log's attribute type) and
/// the `Display` that error messages quote documents with.
#[test]
fn the_deepest_command_renders_as_json_and_text_on_half_the_thread_stack() {
    let body = deepest(|n| doc! {"find": "c", "filter": {"a": nest(n)}});
    let rendered = std::thread::Builder::new()
        .stack_size(TEST_STACK_BYTES)
        .spawn(move || {
            let json = serde_json::to_string(&to_json(&Bson::Document(body.clone()))).unwrap();
            let text = body.to_string();
            (json.len(), text.len())
        })
        .unwrap()
        .join()
        .unwrap();
    assert!(rendered.0 > 1000 && rendered.1 > 1000, "{rendered:?}");
}

/// A recursive conversion, as a logger would write one.
fn to_json(value: &Bson) -> serde_json::Value {
    match value {
        Bson::Document(document) => document.iter().map(|(key, value)| (key.clone(), to_json(value))).collect(),
        Bson::Array(items) => items.iter().map(to_json).collect(),
        other => serde_json::Value::String(other.to_string()),
    }
}
