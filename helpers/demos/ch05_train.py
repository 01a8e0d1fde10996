"""Chapter 5: one training entry point, driven by a config file, that saves, resumes and reports.

    torchrun --nproc_per_node 2 -m helpers.demos.ch05_train --config helpers/demos/ch05_tiny.yaml
    torchrun ... --resume                      # continue from the last complete checkpoint
    torchrun ... --kill_at 5 --kill_rank 1     # fault demo: rank 1 SIGKILLs itself at step 5

The plugin comes from the config through Chapter 4's ``plugin_spec``
(:func:`helpers.chapters.ch05_launch.build_plugin`): TorchDDPPlugin for pure data parallelism (CPU or GPU),
HybridParallelPlugin when tensor/pipeline/sequence > 1, LowLevelZero/Gemini for ZeRO (GPUs only;
on the CPU the run stops with a message saying why). Every
``save_interval`` steps and at the end it writes an atomic checkpoint (:mod:`helpers.train.checkpoint`).
Steps count from 1: "step 5" is the fifth optimizer update and ``step_00000003`` holds the state
after three. Rank 0 logs throughput, memory and the communication-wait share every
``--log_interval`` steps (:mod:`helpers.train.signals`) and reports each step's loss as a RESULT line.
Its tqdm bar goes to stderr and is on only when stderr is a terminal (``--progress auto``):
under the book's launcher and in CI the ranks' output is piped, so the bar stays off.
"""

import argparse
import contextlib
import functools
import random
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from helpers.train import checkpoint as ckpt
from helpers.chapters.ch05_launch import ProgressionDataset, build_plugin, layout_of
from helpers.config.schema import load_config
from helpers.run.env import distributed, emit, say
from helpers.train.faults import maybe_die
from helpers.train.signals import CommTimer, Meter
from helpers.models.llama import build_llama, llama_config

DROPOUT = 0.1  # attention dropout draws on the torch RNG every step: a resume must restore it
EPOCH_BATCHES = 4  # the data set holds 4 global batches, so a run of 8 steps crosses epochs


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--config", required=True, help="YAML config (helpers.config.schema.load_config)"
    )
    p.add_argument("--steps", type=int, help="override train.steps")
    p.add_argument("--save_interval", type=int, help="override train.save_interval (0: never save)")
    p.add_argument("--checkpoint_dir", help="override train.checkpoint_dir")
    p.add_argument(
        "--keep_last", type=int, help="override train.keep_last (0: keep every checkpoint)"
    )
    p.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        help="'latest' (the default when given "
        "without a value) or a checkpoint folder step_XXXXXXXX",
    )
    p.add_argument(
        "--reshard",
        action="store_true",
        help="resume a checkpoint saved under another layout "
        "(same global batch and seed): continues the run, not bit for bit",
    )
    p.add_argument(
        "--dropout",
        type=float,
        default=DROPOUT,
        help="attention dropout (0 for cross-layout comparisons)",
    )
    p.add_argument(
        "--bucket_cap_mb", type=float, help="DDP gradient bucket size (default: torch's 25 MB)"
    )
    p.add_argument("--log_interval", type=int, default=2, help="steps between signal lines")
    p.add_argument(
        "--progress",
        choices=("auto", "on", "off"),
        default="auto",
        help="tqdm bar on rank 0 (auto: only when stderr is a terminal)",
    )
    p.add_argument(
        "--kill_at", type=int, help="fault demo: step at which --kill_rank SIGKILLs itself"
    )
    p.add_argument("--kill_rank", type=int, default=1)
    p.add_argument(
        "--kill_in_save", action="store_true", help="die while saving step --kill_at instead"
    )
    return p.parse_args(argv)


def configure(args, world_size: int):
    """The config for this world size, with the command line's overrides applied."""
    cfg = load_config(args.config, world_size=world_size)
    train = {
        k: v
        for k in ("steps", "save_interval", "checkpoint_dir", "keep_last")
        if (v := getattr(args, k)) is not None
    }
    if train.get("keep_last") == 0:
        train["keep_last"] = None
    return cfg.with_changes({"train": train}) if train else cfg


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_step(booster, model, optimizer, batch, cfg, device, pipelined: bool, ddp: bool):
    """One optimizer update on this rank's share of the global batch; returns its mean loss (or None)."""
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


def train(args, env):
    from colossalai.booster import Booster
    from tqdm import tqdm

    cfg = configure(args, env.world_size)
    t, m = cfg.train, cfg.model
    layout, root = layout_of(cfg, env.world_size), Path(t.checkpoint_dir)
    path = (
        (ckpt.latest(root) if args.resume == "latest" else Path(args.resume))
        if args.resume
        else None
    )
    if path is not None:  # refuse a checkpoint of another layout before building anything
        ckpt.check_layout(ckpt.read_meta(path)["layout"], layout, path, args.reshard)
    plugin, booster_kwargs, spec = build_plugin(cfg, env.device, args.bucket_cap_mb)
    booster, sharded = Booster(plugin=plugin, **booster_kwargs), spec.plugin != "TorchDDPPlugin"
    config = llama_config(
        layers=m.layers,
        hidden=m.hidden,
        heads=m.heads,
        kv_heads=m.kv_heads,
        vocab=m.vocab,
        max_seq=m.seq_len,
    )
    config.attention_dropout = args.dropout
    model = build_llama(config, seed=t.seed)  # identical initial weights on every rank
    seed_everything(t.seed + 1000 * env.rank)  # each rank its own dropout stream
    optimizer = torch.optim.AdamW(model.parameters(), lr=t.learning_rate)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=t.steps, eta_min=t.learning_rate / 10
    )
    dataset = ProgressionDataset(EPOCH_BATCHES * t.batch_size, m.seq_len, m.vocab, seed=t.seed)
    loader = plugin.prepare_dataloader(  # own generator: starting an epoch must not draw on the torch RNG
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
    ddp = (
        spec.plugin == "TorchDDPPlugin"
    )  # no_sync accumulation and clipping by the loop (the others clip inside)
    timed = comm.attach(model)  # DDP on gloo only: NCCL completes futures before the GPU is done
    step, losses, pos = 0, [], ckpt.DataPosition()
    if path is not None:
        r = ckpt.load(booster, model, optimizer, scheduler, path, layout, args.reshard)
        step, losses, pos = r.step, r.losses, r.data
        if env.rank == 0:
            saved = r.meta["layout"]
            how = (
                ""
                if saved == layout
                else (
                    f" under a new layout (saved as data {saved['data']} x tensor "
                    f"{saved['tensor']} x pipeline {saved['pipeline']}; ranks re-seeded)"
                )
            )
            say(
                f"resumed from {path.name}{how}: step {step}, epoch {pos.epoch}, batch {pos.batch_in_epoch} of it, "
                f"{pos.samples_seen} samples seen"
            )
    elif args.resume and env.rank == 0:
        say(f"--resume: no complete checkpoint under {root} yet, starting at step 0")
    if env.rank == 0:
        par = cfg.parallelism
        say(
            f"{spec.plugin} on {env.world_size} ranks ({env.backend}) | data {cfg.data_degree} x tensor {par.tensor} "
            f"x pipeline {par.pipeline} | global batch {t.batch_size} = {cfg.data_degree} x {cfg.num_microbatches} "
            f"micro-batches x {cfg.micro_batch} | steps {step + 1}..{t.steps}"
        )

    per_epoch = len(dataset) // t.batch_size
    show_bar = env.rank == 0 and (
        args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty())
    )
    bar = tqdm(
        total=t.steps,
        initial=step,
        desc="train",
        unit="step",
        file=sys.stderr,
        disable=not show_bar,
    )
    log = bar.write if show_bar else say
    meter = Meter(env.device, comm if timed else None)
    while step < t.steps:
        loader.sampler.set_position(pos.epoch, pos.batch_in_epoch * cfg.per_rank_batch)
        for batch in loader:
            maybe_die(
                step + 1, env.rank, None if args.kill_in_save else args.kill_at, args.kill_rank
            )
            loss = train_step(
                booster, model, optimizer, batch, cfg, env.device, cfg.parallelism.pipeline > 1, ddp
            )
            scheduler.step()
            held = torch.tensor(
                [0.0 if loss is None else 1.0, 0.0 if loss is None else float(loss)],
                device=env.device,
            )
            with comm.blocking(env.device):
                dist.all_reduce(
                    held
                )  # mean over the ranks that hold a loss (the last pipeline stage)
            step += 1
            losses.append(held[1].item() / held[0].item())
            done = pos.batch_in_epoch + 1
            pos = ckpt.DataPosition(
                pos.epoch + done // per_epoch, done % per_epoch, pos.samples_seen + t.batch_size
            )
            meter.step(t.batch_size, t.batch_size * m.seq_len)
            bar.update(1)
            if env.rank == 0:
                emit(step=step, loss=losses[-1])
            if step % args.log_interval == 0 or step == t.steps:
                signals = meter.report()
                if env.rank == 0:
                    log(f"step {step:>3}/{t.steps} | loss {losses[-1]:.4f} | {signals.line()}")
                    emit(step=step, signals=vars(signals))
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
                log(
                    f"saved {saved.name} (epoch {pos.epoch}, batch {pos.batch_in_epoch})"
                ) if env.rank == 0 else None
            if step == t.steps or pos.batch_in_epoch == 0:
                break  # done, or the epoch is over: the while loop sets the next epoch's order
    meter.close()
    bar.close()
    digest = None if sharded else ckpt.params_digest(model.unwrap().state_dict())
    result = dict(
        final=True,
        losses=losses,
        digest=digest,
        world_size=env.world_size,
        plugin=type(plugin).__name__,
        backend=env.backend,
        last_checkpoint=str(ckpt.latest(root)) if t.save_interval else None,
    )
    del (
        model,
        optimizer,
        scheduler,
        booster,
        loader,
    )  # known-facts: free the DDP reducer before teardown
    return result, plugin


def main(argv=None) -> None:
    args = parse_args(argv)
    with distributed() as env:
        result, plugin = train(args, env)
        if env.rank == 0:
            emit(**result)
        del plugin


if __name__ == "__main__":
    main()
