"""The process groups Colossal-AI builds for a D × P × T (× S) layout, read back rank by rank.

Chapter 2, "Where sequence parallelism fits". Used by ``helpers/demos/ch02_mesh.py``:
:func:`axis_order` is ``HybridParallelPlugin.__init__``'s mesh order, :func:`checked_members`
proves a group real with an all-reduce over it, :func:`plugin_groups` constructs the plugin itself
and reports the groups it holds (construction runs on CPU/gloo; training with it needs CUDA).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from helpers.parallel.layouts import Layout
from helpers.parallel.vocab import OWN_AXIS_SP_MODES


def axis_order(sp_mode: str | None) -> tuple[str, ...]:
    """Mesh axes in HybridParallelPlugin's order (dp_outside=True, the default)."""
    return ("dp", "pp", "sp", "tp") if sp_mode == "ring_attn" else ("dp", "pp", "tp", "sp")


def checked_members(pg_mesh, group, rank: int) -> tuple[list[int], int]:
    """The group's ranks (as the mesh and torch both see them) and an all-reduce over it."""
    members = list(pg_mesh.get_ranks_in_group(group))
    assert members == dist.get_process_group_ranks(group), "mesh and torch disagree on the group"
    total = torch.tensor([rank])
    dist.all_reduce(total, group=group)  # only the members take part
    return members, int(total.item())


def plugin_groups(layout: Layout) -> dict:
    """Construct HybridParallelPlugin and read back the groups it holds."""
    from colossalai.booster.plugin import HybridParallelPlugin

    kwargs = layout.plugin_kwargs()
    if layout.pp > 1 and "microbatch_size" not in kwargs:
        kwargs["num_microbatches"] = layout.pp
    plugin = HybridParallelPlugin(**kwargs, precision="fp32")
    m = plugin.pg_mesh
    found = {
        a: m.get_ranks_in_group(getattr(plugin, f"{a}_group")) for a in ("dp", "pp", "tp", "sp")
    }
    found["mixed_dp"] = m.get_ranks_in_group(plugin.mixed_dp_group)
    found["dp_size"] = plugin.dp_size  # for all_to_all the plugin reports D·S here
    del plugin  # its __del__ destroys the process groups it created
    return found


def mesh_groups(layout: Layout, rank: int):
    """``ProcessGroupMesh`` for ``layout`` as the plugin builds it, and this rank's view of it:
    (mesh, axes, coordinates, each axis's members, each axis's all-reduce of member ranks); for
    all_to_all and ring_attn also the plugin's mixed data group ``dp_sp`` (dp × sp, where ZeRO
    and the gradient all-reduce run). The caller destroys the mesh's groups."""
    from colossalai.cluster import ProcessGroupMesh

    axes = axis_order(layout.sp_mode)
    pg_mesh = ProcessGroupMesh(*(getattr(layout, a) for a in axes))
    coords = dict(zip(axes, (int(c) for c in pg_mesh.coordinate())))
    groups, sums = {}, {}
    for k, axis in enumerate(axes):
        groups[axis], sums[axis] = checked_members(pg_mesh, pg_mesh.get_group_along_axis(k), rank)
    if layout.sp_mode in OWN_AXIS_SP_MODES:  # the plugin's dp × sp group
        mixed = pg_mesh.create_group_along_axis([axes.index("dp"), axes.index("sp")])
        groups["dp_sp"], sums["dp_sp"] = checked_members(pg_mesh, mixed, rank)
    return pg_mesh, axes, coords, groups, sums
