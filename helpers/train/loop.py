"""Chapter 5's training loop: a config's plugin, a Llama, resumable steps, signals and saves.

Used by the entry point ``helpers/demos/ch05_train.py`` (its flags and config:
:mod:`helpers.train.run_config`). The plugin comes from the config through Chapter 4's
``plugin_spec`` (:func:`helpers.config.plugin.build_plugin`): TorchDDPPlugin for pure data
parallelism (CPU or GPU), HybridParallelPlugin when tensor/pipeline/sequence > 1,
LowLevelZero/Gemini for ZeRO (GPUs only; on the CPU the run stops with a message saying why).
Every ``save_interval`` steps and at the end it writes an atomic checkpoint
(:mod:`helpers.train.checkpoint`). Steps count from 1: "step 5" is the fifth optimizer update and
``step_00000003`` holds the state after three. Rank 0 logs throughput, memory and the
communication-wait share every ``--log_interval`` steps (:mod:`helpers.train.signals`) and reports
each step's loss as a RESULT line. Its tqdm bar goes to stderr and is on only when stderr is a
terminal (``--progress auto``): under the book's launcher and in CI the ranks' output is piped, so
the bar stays off.
"""

from __future__ import annotations

import contextlib
import functools
import random
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from helpers.config.plugin import build_plugin
from helpers.models.llama import ProgressionDataset, build_llama
from helpers.run.env import emit, say
from helpers.run.result_types.ch05 import StepLoss, StepSignalsResult
from helpers.train import checkpoint as ckpt
from helpers.train.faults import maybe_die
from helpers.train.run_config import configure, layout_of
from helpers.train.signals import CommTimer, Meter
from helpers.train.weights import params_digest

EPOCH_BATCHES = 4  # the data set holds 4 global batches, so a run of 8 steps crosses epochs


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_step(booster, model, optimizer, batch, cfg, device, pipelined: bool, ddp: bool):
    """One optimizer update on this rank's share of the global batch; returns its mean loss (or
    None)."""
    batch = {k: v.to(device) for k, v in batch.items()}
    if pipelined:  # the pipeline schedule cuts the batch into micro-batches itself
        out = booster.execute_pipeline(
            iter([batch]), model, lambda o, _: o.loss, optimizer, return_loss=True
        )
        loss = out["loss"].detach() if out.get("loss") is not None else None
    else:  # gradient accumulation: all-reduce only on the last micro-batch (no_sync before it)
        n, loss = cfg.num_microbatches, 0.0
        for i, micro in enumerate(zip(*(v.chunk(n) for v in batch.values()))):
            quiet = (
                booster.no_sync(model, optimizer) if ddp and i < n - 1 else contextlib.nullcontext()
            )
            with quiet:
                part = model(**dict(zip(batch, micro))).loss / n
                booster.backward(part, optimizer)
            loss = loss + part.detach()
    if cfg.train.max_grad_norm and ddp:
        optimizer.clip_grad_by_norm(cfg.train.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad()
    return loss


def resume_path(args, root: Path, layout: dict) -> Path | None:
    """The checkpoint ``--resume`` names (or None); one of another layout is refused here,
    before anything is built."""
    if not args.resume:
        return None
    path = ckpt.latest(root) if args.resume == "latest" else Path(args.resume)
    if path is not None:
        ckpt.check_layout(ckpt.read_meta(path)["layout"], layout, path, args.reshard)
    return path


def resumed_line(r, path: Path, layout: dict) -> str:
    """Rank 0's line after a resume (saying so when the layout changed)."""
    saved, pos = r.meta["layout"], r.data
    how = (
        ""
        if saved == layout
        else (
            f" under a new layout (saved as data {saved['data']} x tensor "
            f"{saved['tensor']} x pipeline {saved['pipeline']}; ranks re-seeded)"
        )
    )
    return (
        f"resumed from {path.name}{how}: step {r.step}, epoch {pos.epoch}, "
        f"batch {pos.batch_in_epoch} of it, "
        f"{pos.samples_seen} samples seen"
    )


def start_line(spec, cfg, env, step: int) -> str:
    """Rank 0's line before the first step: plugin, layout, batch and the steps to run."""
    par, t = cfg.parallelism, cfg.train
    return (
        f"{spec.plugin} on {env.world_size} ranks ({env.backend}) | data {cfg.data_degree} "
        f"x tensor {par.tensor} "
        f"x pipeline {par.pipeline} | global batch {t.batch_size} = {cfg.data_degree} "
        f"x {cfg.num_microbatches} "
        f"micro-batches x {cfg.micro_batch} | steps {step + 1}..{t.steps}"
    )


def progress(args, env, total: int, step: int):
    """(rank 0's tqdm bar on stderr, the function that prints a log line past it)."""
    from tqdm import tqdm

    show_bar = env.rank == 0 and (
        args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty())
    )
    bar = tqdm(
        total=total, initial=step, desc="train", unit="step", file=sys.stderr, disable=not show_bar
    )
    return bar, bar.write if show_bar else say


def train(args, env):
    """The whole run on this rank: (rank 0's final result, the plugin: keep it until then)."""
    cfg = configure(args, env.world_size)
    t, m = cfg.train, cfg.model
    layout, root = layout_of(cfg, env.world_size), Path(t.checkpoint_dir)
    path = resume_path(args, root, layout)
    # [start: booster-setup]
    plugin, booster, spec = build_plugin(cfg, env.device, args.bucket_cap_mb)
    sharded = spec.plugin != "TorchDDPPlugin"
    config = m.shape().config(attn="sdpa", max_seq=m.seq_len)
    config.attention_dropout = args.dropout
    model = build_llama(config, seed=t.seed)  # identical initial weights on every rank
    seed_everything(t.seed + 1000 * env.rank)  # each rank its own dropout stream
    optimizer = torch.optim.AdamW(model.parameters(), lr=t.learning_rate)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=t.steps, eta_min=t.learning_rate / 10
    )
    dataset = ProgressionDataset(EPOCH_BATCHES * t.batch_size, m.seq_len, m.vocab, seed=t.seed)
    # own generator: starting an epoch must not draw on the torch RNG
    loader = plugin.prepare_dataloader(
        dataset,
        batch_size=cfg.per_rank_batch,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator(),
        distributed_sampler_cls=functools.partial(ckpt.ResumableSampler, seed=t.seed),
    )
    model, optimizer, _, loader, scheduler = booster.boost(
        model, optimizer, dataloader=loader, lr_scheduler=scheduler
    )
    comm = CommTimer()
    # no_sync accumulation and clipping by the loop (the others clip inside)
    ddp = spec.plugin == "TorchDDPPlugin"
    timed = comm.attach(model)  # DDP on gloo only: NCCL completes futures before the GPU is done
    step, losses, pos = 0, [], ckpt.DataPosition()
    if path is not None:
        r = ckpt.load(booster, model, optimizer, scheduler, path, layout, args.reshard)
        step, losses, pos = r.step, r.losses, r.data
        if env.rank == 0:
            say(resumed_line(r, path, layout))
    elif args.resume and env.rank == 0:
        say(f"--resume: no complete checkpoint under {root} yet, starting at step 0")
    # [end: booster-setup]
    if env.rank == 0:
        say(start_line(spec, cfg, env, step))

    per_epoch = len(dataset) // t.batch_size
    bar, log = progress(args, env, t.steps, step)
    meter = Meter(env.device, comm if timed else None)
    while step < t.steps:
        loader.sampler.set_position(pos.epoch, pos.batch_in_epoch * cfg.per_rank_batch)
        for batch in loader:
            kill_at = None if args.kill_in_save else args.kill_at
            maybe_die(step + 1, env.rank, kill_at, args.kill_rank)
            pipelined = cfg.parallelism.pipeline > 1
            loss = train_step(booster, model, optimizer, batch, cfg, env.device, pipelined, ddp)
            scheduler.step()
            held = torch.tensor(
                [0.0 if loss is None else 1.0, 0.0 if loss is None else float(loss)],
                device=env.device,
            )
            with comm.blocking(env.device):
                # mean over the ranks that hold a loss (the last pipeline stage)
                dist.all_reduce(held)
            step += 1
            losses.append(held[1].item() / held[0].item())
            done = pos.batch_in_epoch + 1
            pos = ckpt.DataPosition(
                pos.epoch + done // per_epoch, done % per_epoch, pos.samples_seen + t.batch_size
            )
            meter.step(t.batch_size, t.batch_size * m.seq_len)
            bar.update(1)
            if env.rank == 0:
                emit(StepLoss, step=step, loss=losses[-1])
            if step % args.log_interval == 0 or step == t.steps:
                signals = meter.report()
                if env.rank == 0:
                    log(f"step {step:>3}/{t.steps} | loss {losses[-1]:.4f} | {signals.line()}")
                    emit(StepSignalsResult, step=step, signals=vars(signals))
            if t.save_interval and (step % t.save_interval == 0 or step == t.steps):
                kill = args.kill_rank if args.kill_in_save and step == args.kill_at else None
                with meter.paused():
                    saved = ckpt.save(
                        booster,
                        model,
                        optimizer,
                        scheduler,
                        root,
                        step,
                        pos,
                        layout,
                        losses,
                        shard=sharded,
                        kill_rank=kill,
                        keep_last=t.keep_last,
                    )
                if env.rank == 0:
                    log(f"saved {saved.name} (epoch {pos.epoch}, batch {pos.batch_in_epoch})")
            if step == t.steps or pos.batch_in_epoch == 0:
                break  # done, or the epoch is over: the while loop sets the next epoch's order
    meter.close()
    bar.close()
    digest = None if sharded else params_digest(model.unwrap().state_dict())
    result = dict(
        final=True,
        losses=losses,
        digest=digest,
        world_size=env.world_size,
        plugin=type(plugin).__name__,
        backend=env.backend,
        last_checkpoint=str(ckpt.latest(root)) if t.save_interval else None,
    )
    # free the DDP reducer (helpers.run.env.distributed)
    del model, optimizer, scheduler, booster, loader
    return result, plugin
