"""A find's maxTimeMS covers its getMores too: the maxTimeAlwaysTimeOut
fail point reaches them, and a cursor without a limit is unaffected."""

from __future__ import annotations

import pytest
from pymongo.errors import CursorNotFound, ExecutionTimeout


@pytest.fixture
def coll(db):
    db.items.insert_many([{"i": i} for i in range(50)])
    return db.items


def fail_point(client, mode):
    client.admin.command("configureFailPoint", "maxTimeAlwaysTimeOut", mode=mode)


def test_get_more_of_a_timed_cursor_times_out(client, coll):
    cursor = coll.find().max_time_ms(5000).batch_size(10)
    next(cursor)
    cursor_id = cursor.cursor_id
    fail_point(client, "alwaysOn")
    try:
        with pytest.raises(ExecutionTimeout):
            cursor.to_list()
    finally:
        fail_point(client, "off")
    # The error closed the cursor on the server.
    with pytest.raises(CursorNotFound):
        coll.database.command("getMore", cursor_id, collection=coll.name)


def test_untimed_cursor_ignores_the_fail_point(client, coll):
    cursor = coll.find().batch_size(10)
    next(cursor)
    fail_point(client, "alwaysOn")
    try:
        assert len(cursor.to_list()) == 49
    finally:
        fail_point(client, "off")


def test_time_left_is_carried_across_get_mores(coll):
    cursor = coll.find().max_time_ms(60_000).batch_size(5)
    assert len(cursor.to_list()) == 50
