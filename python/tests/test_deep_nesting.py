"""Deep nesting never crashes a node (issue 6, item 1).

A message whose BSON nests deeper than maxBSONDepth (200) is refused with
Overflow (15) before anything decodes it; a document nested deeper than
100 levels is refused for storage (Overflow); and the deepest message the
node accepts goes through every command family without overflowing a
worker thread's stack. Inputs that nest without BSON nesting (long dotted
paths, `$reduce`, stage after stage, sub-pipelines and views) hit a named
limit with MongoDB's error instead.

Depth is counted as MongoDB's validator counts it: the command body is
depth 0 and each embedded document or array one more. Bodies deeper than
pymongo will encode are built as raw BSON and sent over a plain socket.
"""

from __future__ import annotations

import socket
import struct

import bson
import pytest
from bson.son import SON
from pymongo.errors import OperationFailure

MAX_BSON_DEPTH = 200  # MongoDB's maxBSONDepth
STORAGE_LEVELS_MAX = 100  # levels of a stored document, the top level counting as one
OVERFLOW = 15
OP_MSG = 2013


# ---------------------------------------------------------------- depth helpers

def depth(value) -> int:
    """The deepest container below `value` (a dict at the top is depth 0)."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                deepest = max(deepest, level + 1)
                stack.append((child, level + 1))
    return deepest


def nest(levels: int, leaf=1, key: str = "a"):
    """`{key: {key: ... leaf}}`: `levels` documents around `leaf`."""
    value = leaf
    for _ in range(levels):
        value = {key: value}
    return value


def chain(levels: int, leaf, wrap):
    """`wrap` applied `levels` times around `leaf`."""
    value = leaf
    for _ in range(levels):
        value = wrap(value)
    return value


def deepest(build) -> dict:
    """The body `build(n)` for the largest n that keeps it within
    maxBSONDepth, checked to reach the limit (or one short of it, when a
    step of the builder adds two levels)."""
    low, high = 0, 1
    while depth(build(high)) <= MAX_BSON_DEPTH:
        high *= 2
    while high - low > 1:
        middle = (low + high) // 2
        if depth(build(middle)) <= MAX_BSON_DEPTH:
            low = middle
        else:
            high = middle
    body = build(low)
    assert depth(body) >= MAX_BSON_DEPTH - 2, (depth(body), body)
    return body


def raw_nested(levels: int) -> bytes:
    """`{a: {a: ... {a: 1}}}` with `levels` embedded documents, encoded in
    one pass (no recursion, so any depth can be built)."""
    innermost = 12  # {a: int32}
    out = bytearray()
    for level in range(levels, 0, -1):
        out += struct.pack("<i", innermost + 8 * level) + b"\x03a\x00"
    out += struct.pack("<i", innermost) + b"\x10a\x00" + struct.pack("<i", 1) + b"\x00"
    out += b"\x00" * levels
    return bytes(out)


def raw_body(prefix: dict, field: str, nested: bytes, suffix: dict) -> bytes:
    """A command body: the fields of `prefix`, then `field` holding the raw
    document `nested`, then the fields of `suffix`."""
    elements = bson.encode(prefix)[4:-1] + b"\x03" + field.encode() + b"\x00" + nested + bson.encode(suffix)[4:-1]
    return struct.pack("<i", len(elements) + 5) + elements + b"\x00"


def op_msg(body: bytes, request_id: int = 1) -> bytes:
    payload = struct.pack("<I", 0) + b"\x00" + body
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, OP_MSG) + payload


def op_query(query: bytes, request_id: int = 1) -> bytes:
    payload = struct.pack("<i", 0) + b"admin.$cmd\x00" + struct.pack("<ii", 0, -1) + query
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, 2004) + payload


def round_trip(node, message: bytes) -> bytes:
    """Sends one message on a fresh connection and reads one whole reply."""
    with socket.create_connection(("127.0.0.1", node.port), timeout=30) as sock:
        sock.sendall(message)
        reply = b""
        while len(reply) < 4 or len(reply) < struct.unpack("<i", reply[:4])[0]:
            chunk = sock.recv(1 << 16)
            assert chunk, f"the node closed the connection after {len(reply)} bytes"
            reply += chunk
        return reply


def msg_reply(raw: bytes) -> dict:
    assert struct.unpack("<i", raw[12:16])[0] == OP_MSG
    return bson.decode(raw[21:])


def assert_alive(node, client):
    assert node.process.poll() is None, f"the node died; log:\n{node.log_tail()}"
    assert client.admin.command("ping")["ok"] == 1.0


# ------------------------------------------- (a), (b): too deep for a message

@pytest.mark.parametrize("levels", [MAX_BSON_DEPTH, 2_000, 100_000])
def test_a_message_nested_past_max_bson_depth_is_overflow(node, client, levels):
    # `filter` is at depth 1, so `levels` embedded documents inside it put
    # the innermost one at depth levels + 1 > 200.
    body = raw_body({"find": "c"}, "filter", raw_nested(levels), {"$db": "test"})
    reply = msg_reply(round_trip(node, op_msg(body)))
    assert reply["ok"] == 0
    assert (reply["code"], reply["codeName"]) == (OVERFLOW, "Overflow")
    assert reply["errmsg"].startswith("BSONObj exceeds maximum nested object depth in element with field name 'filter.a.a")
    assert_alive(node, client)


def test_depth_200_is_the_deepest_message_accepted(node, client):
    body = raw_body({"find": "c"}, "filter", raw_nested(MAX_BSON_DEPTH - 1), {"$db": "test"})
    reply = msg_reply(round_trip(node, op_msg(body)))
    assert reply["ok"] == 1.0, reply
    assert_alive(node, client)


def test_too_deep_document_sequence_and_legacy_query_are_overflow(node, client):
    # An insert's document sequence: each document counts from its own top.
    section = b"documents\x00" + raw_nested(MAX_BSON_DEPTH + 1)
    message = bytearray(op_msg(bson.encode({"insert": "c", "$db": "test"})))
    message += b"\x01" + struct.pack("<i", 4 + len(section)) + section
    message[:4] = struct.pack("<i", len(message))
    reply = msg_reply(round_trip(node, bytes(message)))
    assert reply["code"] == OVERFLOW
    # The legacy OP_QUERY handshake answers in OP_REPLY, with $err.
    raw = round_trip(node, op_query(raw_body({"isMaster": 1}, "client", raw_nested(5_000), {})))
    assert struct.unpack("<i", raw[12:16])[0] == 1  # OP_REPLY
    failure = bson.decode(raw[36:])
    assert failure["code"] == OVERFLOW and "$err" in failure
    assert_alive(node, client)


# ------------------------------- (c): the deepest allowed body, every family

def deep_and(n):
    return chain(n, {"a": 1}, lambda inner: {"$and": [inner]})


def deep_expr(n):
    return chain(n, True, lambda inner: {"$and": [inner]})


def deep_add(n):
    return chain(n, 1, lambda inner: {"$add": [inner, 1]})


def deep_literal(n):
    """An expression that evaluates to a document nested n deep: object
    literals, each one an expression of its own."""
    return nest(n, "$x")


def lookup_chain(n, innermost):
    """`$lookup` sub-pipelines nested within MongoDB's limit of 20, the
    innermost holding `innermost(n)`. Each level joins one document, so
    that the levels cost one run each rather than doubling."""
    pipeline = [{"$match": innermost(n)}]
    for _ in range(19):
        pipeline = [{"$match": {"_id": 1}}, {"$lookup": {"from": "c", "as": "j", "pipeline": pipeline}}]
    return pipeline


# name -> builder of a command body from a nesting parameter n; `deepest`
# picks the n that puts the body at exactly maxBSONDepth.
FAMILIES = {
    # find, getMore, count, distinct
    "find filter equality": lambda n: {"find": "c", "filter": {"a": nest(n)}},
    "find filter $and": lambda n: {"find": "c", "filter": deep_and(n)},
    "find filter $or": lambda n: {"find": "c", "filter": chain(n, {"a": 1}, lambda i: {"$or": [i, {"b": 1}]})},
    "find filter $nor": lambda n: {"find": "c", "filter": chain(n, {"a": 1}, lambda i: {"$nor": [i]})},
    "find filter $elemMatch": lambda n: {"find": "c", "filter": chain(n, {"a": 1}, lambda i: {"arr": {"$elemMatch": i}})},
    "find filter $not": lambda n: {"find": "c", "filter": {"a": chain(n, {"$gt": 0}, lambda i: {"$not": i})}},
    "find filter $in": lambda n: {"find": "c", "filter": {"a": {"$in": [nest(n), 1]}}},
    "find filter $expr $and": lambda n: {"find": "c", "filter": {"$expr": deep_expr(n)}},
    "find filter $expr $add": lambda n: {"find": "c", "filter": {"$expr": {"$eq": [deep_add(n), 5]}}},
    "find filter $expr literal": lambda n: {"find": "c", "filter": {"$expr": {"$eq": ["$a", deep_literal(n)]}}},
    "find projection nested": lambda n: {"find": "c", "projection": nest(n, 1)},
    "find projection expression": lambda n: {"find": "c", "projection": {"x": deep_add(n)}},
    "find projection $elemMatch": lambda n: {"find": "c", "projection": {"arr": {"$elemMatch": {"a": nest(n)}}}},
    "find sort and hint": lambda n: {"find": "c", "sort": {"a": 1}, "hint": nest(n)},
    "find min": lambda n: {"find": "c", "min": nest(n), "hint": {"_id": 1}},
    "find let": lambda n: {"find": "c", "filter": {"$expr": {"$eq": ["$$v", "$a"]}}, "let": {"v": nest(n)}},
    "count": lambda n: {"count": "c", "query": deep_and(n)},
    "distinct": lambda n: {"distinct": "c", "key": "a", "query": {"a": nest(n)}},
    # writes
    "insert too deep to store": lambda n: {"insert": "c", "documents": [nest(n)]},
    "update filter": lambda n: {"update": "c", "updates": [{"q": {"a": nest(n)}, "u": {"$set": {"y": 1}}}]},
    "update $set": lambda n: {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"y": nest(n)}}}]},
    "update $push $each": lambda n: {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$push": {"arr": {"$each": [nest(n)]}}}}]},
    "update $addToSet": lambda n: {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$addToSet": {"arr": nest(n)}}}]},
    "update replacement": lambda n: {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"y": nest(n)}}]},
    "update upsert seed": lambda n: {"update": "c", "updates": [{"q": {"_id": 9, "a": nest(n)}, "u": {"$set": {"y": 1}}, "upsert": True}]},
    "update pipeline": lambda n: {"update": "c", "updates": [{"q": {"_id": 1}, "u": [{"$set": {"y": {"$literal": nest(n)}}}]}]},
    "update pipeline expression": lambda n: {"update": "c", "updates": [{"q": {"_id": 1}, "u": [{"$set": {"y": deep_add(n)}}]}]},
    "update arrayFilters": lambda n: {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"arr.$[e].b": 1}}, "arrayFilters": [{"e.a": nest(n)}]}]},
    "delete filter": lambda n: {"delete": "c", "deletes": [{"q": deep_and(n), "limit": 0}]},
    "findAndModify": lambda n: {"findAndModify": "c", "query": {"a": nest(n)}, "update": {"$set": {"y": 1}}},
    "findAndModify update": lambda n: {"findAndModify": "c", "query": {"_id": 1}, "update": {"$set": {"y": nest(n)}}},
    "findAndModify fields": lambda n: {"findAndModify": "c", "query": {"_id": 1}, "update": {"$set": {"y": 1}}, "fields": nest(n, 1)},
    # aggregation stages
    "aggregate $match": lambda n: {"aggregate": "c", "pipeline": [{"$match": deep_and(n)}], "cursor": {}},
    "aggregate $project nested": lambda n: {"aggregate": "c", "pipeline": [{"$project": nest(n, 1)}], "cursor": {}},
    "aggregate $addFields literal": lambda n: {"aggregate": "c", "pipeline": [{"$addFields": {"y": {"$literal": nest(n)}}}, {"$sort": {"y": 1}}], "cursor": {}},
    "aggregate $addFields object expression": lambda n: {"aggregate": "c", "pipeline": [{"$addFields": {"y": deep_literal(n)}}], "cursor": {}},
    "aggregate $group": lambda n: {"aggregate": "c", "pipeline": [{"$group": {"_id": deep_literal(n), "all": {"$push": deep_literal(n)}, "set": {"$addToSet": {"$literal": nest(n)}}}}], "cursor": {}},
    "aggregate $bucket": lambda n: {"aggregate": "c", "pipeline": [{"$bucket": {"groupBy": deep_add(n), "boundaries": [0, 10_000], "default": "other"}}], "cursor": {}},
    "aggregate $sortByCount": lambda n: {"aggregate": "c", "pipeline": [{"$sortByCount": {"$literal": nest(n)}}], "cursor": {}},
    "aggregate $replaceRoot": lambda n: {"aggregate": "c", "pipeline": [{"$replaceRoot": {"newRoot": deep_literal(n)}}], "cursor": {}},
    "aggregate $redact": lambda n: {"aggregate": "c", "pipeline": [{"$redact": {"$cond": [deep_expr(n), "$$KEEP", "$$PRUNE"]}}], "cursor": {}},
    "aggregate $setWindowFields": lambda n: {"aggregate": "c", "pipeline": [{"$setWindowFields": {"sortBy": {"_id": 1}, "output": {"w": {"$push": deep_literal(n)}}}}], "cursor": {}},
    "aggregate $documents": lambda n: {"aggregate": 1, "pipeline": [{"$documents": [nest(n)]}], "cursor": {}},
    "aggregate $unwind after deep": lambda n: {"aggregate": "c", "pipeline": [{"$addFields": {"u": [{"$literal": nest(n)}]}}, {"$unwind": "$u"}], "cursor": {}},
    "aggregate $facet": lambda n: {"aggregate": "c", "pipeline": [{"$facet": {"f": [{"$match": deep_and(n)}], "g": [{"$addFields": {"y": deep_literal(n)}}]}}], "cursor": {}},
    "aggregate $lookup nested": lambda n: {"aggregate": "c", "pipeline": lookup_chain(n, deep_and), "cursor": {}},
    "aggregate $lookup let": lambda n: {"aggregate": "c", "pipeline": [{"$lookup": {"from": "c", "as": "j", "let": {"v": deep_literal(n)}, "pipeline": [{"$match": {"$expr": {"$eq": ["$$v", "$a"]}}}]}}], "cursor": {}},
    "aggregate $graphLookup": lambda n: {"aggregate": "c", "pipeline": [{"$graphLookup": {"from": "c", "startWith": "$a", "connectFromField": "a", "connectToField": "_id", "as": "g", "restrictSearchWithMatch": deep_and(n)}}], "cursor": {}},
    "aggregate $unionWith": lambda n: {"aggregate": "c", "pipeline": [{"$unionWith": {"coll": "c", "pipeline": [{"$match": deep_and(n)}]}}], "cursor": {}},
    "aggregate on a view": lambda n: {"aggregate": "v2", "pipeline": [{"$match": deep_and(n)}], "cursor": {}},
    "find on a view": lambda n: {"find": "v2", "filter": deep_and(n)},
    "create a view": lambda n: {"create": "deep_view", "viewOn": "c", "pipeline": [{"$match": deep_and(n)}]},
    "explain find": lambda n: {"explain": {"find": "c", "filter": deep_and(n)}},
    "explain aggregate": lambda n: {"explain": {"aggregate": "c", "pipeline": [{"$match": deep_and(n)}], "cursor": {}}},
    "explain update": lambda n: {"explain": {"update": "c", "updates": [{"q": {"a": nest(n)}, "u": {"$set": {"y": 1}}}]}},
    "createIndexes key": lambda n: {"createIndexes": "c", "indexes": [{"key": nest(n), "name": "deep"}]},
    "createIndexes partialFilterExpression": lambda n: {"createIndexes": "c", "indexes": [{"key": {"p": 1}, "name": "p_1", "partialFilterExpression": {"a": {"$gt": nest(n)}}}]},
    "listCollections filter": lambda n: {"listCollections": 1, "filter": deep_and(n)},
    "listDatabases filter": lambda n: {"listDatabases": 1, "filter": deep_and(n)},
    "create with deep options": lambda n: {"create": "deep_options", "validator": deep_and(n)},
    "error message quoting a deep update": lambda n: {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"y": nest(n)}, "arrayFilters": [{"e": 1}]}]},
    "error message quoting a stored document": lambda n: {"aggregate": "c", "pipeline": [{"$match": {"_id": 2, "x": {"$ne": nest(n)}}}, {"$replaceRoot": {"newRoot": "$x"}}], "cursor": {}},
    "hello with deep client metadata": lambda n: {"hello": 1, "client": nest(n)},
}


# What each family answers when it is not plain success: an error code, or
# ("write", code) for a write error inside an ok reply. The node answering
# at all is the point; the answers are MongoDB's.
EXPECTED = {
    "find filter $not": 2,  # MongoDB's query tree limit: 100 levels of operators
    "find sort and hint": 2,  # no such index
    "find min": 51174,  # min needs an index that covers it
    "insert too deep to store": ("write", OVERFLOW),
    "update $set": ("write", OVERFLOW),
    "update $push $each": ("write", OVERFLOW),
    "update $addToSet": ("write", OVERFLOW),
    "update replacement": ("write", OVERFLOW),
    "update upsert seed": ("write", OVERFLOW),
    "update pipeline": ("write", OVERFLOW),
    "findAndModify update": OVERFLOW,
    "createIndexes key": 67,  # key pattern values cannot be documents
    "error message quoting a deep update": ("write", 9),
    "error message quoting a stored document": 40228,
    "hello with deep client metadata": 186,  # only a connection's first hello may carry it
}

# Families that run against the admin database.
ADMIN = {"listDatabases filter"}


@pytest.fixture
def deep_db(db):
    db.c.insert_many([
        {"_id": 1, "a": 1, "x": 1, "arr": [{"a": 1}, {"a": 2}]},
        {"_id": 2, "a": nest(STORAGE_LEVELS_MAX - 2), "x": 2, "arr": [nest(STORAGE_LEVELS_MAX - 3)]},
    ])
    db.create_collection("v", viewOn="c", pipeline=[{"$match": {"x": {"$gte": 1}}}])
    db.create_collection("v2", viewOn="v", pipeline=[{"$addFields": {"z": 1}}])
    return db


@pytest.mark.parametrize("family", FAMILIES)
def test_deepest_allowed_nesting_is_answered_by_every_command_family(node, client, deep_db, family):
    body = deepest(FAMILIES[family])
    database = client.admin if family in ADMIN else deep_db
    expected = EXPECTED.get(family, "ok")
    try:
        reply = database.command(body)
    except OperationFailure as failure:
        assert failure.code == expected, failure.details
    else:
        assert reply["ok"] == 1.0
        write_errors = [error["code"] for error in reply.get("writeErrors", [])]
        assert write_errors == ([expected[1]] if isinstance(expected, tuple) else []), reply
        assert not isinstance(expected, int), f"expected error {expected}, got {reply}"
    assert_alive(node, client)


# ----------------------------------------- (d): 100 levels stored, 101 refused

def levels(count: int) -> dict:
    """The fields of a document of `count` levels, the top level counting
    as one: `{a: {a: ... {a: 1}}}` with count - 1 embedded documents."""
    return nest(count)


def test_a_document_of_100_levels_is_stored_and_101_refused(coll):
    coll.insert_one({"_id": 1, **levels(STORAGE_LEVELS_MAX)})
    assert depth(coll.find_one({"_id": 1})) == STORAGE_LEVELS_MAX - 1
    with pytest.raises(OperationFailure) as info:
        coll.insert_one({"_id": 2, **levels(STORAGE_LEVELS_MAX + 1)})
    assert info.value.code == OVERFLOW
    assert info.value.details["errmsg"] == "cannot insert document because it exceeds 100 levels of nesting"
    # Empty documents and arrays at the bottom do not count, as in MongoDB.
    coll.insert_one({"_id": 3, **nest(STORAGE_LEVELS_MAX, {})})
    coll.insert_one({"_id": 4, **nest(STORAGE_LEVELS_MAX, [])})
    assert coll.count_documents({}) == 3


def test_updates_may_not_nest_a_document_past_100_levels(coll):
    coll.insert_one({"_id": 1, "a": 1})
    refusals = [
        lambda: coll.update_one({"_id": 1}, {"$set": {"a": nest(STORAGE_LEVELS_MAX)}}),
        lambda: coll.update_one({"_id": 1}, {"$set": {".".join(["b"] * (STORAGE_LEVELS_MAX + 1)): 1}}),
        lambda: coll.update_one({"_id": 1}, {"$push": {"p": nest(STORAGE_LEVELS_MAX - 1)}}),
        lambda: coll.replace_one({"_id": 1}, {"a": nest(STORAGE_LEVELS_MAX)}),
        lambda: coll.update_one({"_id": 1}, [{"$set": {"a": {"$literal": nest(STORAGE_LEVELS_MAX)}}}]),
        lambda: coll.update_one({"_id": 2}, {"$set": {"a": nest(STORAGE_LEVELS_MAX)}}, upsert=True),
        lambda: coll.find_one_and_update({"_id": 1}, {"$set": {"a": nest(STORAGE_LEVELS_MAX)}}),
    ]
    for refuse in refusals:
        with pytest.raises(OperationFailure) as info:
            refuse()
        assert info.value.code == OVERFLOW, info.value.details
        assert "nesting depth of 100" in str(info.value)
    assert list(coll.find()) == [{"_id": 1, "a": 1}]
    coll.update_one({"_id": 1}, {"$set": {"a": nest(STORAGE_LEVELS_MAX - 1)}})
    assert depth(coll.find_one({"_id": 1})) == STORAGE_LEVELS_MAX - 1


def test_out_and_merge_refuse_documents_past_100_levels(db):
    db.src.insert_one({"_id": 1, "a": nest(STORAGE_LEVELS_MAX - 10)})
    wrap = {"$addFields": {"a": {"w": "$a"}}}
    for output in ({"$out": "dst"}, {"$merge": {"into": "dst"}}):
        with pytest.raises(OperationFailure) as info:
            list(db.src.aggregate([wrap] * 10 + [output]))
        assert info.value.code == OVERFLOW
    assert "dst" not in db.list_collection_names() or db.dst.count_documents({}) == 0
    list(db.src.aggregate([wrap] * 9 + [{"$out": "dst"}]))
    assert db.dst.count_documents({}) == 1


# ------------------------------------- nesting that no single input spells out

def long_path(parts: int) -> str:
    return ".".join(["a"] * parts)


@pytest.mark.parametrize("body", [
    {"aggregate": "c", "pipeline": [{"$addFields": {long_path(100_000): 1}}], "cursor": {}},
    {"aggregate": "c", "pipeline": [{"$project": {"y": "$" + long_path(100_000)}}], "cursor": {}},
    {"aggregate": "c", "pipeline": [{"$group": {"_id": "$" + long_path(201)}}], "cursor": {}},
    {"aggregate": "c", "pipeline": [{"$lookup": {"from": "c", "localField": "a", "foreignField": "a", "as": long_path(201)}}], "cursor": {}},
    {"aggregate": "c", "pipeline": [{"$unwind": {"path": "$arr", "includeArrayIndex": long_path(201)}}], "cursor": {}},
    {"aggregate": "c", "pipeline": [{"$sort": {long_path(201): 1}}], "cursor": {}},
    {"find": "c", "projection": {long_path(100_000): 1}},
    {"find": "c", "projection": {long_path(201): {"$slice": 1}}},
    {"find": "c", "sort": {long_path(100_000): 1}},
], ids=["$addFields", "expression", "$group", "$lookup as", "$unwind", "$sort", "projection", "$slice", "sort"])
def test_field_paths_longer_than_200_components_are_overflow(node, client, deep_db, body):
    with pytest.raises(OperationFailure) as info:
        deep_db.command(body)
    assert (info.value.code, str(info.value.details["errmsg"])) == (OVERFLOW, "FieldPath is too long")
    assert_alive(node, client)


def test_long_paths_in_filters_and_updates_are_refused(node, client, deep_db):
    with pytest.raises(OperationFailure) as info:
        deep_db.c.find_one({long_path(100_000): 1})
    assert info.value.code == 5729100
    for update in ({"$set": {long_path(100_000): 1}}, {"$inc": {long_path(100_000): 1}},
                   {"$unset": {long_path(100_000): 1}}, {"$rename": {"x": long_path(100_000)}}):
        with pytest.raises(OperationFailure) as info:
            deep_db.c.update_one({"_id": 1}, update)
        assert info.value.code == OVERFLOW
    with pytest.raises(OperationFailure) as info:
        deep_db.c.update_one({long_path(100_000): 1}, {"$set": {"b": 1}}, upsert=True)
    assert info.value.code == 5729100
    assert_alive(node, client)


def test_values_a_pipeline_builds_stay_within_200_levels(node, client, deep_db):
    too_deep = "cannot convert document to BSON because it exceeds the limit of 200 levels of nesting"
    cases = [
        # $reduce wrapping its value once per element.
        ([{"$project": {"r": {"$reduce": {"input": {"$range": [0, 3000]}, "initialValue": {}, "in": {"a": "$$value"}}}}}],
         "$reduce accumulated value exceeded max allowable BSON depth"),
        ([{"$project": {"r": {"$reduce": {"input": {"$range": [0, 3000]}, "initialValue": [],
                                          "in": {"$map": {"input": [1], "in": "$$value"}}}}}}],
         "$reduce accumulated value exceeded max allowable BSON depth"),
        # Stage after stage wrapping a field, pushing documents, embedding the input.
        ([{"$addFields": {"x": {"a": "$x"}}}] * 1000, too_deep),
        ([{"$group": {"_id": None, "x": {"$push": "$$ROOT"}}}] * 300, too_deep),
        ([{"$lookup": {"from": "c", "let": {"r": "$$ROOT"}, "as": "j",
                       "pipeline": [{"$limit": 1}, {"$replaceRoot": {"newRoot": {"r": "$$r"}}}]}}] * 300, too_deep),
    ]
    for pipeline, message in cases:
        with pytest.raises(OperationFailure) as info:
            list(deep_db.c.aggregate(pipeline))
        assert (info.value.code, info.value.details["errmsg"]) == (OVERFLOW, message)
    assert_alive(node, client)


def test_pipelines_nested_through_sub_pipelines_and_views_are_bounded(node, client, deep_db):
    def nested_lookups(levels, width):
        pipeline = [{"$match": {}}] * width
        for _ in range(levels):
            pipeline = [{"$limit": 1}, {"$lookup": {"from": "c", "as": "j", "pipeline": pipeline}}] + [{"$match": {}}] * (width - 2)
        return pipeline

    # MongoDB's sub-pipeline limit (20), then the stages running nested at
    # once (20 levels of 999 stages would chain 20,000 iterators).
    with pytest.raises(OperationFailure) as info:
        list(deep_db.c.aggregate(nested_lookups(21, 2)))
    assert (info.value.code, info.value.details["errmsg"]) == (232, "Maximum number of nested sub-pipelines exceeded. Limit is 20")
    with pytest.raises(OperationFailure) as info:
        list(deep_db.c.aggregate(nested_lookups(19, 999)))
    assert info.value.code == 232
    assert len(list(deep_db.c.aggregate(nested_lookups(1, 999)))) == 1
    # Views whose pipelines read views through $lookup: 20 views of 999
    # stages each would nest as deep.
    long = [{"$match": {}}] * 998
    deep_db.create_collection("w0", viewOn="c", pipeline=long)
    for level in range(1, 20):
        deep_db.create_collection(f"w{level}", viewOn="c", pipeline=[{"$lookup": {"from": f"w{level - 1}", "as": "j", "pipeline": []}}] + long)
    with pytest.raises(OperationFailure) as info:
        list(deep_db.w19.find())
    assert info.value.code == 232
    assert_alive(node, client)
