"""Chapter 3's figures of what collectives cost, across nodes and on two GPUs.

:func:`egress_figure` draws the rows of :func:`helpers.chapters.ch03_strategy.egress_rows`: the
gradient all-reduce of a 7.5 B model on 4 nodes × 8 GPUs for each T inside the node, as the
per-node model gives it (the ring leaves each node once, through the group's cards) and as one
card per rank would. :func:`busbw_figure` draws the table of
:func:`helpers.cost.calibration.collective_table`: the measured bus bandwidth of each collective
against message size, and its time as the α-β model calibrated on all-reduce predicts it against
the measured one (Chapter 3, "Calibrated on NCCL").
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.figures.style import DPI, RANK_COLOURS


def egress_figure(rows: list[dict]):
    """Bars: the cross-node time of the gradient all-reduce for each T inside the node, as the
    per-node model gives it and as one card per rank would."""
    fig, ax = plt.subplots(figsize=(7.5, 3.4), dpi=DPI)
    x = range(len(rows))
    w = 0.38
    old = ax.bar([i - w / 2 for i in x], [r["ms, one card per rank"] for r in rows], w,
                 color=RANK_COLOURS[7], label="one card per rank (earlier model)")  # fmt: skip
    new = ax.bar([i + w / 2 for i in x], [r["ms"] for r in rows], w, color=RANK_COLOURS[0],
                 label="ring leaves each node once, through the group's cards")  # fmt: skip
    ax.bar_label(old, fmt="%.0f", fontsize=8)
    ax.bar_label(new, fmt="%.0f", fontsize=8)
    ax.set_xticks(list(x))
    ax.set_xticklabels(
        [
            f"T={r['T']}, D={r['D']}\n{r['cards per group']} card"
            + ("" if r["cards per group"] == 1 else "s")
            + " per group"
            for r in rows
        ]
    )
    ax.set_ylabel("all-reduce of the gradients, ms")
    ax.set_title(
        "7.5 B model, 4 nodes × 8 GPUs: the time across nodes hardly depends on T", fontsize=10
    )
    ax.set_ylim(0, 1.3 * max(r["ms, one card per rank"] for r in rows))
    ax.legend(fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def busbw_figure(table: list[dict]):
    """Left: measured bus bandwidth against message size, per collective. Right: predicted against
    measured time, with the ±25 % band; fitted points hollow, floor-setting small messages as
    crosses."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=80)
    for name in sorted({r["collective"] for r in table}):
        rows = [r for r in table if r["collective"] == name]
        left.plot(
            [r["size_bytes"] for r in rows], [r["busbw GB/s"] for r in rows], marker="o", label=name
        )
        colour = left.lines[-1].get_color()
        for role, marker, face in (
            ("held out", "o", colour),
            ("fit", "o", "none"),
            ("floor", "x", colour),
        ):
            pts = [r for r in rows if r["role"] == role]
            right.scatter(
                [r["measured us"] for r in pts],
                [r["predicted us"] for r in pts],
                s=18,
                marker=marker,
                facecolors=face,
                edgecolors=colour if marker == "o" else None,
            )
    left.set(
        xscale="log",
        xlabel="message size S (bytes)",
        ylabel="bus bandwidth (GB/s)",
        title="measured busbw",
    )
    left.legend(fontsize=8)
    lo, hi = min(r["measured us"] for r in table), max(r["measured us"] for r in table)
    line = [lo, hi]
    right.plot(line, line, "k-", lw=0.8)
    right.fill_between(
        line,
        [x * 0.75 for x in line],
        [x * 1.25 for x in line],
        color="grey",
        alpha=0.2,
        label="±25 %",
    )
    right.set(
        xscale="log",
        yscale="log",
        xlabel="measured (µs)",
        ylabel="predicted (µs)",
        title="model calibrated on all-reduce",
    )
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig
