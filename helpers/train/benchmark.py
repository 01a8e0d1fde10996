"""Chapter 9's hybrid-parallel Llama benchmark: Colossal-AI's ``benchmark.py`` flags, the timed
loop and the per-step health watch.

Used by ``helpers/demos/ch09_hybrid.py`` (and its recorder, which parses its run lists with
:func:`parser`). The plugin comes from the same layout flags as Chapter 1's
(:func:`helpers.train.plugin_step.make_plugin`); the model is one of
:data:`helpers.train.presets.PRESETS`. ``--watch`` records, per step, the loss, the largest
|logit|, whether logits and gradients are finite, and the global gradient norm, so the first
non-finite step of the tp=2 bf16 NaN shows where it starts.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from helpers.models.llama import shard_batch
from helpers.run import cli
from helpers.run.env import sync
from helpers.train.plugin_step import make_plugin, plugin_step
from helpers.train.presets import PRESETS


def parser():
    """The command line (the recorder's tests parse its run lists with it)."""
    p = cli.parser()
    for flag in ("tp", "pp", "sp"):
        cli.add(p, flag, 1)
    cli.add(p, "sp_mode", None)
    cli.add(p, "zero", 0)
    p.add_argument("--mbs", type=int, default=1, help="pipeline micro-batch size (pp > 1)")
    cli.add(p, "precision", "bf16")
    p.add_argument("--preset", choices=list(PRESETS), default="1b")
    cli.add(p, "batch", 16)
    cli.add(p, "seq", 1024)
    cli.add(p, "steps", 12)
    cli.add(p, "warmup", 2)
    cli.add(p, "ref_steps", 4)
    cli.add(p, "lr", 3e-4)
    p.add_argument("--optim", choices=["adamw", "hybrid_adam"], default="adamw")
    p.add_argument(
        "--repeat", action="store_true", help="train on batch 0 every step (memorisation)"
    )
    p.add_argument(
        "--watch", action="store_true", help="record logit/gradient health every step (pp=1)"
    )
    p.add_argument(
        "--parallel_output", type=int, default=1, help="0: gather the vocab-parallel logits"
    )
    return p


def microbatches(args, world_size: int) -> int:
    """Pipeline micro-batches: this replica's rows of the global batch over ``--mbs``."""
    own_axis = args.sp if args.sp_mode in ("all_to_all", "ring_attn") else 1
    local = args.batch // max(1, world_size // (args.tp * args.pp * own_axis))
    return max(1, local // args.mbs)


def make_optimizer(model, lr: float, name: str):
    """torch AdamW, or Colossal-AI's HybridAdam with AdamW's default weight decay."""
    if name == "hybrid_adam":
        from colossalai.nn.optimizer import HybridAdam

        return HybridAdam(
            model.parameters(), lr=lr, weight_decay=0.01
        )  # = torch AdamW's default decay
    return torch.optim.AdamW(model.parameters(), lr=lr)


def watch_step(model, out, group) -> dict:
    """Logit and gradient health after a backward (working parameters' .grad; None under ZeRO)."""
    logits = out.logits.detach()
    sq, bad = torch.zeros((), device=logits.device, dtype=torch.float64), []
    for name, p in model.named_parameters():
        if p.grad is not None:
            sq += p.grad.detach().double().pow(2).sum()
            if not torch.isfinite(p.grad).all():
                bad.append(name)
    dist.all_reduce(sq, group=group)
    return dict(
        logit_absmax=float(logits.float().abs().max()),
        logits_finite=bool(torch.isfinite(logits).all()),
        grad_norm=float(sq.sqrt()),
        nonfinite_grads=bad[:4],
    )


def train_hybrid(model, batches, args, device):
    """The plugin trains ``batches`` (timed after ``--warmup``): (losses averaged over the data
    replicas, seconds per step, the layout, the watched steps, the plugin: keep it until the
    results are out)."""
    from colossalai.booster import Booster

    plugin = make_plugin(args)
    plugin.shard_config.parallel_output = bool(
        args.parallel_output
    )  # read when the model is sharded
    booster = Booster(plugin=plugin)
    mesh = plugin.pg_mesh
    dp_rank, dp_size = mesh.coordinate(plugin.dp_axis), mesh.size(plugin.dp_axis)
    model, opt, _, _, _ = booster.boost(model, make_optimizer(model, args.lr, args.optim))
    last_stage = bool(args.pp == 1 or plugin.stage_manager.is_last_stage())
    losses, watched, start = [], [], None
    for k, full in enumerate(batches):
        if k == args.warmup:
            sync(device)
            start = time.perf_counter()
        batch = {n: t.to(device) for n, t in shard_batch(full, dp_rank, dp_size).items()}
        loss, out = plugin_step(booster, model, opt, batch, args.pp > 1, last_stage, device)
        if args.watch and out is not None:  # gradients are there until the optimizer step
            watched.append(dict(step=k, loss=loss.item(), **watch_step(model, out, None)))
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().float().clone())
    sync(device)
    seconds = (time.perf_counter() - start) / (len(batches) - args.warmup)
    values = torch.stack(losses)
    if dp_size > 1:  # the mean over data-parallel replicas, on the last stage
        dist.all_reduce(values, group=mesh.get_group_along_axis(plugin.dp_axis))
        values /= dp_size
    layout = dict(
        dp=int(dp_size),
        tp=int(plugin.tp_size),
        pp=int(plugin.pp_size),
        sp=int(plugin.sp_size),
        last_stage=last_stage,
    )  # plain ints: numpy integers are not JSON
    del model, opt, booster
    return values.tolist(), seconds, layout, watched, plugin
