"""TTL indexes: options kept and listed, MongoDB's refusals, the background
monitor deleting expired documents as replicated deletes, collMod (issue 10, item 3)."""

import time
from datetime import datetime, timedelta, timezone

import pytest
from pymongo.errors import OperationFailure

from slipstream_testing.waiting import poll_until


@pytest.fixture
def fast_ttl(client):
    """The monitor every second for this test (MongoDB's default is 60 s)."""
    client.admin.command({"setParameter": 1, "ttlMonitorSleepSecs": 1})
    yield
    client.admin.command({"setParameter": 1, "ttlMonitorSleepSecs": 60})


def wait_for(predicate, timeout=15.0):
    return poll_until(predicate, timeout)


def ttl_metrics(client):
    return client.admin.command("serverStatus")["metrics"]["ttl"]


def test_expire_after_seconds_is_kept_and_listed(coll):
    coll.create_index("at", expireAfterSeconds=3600)
    listed = {ix["name"]: ix for ix in coll.list_indexes()}
    assert listed["at_1"]["expireAfterSeconds"] == 3600
    assert "expireAfterSeconds" not in listed["_id_"]
    # The same index again is no change; another TTL under the same name is 85.
    coll.create_index("at", expireAfterSeconds=3600)
    with pytest.raises(OperationFailure) as failure:
        coll.create_index("at", expireAfterSeconds=60)
    assert failure.value.code == 85


@pytest.mark.parametrize(
    "key, seconds, code, words",
    [
        ({"a": 1, "b": 1}, 10, 67, "compound indexes do not support TTL"),
        ({"a": 1}, "ten", 67, "must be numeric"),
        ({"a": 1}, -1, 67, "cannot be less than 0"),
        ({"a": 1}, 2**31, 67, "within an acceptable range"),
        ({"_id": 1}, 10, 197, "not valid for an _id index"),
    ],
)
def test_ttl_refusals(coll, key, seconds, code, words):
    spec = {"key": key, "name": "ttl", "expireAfterSeconds": seconds}
    with pytest.raises(OperationFailure) as failure:
        coll.database.command({"createIndexes": coll.name, "indexes": [spec]})
    assert failure.value.code == code
    assert words in str(failure.value)


def test_monitor_deletes_expired_dates_and_arrays_as_oplog_deletes(client, coll, fast_ttl):
    now = datetime.now(timezone.utc)
    hour_ago = now - timedelta(hours=1)
    coll.insert_many(
        [
            {"_id": "old", "at": hour_ago},
            {"_id": "old-in-array", "at": [now + timedelta(days=1), hour_ago]},
            {"_id": "future", "at": now + timedelta(days=1)},
            {"_id": "string", "at": "2000-01-01"},
            {"_id": "number", "at": 0},
            {"_id": "missing"},
        ]
    )
    before = ttl_metrics(client)
    coll.create_index("at", expireAfterSeconds=60)
    assert wait_for(lambda: coll.count_documents({}) == 4)
    assert sorted(d["_id"] for d in coll.find()) == ["future", "missing", "number", "string"]
    after = ttl_metrics(client)
    assert after["deletedDocuments"] - before["deletedDocuments"] >= 2
    assert wait_for(lambda: ttl_metrics(client)["passes"] > after["passes"])
    deletes = client.local["oplog.rs"].find({"op": "d", "ns": coll.full_name})
    assert sorted(entry["o"]["_id"] for entry in deletes) == ["old", "old-in-array"]


def test_disabled_monitor_deletes_nothing(client, coll, fast_ttl):
    client.admin.command({"setParameter": 1, "ttlMonitorEnabled": False})
    try:
        coll.insert_one({"at": datetime.now(timezone.utc) - timedelta(hours=1)})
        coll.create_index("at", expireAfterSeconds=0)
        time.sleep(2.5)
        assert coll.count_documents({}) == 1
    finally:
        client.admin.command({"setParameter": 1, "ttlMonitorEnabled": True})
    assert wait_for(lambda: coll.count_documents({}) == 0)


def test_coll_mod_changes_expire_after_seconds(client, coll, fast_ttl):
    coll.insert_one({"_id": 1, "at": datetime.now(timezone.utc) - timedelta(hours=1)})
    coll.create_index("at", expireAfterSeconds=10 * 365 * 24 * 3600)
    time.sleep(2.5)
    assert coll.count_documents({}) == 1, "ten years have not passed"
    reply = coll.database.command({"collMod": coll.name, "index": {"keyPattern": {"at": 1}, "expireAfterSeconds": 60}})
    assert reply["expireAfterSeconds_old"] == 10 * 365 * 24 * 3600
    assert reply["expireAfterSeconds_new"] == 60
    listed = {ix["name"]: ix for ix in coll.list_indexes()}
    assert listed["at_1"]["expireAfterSeconds"] == 60
    assert wait_for(lambda: coll.count_documents({}) == 0)
    entry = client.local["oplog.rs"].find_one({"op": "c", "ns": coll.database.name + ".$cmd", "o.collMod": coll.name})
    assert entry["o"]["index"] == {"name": "at_1", "expireAfterSeconds": 60}


def test_coll_mod_makes_a_ttl_index_and_refuses_as_mongodb(coll):
    coll.create_index("at")
    coll.create_index([("a", 1), ("b", 1)])
    reply = coll.database.command({"collMod": coll.name, "index": {"name": "at_1", "expireAfterSeconds": 5}})
    assert "expireAfterSeconds_old" not in reply and reply["expireAfterSeconds_new"] == 5
    cases = [
        ({"name": "a_1_b_1", "expireAfterSeconds": 5}, 72),
        ({"name": "_id_", "expireAfterSeconds": 5}, 72),
        ({"name": "at_1", "expireAfterSeconds": -1}, 72),
        ({"name": "at_1", "expireAfterSeconds": 2**31}, 72),
        ({"name": "at_1", "expireAfterSeconds": "5"}, 14),
    ]
    for index, code in cases:
        with pytest.raises(OperationFailure) as failure:
            coll.database.command({"collMod": coll.name, "index": index})
        assert failure.value.code == code, index
    listed = {ix["name"]: ix for ix in coll.list_indexes()}
    assert listed["at_1"]["expireAfterSeconds"] == 5


def test_ttl_survives_a_restart(fresh_node):
    from pymongo import MongoClient

    fresh_node.start()
    with MongoClient(fresh_node.uri) as mongo:
        mongo.db.c.create_index("at", expireAfterSeconds=42)
    fresh_node.stop()
    fresh_node.start()
    with MongoClient(fresh_node.uri) as mongo:
        listed = {ix["name"]: ix for ix in mongo.db.c.list_indexes()}
        assert listed["at_1"]["expireAfterSeconds"] == 42
