"""Chapter 2: the groups Colossal-AI really builds for a D × P × T (× S) layout, rank by rank.

    python -m torch.distributed.run --nproc_per_node 8 -m helpers.demos.ch02_mesh --tp 2 --pp 2

Every rank derives D with :func:`helpers.parallel.layouts.data_degree`, builds
``ProcessGroupMesh(dp, pp, tp, sp)`` as ``HybridParallelPlugin.__init__`` does (``(dp, pp, sp, tp)``
for ring_attn), asks it for this rank's group along each axis, and proves that the group is real:
an all-reduce of the members' ranks over it must give the sum of its members. For all_to_all and
ring_attn it also builds the plugin's mixed data group (dp × sp, where ZeRO and the gradient
all-reduce run). With ``--plugin`` it constructs ``HybridParallelPlugin`` itself as well and reports
the groups the plugin holds (construction runs on CPU/gloo; training with it needs CUDA). Results:
one ``RESULT`` per rank, compared with :class:`helpers.parallel.mesh.RankMesh` by the notebook and tests.
"""

import argparse

import torch
import torch.distributed as dist

from helpers.run.env import distributed, emit, say
from helpers.parallel.layouts import OWN_AXIS_SP_MODES, Layout


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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--sp", type=int, default=1)
    p.add_argument(
        "--sp_mode", default=None, choices=["split_gather", "ring", "all_to_all", "ring_attn"]
    )
    p.add_argument("--plugin", action="store_true", help="also construct HybridParallelPlugin")
    args = p.parse_args()
    with distributed(backend="gloo") as env:  # groups only: gloo on any machine
        from colossalai.cluster import ProcessGroupMesh

        layout = Layout.for_world(env.world_size, args.tp, args.pp, args.sp, args.sp_mode)
        axes = axis_order(layout.sp_mode)
        pg_mesh = ProcessGroupMesh(*(getattr(layout, a) for a in axes))
        coords = dict(zip(axes, (int(c) for c in pg_mesh.coordinate())))
        groups, sums = {}, {}
        for k, axis in enumerate(axes):
            groups[axis], sums[axis] = checked_members(
                pg_mesh, pg_mesh.get_group_along_axis(k), env.rank
            )
        if layout.sp_mode in OWN_AXIS_SP_MODES:  # the plugin's dp × sp group
            mixed = pg_mesh.create_group_along_axis([axes.index("dp"), axes.index("sp")])
            groups["dp_sp"], sums["dp_sp"] = checked_members(pg_mesh, mixed, env.rank)
        result = {
            "layout": str(layout),
            "coords": coords,
            "groups": groups,
            "sums": sums,
            "world_size": env.world_size,
        }
        if args.plugin:
            result["plugin"] = plugin_groups(layout)
        pg_mesh.destroy_mesh_process_groups()
        if env.rank == 0:
            say(
                f"{layout} on {env.world_size} ranks ({env.backend}); mesh axes {axes}, shape {pg_mesh.shape}"
            )
        emit(**result)


if __name__ == "__main__":
    main()
