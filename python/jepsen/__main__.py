"""`python -m jepsen [--lane N] run --workload W --seed S --seconds N --faults partition,kill,...`
and `python -m jepsen [--lane N] cleanup`. Must run as root (namespaces, nftables).

`--lane N` (0-9, default 0) gives the run names, addresses and a port of
its own (see network.py) so that lanes run side by side; it is read before
the harness's modules are imported, as they fix their names at import."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

MAX_LANE = 9


def _lane(argv: list[str]) -> int:
    """The `--lane N` among the arguments (before any subcommand), or 0."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--lane", type=int, default=0)
    known, _ = early.parse_known_args(argv)
    if not 0 <= known.lane <= MAX_LANE:
        raise SystemExit(f"python -m jepsen: --lane must be 0..{MAX_LANE}, not {known.lane}")
    return known.lane


_LANE = _lane(sys.argv[1:])
os.environ["JEPSEN_LANE"] = str(_LANE)

from . import nemesis, runner  # noqa: E402 - the lane must be set before the names are fixed
from .network import LANE  # noqa: E402
from .workloads import WORKLOADS  # noqa: E402

assert LANE == _LANE, (LANE, _LANE)


def summarize(results: Path) -> int:
    """One line per run (lane, seed, binary, counts, the longest stretch
    without a successful operation, verdict), then one line per workload:
    runs, seconds, faults, seed range, totals of ops/ok/failed/
    unknown, anomalies and the worst availability gap. Runs without a
    summary (interrupted, or still running) are listed and not counted.
    The table has one row per workload and binary."""
    totals: dict[str, dict] = {}
    for run_dir in sorted(p for p in results.iterdir() if (p / "config.json").exists()):
        config = json.loads((run_dir / "config.json").read_text())
        summary_path = run_dir / "summary.json"
        if not summary_path.exists():
            print(f"{run_dir.name}: no summary (interrupted, crashed or still running)")
            continue
        summary = json.loads(summary_path.read_text())
        verdict_path = run_dir / "verdict.json"
        verdict = json.loads(verdict_path.read_text()) if verdict_path.exists() else {}
        gap = (verdict.get("availability") or {}).get("longest_without_ok_s")
        binary = Path(config.get("binary", "?")).name
        tally = totals.setdefault((summary["workload"], binary), {
            "runs": 0, "invalid": 0, "seeds": [], "seconds": set(), "faults": set(),
            "ops": 0, "ok": 0, "failed": 0, "unknown": 0, "worst_gap_s": 0.0})
        tally["runs"] += 1
        tally["invalid"] += 0 if summary["valid"] else 1
        tally["seeds"].append(config["seed"])
        tally["seconds"].add(f"{config['seconds']:.0f}")
        tally["faults"].add(",".join(config["faults"]))
        for key in ("ops", "ok", "failed", "unknown"):
            tally[key] += summary[key]
        tally["worst_gap_s"] = max(tally["worst_gap_s"], gap or 0.0)
        print(f"{run_dir.name}: lane {config.get('lane', 0)} seed {config['seed']} {binary} "
              f"members {config['members']} {config['seconds']:.0f} s faults {','.join(config['faults'])}: "
              f"ops {summary['ops']} ok {summary['ok']} failed {summary['failed']} unknown {summary['unknown']} "
              f"longest without ok {gap} s {'valid' if summary['valid'] else 'INVALID'}")
    print("| workload | binary | runs | s each | faults | seeds | ops | ok | failed | unknown | anomalies "
          "| worst gap without ok (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (workload, binary), t in sorted(totals.items()):
        print(f"| {workload} | {binary} | {t['runs']} | {'/'.join(sorted(t['seconds']))} "
              f"| {' / '.join(sorted(t['faults']))} | {min(t['seeds'])}-{max(t['seeds'])} | {t['ops']} | {t['ok']} "
              f"| {t['failed']} | {t['unknown']} | {t['invalid']} | {t['worst_gap_s']:.1f} |")
    return 0 if all(t["invalid"] == 0 for t in totals.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jepsen")
    parser.add_argument("--lane", type=int, default=0, help=f"0..{MAX_LANE}: names and addresses of its own")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="one run of a workload under faults")
    run.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    run.add_argument("--seed", type=int, help="draws the fault schedule and the clients' choices (random if absent)")
    run.add_argument("--seconds", type=float, default=60.0)
    run.add_argument("--faults", default="partition,kill,pause",
                     help=f"comma-separated, of: {','.join(nemesis.KINDS)}; 'all' for every kind; '' for none")
    run.add_argument("--members", type=int, default=3, choices=(3, 5))
    run.add_argument("--results", type=Path, default=Path("jepsen-results"))
    commands.add_parser("cleanup", help="remove this lane's ssjN- namespaces and the processes in them")
    report = commands.add_parser("summary", help="tally the runs in a results directory")
    report.add_argument("results", type=Path, nargs="?", default=Path("jepsen-results"))
    args = parser.parse_args(argv)
    if args.command == "cleanup":
        print(json.dumps(runner.cleanup()))
        return 0
    if args.command == "summary":
        return summarize(args.results)
    faults = list(nemesis.KINDS) if args.faults == "all" else [f for f in args.faults.split(",") if f]
    for fault in faults:
        if fault not in nemesis.KINDS:
            parser.error(f"unknown fault {fault}; known: {','.join(nemesis.KINDS)}")
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    try:
        summary = runner.run(args.workload, seed, args.seconds, faults, args.members, args.results)
    except runner.Interrupted as interrupted:
        print(f"jepsen: interrupted ({interrupted}); members stopped, namespaces removed", file=sys.stderr)
        return 130
    return 0 if summary["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
