"""Chapter 9's figures of mixture of experts: the tokens routed to each expert, and the balancing
runs' load and drop rate step by step.

:func:`moe_load_figure` draws the ranks' result lines of ``helpers/demos/ch09_moe.py``: each
expert's routed tokens, stacked by the rank they came from, against one rank's capacity.
:func:`balance_figure` draws the per-step curves of the balancing runs that
:func:`helpers.chapters.ch09_moe_balance.lines` reads from ``helpers/demos/ch09_moe_balance.py``
(max/mean load, drop rate, load per expert), one colour per balancing method.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.figures.style import DPI, RANK_COLOURS
from helpers.run.result_types.ch09 import MoeResult


def moe_load_figure(results: list[MoeResult]):
    """Tokens routed to each expert, stacked by the rank they came from; the line is the capacity
    of one rank's group, so a bar segment above it is partly dropped."""
    experts = results[0]["experts"]
    fig, ax = plt.subplots(figsize=(6, 2.8), dpi=DPI)
    bottom = [0] * experts
    for r, colour in zip(results, RANK_COLOURS * 4):
        ax.bar(
            range(experts), r["routed"], bottom=bottom, color=colour, label=f"from rank {r['rank']}"
        )
        bottom = [b + x for b, x in zip(bottom, r["routed"])]
    ax.axhline(results[0]["capacity"], color="black", ls="--", lw=1, label="capacity per rank")
    owner = {e: r["rank"] for r in results for e in r["local_experts"]}
    ax.set_xticks(range(experts), [f"e{e}\n(rank {owner[e]})" for e in range(experts)], fontsize=7)
    ax.set_ylabel("tokens routed")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def balance_figure(lines: list[dict], capacity_mean: float | None = None):
    """Max/mean load and drop rate against the step, one line per run; then the load per expert
    averaged over the last ten steps. ``lines``: per run, its ``method`` and ``name`` and the
    per-step ``max_over_mean``, ``drop_rate`` and ``load`` (``load[step][expert]``)."""
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.0), dpi=DPI)
    styles = {"none": ("#8C8C8C", "-"), "aux": ("#4C72B0", None), "bias": ("#C44E52", "-")}
    dashes = iter(["--", "-"])
    for i, s in enumerate(lines):
        colour, ls = styles[s["method"]]
        ls = ls or next(dashes)
        axes[0].plot(range(1, len(s["max_over_mean"]) + 1), s["max_over_mean"], color=colour,
                     ls=ls, lw=1.2, label=s["name"])  # fmt: skip
        axes[1].plot([100 * d for d in s["drop_rate"]], color=colour, ls=ls, lw=1.2)
        tail = [sum(col) / 10 for col in zip(*s["load"][-10:])]
        width = 0.8 / len(lines)
        xs = [e + (i - (len(lines) - 1) / 2) * width for e in range(len(tail))]
        axes[2].bar(xs, tail, width=width, color=colour, alpha=0.6 if ls == "--" else 1.0)
    axes[0].axhline(1, color="black", lw=0.8, ls=":")
    axes[0].set(xlabel="step", ylabel="max / mean load", ylim=(0.9, None))
    axes[1].set(xlabel="step", ylabel="choices dropped (%)")
    if capacity_mean is not None:
        axes[2].axhline(capacity_mean, color="black", lw=0.8, ls=":")
    axes[2].set(xlabel="expert", ylabel="tokens routed, last 10 steps")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(lines), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig
