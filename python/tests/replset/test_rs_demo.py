"""The README's main job (`scripts/demo.sh`) keeps working: python/demo.py
against a set started by `slipstream cluster up`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from slipstream_testing import binary_path

DEMO = Path(__file__).resolve().parents[2] / "demo.py"


def test_the_demo_runs_to_the_end(make_replset):
    rs = make_replset(election_timeout_ms=2000, heartbeat_interval_ms=500)
    result = subprocess.run([sys.executable, str(DEMO), "--dir", rs.dir, "--uri", rs.uri],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, SLIPSTREAM_BIN=str(binary_path())))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "saw 0 errors" in result.stdout, result.stdout
    assert "is back as SECONDARY and holds all" in result.stdout, result.stdout
