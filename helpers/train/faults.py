"""Deliberate failures for the fault-tolerance demos (Chapter 5) and the failure labs (Chapter 8).

``die`` is what a crashed node looks like to everyone else: the process disappears with SIGKILL,
so no ``finally`` block, no ``atexit`` hook and no Python exception handler runs on that rank.
:func:`failing_loop` and :func:`oom_step` are the loops ``helpers/demos/ch08_fail.py`` fails in:
a skipped all-reduce, a killed rank, a NaN, an address-space cap.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import time

import torch
import torch.distributed as dist

from helpers.run.env import emit, say
from helpers.run.result_types.ch08 import FailResult, OomStepResult
from helpers.models.shape import ModelShape
from helpers.cost.memory_llama import head_activation_bytes, layer_activation_bytes
from helpers.models.llama import build_llama, llama_config, token_batch


def die(reason: str) -> None:
    """Print one line saying why, then SIGKILL this process (nothing after this call runs)."""
    sys.stdout.write(f"FAULT {reason}: SIGKILL pid {os.getpid()}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def maybe_die(step: int, rank: int, kill_at: int | None, kill_rank: int) -> None:
    """Kill ``kill_rank`` when it is about to run step ``kill_at`` (0-based); otherwise do
    nothing."""
    if kill_at is not None and step == kill_at and rank == kill_rank:
        die(f"rank {rank} killed at step {step}")


def failing_loop(env, args) -> None:
    """Chapter 8's small data-parallel loop, failing as ``args.mode`` asks (ok, skip, crash,
    nan); every rank reports its final loss."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(1 + env.rank)
    norms = []
    for step in range(args.steps):
        x = torch.randn(16, 32, generator=g)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if args.mode == "crash":
            maybe_die(step, env.rank, kill_at=2, kill_rank=1)
        if args.mode == "skip" and env.rank == 1 and step == 1:
            say(f"rank 1 step {step}: no batch, skipping the gradient all-reduce")
        else:
            for p in model.parameters():  # data parallelism by hand: the mean gradient
                dist.all_reduce(p.grad)
                p.grad /= env.world_size
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
        norms.append(norm)
        say(f"rank {env.rank} step {step} loss {loss.item():.4g} grad_norm {norm:.4g}")
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"loss is {loss.item()} at step {step} (grad norms so far: "
                f"{', '.join(f'{n:.3g}' for n in norms)})"
            )
        opt.step()
        opt.zero_grad()
    emit(FailResult, mode=args.mode, steps=args.steps, final_loss=round(loss.item(), 4))


def oom_step(args) -> None:
    """One training step of a tiny Llama under an address-space cap (one process, no group)."""
    import psutil

    shape = ModelShape.llama(layers=16, hidden=64, heads=2, kv_heads=2, vocab=256)
    config = llama_config(
        layers=shape.layers,
        hidden=shape.hidden,
        heads=shape.heads,
        vocab=shape.vocab,
        max_seq=args.seq,
    )
    model = build_llama(config)
    if args.recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    warm = token_batch(1, 1, 16, shape.vocab)  # load the kernels and thread pools before the cap
    model(**warm).loss.backward()
    model.zero_grad(set_to_none=True)
    batch = token_batch(0, args.batch, args.seq, shape.vocab)
    tokens = args.batch * args.seq
    per_layer = (
        4 * tokens * shape.hidden
        if args.recompute
        else layer_activation_bytes(shape, tokens, args.seq, 4)
    )
    predicted = shape.layers * per_layer + head_activation_bytes(shape, tokens, 4)
    mapped = psutil.Process().memory_info().vms
    rss_before = psutil.Process().memory_info().rss
    cap = mapped + args.budget_mib * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    how = "recompute" if args.recompute else "no recompute"
    say(
        f"address space capped at {args.budget_mib} MiB above the "
        f"{mapped / 2**20:,.0f} MiB already mapped; "
        f"predicted activations {predicted / 2**20:,.0f} MiB ({how})"
    )
    start = time.perf_counter()
    loss = model(**batch).loss
    loss.backward()
    opt.step()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    emit(
        OomStepResult,
        mode="oom",
        recompute=args.recompute,
        budget_mib=args.budget_mib,
        loss=round(loss.item(), 3),
        predicted_activation_mib=round(predicted / 2**20),
        peak_rss_mib=round(rss / 2**20),
        rss_growth_mib=round((rss - rss_before) / 2**20),
        seconds=round(time.perf_counter() - start, 1),
    )
