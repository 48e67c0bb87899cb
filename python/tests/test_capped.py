"""Capped collections through pymongo: options, insertion order, trimming,
tailable and awaitData cursors, convertToCapped, cloneCollectionAsCapped,
collMod of the limits, and MongoDB 7.0's refusals with their codes."""

from __future__ import annotations

import threading
import time

import pytest
from bson import SON
from pymongo import CursorType, MongoClient, WriteConcern
from pymongo.errors import OperationFailure


def code_of(call) -> int:
    with pytest.raises(OperationFailure) as failure:
        call()
    return failure.value.code


def test_create_keeps_rounded_options_in_list_collections_and_stats(db):
    db.create_collection("log", capped=True, size=1000, max=7)
    [entry] = [c for c in db.list_collections() if c["name"] == "log"]
    # MongoDB 7.0 rounds size up to a multiple of 256.
    assert entry["options"]["capped"] is True
    assert entry["options"]["size"] == 1024
    assert entry["options"]["max"] == 7
    assert db.log.options()["capped"] is True
    stats = db.command("collStats", "log")
    assert (stats["capped"], stats["maxSize"], stats["max"]) == (True, 1024, 7)
    [coll_stats] = list(db.log.aggregate([{"$collStats": {"storageStats": {}}}]))
    assert coll_stats["storageStats"]["capped"] is True
    assert coll_stats["storageStats"]["maxSize"] == 1024
    assert db.command("collStats", "log", scale=1024)["maxSize"] == 1
    db.create_collection("plain")
    assert db.command("collStats", "plain")["capped"] is False


def test_create_refusals_have_mongodb_codes(db):
    assert code_of(lambda: db.command("create", "a", capped=True)) == 72
    assert code_of(lambda: db.command("create", "a", capped=True, max=5)) == 72
    assert code_of(lambda: db.command("create", "a", capped=True, size=0)) == 51024
    assert code_of(lambda: db.command("create", "a", capped=True, size=-500)) == 51024
    assert code_of(lambda: db.command("create", "a", capped=True, size=(1 << 50) + 1)) == 51024
    assert code_of(lambda: db.command("create", "a", capped=True, size="x")) == 14
    assert code_of(lambda: db.command("create", "a", capped="x", size=4096)) == 14
    assert code_of(lambda: db.command("create", "a", size=4096)) == 72
    assert code_of(lambda: db.command("create", "a", max=5)) == 72
    assert code_of(lambda: db.command("create", "a", capped=True, size=4096, max=1 << 31)) == 51024
    assert "a" not in db.list_collection_names()


def test_natural_order_is_insertion_order_not_id_order(db):
    db.create_collection("c", capped=True, size=1 << 20)
    ids = [5, 1, 9, 3, "b", "a", 7]
    for _id in ids:
        db.c.insert_one({"_id": _id})
    assert [d["_id"] for d in db.c.find()] == ids
    assert [d["_id"] for d in db.c.find().sort("$natural", 1)] == ids
    assert [d["_id"] for d in db.c.find().sort("$natural", -1)] == ids[::-1]
    assert [d["_id"] for d in db.c.find().hint([("$natural", -1)]).limit(2)] == [7, "a"]
    # Small batches resume at the right place.
    assert [d["_id"] for d in db.c.find(batch_size=2)] == ids
    assert [d["_id"] for d in db.c.aggregate([{"$match": {}}])] == ids


def test_trimming_by_max_keeps_the_newest(db):
    db.create_collection("c", capped=True, size=1 << 20, max=3)
    db.c.insert_many([{"_id": i} for i in range(10)])
    assert [d["_id"] for d in db.c.find()] == [7, 8, 9]
    assert db.c.count_documents({}) == 3
    db.c.insert_one({"_id": 100})
    assert [d["_id"] for d in db.c.find()] == [8, 9, 100]


def test_trimming_by_size_keeps_total_bytes_under_size(db):
    db.create_collection("c", capped=True, size=4096)
    payload = "x" * 200
    for i in range(100):
        db.c.insert_one({"_id": i, "p": payload})
    stats = db.command("collStats", "c")
    assert stats["size"] <= 4096
    ids = [d["_id"] for d in db.c.find()]
    # The newest documents, contiguous, as many as fit.
    assert ids == list(range(100 - len(ids), 100))
    assert 15 <= len(ids) <= 19
    # A document larger than the whole collection is refused.
    with pytest.raises(OperationFailure) as failure:
        db.c.insert_one({"_id": "big", "p": "y" * 5000})
    assert failure.value.code == 2


def test_updates_and_deletes_are_allowed(db):
    db.create_collection("c", capped=True, size=4096, max=5)
    db.c.insert_many([{"_id": i, "v": "a"} for i in range(5)])
    # 7.0 lets an update change a document's size; it keeps its place.
    db.c.update_one({"_id": 2}, {"$set": {"v": "a much longer value"}})
    db.c.delete_one({"_id": 0})
    assert [d["_id"] for d in db.c.find()] == [1, 2, 3, 4]
    db.c.insert_many([{"_id": 5}, {"_id": 6}])
    assert [d["_id"] for d in db.c.find()] == [2, 3, 4, 5, 6]


def test_tailable_cursor_stays_open_and_returns_new_inserts(db):
    db.create_collection("c", capped=True, size=1 << 20)
    db.c.insert_many([{"_id": i} for i in range(3)])
    cursor = db.c.find({"_id": {"$ne": 4}}, cursor_type=CursorType.TAILABLE)
    assert [d["_id"] for d in cursor] == [0, 1, 2]
    assert cursor.alive
    db.c.insert_many([{"_id": 3}, {"_id": 4}, {"_id": 5}])
    assert [d["_id"] for d in cursor] == [3, 5]
    assert cursor.alive
    cursor.close()
    # Refused on an ordinary collection (BadValue, as MongoDB 7.0).
    db.plain.insert_one({"x": 1})
    with pytest.raises(OperationFailure) as failure:
        list(db.plain.find(cursor_type=CursorType.TAILABLE))
    assert failure.value.code == 2
    assert "non capped" in str(failure.value)


def test_tailable_cursor_on_an_empty_collection_is_closed_at_once(db):
    db.create_collection("c", capped=True, size=4096)
    cursor = db.c.find(cursor_type=CursorType.TAILABLE)
    assert list(cursor) == []
    assert not cursor.alive


def test_await_data_waits_for_an_insert(db):
    db.create_collection("c", capped=True, size=1 << 20)
    db.c.insert_one({"_id": 0})
    cursor = db.c.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(20_000)
    assert cursor.next()["_id"] == 0

    def insert_later():
        time.sleep(0.5)
        db.c.insert_one({"_id": 1})

    writer = threading.Thread(target=insert_later)
    started = time.monotonic()
    writer.start()
    assert cursor.next()["_id"] == 1
    writer.join()
    # Woken by the insert, not by the 20 s wait running out.
    assert time.monotonic() - started < 15
    cursor.close()


def test_await_data_get_more_times_out_empty_and_stays_open(db):
    db.create_collection("c", capped=True, size=1 << 20)
    db.c.insert_one({"_id": 0})
    reply = db.command("find", "c", tailable=True, awaitData=True)
    cursor_id = reply["cursor"]["id"]
    assert cursor_id != 0
    started = time.monotonic()
    more = db.command("getMore", cursor_id, collection="c", maxTimeMS=300)
    assert more["cursor"]["nextBatch"] == []
    assert more["cursor"]["id"] == cursor_id
    assert time.monotonic() - started >= 0.25
    # maxTimeMS on getMore is refused for a tailable cursor without awaitData.
    plain = db.command("find", "c", tailable=True)["cursor"]["id"]
    assert code_of(lambda: db.command("getMore", plain, collection="c", maxTimeMS=100)) == 2
    db.command("killCursors", "c", cursors=[cursor_id, plain])


def test_cursor_dies_with_capped_position_lost_when_trimmed_past(db):
    db.create_collection("c", capped=True, size=1 << 20, max=3)
    db.c.insert_many([{"_id": i} for i in range(3)])
    reply = db.command("find", "c", tailable=True, batchSize=1)
    cursor_id = reply["cursor"]["id"]
    assert [d["_id"] for d in reply["cursor"]["firstBatch"]] == [0]
    db.c.insert_many([{"_id": i} for i in range(3, 8)])
    assert code_of(lambda: db.command("getMore", cursor_id, collection="c")) == 136


def test_convert_to_capped_keeps_the_newest_in_order(db):
    db.plain.insert_many([{"_id": i, "p": "z" * 100} for i in range(50)])
    db.plain.create_index("p")
    db.command("convertToCapped", "plain", size=2000)
    options = db.plain.options()
    assert options["capped"] is True and options["size"] == 2048
    ids = [d["_id"] for d in db.plain.find()]
    assert ids and ids == sorted(ids) and ids[-1] == 49
    assert db.command("collStats", "plain")["size"] <= 2048
    # Only the _id index is kept, as MongoDB does.
    assert list(db.plain.index_information()) == ["_id_"]
    assert not [n for n in db.list_collection_names() if "convertToCapped" in n]
    assert code_of(lambda: db.command("convertToCapped", "missing", size=4096)) == 26
    assert code_of(lambda: db.command("convertToCapped", "plain", size=0)) == 51024


def test_clone_collection_as_capped(db):
    db.src.insert_many([{"_id": i} for i in range(20)])
    db.command("cloneCollectionAsCapped", "src", toCollection="dst", size=100_000)
    assert db.dst.options()["capped"] is True
    assert db.dst.count_documents({}) == 20
    assert db.src.options() == {}
    db.dst.insert_one({"_id": 20})
    assert [d["_id"] for d in db.dst.find()][-1] == 20
    assert code_of(lambda: db.command("cloneCollectionAsCapped", "src", toCollection="dst", size=4096)) == 48
    assert code_of(lambda: db.command("cloneCollectionAsCapped", "nope", toCollection="x", size=4096)) == 26
    db.command("create", "v", viewOn="src", pipeline=[])
    assert code_of(lambda: db.command("cloneCollectionAsCapped", "v", toCollection="x", size=4096)) == 166


def test_coll_mod_changes_the_limits_for_the_next_insert(db):
    db.create_collection("c", capped=True, size=1 << 20, max=10)
    db.c.insert_many([{"_id": i} for i in range(10)])
    db.command("collMod", "c", cappedMax=4)
    assert db.c.options()["max"] == 4
    db.c.insert_one({"_id": 10})
    assert [d["_id"] for d in db.c.find()] == [7, 8, 9, 10]
    db.command("collMod", "c", cappedSize=3000)
    assert db.command("collStats", "c")["maxSize"] == 3072
    assert code_of(lambda: db.command("collMod", "c", cappedSize=0)) == 51024
    db.create_collection("plain")
    assert code_of(lambda: db.command("collMod", "plain", cappedSize=4096)) == 72


@pytest.mark.parametrize("how", ["clean shutdown", "sigkill"])
def test_order_and_limits_survive_a_restart(fresh_node, how):
    """A checkpoint keeps the order table; after a kill, replaying the
    journal rebuilds it from the entries' timestamps."""
    fresh_node.start()
    client = MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000)
    db = client.get_database("t", write_concern=WriteConcern(j=True))
    db.create_collection("c", capped=True, size=1 << 20, max=3)
    db.c.insert_many([{"_id": i} for i in [9, 2, 7, 4]])
    client.close()
    fresh_node.restart(how)
    client = MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000)
    assert [d["_id"] for d in client.t.c.find()] == [2, 7, 4]
    client.t.c.insert_one({"_id": 1})
    assert [d["_id"] for d in client.t.c.find()] == [7, 4, 1]
    client.close()


def test_out_to_a_capped_collection_is_refused_and_merge_trims(db):
    db.create_collection("c", capped=True, size=1 << 20, max=2)
    db.src.insert_many([{"_id": i} for i in range(4)])
    assert code_of(lambda: list(db.src.aggregate([{"$out": "c"}]))) == 17152
    list(db.src.aggregate([{"$merge": {"into": "c"}}]))
    assert [d["_id"] for d in db.c.find()] == [2, 3]
