"""Data parallelism from scratch: one model on every rank, a shard of the batch each, mean grads.

Chapter 1, "the four ways to split the work", way 1. Every rank builds the same model from the same
seed and takes its own B/D samples of the global batch of B, D being the data-parallel degree.
Because the loss is a mean over samples, the full-batch gradient is the average of the D shard
gradients, so one all-reduce(SUM) divided by D (the operation PyTorch DDP, Li et al. 2020, "PyTorch
Distributed: Experiences on Accelerating Data Parallel Training", overlaps with the backward pass
in buckets) gives every rank the full-batch gradient, and identical SGD steps keep the replicas
identical.

The demo checks all of this against a single-process reference computed inside every rank: the
same model on the whole batch, one backward, one SGD step.

    python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.ch01_dp --batch 8
"""

import torch
import torch.distributed as dist
import torch.nn as nn

from helpers.models.mlp import tiny_mlp
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch01 import DpResult
from helpers.train.reference import check_close, global_max, randn, sig, strict_fp32


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--batch", type=int, default=8, help="global batch size B (divisible by world size)"
    )
    cli.add(parser, "hidden", 8, help="input features h")
    cli.add(parser, "lr", 0.1, help="SGD learning rate")
    cli.add(parser, "seed", cli.SEED)
    args = parser.parse_args()
    strict_fp32()

    with distributed() as env:
        D, B = env.world_size, args.batch  # every rank is a replica: D = G
        if B % D:
            raise ValueError(
                f"global batch B={B} must be divisible by the data-parallel size D={D}"
            )
        b = B // D
        x = randn(B, args.hidden, seed=args.seed + 1, device=env.device)  # (B, h): the global batch
        y = randn(B, 1, seed=args.seed + 2, device=env.device)  # (B, 1)

        # [start: dp]
        # --- data parallel: my shard, my gradient, then the average over ranks
        model = tiny_mlp(args.hidden, args.seed, env.device)
        mine = slice(env.rank * b, (env.rank + 1) * b)
        x_local, y_local = x[mine], y[mine]  # (B/D, h), (B/D, 1)
        loss_local = nn.functional.mse_loss(model(x_local), y_local)  # mean over my B/D samples
        loss_local.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= D  # mean of D shard means = mean over all B samples
        loss = loss_local.detach().clone()
        dist.all_reduce(loss, op=dist.ReduceOp.SUM)
        loss /= D
        grads = [p.grad.clone() for p in model.parameters()]
        with torch.no_grad():
            for p in model.parameters():
                p -= args.lr * p.grad
        # [end: dp]

        # --- single-process reference: the same model on the whole batch
        ref = tiny_mlp(args.hidden, args.seed, env.device)
        ref_loss = nn.functional.mse_loss(ref(x), y)
        ref_loss.backward()
        with torch.no_grad():
            for p in ref.parameters():
                p -= args.lr * p.grad

        names = [n for n, _ in ref.named_parameters()]
        check_close("loss (mean of rank losses)", loss, ref_loss)
        grad_diff = max(
            check_close(f"averaged grad of {n}", g, r.grad)
            for n, g, r in zip(names, grads, ref.parameters())
        )
        param_diff = max(
            check_close(f"{n} after one SGD step", p, r)
            for n, p, r in zip(names, model.parameters(), ref.parameters())
        )
        grad_diff, param_diff = (
            global_max(grad_diff, env.device),
            global_max(param_diff, env.device),
        )

        if env.rank == 0:
            say(
                f"data parallel on {D} ranks ({env.backend}): "
                f"global batch {B} -> {b} samples per rank"
            )
            for r_d in range(D):
                say(f"  rank {r_d}: samples {r_d * b}..{(r_d + 1) * b - 1}")
            say(f"full-batch loss {sig(loss.item())} = mean of the {D} per-rank losses")
            say(f"max |all-reduced grad / D - full-batch grad| = {grad_diff:.2e}")
            say(
                f"max |param - reference param| after one SGD step (lr {args.lr}) "
                f"= {param_diff:.2e}"
            )
            say("OK: data parallel matches the single-process reference")
        emit(
            DpResult,
            world_size=D,
            global_batch=B,
            local_batch=b,
            samples=[mine.start, mine.stop],
            loss_local=sig(loss_local.item()),
            loss=sig(loss.item()),
            ref_loss=sig(ref_loss.item()),
            max_grad_diff=grad_diff,
            max_param_diff=param_diff,
            backend=env.backend,
        )


if __name__ == "__main__":
    main()
