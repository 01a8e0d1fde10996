"""Expert parallelism's dispatch all-to-all and what it asks of the network: Chapter 9's concept
figure.

:func:`dispatch_exchange` runs the dispatch on E ranks and records where every piece of every
buffer goes: rank r's buffer (n_exp, C, h) holds its tokens for every expert, cut along the
expert axis into E pieces; piece j goes to rank j, which owns experts j·n_exp/E ... (the order of
:func:`helpers.parallel.ep.expert_parallel_forward`). Afterwards rank j holds, for each of its
experts, the C slots of every rank, (n_exp/E, E·C, h). Each rank keeps one piece of E and sends
E - 1, the (E-1)/E of :func:`helpers.cost.moe.dispatch_bytes`.

:func:`dispatch_figure` draws the buffers before and after, and beside them the bandwidth one
rank sees across nodes (:func:`helpers.cost.placement.spanning_link`): a ring all-reduce spreads
its node crossings over the cards of every group member on the node; an all-to-all's flows go
through each rank's own card.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.cost.comm import NOMINAL_LINKS
from helpers.cost.placement import spanning_link
from helpers.figures.style import DPI, RANK_COLOURS


def dispatch_exchange(ranks: int, experts: int) -> dict:
    """``before[r][e]``: the rank that owns expert e (rank r's buffer row e is for it);
    ``after[j]``: the (expert, sending rank) of every row block rank j holds; ``kept``/``sent``:
    row blocks each rank keeps or sends."""
    if experts % ranks:
        raise ValueError(f"{experts} experts do not split over {ranks} ranks")
    local = experts // ranks
    before = [[e // local for e in range(experts)] for _ in range(ranks)]
    after = [
        [(e, r) for e in range(j * local, (j + 1) * local) for r in range(ranks)]
        for j in range(ranks)
    ]
    kept = [sum(owner == r for owner in before[r]) for r in range(ranks)]
    return {"before": before, "after": after, "kept": kept, "sent": [experts - k for k in kept]}


def cross_node_bandwidth(per_node: list[int], gpus_per_node: int = 8) -> dict[str, list[float]]:
    """GB/s one rank of a group spanning nodes sees, ``per_node`` members per node, for a ring
    all-reduce and an all-to-all, on the nominal InfiniBand NDR card and NVLink 4."""
    card, intra = NOMINAL_LINKS["ib_ndr"], NOMINAL_LINKS["nvlink4"]
    out = {}
    for collective in ("all_reduce", "all_to_all"):
        links = [spanning_link(card, intra, collective, n, gpus_per_node) for n in per_node]
        out[collective] = [link.bandwidth_bytes_per_s / 1e9 for link in links]
    return out


def _buffers(ax, rows: list[list], title: str, colour_of, label_of) -> None:
    for r, column in enumerate(rows):
        for i, cell in enumerate(column):
            ax.add_patch(
                plt.Rectangle(
                    (r * 1.3, len(column) - 1 - i),
                    1,
                    1,
                    facecolor=colour_of(cell),
                    edgecolor="black" if cell[1] == r else "white",  # stays on its rank
                    lw=1.6 if cell[1] == r else 1.0,
                )
            )
            ax.text(
                r * 1.3 + 0.5,
                len(column) - 0.5 - i,
                label_of(cell),
                ha="center",
                va="center",
                fontsize=6,
                color="white",
            )
    ax.set_xlim(-0.2, len(rows) * 1.3), ax.set_ylim(-0.2, len(rows[0]) + 0.2)
    ax.set_xticks(
        [r * 1.3 + 0.5 for r in range(len(rows))],
        [f"rank {r}" for r in range(len(rows))],
        fontsize=7,
    )
    ax.set_yticks([]), ax.set_title(title, fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)


def dispatch_figure(ranks: int = 4, experts: int = 8, gpus_per_node: int = 8):
    """Before and after the dispatch all-to-all (colour: the rank that owns the expert, then the
    rank the tokens came from), and the cross-node bandwidth one rank sees."""
    x = dispatch_exchange(ranks, experts)
    fig, axes = plt.subplots(
        1, 3, figsize=(11, 3.0), dpi=DPI, gridspec_kw={"width_ratios": [1, 1, 1.1]}
    )
    _buffers(
        axes[0],
        [[(e, owner) for e, owner in enumerate(col)] for col in x["before"]],
        "before: each rank's buffer, a row per expert\n(colour: its owner; outlined: stays home)",
        lambda c: RANK_COLOURS[c[1]],
        lambda c: f"e{c[0]}",
    )
    _buffers(
        axes[1],
        x["after"],
        "after: its experts' C slots from every rank\n(colour: the rank they came from)",
        lambda c: RANK_COLOURS[c[1]],
        lambda c: f"e{c[0]}",
    )
    per_node = [n for n in (1, 2, 4, 8) if n <= gpus_per_node]
    bw = cross_node_bandwidth(per_node, gpus_per_node)
    ax = axes[2]
    width = 0.38
    for i, (key, label, colour) in enumerate(
        (("all_reduce", "ring all-reduce", "#55A868"), ("all_to_all", "all-to-all", "#C44E52"))
    ):
        ax.bar(
            [j + (i - 0.5) * width for j in range(len(per_node))],
            bw[key],
            width,
            color=colour,
            label=label,
        )
    ax.set_xticks(range(len(per_node)), [str(n) for n in per_node])
    ax.set(
        xlabel=f"group members per node ({gpus_per_node} GPUs, one card each)",
        ylabel="GB/s one rank sees across nodes",
    )
    ax.set_title(
        "one 50 GB/s card per GPU: the ring adds them up,\nthe all-to-all cannot", fontsize=8
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
