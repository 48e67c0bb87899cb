"""`slipstream bench` against a set that loses its primary during the run:
the run ends at `--seconds` and prints its JSON summary with the errors
counted (it printed nothing: the after-load probes pinged the first primary,
and a killed one failed the run, a paused one hung it)."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from slipstream_testing import binary_path

RUN_SECONDS = 6
# Startup and the before-load probes, the run, the clients' 10 s operation
# timeout and the after-load probes' 15 s bound, on a loaded machine.
BENCH_TIMEOUT_S = 120


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_bench_prints_its_summary_when_the_primary_fails_mid_run(make_replset, fault, tmp_path):
    rs = make_replset()
    primary = rs.primary()
    command = [str(binary_path()), "bench", "--uri", rs.uri, "--workload", "insert", "--connections", "4",
               "--seconds", str(RUN_SECONDS), "--probe-samples", "20", "--probe-dir", str(tmp_path)]
    injector = threading.Timer(2.0, lambda: getattr(rs, fault)(primary))
    injector.start()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    finally:
        injector.join()
        if fault == "pause":
            rs.resume(primary)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["ops"] > 0 and summary["seconds"] == RUN_SECONDS, summary
    assert summary["primary"] == rs.host(primary)
