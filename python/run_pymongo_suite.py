"""Run pymongo's own tests against a fresh node or a fresh 3-member replica
set; print and check the counts.

pymongo's suite finds its server through DB_IP/DB_PORT; when that server's
`hello` names a set (`setName`), it reconnects with `replicaSet=` and runs
its replica-set tests, so pointing it at any member is enough. After a
replica-set run, every member's `dbHash` must agree.
"""

import argparse
import json
import os
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slipstream_testing import Node, ReplicaSet  # noqa: E402

SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
# One file's longest run: the slowest takes about a minute; a hung file
# must not take CI's 30 minutes with it (it then counts no passes).
SUITE_TIMEOUT_S = 300
# Tests left out because they cannot reach the server under test, whatever it
# does: this class's setUp builds `MongoClient(**default_client_options)`
# with no host, so it dials localhost:27017 and waits out 30 s of server
# selection per test (2.5 minutes of CI for five certain failures).
DESELECTED = {
    "test_retryable_writes.py": ["test/test_retryable_writes.py::TestErrorPropagationAfterEncounteringMultipleErrors"],
}


def run_file(port: int, source: Path, test_file: str, log_suffix: str) -> dict:
    env = dict(os.environ, DB_IP="127.0.0.1", DB_PORT=str(port))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", test_file, "-q", "-p", "no:cacheprovider", "-o", "addopts="]
            + [arg for test in DESELECTED.get(Path(test_file).name, []) for arg in ("--deselect", test)],
            cwd=source, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode(errors="replace") if isinstance(expired.stdout, bytes) \
            else (expired.stdout or "")
        result = subprocess.CompletedProcess(expired.cmd, -1, output + f"\ntimed out after {SUITE_TIMEOUT_S} s", "")
    tail = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for number, kind in SUMMARY.findall(tail):
        key = "errors" if kind.startswith("error") else kind
        if key in counts:
            counts[key] += int(number)
    counts["summary"] = tail
    log = Path(source) / (Path(test_file).stem + log_suffix + ".log")
    log.write_text(result.stdout + result.stderr)
    counts["log"] = str(log)
    return counts


SUITE_ELECTION_TIMEOUT_MS = 5_000


@contextmanager
def target(replset: bool):
    """Yields the port pymongo's suite starts from, and the set (or None)."""
    if replset:
        # Longer than the tests' 1 s: pymongo's suite sends 45 MB batches and
        # a loaded debug build then misses heartbeats long enough to call
        # elections that only interrupt it (its stepdown tests hand over
        # through replSetStepUp and do not wait for a timeout).
        rs = ReplicaSet(nodes=3, election_timeout_ms=SUITE_ELECTION_TIMEOUT_MS)
        try:
            rs.start()
            yield rs.member(1)["port"], rs
        finally:
            rs.cleanup()
    else:
        with Node() as node:
            yield node.port, None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--replset", action="store_true", help="run against a 3-member replica set")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    os.environ["SLIPSTREAM_BIN"] = args.binary
    baseline = json.loads(Path(args.baseline).read_text())
    mode = "replset" if args.replset else "standalone"
    section = "replset_min_passed" if args.replset else "min_passed"
    results = {}
    problems = []
    with target(args.replset) as (port, rs):
        for test_file in args.files:
            counts = run_file(port, Path(args.source), test_file, "-replset" if args.replset else "")
            results[Path(test_file).name] = counts
            print(f"pymongo ({mode}) {Path(test_file).name}: {counts['passed']} passed, {counts['failed']} failed, "
                  f"{counts['errors']} errors, {counts['skipped']} skipped", flush=True)
        if rs is not None:
            try:
                rs.primary()
                rs.assert_db_hash_agree()
                print("pymongo (replset): every member's dbHash agrees after the suite", flush=True)
            except (AssertionError, TimeoutError, RuntimeError) as error:
                problems.append(f"members disagree after the suite: {error}")
    print(json.dumps({"mode": mode, "files": {name: {k: v for k, v in c.items() if k != "log"}
                                              for name, c in results.items()}}))
    problems += [
        f"{name}: {results[name]['passed']} passed < baseline {minimum}"
        for name, minimum in baseline.get(section, {}).items()
        # A file left out of this run (one file given on the command line) is not a regression.
        if name in results and results[name]["passed"] < minimum
    ]
    for line in problems:
        print("REGRESSION", line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
