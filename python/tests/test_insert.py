"""insert: batches, generated _id, per-document write errors, write concern (issue 2, item 4)."""

import pytest
from bson import ObjectId
from pymongo import InsertOne, WriteConcern
from pymongo.errors import BulkWriteError, DocumentTooLarge, DuplicateKeyError, OperationFailure, WriteError


def test_insert_one_generates_object_id(coll):
    result = coll.insert_one({"x": 1})
    assert isinstance(result.inserted_id, ObjectId)
    assert coll.find_one({"_id": result.inserted_id})["x"] == 1


def test_server_adds_id_first_when_missing(coll):
    reply = coll.database.command({"insert": coll.name, "documents": [{"x": 1}]})
    assert reply["n"] == 1
    doc = coll.find_one()
    assert list(doc.keys())[0] == "_id"
    assert isinstance(doc["_id"], ObjectId)


def test_duplicate_id_is_error_11000_with_key_value(coll):
    coll.insert_one({"_id": 7})
    with pytest.raises(DuplicateKeyError) as failure:
        coll.insert_one({"_id": 7})
    details = failure.value.details
    assert failure.value.code == 11000
    assert details["keyPattern"] == {"_id": 1}
    assert details["keyValue"] == {"_id": 7}


def test_ordered_batch_stops_at_first_error(coll):
    with pytest.raises(BulkWriteError) as failure:
        coll.insert_many([{"_id": 1}, {"_id": 1}, {"_id": 2}], ordered=True)
    result = failure.value.details
    assert result["nInserted"] == 1
    assert [e["index"] for e in result["writeErrors"]] == [1]
    assert coll.count_documents({}) == 1


def test_unordered_batch_continues(coll):
    with pytest.raises(BulkWriteError) as failure:
        coll.insert_many([{"_id": 1}, {"_id": 1}, {"_id": 2}, {"_id": 2}], ordered=False)
    result = failure.value.details
    assert result["nInserted"] == 2
    assert [e["index"] for e in result["writeErrors"]] == [1, 3]
    assert sorted(d["_id"] for d in coll.find()) == [1, 2]


def test_raw_insert_reply_shape(coll):
    reply = coll.database.command({"insert": coll.name, "documents": [{"_id": 1}, {"_id": 1}],
                                   "ordered": False})
    assert reply["ok"] == 1.0
    assert reply["n"] == 1
    assert reply["writeErrors"][0]["code"] == 11000
    assert reply["writeErrors"][0]["index"] == 1


def test_large_batch(coll):
    coll.insert_many([{"i": i} for i in range(5000)])
    assert coll.count_documents({}) == 5000


def test_journaled_write_concern(coll):
    journaled = coll.with_options(write_concern=WriteConcern(j=True))
    journaled.insert_one({"_id": "durable"})
    assert coll.find_one({"_id": "durable"}) is not None


def test_unacknowledged_write(coll):
    fire_and_forget = coll.with_options(write_concern=WriteConcern(w=0))
    fire_and_forget.insert_one({"_id": "w0"})
    # A later acknowledged command on the same client sees it.
    assert coll.find_one({"_id": "w0"}) == {"_id": "w0"}


def test_document_too_large(coll):
    with pytest.raises((DocumentTooLarge, OperationFailure, WriteError)):
        coll.insert_one({"big": "x" * (16 * 1024 * 1024 + 1)})
    assert coll.count_documents({}) == 0


def test_bulk_write_mixed(coll):
    from pymongo import DeleteOne, UpdateOne
    result = coll.bulk_write([
        InsertOne({"_id": 1, "v": 1}),
        InsertOne({"_id": 2, "v": 2}),
        UpdateOne({"_id": 1}, {"$inc": {"v": 10}}),
        DeleteOne({"_id": 2}),
    ])
    assert result.inserted_count == 2
    assert result.modified_count == 1
    assert result.deleted_count == 1
    assert list(coll.find()) == [{"_id": 1, "v": 11}]


def test_values_round_trip(coll):
    import datetime
    from bson import Binary, Decimal128, Int64, Regex, Timestamp
    doc = {
        "_id": 1, "int": 1, "long": Int64(2**40), "double": 1.5, "str": "héllo",
        "bin": Binary(b"\x00\x01", 0), "date": datetime.datetime(2020, 1, 2, 3, 4, 5),
        "dec": Decimal128("1.25"), "arr": [1, [2, {"x": None}]], "sub": {"a": {"b": True}},
        "ts": Timestamp(5, 6), "re": Regex("^a", "i"),
    }
    coll.insert_one(doc)
    found = coll.find_one({"_id": 1})
    assert found["long"] == 2**40 and found["dec"] == Decimal128("1.25")
    assert found["arr"] == [1, [2, {"x": None}]] and found["ts"] == Timestamp(5, 6)
    assert found["date"] == datetime.datetime(2020, 1, 2, 3, 4, 5)


def test_empty_top_level_timestamps_get_the_inserts_own_unless_bypassed(coll):
    """MongoDB's insert fills a top-level Timestamp(0, 0), except in _id
    (SERVER-43014) and in embedded documents, with a current, unique
    timestamp; bypassEmptyTsReplacement keeps it as sent."""
    from bson.timestamp import Timestamp

    empty = Timestamp(0, 0)
    coll.insert_many([{"_id": 1, "a": empty, "b": empty, "n": {"t": empty}}, {"_id": 2, "a": empty}])
    coll.insert_one({"_id": empty, "a": empty})
    one, two = coll.find_one({"_id": 1}), coll.find_one({"_id": 2})
    assert one["a"].time > 0 and one["a"] == one["b"], one
    assert one["n"] == {"t": empty}
    assert two["a"] > one["a"], (one, two)
    stored = coll.find_one({"_id": empty})
    assert stored["_id"] == empty and stored["a"].time > 0, stored
    coll.database.command({"insert": coll.name, "documents": [{"_id": 3, "a": empty}],
                           "bypassEmptyTsReplacement": True})
    assert coll.find_one({"_id": 3})["a"] == empty


def test_system_js_takes_client_writes_and_other_system_collections_do_not(client):
    """MongoDB leaves `<db>.system.js` (stored JavaScript) to clients; it
    was refused with 73 like the server's own system collections."""
    import pytest
    from pymongo.errors import OperationFailure

    db = client.sysjs
    db.system.js.insert_one({"_id": "f", "value": 1})
    db.system.js.update_one({"_id": "f"}, {"$set": {"value": 2}})
    assert db.system.js.find_one({"_id": "f"})["value"] == 2
    db.system.js.delete_one({"_id": "f"})
    with pytest.raises(OperationFailure) as raised:
        db.system.profile.insert_one({"_id": 1})
    assert raised.value.code == 73
