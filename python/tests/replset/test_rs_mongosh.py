"""mongosh against the set through a replicaSet URI (issue 7 tests):
rs.status(), rs.conf(), rs.stepDown()."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
MONGOSH = REPO_ROOT / "tools" / "mongosh" / "node_modules" / ".bin" / "mongosh"

SCRIPT = r"""
const status = rs.status();
if (status.set !== 'rs0') { throw new Error('set ' + status.set); }
if (status.members.length !== 3) { throw new Error('members ' + status.members.length); }
const primaries = status.members.filter(m => m.stateStr === 'PRIMARY');
const secondaries = status.members.filter(m => m.stateStr === 'SECONDARY');
if (primaries.length !== 1 || secondaries.length !== 2) { throw new Error(JSON.stringify(status.members)); }
if (!status.members.every(m => m.health === 1 && m.optime && m.optime.ts)) { throw new Error('health/optime'); }
const conf = rs.conf();
if (conf._id !== 'rs0' || conf.members.length !== 3 || !(conf.version >= 1)) { throw new Error(JSON.stringify(conf)); }
if (conf.settings.electionTimeoutMillis !== 1000) { throw new Error('settings ' + JSON.stringify(conf.settings)); }
print('PRIMARY ' + primaries[0].name);
const stepped = rs.stepDown(10, 5);
print('STEPDOWN ' + JSON.stringify(stepped.ok));
"""


def mongosh_path() -> Path:
    if not MONGOSH.exists():
        if os.environ.get("SLIPSTREAM_ALLOW_NO_MONGOSH") == "1":
            pytest.skip("mongosh not installed (scripts/setup.sh --with-mongosh installs it)")
        pytest.fail("mongosh not installed: run scripts/setup.sh --with-mongosh")
    return MONGOSH


def test_mongosh_rs_status_conf_and_step_down(rs):
    mongosh = mongosh_path()
    old = rs.primary()
    result = subprocess.run([str(mongosh), rs.uri, "--quiet", "--norc", "--eval", SCRIPT],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"PRIMARY {rs.host(old)}" in result.stdout, result.stdout
    assert "STEPDOWN 1" in result.stdout, result.stdout
    # The old primary may not stand again for 10 s: another member leads.
    new = rs.primary(exclude=(old,))
    assert new != old
    assert rs.member_state(old) == "SECONDARY"
