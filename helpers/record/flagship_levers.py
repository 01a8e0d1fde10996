"""Chapter 8's flagship on one H200, one lever per row (Chapter 8, "Levers, one row each").

    python -m helpers.record flagship --record --gpus 1 --levers levers   # flagship_levers.json
    python -m helpers.record flagship --record --gpus 1 --levers h2h      # flagship_levers_h2h.json
    python -m helpers.record flagship --record --gpus 1 --levers fp8      # flagship_fp8.json

Every run is :mod:`helpers.demos.ch08_train` at world size 1 with the flagship's shape (0.94 B
Llama, sequence 2048) and its loss check (``--fail_on_divergence``). ``levers``: :data:`BASE` (the
best one-GPU run of :mod:`helpers.record.flagship_runs`) and :data:`LEVERS`, each changing one
thing (:mod:`helpers.train.levers`, :mod:`helpers.train.speed`); ``h2h``: :data:`H2H`, the best
Colossal-AI and plain-PyTorch (FSDP2) runs alternated over :data:`ROUNDS` rounds; ``fp8``:
:data:`FP8_RUNS`, bf16 against FP8 over 20 steps with the kernel timeline and the allocator's
trace of one step. Each row is :func:`row`: the summary of
:func:`helpers.record.flagship_summary.summarize` plus the levers, the fraction of the measured
matmul ceiling (:func:`matmul_ceiling`) and, where taken, the trace and the memory snapshot.
"""

from __future__ import annotations

from helpers.record.flagship_runs import CHECK, FSDP2, ROUND, SHAPE, ZERO2
from helpers.cost.mfu import H200_BF16_PEAK
from helpers.record.flagship_summary import summarize
from helpers.run.result_types.records import FlagshipRun, RunSummary
from helpers.train.levers import sdpa_in

COMMON = "--precision bf16 --seq 2048 --steps 5 --warmup 3 --ref_steps 3 --profile 1".split()
COMMON += CHECK
BUCKET = ["--plugin_kw", "reduce_bucket_size_in_m=128"]
TUNED = ["--compile", "--optim", "adamw_fused", "--micro_batch", "16"]
BASE = ZERO2 + BUCKET + TUNED + ["--norm_on_device"]
BASE_NAME = "base: ZeRO-2 + compile per layer + fused AdamW, micro-batch 16"
LEVERS = [  # (name, the flags added to BASE): one lever each, then the levers together
    ("SDPA backend: cuDNN", ["--sdpa", "cudnn"]),
    ("fused linear CE: Liger-Kernel", ["--fused_ce", "liger"]),
    ("fused linear CE: the book's chunked", ["--fused_ce", "chunked"]),
    ("micro-batch 24", ["--micro_batch", "24"]),
    ("cuDNN + Liger CE + micro-batch 24", "--sdpa cudnn --fused_ce liger --micro_batch 24".split()),
    ("compile: the whole decoder as one graph", ["--compile_scope", "model"]),
    ("compile: max-autotune-no-cudagraphs", ["--compile_mode", "max-autotune-no-cudagraphs"]),
    (
        "CUDA graphs: whole decoder, reduce-overhead",
        "--compile_scope model --compile_mode reduce-overhead".split(),
    ),
    ("SDPA backend: flash", ["--sdpa", "flash"]),
    ("SDPA backend: memory-efficient", ["--sdpa", "efficient"]),
    ("optimizer: foreach AdamW", ["--optim", "adamw"]),
    (
        "micro-batch 32, 4 of 16 layers recomputed",
        ["--micro_batch", "32", "--recompute_layers", "4"],
    ),
    ("optimizer: Colossal-AI HybridAdam", ["--optim", "hybrid_adam"]),
    (
        "cuDNN + Liger CE + micro-batch 48",
        "--sdpa cudnn --fused_ce liger --micro_batch 48 --trace --memory_snapshot".split(),
    ),
    # the loss head at the larger micro-batch: the book's chunked CE was faster than Liger's at
    # micro-batch 16; larger chunks mean larger, more efficient matmuls; Hugging Face's own loss
    # where its fp32 logits still fit
    (
        "cuDNN + chunked CE + micro-batch 48",
        "--sdpa cudnn --fused_ce chunked --micro_batch 48".split(),
    ),
    (
        "cuDNN + chunked CE, 16k-row chunks + micro-batch 48",
        "--sdpa cudnn --fused_ce chunked --ce_chunk 16384 --micro_batch 48".split(),
    ),
    ("cuDNN + micro-batch 32", "--sdpa cudnn --micro_batch 32".split()),
    # one matmul for q/k/v and one for gate/up (helpers.train.fused_proj): wider products, and in
    # the backward one ∂x product instead of three and two adds
    ("fused projections: q/k/v and gate/up", ["--fuse_proj"]),
    (
        "cuDNN + Liger CE + fused projections + micro-batch 48",
        "--sdpa cudnn --fused_ce liger --fuse_proj --micro_batch 48".split(),
    ),
]
LEVERS_FSDP2 = [  # plain PyTorch given the same levers: the same model, data and precision
    ("FSDP2: cuDNN + Liger CE + micro-batch 48", "--sdpa cudnn --fused_ce liger --micro_batch 48"),
    (
        "FSDP2: cuDNN + Liger CE + fused projections + micro-batch 48",
        "--sdpa cudnn --fused_ce liger --fuse_proj --micro_batch 48",
    ),
]
# the levers that won (flagship_levers.json: its fastest row that kept its loss),
# with the micro-batch the fused loss makes room for
BEST = "--sdpa cudnn --fused_ce liger --micro_batch 48".split()
H2H = (
    ("Colossal-AI LowLevelZero ZeRO-2, best levers", BASE + BEST),
    ("FSDP2, best levers", FSDP2 + TUNED + BEST),
)
ROUNDS = 5
# 20 timed steps: the FP8 loss against bf16's over 20 steps
FP8_COMMON = "--precision bf16 --seq 2048 --steps 20 --warmup 2 --ref_steps 3 --profile 1".split()
FP8_COMMON += CHECK
# the rounds: 3 timed steps of ~1 s each (micro-batch 48), so that 5 rounds of both fit one call
H2H_COMMON = "--precision bf16 --seq 2048 --steps 3 --warmup 2 --ref_steps 2 --profile 1".split()
H2H_COMMON += CHECK
FP8_RUNS = [
    ("bf16, 20 steps (the FP8 rows' reference)", BASE + ["--trace", "--memory_snapshot"]),
    ("FP8 linears (torch._scaled_mm), 20 steps", BASE + ["--fp8", "torch", "--trace"]),
    (
        "Colossal-AI use_fp8=True (LowLevelZero, eager)",
        ZERO2
        + BUCKET
        + ["--optim", "adamw_fused", "--micro_batch", "16"]
        + ["--plugin_kw", "use_fp8=True"],
    ),
]
NAMES = (
    BASE_NAME,
    *(n for n, _ in LEVERS + LEVERS_FSDP2),
    *(n for n, _ in H2H),
    *(n for n, _ in FP8_RUNS),
)
PARTS = {"levers": "flagship_levers", "h2h": "flagship_levers_h2h", "fp8": "flagship_fp8"}
BULKY = ("trace", "memory_snapshot", "losses", "kernels")  # not printed, only saved
MATMUL_CEILING_TFLOPS = 790.0  # the default when no GPU measured it (KINDS.md's H200 reading)


def runs_of(part: str, quick: bool = False) -> list[tuple[str, list[str], float]]:
    """(name, demo args, timeout_s) of a part, in the order run."""
    if part == "levers":
        chosen = [(BASE_NAME, BASE)] + [(n, BASE + a) for n, a in LEVERS]
        chosen += [(n, FSDP2 + TUNED + a.split()) for n, a in LEVERS_FSDP2]
    elif part == "h2h":
        chosen = [(f"{n}{ROUND}{k}", a) for k in range(1, ROUNDS + 1) for n, a in H2H]
        # the flagship's trace and memory snapshot: after the timed steps of its first round;
        # the kernel breakdown from the first round of each run (later rounds: speed only)
        chosen = [
            (n, a + ["--profile", "0"]) if ROUND + "1" not in n else (n, a) for n, a in chosen
        ]
        chosen[0] = (chosen[0][0], chosen[0][1] + ["--trace", "--memory_snapshot"])
    elif part == "fp8":
        chosen = FP8_RUNS
    else:
        raise ValueError(f"unknown part {part!r}: one of {sorted(PARTS)}")
    if quick:  # the CPU path: FSDP2 only, a tiny shape
        tiny = "--layers 2 --hidden 256 --heads 4 --kv_heads 4 --vocab 512 --precision bf16".split()
        tiny += "--seq 256 --steps 3 --warmup 1 --ref_steps 2".split() + CHECK
        swap = {"liger": "chunked"}  # Liger needs Triton on a GPU; cuDNN/flash SDPA too
        keep = [(n, [swap.get(x, x) for x in a]) for n, a in chosen if a[:2] == FSDP2]
        keep = [(n, _without(a, "--sdpa")) for n, a in keep]
        return [(n + " (tiny)", tiny + a + ["--name", n], 300.0) for n, a in keep]
    common = {"fp8": FP8_COMMON, "h2h": H2H_COMMON}.get(part, COMMON)
    return [(n, SHAPE + common + a + ["--name", n], 300.0) for n, a in chosen]


def _without(args: list[str], flag: str) -> list[str]:
    """``args`` less every ``flag VALUE`` pair."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        else:
            out.append(a)
    return out


def matmul_ceiling(n: int = 8192, sets: int = 4) -> float | None:
    """Measured bf16 matmul TFLOP/s on this GPU (n×n×n products over ``sets`` random input pairs,
    CUDA-event timed, median of 20), or None without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    g = torch.Generator(device="cuda").manual_seed(0)
    pairs = [
        [torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2)]
        for _ in range(sets)
    ]
    times = []
    for k in range(25):
        a, b = pairs[k % sets]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        if k >= 5:
            times.append(start.elapsed_time(end) / 1000)
    times.sort()
    return round(2 * n**3 / times[len(times) // 2] / 1e12, 1)


def row(name: str, run: FlagshipRun, ceiling_tflops: float | None) -> RunSummary:
    """:func:`helpers.record.flagship_summary.summarize`'s row plus the levers and what they
    show."""
    out = summarize(name, run)
    ranks = [r for r in run.get("results", []) if "framework" in r]
    if not ranks or not out["ok"]:
        return out
    r0 = ranks[0]
    ceiling = (ceiling_tflops or MATMUL_CEILING_TFLOPS) * 1e12
    out.update(
        {k: r0.get(k) for k in ("sdpa", "fused_ce", "compile_scope", "compile_mode")},
        recompute_layers=r0.get("recompute_layers", 0),
        fp8=r0.get("fp8", "none"),
        fuse_proj=r0.get("fuse_proj", False),
        losses=r0.get("losses"),
        ceiling_fraction=round(out["mfu"] * H200_BF16_PEAK / ceiling, 4),
        trace=(r0.get("profile") or {}).get("trace"),
        memory_snapshot=r0.get("memory_snapshot"),
        matmul_ceiling_tflops=ceiling_tflops,
    )
    _check_sdpa(out)
    snap = r0.get("memory_snapshot") or {}
    if "peak_gib" in snap:  # the snapshot step's phase marks reset the allocator's peak counter:
        # the run's peak is the larger of the step before (timed_peak_gib) and the traced step's
        out["peak_gib"] = round(max(snap["peak_gib"], snap.get("timed_peak_gib", 0.0)), 1)
    return out


def _check_sdpa(out: dict) -> None:
    """A row that asked for one SDPA backend but whose profile names another's kernels measured
    something else: it fails, with the reason (:func:`helpers.train.levers.sdpa_in`)."""
    names = [n for n, _ in (out.get("kernels") or {}).get("top", [])]
    names += list((out.get("trace") or {}).get("kernels", {}))
    ran = sdpa_in(names)
    out["sdpa_ran"] = "/".join(ran) or None
    asked = out.get("sdpa")
    if asked in (None, "default", "math") or not ran or ran == [asked]:
        return
    out["ok"] = False
    out["error"] = (
        f"asked for the {asked} SDPA kernels, the profile shows {' and '.join(ran)}'s: a graph "
        "compiled under another backend came from Inductor's cache"
    )
