"""Tensor parallelism inside a node or across nodes: the link, its α and β, and both mesh orders.

Chapter 5, "TP inside a node, DP across nodes, measured" (Chapter 2's mesh order, Chapter 3's cost
model). Started on several hosts with the same number of ranks each (torchrun ``--nnodes``, ranks
``k·n .. k·n + n - 1`` on host k), every rank takes part in four measurements:

1. **the link** (:func:`helpers.run.collectives.link_rates`): rank 0 sends ``--link-bytes`` to
   rank 1 (the same host) and then to rank ``n`` (the next host), alone on the wire; the
   receiver's time gives bytes/s;
2. **the collectives**: all-reduce of every ``--inside-sizes`` message in pairs inside the hosts
   (``{0,1}, {2,3}``) and of every ``--sizes`` message in pairs across them (``{0,2}, {1,3}``),
   every pair at once as in training, in loops of back-to-back calls between barriers
   (:func:`helpers.run.collectives.pair_rows`), the slowest rank's time;
3. **compute alone**: the tensor-parallel steps below with every collective skipped;
4. **both mesh orders**, dp × tp = 2 × 2: ``tp_inside`` (Colossal-AI's order, dp outer: tensor
   groups ``{0,1}, {2,3}``) and ``tp_across`` (tp outer: ``{0,2}, {1,3}``). The model is
   ``--layers`` Megatron MLP blocks (:func:`helpers.parallel.tp.mlp_blocks`) on a
   (batch, seq, hidden) input per replica, each block one all-reduce of the activations forward
   (g) and one backward (f); after backward one all-reduce of all gradients as one bucket over the
   data group, then SGD (:func:`helpers.train.grid3d.timed_step`). Every collective is timed
   where it is called (:class:`helpers.parallel.tp.CommClock`; gloo on the CPU blocks until it
   is done), so each step gives its time and its time inside collectives.

The first step of each order is checked against the unsplit model on the whole global batch
(loss and every gradient shard, fp32 tolerance) and not timed; then ``--rounds`` rounds run
``--steps`` timed steps of each in turn (compute alone, tp_inside, tp_across), so that a change in
the machine's load falls on all three alike. Every rank emits its times; rank 0
also the link and the collectives. :mod:`helpers.cluster.mesh_orders` runs it on shaped hosts and
puts the cost model beside it.

    torchrun --nnodes 2 --nproc_per_node 2 ... -m helpers.demos.ch05_mesh_order
"""

import os
import statistics

import torch.distributed as dist

from helpers.parallel.tp import mlp_blocks, shard_mlp_blocks
from helpers.run import cli
from helpers.run.collectives import link_rates, pair_rows, parse_size
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch05 import MeshOrderLinkResult, MeshOrderResult
from helpers.cluster.mesh_orders import ORDERS, order_groups
from helpers.train.grid3d import check_unsplit, timed_step
from helpers.train.reference import randn, strict_fp32


def batch(args, step: int, device):
    """The global batch of ``step``: (2·batch, seq, hidden) inputs and targets, the same on
    every rank; data replica d takes rows d·batch .. (d+1)·batch."""
    shape = (2 * args.batch, args.seq, args.hidden)
    return randn(*shape, seed=1000 + step, device=device), randn(
        *shape, seed=2000 + step, device=device
    )


def main() -> None:
    p = cli.parser(__doc__)
    cli.add(p, "layers", 4, help="MLP blocks L (even: two blocks per transformer layer)")
    cli.add(p, "hidden", 64, help=None)
    p.add_argument("--batch", type=int, default=8, help="sequences per replica")
    cli.add(p, "seq", 128)
    cli.add(p, "steps", 2, help="timed steps per order and round")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every order in turn")
    p.add_argument("--sizes", default="64K,128K,256K,512K,1M", help="all-reduce sizes across")
    p.add_argument(
        "--inside-sizes", default="64K,256K,1M,4M,16M", help="all-reduce sizes inside a host"
    )
    p.add_argument("--iters", type=int, default=3, help="back-to-back calls per timed loop")
    p.add_argument("--loops", type=int, default=3, help="timed loops per size (median)")
    p.add_argument("--link-bytes", default="2M", help="bytes of the link measurement")
    cli.add(p, "lr", 0.01, help=None)
    cli.add(p, "seed", cli.SEED)
    args = p.parse_args()
    strict_fp32()
    with distributed(timeout_s=60) as env:
        per_host = int(os.environ.get("LOCAL_WORLD_SIZE", env.world_size))
        if env.world_size != 4 or per_host != 2:
            raise SystemExit(f"run on 2 hosts × 2 ranks, not {env.world_size} / {per_host}")
        made = {}  # every rank enters every new_group, in the same order
        for order in ORDERS:
            for lists in order_groups(order).values():
                for ranks in lists:
                    key = tuple(ranks)
                    if key not in made:
                        made[key] = dist.new_group(ranks)
        mine = {  # this rank's tp and dp group in each order
            o: {a: next(g for g in gs if env.rank in g) for a, gs in order_groups(o).items()}
            for o in ORDERS
        }
        rates = link_rates(parse_size(args.link_bytes), per_host, 3)
        pairs = {"inside": made[tuple(mine["tp_inside"]["tp"])]}
        pairs["across"] = made[tuple(mine["tp_across"]["tp"])]
        sizes = {
            path: [parse_size(s) for s in text.split(",")]
            for path, text in (("inside", args.inside_sizes), ("across", args.sizes))
        }
        rows = pair_rows(pairs, sizes, args.iters, args.loops)
        full = mlp_blocks(args.layers, args.hidden, args.seed, env.device)
        D = T = 2
        runs, checks = {}, {}
        for order in ("compute", *ORDERS):  # compute alone: tp_inside's shards, no collectives
            groups = mine["tp_inside" if order == "compute" else order]
            tp_rank, dp_rank = groups["tp"].index(env.rank), groups["dp"].index(env.rank)
            r = runs[order] = dict(
                params=shard_mlp_blocks(full, list(range(args.layers)), tp_rank, T),
                tp_g=made[tuple(groups["tp"])],
                dp_g=made[tuple(groups["dp"])],
                rows=slice(dp_rank * args.batch, (dp_rank + 1) * args.batch),
                skip=order == "compute",
            )
            x, y = batch(args, 0, env.device)
            mine_x, mine_y = x[r["rows"]], y[r["rows"]]
            loss, *_ = timed_step(r["params"], mine_x, mine_y, r["tp_g"], r["dp_g"], D, None,
                                  r["skip"])  # fmt: skip
            if not r["skip"]:  # the first step, untimed, against the unsplit model
                checks[order] = check_unsplit(
                    r["params"], full, x, y, loss, r["dp_g"], D, tp_rank, T, order
                )
            for t in [t for q in r["params"] + full for t in q.values()]:
                t.grad = None
        timings = {o: [] for o in runs}
        for rnd in range(args.rounds):  # interleaved, so a change of load hits every order
            for order, r in runs.items():
                for i in range(args.steps):
                    x, y = batch(args, 1 + rnd * args.steps + i, env.device)
                    out = timed_step(r["params"], x[r["rows"]], y[r["rows"]], r["tp_g"],
                                     r["dp_g"], D, args.lr, r["skip"])  # fmt: skip
                    timings[order].append(out[1:])
        if env.rank == 0:
            say(f"link inside {rates['inside'] / 1e6:.0f} MB/s, across {rates['across'] / 1e6:.1f}")
            for order in ORDERS:
                step_ms = 1e3 * statistics.median(t for t, _ in timings[order])
                say(f"{order}: median step {step_ms:.1f} ms on rank 0")
            emit(MeshOrderLinkResult, link=rates, rows=rows)
        emit(
            MeshOrderResult,
            timings=timings,
            checks=checks,
            groups=mine,
            shape={k: getattr(args, k) for k in ("layers", "hidden", "batch", "seq")}
            | {"dp": D, "tp": T},
        )


if __name__ == "__main__":
    main()
