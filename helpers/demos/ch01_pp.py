"""Pipeline parallelism from scratch: GPipe's all-forwards-then-all-backwards schedule.

Chapter 1, "the four ways to split the work", way 3. A stack of L blocks (Linear + tanh) is cut
into p = world-size consecutive stages of ``layers_per_stage = L / p`` blocks
(:func:`helpers.parallel.pp.split_layers`). The batch is cut into m micro-batches. Following GPipe
(Huang et al. 2019, Sec. 2.2, Fig. 2c) every stage runs the forwards F0..F(m-1), receiving each
input activation from the previous stage and sending its output to the next, then the backwards
B(m-1)..B0, receiving the output's gradient from the next stage and sending the input's gradient
to the previous one. Gradients of the m micro-batches accumulate, so one step sees the whole batch.
The last stage computes the loss. Each stage idles (p-1)/(m+p-1) of the time: the bubble.

Activations travel with blocking ``dist.send``/``dist.recv``: ``batch_isend_irecv`` is reported to
hang on gloo with more ranks, and the blocking pair is the clearest to read.

Every rank checks the loss and its own layers' gradients against the unsplit model run on the
whole batch inside the rank.

    python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.ch01_pp --layers 4 --micro 4
"""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from helpers.models.mlp import run_blocks, tanh_blocks
from helpers.parallel.pp import bubble_fraction, gpipe_order, split_layers
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch01 import PpResult
from helpers.train.reference import check_close, global_max, randn, sig, strict_fp32


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--layers", type=int, default=4, help="number of blocks L (divisible by world size)"
    )
    parser.add_argument("--micro", type=int, default=4, help="number of micro-batches m")
    parser.add_argument("--micro-batch", type=int, default=2, help="samples per micro-batch")
    cli.add(parser, "hidden", 8, help="hidden size h")
    cli.add(parser, "seed", cli.SEED)
    args = parser.parse_args()
    strict_fp32()
    L, m, mb, h = args.layers, args.micro, args.micro_batch, args.hidden

    with distributed() as env:
        p, r, dev = env.world_size, env.rank, env.device
        stages = split_layers(L, p)  # raises for L not divisible by p
        first, last = r == 0, r == p - 1
        x = randn(m * mb, h, seed=args.seed + 1, device=dev)  # (m*mb, h): the batch
        y = randn(m * mb, h, seed=args.seed + 2, device=dev)  # (m*mb, h)
        xs, ys = x.chunk(m), y.chunk(m)  # m micro-batches of (mb, h)

        all_layers = tanh_blocks(L, h, args.seed, dev)
        mine = nn.ModuleList(all_layers[i] for i in stages[r])  # this stage's L/p blocks

        # [start: gpipe]
        # --- GPipe: all m forwards ...
        inputs, outputs, losses, done = [], [], [], []
        for i in range(m):
            if first:
                inp = xs[i]  # (mb, h)
            else:
                inp = torch.empty(mb, h, device=dev)
                dist.recv(inp, src=r - 1)  # (mb, h) activation from the previous stage
                inp.requires_grad_()
            out = run_blocks(mine, inp)  # (mb, h)
            if last:  # mean over micro-batches = full-batch loss
                losses.append(F.mse_loss(out, ys[i]) / m)
            else:
                dist.send(out.detach().contiguous(), dst=r + 1)
            inputs.append(inp)
            outputs.append(out)
            done.append(f"F{i}")
        # --- ... then all m backwards, last micro-batch first
        for i in reversed(range(m)):
            if last:
                losses[i].backward()
            else:
                grad = torch.empty(mb, h, device=dev)
                dist.recv(grad, src=r + 1)  # (mb, h) dL/d(output) from the next stage
                outputs[i].backward(grad)
            if not first:  # (mb, h) dL/d(input) to the previous stage
                dist.send(inputs[i].grad.contiguous(), dst=r - 1)
            done.append(f"B{i}")
        assert done == gpipe_order(m), f"stage {r} ran {done}, not GPipe's order {gpipe_order(m)}"
        # [end: gpipe]

        loss = torch.stack(losses).sum().detach() if last else torch.zeros((), device=dev)
        dist.broadcast(loss, src=p - 1)  # the last stage's loss, for every rank to check and print

        # --- single-process reference: all L blocks on the whole batch
        ref = tanh_blocks(L, h, args.seed, dev)
        ref_loss = F.mse_loss(run_blocks(ref, x), y)
        ref_loss.backward()
        check_close("pipeline loss", loss, ref_loss)
        grad_diff = max(
            check_close(f"grad of layer {i} {name}", pm.grad, pr.grad)
            for i in stages[r]
            for (name, pm), pr in zip(all_layers[i].named_parameters(), ref[i].parameters())
        )
        grad_diff = global_max(grad_diff, dev)
        bubble = bubble_fraction(p, m)

        if r == 0:
            say(
                f"pipeline of L={L} blocks on p={p} stages ({env.backend}): "
                f"layers_per_stage = L/p = {L // p}"
            )
            for s, idx in enumerate(stages):
                say(f"  stage {s} (rank {s}): layers {idx}")
            say(f"m={m} micro-batches of {mb} samples; every stage runs {' '.join(gpipe_order(m))}")
            say(f"bubble fraction (p-1)/(m+p-1) = {p - 1}/{m + p - 1} = {bubble:.4f}")
            say(f"loss on the last stage {sig(loss.item())} (reference {sig(ref_loss.item())})")
            say(f"max |grad - reference grad| over all stages = {grad_diff:.2e}")
            say("OK: the pipeline matches the unsplit model")
        emit(
            PpResult,
            world_size=p,
            num_layers=L,
            layers_per_stage=L // p,
            layers=stages[r],
            stage_layers=stages,
            micro_batches=m,
            micro_batch_size=mb,
            schedule=done,
            loss=sig(loss.item()),
            ref_loss=sig(ref_loss.item()),
            max_grad_diff=grad_diff,
            bubble_fraction=round(bubble, 6),
            backend=env.backend,
        )


if __name__ == "__main__":
    main()
