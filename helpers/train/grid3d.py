"""Chapter 2's from-scratch D × P × T grid: GPipe between the stages of one replica, Megatron
blocks inside a stage, and the check of every shard against the unsplit model.

Used by ``helpers/demos/ch02_3d.py``. :func:`pipeline_step` runs GPipe's all-forwards-then-
all-backwards over the replica's micro-batches with send/recv to the rank with the same (dp, tp)
coordinates in the next or previous stage, every block a tensor-parallel MLP
(:func:`helpers.parallel.tp.mlp_block`); :func:`compare_shards` checks a rank's pieces (gradients
or weights) against the same slices of the unsplit model (:mod:`helpers.train.reference`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from helpers.parallel.tp import mlp_block, shard_mlp_blocks
from helpers.train.reference import check_close


def compare_shards(params, full, layers, tp_rank: int, tp: int, what: str, when: str) -> float:
    """Max |difference| between this rank's shards (their ``.grad`` or ``.data``) and the same
    slices of the unsplit model's; raises if any is outside the fp32 tolerance."""
    diff = 0.0
    for i, p in zip(layers, params):
        want = shard_mlp_blocks(
            [{k: getattr(v, what) for k, v in full[i].items()}], [0], tp_rank, tp
        )[0]
        diff = max(
            diff,
            *(check_close(f"{when} layer {i} {what} {k}", getattr(p[k], what), want[k]) for k in p),
        )
    return diff


def pipeline_step(params, xs, ys, coords, mesh, tp_group, device):
    """GPipe over this replica's micro-batches; returns the replica's loss on the last stage (or
    None)."""
    pp, PP = coords["pp"], mesh.pp
    nxt = mesh.rank_of(dp=coords["dp"], pp=pp + 1, tp=coords["tp"]) if pp < PP - 1 else None
    prev = mesh.rank_of(dp=coords["dp"], pp=pp - 1, tp=coords["tp"]) if pp > 0 else None
    inputs, outputs, losses = [], [], []
    for x, y in zip(xs, ys):  # all forwards ...
        if prev is None:
            inp = x
        else:
            inp = torch.empty_like(x)
            dist.recv(inp, src=prev)  # (mb, h) from the previous stage, same dp and tp coordinates
            inp.requires_grad_()
        out = inp
        for p in params:
            out = mlp_block(out, p, tp_group)
        if nxt is None:
            losses.append(F.mse_loss(out, y) / len(xs))
        else:
            dist.send(out.detach().contiguous(), dst=nxt)
        inputs.append(inp)
        outputs.append(out)
    for i in reversed(range(len(xs))):  # ... then all backwards, last micro-batch first
        if nxt is None:
            losses[i].backward()
        else:
            grad = torch.empty_like(outputs[i])
            dist.recv(grad, src=nxt)
            outputs[i].backward(grad)
        if prev is not None:
            dist.send(inputs[i].grad.contiguous(), dst=prev)
    return torch.stack(losses).sum().detach() if nxt is None else None
