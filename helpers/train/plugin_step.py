"""A Llama trained through a Colossal-AI plugin, one step at a time, on fresh batches.

Chapter 1, "the same with Colossal-AI": :func:`train_ddp` (TorchDDPPlugin, CPU or GPU) and
:func:`train_plugin` (HybridParallelPlugin from the layout flags ``--tp --pp --sp --sp_mode
--zero``, GPUs), each compared by its demo with :mod:`helpers.train.reference`. Chapter 3's
measured layouts (:func:`layouts_plugin`, :func:`time_steps`) and Chapter 9's benchmark
(:mod:`helpers.train.benchmark`) build on the same :func:`make_plugin` and :func:`plugin_step`.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from helpers.models.llama import shard_batch, token_batch
from helpers.run.env import sync


def make_plugin(args, precision: str | None = None):
    """HybridParallelPlugin from the layout flags (``args.precision`` unless ``precision``)."""
    from colossalai.booster.plugin import HybridParallelPlugin

    sp = args.sp_mode is not None
    return HybridParallelPlugin(
        tp_size=args.tp,
        pp_size=args.pp,
        sp_size=args.sp if args.sp_mode == "all_to_all" else None,
        enable_sequence_parallelism=sp,
        sequence_parallelism_mode=args.sp_mode,
        num_microbatches=args.microbatches if args.pp > 1 else None,
        precision=precision or args.precision,
        zero_stage=args.zero,
        max_norm=0.0,
    )


def plugin_step(booster, model, opt, batch, pipelined: bool, last_stage: bool, device):
    """Forward and backward of one step under the plugin (the caller steps the optimizer):
    (loss, model output), the loss where it lives (the last stage under pp, else 0) and no output
    under pp. Also used by Chapter 9's benchmark (helpers/demos/ch09_hybrid.py)."""
    if pipelined:
        out = booster.execute_pipeline(
            iter([batch]), model, lambda o, _: o.loss, opt, return_loss=True
        )
        return (out["loss"] if last_stage else torch.zeros((), device=device)), None
    out = model(**batch)
    booster.backward(out.loss, opt)
    return out.loss, out


def train_ddp(model, dataset, local_batch, lr, device):
    """TorchDDPPlugin through Booster: every rank its rows of each batch
    (``plugin.prepare_dataloader``); returns the mean loss over the world, step by step."""
    from colossalai.booster import Booster
    from colossalai.booster.plugin import TorchDDPPlugin

    plugin = TorchDDPPlugin()
    booster = Booster(plugin=plugin)
    loader = plugin.prepare_dataloader(
        dataset, batch_size=local_batch, shuffle=False, drop_last=True
    )
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model, opt, _, loader, _ = booster.boost(model, opt, dataloader=loader)
    losses = []
    for ids, labels in loader:
        loss = model(input_ids=ids.to(device), labels=labels.to(device)).loss
        booster.backward(loss, opt)
        opt.step()
        opt.zero_grad()
        world_mean = loss.detach().clone()
        dist.all_reduce(world_mean)  # SUM of the per-rank means
        losses.append(world_mean.item() / dist.get_world_size())
    del model, opt, booster, plugin  # free the DDP reducer before teardown (helpers.run.env)
    return losses


def train_plugin(model, batches, args, device):
    """HybridParallelPlugin (:func:`make_plugin`) on ``batches``: (losses, seconds per step from
    the second step on, peak MiB, the layout, the plugin: keep it until the results are out)."""
    from colossalai.booster import Booster

    plugin = make_plugin(args)
    booster = Booster(plugin=plugin)
    mesh = plugin.pg_mesh
    dp_rank, dp_size = mesh.coordinate(plugin.dp_axis), mesh.size(plugin.dp_axis)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, opt, _, _, _ = booster.boost(model, opt)
    last_stage = bool(args.pp == 1 or plugin.stage_manager.is_last_stage())
    losses, start = [], None
    for k, full in enumerate(batches):
        if k == 1:  # time from the second step on (the first one builds caches)
            sync(device)
            start = time.perf_counter()
        batch = {n: t.to(device) for n, t in shard_batch(full, dp_rank, dp_size).items()}
        loss, _ = plugin_step(booster, model, opt, batch, args.pp > 1, last_stage, device)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().float().clone())
    sync(device)
    seconds = (time.perf_counter() - start) / max(1, len(batches) - 1)
    # the mean over data-parallel replicas, taken where the loss lives (the last stage)
    values = torch.stack(losses)
    if dp_size > 1:
        dist.all_reduce(values, group=mesh.get_group_along_axis(plugin.dp_axis))
        values /= dp_size
    memory = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0
    info = dict(
        dp=dp_size, tp=plugin.tp_size, pp=plugin.pp_size, sp=plugin.sp_size, last_stage=last_stage
    )
    del model, opt, booster
    return values.tolist(), seconds, memory, info, plugin


def layouts_plugin(args, is_gpu: bool):
    """Chapter 3's measured layout: HybridParallelPlugin in bf16 on GPUs; on the CPU only pure
    data parallelism runs (TorchDDPPlugin, fp32)."""
    if not is_gpu:
        if (args.tp, args.pp, args.sp, args.zero) != (1, 1, 1, 0) or args.sp_mode:
            raise SystemExit(
                "on the CPU Colossal-AI 0.5.0 runs only pure data parallelism "
                "(TorchDDPPlugin, fp32); "
                "tensor/pipeline/sequence/ZeRO layouts need one CUDA GPU per rank"
            )
        from colossalai.booster.plugin import TorchDDPPlugin

        return TorchDDPPlugin()
    return make_plugin(args, precision="bf16")


def time_steps(booster, model, opt, args, dp_rank: int, dp_size: int, device):
    """``args.warmup`` untimed, then ``args.steps`` timed steps, each between a barrier and a
    sync, on fresh batches: (seconds of each timed step, the losses this rank holds)."""
    times, losses = [], []
    for k in range(args.warmup + args.steps):
        batch = shard_batch(token_batch(k, args.batch, args.seq, args.vocab), dp_rank, dp_size)
        batch = {n: t.to(device) for n, t in batch.items()}
        dist.barrier()
        sync(device)
        t0 = time.perf_counter()
        if args.pp > 1:
            out = booster.execute_pipeline(
                iter([batch]), model, lambda o, _: o.loss, opt, return_loss=True
            )
            loss = out["loss"]
        else:
            loss = model(**batch).loss
            booster.backward(loss, opt)
        opt.step()
        opt.zero_grad()
        sync(device)
        if k >= args.warmup:
            times.append(time.perf_counter() - t0)
        if loss is not None:
            losses.append(float(loss.detach()))
    return times, losses
