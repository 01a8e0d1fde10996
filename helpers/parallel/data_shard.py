"""Which samples a rank reads: the data shard follows the data-parallel rank, not the global rank.

Tensor (and pipeline) peers of a rank hold pieces of the same model replica, so they must read the
same samples; only the data-parallel group splits the data (Chapter 10, "The sampler").
"""

from __future__ import annotations

from torch.utils.data import DistributedSampler

from helpers.parallel.mesh import RankMesh


# [start: data-sampler]
def data_sampler(dataset, mesh: RankMesh, rank: int, shuffle: bool = True) -> DistributedSampler:
    """Rank ``rank``'s sampler, sharded over the data-parallel group: its tensor (and pipeline)
    peers share its data rank, so they read the same samples."""
    dp_rank = mesh.coords(rank)["dp"]
    return DistributedSampler(dataset, num_replicas=mesh.dp, rank=dp_rank, shuffle=shuffle)


# [end: data-sampler]
