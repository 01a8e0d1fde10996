"""Chapter 8's flagship figures: MFU per run of the run list, and the head-to-head's rounds.

Used by ``notebooks/08_troubleshooting.ipynb``. Both read a record of :mod:`helpers.record.flagship`
(``flagship.json``, the run list; ``flagship_h2h.json`` or ``flagship_levers_h2h.json``, the best
runs alternated in rounds) and recompute every bar with
:func:`helpers.record.flagship_summary.summarize` (and, for the rounds,
:func:`helpers.record.flagship_summary.compare`): :func:`mfu_figure` draws the run list beside the
MFU target, :func:`h2h_figure` each round's throughput and the medians. FSDP2 is grey, Colossal-AI
blue.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.record.flagship_summary import compare, summarize
from helpers.run.result_types.records import FlagshipRecord


def mfu_figure(record: FlagshipRecord, target: float = 0.5):
    """MFU per run (book's count, bars; PaLM's count with every parameter, dots), FSDP2 grey,
    Colossal-AI blue; the target line."""
    rows = [summarize(r["name"], r) for r in record["runs"]]
    rows = [r for r in rows if r["ok"]]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2))
    y = list(range(len(rows)))[::-1]
    colors = ["#999999" if r["framework"] == "fsdp2" else "#1f77b4" for r in rows]
    ax.barh(y, [100 * r["mfu"] for r in rows], color=colors, hatch=None)
    ax.scatter(
        [100 * r["mfu_all_params"] for r in rows],
        y,
        color="black",
        s=12,
        zorder=3,
        label="N = all parameters",
    )
    for yi, r in zip(y, rows):
        if not r["loss_ok"]:
            ax.text(1, yi, "loss off the reference", va="center", color="red")
    ax.axvline(100 * target, color="red", ls="--", lw=1, label=f"{100 * target:.0f} % target")
    ax.set_yticks(y, [r["name"] for r in rows])
    ax.set_xlabel("MFU % (bars: the book's count, N without the input embedding)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def h2h_figure(record: FlagshipRecord):
    """Each round's throughput as a dot, the median as a bar tick; FSDP2's median as a grey line."""
    groups = [g for g in compare([summarize(r["name"], r) for r in record["runs"]]) if g["median"]]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(groups) + 1.4))
    for y, g in enumerate(reversed(groups)):
        color = "#999999" if g["framework"] == "fsdp2" else "#1f77b4"
        ax.scatter(
            g["tokens_per_s_per_gpu"],
            [y] * len(g["tokens_per_s_per_gpu"]),
            color=color,
            s=30,
            zorder=3,
        )
        ax.plot([g["median"]] * 2, [y - 0.3, y + 0.3], color=color, lw=3)
        if g["framework"] == "fsdp2":
            ax.axvline(g["median"], color="#999999", ls="--", lw=1, label="FSDP2's median")
    ax.set_yticks(range(len(groups)), [g["name"] for g in reversed(groups)])
    ax.set_xlabel("tokens/s per GPU (dots: rounds; tick: median)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
