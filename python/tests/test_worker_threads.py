"""`serve --worker-threads N`: how many async workers run requests and
replication I/O. Members sharing a machine's cores run with fewer than one
per core (issue 7's majority-write speed, docs/design-notes.md
"Replication runtime")."""

import json
import os
import subprocess
import tempfile
from pathlib import Path

from pymongo import MongoClient

from slipstream_testing import Node
from slipstream_testing.node import binary_path


def runtime_line(logpath: Path) -> dict:
    lines = [json.loads(raw) for raw in logpath.read_text().splitlines()]
    started = [line for line in lines if line["msg"] == "async runtime started"]
    assert len(started) == 1, lines
    return started[0]


def serve_and_insert(workdir: Path, *args: str, env: dict | None = None) -> dict:
    """Starts a node with ARGS (and ENV's variables set, or unset where
    None), writes and reads through it, stops it; returns its runtime log
    line."""
    logpath = workdir / "node.log"
    node = Node(dbpath=str(workdir / "db"), extra_args=["--logpath", str(logpath), *args])
    saved = {name: os.environ.get(name) for name in (env or {})}
    for name, value in (env or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        node.start()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    try:
        with MongoClient(node.uri, serverSelectionTimeoutMS=10_000) as client:
            client.t.c.insert_many([{"_id": i} for i in range(100)])
            assert client.t.c.count_documents({}) == 100
    finally:
        assert node.stop() == 0
    return runtime_line(logpath)


def test_worker_threads_sets_the_async_workers():
    with tempfile.TemporaryDirectory() as workdir:
        line = serve_and_insert(Path(workdir), "--worker-threads", "1")
        assert line["attr"]["workerThreads"] == 1


def test_without_the_flag_tokio_worker_threads_or_one_per_core_decides():
    with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
        assert serve_and_insert(Path(first), env={"TOKIO_WORKER_THREADS": "3"})["attr"]["workerThreads"] == 3
        default = serve_and_insert(Path(second), env={"TOKIO_WORKER_THREADS": None})
        assert default["attr"]["workerThreads"] >= 1


def test_worker_threads_out_of_range_is_refused():
    with tempfile.TemporaryDirectory() as workdir:
        run = subprocess.run([str(binary_path()), "serve", "--dbpath", workdir, "--worker-threads", "257"],
                             capture_output=True, text=True, timeout=30)
        assert run.returncode == 2
        assert "--worker-threads" in run.stderr and "0..=256" in run.stderr, run.stderr
