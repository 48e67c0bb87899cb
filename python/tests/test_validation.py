"""Document validation: validator (query operators, $jsonSchema), levels,
actions, collMod, bypassDocumentValidation, MongoDB 7.0's errInfo (issue 10, item 4)."""

import pytest
from pymongo import MongoClient, ReturnDocument
from pymongo.errors import OperationFailure, WriteError

SCHEMA = {
    "bsonType": "object",
    "required": ["name", "age"],
    "properties": {
        "name": {"bsonType": "string", "minLength": 2},
        "age": {"bsonType": "int", "minimum": 0, "maximum": 150},
        "tags": {"bsonType": "array", "items": {"bsonType": "string"}, "uniqueItems": True},
        "status": {"enum": ["active", "closed"]},
    },
}


def refused(call):
    with pytest.raises((WriteError, OperationFailure)) as failure:
        call()
    assert failure.value.code == 121, failure.value.details
    details = failure.value.details
    return details.get("errInfo") or details["writeErrors"][0]["errInfo"]


def test_query_operator_validator(db):
    db.create_collection("c", validator={"qty": {"$gt": 5}})
    coll = db.c
    coll.insert_one({"_id": 1, "qty": 6})
    info = refused(lambda: coll.insert_one({"_id": 2, "qty": 1}))
    assert info["failingDocumentId"] == 2
    assert info["details"] == {
        "operatorName": "$gt",
        "specifiedAs": {"qty": {"$gt": 5}},
        "reason": "comparison failed",
        "consideredValue": 1,
    }
    info = refused(lambda: coll.insert_one({"_id": 3}))
    assert info["details"]["reason"] == "field was missing"
    assert coll.count_documents({}) == 1


def test_json_schema_validator_and_its_err_info(db):
    db.create_collection("c", validator={"$jsonSchema": SCHEMA})
    coll = db.c
    coll.insert_one({"name": "Ada", "age": 36, "tags": ["x"], "status": "active"})
    info = refused(lambda: coll.insert_one({"_id": 7, "name": "Al"}))
    assert info["failingDocumentId"] == 7
    details = info["details"]
    assert details["operatorName"] == "$jsonSchema"
    rule = details["schemaRulesNotSatisfied"][0]
    assert rule["operatorName"] == "required"
    assert rule["missingProperties"] == ["age"]
    info = refused(lambda: coll.insert_one({"name": "Bo", "age": -1, "status": "lost"}))
    rule = info["details"]["schemaRulesNotSatisfied"][0]
    assert rule["operatorName"] == "properties"
    by_name = {p["propertyName"]: p["details"][0] for p in rule["propertiesNotSatisfied"]}
    assert by_name["age"]["operatorName"] == "minimum" and by_name["age"]["consideredValue"] == -1
    assert by_name["status"]["operatorName"] == "enum"
    refused(lambda: coll.insert_one({"name": "Bo", "age": 3, "tags": ["a", "a"]}))
    refused(lambda: coll.insert_one({"name": "Bo", "age": 3.5}))
    assert coll.count_documents({}) == 1


def test_updates_and_find_and_modify_are_validated(db):
    db.create_collection("c", validator={"$jsonSchema": SCHEMA})
    coll = db.c
    coll.insert_one({"_id": 1, "name": "Ada", "age": 36})
    refused(lambda: coll.update_one({"_id": 1}, {"$set": {"age": "old"}}))
    refused(lambda: coll.find_one_and_update({"_id": 1}, {"$unset": {"name": ""}}))
    refused(lambda: coll.update_one({"_id": 2}, {"$set": {"name": "x"}}, upsert=True))
    assert coll.find_one({"_id": 1}) == {"_id": 1, "name": "Ada", "age": 36}
    after = coll.find_one_and_update({"_id": 1}, {"$inc": {"age": 1}}, return_document=ReturnDocument.AFTER)
    assert after["age"] == 37


def test_bypass_document_validation(db):
    db.create_collection("c", validator={"a": {"$type": "int"}})
    coll = db.c
    coll.insert_one({"_id": 1, "a": "text"}, bypass_document_validation=True)
    coll.update_one({"_id": 1}, {"$set": {"b": 1}}, bypass_document_validation=True)
    db.command(
        {"findAndModify": "c", "query": {"_id": 1}, "update": {"$set": {"c": 1}}, "bypassDocumentValidation": True}
    )
    assert coll.find_one({"_id": 1}) == {"_id": 1, "a": "text", "b": 1, "c": 1}


def test_levels_and_actions_through_coll_mod(client, db):
    coll = db.c
    coll.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": -1}])
    db.command({"collMod": "c", "validator": {"a": {"$gte": 0}}, "validationLevel": "moderate"})
    options = db.command("listCollections", filter={"name": "c"})["cursor"]["firstBatch"][0]["options"]
    assert options["validator"] == {"a": {"$gte": 0}} and options["validationLevel"] == "moderate"
    # Moderate: an existing invalid document may change; a valid one may not become invalid.
    coll.update_one({"_id": 2}, {"$set": {"b": 1}})
    refused(lambda: coll.update_one({"_id": 1}, {"$set": {"a": -5}}))
    refused(lambda: coll.insert_one({"a": -3}))
    db.command({"collMod": "c", "validationLevel": "strict"})
    refused(lambda: coll.update_one({"_id": 2}, {"$set": {"b": 2}}))
    db.command({"collMod": "c", "validationAction": "warn"})
    coll.insert_one({"_id": 3, "a": -3})
    log = client.admin.command({"getLog": "global"})["log"]
    assert any("Document would fail validation" in line for line in log)
    db.command({"collMod": "c", "validationAction": "error", "validationLevel": "off"})
    coll.insert_one({"_id": 4, "a": -4})
    db.command({"collMod": "c", "validationLevel": "strict"})
    refused(lambda: coll.insert_one({"_id": 5, "a": -5}))
    entry = client.local["oplog.rs"].find_one(
        {"op": "c", "ns": db.name + ".$cmd", "o.collMod": "c", "o.validator": {"$exists": True}}
    )
    assert entry["o"]["validator"] == {"a": {"$gte": 0}}


@pytest.mark.parametrize(
    "options, code",
    [
        ({"validator": 5}, 14),
        ({"validator": {"a": 1}, "validationLevel": "sometimes"}, 2),
        ({"validator": {"a": 1}, "validationAction": "shout"}, 2),
        ({"validator": {"$jsonSchema": {"frob": 1}}}, 9),
        ({"validator": {"$jsonSchema": {"type": "integer"}}}, 9),
        ({"validator": {"a": {"$frob": 1}}}, 2),
    ],
)
def test_bad_validation_options_are_refused(db, options, code):
    with pytest.raises(OperationFailure) as failure:
        db.command({"create": "c", **options})
    assert failure.value.code == code
    with pytest.raises(OperationFailure) as failure:
        db.command({"collMod": "missing_or_not", **options})
    assert failure.value.code == code
    assert "c" not in db.list_collection_names()


def test_validator_survives_a_restart(fresh_node):
    fresh_node.start()
    with MongoClient(fresh_node.uri) as mongo:
        mongo.db.create_collection("c", validator={"$jsonSchema": SCHEMA})
    fresh_node.stop()
    fresh_node.start()
    with MongoClient(fresh_node.uri) as mongo:
        refused(lambda: mongo.db.c.insert_one({"name": "x"}))
