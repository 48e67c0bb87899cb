"""An unknown top-level field is refused (40415, "BSON field '<command>.<field>' is an unknown
field.") by the commands whose MongoDB 7.0 parser is strict IDL: the write commands,
findAndModify, aggregate, the catalog and index commands, explain, listDatabases and dbStats.
The generic arguments drivers add (comment, maxTimeMS, a session's lsid) and the options they
send still work. validate has no IDL parser in 7.0 and keeps ignoring unknown fields.
Fields those parsers declare are either used (collectionUUID, includeIndexBuildInfo,
ignoreUnknownIndexOptions, commitQuorum) or, where nothing here implements them, refused with
115 instead of ignored."""

from __future__ import annotations

import pytest
from pymongo import ReturnDocument
from pymongo.errors import OperationFailure

SETUP_DOCUMENT = {"_id": 1, "x": 1}


@pytest.fixture
def coll(db):
    db.c.insert_one(dict(SETUP_DOCUMENT))
    db.c.create_index("x")
    return db.c


def command_of(name: str, db) -> tuple[str, dict]:
    """The database to run `name` on ("admin" or the test's) and a valid call of it on `db.c`."""
    commands = {
        "insert": ("db", {"insert": "c", "documents": [{"y": 1}]}),
        "update": ("db", {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"y": 1}}}]}),
        "delete": ("db", {"delete": "c", "deletes": [{"q": {"_id": 1}, "limit": 1}]}),
        "findAndModify": ("db", {"findAndModify": "c", "query": {"_id": 1}, "update": {"$set": {"y": 1}}}),
        "aggregate": ("db", {"aggregate": "c", "pipeline": [], "cursor": {}}),
        "listCollections": ("db", {"listCollections": 1}),
        "listIndexes": ("db", {"listIndexes": "c"}),
        "createIndexes": ("db", {"createIndexes": "c", "indexes": [{"key": {"y": 1}, "name": "y_1"}]}),
        "dropIndexes": ("db", {"dropIndexes": "c", "index": "x_1"}),
        "drop": ("db", {"drop": "c"}),
        "dropDatabase": ("db", {"dropDatabase": 1}),
        "renameCollection": ("admin", {"renameCollection": f"{db.name}.c", "to": f"{db.name}.d"}),
        "explain": ("db", {"explain": {"find": "c"}}),
        "listDatabases": ("admin", {"listDatabases": 1, "nameOnly": True}),
        "dbStats": ("db", {"dbStats": 1}),
    }
    return commands[name]


STRICT_COMMANDS = [
    "insert", "update", "delete", "findAndModify", "aggregate", "listCollections", "listIndexes",
    "createIndexes", "dropIndexes", "drop", "dropDatabase", "renameCollection", "explain",
    "listDatabases", "dbStats",
]


def run(db, name: str, extra: dict, session=None) -> dict:
    target, command = command_of(name, db)
    database = db.client.admin if target == "admin" else db
    return database.command({**command, **extra}, session=session)


def assert_unknown_field(call, qualified: str) -> None:
    with pytest.raises(OperationFailure) as failure:
        call()
    assert failure.value.code == 40415
    assert failure.value.details["errmsg"] == f"BSON field '{qualified}' is an unknown field."


@pytest.mark.parametrize("name", STRICT_COMMANDS)
def test_an_unknown_field_is_refused_before_anything_is_done(db, coll, name):
    assert_unknown_field(lambda: run(db, name, {"foo": 1}), f"{name}.foo")
    # Refused by the parse: nothing was written, dropped or renamed.
    assert list(coll.find()) == [SETUP_DOCUMENT]
    assert sorted(index["name"] for index in coll.list_indexes()) == ["_id_", "x_1"]


@pytest.mark.parametrize("name", STRICT_COMMANDS)
def test_the_generic_arguments_drivers_send_are_accepted(db, coll, name):
    with db.client.start_session() as session:
        reply = run(db, name, {"comment": "why", "maxTimeMS": 60_000}, session=session)
    assert reply["ok"] == 1.0


@pytest.mark.parametrize(
    "name,command",
    [
        ("findAndModify", {"findandmodify": "c", "query": {}, "remove": True, "foo": 1}),
        ("dropIndexes", {"deleteIndexes": "c", "index": "x_1", "foo": 1}),
        ("dbStats", {"dbstats": 1, "foo": 1}),
    ],
)
def test_an_alias_is_refused_under_the_command_name(db, coll, name, command):
    assert_unknown_field(lambda: db.command(command), f"{name}.foo")


def test_internal_fields_of_mongos_are_refused(db, coll):
    # Declared by MongoDB 7.0 for the commands mongos sends to shards only.
    assert_unknown_field(lambda: db.command({"aggregate": "c", "pipeline": [], "cursor": {}, "fromMongos": True}),
                         "aggregate.fromMongos")
    assert_unknown_field(lambda: db.command({"insert": "c", "documents": [{}], "isTimeseriesNamespace": True}),
                         "insert.isTimeseriesNamespace")


@pytest.mark.parametrize(
    "inner,qualified",
    [
        ({"aggregate": "c", "pipeline": [], "cursor": {}, "foo": 1}, "aggregate.foo"),
        ({"count": "c", "foo": 1}, "count.foo"),
        ({"distinct": "c", "key": "x", "foo": 1}, "distinct.foo"),
        ({"update": "c", "updates": [{"q": {}, "u": {"$set": {"y": 1}}}], "foo": 1}, "update.foo"),
        ({"delete": "c", "deletes": [{"q": {}, "limit": 1}], "foo": 1}, "delete.foo"),
        ({"findAndModify": "c", "query": {}, "remove": True, "foo": 1}, "findAndModify.foo"),
        ({"find": "c", "foo": 1}, "find.foo"),
    ],
)
def test_explain_refuses_an_unknown_field_of_the_explained_command(db, coll, inner, qualified):
    assert_unknown_field(lambda: db.command({"explain": inner}), qualified)


def test_validate_ignores_an_unknown_field_as_mongodb_does(db, coll):
    # MongoDB 7.0's validate reads its options by name (commands/validate.cpp), with no IDL parser.
    assert db.command({"validate": "c", "foo": 1})["valid"] is True


# The options drivers send still work.

def test_insert_with_ordered_and_bypass_document_validation(db, coll):
    db.create_collection("validated", validator={"n": {"$type": "int"}})
    result = db.validated.insert_many([{"n": "not an int"}, {"n": 2}], ordered=False, bypass_document_validation=True)
    assert len(result.inserted_ids) == 2
    reply = db.command({"insert": "c", "documents": [{"_id": 2}], "ordered": True, "bypassDocumentValidation": False,
                        "bypassEmptyTsReplacement": False})
    assert reply["n"] == 1


def test_update_and_delete_with_their_options(db, coll):
    result = coll.update_one({"$expr": {"$eq": ["$_id", "$$id"]}}, {"$set": {"y": 1}}, let={"id": 1}, hint="x_1",
                             bypass_document_validation=True, comment="why")
    assert result.modified_count == 1
    result = coll.delete_many({"$expr": {"$eq": ["$x", "$$x"]}}, let={"x": 1}, hint="x_1", comment="why")
    assert result.deleted_count == 1


def test_find_and_modify_with_the_options_drivers_send(db, coll):
    coll.insert_one({"_id": 2, "x": 2, "a": [1, 5, 9]})
    found = coll.find_one_and_update(
        {"$expr": {"$gte": ["$x", "$$min"]}},
        {"$set": {"a.$[big]": 0}},
        projection={"a": 1},
        sort=[("x", -1)],
        upsert=True,
        return_document=ReturnDocument.AFTER,
        array_filters=[{"big": {"$gt": 4}}],
        hint="x_1",
        let={"min": 1},
        collation={"locale": "en"},
        comment="why",
    )
    assert found == {"_id": 2, "a": [1, 0, 0]}
    removed = db.command({"findAndModify": "c", "query": {"_id": 2}, "remove": True, "fields": {"x": 1},
                          "bypassDocumentValidation": True, "maxTimeMS": 60_000, "writeConcern": {"w": 1}})
    assert removed["value"] == {"_id": 2, "x": 2}


def test_aggregate_with_the_options_drivers_send(db, coll):
    found = list(coll.aggregate([{"$match": {"$expr": {"$eq": ["$x", "$$x"]}}}], allowDiskUse=True, hint="x_1",
                                let={"x": 1}, batchSize=1, bypassDocumentValidation=True, comment="why",
                                maxTimeMS=60_000))
    assert found == [SETUP_DOCUMENT]
    found = list(coll.aggregate([{"$match": {"x": 1}}], collation={"locale": "en", "strength": 2}))
    assert found == [SETUP_DOCUMENT]
    reply = db.command({"aggregate": "c", "pipeline": [], "explain": True})
    assert reply["ok"] == 1.0


def test_catalog_and_index_commands_with_their_options(db, coll):
    assert db.list_collection_names(filter={"name": "c"}, authorizedCollections=True) == ["c"]
    entries = list(db.list_collections(filter={"name": "c"}, nameOnly=False, comment="why"))
    assert [entry["name"] for entry in entries] == ["c"]
    reply = db.command({"listCollections": 1, "cursor": {"batchSize": 1}, "filter": {"name": "c"}})
    assert [entry["name"] for entry in reply["cursor"]["firstBatch"]] == ["c"]
    assert [index["name"] for index in coll.list_indexes(comment="why")] == ["_id_", "x_1"]
    reply = db.command({"listIndexes": "c", "cursor": {"batchSize": 1}})
    assert [index["name"] for index in reply["cursor"]["firstBatch"]] == ["_id_"]
    assert coll.create_index("y", comment="why") == "y_1"
    coll.drop_index("y_1", comment="why")
    assert db.name in db.client.list_database_names(comment="why")
    listed = db.client.list_databases(filter={"name": db.name}, authorizedDatabases=True)
    assert [entry["name"] for entry in listed] == [db.name]
    assert db.command("dbStats", scale=1024, freeStorage=False)["ok"] == 1.0
    coll.rename("d", dropTarget=True, comment="why")
    assert db.list_collection_names() == ["d"]
    assert db.command({"explain": {"find": "d", "filter": {"x": 1}}, "verbosity": "queryPlanner"})["ok"] == 1.0
    assert db.d.find({"x": 1}).explain()["ok"] == 1.0
    db.drop_collection("d", comment="why")
    assert db.list_collection_names() == []


# Fields MongoDB's parsers declare that nothing here implements are refused
# (115) rather than accepted and ignored.

@pytest.mark.parametrize("name, field, value", [
    ("insert", "encryptionInformation", {"type": 1, "schema": {}}),
    ("update", "runtimeConstants", {"localNow": 1}),
    ("aggregate", "isMapReduceCommand", True),
    ("aggregate", "encryptionInformation", {"type": 1}),
    ("createIndexes", "returnOnStart", True),
    ("findAndModify", "runtimeConstants", {"localNow": 1}),
])
def test_declared_but_unimplemented_fields_are_refused(coll, name, field, value):
    where, command = command_of(name, coll.database)
    database = coll.database.client.admin if where == "admin" else coll.database
    with pytest.raises(OperationFailure) as raised:
        database.command({**command, field: value})
    assert raised.value.code == 115, raised.value.details
    assert f"{name}.{field}" in str(raised.value)
    assert coll.find_one({"_id": 1}) == SETUP_DOCUMENT


def uuid_of(db, name):
    return next(c for c in db.list_collections() if c["name"] == name)["info"]["uuid"]


@pytest.mark.parametrize("name", ["insert", "update", "delete", "aggregate", "createIndexes", "dropIndexes", "drop",
                                  "renameCollection"])
def test_collection_uuid_must_name_the_collection(coll, name):
    db = coll.database
    db.other.insert_one({"_id": 1})
    other = uuid_of(db, "other")
    where, command = command_of(name, db)
    database = db.client.admin if where == "admin" else db
    with pytest.raises(OperationFailure) as raised:
        database.command({**command, "collectionUUID": other})
    assert raised.value.code == 361, raised.value.details
    details = raised.value.details
    assert (details["db"], details["expectedCollection"], details["actualCollection"]) == (db.name, "c", "other")
    assert coll.find_one({"_id": 1}) == SETUP_DOCUMENT
    assert "x_1" in coll.index_information()
    database.command({**command, "collectionUUID": uuid_of(db, "c")})


def test_collection_uuid_of_no_collection_and_of_the_wrong_type(coll):
    import uuid

    from bson.binary import Binary, UuidRepresentation

    db = coll.database
    with pytest.raises(OperationFailure) as raised:
        db.command({"find": "c", "collectionUUID": Binary.from_uuid(uuid.uuid4(), UuidRepresentation.STANDARD)})
    assert raised.value.code == 361 and raised.value.details["actualCollection"] is None, raised.value.details
    with pytest.raises(OperationFailure) as raised:
        db.command({"find": "c", "collectionUUID": "c"})
    assert raised.value.code == 14, raised.value.details
    assert db.command({"find": "c", "collectionUUID": uuid_of(db, "c")})["cursor"]["firstBatch"] == [SETUP_DOCUMENT]


def test_list_indexes_build_info_wraps_each_ready_index_and_excludes_build_uuids(coll):
    db = coll.database
    wrapped = db.command({"listIndexes": "c", "includeIndexBuildInfo": True})["cursor"]["firstBatch"]
    assert [entry["spec"]["name"] for entry in wrapped] == ["_id_", "x_1"]
    assert all(set(entry) == {"spec"} for entry in wrapped), wrapped
    plain = db.command({"listIndexes": "c", "includeBuildUUIDs": True})["cursor"]["firstBatch"]
    assert [entry["name"] for entry in plain] == ["_id_", "x_1"]
    with pytest.raises(OperationFailure) as raised:
        db.command({"listIndexes": "c", "includeBuildUUIDs": True, "includeIndexBuildInfo": True})
    assert raised.value.code == 72, raised.value.details


def test_ignore_unknown_index_options_drops_them(coll):
    db = coll.database
    spec = {"key": {"z": 1}, "name": "z_1", "someFutureOption": 1}
    with pytest.raises(OperationFailure) as raised:
        db.command({"createIndexes": "c", "indexes": [spec]})
    assert raised.value.code == 197, raised.value.details
    db.command({"createIndexes": "c", "indexes": [spec], "ignoreUnknownIndexOptions": True})
    listed = next(i for i in db.command({"listIndexes": "c"})["cursor"]["firstBatch"] if i["name"] == "z_1")
    assert "someFutureOption" not in listed, listed


def test_commit_quorum_on_a_standalone_is_refused(coll):
    with pytest.raises(OperationFailure) as raised:
        coll.database.command({"createIndexes": "c", "indexes": [{"key": {"q": 1}, "name": "q_1"}],
                               "commitQuorum": "majority"})
    assert raised.value.code == 2, raised.value.details
    assert "q_1" not in coll.index_information()
