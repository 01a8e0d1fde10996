"""Chapter 8, "Hang forensics": collectives on one GPU, for what ``NCCL_DEBUG=INFO`` prints.

    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET,GRAPH,TUNING,COLL,P2P,SHM \\
        torchrun --nproc_per_node 1 -m helpers.demos.ch08_nccl_info

One GPU per rank: the process group is created with ``device_id`` (so NCCL builds its
communicator at once), then an all-reduce, a broadcast, an all-gather, a reduce-scatter and a
barrier. With one rank NCCL connects to no peer: its log holds the version, the network it chose,
the communicator, the channels and rings, the tuner's table and one line per collective, but no
transport (P2P, SHM, NET) lines, which need a second GPU (``--nproc_per_node 2``). The recorder
:mod:`helpers.record.nccl_info` sets the variables and keeps the lines; the demo reports what it
ran and the NCCL version torch links.
"""

import torch
import torch.distributed as dist

from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch08 import NcclInfoResult

ELEMENTS = 1 << 20  # 4 MiB of fp32 per collective


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--elements", type=int, default=ELEMENTS, help="fp32 elements per call")
    args = parser.parse_args()
    with distributed() as env:
        if not env.is_gpu:
            raise SystemExit(
                "ch08_nccl_info shows NCCL's INFO lines, and NCCL runs only on GPUs: the launcher "
                "put this rank on the CPU (gloo), as it does on a machine without a GPU"
            )
        n, ran = args.elements, []
        x = torch.full((n,), 1.0 + env.rank, device=env.device)
        dist.all_reduce(x)
        ran.append(("all_reduce", float(x[0])))
        dist.broadcast(x, src=0)
        ran.append(("broadcast", float(x[-1])))
        gathered = torch.empty(n * env.world_size, device=env.device)
        dist.all_gather_into_tensor(gathered, x)
        ran.append(("all_gather_into_tensor", float(gathered.sum()) / n))
        out = torch.empty(n // env.world_size, device=env.device)
        dist.reduce_scatter_tensor(out, gathered[:n].contiguous())
        ran.append(("reduce_scatter_tensor", float(out[0])))
        dist.barrier()
        ran.append(("barrier", 0.0))
        torch.cuda.synchronize(env.device)
        version = ".".join(map(str, torch.cuda.nccl.version()))
        if env.rank == 0:
            say(f"ran {len(ran)} collectives on {env.world_size} rank(s), NCCL {version}")
        emit(
            NcclInfoResult,
            backend=env.backend,
            world_size=env.world_size,
            nccl_version=version,
            elements=n,
            ran=[op for op, _ in ran],
            values=[round(v, 3) for _, v in ran],
        )


if __name__ == "__main__":
    main()
