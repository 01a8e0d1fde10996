"""Chapter 2's figure of the rank mesh: every rank, its coordinate and its three groups.

:func:`mesh_figure` draws a :class:`helpers.parallel.mesh.RankMesh` (the grid of Chapter 2 and the
builder analogy), so the figure shows the groups the demos build.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from helpers.figures.style import DPI, RANK_COLOURS


def mesh_figure(
    mesh, names: dict[str, str] | None = None, labels: bool | None = None, title: str | None = None
):
    """Every rank of a ``dp × pp × tp`` RankMesh, its (dp, pp, tp) coordinate and its three groups.

    One panel per dp index; inside it, rows are pipeline stages (stage 0 on top) and columns tensor
    ranks. A dark box around a row is a TP group, a grey bar through a column a PP group, and cells
    of the same colour in different panels form a DP group. ``names`` relabels the axes (the
    builder analogy: {"dp": "crew", "pp": "section", "tp": "trade"}); ``labels`` writes each
    group's members next to it (default: only for meshes of at most 8 ranks).
    """
    from matplotlib.colors import to_rgb
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyBboxPatch, Patch, Rectangle

    if mesh.sp != 1:
        raise ValueError(f"mesh_figure draws dp × pp × tp meshes; this one has sp={mesh.sp}")
    names = {"dp": "dp", "pp": "pp", "tp": "tp", **(names or {})}
    labels = mesh.world_size <= 8 if labels is None else labels
    D, P, T = mesh.dp, mesh.pp, mesh.tp
    small = mesh.world_size <= 8
    fig, axes = plt.subplots(
        1, D, figsize=(3.5 * D if small else 3.2 * D, 0.75 * P + 1.6), dpi=DPI, squeeze=False
    )
    # one colour per DP group (cell position), all distinct
    colours = (
        RANK_COLOURS[: P * T]
        if P * T <= len(RANK_COLOURS)
        else [plt.get_cmap("tab20")(i % 20) for i in range(P * T)]
    )
    for d, ax in enumerate(axes[0]):
        for p in range(P):
            y = P - 1 - p
            ax.add_patch(
                FancyBboxPatch(
                    (-0.45, y - 0.42),
                    T - 0.1,
                    0.84,
                    boxstyle="round,pad=0.02",
                    fill=False,
                    edgecolor="#222222",
                    lw=1.6,
                    zorder=3,
                )
            )
            if labels:
                ax.text(
                    T - 0.4,
                    y,
                    f"TP {mesh.group_of(mesh.rank_of(d, p, 0), 'tp')}",
                    va="center",
                    fontsize=7,
                )
            for t in range(T):
                r, colour = mesh.rank_of(d, p, t), colours[p * T + t]
                ink = "black" if np.dot(to_rgb(colour), (0.299, 0.587, 0.114)) > 0.6 else "white"
                ax.add_patch(Rectangle((t - 0.35, y - 0.35), 0.7, 0.7, color=colour, zorder=2))
                ax.text(
                    t,
                    y + 0.08,
                    f"rank {r}" if small else str(r),
                    ha="center",
                    va="center",
                    fontsize=9 if small else 8,
                    color=ink,
                    weight="bold",
                    zorder=4,
                )
                if small:
                    ax.text(
                        t,
                        y - 0.18,
                        f"({d},{p},{t})",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color=ink,
                        zorder=4,
                    )
        for t in range(T):
            ax.plot(
                [t, t],
                [-0.45, P - 0.55],
                color="#999999",
                lw=10 if small else 6,
                alpha=0.5,
                solid_capstyle="round",
                zorder=1,
            )
            if labels:
                ax.text(
                    t,
                    -0.62,
                    f"PP {mesh.group_of(mesh.rank_of(d, 0, t), 'pp')}",
                    ha="center",
                    va="top",
                    fontsize=7,
                )
        (
            ax.set_xlim(-0.6, T + (0.9 if labels else -0.4)),
            ax.set_ylim(-0.9 if labels else -0.6, P - 0.4),
        )
        ax.set_xticks(range(T), [f"{names['tp']} {t}" for t in range(T)], fontsize=8)
        ax.set_yticks(range(P), [f"{names['pp']} {P - 1 - y}" for y in range(P)], fontsize=8)
        ax.xaxis.tick_top()
        ax.tick_params(length=0)
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.set_title(f"{names['dp']} {d}", fontsize=10, pad=18)
    handles = [
        Patch(fill=False, edgecolor="#222222", lw=1.6, label="TP group: one row"),
        Line2D([], [], color="#999999", lw=6, alpha=0.5, label="PP group: one column"),
        Patch(color=colours[0], label="DP group: one colour across panels"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.suptitle(
        title or f"{mesh.world_size} ranks as D={D} × P={P} × T={T}, coordinate (dp, pp, tp)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig
