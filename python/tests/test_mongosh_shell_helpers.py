"""The shell helpers issue 10 names (tests section), run by mongosh from
`python/tests/mongosh/shell_helpers.js` against a node; the script throws
on the first mismatch."""

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MONGOSH = REPO_ROOT / "tools" / "mongosh" / "node_modules" / ".bin" / "mongosh"
SCRIPT = Path(__file__).resolve().parent / "mongosh" / "shell_helpers.js"


def test_mongosh_shell_helpers(node):
    if not MONGOSH.exists():
        if os.environ.get("SLIPSTREAM_ALLOW_NO_MONGOSH") == "1":
            pytest.skip("mongosh not installed (scripts/setup.sh --with-mongosh installs it)")
        pytest.fail("mongosh not installed: run scripts/setup.sh --with-mongosh")
    result = subprocess.run([str(MONGOSH), node.uri, "--quiet", "--norc", str(SCRIPT)],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SHELL-HELPERS-OK" in result.stdout, result.stdout + result.stderr
