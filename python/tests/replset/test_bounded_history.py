"""Bounded history (issue 8 item 4): a primary-secondary-arbiter set whose
secondary is down cannot move its commit point, yet keeps taking `w: 1`
writes. The primary must not hold the versions above the commit point in
memory without limit: past `--cache-size-mb / 4` it checkpoints beyond the
commit point and keeps the history on disk. A majority write waits, a `w: 1`
write succeeds; then the secondary comes back, catches up, and nothing is
lost."""

from __future__ import annotations

import time

import pytest
from pymongo.errors import WTimeoutError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

CACHE_SIZE_MB = 4
# The primary's bound on versions in memory: a quarter of the cache.
HISTORY_BYTES_MAX = CACHE_SIZE_MB * 1024 * 1024 // 4
# Past twice the bound client writes wait (flow control); commands already
# admitted still land (each insert_many below is half a megabyte), and the
# checkpoint thread looks every 100 ms. Without the bound the peak is all
# the data written: 6 MB and more.
HISTORY_PEAK_MAX_BYTES = 2 * HISTORY_BYTES_MAX + 4 * 1024 * 1024
DOC_BYTES = 1024
BATCH_DOCS = 500
BATCHES = 12  # about 6 MB of documents, 6x the bound
# The primary's resident set stays under this (a debug build; the redb
# cache is 1 MB here, and a checkpoint's batch and redb's dirty pages hold
# a copy of what it writes while it commits). Measured: about 60 MB.
RSS_MAX_MB = 150
# Generous: a debug build on a loaded two-core machine.
CATCH_UP_TIMEOUT_S = 180.0


def history(client) -> dict:
    return client.admin.command("serverStatus")["slipstream"]["history"]


def resident_mb(client) -> int:
    return client.admin.command("serverStatus")["mem"]["resident"]


def wait_until(what: str, condition, timeout: float = CATCH_UP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_stalled_commit_point_keeps_history_bounded(make_replset):
    rs = make_replset(nodes=2, arbiter=True, serve_args=[f"--cache-size-mb={CACHE_SIZE_MB}"])
    primary = rs.primary()
    secondary = next(i for i in rs.data_members() if i != primary)
    client = rs.client()
    majority = client.hb.get_collection("docs", write_concern=WriteConcern(w="majority", wtimeout=60_000))
    majority.insert_one({"_id": "before"})
    rs.kill(secondary)
    started = time.monotonic()
    docs = client.hb.get_collection("docs", write_concern=WriteConcern(w=1))
    direct = rs.direct(primary)
    rss_before = resident_mb(direct)
    peak = 0
    padding = "x" * DOC_BYTES
    for batch in range(BATCHES):
        # Every w:1 write succeeds, however far past the commit point.
        result = docs.insert_many([{"_id": batch * BATCH_DOCS + i, "pad": padding} for i in range(BATCH_DOCS)])
        assert len(result.inserted_ids) == BATCH_DOCS
        # Rewrite a few hot documents: their versions pile up too.
        docs.update_many({"_id": {"$lt": 10}}, {"$set": {"batch": batch}})
        peak = max(peak, history(direct)["bytesInMemory"])
    # A majority write waits: nobody else can acknowledge it.
    with pytest.raises(WTimeoutError):
        client.hb.get_collection("docs", write_concern=WriteConcern(w="majority", wtimeout=1_000)).insert_one(
            {"_id": "waits"})
    held = history(direct)
    rss_after = resident_mb(direct)
    print(f"history peak {peak} held {held} rss {rss_before} -> {rss_after} MB")
    assert held["bytesInMemoryMax"] == HISTORY_BYTES_MAX
    assert peak <= HISTORY_PEAK_MAX_BYTES, (peak, held)
    # The commit point stayed at "before": the checkpoint went past it.
    assert held["checkpointsPastStable"] > 0, held
    assert held["floor"] is not None and held["floor"] == held["oldestTimestamp"], held
    assert rss_after <= RSS_MAX_MB, (rss_before, rss_after)
    flow = direct.admin.command("serverStatus")["flowControl"]
    assert flow["enabled"] is True and flow["historyBytesThreshold"] == 2 * HISTORY_BYTES_MAX, flow
    assert flow["isLagged"] is (flow["majorityLagSeconds"] > 10), flow
    assert flow["timeAcquiringMicros"] >= 0 and flow["targetRateLimit"] > 0, flow
    # A majority read still reads at the stalled commit point, from the
    # history on disk: it sees only "before".
    majority_read = direct.hb.get_collection("docs", read_concern=ReadConcern("majority"))
    assert majority_read.count_documents({}) == 1
    loaded = time.monotonic()
    rs.restart(secondary)
    rs.wait_state(secondary, "SECONDARY", timeout=CATCH_UP_TIMEOUT_S)
    rs.wait_quiet([primary, secondary], timeout=CATCH_UP_TIMEOUT_S)
    print(f"load {loaded - started:.1f} s, catch-up {time.monotonic() - loaded:.1f} s")
    # The secondary caught up: a majority write succeeds again.
    majority.insert_one({"_id": "after"})
    total = BATCHES * BATCH_DOCS + 3  # "before", "waits" (w:1 applied, only unacknowledged by a majority), "after"
    assert docs.count_documents({}) == total
    # The commit point passed the checkpoint: once the snapshot window
    # (minSnapshotHistoryWindowInSeconds, 300 s by default, which the history
    # on disk serves) no longer asks for it, an ordinary checkpoint drops it.
    assert direct.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=0)["was"] == 300
    wait_until("the history to be dropped", lambda: history(direct)["floor"] is None)
    rs.assert_db_hash_agree(timeout=CATCH_UP_TIMEOUT_S)
    on_secondary = rs.direct(secondary).hb.docs
    assert on_secondary.count_documents({}) == total
    assert on_secondary.find_one({"_id": 5})["batch"] == BATCHES - 1


def test_a_primary_past_its_commit_point_rolls_back_below_its_checkpoint(make_replset):
    """The primary of a P-S-A set whose secondary is down takes w:1 writes
    until its checkpoint passes the commit point; it then dies, the
    secondary comes back and wins with the arbiter, and writes. The old
    primary, restarted, must roll back to the common point, which is below
    its checkpoint and above its history floor, and become SECONDARY (it
    refused and exited at every start)."""
    rs = make_replset(nodes=2, arbiter=True, serve_args=[f"--cache-size-mb={CACHE_SIZE_MB}"])
    old = rs.primary()
    other = next(i for i in rs.data_members() if i != old)
    client = rs.client()
    client.hb.get_collection("docs", write_concern=WriteConcern(w="majority", wtimeout=60_000)).insert_one(
        {"_id": "before"})
    rs.kill(other)
    docs = client.hb.get_collection("docs", write_concern=WriteConcern(w=1))
    direct = rs.direct(old)
    padding = "x" * DOC_BYTES
    batch = 0
    while history(direct)["checkpointsPastStable"] == 0:
        assert batch < 4 * BATCHES, history(direct)
        docs.insert_many([{"_id": batch * BATCH_DOCS + i, "pad": padding} for i in range(BATCH_DOCS)])
        batch += 1
        time.sleep(0.2)
    held = history(direct)
    assert held["floor"] is not None, held
    rs.kill(old)
    rs.restart(other)
    new = rs.primary(exclude=(old,), timeout=CATCH_UP_TIMEOUT_S)
    assert new == other
    rs.direct(new).hb.docs.insert_one({"_id": "diverged"})
    rs.restart(old)
    rs.wait_state(old, "SECONDARY", timeout=CATCH_UP_TIMEOUT_S)
    status = rs.direct(old).admin.command("replSetGetStatus")
    assert status["lastRollback"]["undoneEntries"] >= batch, status["lastRollback"]
    rs.wait_quiet([new, old], timeout=CATCH_UP_TIMEOUT_S)
    on_old = rs.direct(old).hb.docs
    assert sorted(d["_id"] for d in on_old.find({}, {"_id": 1})) == ["before", "diverged"]
    rs.assert_db_hash_agree(timeout=CATCH_UP_TIMEOUT_S)
