"""One row of Chapter 7's offload measurement on the flagship Llama, and the machine's limits.

Used by :mod:`helpers.record.offload`: :func:`measure` trains Chapter 8's flagship model (a 0.94 B
Llama, bf16 under FSDP2 with fp32 masters and fused AdamW, :class:`helpers.parallel.fsdp2.
FSDP2Trainer`, the flagship's token batches) for a few steps in one of four modes — ``none``,
``offload`` (:class:`helpers.train.offload.ActivationOffload`), ``save_on_cpu`` (torch's
``torch.autograd.graph.save_on_cpu(pin_memory=True)`` around the same layers) or ``recompute``
(``gradient_checkpointing_enable``, as the flagship's ``--recompute``) — and returns every step's
time and loss, the peak and the bytes sent to the host. :func:`copy_bandwidth` times pinned copies
between host and GPU; :func:`host_free_bytes` is how much host memory there is to offload into.
"""

from __future__ import annotations

import contextlib
import gc
import time

import torch

from helpers.models.llama import build_llama, token_batch
from helpers.models.shape import ModelShape
from helpers.parallel.fsdp2 import FSDP2Trainer
from helpers.train.offload import ActivationOffload, per_layer
from helpers.train.speed import make_optimizer

GIB = 2**30


def host_free_bytes() -> float:
    """Host memory this process may still use: the smaller of /proc/meminfo's MemAvailable and
    what the cgroup's limit leaves (a container's limit is often below the machine's memory)."""
    free = float("inf")
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except OSError:
        pass
    for limit, used in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            cap = open(limit).read().strip()
            if cap != "max":
                free = min(free, int(cap) - int(open(used).read()))
        except (OSError, ValueError):
            continue
    return free


def measure(
    shape: ModelShape,
    seq: int,
    lr: float,
    mode: str,
    micro_batch: int,
    warmup: int,
    steps: int,
    min_bytes: int = 2**20,
) -> dict:
    """One row on a fresh model of ``shape``: every step's seconds and loss, the peak, the bytes
    moved to the host; an exception (out of memory among them) becomes the row's error. On a
    machine without a GPU the same code runs on the CPU (a test's smoke run; no peak).
    ``min_bytes``: the smallest storage offload moves (:class:`ActivationOffload`)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpu = device.type == "cuda"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    row = {"mode": mode, "micro_batch": micro_batch, "ok": False, "oom": False}
    trainer = hooks = None
    copied = [0]  # bytes torch's save_on_cpu packed

    def counted_save_on_cpu():
        ctx = torch.autograd.graph.save_on_cpu(pin_memory=True)
        pack = ctx.pack_hook
        ctx.pack_hook = lambda t: (copied.__setitem__(0, copied[0] + t.nbytes), pack(t))[1]
        return ctx

    try:
        with device:
            model = build_llama(shape.config(attn="sdpa", max_seq=seq))
        if mode == "recompute":
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        trainer = FSDP2Trainer(
            None,
            model,
            lambda m: make_optimizer("adamw_fused", m.parameters(), lr),
            device,
            torch.bfloat16,
        )
        layers = model.model.layers
        if mode == "offload":
            hooks = ActivationOffload(layers, min_bytes)
        elif mode == "save_on_cpu":
            hooks = per_layer(layers, counted_save_on_cpu)
        context = hooks if mode == "offload" else contextlib.nullcontext()
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        seconds, losses = [], []
        for k in range(warmup + steps):
            batch = {
                n: t.to(device) for n, t in token_batch(k, micro_batch, seq, shape.vocab).items()
            }
            sync()
            start = time.perf_counter()
            with context:
                loss = trainer.model(**batch).loss
            loss.backward()
            trainer.opt.step()
            trainer.opt.zero_grad()
            losses.append(round(float(loss.detach()), 4))
            sync()
            seconds.append(time.perf_counter() - start)
            print(f"    step {k}: {seconds[-1]:.2f} s, loss {losses[-1]}", flush=True)
        timed = sorted(seconds[warmup:])
        row.update(
            ok=True,
            losses=losses,
            step_seconds=[round(s, 4) for s in seconds],
            tokens_per_s=round(micro_batch * seq / timed[len(timed) // 2]),
            tokens_per_s_min=round(micro_batch * seq / timed[-1]),
            tokens_per_s_max=round(micro_batch * seq / timed[0]),
            peak_gib=round(torch.cuda.max_memory_allocated() / GIB, 3) if gpu else None,
            reserved_gib=round(torch.cuda.max_memory_reserved() / GIB, 3) if gpu else None,
            offloaded_bytes=hooks.offloaded_bytes
            if mode == "offload"
            else copied[0] // len(seconds),
            host_pinned_bytes=hooks.host.pinned_bytes if mode == "offload" else None,
        )
    except Exception as e:  # noqa: BLE001 - a row that fails is recorded, the next one runs
        row["oom"] = isinstance(e, torch.cuda.OutOfMemoryError)
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:400]
    finally:
        sync()  # no copy is left running into memory given back below
        if hooks is not None:
            hooks.remove()
        del trainer, hooks
        model = batch = loss = None
        gc.collect()
        if gpu:
            torch.cuda.empty_cache()
            getattr(torch._C, "_host_emptyCache", lambda: None)()  # save_on_cpu's pinned blocks
    return row


def copy_bandwidth(sizes_mib=(64, 256, 1024), repeats: int = 5) -> dict:
    """Pinned host↔device copy bandwidth on the current GPU, GB/s (1e9 bytes) by direction and
    size: the median of ``repeats`` copies after one untimed, each timed with CUDA events."""
    out = {"device_to_host": {}, "host_to_device": {}}
    for mib in sizes_mib:
        device = torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")
        host = torch.empty(mib * 2**20, dtype=torch.uint8, pin_memory=True)
        ways = {"device_to_host": (host, device), "host_to_device": (device, host)}
        for way, (dst, src) in ways.items():
            seconds = []
            for r in range(repeats + 1):
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                dst.copy_(src, non_blocking=True)
                end.record()
                end.synchronize()
                seconds += [start.elapsed_time(end) / 1e3] if r else []
            out[way][str(mib)] = round(device.numel() / sorted(seconds)[len(seconds) // 2] / 1e9, 2)
        del device, host
    return out
