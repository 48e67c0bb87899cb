"""Dropping or renaming a collection, or dropping its database, closes
the cursors that read it: their next getMore is QueryPlanKilled (175), as
MongoDB answers (it was CursorNotFound, 43)."""

from __future__ import annotations

import pytest
from pymongo.errors import OperationFailure


def open_cursor(coll):
    coll.insert_many([{"i": i} for i in range(20)])
    reply = coll.database.command("find", coll.name, batchSize=2)
    cursor_id = reply["cursor"]["id"]
    assert cursor_id != 0
    return cursor_id


def get_more(coll, cursor_id):
    return coll.database.command("getMore", cursor_id, collection=coll.name)


def test_drop_closes_cursors_of_that_collection_only(db):
    doomed = open_cursor(db.doomed)
    kept = open_cursor(db.doomed_not)
    db.doomed.drop()
    with pytest.raises(OperationFailure) as info:
        get_more(db.doomed, doomed)
    assert info.value.code == 175
    assert len(get_more(db.doomed_not, kept)["cursor"]["nextBatch"]) == 18


def test_drop_database_closes_its_cursors(client, db):
    cursor_id = open_cursor(db.items)
    client.drop_database(db.name)
    with pytest.raises(OperationFailure) as info:
        get_more(db.items, cursor_id)
    assert info.value.code == 175


def test_rename_closes_cursors_of_source_and_dropped_target(client, db):
    source = open_cursor(db.src)
    target = open_cursor(db.dst)
    client.admin.command("renameCollection", f"{db.name}.src", to=f"{db.name}.dst", dropTarget=True)
    for coll, cursor_id in ((db.src, source), (db.dst, target)):
        with pytest.raises(OperationFailure) as info:
            get_more(coll, cursor_id)
        assert info.value.code == 175
