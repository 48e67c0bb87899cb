"""Collection statistics from the running totals (count, BSON bytes, index
keys) agree with what a client computes from the documents themselves, after
every kind of write and after a crash (SIGKILL) whose recovery replays the
journal: collStats, $collStats, dbStats, dataSize, count without a query,
estimated_document_count and listDatabases."""

from __future__ import annotations

import bson
import pytest
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient, ReturnDocument, WriteConcern

# collStats' index sizes are estimates: 16 bytes per key (see catalog.rs).
INDEX_ENTRY_BYTES_ESTIMATE = 16


def expected_stats(coll) -> dict:
    """Count, data size and tag-index keys, computed from the documents."""
    raw = coll.with_options(codec_options=coll.codec_options.with_options(document_class=RawBSONDocument))
    documents = list(raw.find())
    tag_keys = 0
    for document in documents:
        tags = bson.decode(document.raw).get("tags", None)
        if isinstance(tags, list):
            tag_keys += max(1, len({repr(t) for t in tags}))
        elif "tags" in bson.decode(document.raw):
            tag_keys += 1
    return {"count": len(documents), "size": sum(len(d.raw) for d in documents), "tag_keys": tag_keys}


def assert_stats_agree(db, name: str) -> dict:
    expected = expected_stats(db[name])
    stats = db.command("collStats", name)
    assert (stats["count"], stats["size"]) == (expected["count"], expected["size"])
    assert stats["indexSizes"]["_id_"] == expected["count"] * INDEX_ENTRY_BYTES_ESTIMATE
    assert stats["indexSizes"]["tags_1"] == expected["tag_keys"] * INDEX_ENTRY_BYTES_ESTIMATE
    [aggregated] = list(db[name].aggregate([{"$collStats": {"storageStats": {}}}]))
    assert aggregated["storageStats"]["count"] == expected["count"]
    assert aggregated["storageStats"]["size"] == expected["size"]
    data_size = db.command("dataSize", f"{db.name}.{name}")
    assert (data_size["numObjects"], data_size["size"]) == (expected["count"], expected["size"])
    assert db.command("count", name)["n"] == expected["count"]
    assert db[name].estimated_document_count() == expected["count"]
    return expected


def mixed_writes(coll) -> None:
    coll.create_index("tags", sparse=True)
    coll.insert_many([{"_id": i, "tags": [i % 3, i % 5, "t"], "pad": "x" * (i % 17)} for i in range(300)])
    coll.update_many({"_id": {"$lt": 100}}, {"$set": {"pad": "y" * 200}})
    coll.update_many({"_id": {"$gte": 250}}, {"$unset": {"tags": ""}})
    coll.update_many({"_id": {"$gte": 200, "$lt": 230}}, {"$set": {"tags": []}})
    coll.delete_many({"_id": {"$mod": [7, 0]}})
    coll.replace_one({"_id": 1}, {"tags": "single", "note": "replaced"})
    coll.update_one({"_id": 1000}, {"$set": {"tags": [1, 1, 2]}}, upsert=True)
    coll.find_one_and_update({"_id": 2}, {"$push": {"tags": 99}}, return_document=ReturnDocument.AFTER)
    coll.find_one_and_delete({"_id": 3})


def test_stats_match_the_documents_after_mixed_writes(db):
    mixed_writes(db.c)
    expected = assert_stats_agree(db, "c")
    db.other.insert_many([{"_id": i, "tags": i} for i in range(10)])
    db.other.create_index("tags")
    other = expected_stats(db.other)
    db.command("create", "recent", viewOn="other", pipeline=[{"$match": {"tags": {"$gt": 5}}}])
    stats = db.command("dbStats")
    assert stats["objects"] == expected["count"] + other["count"]
    assert stats["dataSize"] == expected["size"] + other["size"]
    # A view counts as a view, not as a collection (views was always 0).
    assert (stats["collections"], stats["views"]) == (2, 1)


def test_drop_and_recreate_starts_from_zero(db):
    db.c.insert_many([{"_id": i, "pad": "z" * i} for i in range(50)])
    db.c.drop()
    db.c.insert_one({"_id": 1})
    stats = db.command("collStats", "c")
    assert (stats["count"], stats["size"]) == (1, len(bson.encode({"_id": 1})))
    db.create_collection("empty")
    assert db.command("collStats", "empty")["count"] == 0
    assert db.command("count", "empty")["n"] == 0


def test_stats_survive_a_sigkill(fresh_node):
    fresh_node.start()
    with MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000) as client:
        db = client.get_database("stats_kill", write_concern=WriteConcern(w=1, j=True))
        mixed_writes(db.c)
        before = assert_stats_agree(db, "c")
        listed = {d["name"]: d for d in client.list_databases()}
        assert listed["stats_kill"]["sizeOnDisk"] >= before["size"]
    fresh_node.restart("sigkill")
    with MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000) as client:
        db = client.stats_kill
        after = assert_stats_agree(db, "c")
        # Every write was journaled (j: true), so recovery lost none.
        assert after == before
        db.c.delete_many({"_id": {"$lt": 50}})
        db.c.insert_one({"_id": -1, "tags": ["after", "restart"]})
        assert_stats_agree(db, "c")
