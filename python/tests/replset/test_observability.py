"""What a member tells operators: serverStatus.repl / metrics.repl /
electionMetrics, the Prometheus endpoint of `--metrics-port`, and JSON log
lines for elections and state changes."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest
from pymongo import MongoClient
from pymongo.write_concern import WriteConcern

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repl_members import Members  # noqa: E402
from slipstream_testing.node import free_port  # noqa: E402


@pytest.fixture(scope="module")
def members():
    set_members = Members(3, "observed")
    metrics_ports = []
    for node in set_members.nodes:
        port = free_port()
        metrics_ports.append(port)
        node.extra_args += ["--metrics-port", str(port)]
    with set_members as running:
        running.initiate()
        running.metrics_ports = metrics_ports
        primary = running.primary()
        with MongoClient(running.uri()) as client:
            coll = client.obs.get_collection("c", write_concern=WriteConcern(w="majority"))
            coll.insert_many([{"_id": i} for i in range(50)])
        running.primary_index = primary
        yield running


def test_server_status_sections(members):
    primary = members.primary_index
    secondary = (primary + 1) % 3
    with members.direct(primary) as client:
        status = client.admin.command("serverStatus")
        assert status["repl"]["setName"] == "observed"
        assert status["repl"]["isWritablePrimary"] is True
        assert status["repl"]["primary"] == members.host(primary)
        # One processId per process, as hello shows it (they differed).
        hello = client.admin.command("hello")
        assert status["repl"]["topologyVersion"]["processId"] == hello["topologyVersion"]["processId"]
        elections = status["electionMetrics"]
        assert sum(elections[name]["called"] for name in ("electionTimeout", "stepUpCmd", "priorityTakeover",
                                                           "catchUpTakeover", "freezeTimeout")
                   if name in elections) >= 1
    with members.direct(secondary) as client:
        metrics = client.admin.command("serverStatus")["metrics"]["repl"]
        assert metrics["apply"]["ops"] >= 50
        assert metrics["network"]["getmores"]["num"] >= 1


def test_prometheus_endpoint(members):
    primary = members.primary_index
    with urllib.request.urlopen(f"http://127.0.0.1:{members.metrics_ports[primary]}/metrics", timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    assert "# TYPE slipstream_repl_term gauge" in text
    assert "slipstream_repl_member_lag_seconds" in text


def test_election_and_state_changes_are_logged_as_json(members):
    primary = members.primary_index
    lines = [json.loads(line) for line in Path(members.nodes[primary].log_path).read_text().splitlines()
             if line.startswith("{")]
    repl = [line for line in lines if line.get("c") == "REPL"]
    finished = [line for line in repl if line["msg"] == "election finished" and line["attr"]["won"]]
    assert finished and finished[-1]["attr"]["reason"] == "electionTimeout"
    assert any(line["msg"] == "member state changed" and line["attr"]["state"] == "PRIMARY" for line in repl)
