"""The memory bound (issue 8 item 4): `--cache-size-mb` bounds the resident set
under load, and serverStatus `slipstream.memory` shows where it goes.

A node with an 8 MB cache takes a few times its cache in 1 KB documents, reads
them all back (the page cache would hold them all without its bound) and
rewrites some, while its resident set and memory section are sampled: the
resident set stays under the stated bound, each cache under its own (the
journal's buffers are sized from the cache too), the components inside the
heap, and once idle the allocator gives back what the load freed. Large
requests on many connections at once wait for the request budget (one larger
than the whole budget runs alone), and a sorted cursor's buffered results are
counted while it is open."""

from __future__ import annotations

import socket
import struct
import threading
import time

import bson
import pytest
from pymongo import MongoClient

from slipstream_testing import Node

CACHE_SIZE_MB = 8
CACHE_BYTES = CACHE_SIZE_MB * 1024 * 1024
DOC_BYTES = 1024
BATCH_DOCS = 1000
BATCHES = 24  # 24 MB of documents: three times the cache
SAMPLE_INTERVAL_S = 0.1
# redb's page cache is a soft limit: a page being read in is counted before
# another is evicted.
KV_CACHE_SLACK_BYTES = 64 * 1024
# Flow control holds client writes back only past twice the history bound,
# and an admitted insert_many (1 MB) still lands; the checkpoint thread
# looks every 100 ms.
HISTORY_SLACK_BYTES = 8 * 1024 * 1024
# Idle, the resident set is the live heap, code and stacks, and what the
# allocator has not returned yet: it must return the load's freed memory.
IDLE_NOT_HEAP_BYTES_MAX = 128 * 1024 * 1024
IDLE_TIMEOUT_S = 30.0


# Large requests: each frame is over the uncharged 1 MB, and together they are
# several times the budget (16 MB at this cache), so some must wait.
LARGE_DOC_BYTES = 4 * 1024 * 1024
LARGE_WRITERS = 8
LARGE_INSERTS_EACH = 2
# One insert of this many large documents is a frame larger than the budget.
HUGE_BATCH_DOCS = 6


def memory(client) -> dict:
    return client.admin.command("serverStatus")["slipstream"]["memory"]


class Sampler(threading.Thread):
    def __init__(self, uri: str):
        super().__init__(daemon=True)
        self.client = MongoClient(uri)
        self.samples: list[dict] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_INTERVAL_S):
            self.samples.append(memory(self.client))


def check_sample(sample: dict, large_values: bool = False) -> None:
    assert sample["cacheSizeBytes"] == CACHE_BYTES
    assert sample["residentBytes"] <= sample["residentBytesBound"], sample
    # redb holds the pages of large values being written past its cache, and
    # flow control lets a write through after 1 s whatever its size: with
    # 4 MB documents neither cache keeps to its bound plus the small slacks.
    if not large_values:
        assert sample["kvCacheBytes"] <= sample["kvCacheBytesMax"] + KV_CACHE_SLACK_BYTES, sample
        assert sample["historyBytes"] <= 2 * sample["historyBytesMax"] + HISTORY_SLACK_BYTES, sample
    # Entries not yet written stay cached beyond the recent entries' limit.
    assert sample["journalCacheBytes"] <= sample["journalCacheBytesMax"] + sample["journalPendingBytesMax"], sample
    requests = sample["requestAdmission"]
    assert requests["chargedBytes"] <= requests["budgetBytes"], sample
    heap = sample["allocator"]["heapBytesInUse"]
    assert heap <= sample["residentBytes"], sample
    # Counted components are inside the live heap (history is counted at
    # key + value + 64 bytes per version, above what it really takes).
    assert sample["kvCacheBytes"] + sample["journalCacheBytes"] + sample["journalIndexBytes"] <= heap, sample


@pytest.fixture
def bounded_node():
    with Node(extra_args=[f"--cache-size-mb={CACHE_SIZE_MB}"]) as running:
        yield running


def test_cache_size_bounds_resident_memory(bounded_node):
    client = MongoClient(bounded_node.uri)
    start = memory(client)
    # A huge page is resident whole for one used block: the node turns them off.
    assert start["allocator"]["transparentHugePages"] is False
    # The caches inside the cache: a quarter each for pages and history.
    assert start["kvCacheBytesMax"] == CACHE_BYTES // 4
    assert start["historyBytesMax"] == CACHE_BYTES // 4
    assert start["residentBytesBound"] >= CACHE_BYTES
    sampler = Sampler(bounded_node.uri)
    sampler.start()
    docs = client.mem.docs
    padding = "x" * DOC_BYTES
    for batch in range(BATCHES):
        docs.insert_many([{"_id": batch * BATCH_DOCS + i, "pad": padding} for i in range(BATCH_DOCS)])
    # Everything read back: through the page cache once, past its bound.
    assert sum(1 for _ in docs.find({}, {"pad": 0}).batch_size(2000)) == BATCHES * BATCH_DOCS
    docs.update_many({"_id": {"$lt": 5_000}}, {"$set": {"pad": padding.upper()}})
    sampler.stop.set()
    sampler.join()
    assert len(sampler.samples) > 10
    for sample in sampler.samples:
        check_sample(sample)
    # The page cache filled to its bound (the load was large enough to test it).
    assert max(s["kvCacheBytes"] for s in sampler.samples) > start["kvCacheBytesMax"] // 2
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while True:
        idle = memory(client)
        check_sample(idle)
        not_heap = idle["residentBytes"] - idle["allocator"]["heapBytesInUse"]
        if not_heap <= IDLE_NOT_HEAP_BYTES_MAX:
            break
        assert time.monotonic() < deadline, f"idle memory not returned: {idle}"
        time.sleep(0.5)


def test_large_requests_wait_for_the_request_budget(bounded_node):
    client = MongoClient(bounded_node.uri, maxPoolSize=LARGE_WRITERS + 2)
    start = memory(client)
    requests = start["requestAdmission"]
    # The budget follows the cache: its floor at this small cache.
    assert requests["budgetBytes"] == 16 * 1024 * 1024
    assert start["journalCacheBytesMax"] == 4 * 1024 * 1024
    assert start["journalPendingBytesMax"] == 16 * 1024 * 1024
    sampler = Sampler(bounded_node.uri)
    sampler.start()
    blob = bson.Binary(b"y" * LARGE_DOC_BYTES)
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            for i in range(LARGE_INSERTS_EACH):
                client.mem.large.insert_one({"_id": worker * 100 + i, "blob": blob})
        except BaseException as err:  # noqa: BLE001 - re-raised below
            errors.append(err)

    writers = [threading.Thread(target=write, args=(w,)) for w in range(LARGE_WRITERS)]
    for writer in writers:
        writer.start()
    # A frame larger than the whole budget runs alone, and runs.
    client.mem.huge.insert_many([{"_id": i, "blob": blob} for i in range(HUGE_BATCH_DOCS)])
    for writer in writers:
        writer.join()
    sampler.stop.set()
    sampler.join()
    assert not errors, errors
    assert client.mem.large.count_documents({}) == LARGE_WRITERS * LARGE_INSERTS_EACH
    assert client.mem.huge.count_documents({}) == HUGE_BATCH_DOCS
    for sample in sampler.samples:
        check_sample(sample, large_values=True)
    after = memory(client)["requestAdmission"]
    assert after["waits"] > requests["waits"], after
    assert after["chargedBytes"] == 0, "every request gave its budget back"


def test_buffered_cursor_results_are_counted(bounded_node):
    client = MongoClient(bounded_node.uri)
    docs = client.mem.sorted
    docs.insert_many([{"_id": i, "key": -i, "pad": "z" * DOC_BYTES} for i in range(2000)])
    before = memory(client)["cursorBufferedBytes"]
    # A sort on an unindexed field: the node keeps the sorted rest for getMore.
    cursor = docs.find({}).sort("key", 1).batch_size(10)
    next(cursor)
    held = memory(client)["cursorBufferedBytes"] - before
    assert held >= 1900 * DOC_BYTES, held
    cursor.close()
    assert memory(client)["cursorBufferedBytes"] == before


# A client that declares a large message and stops sending it holds request
# budget; the node closes it after this long without a byte, so the budget
# comes back for everyone else (ADMITTED_FRAME_IDLE_MS in connection.rs).
ADMITTED_FRAME_IDLE_S = 10
STALLED_FRAME_BYTES = 40 * 1024 * 1024  # over the whole 16 MB budget


def test_a_client_that_stalls_inside_a_large_message_loses_its_budget(bounded_node):
    stalled = socket.create_connection(("127.0.0.1", bounded_node.port))
    # An OP_MSG header declaring 40 MB, then a few bytes of its body, then nothing.
    stalled.sendall(struct.pack("<iiii", STALLED_FRAME_BYTES, 1, 0, 2013) + b"\x00" * 64)
    client = MongoClient(bounded_node.uri, socketTimeoutMS=(ADMITTED_FRAME_IDLE_S + 50) * 1000)
    deadline = time.monotonic() + 30
    while memory(client)["requestAdmission"]["chargedBytes"] == 0:
        assert time.monotonic() < deadline, "the stalled frame was never charged"
        time.sleep(0.1)
    # A 2 MB insert needs budget the stalled frame holds: it waits, then runs
    # once the node has closed the stalled connection.
    waits = memory(client)["requestAdmission"]["waits"]
    client.mem.after_stall.insert_one({"_id": 1, "blob": bson.Binary(b"z" * (2 * 1024 * 1024))})
    assert memory(client)["requestAdmission"]["waits"] > waits, "the insert did not wait for the budget"
    stalled.settimeout(30)
    assert stalled.recv(1) == b"", "the node keeps a connection that stalled inside a charged message"
    stalled.close()
    assert memory(client)["requestAdmission"]["chargedBytes"] == 0
