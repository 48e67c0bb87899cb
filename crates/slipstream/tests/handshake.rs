//! The handshake and admin commands over a real socket against the real
//! binary: OP_MSG `hello`, legacy OP_QUERY `isMaster` answered with
//! OP_REPLY, the awaitable `hello` of monitors, moreToCome, and the
//! commands drivers and pymongo's test suite send before any test.

mod common;

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use common::{Client, Node};
use slipstream_wire::{encode_op_msg, encode_op_query, msg_flags, reply_flags, Message};

/// What a driver's first hello says of itself (MongoDB requires these).
fn driver_metadata() -> Document {
    doc! {"driver": {"name": "test", "version": "1"}, "os": {"type": "Linux"}}
}

fn check_hello_fields(reply: &Document) {
    assert_eq!(reply.get_f64("ok").ok(), Some(1.0), "{reply}");
    assert_eq!(reply.get_i32("minWireVersion").ok(), Some(0));
    assert_eq!(reply.get_i32("maxWireVersion").ok(), Some(21));
    assert_eq!(reply.get_i32("maxBsonObjectSize").ok(), Some(16 * 1024 * 1024));
    assert_eq!(reply.get_i32("maxMessageSizeBytes").ok(), Some(48_000_000));
    assert_eq!(reply.get_i32("maxWriteBatchSize").ok(), Some(100_000));
    assert_eq!(reply.get_i32("logicalSessionTimeoutMinutes").ok(), Some(30));
    assert_eq!(reply.get_bool("readOnly").ok(), Some(false));
    assert!(reply.get_datetime("localTime").is_ok());
    assert!(matches!(reply.get("connectionId"), Some(Bson::Int64(_) | Bson::Int32(_))));
    let topology = reply.get_document("topologyVersion").unwrap();
    assert!(topology.get_object_id("processId").is_ok());
    // The Java driver rejects an Int32 counter.
    assert!(matches!(topology.get("counter"), Some(Bson::Int64(_))), "{topology}");
    let last_write = reply.get_document("lastWrite").unwrap();
    for key in ["opTime", "majorityOpTime"] {
        assert!(last_write.get_document(key).unwrap().get_timestamp("ts").is_ok());
    }
    for key in ["lastWriteDate", "majorityWriteDate"] {
        assert!(last_write.get_datetime(key).is_ok());
    }
}

#[test]
fn handshake_and_admin_commands() {
    let node = Node::start(&["--enable-test-commands"]);
    let mut client = node.client();

    // pymongo's first message: isMaster with helloOk.
    let reply = client
        .command(&doc! {"ismaster": 1, "helloOk": true, "client": driver_metadata(), "compression": [], "$db": "admin"})
        .unwrap();
    check_hello_fields(&reply);
    assert_eq!(reply.get_bool("ismaster").ok(), Some(true));
    assert_eq!(reply.get_bool("helloOk").ok(), Some(true));

    let reply = client.command(&doc! {"hello": 1, "$db": "admin"}).unwrap();
    check_hello_fields(&reply);
    assert_eq!(reply.get_bool("isWritablePrimary").ok(), Some(true));
    assert!(!reply.contains_key("helloOk"));

    // A second connection gets another connectionId.
    let other = node.client().command(&doc! {"hello": 1, "$db": "admin"}).unwrap();
    assert_ne!(other.get("connectionId"), reply.get("connectionId"));

    let build = client.command(&doc! {"buildInfo": 1, "$db": "admin"}).unwrap();
    assert_eq!(build.get_str("version").ok(), Some("7.0.0"));
    assert_eq!(build.get_array("versionArray").unwrap().len(), 4);

    let params = client.command(&doc! {"getParameter": "*", "$db": "admin"}).unwrap();
    assert_eq!(params.get_bool("enableTestCommands").ok(), Some(true), "{params}");
    let fcv = client.command(&doc! {"getParameter": 1, "featureCompatibilityVersion": 1, "$db": "admin"}).unwrap();
    assert_eq!(fcv.get_document("featureCompatibilityVersion").unwrap().get_str("version").ok(), Some("7.0"));
    let unknown = client.command(&doc! {"getParameter": 1, "noSuchParameter": 1, "$db": "admin"}).unwrap();
    assert_eq!(unknown.get_f64("ok").ok(), Some(0.0));

    let opts = client.command(&doc! {"getCmdLineOpts": 1, "$db": "admin"}).unwrap();
    assert_eq!(opts.get_document("parsed").unwrap().get_document("net").unwrap().get_i32("port").ok(), Some(i32::from(node.port)));

    let status = client.command(&doc! {"serverStatus": 1, "$db": "admin"}).unwrap();
    assert_eq!(status.get_f64("ok").ok(), Some(1.0), "{status}");
    assert_eq!(status.get_document("storageEngine").unwrap().get_str("name").ok(), Some("slipstream"));
    assert!(status.get_document("connections").unwrap().get_i32("current").unwrap() >= 1);
    assert!(status.get_document("opcounters").unwrap().get_i64("command").unwrap() >= 5);
    assert!(status.get_document("mem").unwrap().get_i32("resident").unwrap() > 0);
    assert!(status.get_document("slipstream").unwrap().contains_key("journal"));

    let me = client.command(&doc! {"whatsmyuri": 1, "$db": "admin"}).unwrap();
    assert!(me.get_str("you").unwrap().starts_with("127.0.0.1:"));
    let conn = client.command(&doc! {"connectionStatus": 1, "$db": "admin"}).unwrap();
    assert!(conn.get_document("authInfo").is_ok());
    let host = client.command(&doc! {"hostInfo": 1, "$db": "admin"}).unwrap();
    assert!(host.get_document("system").unwrap().get_i32("numCores").unwrap() >= 1);

    let log = client.command(&doc! {"getLog": "global", "$db": "admin"}).unwrap();
    let lines = log.get_array("log").unwrap();
    assert!(!lines.is_empty());
    let line: serde_json::Value = serde_json::from_str(lines[0].as_str().unwrap()).unwrap();
    assert!(line["t"]["$date"].is_string() && line["c"].is_string() && line["id"].is_number());
    let names = client.command(&doc! {"getLog": "*", "$db": "admin"}).unwrap();
    assert_eq!(names.get_array("names").unwrap().len(), 2);
    let warnings = client.command(&doc! {"getLog": "startupWarnings", "$db": "admin"}).unwrap();
    assert_eq!(warnings.get_array("log").unwrap().len(), 1, "test commands are enabled: one warning");

    // Unknown commands, missing $db, generic arguments.
    let unknown = client.command(&doc! {"foo": 1, "$db": "admin"}).unwrap();
    assert_eq!(unknown.get_i32("code").ok(), Some(59));
    assert_eq!(unknown.get_str("codeName").ok(), Some("CommandNotFound"));
    assert_eq!(unknown.get_str("errmsg").ok(), Some("no such command: 'foo'"));
    let no_db = client.command(&doc! {"ping": 1}).unwrap();
    assert_eq!(no_db.get_i32("code").ok(), Some(40571));
    let generic = client
        .command(&doc! {"ping": 1, "$db": "admin", "lsid": {"id": bson::Uuid::new()}, "$clusterTime": {}, "comment": "x",
                        "maxTimeMS": 1000, "apiVersion": "1", "$readPreference": {"mode": "primary"}})
        .unwrap();
    assert_eq!(generic.get_f64("ok").ok(), Some(1.0));
    // A session id must be a UUID, as MongoDB's parser requires.
    let bad_lsid = client.command(&doc! {"ping": 1, "$db": "admin", "lsid": {"id": Bson::Null}}).unwrap();
    assert_eq!(bad_lsid.get_i32("code").ok(), Some(14));
}

#[test]
fn legacy_op_query_is_answered_with_op_reply() {
    let node = Node::start(&[]);
    let mut client = node.client();
    let request_id = client.request_id();
    let is_master = doc! {"isMaster": 1, "client": driver_metadata()};
    client.send(&encode_op_query(request_id, 0, "admin.$cmd", 0, -1, &is_master).unwrap()).unwrap();
    let Message::Reply(reply) = client.receive().unwrap() else { panic!("expected OP_REPLY") };
    assert_eq!(reply.header.response_to, request_id);
    assert_eq!(reply.response_flags & reply_flags::QUERY_FAILURE, 0);
    assert_eq!(reply.cursor_id, 0);
    assert_eq!(reply.documents.len(), 1);
    check_hello_fields(&reply.documents[0]);
    assert_eq!(reply.documents[0].get_bool("ismaster").ok(), Some(true));

    // The same connection then speaks OP_MSG, as mongosh does.
    assert_eq!(client.command(&doc! {"ping": 1, "$db": "admin"}).unwrap().get_f64("ok").ok(), Some(1.0));

    // A legacy query on a collection fails with QueryFailure and $err.
    let request_id = client.request_id();
    client.send(&encode_op_query(request_id, 0, "test.coll", 0, 1, &doc! {"a": 1}).unwrap()).unwrap();
    let Message::Reply(reply) = client.receive().unwrap() else { panic!("expected OP_REPLY") };
    assert_ne!(reply.response_flags & reply_flags::QUERY_FAILURE, 0);
    assert!(reply.documents[0].get_str("$err").is_ok());
}

#[test]
fn monitoring_hello_waits_and_more_to_come_gets_no_reply() {
    let node = Node::start(&[]);
    let mut client = node.client();
    let first = client.command(&doc! {"hello": 1, "$db": "admin"}).unwrap();
    let topology = first.get_document("topologyVersion").unwrap().clone();

    // Same topologyVersion with exhaustAllowed: a stream of replies, each
    // after maxAwaitTimeMS, flagged moreToCome and answering the previous.
    let started = Instant::now();
    let body = doc! {"hello": 1, "topologyVersion": topology.clone(), "maxAwaitTimeMS": 300, "$db": "admin"};
    let request_id = client.request_id();
    client.send(&encode_op_msg(request_id, 0, msg_flags::EXHAUST_ALLOWED, &body, &[]).unwrap()).unwrap();
    let mut response_to = request_id;
    for round in 1..=2u32 {
        let Message::Msg(reply) = client.receive().unwrap() else { panic!("expected OP_MSG") };
        assert_eq!(reply.header.response_to, response_to, "round {round}");
        assert!(reply.more_to_come(), "round {round} is flagged moreToCome");
        assert!(started.elapsed() >= Duration::from_millis(280 * u64::from(round)), "round {round} after {:?}", started.elapsed());
        check_hello_fields(&reply.body);
        response_to = reply.header.request_id;
    }
    drop(client);

    // Without exhaustAllowed: one reply after the wait.
    let mut client = node.client();
    let started = Instant::now();
    let (request_id, response_to, reply) = client.command_with_flags(&body, 0).unwrap();
    assert_eq!(request_id, response_to);
    assert!(started.elapsed() >= Duration::from_millis(280), "answered after {:?}", started.elapsed());
    check_hello_fields(&reply);

    // Another process's topologyVersion: answered at once.
    let started = Instant::now();
    let stale = doc! {"processId": bson::oid::ObjectId::new(), "counter": 0_i64};
    let body = doc! {"hello": 1, "topologyVersion": stale, "maxAwaitTimeMS": 10_000, "$db": "admin"};
    client.command_with_flags(&body, 0).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));

    // moreToCome: no reply; the next reply answers the next request.
    let request_id = client.request_id();
    let end_sessions = doc! {"endSessions": [], "$db": "admin", "writeConcern": {"w": 0}};
    client.send(&encode_op_msg(request_id, 0, msg_flags::MORE_TO_COME, &end_sessions, &[]).unwrap()).unwrap();
    let reply = client.command(&doc! {"ping": 1, "$db": "admin"}).unwrap();
    assert_eq!(reply.get_f64("ok").ok(), Some(1.0));

    // A checksummed request is verified and answered.
    let (_, _, reply) = client.command_with_flags(&doc! {"ping": 1, "$db": "admin"}, msg_flags::CHECKSUM_PRESENT).unwrap();
    assert_eq!(reply.get_f64("ok").ok(), Some(1.0));
}

#[test]
fn sigterm_and_shutdown_command_exit_cleanly() {
    let mut node = Node::start(&[]);
    assert!(node.stop().success(), "SIGTERM exits 0");

    let mut node = Node::start(&[]);
    let mut client = node.client();
    let refused = client.command(&doc! {"shutdown": 1, "$db": "test"}).unwrap();
    assert_eq!(refused.get_i32("code").ok(), Some(13));
    // The reply may or may not arrive before the connection closes.
    let _ = client.command(&doc! {"shutdown": 1, "force": true, "$db": "admin"});
    assert!(node.wait_exit().success(), "shutdown exits 0");
    assert!(Client::connect(node.port).is_err(), "nothing listens after shutdown");
}

#[test]
fn connections_beyond_the_limit_are_closed_logged_and_counted() {
    let node = Node::start(&["--max-connections", "2"]);
    // Node::start's readiness ping connection is closed by now; give the
    // node a moment to release its slot.
    std::thread::sleep(Duration::from_millis(200));
    let mut first = node.client();
    let mut second = node.client();
    assert_eq!(first.command(&doc! {"ping": 1, "$db": "admin"}).unwrap().get_f64("ok").ok(), Some(1.0));
    let status = second.command(&doc! {"serverStatus": 1, "$db": "admin"}).unwrap();
    assert_eq!(status.get_document("connections").unwrap().get_i32("available").ok(), Some(0));

    // The third client is closed at once, as MongoDB does (it waited in
    // the kernel's backlog, a node that looked hung), not left waiting.
    let mut third = node.client();
    third.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request_id = third.request_id();
    let _ = third.send(&encode_op_msg(request_id, 0, 0, &doc! {"ping": 1, "$db": "admin"}, &[]).unwrap());
    assert!(third.receive().is_err(), "served beyond the connection limit");
    let status = second.command(&doc! {"serverStatus": 1, "$db": "admin"}).unwrap();
    assert_eq!(status.get_document("connections").unwrap().get_i64("rejected").ok(), Some(1), "{status}");

    // Closing one connection frees a slot for the next client.
    drop(first);
    std::thread::sleep(Duration::from_millis(200));
    let mut fourth = node.client();
    assert_eq!(fourth.command(&doc! {"ping": 1, "$db": "admin"}).unwrap().get_f64("ok").ok(), Some(1.0));
    let log = node.log_text();
    assert!(log.contains("Connection refused because there are too many open connections"), "{log}");
}

#[test]
fn transactions_are_refused_on_a_standalone() {
    let node = Node::start(&[]);
    let mut client = node.client();
    let body = doc! {"insert": "c", "documents": [{"_id": 1}], "lsid": {"id": bson::Uuid::new()}, "txnNumber": 1_i64, "$db": "test"};
    let reply = client.command(&body).unwrap();
    assert_eq!(reply.get_i32("code").ok(), Some(20), "{reply}");
    let mut body = doc! {"find": "c", "startTransaction": true, "autocommit": false, "txnNumber": 2_i64, "$db": "test"};
    // Without a session the argument check answers first, as MongoDB's.
    assert_eq!(client.command(&body).unwrap().get_i32("code").ok(), Some(72));
    body.insert("lsid", doc! {"id": bson::Uuid::new()});
    assert_eq!(client.command(&body).unwrap().get_i32("code").ok(), Some(20));
    // Nothing was written by the refused insert.
    let found = client.command(&doc! {"find": "c", "$db": "test"}).unwrap();
    assert_eq!(found.get_f64("ok").ok(), Some(1.0), "{found}");
    assert!(found.get_document("cursor").unwrap().get_array("firstBatch").unwrap().is_empty());
}

#[test]
fn fail_command_exists_only_with_test_commands() {
    let node = Node::start(&[]);
    let reply = node
        .client()
        .command(&doc! {"configureFailPoint": "failCommand", "mode": "alwaysOn", "data": {"failCommands": ["ping"], "errorCode": 91}, "$db": "admin"})
        .unwrap();
    assert_eq!(reply.get_i32("code").ok(), Some(59));
    drop(node);

    let node = Node::start(&["--enable-test-commands"]);
    let mut client = node.client();
    let configure = doc! {"configureFailPoint": "failCommand", "mode": {"times": 1},
                          "data": {"failCommands": ["ping"], "errorCode": 91, "errorLabels": ["RetryableWriteError"]}, "$db": "admin"};
    assert_eq!(client.command(&configure).unwrap().get_f64("ok").ok(), Some(1.0));
    let failed = client.command(&doc! {"ping": 1, "$db": "admin"}).unwrap();
    assert_eq!(failed.get_i32("code").ok(), Some(91));
    assert_eq!(failed.get_array("errorLabels").unwrap().len(), 1);
    assert_eq!(client.command(&doc! {"ping": 1, "$db": "admin"}).unwrap().get_f64("ok").ok(), Some(1.0), "times: 1 fired once");

    let close = doc! {"configureFailPoint": "failCommand", "mode": {"times": 1},
                      "data": {"failCommands": ["ping"], "closeConnection": true}, "$db": "admin"};
    client.command(&close).unwrap();
    assert!(client.command(&doc! {"ping": 1, "$db": "admin"}).is_err(), "connection closed without a reply");
    assert_eq!(node.client().command(&doc! {"ping": 1, "$db": "admin"}).unwrap().get_f64("ok").ok(), Some(1.0));
}

#[test]
fn an_empty_set_name_is_a_standalone() {
    // MongoDB's `--replSet ""` is no set; it made a member nobody could
    // initiate (93 for the empty name) or write to.
    let node = Node::start(&["--replSet", ""]);
    let mut client = node.client();
    let hello = client.command(&doc! {"hello": 1, "$db": "admin"}).unwrap();
    assert_eq!(hello.get_bool("isWritablePrimary").ok(), Some(true), "{hello}");
    assert!(hello.get("setName").is_none(), "{hello}");
    let inserted = client.command(&doc! {"insert": "c", "documents": [{"_id": 1}], "$db": "test"}).unwrap();
    assert_eq!(inserted.get_i32("n").ok(), Some(1), "{inserted}");
}
