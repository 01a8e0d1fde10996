"""Chapter 6's and 8's GPU runs, recorded with provenance (results/<hardware>/ch08_<part>.json).

    python -m helpers.record ch08 --record                 # every part (~12 min on 2×H200)
    python -m helpers.record ch08 --record --only compare  # one part: compare, oom, tune, gemini
    python -m helpers.record ch08 --record --quick         # 1-2 min smoke run -> ch08_quick.json

Parts (all through :mod:`helpers.demos.ch08_train`, one torchrun and timeout per run; a failing
run is recorded with its error and the recording goes on):

* ``compare``: the same 0.94 B Llama, global batch 8 × 2048 tokens, bf16, under PyTorch FSDP2 and
  Colossal-AI's LowLevelZero (ZeRO-2), Gemini and HybridParallel (tp=2): tokens/s, MFU (one
  definition, ``ch09_hybrid.mfu``), peak memory, losses against a single-GPU reference. Whether
  DeepSpeed can be imported on the box is recorded too (it was not installed there).
* ``oom``: the out-of-memory lab. Each process may use ``cap`` GiB of its GPU, chosen halfway
  between Chapter 7's predicted peaks (:func:`helpers.cost.memory_llama.predict`) of the failing
  layout and of the two fixes; the failing layout is also run without a cap to measure its real
  peak.
* ``gemini``: the compare run's Gemini NaN, with and without Gemini's asynchronous gradient reduce.
* ``tune``: one knob at a time from a deliberately poor layout, each run with the PyTorch profiler's
  per-rank compute / communication split (:mod:`helpers.train.profiling`).
"""

from __future__ import annotations

import importlib.util
import time

from helpers.parallel.degrees import degree_flags
from helpers.record import cli
from helpers.record.runner import run_part
from helpers.record.results import save
from helpers.parallel.train_layout import TrainLayout
from helpers.cost.memory_llama import predict

DEMO = "ch08_train"
PARTS = ("compare", "oom", "tune", "gemini")
NPROC = 2
BIG = "--layers 16 --hidden 2048 --heads 16 --kv_heads 16 --vocab 32000".split()  # 0.94 B
COMPARE_COMMON = BIG + (
    "--precision bf16 --seq 2048 --steps 8 --warmup 2 --ref_steps 3 --profile 2".split()
)
COMPARE_RUNS = {  # name: flags (global batch 8 in each: micro_batch × dp)
    "PyTorch FSDP2 (fully_shard per layer, AdamW)": ["--framework", "fsdp2", "--micro_batch", "4"],
    "Colossal-AI LowLevelZero ZeRO-2": "--plugin zero --zero_stage 2 --micro_batch 4".split(),
    "Colossal-AI Gemini (ZeRO-3, static placement)": ["--plugin", "gemini", "--micro_batch", "4"],
    "Colossal-AI HybridParallel tp=2": [
        "--plugin",
        "hybrid",
        *degree_flags(tensor=2),
        "--micro_batch",
        "8",
    ],
}
# the compare run's Gemini went NaN from step 3; recorded: NaN with the async gradient reduce,
# finite without it (our reading of the source: the chunk is freed, storage.resize_(0), without
# record_stream)
GEMINI_RUNS = {
    "Gemini, async reduce (default)": ["--plugin", "gemini", "--micro_batch", "4"],
    "Gemini, enable_async_reduce=False": (
        "--plugin gemini --micro_batch 4 --plugin_kw enable_async_reduce=False".split()
    ),
}
OOM_MICRO_BATCH = 4  # Chapter 7's 0.37 B Llama (TrainLayout's default shape), seq 1024
OOM_RUNS = {  # name: (layout kwargs, capped)
    "before: DDP bf16 (HybridParallel tp=1), no cap": (
        dict(plugin="hybrid", precision="bf16"),
        False,
    ),
    "before: DDP bf16 (HybridParallel tp=1), capped": (
        dict(plugin="hybrid", precision="bf16"),
        True,
    ),
    "fix 1: ZeRO-2 (LowLevelZero), capped": (
        dict(plugin="zero", zero_stage=2, precision="bf16"),
        True,
    ),
    "fix 2: recomputation, capped": (dict(plugin="hybrid", precision="bf16", recompute=True), True),
}
TUNE_COMMON = (
    "--precision bf16 --seq 1024 --steps 6 --warmup 2 --ref_steps 0 --profile 2 --plugin hybrid "
    "--zero_stage 1"
).split()
TUNE_RUNS = [  # (knob changed, flags): each run changes one knob of the previous one
    (
        "start: tp=2, micro-batch 2, recompute on, overlap off",
        [*degree_flags(tensor=2), "--micro_batch", "2", "--recompute", "--overlap", "0"],
    ),
    (
        "TP degree 2 → 1 (dp=2)",
        [*degree_flags("tensor", tensor=1), "--micro_batch", "2", "--recompute", "--overlap", "0"],
    ),
    (
        "micro-batch 2 → 8",
        [*degree_flags("tensor", tensor=1), "--micro_batch", "8", "--recompute", "--overlap", "0"],
    ),
    (
        "overlap off → on",
        [*degree_flags("tensor", tensor=1), "--micro_batch", "8", "--recompute", "--overlap", "1"],
    ),
    (
        "recomputation on → off",
        [*degree_flags("tensor", tensor=1), "--micro_batch", "8", "--overlap", "1"],
    ),
    (
        "pipeline pp=2, 2 micro-batches of 8",
        [
            *degree_flags(pipeline=2),
            "--microbatches",
            "2",
            "--micro_batch",
            "8",
            "--zero_stage",
            "0",
        ],
    ),
    (
        "micro-batches 2 → 8 (of 2: same global batch)",
        [
            *degree_flags(pipeline=2),
            "--microbatches",
            "8",
            "--micro_batch",
            "2",
            "--zero_stage",
            "0",
        ],
    ),
]


def oom_cap_gib() -> tuple[float, dict]:
    """The cap halfway between the failing layout's predicted peak and the larger fix's, and the
    predictions."""
    peaks = {
        name: predict(TrainLayout(micro_batch=OOM_MICRO_BATCH, **kw))["peak"] / 2**30
        for name, (kw, _) in OOM_RUNS.items()
        if "no cap" not in name
    }
    before = next(v for k, v in peaks.items() if k.startswith("before"))
    fixes = max(v for k, v in peaks.items() if k.startswith("fix"))
    if not fixes < before:
        raise ValueError(
            f"the fixes' predicted peak {fixes:.2f} GiB is not below the failing {before:.2f} GiB"
        )
    return round((before + fixes) / 2, 1), {k: round(v, 2) for k, v in peaks.items()}


def _layout_flags(kw: dict) -> list[str]:
    out = []
    for k, v in kw.items():
        out += [f"--{k}"] if v is True else [f"--{k}", str(v)]
    return out


TINY = ["--layers", "2", "--hidden", "256", "--heads", "4", "--kv_heads", "4"]


def run_list(part: str, quick: bool = False) -> list[tuple[str, list[str], float]]:
    """(name, demo args, timeout_s) of each run of a part; ``quick``: a tiny model, fewer runs."""
    if part == "compare":
        if quick:
            small = "--precision bf16 --seq 256 --steps 3 --ref_steps 2 --profile 1".split()
            return [(n + " (tiny)", a + small, 400.0) for n, a in list(COMPARE_RUNS.items())[:2]]
        return [(n, COMPARE_COMMON + a + ["--name", n], 400.0) for n, a in COMPARE_RUNS.items()]
    if part == "gemini":
        runs = [
            (n, COMPARE_COMMON + a + ["--steps", "12", "--name", n], 400.0)
            for n, a in GEMINI_RUNS.items()
        ]
        return [(n + " (tiny)", a + TINY, t) for n, a, t in runs] if quick else runs
    if part == "oom":
        cap, _ = oom_cap_gib()
        runs = []
        for name, (kw, capped) in OOM_RUNS.items():
            args = _layout_flags(kw) + ["--micro_batch", str(OOM_MICRO_BATCH), "--seq", "1024"]
            args += ["--steps", "3", "--ref_steps", "0", "--name", name]
            args += ["--mem_cap_gib", str(cap)] if capped else []
            # the first Colossal-AI run on a fresh box compiles HybridAdam
            runs.append((name, args, 400.0))
        return runs[1:3] if quick else runs
    if part == "tune":
        runs = [(n, TUNE_COMMON + a + ["--name", n], 400.0) for n, a in TUNE_RUNS]
        if quick:
            return [(n + " (tiny)", a + TINY, t) for n, a, t in runs[:2]]
        return runs
    raise ValueError(f"unknown part {part!r}: one of {PARTS}")


def record(
    parts: list[str], quick: bool, budget_s: float, save_results: bool, show: str = "none"
) -> dict:
    """Every run of ``parts`` within ``budget_s``; one record per part (ch08_<part>.json), or one
    for all of them with ``quick`` (ch08_quick.json)."""
    start = time.monotonic()
    command = cli.command("ch08", ["--record", *(["--quick"] if quick else []), "--only", *parts])
    recorded: dict[str, list] = {}
    for part in parts:
        runs = run_part(
            "ch08",
            part,
            [(n, DEMO, NPROC, a, t) for n, a, t in run_list(part, quick)],
            start + budget_s,
            show,
        )
        extra = {}
        if part == "compare":
            extra["deepspeed_importable"] = importlib.util.find_spec("deepspeed") is not None
        if part == "oom":
            extra["cap_gib"], extra["predicted_peak_gib"] = oom_cap_gib()
        recorded[part] = [{"part": part, "info": extra}] + runs if extra else runs
        if save_results and not quick:
            print("[ch08] wrote", save(f"ch08_{part}", recorded[part], command), flush=True)
    if save_results and quick:
        print(
            "[ch08] wrote",
            save("ch08_quick", [r for p in parts for r in recorded[p]], command),
            flush=True,
        )
    print(f"[ch08] done in {time.monotonic() - start:.0f} s", flush=True)
    return recorded


SPEC = cli.Recorder(
    "ch08",
    "Chapters 6 and 8: frameworks compared, the out-of-memory lab, tuning, Gemini's NaN",
    "ch08_<part>.json (compare, oom, tune, gemini)",
    lambda a: record(list(a.only or PARTS), a.quick, a.budget_s, a.record, a.show),
    flags=("quick", "only", "budget_s", "show"),
    quick="small runs of every part (ch08_quick.json)",
    only=PARTS,
    budget_s=570,
)
