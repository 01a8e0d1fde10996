"""Chapter 2's from-scratch D × P × T grid: GPipe between the stages of one replica, Megatron
blocks inside a stage, and the check of every shard against the unsplit model.

Used by ``helpers/demos/ch02_3d.py`` and ``helpers/demos/ch02_trace.py`` (:func:`place`: a
rank's coordinates, groups, stage and shards) and, for a D × T grid with every collective timed
(:func:`timed_step`, :func:`check_unsplit`), by ``helpers/demos/ch05_mesh_order.py``.
:func:`pipeline_step` runs GPipe's all-forwards-then-all-backwards
(:func:`helpers.parallel.pp.gpipe_step`) over the replica's micro-batches with send/recv to the rank
with the same (dp, tp) coordinates in the next or previous stage, every block a tensor-parallel MLP
(:func:`helpers.parallel.tp.mlp_block`); :func:`compare_shards` checks a rank's pieces (gradients
or weights) against the same slices of the unsplit model (:mod:`helpers.train.reference`).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from helpers.parallel.tp import mlp_block, mlp_blocks, shard_mlp_blocks, CommClock
from helpers.train.reference import check_close, global_max
from helpers.parallel.mesh import RankMesh, process_groups
from helpers.parallel.pp import gpipe_step, split_layers


def place(env, args):
    """This rank's part of the grid for ``args`` (``pp``, ``tp``, ``layers``, ``hidden``,
    ``seed``): (mesh, its coordinates, its tensor/data groups, the stages' layers, the unsplit
    model as the reference, this rank's shards of its stage)."""
    mesh = RankMesh.for_world(env.world_size, pp=args.pp, tp=args.tp)  # D = G / (P·T), checked
    coords = mesh.coords(env.rank)
    groups = process_groups(mesh, ("tp", "dp"))
    stages = split_layers(args.layers, args.pp)
    full = mlp_blocks(args.layers, args.hidden, args.seed, env.device)  # the reference, whole
    params = shard_mlp_blocks(full, stages[coords["pp"]], coords["tp"], args.tp)
    return mesh, coords, groups, stages, full, params


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
    """GPipe over this replica's micro-batches (:func:`helpers.parallel.pp.gpipe_step`), every
    block a tensor-parallel MLP; returns the replica's loss on the last stage (or None)."""
    pp, PP = coords["pp"], mesh.pp
    nxt = mesh.rank_of(dp=coords["dp"], pp=pp + 1, tp=coords["tp"]) if pp < PP - 1 else None
    prev = mesh.rank_of(dp=coords["dp"], pp=pp - 1, tp=coords["tp"]) if pp > 0 else None

    def stage(out):
        for p in params:
            out = mlp_block(out, p, tp_group)
        return out

    return gpipe_step(stage, xs, ys, F.mse_loss, prev, nxt)


def timed_step(params, x, y, tp_group, dp_group, dp: int, lr: float | None, skip: bool = False):
    """One step of a D × T grid of Megatron blocks: forward, backward, one all-reduce of the
    gradient bucket over ``dp_group``, SGD (unless ``lr`` is None); every collective timed where
    it is called, or left out with ``skip`` (the compute alone). (loss, seconds, seconds inside
    collectives)."""
    tensors = [t for p in params for t in p.values()]
    clock = CommClock(skip)
    dist.barrier()
    start = time.perf_counter()
    out = x.clone().requires_grad_()  # as after a trained layer: its gradient is needed
    for p in params:
        out = mlp_block(out, p, tp_group, clock)
    loss = F.mse_loss(out, y)
    loss.backward()
    bucket = torch.cat([t.grad.reshape(-1) for t in tensors])
    clock.all_reduce(bucket, dp_group)
    bucket /= dp
    with torch.no_grad():
        for t, g in zip(tensors, bucket.split([t.numel() for t in tensors])):
            t.grad.copy_(g.view_as(t))
            if lr is not None:
                t -= lr * t.grad
                t.grad = None
    return loss.detach(), time.perf_counter() - start, clock.seconds


def check_unsplit(params, full, x, y, loss, dp_group, dp: int, tp_rank: int, tp: int, when: str):
    """The step just taken against the unsplit model on the whole global batch ``x``, ``y``:
    [max |loss difference|, max |gradient shard difference| over all ranks, the loss]; ``loss``
    is this replica's (the mean over the ``dp`` replicas is the global batch's)."""
    loss = loss.clone()
    dist.all_reduce(loss, group=dp_group)
    ref = x
    for blk in full:
        ref = mlp_block(ref, blk)
    ref_loss = F.mse_loss(ref, y)
    ref_loss.backward()
    loss_diff = check_close(f"{when} loss", loss / dp, ref_loss.detach())
    grad_diff = compare_shards(params, full, list(range(len(full))), tp_rank, tp, "grad", when)
    return [loss_diff, global_max(grad_diff, x.device), float(ref_loss)]
