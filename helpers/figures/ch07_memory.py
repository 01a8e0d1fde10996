"""Chapter 7's figures of the memory record: the model against the GPU, the techniques side by side.

:func:`accuracy_figure` plots each layout's predicted against its measured peak (Chapter 7, "The
model against the GPU"); :func:`technique_figure` splits each technique's predicted peak into its
parts beside its throughput ("The techniques side by side").
"""

from __future__ import annotations

from helpers.record.ch07_layouts import GIB, TECHNIQUES
from helpers.record.ch07_tables import measured_rows, recorded_layouts
from helpers.cost.memory_llama import predict


def accuracy_figure(record: dict):
    """Predicted against measured peak per layout, with the ±10 % band."""
    import matplotlib.pyplot as plt

    rows = measured_rows(record)
    fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=80)
    top = 1.1 * max(max(r["measured"], r["predicted"]) for r in rows) / GIB
    line = [0, top]
    ax.fill_between(
        line, [0.9 * x for x in line], [1.1 * x for x in line], color="#dddddd", label="±10 %"
    )
    ax.plot(line, line, color="grey", lw=1)
    for i, r in enumerate(rows, 1):
        colour = "#4C72B0" if abs(r["error_pct"]) <= 10 else "#C44E52"
        ax.scatter(r["measured"] / GIB, r["predicted"] / GIB, color=colour, zorder=3)
        ax.annotate(
            str(i),
            (r["measured"] / GIB, r["predicted"] / GIB),
            textcoords="offset points",
            xytext=(4, 3),
            fontsize=8,
        )
    ax.set(
        xlim=(0, top),
        ylim=(0, top),
        xlabel="measured max_memory_allocated (GiB)",
        ylabel="predicted peak (GiB)",
        title="Memory model against the GPU, per layout",
    )
    ax.legend(loc="upper left")
    ax.text(
        1.02,
        1.0,
        "\n".join(f"{i}  {r['layout']}  {r['error_pct']:+.1f} %" for i, r in enumerate(rows, 1)),
        transform=ax.transAxes,
        va="top",
        fontsize=8,
        family="monospace",
    )
    return fig


def technique_figure(record: dict, names: list[str] = TECHNIQUES):
    """Left: the predicted peak split into its parts, the measured peak as a diamond. Right:
    tokens/s."""
    import matplotlib.pyplot as plt

    by_name = {r["layout"]: r for r in measured_rows(record)}
    names = [n for n in names if n in by_name]
    layouts = recorded_layouts(record)
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(11, 4.2), dpi=80, sharey=True, gridspec_kw={"width_ratios": [3, 2]}
    )
    colours = ["#4C72B0", "#8172B3", "#DD8452", "#937860", "#55A868", "#C44E52", "#8C8C8C"]
    for y, name in enumerate(names):
        r = by_name[name]
        parts = predict(layouts[name], rank=r["rank"])["breakdown"]
        x = 0.0
        for (part, value), colour in zip(parts.items(), colours):
            left.barh(y, value / GIB, left=x, color=colour, label=part if y == 0 else None)
            x += value / GIB
        left.scatter(
            r["measured"] / GIB,
            y,
            marker="D",
            color="black",
            zorder=3,
            label="measured" if y == 0 else None,
        )
        right.barh(y, r["tokens_per_s"] / 1e3, color="#55A868")
    left.set(yticks=range(len(names)), yticklabels=names, xlabel="peak memory per GPU (GiB)")
    left.invert_yaxis()
    left.legend(fontsize=8, loc="lower right")
    right.set(xlabel="throughput (thousand tokens/s, both GPUs)")
    fig.suptitle("What each technique saves, and what it costs in time")
    fig.tight_layout()
    return fig
