"""Three-dimensional parallelism from scratch: data × pipeline × tensor on one rank grid.

Chapter 2 (combining dimensions), the seed's D × P × T example at small scale. The world of
G = D·P·T processes is the :class:`helpers.parallel.mesh.RankMesh` grid (Colossal-AI's axis order,
tensor fastest); each rank holds one piece of the model and one slice of the data:

* **tensor** (T): every block is a Megatron MLP ``x + g(GeLU(f(x) A_t) B_t) + b`` with ``A``
  split by columns and ``B`` by rows over the tensor group (:mod:`helpers.parallel.tp`'s f and g);
* **pipeline** (P): the L blocks are cut into P stages (:func:`helpers.parallel.pp.split_layers`);
  the stages pass activations forward and gradients backward with send/recv to the rank with the
  same (dp, tp) coordinates in the next or previous stage, in GPipe's order over m micro-batches
  (:func:`helpers.train.grid3d.pipeline_step`);
* **data** (D): replica d trains on rows ``d·m·b .. (d+1)·m·b`` of the global batch; after the
  backward pass each gradient is averaged over the data group (an all-reduce over D ranks).

Each step every rank compares the loss and its own gradient shards with the unsplit model trained
on the whole batch inside the rank; then both take the same optimizer step (SGD, Adam, or Adam
with ZeRO-1 over the data group: :class:`helpers.parallel.zero.Zero1Adam`), on a fresh batch each
step.

    torchrun --nproc_per_node 8 -m helpers.demos.ch02_3d --pp 2 --tp 2
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from helpers.parallel.tp import mlp_block
from helpers.parallel.zero import Zero1Adam, adam_step_
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch02 import ThreeDResult
from helpers.train.grid3d import compare_shards, pipeline_step, place
from helpers.train.reference import check_close, global_max, randn, sig, strict_fp32


def main() -> None:
    parser = cli.parser(__doc__)
    cli.add(parser, "pp", 2, help="pipeline stages P")
    cli.add(parser, "tp", 2, help="tensor-parallel degree T")
    cli.add(parser, "layers", 4, help="blocks L (divisible by P)")
    cli.add(parser, "hidden", 8, help="hidden size h (4h divisible by T)")
    parser.add_argument("--micro", type=int, default=2, help="micro-batches m per replica")
    parser.add_argument("--micro-batch", type=int, default=2, help="rows per micro-batch")
    cli.add(parser, "steps", 2)
    cli.add(parser, "lr", 0.1, help=None)
    parser.add_argument(
        "--optimizer",
        choices=("sgd", "adam", "zero1"),
        default="sgd",
        help="zero1: Adam with its states sharded over the data group",
    )
    cli.add(parser, "seed", cli.SEED)
    args = parser.parse_args()
    strict_fp32()
    with distributed() as env:
        mesh, c, groups, stages, full, params = place(env, args)
        dev, D = env.device, mesh.dp
        m, mb, h = args.micro, args.micro_batch, args.hidden
        losses, ref_losses, diffs, weight_diffs = [], [], [], []
        mine_t = [t for p in params for t in p.values()]
        full_t = [t for p in full for t in p.values()]
        zero = Zero1Adam(mine_t, groups.get("dp"), args.lr) if args.optimizer == "zero1" else None
        # Adam's m and v per tensor
        adam = {id(t): (torch.zeros_like(t), torch.zeros_like(t)) for t in mine_t + full_t}

        def shard_diff(what: str, when: str) -> float:
            found = compare_shards(params, full, stages[c["pp"]], c["tp"], args.tp, what, when)
            return global_max(found, dev)

        # [start: grid-step]
        for step in range(args.steps):
            x = randn(D * m * mb, h, seed=1000 + step, device=dev)  # (D·m·b, h): the global batch
            y = randn(D * m * mb, h, seed=2000 + step, device=dev)
            mine = slice(c["dp"] * m * mb, (c["dp"] + 1) * m * mb)  # this replica's rows
            loss = pipeline_step(
                params, x[mine].chunk(m), y[mine].chunk(m), c, mesh, groups.get("tp"), dev
            )
            # data parallelism: average every gradient over D (ZeRO-1 reduce-scatters instead)
            for t in mine_t if zero is None else []:
                dist.all_reduce(t.grad, group=groups.get("dp"))
                t.grad /= D
            if loss is None:
                held = torch.zeros(2, device=dev)
            else:
                held = torch.stack([torch.ones((), device=dev), loss])
            # the last stages' replica losses: mean over replicas = global loss
            dist.all_reduce(held)
            losses.append(held[1] / held[0])
            # [end: grid-step]
            out = x  # the reference: every block, the whole batch
            for p in full:
                out = mlp_block(out, p)
            ref = F.mse_loss(out, y)
            ref.backward()
            ref_losses.append(ref.detach())
            check_close(f"step {step} loss", losses[-1], ref)
            # under ZeRO-1 a replica never holds the averaged gradient: weights are checked
            if zero is None:
                diffs.append(shard_diff("grad", f"step {step}"))
            if zero is not None:  # ZeRO-1: reduce-scatter, Adam on my slice, all-gather
                zero.step()
            # the same step on the pieces (unless ZeRO did it) and on the whole
            with torch.no_grad():
                for t in full_t if zero is not None else mine_t + full_t:
                    if args.optimizer == "sgd":
                        t -= args.lr * t.grad
                    else:
                        adam_step_(t, t.grad, *adam[id(t)], step + 1, args.lr)
                    t.grad = None
            weight_diffs.append(shard_diff("data", f"after step {step}"))
        if env.rank == 0:
            say(
                f"G = {env.world_size} = D {D} x P {args.pp} x T {args.tp} ({env.backend}); "
                f"layers per stage {stages}, global batch {D * m * mb} = D x {m} micro-batches "
                f"x {mb}"
            )
            for step, (a, b, w) in enumerate(zip(losses, ref_losses, weight_diffs)):
                grads = f", max |grad - unsplit| {diffs[step]:.1e}" if diffs else ""
                say(
                    f"step {step}: loss {sig(a.item())} (unsplit {sig(b.item())}){grads}, "
                    f"weights after the {args.optimizer} step within {w:.1e}"
                )
            say("OK: the 3-D run matches the unsplit model")
        emit(
            ThreeDResult,
            coords=c,
            groups={axis: mesh.group_of(env.rank, axis) for axis in ("dp", "pp", "tp")},
            layers=stages[c["pp"]],
            losses=[sig(x.item()) for x in losses],
            ref_losses=[sig(x.item()) for x in ref_losses],
            max_grad_diff=max(diffs, default=None),
            max_weight_diff=max(weight_diffs),
            dp=D,
            pp=args.pp,
            tp=args.tp,
            world_size=env.world_size,
            backend=env.backend,
            optimizer=args.optimizer,
            adam_state_elements=2 * zero.layout.shard if zero else None,
        )


if __name__ == "__main__":
    main()
