"""Chapter 12's figures: the published layouts' parallel degrees, and the scale simulation.

Used by ``notebooks/12_in_practice.ipynb``. :func:`degrees_figure` draws the degree points of
:func:`helpers.chapters.ch12_layouts.degree_points` (each published run's size, GPU count and
degrees, assumed degrees included) against model size and GPU count; :func:`scale_figure` the
rows of :func:`helpers.chapters.ch12_planner.scale_rows` (Llama 3 405B from 64 to 16,384 GPUs,
the planner's best layout and the published one, by the step-time model).
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.figures.style import DPI, RANK_COLOURS

DEGREES = (  # the key of a degree point, its legend, its marker
    ("tp", "TP", "o"),
    ("pp", "PP", "s"),
    ("dp", "DP", "^"),
    ("cp", "CP", "D"),
    ("ep", "EP", "*"),
)


def degrees_figure(points: list[dict]):
    """Parallel degrees of the published runs against model size (left) and GPU count (right)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), dpi=DPI, sharey=True)
    for ax, x, label in ((axes[0], "params", "parameters (B)"), (axes[1], "gpus", "GPUs")):
        for k, (name, text, marker) in enumerate(DEGREES):
            xs = [p[x] for p in points if p[name] and p[name] > 1]
            ys = [p[name] for p in points if p[name] and p[name] > 1]
            ax.scatter(xs, ys, marker=marker, color=RANK_COLOURS[k], label=text, alpha=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log", base=2)
        ax.set_xlabel(label)
        ax.axhline(8, color="grey", lw=0.8, ls=":")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("degree (1 not drawn)")
    axes[0].text(1.1, 8.6, "one node = 8 GPUs", color="grey", fontsize=8)
    axes[1].legend(loc="upper left", fontsize=8)
    fig.suptitle("Published layouts: degrees against model size and GPU count")
    fig.tight_layout()
    return fig


def scale_figure(best: list[dict], fixed: list[dict]):
    """Step time and MFU of Llama 3 405B from 64 to 16,384 GPUs: the planner's best layout and
    the published T = 8 × P = 16; bubble share of the latter."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=DPI)
    for rows, label, colour in ((best, "planner's best", 0), (fixed, "T=8 × P=16 (published)", 1)):
        ok = [r for r in rows if "step s" in r]
        g = [r["GPUs"] for r in ok]
        a.plot(g, [r["step s"] for r in ok], "o-", color=RANK_COLOURS[colour], label=label)
        b.plot(g, [r["MFU %"] for r in ok], "o-", color=RANK_COLOURS[colour], label=f"MFU, {label}")
    ok = [r for r in fixed if "step s" in r]
    b.plot(
        [r["GPUs"] for r in ok],
        [r["bubble %"] for r in ok],
        "s--",
        color=RANK_COLOURS[3],
        label="bubble % (published layout)",
    )
    none = [r["GPUs"] for r in best if "step s" not in r]
    for ax in (a, b):
        if none:  # the sizes where nothing fits in memory
            ax.axvspan(min(none) / 1.3, max(none) * 1.3, color="grey", alpha=0.15)
            ax.text(min(none), 0.92, "nothing fits", transform=ax.get_xaxis_transform(), fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs (global batch fixed: 2,048 × 8,192 tokens)")
        ax.grid(alpha=0.3)
    a.legend(fontsize=8)
    b.legend(fontsize=8, loc="center left")
    a.set_yscale("log")
    a.set_ylabel("step time (s), model")
    b.set_ylabel("% (model)")
    fig.suptitle("Llama 3 405B by simulation: where adding GPUs stops paying")
    fig.tight_layout()
    return fig
