"""Chapter 2, "One step as a trace": a data × tensor step under ``torch.profiler``, per rank.

    torchrun --nproc_per_node 4 -m helpers.demos.ch02_trace --tp 2

The step is Chapter 2's grid step (:func:`helpers.train.grid3d.pipeline_step`: Megatron MLP
blocks over the tensor group, GPipe between stages when ``--pp`` > 1) on one micro-batch per
replica, followed by the data-parallel average of every gradient, in two orders:

* ``after``: the gradients are all-reduced one by one once the backward pass has finished (as
  ``helpers/demos/ch02_3d.py`` does);
* ``overlap``: a hook on each parameter starts its all-reduce (``async_op=True``) as soon as its
  gradient is ready, while the backward pass goes on through the earlier blocks, and the step
  waits for all of them at the end (what DDP's buckets do).

For each order the rank runs one warm-up step, then one step under the profiler
(:func:`helpers.train.trace.profiled`: a barrier, then the step in ``record_function("step")``);
both are checked against the unsplit model's gradients on the whole batch (fp32 tolerance) or the
rank raises. The profiled step becomes a :class:`helpers.train.trace.StepTrace` (compute,
communication, idle), reported per rank.
"""

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity

from helpers.parallel.tp import mlp_block
from helpers.run import cli
from helpers.run.env import distributed, emit, say, sync
from helpers.run.result_types.ch02 import TraceResult
from helpers.train.grid3d import compare_shards, pipeline_step, place
from helpers.train.reference import global_max, randn, strict_fp32
from helpers.train.trace import from_profile, profiled

ORDERS = ("after", "overlap")


def main() -> None:
    parser = cli.parser(__doc__)
    cli.add(parser, "tp", 2, help="tensor-parallel degree T")
    cli.add(parser, "pp", 1, help="pipeline stages P")
    cli.add(parser, "layers", 4, help="blocks L (divisible by P)")
    cli.add(parser, "hidden", 256, help="hidden size h (4h divisible by T)")
    parser.add_argument("--rows", type=int, default=64, help="rows of the batch per replica")
    cli.add(parser, "seed", cli.SEED)
    args = parser.parse_args()
    strict_fp32()
    with distributed() as env:
        mesh, c, groups, stages, full, params = place(env, args)
        dev, D = env.device, mesh.dp
        mine_t = [t for p in params for t in p.values()]
        rows = slice(c["dp"] * args.rows, (c["dp"] + 1) * args.rows)
        x = randn(D * args.rows, args.hidden, seed=1000, device=dev)  # (D·rows, h)
        y = randn(D * args.rows, args.hidden, seed=2000, device=dev)
        out = x  # the reference gradients: every block, the whole batch
        for p in full:
            out = mlp_block(out, p)
        torch.nn.functional.mse_loss(out, y).backward()
        works: list = []

        def start_all_reduce(t: torch.Tensor) -> None:  # the overlap order's hook
            works.append(dist.all_reduce(t.grad, group=groups.get("dp"), async_op=True))

        def step(order: str) -> None:
            for t in mine_t:
                t.grad = None
            pipeline_step(params, [x[rows]], [y[rows]], c, mesh, groups.get("tp"), dev)
            if D > 1 and order == "after":
                for t in mine_t:
                    dist.all_reduce(t.grad, group=groups.get("dp"))
            while works:
                works.pop(0).wait()
            for t in mine_t:
                t.grad /= D

        def check(order: str) -> float:  # raises if a gradient shard differs
            return compare_shards(params, full, stages[c["pp"]], c["tp"], args.tp, "grad", order)

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if env.is_gpu else [])
        for order in ORDERS:
            hooks = (
                [t.register_post_accumulate_grad_hook(start_all_reduce) for t in mine_t]
                if order == "overlap" and D > 1
                else []
            )
            step(order)  # warm-up, checked too
            diff = check(order)
            with profiled(activities, "step", first=dist.barrier) as prof:
                step(order)
                sync(dev)
            diff = max(diff, check(order))
            for h in hooks:
                h.remove()
            trace = from_profile(prof, env.device.type, "step")
            worst = global_max(diff, dev)
            if env.rank == 0:
                n = trace.numbers()
                say(
                    f"{order}: rank 0's step {n['step_ms']:.1f} ms, communication "
                    f"{n['communication_ms']:.1f} ms, {100 * n['hidden_share']:.0f} % of it under "
                    f"compute; {trace.collectives} collectives; gradients within {worst:.1e}"
                )
            emit(
                TraceResult,
                order=order,
                coords=c,
                trace=trace.to_json(),
                numbers=trace.numbers(),
                max_grad_diff=worst,
                dp=D,
                pp=args.pp,
                tp=args.tp,
                layers=args.layers,
                params_per_rank=len(mine_t),
                backend=env.backend,
            )


if __name__ == "__main__":
    main()
