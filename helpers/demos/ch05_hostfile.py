"""Chapter 5, "`colossalai run` and hostfiles": the smallest job that proves a multi-host launch.

    colossalai run --hostfile hostfile --nproc_per_node 2 -m helpers.demos.ch05_hostfile

Every rank says where it runs and which address its hostname resolves to there (the address gloo
binds to and advertises to the other ranks when ``GLOO_SOCKET_IFNAME`` is not set), then all ranks
all-reduce their rank: with 4 ranks the sum is 0 + 1 + 2 + 3 = 6. ``--timeout_s`` bounds the
process group's set-up and collectives, so a launch that cannot connect ends in seconds.
"""

import os
import socket

import torch
import torch.distributed as dist

from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch05 import HostfileResult


def main() -> None:
    parser = cli.parser(__doc__)
    cli.add(parser, "timeout_s", 60.0)
    args = parser.parse_args()
    host = socket.gethostname()
    try:
        resolves = socket.gethostbyname(host)
    except OSError as e:
        resolves = f"unresolvable ({e})"
    ifname = os.environ.get("GLOO_SOCKET_IFNAME") or "unset"
    say(f"rank {os.environ.get('RANK')} on {host}: {host} resolves to {resolves}, ifname {ifname}")
    with distributed(timeout_s=args.timeout_s) as env:
        say(f"rank {env.rank} of {env.world_size} up on {env.backend}")
        x = torch.tensor([float(env.rank)])
        dist.all_reduce(x)
        emit(HostfileResult, sum=float(x.item()), host=host, resolves=resolves, ifname=ifname)


if __name__ == "__main__":
    main()
