"""What leaves a node in an all-reduce across nodes: one rank per host against two, on one link.

Chapter 5, "A ring leaves the node once" (Chapter 3's cost model, ``helpers.cost.comm``).
Started on two hosts with two ranks each (torchrun ``--nnodes 2 --nproc_per_node 2``: ranks 0, 1
on host 0, ranks 2, 3 on host 1), every rank takes part in three measurements:

1. **the link** (:func:`helpers.run.collectives.link_rates`): rank 0 sends ``--link-bytes`` to
   rank 1 (the same host) and then to rank 2 (the other host), alone on the wire;
2. **the check**: an all-reduce of every ``--sizes`` message over both groups below, each rank's
   input whole numbers drawn from its own seed, so that the sum is exact in float32 in any order;
   every member compares its result with the sum it computes alone from every member's input
   (the single-process reference);
3. **the timing**: ``--repeats`` rounds, each of every size over ``{0, 2}`` (N = 2, one rank
   per host; ranks 1 and 3 wait) and then over all four ranks (N = 4, two per host), one call
   between barriers, the slowest rank's time; and the bytes each host's ``eth0`` sent meanwhile
   (its transmit counter in ``/proc/net/dev``, read by the host's first rank: every byte that
   left the host, headers included).

Gloo's all-reduce is a ring over the group's rank order (``gloo/allreduce.cc``, ``ring``: each
rank sends to rank - 1 and receives from rank + 1), so with ranks numbered host by host the
four-rank ring crosses between the hosts once in each direction. Rank 0 emits the link, the
times and the check, the first rank of each host its host's bytes;
:mod:`helpers.cluster.node_egress` puts the cost model beside them.

    torchrun --nnodes 2 --nproc_per_node 2 ... -m helpers.demos.ch05_node_egress
"""

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.run import cli
from helpers.run.collectives import link_rates, parse_size
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch05 import NodeEgressHostResult, NodeEgressResult


def numbers(elems: int, seed: int) -> torch.Tensor:
    """Rank ``seed``'s input: whole numbers in [-8, 8) as float32, so every partial sum is exact."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-8, 8, (elems,), generator=g).float()


def checked(group, members: list[int], size: int, rank: int, seed: int) -> bool:
    """One all-reduce of ``size`` bytes over ``group``; whether this rank's result equals the sum
    of every member's input computed here alone (True for a rank outside the group)."""
    if rank not in members:
        return True
    elems = size // 4
    buf = numbers(elems, seed + rank)
    dist.all_reduce(buf, group=group)
    reference = sum(numbers(elems, seed + q).double() for q in members)
    return bool(torch.equal(buf.double(), reference))


def sent_bytes(interface: str = "eth0") -> int | None:
    """Bytes this host's ``interface`` has transmitted (``/proc/net/dev`` shows the counters of
    the calling process's network namespace); None where it has no such interface."""
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, fields = line.partition(":")
        if name.strip() == interface:
            return int(fields.split()[8])
    return None


def timed(group, members: list[int], buf: torch.Tensor, rank: int) -> tuple[float, int | None]:
    """Seconds of one all-reduce over ``group``, between barriers, the slowest member's; and the
    bytes this host sent from before the barrier until every rank has its time."""
    before = sent_bytes()
    dist.barrier()
    start = time.perf_counter()
    if rank in members:
        dist.all_reduce(buf, group=group)
    took = torch.tensor([time.perf_counter() - start if rank in members else 0.0])
    dist.all_reduce(took, op=dist.ReduceOp.MAX)  # every member is done: its bytes have left
    after = sent_bytes()
    return float(took), None if before is None else after - before


def main() -> None:
    p = cli.parser(__doc__)
    p.add_argument("--sizes", default="2M,4M,8M,16M", help="all-reduce message sizes")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per size and group")
    p.add_argument("--link-bytes", default="4M", help="bytes of the point-to-point measurement")
    cli.add(p, "seed", cli.SEED)
    args = p.parse_args()
    with distributed(timeout_s=120) as env:
        per_host = int(os.environ.get("LOCAL_WORLD_SIZE", env.world_size))
        if env.world_size != 4 or per_host != 2:
            raise SystemExit(f"run on 2 hosts × 2 ranks, not {env.world_size} / {per_host}")
        groups = {2: ([0, per_host], dist.new_group([0, per_host])), 4: ([0, 1, 2, 3], None)}
        sizes = [parse_size(s) for s in args.sizes.split(",")]
        rates = link_rates(parse_size(args.link_bytes), per_host, 3)
        checks = {
            f"{n}/{size}": checked(g, members, size, env.rank, args.seed)
            for size in sizes
            for n, (members, g) in groups.items()
        }  # the first call of each size and group: untimed
        seconds = {f"{n}/{size}": [] for size in sizes for n in groups}
        egress = {key: [] for key in seconds}  # this host's eth0, read by its first rank
        for _ in range(args.repeats):  # interleaved, so a change of load hits both groups alike
            for size in sizes:
                buf = torch.zeros(size // 4)
                for n, (members, g) in groups.items():
                    took, sent = timed(g, members, buf, env.rank)
                    seconds[f"{n}/{size}"].append(took)
                    egress[f"{n}/{size}"].append(sent)
        ok = torch.tensor([float(all(checks.values()))])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if env.rank == 0:
            say(f"link inside {rates['inside'] / 1e6:.0f} MB/s, across {rates['across'] / 1e6:.1f}")
            for key, times in seconds.items():
                say(f"N = {key.split('/')[0]}, {key.split('/')[1]} B: {min(times):.3f} s fastest")
            say(f"every all-reduce equals the sum computed alone: {bool(ok)}")
            emit(
                NodeEgressResult,
                link=rates,
                per_host=per_host,
                members={str(n): m for n, (m, _) in groups.items()},
                seconds=seconds,
                checks=checks,
                all_correct=bool(ok),
            )
        if env.rank % per_host == 0:
            emit(NodeEgressHostResult, host=env.rank // per_host, egress=egress)


if __name__ == "__main__":
    main()
