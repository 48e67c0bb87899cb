"""The timeline: one row per client thread, each operation a bar from its
invocation to its completion coloured by outcome (ok, failed, unknown),
with the fault windows shaded behind them."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLOURS = {"ok": "#2ca02c", "fail": "#d62728", "info": "#ff7f0e"}
FAULT_COLOURS = {"partition": "#1f77b4", "kill": "#7f7f7f", "pause": "#9467bd", "clock": "#bcbd22",
                 "stepdown": "#17becf", "reconfig": "#e377c2", "power": "#8c564b"}


def timeline(pairs, windows: list[dict], threads: int, path: Path, title: str) -> None:
    figure, axes = plt.subplots(figsize=(14, 1.2 + 0.45 * threads))
    for window in windows:
        start = window.get("began", window["start"])
        end = window.get("ended", window["end"])
        axes.axvspan(start, end, color=FAULT_COLOURS[window["kind"]], alpha=0.18, linewidth=0)
        axes.text(start, threads - 0.35, window.get("shape", window["kind"]), fontsize=7, va="bottom")
    for invocation, completion in pairs:
        process = invocation["process"]
        if not isinstance(process, int):
            continue
        row = process % threads
        start, end = invocation["time"] / 1e9, completion["time"] / 1e9
        axes.plot([start, max(end, start + 0.01)], [row, row], color=COLOURS[completion["type"]], linewidth=5,
                  solid_capstyle="butt")
    axes.set_ylim(-0.8, threads)
    axes.set_yticks(range(threads))
    axes.set_yticklabels([f"client {i}" for i in range(threads)])
    axes.set_xlabel("seconds since start")
    axes.set_title(title, fontsize=10)
    handles = [Patch(color=c, label=label) for label, c in (("ok", COLOURS["ok"]), ("failed", COLOURS["fail"]),
                                                              ("unknown", COLOURS["info"]))]
    handles += [Patch(color=c, alpha=0.3, label=kind) for kind, c in FAULT_COLOURS.items()
                if any(w["kind"] == kind for w in windows)]
    axes.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(handles), fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
