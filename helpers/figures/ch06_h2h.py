"""Chapter 6's head-to-head as a picture: where one sequence's share of each framework's step goes,
by kind of kernel (:func:`helpers.chapters.ch06_h2h.kernel_rows`)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.figures.style import DPI, RANK_COLOURS

OTHER = "host / idle"  # the step time no kernel covered


def kernel_figure(rows: list[dict], classes: list[str]):
    """Stacked horizontal bars, one per framework: ms of GPU time per sequence for each kernel
    class in ``classes`` (the columns of the rows), and the rest of the step."""
    fig, ax = plt.subplots(figsize=(9, 2.6), dpi=DPI)
    names = [f"{r['framework']} (mbs {r['mbs']})" for r in rows][::-1]
    left = [0.0] * len(rows)
    colours = RANK_COLOURS + ["#CCB974", "#64B5CD"]
    for i, c in enumerate(classes + [OTHER]):
        if c == OTHER:
            widths = [max(r["step"] - sum(r.get(k, 0.0) for k in classes), 0.0) for r in rows]
        else:
            widths = [r.get(c, 0.0) for r in rows]
        widths = widths[::-1]
        colour = "#FFFFFF" if c == OTHER else colours[i % len(colours)]
        ax.barh(names, widths, left=left, color=colour, edgecolor="#444444", lw=0.5, label=c)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlim(0, 1.03 * max(r["step"] for r in rows))
    ax.set_xlabel("ms of the step per sequence of 2048 tokens (rank 0's profiled step)")
    ax.legend(ncol=5, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.32), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig
