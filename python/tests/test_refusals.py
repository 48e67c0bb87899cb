"""Where MongoDB 7.0 refuses a request, so does Slipstream, with its code (issue 10, items 1 and 2)."""

import socket
import struct

import bson
import pytest
from bson import SON
from bson.raw_bson import RawBSONDocument
from pymongo.errors import BulkWriteError, OperationFailure


def raw_document(*pairs) -> RawBSONDocument:
    """A BSON document with the fields in order, repeated names kept (a dict cannot hold them)."""
    elements = b"".join(bson.encode({key: value})[4:-1] for key, value in pairs)
    return RawBSONDocument((len(elements) + 5).to_bytes(4, "little") + elements + b"\x00")


def code_of(database, command) -> int:
    with pytest.raises(OperationFailure) as failure:
        database.command(command)
    return failure.value.code


def open_cursor(coll, documents=5, batch=1, **extra):
    coll.insert_many([{"x": i} for i in range(documents)])
    return coll.database.command(SON([("find", coll.name), ("batchSize", batch), *extra.items()]))["cursor"]["id"]


# Item 1: a document with two _id fields is refused, not stored with the last one.

def test_insert_with_two_ids_is_refused(coll):
    twice = raw_document(("_id", 1), ("x", "a"), ("_id", 2))
    with pytest.raises(BulkWriteError) as failure:
        coll.insert_many([twice])
    error = failure.value.details["writeErrors"][0]
    assert (error["index"], error["code"]) == (0, 2)
    assert "multiple _id" in error["errmsg"]
    assert coll.count_documents({}) == 0


def test_insert_with_two_ids_fails_only_that_document_when_unordered(coll):
    twice = raw_document(("_id", 1), ("_id", 2))
    reply = coll.database.command(SON([("insert", coll.name), ("documents", [{"_id": 0}, twice, {"_id": 3}]),
                                       ("ordered", False)]))
    assert reply["n"] == 2
    assert [(e["index"], e["code"]) for e in reply["writeErrors"]] == [(1, 2)]
    assert sorted(d["_id"] for d in coll.find()) == [0, 3]


def test_an_embedded_document_may_repeat_id(coll):
    # Only the stored document's own _id must be unique: MongoDB stores an
    # embedded document with repeated fields as it comes.
    inner = raw_document(("_id", 2), ("_id", 3))
    coll.insert_one(raw_document(("_id", 1), ("a", inner)))
    assert coll.find_one({"_id": 1})["a"]["_id"] in (2, 3)


# Item 1: getMore arguments.

def test_get_more_batch_size_zero_means_no_batch_size(coll):
    cursor_id = open_cursor(coll, documents=5, batch=1)
    reply = coll.database.command(SON([("getMore", cursor_id), ("collection", coll.name), ("batchSize", 0)]))
    assert [d["x"] for d in reply["cursor"]["nextBatch"]] == [1, 2, 3, 4]


def test_get_more_max_time_ms_on_a_plain_cursor_is_refused(coll):
    cursor_id = open_cursor(coll)
    command = SON([("getMore", cursor_id), ("collection", coll.name), ("maxTimeMS", 100)])
    assert code_of(coll.database, command) == 2
    # The cursor survives the refused getMore.
    reply = coll.database.command(SON([("getMore", cursor_id), ("collection", coll.name)]))
    assert len(reply["cursor"]["nextBatch"]) == 4


@pytest.mark.parametrize("field, value, code", [
    ("maxTimeMS", 1.5, 2),
    ("maxTimeMS", -1, 2),
    ("maxTimeMS", 2 ** 31, 2),
    ("maxTimeMS", "10", 2),
    ("batchSize", -1, 51024),
    ("batchSize", "1", 14),
    ("collection", 5, 14),
    ("notAnOption", 1, 40415),
])
def test_get_more_argument_errors(coll, field, value, code):
    cursor_id = open_cursor(coll)
    command = SON([("getMore", cursor_id), ("collection", coll.name), (field, value)])
    if field == "collection":
        command = SON([("getMore", cursor_id), ("collection", value)])
    assert code_of(coll.database, command) == code


def test_get_more_from_another_session_is_refused(client, coll):
    coll.insert_many([{"x": i} for i in range(5)])
    db = coll.database
    with client.start_session() as opener, client.start_session() as other:
        first = db.command(SON([("find", coll.name), ("batchSize", 1)]), session=opener)
        cursor_id = first["cursor"]["id"]
        with pytest.raises(OperationFailure) as failure:
            db.command(SON([("getMore", cursor_id), ("collection", coll.name)]), session=other)
        assert failure.value.code == 50738
        reply = db.command(SON([("getMore", cursor_id), ("collection", coll.name)]), session=opener)
        assert len(reply["cursor"]["nextBatch"]) == 4


# Item 1: find arguments.

@pytest.mark.parametrize("field, value, code", [
    ("maxTimeMS", 1.5, 2),
    ("maxTimeMS", -5, 2),
    ("maxTimeMS", 2 ** 40, 2),
    ("maxTimeMS", "ten", 2),
    ("notAnOption", 1, 40415),
    ("tailable", "yes", 14),
    # MongoDB's optionalBool flags take only booleans.
    ("singleBatch", 1, 14),
    ("allowDiskUse", 0, 14),
    ("noCursorTimeout", None, 14),
    ("allowPartialResults", 1.0, 14),
])
def test_find_argument_errors(coll, field, value, code):
    assert code_of(coll.database, SON([("find", coll.name), (field, value)])) == code


@pytest.mark.parametrize("command", ["ping", "count"])
def test_generic_max_time_ms_is_checked_for_every_command(db, command):
    assert code_of(db, SON([(command, "c" if command == "count" else 1), ("maxTimeMS", -1)])) == 2


# Item 1: Stable API parameters.

@pytest.mark.parametrize("extra, code", [
    ({"apiStrict": True}, 4886600),
    ({"apiDeprecationErrors": False}, 4886600),
    ({"apiVersion": 1}, 14),
    ({"apiVersion": "2"}, 322),
    ({"apiVersion": "1", "apiStrict": "true"}, 14),
    ({"apiVersion": "1", "apiDeprecationErrors": "false"}, 14),
])
def test_api_parameter_errors(db, extra, code):
    assert code_of(db, SON([("ping", 1), *extra.items()])) == code


def test_api_strict_refuses_commands_outside_version_1(db):
    assert code_of(db, SON([("buildInfo", 1), ("apiVersion", "1"), ("apiStrict", True)])) == 323
    assert code_of(db, SON([("isMaster", 1), ("apiVersion", "1"), ("apiStrict", True)])) == 323
    assert db.command(SON([("buildInfo", 1), ("apiVersion", "1")]))["ok"] == 1.0
    # Fields and stages outside version 1 inside version-1 commands.
    assert code_of(db, SON([("find", "c"), ("tailable", True), ("apiVersion", "1"), ("apiStrict", True)])) == 323
    current_op = SON([("aggregate", 1), ("pipeline", [{"$currentOp": {}}]), ("cursor", {}),
                      ("apiVersion", "1"), ("apiStrict", True)])
    assert code_of(db.client.admin, current_op) == 323
    assert db.command(SON([("ping", 1), ("apiVersion", "1"), ("apiStrict", True),
                           ("apiDeprecationErrors", True)]))["ok"] == 1.0


def test_versioned_client_runs_version_1_commands(node, coll):
    from pymongo import MongoClient
    from pymongo.server_api import ServerApi
    strict = MongoClient(node.uri, server_api=ServerApi("1", strict=True))
    try:
        collection = strict[coll.database.name][coll.name]
        collection.insert_one({"_id": 1})
        assert collection.find_one() == {"_id": 1}
        with pytest.raises(OperationFailure) as failure:
            strict.admin.command("getLog", "global")
        assert failure.value.code == 323
    finally:
        strict.close()


# Item 1 and 2: what a standalone cannot do.

def test_snapshot_read_on_a_standalone_is_refused(coll):
    assert code_of(coll.database, SON([("find", coll.name), ("readConcern", {"level": "snapshot"})])) == 123


def test_change_stream_on_a_standalone_answers_40573(coll):
    with pytest.raises(OperationFailure) as failure:
        coll.watch()
    assert failure.value.code == 40573
    with pytest.raises(OperationFailure) as failure:
        coll.database.watch()
    assert failure.value.code == 40573


# Item 2: arguments are checked before the catalog is looked at.

def raw_command(node, command: SON) -> dict:
    """One OP_MSG with the whole command in its body (pymongo would move
    documents/updates/deletes into document sequences, and refuses
    non-arrays there)."""
    payload = struct.pack("<I", 0) + b"\x00" + bson.encode(command)
    message = struct.pack("<iiii", 16 + len(payload), 7, 0, 2013) + payload
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as sock:
        sock.sendall(message)
        header = sock.recv(16)
        length = struct.unpack("<i", header[:4])[0]
        rest = b""
        while len(rest) < length - 16:
            rest += sock.recv(length - 16 - len(rest))
    return bson.decode(rest[5:])


@pytest.mark.parametrize("command", [
    SON([("insert", "v"), ("documents", "not an array")]),
    SON([("update", "v"), ("updates", 5)]),
    SON([("delete", "v"), ("deletes", {"q": {}})]),
    SON([("findAndModify", "v"), ("query", "not a document"), ("remove", True)]),
])
def test_write_argument_types_are_checked_before_the_view_lookup(node, db, command):
    db.command(SON([("create", "v"), ("viewOn", "c"), ("pipeline", [])]))
    command["$db"] = db.name
    reply = raw_command(node, command)
    assert (reply["ok"], reply["code"]) == (0.0, 14), reply
    # With good arguments the view is what is refused.
    assert code_of(db, SON([("insert", "v"), ("documents", [{"x": 1}])])) == 166


def test_get_more_arguments_are_checked_before_the_cursor_lookup(db):
    command = SON([("getMore", bson.Int64(12345)), ("collection", "c"), ("notAnOption", 1)])
    assert code_of(db, command) == 40415
    assert code_of(db, SON([("getMore", bson.Int64(12345)), ("collection", "c")])) == 43


@pytest.mark.parametrize("command", [
    SON([("count", "c"), ("querry", {})]),
    SON([("distinct", "c"), ("key", "a"), ("filter", {})]),
    SON([("killCursors", "c"), ("cursors", []), ("all", True)]),
])
def test_count_distinct_and_kill_cursors_refuse_unknown_fields(db, command):
    assert code_of(db, command) == 40415


def test_two_ids_are_refused_in_the_command_body_too(node, db):
    # The documents inside the body (not an OP_MSG document sequence).
    twice = raw_document(("_id", 7), ("_id", 8))
    command = SON([("insert", "c"), ("documents", [twice]), ("$db", db.name)])
    reply = raw_command(node, command)
    assert reply["n"] == 0
    assert reply["writeErrors"][0]["code"] == 2
    assert db.c.count_documents({}) == 0


def test_where_is_refused_as_mongodb_without_javascript(coll):
    """MongoDB 7.0 with JavaScript disabled: a query's $where is 6108304, a
    pipeline's $match refuses it with BadValue, a non-code $where is BadValue."""
    coll.insert_one({"a": 1})
    for run in (
        lambda: list(coll.find({"$where": "this.a == 1"})),
        lambda: coll.database.command("count", coll.name, query={"$where": "true"}),
        lambda: coll.delete_many({"$where": "true"}),
        lambda: list(coll.database.missing.find({"$where": "true"})),
    ):
        with pytest.raises(OperationFailure) as failure:
            run()
        assert failure.value.code == 6108304
        assert "no globalScriptEngine in $where parsing" in str(failure.value)
    with pytest.raises(OperationFailure) as failure:
        coll.count_documents({"$where": "true"})  # pymongo counts through a $match
    assert failure.value.code == 2 and "$where is not allowed in this context" in str(failure.value)
    with pytest.raises(OperationFailure) as failure:
        list(coll.aggregate([{"$match": {"$or": [{"$where": "true"}, {"a": 1}]}}]))
    assert failure.value.code == 2
    with pytest.raises(OperationFailure) as failure:
        list(coll.find({"$where": 5}))
    assert failure.value.code == 2
    assert coll.count_documents({}) == 1


def test_function_is_refused_as_mongodb_without_javascript(coll):
    """MongoDB 7.0 with JavaScript disabled: `$function` parses (its fields
    are checked) and fails with 31264 when evaluated; a pipeline that never
    evaluates it succeeds. A validator refuses it (4660800)."""
    function = {"$function": {"body": "function(a) { return a; }", "args": ["$a"], "lang": "js"}}
    assert list(coll.aggregate([{"$project": {"f": function}}])) == []
    coll.insert_one({"a": 1})
    for run in (
        lambda: list(coll.aggregate([{"$project": {"f": function}}])),
        lambda: list(coll.find({"$expr": function})),
    ):
        with pytest.raises(OperationFailure) as failure:
            run()
        assert failure.value.code == 31264
        assert "Cannot run server-side javascript without the javascript engine enabled" in str(failure.value)
    for spec, code in (
        ("x", 31260),
        ({"args": [], "lang": "js"}, 31261),
        ({"body": "$a", "args": [], "lang": "js"}, 31432),
        ({"body": 5, "args": [], "lang": "js"}, 31262),
        ({"body": "function() {}", "lang": "js"}, 31263),
        ({"body": "function() {}", "args": []}, 31418),
        ({"body": "function() {}", "args": [], "lang": "python"}, 31419),
    ):
        with pytest.raises(OperationFailure) as failure:
            list(coll.aggregate([{"$project": {"f": {"$function": spec}}}]))
        assert failure.value.code == code, (spec, failure.value)
    with pytest.raises(OperationFailure) as failure:
        coll.database.create_collection("validated", validator={"$expr": function})
    assert failure.value.code == 4660800


# Write and read concern documents are parsed as strictly as MongoDB 7.0
# parses them, rather than with their unknown fields ignored.

@pytest.mark.parametrize("write_concern, code", [
    ({"w": 1, "foo": 1}, 40415),
    ({"w": 1, "j": True, "fsync": True}, 9),
    ({"w": 51}, 9),
    ({"w": 1, "provenance": "mine"}, 2),
])
def test_write_concern_documents_are_parsed_strictly(db, write_concern, code):
    assert code_of(db, SON([("insert", "wc"), ("documents", [{"x": 1}]), ("writeConcern", write_concern)])) == code


def test_write_concern_legacy_fields_are_accepted(db):
    legacy = {"w": 1, "wElectionId": 1, "wOpTime": 1, "getLastError": 1, "provenance": "clientSupplied",
              "fsync": True}
    assert db.command(SON([("insert", "wc"), ("documents", [{"x": 1}]), ("writeConcern", legacy)]))["n"] == 1


@pytest.mark.parametrize("read_concern, code", [
    ({"level": "local", "foo": 1}, 72),
    ({"afterOpTime": {"ts": bson.Timestamp(1, 1), "t": 1}}, 72),
])
def test_read_concern_documents_are_parsed_strictly(db, read_concern, code):
    assert code_of(db, SON([("find", "wc"), ("readConcern", read_concern)])) == code
