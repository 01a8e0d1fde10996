"""Chapter 2: the groups Colossal-AI really builds for a D × P × T (× S) layout, rank by rank.

    torchrun --nproc_per_node 8 -m helpers.demos.ch02_mesh --tp 2 --pp 2

Every rank derives D with :func:`helpers.parallel.layouts.data_degree`, builds
``ProcessGroupMesh(dp, pp, tp, sp)`` as ``HybridParallelPlugin.__init__`` does (``(dp, pp, sp,
tp)`` for ring_attn), asks it for this rank's group along each axis, and proves that the group is
real: an all-reduce of the members' ranks over it must give the sum of its members
(:mod:`helpers.run.groups`). For all_to_all and ring_attn it also builds the plugin's mixed data
group (dp × sp, where ZeRO and the gradient all-reduce run). With ``--plugin`` it constructs
``HybridParallelPlugin`` itself as well and reports the groups the plugin holds (construction runs
on CPU/gloo; training with it needs CUDA). Results: one ``RESULT`` per rank, compared with
:class:`helpers.parallel.mesh.RankMesh` by the notebook and tests.
"""

from helpers.parallel.layouts import Layout
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch02 import MeshResult
from helpers.run.groups import mesh_groups, plugin_groups


def main() -> None:
    p = cli.parser()
    cli.add_all(p, tp=2, pp=2, sp=1, sp_mode=None)
    p.add_argument("--plugin", action="store_true", help="also construct HybridParallelPlugin")
    args = p.parse_args()
    with distributed(backend="gloo") as env:  # groups only: gloo on any machine
        layout = Layout.for_world(env.world_size, args.tp, args.pp, args.sp, args.sp_mode)
        pg_mesh, axes, coords, groups, sums = mesh_groups(layout, env.rank)
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
                f"{layout} on {env.world_size} ranks ({env.backend}); mesh axes {axes}, "
                f"shape {pg_mesh.shape}"
            )
        emit(MeshResult, **result)


if __name__ == "__main__":
    main()
