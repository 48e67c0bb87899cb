"""The Jepsen harness's network (python/jepsen/network.py) on real
namespaces: a partition cuts members off from each other, a one-way drop
cuts one direction's packets, the client's address on the bridge is never
cut, and heal restores everything. Runs in lane 9 (`ssj9-`, 10.213.9.0/24)
so that it never touches a run's namespaces."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

if os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("ip"):
    pytest.skip("needs root, ip and nft (scripts/setup.sh --with-fault-tools)", allow_module_level=True)

PORT = 7000
CONNECT_TIMEOUT_S = 1.0
LISTEN_TIMEOUT_S = 10.0
SOURCE = Path(__file__).resolve().parents[1] / "jepsen" / "network.py"


@pytest.fixture
def net(monkeypatch):
    """network.py loaded afresh in its own lane, and three namespaces."""
    monkeypatch.setenv("JEPSEN_LANE", "9")
    spec = importlib.util.spec_from_file_location("jepsen_network_lane9", SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.PREFIX == "ssj9-"
    network = module.Network(3)
    network.create()
    listener = subprocess.Popen(["ip", "netns", "exec", module.namespace(2), sys.executable, "-c",
                                 "import socket\n"
                                 f"s = socket.create_server(('{module.member_ip(2)}', {PORT}))\n"
                                 "while True: s.accept()[0].close()\n"])
    try:
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        while not reaches(module, None, 2):
            assert time.monotonic() < deadline, "the listener in member 2's namespace never answered"
            time.sleep(0.1)
        yield module, network
    finally:
        listener.kill()
        listener.wait()
        module.cleanup()
    assert not [ns for ns in module.namespaces()]


def reaches(module, source: int | None, target: int) -> bool:
    """Whether a TCP connection from member `source` (None: the client in the
    root namespace) to member `target` gets through."""
    probe = [sys.executable, "-c", "import socket\n"
             f"socket.create_connection(('{module.member_ip(target)}', {PORT}), timeout={CONNECT_TIMEOUT_S})\n"]
    if source is not None:
        probe = ["ip", "netns", "exec", module.namespace(source)] + probe
    return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0


def test_partitions_cut_members_apart_but_never_the_client(net):
    module, network = net
    assert reaches(module, 1, 2) and reaches(module, 3, 2)
    network.partition([[1], [2, 3]])
    assert not reaches(module, 1, 2)
    assert reaches(module, 3, 2)
    assert reaches(module, None, 2)
    network.heal()
    assert reaches(module, 1, 2)


def test_a_one_way_drop_and_a_bridge(net):
    module, network = net
    # Packets from 1 to 2 are dropped; 3's still arrive.
    network.drop({2: {1}})
    assert not reaches(module, 1, 2) and reaches(module, 3, 2)
    # A bridge with 2 in the middle: 2 hears both, 1 and 3 hear only 2.
    network.connect_only({2: {1, 3}, 1: {2}, 3: {2}})
    assert reaches(module, 1, 2) and reaches(module, 3, 2)
    network.connect_only({1: {3}, 3: {1}, 2: set()})
    assert not reaches(module, 1, 2) and not reaches(module, 3, 2) and reaches(module, None, 2)
    network.heal()
    assert reaches(module, 1, 2) and reaches(module, 3, 2)
