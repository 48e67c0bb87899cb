"""update: operators, multi, upsert, arrayFilters, positional, replacement (issue 2, item 4)."""

import datetime

import pytest
from bson import Int64, Timestamp
from pymongo import ReturnDocument
from pymongo.errors import OperationFailure, WriteError


def one(coll, _id=1):
    return coll.find_one({"_id": _id})


def test_set_unset_inc_mul_min_max(coll):
    coll.insert_one({"_id": 1, "a": 1, "b": 2, "c": 5, "d": 10, "e": "x"})
    coll.update_one({"_id": 1}, {"$set": {"a": 9, "n.m": 1}, "$unset": {"e": ""}, "$inc": {"b": 3},
                                 "$mul": {"c": 2}, "$min": {"d": 4}, "$max": {"z": 7}})
    assert one(coll) == {"_id": 1, "a": 9, "b": 5, "c": 10, "d": 4, "n": {"m": 1}, "z": 7}


def test_field_order_new_fields_appended(coll):
    coll.insert_one({"_id": 1, "a": 1, "b": 2})
    coll.update_one({"_id": 1}, {"$set": {"c": 3, "a": 0}})
    assert list(one(coll).keys()) == ["_id", "a", "b", "c"]


def test_rename_and_current_date(coll):
    coll.insert_one({"_id": 1, "old": 5})
    coll.update_one({"_id": 1}, {"$rename": {"old": "new"}, "$currentDate": {"when": True, "ts": {"$type": "timestamp"}}})
    doc = one(coll)
    assert "old" not in doc and doc["new"] == 5
    assert isinstance(doc["when"], datetime.datetime)
    assert isinstance(doc["ts"], Timestamp)


def test_push_with_modifiers(coll):
    coll.insert_one({"_id": 1, "a": [5, 1]})
    coll.update_one({"_id": 1}, {"$push": {"a": {"$each": [3, 9, 0], "$sort": 1, "$slice": 4}}})
    assert one(coll)["a"] == [0, 1, 3, 5]
    coll.update_one({"_id": 1}, {"$push": {"a": {"$each": [7], "$position": 0}}})
    assert one(coll)["a"] == [7, 0, 1, 3, 5]
    coll.update_one({"_id": 1}, {"$push": {"b": 1}})
    assert one(coll)["b"] == [1]


def test_add_to_set_pop_pull_pull_all(coll):
    coll.insert_one({"_id": 1, "a": [1, 2, 3, 2, 4], "s": ["x"]})
    coll.update_one({"_id": 1}, {"$addToSet": {"s": {"$each": ["x", "y", "y"]}}})
    assert one(coll)["s"] == ["x", "y"]
    coll.update_one({"_id": 1}, {"$pull": {"a": 2}})
    assert one(coll)["a"] == [1, 3, 4]
    coll.update_one({"_id": 1}, {"$pull": {"a": {"$gte": 4}}})
    assert one(coll)["a"] == [1, 3]
    coll.update_one({"_id": 1}, {"$pop": {"a": -1}})
    assert one(coll)["a"] == [3]
    coll.update_one({"_id": 1}, {"$pullAll": {"s": ["x", "y"]}})
    assert one(coll)["s"] == []


def test_pull_with_document_condition(coll):
    coll.insert_one({"_id": 1, "items": [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]})
    coll.update_one({"_id": 1}, {"$pull": {"items": {"k": 2}}})
    assert one(coll)["items"] == [{"k": 1, "v": "a"}]


def test_positional_operators(coll):
    coll.insert_one({"_id": 1, "grades": [80, 85, 90], "items": [{"q": 1}, {"q": 5}, {"q": 9}]})
    coll.update_one({"_id": 1, "grades": 85}, {"$set": {"grades.$": 86}})
    assert one(coll)["grades"] == [80, 86, 90]
    coll.update_one({"_id": 1}, {"$inc": {"grades.$[]": 1}})
    assert one(coll)["grades"] == [81, 87, 91]
    coll.update_one({"_id": 1}, {"$set": {"items.$[big].q": 0}}, array_filters=[{"big.q": {"$gt": 4}}])
    assert one(coll)["items"] == [{"q": 1}, {"q": 0}, {"q": 0}]


def test_multi_and_counts(coll):
    coll.insert_many([{"_id": i, "g": i % 2, "v": 0} for i in range(10)])
    result = coll.update_many({"g": 1}, {"$set": {"v": 1}})
    assert (result.matched_count, result.modified_count) == (5, 5)
    again = coll.update_many({"g": 1}, {"$set": {"v": 1}})
    assert (again.matched_count, again.modified_count) == (5, 0)
    single = coll.update_one({"g": 0}, {"$inc": {"v": 1}})
    assert single.modified_count == 1
    assert coll.count_documents({"v": 1}) == 6


def test_upsert(coll):
    result = coll.update_one({"_id": 5, "k": "x"}, {"$set": {"v": 1}, "$setOnInsert": {"created": True}}, upsert=True)
    assert result.upserted_id == 5
    assert one(coll, 5) == {"_id": 5, "k": "x", "v": 1, "created": True}
    coll.update_one({"_id": 5}, {"$set": {"v": 2}, "$setOnInsert": {"created": False}}, upsert=True)
    assert one(coll, 5)["created"] is True
    generated = coll.update_one({"name": "n", "a.b": 3}, {"$inc": {"c": 1}}, upsert=True)
    doc = coll.find_one({"_id": generated.upserted_id})
    assert doc["name"] == "n" and doc["a"] == {"b": 3} and doc["c"] == 1


def test_replacement_keeps_id(coll):
    coll.insert_one({"_id": 1, "a": 1, "b": 2})
    result = coll.replace_one({"_id": 1}, {"c": 3})
    assert result.modified_count == 1
    assert one(coll) == {"_id": 1, "c": 3}
    coll.replace_one({"_id": 2}, {"d": 4}, upsert=True)
    assert one(coll, 2) == {"_id": 2, "d": 4}


def test_update_errors(coll):
    coll.insert_one({"_id": 1, "s": "text", "a": 1})
    with pytest.raises(WriteError) as failure:
        coll.update_one({"_id": 1}, {"$inc": {"s": 1}})
    assert failure.value.code == 14
    with pytest.raises(WriteError) as failure:
        coll.update_one({"_id": 1}, {"$set": {"_id": 2}})
    assert failure.value.code == 66
    with pytest.raises(WriteError) as failure:
        coll.update_one({"_id": 1}, {"$set": {"a": 1}, "$inc": {"a": 1}})
    assert failure.value.code == 40
    with pytest.raises((WriteError, OperationFailure)) as failure:
        coll.update_one({"_id": 1}, {"$frob": {"a": 1}})
    assert failure.value.code == 9
    assert one(coll) == {"_id": 1, "s": "text", "a": 1}


def test_raw_update_reply_shape(coll):
    coll.insert_one({"_id": 1})
    reply = coll.database.command({"update": coll.name, "updates": [
        {"q": {"_id": 1}, "u": {"$set": {"x": 1}}},
        {"q": {"_id": 2}, "u": {"$set": {"x": 2}}, "upsert": True},
    ]})
    assert reply["n"] == 2
    assert reply["nModified"] == 1
    assert reply["upserted"] == [{"index": 1, "_id": 2}]


def test_find_one_and_update(coll):
    coll.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
    before = coll.find_one_and_update({"v": {"$gte": 1}}, {"$inc": {"v": 10}}, sort=[("v", -1)])
    assert before == {"_id": 2, "v": 2}
    after = coll.find_one_and_update({"_id": 1}, {"$inc": {"v": 10}}, return_document=ReturnDocument.AFTER,
                                     projection={"_id": 0})
    assert after == {"v": 11}
    created = coll.find_one_and_update({"_id": 3}, {"$set": {"v": 3}}, upsert=True,
                                       return_document=ReturnDocument.AFTER)
    assert created == {"_id": 3, "v": 3}
    assert coll.find_one_and_update({"_id": 99}, {"$set": {"v": 1}}) is None


def test_find_one_and_replace_and_delete(coll):
    coll.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
    assert coll.find_one_and_replace({"_id": 1}, {"w": 5}) == {"_id": 1, "v": 1}
    assert one(coll) == {"_id": 1, "w": 5}
    assert coll.find_one_and_delete({}, sort=[("_id", -1)]) == {"_id": 2, "v": 2}
    assert coll.count_documents({}) == 1


def test_raw_find_and_modify_reply(coll):
    coll.insert_one({"_id": 1, "v": 1})
    reply = coll.database.command({"findAndModify": coll.name, "query": {"_id": 1},
                                   "update": {"$set": {"v": 2}}, "new": True})
    assert reply["value"] == {"_id": 1, "v": 2}
    assert reply["lastErrorObject"] == {"n": 1, "updatedExisting": True}


def test_a_failed_statement_counts_in_no_total(coll):
    # MongoDB's n and nModified leave a failed statement out (found by an
    # outside probe: each failure counted one match).
    coll.insert_many([{"_id": i, "v": 0} for i in range(5)])
    updates = [{"q": {"_id": 1}, "u": {"$inc": {"v": 1}}},
               {"q": {"_id": 2}, "u": {"$set": {"_id": 99}}},
               {"q": {"_id": 3}, "u": {"$inc": {"v": 1}}}]
    for ordered, expected in ((False, 2), (True, 1)):
        reply = coll.database.command({"update": coll.name, "updates": updates, "ordered": ordered})
        assert reply["n"] == expected and reply["nModified"] == expected, reply
        assert [e["index"] for e in reply["writeErrors"]] == [1]
    reply = coll.database.command({"update": coll.name, "updates": [updates[1]]})
    assert reply["n"] == 0 and reply["nModified"] == 0, reply
