"""Chapter 8's flagship run list: one 0.94 B Llama under FSDP2 and Colossal-AI, one knob a row.

Every run is :mod:`helpers.demos.ch08_train` in its own torchrun: the same model (16 layers, hidden
2048, 32 000-token vocabulary), the same fresh token batches (micro-batch 8 × 2048 tokens per GPU
unless the run says otherwise) and bf16 with fp32 master weights. The list is a tuning story: the
baselines, then one knob per row (:mod:`helpers.train.speed`), then FSDP2 given the same knobs so
that the comparison stays fair (Chapter 8, "The flagship run").

On one GPU the list is :data:`WORLD1_RUNS`: the eager baseline and the best Colossal-AI and FSDP2
runs of the 2-GPU list, the same flags with fewer steps (:data:`WORLD1_COMMON`), each naming the
2-GPU run it is shown beside (:func:`helpers.chapters.ch08_one_gpu.world_rows`). The reference is
then the same one-GPU training, so the loss check still holds every run to
``--fail_on_divergence``.
"""

from __future__ import annotations
from helpers.train.framework_run import parser

NPROC = 2
SHAPE = "--layers 16 --hidden 2048 --heads 16 --kv_heads 16 --vocab 32000".split()
# |mean rank loss − reference| over the reference steps, bf16 (ch09's runs: ≤ 0.01)
LOSS_TOLERANCE = 0.05
CHECK = ["--fail_on_divergence", str(LOSS_TOLERANCE)]  # a run whose loss leaves the reference fails
COMMON = "--precision bf16 --seq 2048 --steps 10 --warmup 3 --ref_steps 3 --profile 1".split()
COMMON += CHECK
FSDP2 = ["--framework", "fsdp2"]
ZERO2 = ["--plugin", "zero", "--zero_stage", "2"]
BUCKET = ["--plugin_kw", "reduce_bucket_size_in_m=128"]
TUNED = ZERO2 + BUCKET + ["--compile"]
RUNS = [  # (name, flags): the knob each row changes is in its name
    ("FSDP2, eager", FSDP2 + ["--micro_batch", "8"]),
    (
        "HybridParallel ZeRO-2, eager",
        ["--plugin", "hybrid", "--zero_stage", "2", "--micro_batch", "8"],
    ),
    ("LowLevelZero ZeRO-2, eager", ZERO2 + ["--micro_batch", "8"]),
    ("+ reduce buckets 12 → 128 M elements", ZERO2 + BUCKET + ["--micro_batch", "8"]),
    ("+ torch.compile per layer", TUNED + ["--micro_batch", "8"]),
    (
        "+ fused torch AdamW instead of HybridAdam",
        TUNED + ["--optim", "adamw_fused", "--micro_batch", "8"],
    ),
    ("+ micro-batch 8 → 16", TUNED + ["--optim", "adamw_fused", "--micro_batch", "16"]),
    (
        "+ overlap the parameter all-gather",
        TUNED
        + [
            "--optim",
            "adamw_fused",
            "--micro_batch",
            "16",
            "--plugin_kw",
            "overlap_allgather=True",
        ],
    ),
    (
        "+ gradient norm kept on the GPU (no host sync in step)",
        TUNED
        + [
            "--optim",
            "adamw_fused",
            "--micro_batch",
            "16",
            "--plugin_kw",
            "overlap_allgather=True",
            "--norm_on_device",
        ],
    ),
    (
        "ZeRO-2 → ZeRO-1 (all-reduce, no gradient shards)",
        ["--plugin", "zero", "--zero_stage", "1"]
        + BUCKET
        + ["--compile", "--optim", "adamw_fused", "--micro_batch", "16"],
    ),
    ("FSDP2 + torch.compile per layer", FSDP2 + ["--compile", "--micro_batch", "8"]),
    (
        "FSDP2 + torch.compile + fused AdamW",
        FSDP2 + ["--compile", "--optim", "adamw_fused", "--micro_batch", "8"],
    ),
    (
        "FSDP2 + torch.compile, micro-batch 16",
        FSDP2 + ["--compile", "--optim", "adamw_fused", "--micro_batch", "16"],
    ),
]
# fewer timed steps than COMMON: the one-GPU call is ~8 minutes for 3 recorders
WORLD1_COMMON = "--precision bf16 --seq 2048 --steps 5 --warmup 3 --ref_steps 3 --profile 1".split()
WORLD1_COMMON += CHECK
# (name, flags, the 2-GPU run it is shown beside), in the order run: a budget cut drops the last
WORLD1_RUNS = [
    ("LowLevelZero ZeRO-2, eager", ZERO2 + ["--micro_batch", "8"], "LowLevelZero ZeRO-2, eager"),
    # overlap_allgather left out: one rank has nothing to all-gather
    (
        "ZeRO-2 + compile + fused AdamW + norm on GPU, micro-batch 16",
        TUNED + ["--optim", "adamw_fused", "--micro_batch", "16", "--norm_on_device"],
        "+ gradient norm kept on the GPU (no host sync in step)",
    ),
    (
        "FSDP2 + torch.compile, micro-batch 16",
        FSDP2 + ["--compile", "--optim", "adamw_fused", "--micro_batch", "16"],
        "FSDP2 + torch.compile, micro-batch 16",
    ),
]
# what a run costs on one H200, for the budget arithmetic: torchrun, imports, model build, boost;
# the Inductor compile of the layers (first warm-up step); one step per sequence of 2048 tokens
# (0.7 s at mbs 16)
START_S, COMPILE_S, STEP_S_PER_SEQUENCE = 20.0, 60.0, 0.7 / 16
HEAD_TO_HEAD = (
    "+ overlap the parameter all-gather",
    "+ gradient norm kept on the GPU (no host sync in step)",
    "FSDP2 + torch.compile, micro-batch 16",
)
ROUND = " · round "  # a repeated run's name: "<run> · round 2"


def run_list(
    quick: bool = False,
    only: list[str] | None = None,
    cpu: bool = False,
    rounds: int = 1,
    gpus: int = NPROC,
) -> list[tuple[str, list[str], float]]:
    """(name, demo args, timeout_s) of each run; ``quick`` = a tiny shape, 4 steps; ``cpu`` =
    FSDP2's only.

    ``rounds`` > 1 repeats the whole list that many times, interleaved (A B C A B C ...), so that a
    drift of the machine over the minutes hits every run alike; names gain " · round k".
    ``gpus`` = 1: :data:`WORLD1_RUNS` with :data:`WORLD1_COMMON` instead of RUNS with COMMON."""
    if rounds > 1:
        once = run_list(quick, only, cpu, gpus=gpus)
        return [(f"{n}{ROUND}{k}", a, t) for k in range(1, rounds + 1) for n, a, t in once]
    runs, common = (
        (RUNS, COMMON) if gpus != 1 else ([(n, a) for n, a, _ in WORLD1_RUNS], WORLD1_COMMON)
    )
    names = [n for n, _ in runs]
    for name in only or []:
        if name not in names:
            raise ValueError(
                f"unknown run {name!r}"
                + (" at --gpus 1" if gpus == 1 else "")
                + f": one of {names}"
            )
    chosen = [(n, a) for n, a in runs if not only or n in only]
    if cpu:  # gloo: only FSDP2 runs there (Colossal-AI's ZeRO plugins need one CUDA GPU per rank)
        chosen = [(n, a) for n, a in chosen if a[:2] == FSDP2]
    if quick:
        tiny = "--layers 2 --hidden 256 --heads 4 --kv_heads 4 --vocab 512 --precision bf16".split()
        tiny += "--seq 256 --steps 3 --warmup 1 --ref_steps 2".split() + CHECK
        return [(n + " (tiny)", tiny + a + ["--name", n], 300.0) for n, a in chosen]
    return [(n, SHAPE + common + a + ["--name", n], 420.0) for n, a in chosen]


def estimate_s(args: list[str]) -> float:
    """Seconds one run of ``args`` should take on one H200 (START_S + COMPILE_S when compiled +
    every step the demo takes, the reference's included): the budget arithmetic of the one-GPU
    call."""
    ns = parser().parse_args(args)
    steps = ns.ref_steps + ns.warmup + ns.steps + ns.profile
    return (
        START_S + (COMPILE_S if ns.compile else 0.0) + steps * STEP_S_PER_SEQUENCE * ns.micro_batch
    )
