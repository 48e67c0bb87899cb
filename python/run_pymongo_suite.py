"""Run pymongo's own tests against a fresh node; print and check the counts."""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slipstream_testing import Node  # noqa: E402

SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
SUITE_TIMEOUT_S = 1200


def run_file(node: Node, source: Path, test_file: str) -> dict:
    env = dict(os.environ, DB_IP="127.0.0.1", DB_PORT=str(node.port))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", test_file, "-q", "-p", "no:cacheprovider", "-o", "addopts="],
        cwd=source, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    tail = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for number, kind in SUMMARY.findall(tail):
        key = "errors" if kind.startswith("error") else kind
        if key in counts:
            counts[key] += int(number)
    counts["summary"] = tail
    log = Path(source) / (Path(test_file).stem + ".log")
    log.write_text(result.stdout + result.stderr)
    counts["log"] = str(log)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--baseline", required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    os.environ["SLIPSTREAM_BIN"] = args.binary
    baseline = json.loads(Path(args.baseline).read_text())
    results = {}
    with Node() as node:
        for test_file in args.files:
            counts = run_file(node, Path(args.source), test_file)
            results[Path(test_file).name] = counts
            print(f"pymongo {Path(test_file).name}: {counts['passed']} passed, {counts['failed']} failed, "
                  f"{counts['errors']} errors, {counts['skipped']} skipped", flush=True)
    print(json.dumps({name: {k: v for k, v in c.items() if k != "log"} for name, c in results.items()}))
    regressions = [
        f"{name}: {results[name]['passed']} passed < baseline {minimum}"
        for name, minimum in baseline.get("min_passed", {}).items()
        if results.get(name, {}).get("passed", 0) < minimum
    ]
    for line in regressions:
        print("REGRESSION", line, file=sys.stderr)
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
