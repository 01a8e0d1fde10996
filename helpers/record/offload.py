"""Chapter 7's activation offload on the flagship Llama, one GPU: memory saved against speed lost.

    python -m helpers.record offload --record --gpus 1   # results/1x<GPU>/ch07_offload.json
    python -m helpers.record offload --quick --gpus 1    # micro-batches 2 and 4, about a minute

One process, one GPU: Chapter 8's flagship model and data (a 0.94 B Llama, 16 layers of width
2048, sequence 2048, the same token batches, bf16 under FSDP2 with fp32 masters and fused AdamW,
:class:`helpers.parallel.fsdp2.FSDP2Trainer`), eager layers so that what autograd saves is what
Chapter 7's model counts. :data:`CONFIGS` are measured in order, each on a freshly built model:
at micro-batch b the baseline, :class:`helpers.train.offload.ActivationOffload`, torch's
``save_on_cpu(pin_memory=True)`` around the same layers and full recomputation; at a larger
micro-batch B recomputation, the baseline (out of memory, if the model is right) and offload. b
and B come from the memory model (:func:`choose`) unless given. Each row: tokens/s over the timed
steps (median, min, max), ``max_memory_allocated``, the losses against the reference run of its
micro-batch (same batches; the flagship's tolerance) and the bytes moved to the host per step.
The same run measures the pinned host↔device copy bandwidth. An out-of-memory error is a row.
"""

from __future__ import annotations

import functools
import json
import time

from helpers.cost.memory_llama import predict
from helpers.cost.memory_plan import OUTSIDE_ALLOCATOR_GIB, PlanLayout, fsdp_states
from helpers.models.shape import ModelShape
from helpers.record import cli
from helpers.record.flagship_runs import LOSS_TOLERANCE
from helpers.record.results import format_table, save
from helpers.run.env import check_keys
from helpers.run.result_types.ch07 import OffloadRun

GIB = 2**30
SHAPE = ModelShape.llama(layers=16, hidden=2048, heads=16, kv_heads=16, vocab=32000, seq_len=2048)
SEQ, LR = 2048, 3e-4
RECORD = "ch07_offload"
HOST_SHARE = 0.7  # of the host memory free at the start: the most the offload may pin
# (key, mode, micro-batch "b" or "B"), in the order run: a host- or GPU-hungry row comes late
CONFIGS = (
    ("baseline", "none", "b"),
    ("offload", "offload", "b"),
    ("save_on_cpu", "save_on_cpu", "b"),
    ("recompute", "recompute", "b"),
    ("recompute, larger micro-batch", "recompute", "B"),
    ("baseline, larger micro-batch", "none", "B"),
    ("offload, larger micro-batch", "offload", "B"),
)


def predicted(mode: str, micro_batch: int) -> dict:
    """Chapter 7's model of one row: ``allocated`` (``max_memory_allocated``), ``total`` (plus
    what the allocator does not see), ``offloaded`` (bytes to the host per step)."""
    layout = PlanLayout(
        name=mode,
        plugin="hybrid",
        precision="bf16",
        zero_stage=3,
        world=1,
        micro_batch=micro_batch,
        seq=SEQ,
        shape=SHAPE,
        recompute=mode == "recompute",
        offload_activations=mode == "offload",
    )
    p = predict(layout, 0, states_of=fsdp_states)
    return {
        "allocated": p["peak"],
        "total": p["peak"] + OUTSIDE_ALLOCATOR_GIB * GIB,
        "offloaded": p["offloaded"],
        "activations": p["activations"],
        "phase": p["peak_phase"],
    }


def choose(gpu_bytes: float, host_free: float, quick: bool = False) -> dict:
    """Micro-batches b and B: b = 16 (the flagship's) on a GPU of 100 GiB or more, else 8; B = the
    smallest multiple of 4 above b at which the model says the baseline does not fit while offload
    fits the GPU and :data:`HOST_SHARE` of the free host memory; failing that, the largest up to 2b
    whose offloaded bytes fit the host (host memory, not the GPU's, is then the limit)."""
    if quick:
        return {"b": 2, "B": 4, "why": "--quick"}
    b = 16 if gpu_bytes >= 100 * GIB else 8
    host_ok = [
        m
        for m in range(b + 4, 4 * b + 1, 4)
        if predicted("offload", m)["offloaded"] <= HOST_SHARE * host_free
    ]
    oom = next(
        (m for m in range(b + 4, 4 * b + 1, 4) if predicted("none", m)["total"] > gpu_bytes), None
    )
    if oom is not None and oom in host_ok and predicted("offload", oom)["total"] <= gpu_bytes:
        return {
            "b": b,
            "B": oom,
            "why": "the smallest micro-batch the model says the baseline cannot fit",
        }
    fallback = [m for m in host_ok if m <= 2 * b]
    big = fallback[-1] if fallback else b + 4
    return {
        "b": b,
        "B": big,
        "why": "host memory: the baseline's out-of-memory micro-batch "
        f"({oom}) would pin more than {HOST_SHARE:.0%} of the free host memory",
    }


def verdicts(runs: list[dict]) -> list[dict]:
    """Each row's losses against the first row that ran at its micro-batch (the baseline at b,
    recomputation at B; the same batches): ``loss_reference``, ``max_loss_gap``, ``loss_ok``
    (within the flagship's tolerance, :data:`helpers.record.flagship_runs.LOSS_TOLERANCE`)."""
    out = []
    for row in runs:
        row = {k: v for k, v in row.items() if k not in ("loss_reference", "max_loss_gap")}
        ref = next(
            (r for r in runs if r.get("ok") and r["micro_batch"] == row["micro_batch"]), None
        )
        if row.get("ok"):
            finite = all(x == x and abs(x) != float("inf") for x in row["losses"])
            row["loss_ok"] = finite
            if ref is not None and ref["name"] != row["name"]:
                gap = max(abs(a - b) for a, b in zip(row["losses"], ref["losses"]))
                row.update(loss_reference=ref["name"], max_loss_gap=round(gap, 4))
                row["loss_ok"] = finite and gap <= LOSS_TOLERANCE
        out.append(row)
    return out


def run_all(args, measure_row, bandwidth: dict, gpu_bytes: float, host_free: float, command: str):
    """Every row of :data:`CONFIGS` in order, the record saved after each (a cut keeps what ran);
    ``measure_row(mode, micro_batch, warmup, steps)`` measures one. Returns the record's fields."""
    start, runs = time.monotonic(), []
    choice = choose(gpu_bytes, host_free, args.quick)
    if args.micro_batch:  # given: B defaults to twice b
        choice.update(b=args.micro_batch, B=2 * args.micro_batch, why="--micro_batch")
    if args.large_micro_batch:
        choice.update(B=args.large_micro_batch, why="--large_micro_batch")
    choice.update(
        gpu_bytes=gpu_bytes,
        host_free_bytes=host_free,
        predicted_gib={
            f"{m} {s}": round(predicted(m, choice[s])["total"] / GIB, 2)
            for m in ("none", "offload", "recompute")
            for s in ("b", "B")
        },
    )
    print(f"[offload] micro-batches b={choice['b']}, B={choice['B']}: {choice['why']}", flush=True)
    warmup, steps = (1, 2) if args.quick else (args.warmup, args.steps)
    extra = {"choice": choice, "bandwidth": bandwidth, "seq": SEQ, "loss_tolerance": LOSS_TOLERANCE}
    extra.update(warmup=warmup, steps=steps, shape={"layers": SHAPE.layers, "hidden": SHAPE.hidden})
    for name, mode, size in CONFIGS:
        mbs, left = choice[size], args.budget_s - (time.monotonic() - start)
        row = {"name": name, "size": size}
        if left < 30:
            row.update(mode=mode, micro_batch=mbs, ok=False, oom=False, not_run="budget spent")
        else:
            print(
                f"[offload] {name}: micro-batch {mbs}, {left:.0f} s of the budget left", flush=True
            )
            t0 = time.monotonic()
            row.update(
                measure_row(mode, mbs, warmup, steps), seconds=round(time.monotonic() - t0, 1)
            )
        runs = verdicts(runs + [row])
        check_keys(OffloadRun, runs[-1])  # the row the chapter reads (Chapter 7's OffloadRun)
        shown = {k: v for k, v in runs[-1].items() if k not in ("losses", "step_seconds")}
        print(json.dumps(shown), flush=True)
        if args.record:
            path = save(
                RECORD + ("_quick" if args.quick else ""), runs, command, args.copy_to, extra
            )
            print(f"[offload] wrote {path}", flush=True)
    print(format_table([_brief(r) for r in runs], list(_brief(runs[0]))), flush=True)
    return {"runs": runs, **extra}


def _brief(row: dict) -> dict:
    """A row of the closing table."""
    return {
        "run": row["name"],
        "mbs": row["micro_batch"],
        "tokens/s": row.get("tokens_per_s", "-"),
        "peak GiB": row.get("peak_gib", "OOM" if row.get("oom") else "-"),
        "to host GB": round(row.get("offloaded_bytes", 0) / 1e9, 1) if row.get("ok") else "-",
        "loss ok": row.get("loss_ok", "-"),
    }


NO_GPU = (
    "offload: this recorder needs a CUDA GPU (it moves activations between GPU and host memory "
    "and times it); this machine has none. On a CPU, tests/test_offload.py checks the gradients."
)


def record(args) -> dict:
    """The recording: refuses without a GPU; one process group of one rank for FSDP2; the copy
    bandwidth; then :func:`run_all`."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(NO_GPU)
    import torch.distributed as dist

    from helpers.train.offload_run import (  # defers torch: the CPU refusal runs without it
        copy_bandwidth,
        host_free_bytes,
        measure,
    )

    words = ["--record"] * args.record + ["--quick"] * args.quick + ["--gpus", "1"]
    words += [
        f"--{k}={getattr(args, k)}"
        for k in ("micro_batch", "large_micro_batch")
        if getattr(args, k)
    ]
    if not dist.is_initialized():
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    bandwidth = copy_bandwidth((64,) if args.quick else (64, 256, 1024))
    print(f"[offload] pinned copies, GB/s: {json.dumps(bandwidth)}", flush=True)
    gpu_bytes = torch.cuda.get_device_properties(0).total_memory
    out = run_all(
        args,
        functools.partial(measure, SHAPE, SEQ, LR),
        bandwidth,
        gpu_bytes,
        host_free_bytes(),
        cli.command("offload", words),
    )
    dist.destroy_process_group()
    return out


def _flags(p) -> None:
    p.add_argument("--micro_batch", type=int, default=None, help="b (default: chosen by the model)")
    p.add_argument("--large_micro_batch", type=int, default=None, help="B (default: chosen)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per row")
    p.add_argument("--steps", type=int, default=5, help="timed steps per row")


def _check(args) -> None:
    if (args.gpus or 1) != 1:
        raise ValueError(f"the offload recorder runs on one GPU: --gpus 1, not {args.gpus}")
    for name in ("micro_batch", "large_micro_batch", "warmup", "steps"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            raise ValueError(f"--{name} must be positive, got {value}")


SPEC = cli.Recorder(
    "offload",
    "Chapter 7: activation offload on the flagship Llama, one GPU, against recomputation",
    "ch07_offload.json",
    record,
    flags=("quick", "budget_s", "gpus", "copy_to"),
    quick="micro-batches 2 and 4, 1 + 2 steps per row (ch07_offload_quick.json)",
    budget_s=400,
    gpus=1,
    extra=_flags,
    check=_check,
)
