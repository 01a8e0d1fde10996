"""Chapter 5, "Launching under SLURM": one job of 2 nodes x 2 tasks, started two ways.

    srun python -m helpers.demos.ch05_slurm --via slurm --host host0 --port 29500
    srun --ntasks-per-node=1 torchrun --nnodes 2 --node_rank $SLURM_NODEID --nproc_per_node 2 \\
         --master_addr host0 --master_port 29501 -m helpers.demos.ch05_slurm --via torchrun

``--via slurm``: every task is a rank; ``colossalai.launch_from_slurm`` reads the rank from
``SLURM_PROCID`` and the world size from ``SLURM_NPROCS`` (``colossalai/initialize.py``) and meets
the others at ``tcp://HOST:PORT``. ``--via torchrun``: srun starts one torchrun agent per node and
``colossalai.launch_from_torch`` reads torchrun's ``RANK``/``WORLD_SIZE``. Either way every rank
all-reduces its rank and reports the sum, its host and what SLURM and torchrun told it.
"""

import importlib
import os
import socket
import time

import colossalai
import psutil
import torch
import torch.distributed as dist

from helpers.run import cli
from helpers.run.env import emit, say
from helpers.run.result_types.ch05 import SlurmResult

# What each launcher tells a rank about itself (None where that launcher sets nothing).
SEEN = ("SLURM_PROCID", "SLURM_NPROCS", "SLURM_NODEID", "SLURM_LOCALID", "SLURM_JOB_ID",
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")  # fmt: skip


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--via", choices=["slurm", "torchrun"], required=True)
    parser.add_argument("--host", default=None, help="first node of the job (--via slurm)")
    parser.add_argument("--port", type=int, default=29500, help="its free port (--via slurm)")
    args = parser.parse_args()
    imported = time.time()  # since the process began: Python, torch and colossalai imported
    importlib.import_module("torch._dynamo")  # colossalai.launch sets its config: timed apart

    dynamo = time.time()
    if args.via == "slurm":
        if not args.host:
            parser.error("--via slurm needs --host, the job's first node")
        colossalai.launch_from_slurm(host=args.host, port=args.port, backend="gloo", verbose=False)
    else:
        colossalai.launch_from_torch(backend="gloo", verbose=False)
    started = time.time()
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.tensor([float(rank)])
    dist.all_reduce(x)
    say(f"rank {rank} of {world} on {socket.gethostname()} via {args.via}: sum {x.item():g}")
    emit(
        SlurmResult,
        rank=rank,
        world_size=world,
        via=args.via,
        host=socket.gethostname(),
        sum=float(x.item()),
        backend=dist.get_backend(),
        env={name: os.environ.get(name) for name in SEEN},
        import_s=round(imported - psutil.Process().create_time(), 3),
        dynamo_s=round(dynamo - imported, 3),
        init_s=round(started - dynamo, 3),  # the process group: the meeting at HOST:PORT
        clock=started,  # when this rank's group was up (seconds since the epoch)
    )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
