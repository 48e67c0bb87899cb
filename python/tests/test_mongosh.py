"""mongosh smoke test: the MongoDB shell connects and works (issue 2, tests).

mongosh opens with a legacy OP_QUERY isMaster, sends buildInfo,
getParameter, atlasVersion and an admin aggregate, and ends its sessions
with moreToCome; the script then does CRUD and exits 1 on any error.
"""

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MONGOSH = REPO_ROOT / "tools" / "mongosh" / "node_modules" / ".bin" / "mongosh"

SCRIPT = r"""
const d = db.getSiblingDB('mongosh_smoke');
d.dropDatabase();
d.items.insertMany([{_id: 1, n: 'a', v: 1}, {_id: 2, n: 'b', v: 2}, {_id: 3, n: 'c', v: 3}]);
d.items.updateOne({_id: 2}, {$inc: {v: 10}});
d.items.deleteOne({_id: 3});
d.items.createIndex({n: 1});
const docs = d.items.find({}, {_id: 1, v: 1}).sort({_id: 1}).toArray();
if (JSON.stringify(docs) !== JSON.stringify([{_id: 1, v: 1}, {_id: 2, v: 12}])) {
  throw new Error('unexpected documents: ' + JSON.stringify(docs));
}
const total = d.items.aggregate([{$group: {_id: null, s: {$sum: '$v'}}}]).toArray()[0].s;
if (total !== 13) { throw new Error('unexpected sum ' + total); }
if (d.items.countDocuments({}) !== 2) { throw new Error('count'); }
if (!db.hello().isWritablePrimary) { throw new Error('not primary'); }
print('SMOKE-OK ' + d.items.getIndexes().length + ' indexes');
"""


def test_mongosh_smoke(node):
    if not MONGOSH.exists():
        if os.environ.get("SLIPSTREAM_ALLOW_NO_MONGOSH") == "1":
            pytest.skip("mongosh not installed (scripts/setup.sh --with-mongosh installs it)")
        pytest.fail("mongosh not installed: run scripts/setup.sh --with-mongosh")
    result = subprocess.run(
        [str(MONGOSH), f"mongodb://127.0.0.1:{node.port}/?directConnection=true",
         "--quiet", "--norc", "--eval", SCRIPT],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SMOKE-OK 2 indexes" in result.stdout, result.stdout + result.stderr
