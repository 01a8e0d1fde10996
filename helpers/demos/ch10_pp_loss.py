"""Chapter 10 pitfall: reading the loss on a pipeline rank that is not the last.

Two pipeline stages run one forward pass of m micro-batches (from scratch, as Chapter 1's GPipe
demo). Only the last stage computes the loss; the others hold nothing, just as Colossal-AI's
``booster.execute_pipeline`` returns ``{"loss": None, ...}`` on every stage but the last
(``colossalai/pipeline/schedule/one_f_one_b.py``: the loss is accumulated only where
``stage_manager.is_last_stage()``). A script that logs ``outputs["loss"]`` on rank 0 logs nothing
(or crashes on ``None.item()``). The fix: broadcast the loss from the last stage of the pipeline
group, then every rank agrees with the single-process reference.

    python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.ch10_pp_loss
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from helpers.models.mlp import run_blocks, tanh_blocks
from helpers.parallel.pp import split_layers
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch10 import PpLossResult
from helpers.train.reference import randn, strict_fp32

LAYERS, HIDDEN, MICRO, MICRO_BATCH, SEED = 4, 8, 4, 2, 0


def main() -> None:
    strict_fp32()
    # a bookkeeping lesson: the same CPU numbers on every machine
    with distributed(backend="gloo") as env:
        p, r, dev = env.world_size, env.rank, env.device
        first, last = r == 0, r == p - 1
        layers = tanh_blocks(LAYERS, HIDDEN, SEED, dev)
        mine = [layers[i] for i in split_layers(LAYERS, p)[r]]
        x = randn(MICRO * MICRO_BATCH, HIDDEN, seed=SEED + 1, device=dev)  # (m*mb, h)
        y = randn(MICRO * MICRO_BATCH, HIDDEN, seed=SEED + 2, device=dev)  # (m*mb, h)
        losses = []
        with torch.no_grad():
            for xs, ys in zip(x.chunk(MICRO), y.chunk(MICRO)):
                if first:
                    inp = xs
                else:
                    inp = torch.empty(MICRO_BATCH, HIDDEN, device=dev)
                    dist.recv(inp, src=r - 1)  # (mb, h) activation of the previous stage
                out = run_blocks(mine, inp)
                if last:
                    losses.append(F.mse_loss(out, ys) / MICRO)
                else:
                    dist.send(out.contiguous(), dst=r + 1)
            outputs = {"loss": torch.stack(losses).sum() if last else None}  # as execute_pipeline
            local = None if outputs["loss"] is None else round(outputs["loss"].item(), 6)
            shared = outputs["loss"] if last else torch.zeros((), device=dev)
            dist.broadcast(shared, src=p - 1)  # the fix: the last stage tells everyone
            reference = F.mse_loss(run_blocks(layers, x), y).item()
        say(f"stage {r}: outputs['loss'] = {local}; after broadcast {shared.item():.6f}")
        emit(
            PpLossResult,
            stage=r,
            last_stage=last,
            local_loss=local,
            broadcast_loss=round(shared.item(), 6),
            reference_loss=round(reference, 6),
        )


if __name__ == "__main__":
    main()
