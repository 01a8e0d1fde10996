"""Chapter 8's one-H200 figures: where each lever's step goes, the flagship step's kernel
timeline, and one step's memory by category beside Chapter 7's memory model.

Used by ``notebooks/08_troubleshooting.ipynb``; the numbers come from
:mod:`helpers.chapters.ch08_levers` (the records of :mod:`helpers.record.flagship_levers`).
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.figures.style import DPI, RANK_COLOURS
from helpers.train.profiling import KERNEL_COLUMNS
from helpers.figures.timeline import timeline

# a timeline row per group of kernel classes, and the colour kind of helpers.figures.timeline
GROUPS = {
    "matmul": ("matmul", "compute"),
    "attention": ("attention", "forward"),
    "triton (compiled)": ("fused elementwise", "backward"),
    "copy/cast": ("other", "recv"),
    "cross-entropy": ("other", "recv"),
    "elementwise/other": ("other", "recv"),
    "optimizer": ("optimizer", "optimizer"),
    "communication": ("communication", "communication"),
}
CATEGORY_COLOURS = dict(
    zip(
        ("weights", "optimizer", "other", "activations", "gradients", "temporaries"),
        (RANK_COLOURS[0], RANK_COLOURS[2], "#BBBBBB", RANK_COLOURS[1], RANK_COLOURS[3], "#DDDDDD"),
    )
)


def kernel_figure(rows: list[dict]):
    """One stacked bar per run: its profiled step's milliseconds per 1,000 tokens by kernel class,
    idle last (the step time no kernel covered)."""
    ok = [s for s in rows if s["ok"] and s.get("kernels")]
    fig, ax = plt.subplots(figsize=(8.5, 0.42 * len(ok) + 2.0), dpi=DPI)
    names = [s["name"][:46] for s in ok]
    left = [0.0] * len(ok)
    colours = list(RANK_COLOURS) + ["#999999"]
    for i, k in enumerate((*KERNEL_COLUMNS, "idle")):
        vals = []
        for s in ok:
            ms = s["kernels"]["ms"]
            step = 1000 * s["seconds_per_step"]
            v = step - sum(ms.values()) if k == "idle" else ms.get(k, 0.0)
            vals.append(max(v, 0.0) / (s["micro_batch"] * s["seq"] / 1000))
        colour, edge = ("#EEEEEE", "#999999") if k == "idle" else (colours[i % len(colours)], None)
        ax.barh(names, vals, left=left, color=colour, edgecolor=edge, label=k)
        left = [a + b for a, b in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_xlabel("ms per 1,000 tokens (profiled step)")
    ax.legend(ncol=5, fontsize=7, loc="upper center", bbox_to_anchor=(0.4, -0.14))
    fig.tight_layout()
    return fig


def trace_rows(trace: dict) -> dict[str, list[tuple[float, float, str]]]:
    """The profiled step's merged kernel intervals (ms) as timeline rows (seconds)."""
    out: dict[str, list[tuple[float, float, str]]] = {}
    for a, b, cls in trace["intervals"]:
        row, kind = GROUPS.get(cls, ("other", "recv"))
        out.setdefault(row, []).append((a / 1000, b / 1000, kind))
    order = ("matmul", "attention", "fused elementwise", "other", "optimizer", "communication")
    return {k: out[k] for k in order if k in out}


def trace_figure(trace: dict, title: str):
    """The flagship step on the GPU: one row per kind of kernel (a Gantt chart)."""
    fig = timeline(trace_rows(trace), title=title, unit="ms")
    fig.set_size_inches(9, 3.2)
    legend = fig.axes[0].get_legend()
    if legend is not None:  # the rows name the kinds; the colour legend would not
        legend.remove()
    return fig


def memory_figure(snapshot: dict, model_phases: dict[str, float], title: str):
    """Allocated GiB over one step by category (stacked), the phase ends as vertical lines, and
    Chapter 7's memory model's prediction of each phase's peak as a dashed segment."""
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=DPI)
    x = snapshot["events"]
    cats = [c for c in CATEGORY_COLOURS if any(snapshot["gib"][c])]
    ax.stackplot(
        x,
        [snapshot["gib"][c] for c in cats],
        labels=cats,
        colors=[CATEGORY_COLOURS[c] for c in cats],
    )
    phases = snapshot["phases"]
    edges = [("start", "forward"), ("forward", "backward"), ("backward", "step")]
    for a, b in edges:
        if a in phases and b in phases and b in model_phases:
            ax.hlines(model_phases[b], phases[a], phases[b], colors="k", linestyles="--", lw=1.2)
    for name, at in phases.items():
        if name != "start":
            ax.axvline(at, color="k", lw=0.6, alpha=0.5)
            if name != "zero_grad":  # a few events after the step's end: one label there
                ax.text(at, ax.get_ylim()[1] * 0.97, f" {name}", fontsize=7, va="top")
    ax.set_xlabel("allocator events during the step")
    ax.set_ylabel("GiB allocated")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper right", ncol=2)
    fig.tight_layout()
    return fig
