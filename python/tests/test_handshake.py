"""Handshake and admin commands that drivers and shells send (issue 2, item 3)."""

import pytest
from bson import Int64, ObjectId
from pymongo.errors import OperationFailure
from slipstream_testing.wire import raw_command


def test_hello_reports_a_writable_standalone(client):
    reply = client.admin.command("hello")
    assert reply["ok"] == 1.0
    assert reply["isWritablePrimary"] is True
    assert reply["minWireVersion"] == 0
    assert reply["maxWireVersion"] == 21
    assert reply["maxBsonObjectSize"] == 16 * 1024 * 1024
    assert reply["maxMessageSizeBytes"] == 48_000_000
    assert reply["maxWriteBatchSize"] == 100_000
    assert reply["logicalSessionTimeoutMinutes"] == 30
    assert isinstance(reply["connectionId"], int)
    assert "localTime" in reply


def test_topology_version_counter_is_int64(client):
    # The Java driver rejects an Int32 counter.
    raw = client.admin.command("hello", codec_options=client.codec_options.with_options(
        document_class=dict))
    version = raw["topologyVersion"]
    assert isinstance(version["processId"], ObjectId)
    assert isinstance(version["counter"], int)
    from bson.raw_bson import RawBSONDocument
    from bson.codec_options import CodecOptions
    raw_reply = client.admin.command("hello", codec_options=CodecOptions(document_class=RawBSONDocument))
    counter_element = raw_reply.raw.find(b"counter\x00")
    assert counter_element > 0
    # The type byte precedes the element name: 0x12 is Int64.
    assert raw_reply.raw[counter_element - 1] == 0x12


def test_legacy_ismaster_spellings(client):
    for name in ("isMaster", "ismaster"):
        reply = client.admin.command(name)
        assert reply["ismaster"] is True
        assert reply["maxWireVersion"] == 21


def test_hello_ok_is_echoed(client):
    reply = client.admin.command({"isMaster": 1, "helloOk": True})
    assert reply.get("helloOk") is True


def test_ping(client):
    assert client.admin.command("ping")["ok"] == 1.0


def test_build_info_has_version_array(client):
    reply = client.admin.command("buildInfo")
    assert isinstance(reply["version"], str)
    assert reply["versionArray"][0] == 7
    assert len(reply["versionArray"]) == 4


def test_get_parameter_star_includes_enable_test_commands(client):
    reply = client.admin.command({"getParameter": "*"})
    assert "enableTestCommands" in reply
    named = client.admin.command({"getParameter": 1, "enableTestCommands": 1})
    assert named["enableTestCommands"] in (True, 1)


def test_initial_sync_method_is_a_parameter_with_two_values(client):
    assert client.admin.command({"getParameter": 1, "initialSyncMethod": 1})["initialSyncMethod"] == "fileCopyBased"
    reply = client.admin.command({"setParameter": 1, "initialSyncMethod": "logical"})
    assert reply["was"] == "fileCopyBased"
    try:
        assert client.admin.command({"getParameter": 1, "initialSyncMethod": 1})["initialSyncMethod"] == "logical"
        for bad in ("snapshot", 1, None):
            with pytest.raises(OperationFailure) as refused:
                client.admin.command({"setParameter": 1, "initialSyncMethod": bad})
            assert refused.value.code == 2, bad
    finally:
        client.admin.command({"setParameter": 1, "initialSyncMethod": "fileCopyBased"})


def test_get_cmd_line_opts(client, node):
    reply = client.admin.command("getCmdLineOpts")
    assert isinstance(reply["argv"], list)
    assert reply["parsed"]["net"]["port"] == node.port


def test_server_status_sections(client):
    client.admin.command("ping")
    reply = client.admin.command("serverStatus")
    for key in ("host", "version", "process", "pid", "uptime", "uptimeMillis", "localTime",
                "connections", "opcounters", "mem", "storageEngine", "network"):
        assert key in reply, key
    assert reply["storageEngine"]["name"]
    assert reply["connections"]["current"] >= 1
    for counter in ("insert", "query", "update", "delete", "getmore", "command"):
        assert counter in reply["opcounters"]
    # The engine's own section.
    assert reply["storageEngine"]["name"] in reply
    # Snapshot reads are served (it said false).
    assert reply["storageEngine"]["supportsSnapshotReadConcern"] is True
    # MongoDB's cursor counters (they were missing).
    cursor = reply["metrics"]["cursor"]
    assert set(cursor["open"]) == {"noTimeout", "pinned", "total"} and "timedOut" in cursor


def test_explain_names_the_member_that_answered(client):
    """MongoDB's explain carries serverInfo: which host answered a query."""
    client.t.c.insert_one({"_id": 1})
    info = client.t.c.find({"_id": 1}).explain()["serverInfo"]
    assert set(info) >= {"host", "port", "version", "gitVersion"}, info
    assert info["port"] == client.address[1]


def test_opcounters_count_inserts(client, coll):
    before = client.admin.command("serverStatus")["opcounters"]["insert"]
    coll.insert_many([{"i": i} for i in range(5)])
    after = client.admin.command("serverStatus")["opcounters"]["insert"]
    assert after - before == 5


def test_host_info_whatsmyuri_connection_status(client):
    assert "system" in client.admin.command("hostInfo")
    assert client.admin.command("whatsmyuri")["you"].startswith("127.0.0.1:")
    status = client.admin.command("connectionStatus")
    assert "authInfo" in status


def test_get_log(client):
    reply = client.admin.command({"getLog": "global"})
    assert isinstance(reply["log"], list)
    assert reply["totalLinesWritten"] >= len(reply["log"])
    assert "names" in client.admin.command({"getLog": "*"})


def test_unknown_command_is_command_not_found(client):
    with pytest.raises(OperationFailure) as failure:
        client.admin.command("noSuchCommandAnywhere")
    assert failure.value.code == 59
    assert failure.value.details["codeName"] == "CommandNotFound"


def test_end_sessions_is_accepted(client):
    session = client.start_session()
    session.end_session()
    assert client.admin.command("ping")["ok"] == 1.0


DRIVER_METADATA = {"driver": {"name": "probe", "version": "1"}, "os": {"type": "Linux"}}


def test_client_metadata_is_checked_and_only_taken_in_the_first_hello(client, node):
    """MongoDB's ClientMetadata rules: driver.name, driver.version and
    os.type are required (183), application.name is at most 128 bytes
    (184), the document at most 512 (185); and it may only come with a
    connection's first hello (186): pymongo's pooled connection has sent
    its own already."""
    def first_hello(metadata):
        return raw_command(node.port, {"hello": 1, "client": metadata, "$db": "admin"})

    assert first_hello(DRIVER_METADATA)["ok"] == 1.0
    assert first_hello({**DRIVER_METADATA, "application": {"name": "a" * 128}})["ok"] == 1.0
    refusals = [
        ({"os": {"type": "Linux"}}, 183),
        ({"driver": {"name": "probe"}, "os": {"type": "Linux"}}, 183),
        ({"driver": {"name": "probe", "version": "1"}}, 183),
        ({**DRIVER_METADATA, "application": {"name": "a" * 129}}, 184),
        ({**DRIVER_METADATA, "platform": "p" * 600}, 185),
        ("not a document", 14),
    ]
    for metadata, code in refusals:
        reply = first_hello(metadata)
        assert reply["ok"] == 0.0 and reply["code"] == code, (metadata, reply)
    with pytest.raises(OperationFailure) as raised:
        client.admin.command({"hello": 1, "client": DRIVER_METADATA})
    assert raised.value.code == 186
    assert client.admin.command("hello")["ok"] == 1.0


def test_awaitable_hello_arguments_are_checked_and_max_time_ms_ends_the_wait(client):
    """MongoDB's codes for a streaming hello's arguments (31368: one of
    topologyVersion and maxAwaitTimeMS without the other; 31372: a
    negative counter; 31373: a negative wait; 31382: a counter this server
    has not reached), and maxTimeMS bounds the wait (50) instead of
    leaving it to maxAwaitTimeMS."""
    version = client.admin.command("hello")["topologyVersion"]
    future = {"processId": version["processId"], "counter": Int64(version["counter"] + 5)}
    negative = {"processId": version["processId"], "counter": Int64(-1)}
    cases = [
        ({"maxAwaitTimeMS": 100}, 31368),
        ({"topologyVersion": version}, 31368),
        ({"topologyVersion": negative, "maxAwaitTimeMS": 100}, 31372),
        ({"topologyVersion": version, "maxAwaitTimeMS": -1}, 31373),
        ({"topologyVersion": future, "maxAwaitTimeMS": 100}, 31382),
        ({"topologyVersion": version, "maxAwaitTimeMS": 50_000, "maxTimeMS": 200}, 50),
    ]
    for arguments, code in cases:
        with pytest.raises(OperationFailure) as raised:
            client.admin.command({"hello": 1, **arguments})
        assert raised.value.code == code, (arguments, raised.value.details)
    # Another process's topologyVersion is answered at once.
    other = {"processId": ObjectId(), "counter": Int64(0)}
    assert client.admin.command({"hello": 1, "topologyVersion": other, "maxAwaitTimeMS": 50_000})["ok"] == 1.0
