"""Operator tools: getParameter/setParameter, listCommands, dataSize, dbstats, replSetGetStatus and hello on a standalone (issue 10, item 7)."""

import bson
import pytest
from bson import SON
from pymongo import MongoClient
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.server_api import ServerApi


def code_of(database, command) -> int:
    with pytest.raises(OperationFailure) as failure:
        database.command(command)
    return failure.value.code


def test_list_commands_names_every_command_with_its_api_versions(client):
    commands = client.admin.command("listCommands")["commands"]
    for name in ["find", "insert", "getMore", "hello", "isMaster", "ismaster", "listCommands", "dataSize"]:
        assert name in commands, name
    assert commands["find"]["apiVersions"] == ["1"]
    assert commands["hello"]["apiVersions"] == ["1"]
    assert commands["isMaster"]["apiVersions"] == []
    assert commands["buildInfo"]["apiVersions"] == []
    assert commands["insert"]["secondaryOk"] is False
    assert commands["find"]["secondaryOk"] is True


def test_data_size_of_a_collection(client, coll):
    coll.insert_many([{"_id": i, "s": "x" * 100} for i in range(10)])
    expected = sum(len(bson.encode(doc)) for doc in coll.find())
    reply = client.admin.command({"dataSize": coll.full_name})
    assert reply["numObjects"] == 10
    assert reply["size"] == expected
    empty = client.admin.command({"dataSize": coll.full_name + "_none"})
    assert (empty["size"], empty["numObjects"]) == (0, 0)


def test_data_size_refuses_what_it_cannot_do(client, coll):
    assert code_of(client.admin, {"dataSize": 5}) == 14
    assert code_of(client.admin, {"dataSize": "nodot"}) == 73
    assert code_of(client.admin, SON([("dataSize", coll.full_name), ("keyPattern", {"_id": 1}),
                                      ("min", {"_id": 0}), ("max", {"_id": 5})])) == 115


def test_dbstats_is_an_alias_of_db_stats(db):
    db.c.insert_one({"x": 1})
    reply = db.command("dbstats")
    assert reply["db"] == db.name
    assert reply["objects"] == 1


def test_repl_set_get_status_on_a_standalone(client):
    assert code_of(client.admin, "replSetGetStatus") == 76


def test_hello_connection_id_is_an_int32(client):
    reply = client.admin.command("hello", codec_options=bson.CodecOptions(document_class=bson.SON))
    raw = client.admin.command("hello", codec_options=bson.CodecOptions(
        document_class=bson.raw_bson.RawBSONDocument))
    element = raw.raw[raw.raw.index(b"connectionId") - 1]
    assert element == 0x10, "connectionId must be an Int32"
    assert isinstance(reply["connectionId"], int)


def test_get_parameter_reports_what_may_change_at_runtime(client):
    details = client.admin.command({"getParameter": {"showDetails": True}, "requireApiVersion": 1})
    assert details["requireApiVersion"]["settableAtRuntime"] is True
    fixed = client.admin.command({"getParameter": {"showDetails": True}, "enableTestCommands": 1})
    assert fixed["enableTestCommands"]["settableAtRuntime"] is False


def test_set_parameter_refuses_unknown_and_fixed_parameters(client, db):
    assert code_of(client.admin, SON([("setParameter", 1), ("noSuchParameter", 1)])) == 72
    assert code_of(client.admin, SON([("setParameter", 1), ("enableTestCommands", 0)])) == 20
    assert code_of(client.admin, SON([("setParameter", 1)])) == 72
    assert code_of(db, SON([("setParameter", 1), ("requireApiVersion", False)])) == 13


def test_require_api_version_takes_effect(fresh_node):
    fresh_node.start()
    versioned = MongoClient(fresh_node.uri, server_api=ServerApi("1"))
    plain = MongoClient(fresh_node.uri, serverSelectionTimeoutMS=1000)
    try:
        reply = versioned.admin.command(SON([("setParameter", 1), ("requireApiVersion", True)]))
        assert reply["was"] is False
        assert versioned.admin.command("getParameter", 1, requireApiVersion=1)["requireApiVersion"] is True
        # As in MongoDB, even the handshake of an unversioned client fails.
        with pytest.raises(PyMongoError) as failure:
            plain.test.command("ping")
        assert "498870" in str(failure.value)
        assert versioned.test.command("ping")["ok"] == 1.0
        versioned.admin.command(SON([("setParameter", 1), ("requireApiVersion", False)]))
        with MongoClient(fresh_node.uri, serverSelectionTimeoutMS=5000) as again:
            assert again.test.command("ping")["ok"] == 1.0
    finally:
        versioned.close()
        plain.close()
