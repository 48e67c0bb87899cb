"""mongosh's operator helpers against a node (issue 10, item 7): db.currentOp(), db.killOp(),
the profiler helpers, db.c.stats() / dataSize() / storageSize() / totalSize(), db.stats(),
and admin commands, over a zlib-compressed connection (item 8)."""

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MONGOSH = REPO_ROOT / "tools" / "mongosh" / "node_modules" / ".bin" / "mongosh"

SCRIPT = r"""
function check(condition, what) { if (!condition) { throw new Error('failed: ' + what); } }
const d = db.getSiblingDB('mongosh_tools');
d.dropDatabase();
d.c.insertMany(Array.from({length: 10}, (_, i) => ({_id: i, s: 'x'.repeat(100)})));
const stats = d.c.stats();
// Int64 values come back as Long objects: compared as numbers.
check(Number(stats.count) === 10, 'stats().count ' + JSON.stringify(stats));
check(Number(d.c.dataSize()) === Number(stats.size) && Number(stats.size) > 1000, 'dataSize()');
check(Number(d.c.totalSize()) >= Number(d.c.dataSize()), 'totalSize()');
check(Number(d.c.storageSize()) > 0, 'storageSize()');
check(Number(d.stats().objects) === 10, 'db.stats()');
const ops = db.currentOp();
check(ops.inprog.some(op => op.command && op.command.aggregate === 1), 'currentOp shows itself');
check(db.currentOp({op: 'nonexistent'}).inprog.length === 0, 'currentOp filter');
check(db.killOp(2000000000).ok === 1, 'killOp');
d.setProfilingLevel(2);
d.c.findOne({_id: 3});
const status = d.getProfilingStatus();
check(Number(status.was) === 2 && Number(status.slowms) === 100, 'getProfilingStatus ' + JSON.stringify(status));
check(d.system.profile.countDocuments({op: 'query', ns: 'mongosh_tools.c'}) === 1, 'system.profile');
d.setProfilingLevel(0);
check(Number(d.getProfilingStatus().was) === 0, 'profiling off');
const commands = db.adminCommand({listCommands: 1}).commands;
check(commands.find.apiVersions[0] === '1', 'listCommands');
check(db.adminCommand({getParameter: 1, requireApiVersion: 1}).requireApiVersion === false, 'getParameter');
check(db.adminCommand({setParameter: 1, requireApiVersion: false}).was === false, 'setParameter');
check(Number(db.adminCommand({dataSize: 'mongosh_tools.c'}).numObjects) === 10, 'dataSize command');
const zlib = db.serverStatus().network.compression.zlib;
check(Number(zlib.decompressor.bytesOut) > 0 && Number(zlib.compressor.bytesIn) > 0, 'zlib in use');
print('TOOLS-OK');
"""


def test_mongosh_operator_helpers(node):
    if not MONGOSH.exists():
        if os.environ.get("SLIPSTREAM_ALLOW_NO_MONGOSH") == "1":
            pytest.skip("mongosh not installed (scripts/setup.sh --with-mongosh installs it)")
        pytest.fail("mongosh not installed: run scripts/setup.sh --with-mongosh")
    uri = f"mongodb://127.0.0.1:{node.port}/?directConnection=true&compressors=zlib"
    result = subprocess.run([str(MONGOSH), uri, "--quiet", "--norc", "--eval", SCRIPT],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TOOLS-OK" in result.stdout, result.stdout + result.stderr
