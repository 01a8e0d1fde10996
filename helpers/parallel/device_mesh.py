"""torch's own rank grid beside Colossal-AI's: ``DeviceMesh``, ``DTensor``, FSDP2 + tensor parallel.

Chapter 2, "torch's own mesh". PyTorch's ``init_device_mesh(device, shape, mesh_dim_names)``
lays ranks out in C order like Colossal-AI's ``ProcessGroupMesh`` (the last axis fastest,
:mod:`helpers.parallel.mesh`), so naming the axes in the book's order (dp, pp, tp, sp) gives the
same groups. :func:`torch_mesh` and :func:`colossal_mesh` build the two, :func:`members` reads the
ranks of each axis's group from either, and :func:`from_colossal` wraps Colossal-AI's own groups in
a ``DeviceMesh`` (``DeviceMesh.from_group``), so torch's parallel APIs can run on them.

The model is Chapter 2's stack of Megatron MLP blocks (:func:`helpers.parallel.tp.mlp_blocks`) as
``nn.Linear`` modules: :func:`shard_2d` splits each block over the ``tp`` axis with torch's
``ColwiseParallel`` (the up projection, A by columns) and ``RowwiseParallel`` (the down
projection, B by rows), then shards every parameter over the ``dp`` axis with FSDP2's
``fully_shard``. Each parameter becomes a ``DTensor`` whose ``placements`` say how it is split
along each mesh axis.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from helpers.parallel.vocab import AXES


def _axes(sizes: dict[str, int]) -> tuple[str, ...]:
    """The named axes in the book's order (dp, pp, tp, sp); an axis of size 1 stays (a mesh
    dimension of one rank), so that ``mesh['dp']`` exists on any world size."""
    unknown = set(sizes) - set(AXES)
    if unknown:
        raise ValueError(f"unknown axes {sorted(unknown)}; the axes are {AXES}")
    return tuple(a for a in AXES if a in sizes)


def torch_mesh(sizes: dict[str, int], device_type: str):
    """``init_device_mesh`` over the axes of ``sizes`` (e.g. {'dp': 2, 'tp': 2}), outermost
    first."""
    from torch.distributed.device_mesh import init_device_mesh

    axes = _axes(sizes)
    return init_device_mesh(device_type, tuple(sizes[a] for a in axes), mesh_dim_names=axes)


def colossal_mesh(sizes: dict[str, int]):
    """Colossal-AI's ``ProcessGroupMesh`` over the same axes, and the axis names in its order."""
    from colossalai.cluster import ProcessGroupMesh

    axes = _axes(sizes)
    return ProcessGroupMesh(*(sizes[a] for a in axes)), axes


def members(mesh, axes: tuple[str, ...]) -> dict[str, list[int]]:
    """This rank's group along each axis, as global ranks, from a ``DeviceMesh`` or a
    ``ProcessGroupMesh``."""
    if hasattr(mesh, "get_group_along_axis"):  # Colossal-AI
        groups = [mesh.get_group_along_axis(k) for k in range(len(axes))]
        return {a: list(mesh.get_ranks_in_group(g)) for a, g in zip(axes, groups)}
    return {a: dist.get_process_group_ranks(mesh[a].get_group()) for a in axes}


def from_colossal(pg_mesh, axes: tuple[str, ...], device_type: str):
    """A ``DeviceMesh`` that holds Colossal-AI's own process groups (no new groups are made)."""
    from torch.distributed.device_mesh import DeviceMesh

    groups = [pg_mesh.get_group_along_axis(k) for k in range(len(axes))]
    grid = torch.arange(dist.get_world_size()).reshape(pg_mesh.shape)
    return DeviceMesh.from_group(groups, device_type, mesh=grid, mesh_dim_names=axes)


class Block(nn.Module):
    """One Megatron MLP block ``x + GeLU(x W1^T + b1) W2^T + b2`` as two ``nn.Linear`` (the same
    (out, in) weights)."""

    def __init__(self, p: dict[str, torch.Tensor]):
        super().__init__()
        h4, h = p["w1"].shape
        self.up, self.down = nn.Linear(h, h4), nn.Linear(h4, h)
        with torch.no_grad():
            self.up.weight.copy_(p["w1"])
            self.up.bias.copy_(p["b1"])
            self.down.weight.copy_(p["w2"])
            self.down.bias.copy_(p["b2"])

    def forward(self, x):
        return x + self.down(F.gelu(self.up(x)))


class Stack(nn.Module):
    """Chapter 2's blocks in order (FSDP2's root needs a module with a forward)."""

    def __init__(self, blocks: list[dict[str, torch.Tensor]]):
        super().__init__()
        self.blocks = nn.ModuleList(Block(p) for p in blocks)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def shard_2d(model: Stack, mesh) -> Stack:
    """Tensor parallel over ``mesh['tp']`` inside every block, then FSDP2 over ``mesh['dp']``
    (each block, then the root), in place."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], plan)
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model


def placements(model: nn.Module) -> dict[str, dict]:
    """Every parameter's DTensor placements (one per mesh axis), global and local shape."""
    return {
        name: {
            "placements": [str(p) for p in t.placements],
            "global": list(t.shape),
            "local": list(t.to_local().shape),
        }
        for name, t in model.named_parameters()
    }


def local_shape(shape: list[int], placements: list[str], sizes: list[int]) -> list[int]:
    """The shape one rank holds of a tensor of ``shape`` with ``placements`` (as DTensor prints
    them, one per mesh axis: ``R`` replicated, ``S(d)`` sharded along dim d, ``_S(d, k)`` sharded
    along d in strides) on a mesh of ``sizes``; every split is assumed even."""
    out = list(shape)
    for placement, size in zip(placements, sizes):
        if placement != "R":
            dim = int(placement.split("(")[1].split(",")[0].rstrip(")"))
            if out[dim] % size:
                raise ValueError(f"dim {dim} of {shape} does not split evenly {size} ways")
            out[dim] //= size
    return out


def unsplit_grads(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient gathered whole (``DTensor.full_tensor``; a collective)."""
    return {n: t.grad.full_tensor() for n, t in model.named_parameters()}


def unsplit_params(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter gathered whole (a collective)."""
    return {n: t.detach().full_tensor() for n, t in model.named_parameters()}
