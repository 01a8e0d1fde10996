"""Chapter 7's memory phases over one training step, drawn from a measured CPU trace.

:func:`phases_figure` stacks the bytes of each kind of tensor (parameters, optimizer states,
gradients, activations, backward temporaries) after every operator of one step, as
:func:`helpers.train.memory_phases.step_trace` records them, shades the phases (forward,
backward, optimizer step) and marks the peak: the picture of "forward builds activations, backward
frees them and builds gradients, the optimizer step works on the gradients".
"""

from __future__ import annotations

LABELS = {
    "Parameter": "parameters",
    "Optstate": "optimizer states",
    "Gradient": "gradients",
    "Activation": "activations (saved by the forward)",
    "Temp": "backward temporaries (loss gradients, ...)",
}
COLOURS = {
    "Parameter": "#4C72B0",
    "Optstate": "#55A868",
    "Gradient": "#DD8452",
    "Activation": "#8172B3",
    "Temp": "#C44E52",
}
SHADES = {"forward": "#f2f2f2", "backward": "#e2e2e2", "optimizer step": "#f2f2f2"}


def phases_figure(trace: dict, title: str = "Memory over one training step (measured, CPU)"):
    """Stacked bytes per kind (MiB) against the operator index of one step, phases shaded and the
    peak marked. ``trace``: :func:`helpers.train.memory_phases.step_trace`'s result."""
    import matplotlib.pyplot as plt

    from helpers.train.memory_phases import KINDS, trace_facts  # torch, loaded only to draw

    points, ends = trace["points"], trace["ends"]
    x = list(range(len(points)))
    mib = 2**20
    fig, ax = plt.subplots(figsize=(9, 3.8), dpi=80)
    start = 0
    for phase, shade in SHADES.items():
        ax.axvspan(start, ends[phase] - 1, color=shade, zorder=0)
        ax.text(
            (start + ends[phase] - 1) / 2,
            1.01,
            phase,
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=9,
        )
        start = ends[phase] - 1
    ax.stackplot(
        x,
        *[[p[kind] / mib for p in points] for kind in KINDS],
        labels=[LABELS[k] for k in KINDS],
        colors=[COLOURS[k] for k in KINDS],
        alpha=0.9,
        zorder=2,
    )
    facts = trace_facts(trace)
    ax.annotate(
        "peak: start of backward,\nno gradient yet",
        (facts["peak_index"], facts["peak"] / mib),
        xytext=(30, -5),
        textcoords="offset points",
        arrowprops={"arrowstyle": "->"},
        fontsize=9,
        va="top",
    )
    ax.set_xlim(0, len(points) - 1)
    ax.set_ylim(0, 1.15 * facts["peak"] / mib)
    ax.set_xlabel("operators of the step, in the order they ran")
    ax.set_ylabel("MiB held")
    ax.set_title(title, pad=18, fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig
