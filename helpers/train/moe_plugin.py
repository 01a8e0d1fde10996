"""Chapter 9's Mixtral under MoeHybridParallelPlugin: the demo's flags, the plugin and the timed
loop.

Used by ``helpers/demos/ch09_mixtral.py`` (and its recorder, which parses its run lists with
:func:`parser`). The plugin's constraints, from
colossalai/booster/plugin/moe_hybrid_parallel_plugin.py in 0.5.0: the data-parallel size
(world / (tp·pp·sp)) must be divisible by ep; zero_stage 2 (and overlap_communication) becomes
zero_stage 1 with a warning; ZeRO needs fp16/bf16; the number of experts must be divisible by ep.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from helpers.models.llama import shard_batch
from helpers.run import cli
from helpers.run.env import sync

WARMUP = 2  # untimed first steps


def parser():
    """The command line (the recorder's tests parse its run lists with it)."""
    p = cli.parser()
    p.add_argument("--ep", type=int, default=2)
    cli.add(p, "zero", 1)
    cli.add(p, "precision", "bf16", choices=["bf16", "fp16"])
    cli.add(p, "layers", 8)
    cli.add(p, "hidden", 1024)
    p.add_argument("--experts", type=int, default=8)
    cli.add(p, "batch", 16, help="global batch")
    cli.add(p, "seq", 1024)
    cli.add(p, "steps", 10)
    cli.add(p, "ref_steps", 4)
    cli.add(p, "lr", 3e-4)
    return p


def moe_plugin(args):
    """MoeHybridParallelPlugin with expert parallelism only (tp = pp = 1)."""
    from colossalai.booster.plugin import MoeHybridParallelPlugin

    return MoeHybridParallelPlugin(
        tp_size=1,
        pp_size=1,
        ep_size=args.ep,
        zero_stage=args.zero,
        precision=args.precision,
        max_norm=0.0,
    )


def train_steps(booster, model, opt, batches, dp_size: int, rank: int, device):
    """Every batch once, this rank its replica's rows: (the world's mean loss per step, seconds
    per step after :data:`WARMUP`)."""
    losses, start = [], None
    for k, full in enumerate(batches):
        if k == WARMUP:
            sync(device)
            start = time.perf_counter()
        batch = {n: t.to(device) for n, t in shard_batch(full, rank % dp_size, dp_size).items()}
        loss = model(**batch).loss
        booster.backward(loss, opt)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().float().clone())
    sync(device)
    seconds = (time.perf_counter() - start) / (len(batches) - WARMUP)
    values = torch.stack(losses)
    dist.all_reduce(values)
    return (values / dist.get_world_size()).tolist(), seconds
