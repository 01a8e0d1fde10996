"""The D × P × T × S (× E) rank grid and its groups: Chapter 2's concept figure.

Colossal-AI's ``HybridParallelPlugin`` numbers the ranks in C order on the mesh
``(dp, pp, tp, sp)``, the last axis fastest:
rank = ((r_D · P + r_P) · T + r_T) · S + r_S. Written as a table with one row per (r_D, r_P) and
one column per (r_T, r_S), the ranks appear in reading order, and a group along one axis is a set
of cells a fixed stride apart: S for tensor groups, 1 for sequence groups, T·S for pipeline
groups, P·T·S for data groups (:class:`helpers.parallel.mesh.RankMesh` gives them).

Expert parallelism adds no GPU: ``MoeHybridParallelPlugin`` splits the data axis into
``moe_dp`` = D/E outside and ``ep`` = E inside, on its own mesh ``(D/E, P, E, T, S)``, so an
expert group's members are T·S apart (:func:`moe_groups`).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from helpers.figures.style import DPI, RANK_COLOURS
from helpers.parallel.mesh import RankMesh

AXES_SHOWN = ("sp", "tp", "pp", "dp")


def moe_groups(dp: int, pp: int, tp: int, sp: int, ep: int) -> dict[str, list[list[int]]]:
    """The ``ep`` and ``moe_dp`` groups of Colossal-AI's MoE mesh (D/E, P, E, T, S), C order."""
    if dp % ep:
        raise ValueError(f"the expert degree E={ep} must divide the data degree D={dp}")
    shape = (dp // ep, pp, ep, tp, sp)
    grid = np.arange(dp * pp * tp * sp).reshape(shape)

    def along(k: int) -> list[list[int]]:
        return sorted(np.moveaxis(grid, k, -1).reshape(-1, shape[k]).tolist())

    return {"ep": along(2), "moe_dp": along(0)}


def groups(dp: int, pp: int, tp: int, sp: int, ep: int | None = None) -> dict[str, list]:
    """Every group along every axis: the plugin's four from :class:`RankMesh`, and ``ep`` from
    :func:`moe_groups` when ``ep`` is given."""
    mesh = RankMesh(dp=dp, pp=pp, tp=tp, sp=sp)
    out = {axis: mesh.groups(axis) for axis in AXES_SHOWN}
    if ep is not None:
        out["ep"] = moe_groups(dp, pp, tp, sp, ep)["ep"]
    return out


def strides(found: dict[str, list[list[int]]]) -> dict[str, int]:
    """The distance between neighbouring members, the same in every group of an axis (raises
    when it is not)."""
    out = {}
    for axis, gs in found.items():
        steps = {b - a for g in gs for a, b in zip(g, g[1:])}
        if len(steps) != 1:
            raise ValueError(f"{axis}: members are not evenly spaced ({sorted(steps)})")
        out[axis] = steps.pop()
    return out


def _panel(ax, rows: int, cols: int, gs: list[list[int]], title: str) -> None:
    colours = RANK_COLOURS if len(gs) <= len(RANK_COLOURS) else plt.get_cmap("tab20").colors

    def xy(rank: int) -> tuple[float, float]:
        return rank % cols + 0.5, rows - 1 - rank // cols + 0.5

    for i, g in enumerate(gs):
        colour = colours[i % len(colours)]
        for rank in g:
            x, y = xy(rank)
            ax.add_patch(
                plt.Rectangle((x - 0.5, y - 0.5), 1, 1, facecolor=colour, edgecolor="white")
            )
            ax.text(x, y, str(rank), ha="center", va="center", fontsize=8, color="white")
        pts = np.array([xy(r) for r in g])
        if len(g) > 1:  # staggered, so that lines of interleaved groups do not overlap
            lift = 0.2 + 0.1 * (i % 3)
            ax.plot(pts[:, 0] + lift, pts[:, 1] - lift, color="black", lw=0.8, alpha=0.6)
    ax.set_xlim(0, cols), ax.set_ylim(0, rows)
    ax.set_xticks([]), ax.set_yticks([])
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=8)


def rank_grid_figure(dp: int = 2, pp: int = 2, tp: int = 2, sp: int = 2, ep: int | None = 2):
    """One panel per axis of a ``dp × pp × tp × sp`` grid (and ``ep`` on the MoE plugin's mesh):
    the ranks as a table, one row per (r_D, r_P) and one column per (r_T, r_S), the cells of one
    group in one colour and joined by a line."""
    found = groups(dp, pp, tp, sp, ep)
    step = strides(found)
    rows, cols = dp * pp, tp * sp
    size = {"sp": sp, "tp": tp, "pp": pp, "dp": dp, "ep": ep}
    words = {
        "sp": "sequence (S)",
        "tp": "tensor (T)",
        "pp": "pipeline (P)",
        "dp": "data (D)",
        "ep": "expert (E), MoE mesh",
    }
    fig, axes = plt.subplots(1, len(found), figsize=(2.0 * len(found), 2.9), dpi=DPI)
    for ax, axis in zip(axes, found):
        n = len(found[axis])
        title = f"{words[axis]}\n{n} groups of {size[axis]}, stride {step[axis]}"
        _panel(ax, rows, cols, found[axis], title)
    axes[0].set_ylabel("row: (r_D, r_P)", fontsize=8)
    axes[0].set_xlabel("column: (r_T, r_S)", fontsize=8)
    world = dp * pp * tp * sp
    moe = f"; E = {ep} splits D on the mesh (D/E, P, E, T, S)" if ep else ""
    fig.suptitle(
        f"G = D·P·T·S = {dp}·{pp}·{tp}·{sp} = {world} ranks, "
        f"rank = ((r_D·P + r_P)·T + r_T)·S + r_S{moe}",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig
