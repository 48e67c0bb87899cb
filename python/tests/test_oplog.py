"""local.oplog.rs: every write is an oplog entry, readable and tailable (issue 2, item 6)."""

import threading
import time

import pytest
from bson import Int64, Timestamp
from pymongo import CursorType


def oplog(client):
    return client.local["oplog.rs"]


def newest(client, n=1):
    return list(oplog(client).find().sort("$natural", -1).limit(n))


def test_insert_is_an_oplog_entry_with_figure_1_fields(client, coll):
    coll.insert_one({"_id": "op1", "x": 1})
    entry = newest(client)[0]
    assert list(entry.keys())[:4] == ["ts", "t", "op", "ns"]
    assert entry["op"] == "i"
    assert entry["ns"] == coll.full_name
    assert entry["o"] == {"_id": "op1", "x": 1}
    assert isinstance(entry["ts"], Timestamp)
    assert "ui" in entry and "wall" in entry


def test_inc_is_logged_as_set_of_the_computed_value(client, coll):
    coll.insert_one({"_id": 1, "n": 41})
    coll.update_one({"_id": 1}, {"$inc": {"n": 1}})
    entry = newest(client)[0]
    assert entry["op"] == "u"
    assert entry["o2"] == {"_id": 1}
    assert "$inc" not in str(entry["o"])
    assert "42" in str(entry["o"])


def test_delete_and_commands_are_logged(client, db):
    db.c.insert_one({"_id": 1})
    db.c.delete_one({"_id": 1})
    assert newest(client)[0]["op"] == "d"
    db.c.drop()
    entry = newest(client)[0]
    assert entry["op"] == "c"
    assert entry["o"].get("drop") == "c"


def test_timestamps_strictly_increase(client, coll):
    coll.insert_many([{"i": i} for i in range(50)])
    entries = newest(client, 50)
    stamps = [(e["ts"].time, e["ts"].inc) for e in reversed(entries)]
    assert stamps == sorted(set(stamps))


def test_filter_on_ts(client, coll):
    coll.insert_one({"_id": "before"})
    marker = newest(client)[0]["ts"]
    coll.insert_many([{"_id": f"after{i}"} for i in range(3)])
    after = list(oplog(client).find({"ts": {"$gt": marker}}))
    assert [e["o"]["_id"] for e in after if e["op"] == "i"] == ["after0", "after1", "after2"]
    at = list(oplog(client).find({"ts": {"$gte": marker}}).limit(1))
    assert at[0]["ts"] == marker


def test_tailable_await_cursor_wakes_on_new_entries(client, coll):
    coll.insert_one({"_id": "start"})
    marker = newest(client)[0]["ts"]
    cursor = oplog(client).find({"ts": {"$gt": marker}}, cursor_type=CursorType.TAILABLE_AWAIT,
                                oplog_replay=False).max_await_time_ms(5000)
    seen = []

    def writer():
        time.sleep(0.5)
        coll.insert_one({"_id": "woken"})

    thread = threading.Thread(target=writer)
    thread.start()
    deadline = time.monotonic() + 20
    while cursor.alive and time.monotonic() < deadline and not seen:
        for entry in cursor:
            seen.append(entry)
            break
    thread.join()
    assert seen and seen[0]["o"]["_id"] == "woken"
    cursor.close()


def test_tailable_cursor_times_out_with_empty_batch(client, coll):
    coll.insert_one({"_id": "tail-idle"})
    marker = newest(client)[0]["ts"]
    reply = client.local.command({"find": "oplog.rs", "filter": {"ts": {"$gt": marker}},
                                  "tailable": True, "awaitData": True})
    cursor_id = reply["cursor"]["id"]
    assert cursor_id != 0
    started = time.monotonic()
    more = client.local.command({"getMore": cursor_id, "collection": "oplog.rs", "maxTimeMS": 300})
    assert more["cursor"]["nextBatch"] == []
    assert more["cursor"]["id"] == cursor_id
    assert time.monotonic() - started >= 0.25
    client.local.command({"killCursors": "oplog.rs", "cursors": [cursor_id]})


def test_a_sort_on_ts_reads_the_oplog_in_its_order(client, coll):
    """`sort({ts: -1}).limit(1)`, the usual way to read the newest entry:
    the oplog is in `ts` order, so this is its natural order (it answered
    115). Other sorts are still refused, clearly."""
    from pymongo.errors import OperationFailure

    coll.insert_many([{"_id": f"ts{i}"} for i in range(5)])
    by_ts = list(oplog(client).find().sort("ts", -1).limit(3))
    assert by_ts == newest(client, 3)
    first = list(oplog(client).find().sort("ts", 1).limit(2))
    assert first == list(oplog(client).find().sort("$natural", 1).limit(2))
    assert [e["ts"] for e in by_ts] == sorted((e["ts"] for e in by_ts), reverse=True)
    with pytest.raises(OperationFailure) as raised:
        list(oplog(client).find().sort("op", 1))
    assert raised.value.code == 115
