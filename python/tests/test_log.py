"""One structured log for the whole process (issue 6, item 8).

Storage reports recovery, checkpoints and shutdown through `tracing`; those
lines must reach the node's `--logpath` file and `getLog` in MongoDB's JSON
shape, and nothing may reach stderr.
"""

import json
import os
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from pymongo import MongoClient, WriteConcern
from pymongo.errors import PyMongoError

from slipstream_testing import Node

FIELD_ORDER = ["t", "s", "c", "id", "ctx", "msg"]
SEVERITIES = {"F", "E", "W", "I", "D1", "D2", "D3", "D4", "D5"}
DATE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
# Long enough for the writers to be mid-stream when the node is killed.
WRITE_BEFORE_KILL_S = 0.7


class LoggingNode(Node):
    """A node that logs to `--logpath` with its stdout and stderr kept apart."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.logpath = workdir / "node.log"
        super().__init__(dbpath=str(workdir / "db"), extra_args=["--logpath", str(self.logpath)])
        self.log_path = str(self.logpath)  # what Node.log_tail shows on a failed start

    def start(self, *extra_args: str, env: dict | None = None) -> "LoggingNode":
        assert self.process is None or self.process.poll() is not None, "already running"
        command = [*self.command_line(), *extra_args]
        with open(self.workdir / "stdout", "ab") as out, open(self.workdir / "stderr", "ab") as err:
            self.process = subprocess.Popen(command, stdout=out, stderr=err, env={**os.environ, **(env or {})})
        self.wait_until_ready()
        return self

    def output(self, name: str) -> str:
        path = self.workdir / name
        return path.read_text() if path.exists() else ""

    def runs(self) -> list[list[dict]]:
        """The log file's lines, parsed and checked, one list per start."""
        runs = []
        for raw in self.logpath.read_text().splitlines():
            line = check_shape(raw)
            if line["msg"] == "Slipstream starting":
                runs.append([])
            runs[-1].append(line)
        return runs


def check_shape(raw: str) -> dict:
    """Parses one line and checks MongoDB's shape and field order."""
    line = json.loads(raw)
    keys = list(line)
    assert keys[:6] == FIELD_ORDER and keys[6:] in ([], ["attr"]), raw
    assert DATE.match(line["t"]["$date"]), raw
    assert line["s"] in SEVERITIES, raw
    assert isinstance(line["id"], int) and line["id"] >= 0, raw
    assert isinstance(line["c"], str) and line["c"], raw
    assert isinstance(line["ctx"], str) and line["ctx"], raw
    assert "attr" not in line or isinstance(line["attr"], dict), raw
    return line


def connect(node):
    return MongoClient(node.uri, serverSelectionTimeoutMS=10_000, retryWrites=False)


def only(lines, **match):
    return [line for line in lines if all(line.get(key) == value for key, value in match.items())]


def write_until_killed(node):
    """Journaled inserts from a thread while the node is SIGKILLed, so that
    the journal holds entries past the last checkpoint."""
    stop = threading.Event()
    acknowledged = []

    def writer():
        client = connect(node)
        coll = client.test.get_collection("replay", write_concern=WriteConcern(j=True))
        try:
            while not stop.is_set():
                coll.insert_one({"n": len(acknowledged)})
                acknowledged.append(1)
        except PyMongoError:
            pass  # the node died under us
        finally:
            client.close()

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(WRITE_BEFORE_KILL_S)
    node.kill()
    stop.set()
    thread.join(timeout=30)
    assert acknowledged, "no insert was acknowledged before the kill"


def get_log(node) -> list[dict]:
    client = connect(node)
    try:
        reply = client.admin.command({"getLog": "global"})
    finally:
        client.close()
    assert reply["totalLinesWritten"] >= len(reply["log"])
    return [check_shape(raw) for raw in reply["log"]]


def test_storage_lines_reach_logpath_and_getlog_and_stderr_stays_empty():
    with tempfile.TemporaryDirectory(prefix="slipstream-log-") as workdir:
        node = LoggingNode(Path(workdir))
        try:
            # 1: a fresh directory; 2: a clean restart; 3: a restart after SIGKILL.
            node.start()
            client = connect(node)
            client.test.c.insert_many([{"_id": i} for i in range(50)])
            client.close()
            assert node.stop() == 0
            node.start()
            write_until_killed(node)
            node.start()
            served = get_log(node)
            assert node.stop() == 0

            runs = node.runs()
            assert len(runs) == 3
            recovered = [only(run, msg="recovered") for run in runs]
            assert [len(lines) for lines in recovered] == [1, 1, 1], recovered
            recovered = [lines[0] for lines in recovered]
            for line in recovered:
                assert (line["s"], line["c"], line["ctx"]) == ("I", "STORAGE", "initandlisten"), line
                assert {"checkpoint", "replayed", "last_applied", "elapsed_ms"} <= set(line["attr"]), line
            # One message, one id, in every run.
            assert len({line["id"] for line in recovered}) == 1
            # The crash left journaled writes past the last checkpoint.
            assert recovered[2]["attr"]["replayed"] > 0, recovered[2]
            # The clean shutdowns say so from storage itself.
            for run in (runs[0], runs[2]):
                assert only(run, msg="storage engine shut down", c="STORAGE", s="I"), run
            # Default verbosity: no debug lines.
            assert not [line for run in runs for line in run if line["s"].startswith("D")]

            # getLog serves the same lines the file holds.
            assert recovered[2] in served
            assert only(served, msg="Slipstream starting")

            assert node.output("stderr") == ""
            assert node.output("stdout") == ""
        finally:
            node.cleanup()


def test_verbose_adds_checkpoint_debug_lines_and_rust_log_overrides():
    with tempfile.TemporaryDirectory(prefix="slipstream-log-") as workdir:
        node = LoggingNode(Path(workdir))
        try:
            node.start("-v")
            client = connect(node)
            client.test.c.insert_one({"_id": 1})
            client.close()
            assert node.stop() == 0
            # RUST_LOG replaces the default policy: at warn, recovery's info line goes.
            node.start(env={"RUST_LOG": "warn"})
            assert node.stop() == 0

            verbose, quiet = node.runs()
            checkpoints = only(verbose, msg="checkpoint", c="STORAGE", s="D1")
            assert checkpoints, verbose
            assert {"at", "keys_written", "elapsed_ms"} <= set(checkpoints[-1]["attr"]), checkpoints
            assert only(verbose, msg="recovered")
            assert not only(quiet, msg="recovered"), quiet
            # The server's own lines do not go through tracing's filter.
            assert only(quiet, msg="Slipstream starting")
            assert node.output("stderr") == ""
        finally:
            node.cleanup()
