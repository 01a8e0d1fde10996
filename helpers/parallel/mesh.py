"""The rank grid: every rank's coordinates and the members of every group, as tensor slices.

Used by Chapter 1 (who talks to whom in each dimension) and Chapter 2 (combining dimensions).
The axis order is Colossal-AI's: ``HybridParallelPlugin`` builds
``ProcessGroupMesh(dp_size, pp_size, tp_size, sp_size)`` and ranks are laid out in C order, the
last axis fastest::

    rank = ((dp * PP + pp) * TP + tp) * SP + sp

so tensor-parallel partners are neighbours (the same node, fast links) and data-parallel partners
are far apart. A group along an axis is a 1-D slice of the grid with every other coordinate fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.parallel.vocab import AXES


@dataclass(frozen=True)
class RankMesh:
    """A ``dp × pp × tp × sp`` grid of ranks (Colossal-AI's axis order)."""

    dp: int = 1
    pp: int = 1
    tp: int = 1
    sp: int = 1

    def __post_init__(self) -> None:
        for axis in AXES:
            size = getattr(self, axis)
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"{axis} size must be a positive integer, got {size!r}")

    @classmethod
    def for_world(cls, world_size: int, pp: int = 1, tp: int = 1, sp: int = 1) -> "RankMesh":
        """Derive the data degree D = G / (P·T·S); refuse layouts that do not divide G."""
        model = pp * tp * sp
        if world_size % model:
            raise ValueError(
                f"{world_size} ranks cannot be split as pp={pp} × tp={tp} × sp={sp}: "
                f"{model} does not divide {world_size}"
            )
        return cls(world_size // model, pp, tp, sp)

    @classmethod
    def of(cls, degrees) -> "RankMesh":
        """The grid of a :class:`helpers.parallel.degrees.Degrees`: its own sequence axis only
        (split_gather and ring reuse the tensor group)."""
        return cls(degrees.data, degrees.pipeline, degrees.tensor, degrees.own_sequence)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.dp, self.pp, self.tp, self.sp)

    @property
    def world_size(self) -> int:
        return self.dp * self.pp * self.tp * self.sp

    # [start: rank-mesh]
    @property
    def grid(self) -> torch.Tensor:
        """The ranks as a tensor of shape (dp, pp, tp, sp)."""
        return torch.arange(self.world_size).reshape(self.shape)

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of ``rank`` along every axis, e.g. {'dp': 1, 'pp': 0, 'tp': 1, 'sp': 0}."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside a world of {self.world_size}")
        where = (self.grid == rank).nonzero()[0].tolist()
        return dict(zip(AXES, where))

    def rank_of(self, dp: int = 0, pp: int = 0, tp: int = 0, sp: int = 0) -> int:
        """Inverse of :meth:`coords`."""
        return int(self.grid[dp, pp, tp, sp])

    def groups(self, axis: str) -> list[list[int]]:
        """All groups along ``axis``: each is a slice of the grid with the other axes fixed."""
        if axis not in AXES:
            raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
        k = AXES.index(axis)
        lines = self.grid.movedim(k, -1).reshape(-1, self.shape[k])  # (other ranks, axis size)
        return sorted(line.tolist() for line in lines)

    def group_of(self, rank: int, axis: str) -> list[int]:
        """The members of ``rank``'s group along ``axis``."""
        return next(g for g in self.groups(axis) if rank in g)
        # [end: rank-mesh]

    def table(self) -> list[dict[str, int]]:
        """One row per rank with its coordinates (for printing as a table)."""
        return [{"rank": r, **self.coords(r)} for r in range(self.world_size)]

    def __str__(self) -> str:
        lines = [
            f"RankMesh(dp={self.dp}, pp={self.pp}, tp={self.tp}, sp={self.sp}), "
            f"{self.world_size} ranks"
        ]
        for axis in AXES:
            if getattr(self, axis) > 1:
                lines.append(f"  {axis} groups: {self.groups(axis)}")
        return "\n".join(lines)


# [start: process-groups]
def process_groups(mesh: RankMesh, axes: tuple[str, ...]) -> dict[str, object]:
    """This rank's process group along each of ``axes``: every rank creates every group of the
    grid (``torch.distributed.new_group`` must be entered by all ranks, in the same order).
    Chapter 2's 3-D demo."""
    import torch.distributed as dist

    mine = {}
    for axis in axes:
        for ranks in mesh.groups(axis):
            group = dist.new_group(ranks)
            if dist.get_rank() in ranks:
                mine[axis] = group
    return mine
    # [end: process-groups]
