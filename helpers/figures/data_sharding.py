"""Which samples each rank reads: sharded over the world, or over the data-parallel group.

Chapter 10's concept figure for the sampler pitfall. The ranks of a D × T grid
(:class:`helpers.parallel.mesh.RankMesh`) are drawn as boxes, one row per data rank r_D and one
column per tensor rank r_T; each box lists the samples PyTorch's ``DistributedSampler`` gives that
rank. Left: ``num_replicas = G``, every rank its own shard, so the two halves of one layer
(a row: one tensor group) compute on different samples. Right: ``num_replicas = D`` with the data
rank (:func:`helpers.parallel.data_shard.data_sampler`), a row shares its samples.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch
from torch.utils.data import DistributedSampler

from helpers.figures.style import DPI, RANK_COLOURS
from helpers.parallel.data_shard import data_sampler
from helpers.parallel.mesh import RankMesh


def samples_by_rank(world: int, tp: int, samples: int, by: str) -> dict[int, list[int]]:
    """Each rank's samples with the sampler built over the ``world`` or the ``data`` group."""
    mesh = RankMesh.for_world(world, tp=tp)
    if by == "world":
        return {
            r: list(DistributedSampler(range(samples), num_replicas=world, rank=r, shuffle=False))
            for r in range(world)
        }
    return {r: list(data_sampler(range(samples), mesh, r, shuffle=False)) for r in range(world)}


def _panel(ax, mesh: RankMesh, got: dict[int, list[int]], title: str) -> None:
    ax.set_title(title, fontsize=10)
    for r, samples in got.items():
        c = mesh.coords(r)
        x, y = c["tp"] * 1.1, (mesh.dp - 1 - c["dp"]) * 0.9
        colour = RANK_COLOURS[c["dp"] % len(RANK_COLOURS)]
        ax.add_patch(
            FancyBboxPatch((x, y), 1.0, 0.75, boxstyle="round,pad=0.02", fc=colour, alpha=0.35)
        )
        ax.text(
            x + 0.5, y + 0.52, f"rank {r}  (r_D={c['dp']}, r_T={c['tp']})", ha="center", fontsize=8
        )
        ax.text(
            x + 0.5,
            y + 0.2,
            "samples " + ", ".join(map(str, samples)),
            ha="center",
            fontsize=9,
            weight="bold",
        )
    for d in range(mesh.dp):
        group = mesh.group_of(d * mesh.tp, "tp")
        y = (mesh.dp - 1 - d) * 0.9 + 0.375
        ax.text(-0.08, y, f"TP group\n{group}", ha="right", va="center", fontsize=8)
    ax.set_xlim(-0.55, 1.1 * mesh.tp)
    ax.set_ylim(-0.1, 0.9 * mesh.dp)
    ax.axis("off")


def figure(world: int = 4, tp: int = 2, samples: int = 8):
    """Two panels: the sampler over the world, and over the data-parallel group."""
    mesh = RankMesh.for_world(world, tp=tp)
    fig, axes = plt.subplots(1, 2, figsize=(9, 2.6), dpi=DPI)
    _panel(
        axes[0],
        mesh,
        samples_by_rank(world, tp, samples, "world"),
        f"by world: num_replicas = G = {world}",
    )
    _panel(
        axes[1],
        mesh,
        samples_by_rank(world, tp, samples, "data"),
        f"by data group: num_replicas = D = {mesh.dp}, rank = r_D",
    )
    fig.tight_layout()
    return fig
