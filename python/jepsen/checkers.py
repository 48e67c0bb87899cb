"""The checkers: each takes the history's (invocation, completion) pairs
and the final reads, and returns a verdict `{"valid": bool, ...}` with the
anomalies it found and, for a failure, the smallest window of the run
(in seconds) that shows it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .history import FAIL, INFO, OK

PORCUPINE_DIR = Path(__file__).resolve().parent / "porcupine"
PORCUPINE_TIMEOUT = "120s"
CHECK_TIMEOUT_S = 600
BUILD_TIMEOUT_S = 600
# The most anomalies a verdict lists in full.
LISTED = 50


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "slipstream-jepsen"


def go_binary() -> str:
    found = shutil.which("go")
    if found:
        return found
    if os.path.exists("/usr/local/go/bin/go"):
        return "/usr/local/go/bin/go"
    raise RuntimeError("no Go toolchain: the register checker builds porcupine with `go`")


def porcupine_binary() -> Path:
    """Builds the checker once per source version into the cache directory
    (modules come through the Go module proxy into the same cache)."""
    digest = hashlib.sha256()
    for name in ("main.go", "go.mod", "go.sum"):
        digest.update((PORCUPINE_DIR / name).read_bytes())
    target = cache_dir() / f"porcupine-{digest.hexdigest()[:16]}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    environment = dict(os.environ, GOMODCACHE=str(cache_dir() / "gomod"), GOCACHE=str(cache_dir() / "gobuild"),
                       GOFLAGS="-mod=readonly")
    temporary = target.with_suffix(".tmp")
    subprocess.run([go_binary(), "build", "-o", str(temporary), "."], cwd=PORCUPINE_DIR, env=environment,
                   check=True, timeout=BUILD_TIMEOUT_S)
    os.replace(temporary, target)
    return target


def _seconds(ns: int) -> float:
    return round(ns / 1e9, 3)


def _client_pairs(pairs):
    return [(i, c) for i, c in pairs if isinstance(i["process"], int)]


def availability(pairs) -> dict:
    """The longest stretch of the run in which no client operation succeeded
    (a liveness figure: not part of validity, but a failover that takes a
    minute shows here)."""
    ends = sorted(c["time"] for i, c in _client_pairs(pairs) if c["type"] == OK)
    if not ends:
        return {"ok_ops": 0}
    # The stretch after the last success runs to the last completion.
    last = max(c["time"] for _, c in _client_pairs(pairs))
    starts = [0] + ends
    gaps = [(b - a, a) for a, b in zip(starts, ends + [last])]
    longest, at = max(gaps)
    return {"ok_ops": len(ends), "longest_without_ok_s": _seconds(longest), "from_s": _seconds(at)}


# ----- register


def register_operations(pairs) -> list[dict]:
    """The operations porcupine sees: ok ones, cas that did not match (a
    definite 'no'), and unknown writes and cas; failed and unknown reads
    changed nothing and are left out."""
    ops = []
    for invocation, completion in _client_pairs(pairs):
        f = invocation["f"]
        outcome = completion["type"]
        cas_mismatch = f == "cas" and outcome == FAIL and "error" not in completion
        if outcome == FAIL and not cas_mismatch:
            continue
        if outcome == INFO and f == "read":
            continue
        op = {"key": invocation["key"], "client": invocation["process"], "f": f, "call": invocation["time"],
              "ret": completion["time"], "ok": outcome == OK, "unknown": outcome == INFO}
        if f == "read":
            op["value"] = completion["value"]
        elif f == "write":
            op["value"] = invocation["value"]
        else:
            op["from"], op["to"] = invocation["value"]
        ops.append(op)
    return ops


def _porcupine(ops: list[dict], visualize: str | None = None) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as out:
        json.dump(ops, out)
        path = out.name
    try:
        command = [str(porcupine_binary()), "-history", path, "-timeout", PORCUPINE_TIMEOUT]
        if visualize:
            command += ["-visualize", visualize]
        result = subprocess.run(command, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=True)
        return json.loads(result.stdout)
    finally:
        os.unlink(path)


def check_register(pairs, final: dict, run_dir: Path) -> dict:
    ops = register_operations(pairs)
    result = _porcupine(ops, visualize=str(run_dir / "linearizability"))
    illegal = sorted(key for key, verdict in result["keys"].items() if verdict == "Illegal")
    unknown = sorted(key for key, verdict in result["keys"].items() if verdict == "Unknown")
    verdict = {"valid": not illegal, "checker": "porcupine", "keys": len(result["keys"]),
               "non_linearizable_keys": illegal, "timed_out_keys": unknown, "ops_checked": len(ops)}
    if illegal:
        verdict["window"] = _register_window([op for op in ops if op["key"] == illegal[0]])
    return verdict


def _register_window(ops: list[dict]) -> dict:
    """The shortest prefix of one key's history that is still not
    linearizable (operations still running at its end count as unknown
    writes, reads among them dropped), by bisection on its end."""
    ends = sorted({op["ret"] for op in ops})
    low, high = 0, len(ends) - 1

    def prefix(end: int) -> list[dict]:
        kept = []
        for op in ops:
            if op["call"] > end:
                continue
            if op["ret"] > end or op["unknown"]:
                if op["f"] == "read":
                    continue
                op = dict(op, unknown=True)
            kept.append(op)
        return kept
    while low < high:
        middle = (low + high) // 2
        if _porcupine(prefix(ends[middle]))["valid"] == "Illegal":
            high = middle
        else:
            low = middle + 1
    end = ends[high]
    kept = prefix(end)
    last = sorted(kept, key=lambda op: op["ret"])[-12:]
    return {"key": ops[0]["key"], "from_s": _seconds(min(op["call"] for op in kept)), "to_s": _seconds(end),
            "last_ops": last}


# ----- set


def check_set(pairs, final: dict, run_dir: Path) -> dict:
    attempted, acknowledged, unknown, invocations = set(), set(), set(), {}
    for invocation, completion in _client_pairs(pairs):
        value = invocation["value"]
        attempted.add(value)
        invocations[value] = (invocation["time"], completion["time"])
        if completion["type"] == OK:
            acknowledged.add(value)
        elif completion["type"] == INFO:
            unknown.add(value)
    verdict = {"acknowledged": len(acknowledged), "unknown": len(unknown), "members": {}}
    valid = True
    lost_any: set = set()
    for member, present in final["members"].items():
        present = set(present)
        lost = acknowledged - present
        unexpected = present - attempted
        lost_any |= lost
        verdict["members"][member] = {"count": len(present), "lost": sorted(lost)[:LISTED], "lost_count": len(lost),
                                      "unexpected": sorted(unexpected)[:LISTED],
                                      "recovered_unknown": len(present & unknown)}
        valid = valid and not lost and not unexpected
    hashes = set(final["dbhash"].values())
    verdict["dbhash_agree"] = len(hashes) == 1
    valid = valid and len(hashes) == 1
    if lost_any:
        verdict["window"] = _values_window(lost_any, invocations)
    verdict["valid"] = valid
    return verdict


def _values_window(values, invocations) -> dict:
    spans = [invocations[v] for v in values if v in invocations]
    if not spans:
        # Values no client ever wrote: the whole run is the window.
        ends = [end for _, end in invocations.values()] or [0]
        return {"from_s": 0.0, "to_s": _seconds(max(ends)), "values": sorted(values)[:LISTED]}
    return {"from_s": _seconds(min(s for s, _ in spans)), "to_s": _seconds(max(e for _, e in spans)),
            "values": sorted(values)[:LISTED]}


# ----- read concern majority


def check_rc_majority(pairs, final: dict, run_dir: Path) -> dict:
    """Every causal majority read holds everything any read that completed
    before it began held; every majority read's element is on every member
    at the end (nothing a majority read saw is rolled back), and every
    w:majority acknowledged insert too. A read outside causality that
    misses something is listed as stale, not counted as an anomaly:
    MongoDB does not promise monotonic reads there (see workloads)."""
    reads = [(i, c) for i, c in _client_pairs(pairs) if i["f"] == "read" and c["type"] == OK]
    writes = [(i, c) for i, c in _client_pairs(pairs) if i["f"] == "add"]
    invocations = {i["value"]: (i["time"], c["time"]) for i, c in writes}
    by_end = sorted(reads, key=lambda pair: pair[1]["time"])
    seen: set = set()
    seen_by: dict = {}
    anomalies = []
    stale = []
    cursor = 0
    for invocation, completion in sorted(reads, key=lambda pair: pair[0]["time"]):
        while cursor < len(by_end) and by_end[cursor][1]["time"] < invocation["time"]:
            earlier = by_end[cursor]
            for value in earlier[1]["value"]:
                if value not in seen:
                    seen.add(value)
                    seen_by[value] = earlier[1]["time"]
            cursor += 1
        missing = seen - set(completion["value"])
        listed = anomalies if invocation.get("causal", True) else stale
        if missing and len(listed) < LISTED:
            listed.append({"read_at_s": [_seconds(invocation["time"]), _seconds(completion["time"])],
                              "process": invocation["process"], "missing": sorted(missing)[:LISTED],
                              "missing_count": len(missing),
                              "first_seen_s": _seconds(min(seen_by[v] for v in missing))})
    everything_read = set()
    for _, completion in reads:
        everything_read |= set(completion["value"])
    majority_acked = {i["value"] for i, c in writes if c["type"] == OK and i.get("w") == "majority"}
    lost = {}
    for member, present in final["members"].items():
        present = set(present)
        gone = (everything_read | majority_acked) - present
        if gone:
            lost[member] = sorted(gone)[:LISTED]
    verdict = {"valid": not anomalies and not lost, "reads": len(reads), "writes": len(writes),
               "read_elements": len(everything_read), "majority_acknowledged": len(majority_acked),
               "nonmonotonic_reads": anomalies, "lost": lost, "stale_reads_outside_causality": stale}
    if anomalies:
        first = anomalies[0]
        verdict["window"] = {"from_s": first["first_seen_s"], "to_s": first["read_at_s"][1],
                             "missing": first["missing"]}
    elif lost:
        verdict["window"] = _values_window({v for values in lost.values() for v in values}, invocations)
    return verdict


# ----- retryable writes


def check_retryable(pairs, final: dict, run_dir: Path) -> dict:
    """Per counter and member: every acknowledged increment's token present
    once, no token present twice, nothing never attempted, the count equal
    to the tokens, and so acknowledged <= count <= acknowledged + unknown."""
    acknowledged: dict[str, set] = {}
    unknown: dict[str, set] = {}
    spans: dict = {}
    for invocation, completion in _client_pairs(pairs):
        key, token = invocation["key"], invocation["value"]
        spans[token] = (invocation["time"], completion["time"])
        if completion["type"] == OK:
            acknowledged.setdefault(key, set()).add(token)
        elif completion["type"] == INFO:
            unknown.setdefault(key, set()).add(token)
    counters: dict = {}
    bad_tokens: set = set()
    for member, documents in final["members"].items():
        for key in sorted(set(acknowledged) | set(unknown) | set(documents)):
            acked, maybe = acknowledged.get(key, set()), unknown.get(key, set())
            entry = counters.setdefault(key, {"acknowledged": len(acked), "unknown": len(maybe), "final": {}})
            document = documents.get(key) or {"n": None, "applied": []}
            applied = document["applied"]
            present = set(applied)
            problems = {}
            twice = sorted(t for t in present if applied.count(t) > 1)
            if twice:
                problems["applied twice"] = twice[:LISTED]
            lost = sorted(acked - present)
            if lost:
                problems["lost"] = lost[:LISTED]
            invented = sorted(present - acked - maybe)
            if invented:
                problems["never acknowledged nor unknown"] = invented[:LISTED]
            if document["n"] != len(applied):
                problems["count differs from tokens"] = [document["n"], len(applied)]
            entry["final"][member] = {"n": document["n"], "unknown_applied": len(present & maybe)}
            if problems:
                entry.setdefault("anomalies", {})[member] = problems
                bad_tokens |= set(twice) | set(lost) | set(invented)
    verdict = {"valid": not any("anomalies" in entry for entry in counters.values()), "counters": counters}
    if bad_tokens:
        verdict["window"] = _values_window(bad_tokens, spans)
    elif not verdict["valid"]:
        verdict["window"] = {"from_s": 0.0, "to_s": _seconds(max(e for _, e in spans.values()))}
    return verdict


CHECKERS = {"register": check_register, "set": check_set, "rc-majority": check_rc_majority,
            "retryable": check_retryable}
