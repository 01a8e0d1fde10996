"""Chapter 8's numbers, computed for the notebook to print, check and glue onto the page.

:func:`lab_numbers` reads the failure labs the notebook has just run (their logs);
:func:`oom_numbers` and :func:`tune_numbers` read the two-GPU records ``ch08_oom`` and
``ch08_tune``; :func:`flagship_numbers` the flagship's run list and head-to-head on two GPUs and
its one-GPU record, and :func:`check_flagship_numbers` checks what the page says of them. The
one-H200 lever, head-to-head and FP8 records are :mod:`helpers.chapters.ch08_lever_numbers`.
Keys are ``ch08-…``; values are unrounded (the page formats them); percentages are in per cent.
"""

from __future__ import annotations

import math
import re

from helpers.chapters.ch08_troubleshooting import oom_info, points
from helpers.record.flagship_summary import compare, summarize


def _rank0_steps(log: str) -> list[tuple[int, float, float]]:
    """(step, loss, gradient norm) of rank 0's ``rank 0 step S loss L grad_norm G`` lines."""
    found = re.findall(r"rank 0 step (\d+) loss (\S+) grad_norm (\S+)", log)
    return [(int(s), float(loss), float(g)) for s, loss, g in found]


def lab_numbers(labs: dict, detail: dict) -> dict:
    """The failure labs: the NaN lab's growth per step and the steps where the gradient norm and
    the loss stop being finite; the CPU out-of-memory lab's predicted activations without and
    with recomputation; the mismatch lab under ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (``detail``,
    :func:`helpers.chapters.ch08_labs.mismatch_under_detail`): the steps rank 0 finished and
    the number of the collective that failed its check."""
    steps = _rank0_steps(labs["nan_loss"].log)
    finite = [(s, loss) for s, loss, _ in steps if math.isfinite(loss)]
    (s0, first), (s1, last) = finite[1], finite[-1]  # from step 1: step 0 is before any update
    full = re.search(r"predicted activations ([\d,]+) MiB", labs["cpu_oom"].log)
    fixed = re.search(r"predicted activations ([\d,]+) MiB", labs["cpu_oom_recompute"].log)
    full_mib, fixed_mib = (int(m.group(1).replace(",", "")) for m in (full, fixed))
    budget = int(re.search(r"capped at ([\d,]+) MiB above", labs["cpu_oom"].log).group(1))
    done = len(detail["steps"][0])
    return {
        "ch08-nan-growth": (last / first) ** (1 / (s1 - s0)),
        "ch08-nan-inf-step": next(s for s, _, g in steps if not math.isfinite(g)),
        "ch08-nan-nan-step": next(s for s, loss, _ in steps if math.isnan(loss)),
        "ch08-cpu-oom-full-mib": full_mib,
        "ch08-cpu-oom-recompute-mib": fixed_mib,
        "ch08-cpu-oom-per-seq-mib": full_mib / 16,  # the lab's 16 sequences
        "ch08-cpu-oom-fits": int(budget // (full_mib / 16)),
        "ch08-detail-steps-done": done,
        "ch08-detail-seq": detail["sequence_number"],
        "ch08-detail-per-step": detail["sequence_number"] // done,
    }


def oom_numbers() -> dict:
    """The GPU out-of-memory lab (``ch08_oom``): the cap, Chapter 7's predicted peaks, the
    measured peaks (the larger rank), ZeRO-2's reserved peak under the cap, the throughputs and
    how far the model undershot the measured peaks."""
    info = oom_info()
    runs = {p["name"].split(":")[0]: p for p in points("oom")}
    uncapped = next(p for p in points("oom") if "no cap" in p["name"])
    capped = next(p for n, p in runs.items() if n == "before" and "capped" in p["name"])
    zero, recompute = runs["fix 1"], runs["fix 2"]
    predicted = dict(zip(("ddp", "zero2", "recompute"), info["predicted_peak_gib"].values()))
    reserved = _reserved_mib("fix 1")
    out = {
        "ch08-oom-cap-gib": info["cap_gib"],
        "ch08-oom-cap-mib": info["cap_gib"] * 1024,
        **{f"ch08-oom-pred-{k}-gib": v for k, v in predicted.items()},
        "ch08-oom-ddp-peak-mib": 1024 * uncapped["peak_gib"],
        "ch08-oom-ddp-peak-low-mib": 1024 * min(uncapped["peak_gib_per_rank"]),
        "ch08-oom-zero2-peak-mib": 1024 * zero["peak_gib"],
        "ch08-oom-recompute-peak-mib": 1024 * recompute["peak_gib"],
        "ch08-oom-zero2-reserved-mib": reserved,
        "ch08-oom-zero2-spare-mib": info["cap_gib"] * 1024 - reserved,
        "ch08-oom-zero2-unused-gib": (reserved - 1024 * zero["peak_gib"]) / 1024,
        "ch08-oom-ddp-tps": uncapped["tokens_per_s"],
        "ch08-oom-zero2-tps": zero["tokens_per_s"],
        "ch08-oom-recompute-tps": recompute["tokens_per_s"],
        "ch08-oom-zero2-ratio": zero["tokens_per_s"] / uncapped["tokens_per_s"],
        "ch08-oom-recompute-ratio": recompute["tokens_per_s"] / uncapped["tokens_per_s"],
        "ch08-oom-capped-oom": int(capped["oom"]),
    }
    under = [p["peak_gib"] - predicted[k] for k, p in (("ddp", uncapped), ("zero2", zero))] + [
        recompute["peak_gib"] - predicted["recompute"]
    ]
    out["ch08-oom-under-lo-gib"], out["ch08-oom-under-hi-gib"] = min(under), max(under)
    return out


def _reserved_mib(prefix: str) -> float:
    """The allocator's reserved peak (the larger rank) of the ``ch08_oom`` run named ``prefix``."""
    from helpers.chapters.ch08_troubleshooting import recorded

    run = next(r for r in recorded("oom")["runs"] if r.get("name", "").startswith(prefix))
    return max(r["reserved_mib"] for r in run["results"])


def tune_numbers() -> dict:
    """The one-knob-at-a-time runs (``ch08_tune``), ``ch08-tune<k>-…`` for run k in recorded
    order: MFU, tokens/s, timed step, peak, the gain over the run before (the pipeline branch's
    first run against the data-parallel run it branches from), and per rank the profiled
    compute and exposed communication (ms per step) and the communication share."""
    runs = points("tune")
    out: dict = {}
    for k, p in enumerate(runs):
        key = f"ch08-tune{k}"
        out[f"{key}-mfu"] = 100 * p["mfu"]
        out[f"{key}-tps"] = p["tokens_per_s"]
        out[f"{key}-step-ms"] = 1000 * p["seconds_per_step"]
        out[f"{key}-peak-gib"] = p["peak_gib"]
        if k:
            out[f"{key}-gain"] = p["tokens_per_s"] / runs[k - 1]["tokens_per_s"]
        for rank, q in enumerate(p["profiles"]):
            out[f"{key}-r{rank}-compute-ms"] = q["compute_ms"]
            out[f"{key}-r{rank}-exposed-ms"] = q["exposed_comm_ms"]
            out[f"{key}-r{rank}-share"] = 100 * q["comm_share"]
    out["ch08-tune-pp-below"] = 100 * (1 - runs[5]["tokens_per_s"] / runs[4]["tokens_per_s"])
    out["ch08-tune-pp-drop"] = runs[5]["tokens_per_s"] / runs[6]["tokens_per_s"]
    out["ch08-tune-recompute-extra-gib"] = runs[4]["peak_gib"] - runs[3]["peak_gib"]
    q0 = runs[0]["profiles"][0]
    out["ch08-tune0-r0-busy-ms"] = q0["compute_ms"] + q0["exposed_comm_ms"]
    return out


# the flagship's runs on two GPUs: the short name the keys use, and the fields the chapter quotes
FLAGSHIP = {
    "FSDP2, eager": ("fsdp-eager", ("mfu",)),
    "HybridParallel ZeRO-2, eager": ("hybrid-eager", ("mfu",)),
    "LowLevelZero ZeRO-2, eager": (
        "eager",
        ("mfu", "step", "matmul", "copy", "elementwise", "comm"),
    ),
    "+ reduce buckets 12 → 128 M elements": ("buckets", ("step", "copy", "comm")),
    "+ torch.compile per layer": (
        "compile",
        ("mfu", "step", "copy", "elementwise", "triton", "optimizer"),
    ),
    "+ fused torch AdamW instead of HybridAdam": ("fused-adam", ()),
    "+ micro-batch 8 → 16": (
        "mbs16",
        ("mfu", "tps", "peak", "compute", "idle", "matmul", "comm"),
    ),
    "ZeRO-2 → ZeRO-1 (all-reduce, no gradient shards)": ("zero1", ("idle", "comm")),
    "FSDP2 + torch.compile per layer": ("fsdp-compile", ("optimizer",)),
    "FSDP2 + torch.compile + fused AdamW": ("fsdp-fused-adam", ("optimizer",)),
    "FSDP2 + torch.compile, micro-batch 16": (
        "fsdp-mbs16",
        ("mfu", "tps", "peak", "compute", "idle", "matmul"),
    ),
    "+ overlap the parameter all-gather": ("overlap", ("copy", "elementwise")),
    "+ gradient norm kept on the GPU (no host sync in step)": (
        "norm",
        ("compute", "idle", "copy", "elementwise"),
    ),
}
KINDS = {  # kernel classes (helpers.train.profiling.KERNEL_CLASSES) by the short names of keys
    "matmul": "matmul",
    "attention": "attention",
    "triton (compiled)": "triton",
    "copy/cast": "copy",
    "elementwise/other": "elementwise",
    "optimizer": "optimizer",
    "communication": "comm",
}


def run_numbers(key: str, s: dict, fields: tuple[str, ...]) -> dict:
    """The ``fields`` of one summarized run: ``mfu``, ``mfu-all``, ``tps`` (per GPU), ``peak``,
    ``step`` (the timed step), ``compute`` and ``idle`` (step − compute) and the kernel classes
    of :data:`KINDS` (ms per step), each under ``<key>-<field>`` with its unit."""
    ms = (s.get("kernels") or {}).get("ms", {})
    step = 1000 * s["seconds_per_step"]
    compute = sum(v for c, v in ms.items() if c != "communication")
    values = {
        "mfu": 100 * s["mfu"],
        "mfu-all": 100 * s["mfu_all_params"],
        "tps": s["tokens_per_s_per_gpu"],
        "peak-gib": s["peak_gib"],
        "step-ms": step,
        "compute-ms": compute,
        "idle-ms": step - compute,
        **{f"{short}-ms": ms.get(c, 0.0) for c, short in KINDS.items()},
    }
    names = {f: next(k for k in values if k == f or k.startswith(f + "-")) for f in fields}
    return {f"{key}-{names[f]}": values[names[f]] for f in fields}


def flagship_numbers(runs: dict, h2h: dict, one: dict | None) -> dict:
    """The flagship on two GPUs: every run of the run list (``ch08-flag-<run>-…``), each tuning
    step's gain where both runs are in one record (``ch08-flag-<run>-gain``), the head-to-head's
    medians and first rounds (``ch08-h2h-<run>-…``), and the one-GPU runs beside the two-GPU
    ones (``ch08-one-…``)."""
    from helpers.chapters.ch08_tuning import step_rows

    out: dict = {}
    summaries = {r["name"]: summarize(r["name"], r) for r in runs["runs"]}
    for name, s in summaries.items():
        if s["ok"] and name in FLAGSHIP:
            out |= run_numbers(f"ch08-flag-{FLAGSHIP[name][0]}", s, FLAGSHIP[name][1])
    for row in step_rows(runs, h2h):
        if row["throughput ×"] != "not in one record":
            out[f"ch08-flag-{FLAGSHIP[row['step']][0]}-gain"] = float(row["throughput ×"])
    rounds = [summarize(r["name"], r) for r in h2h["runs"]]
    for g in compare(rounds):
        slug, fields = FLAGSHIP[g["name"]]
        key = f"ch08-h2h-{slug}"
        out |= {
            f"{key}-median": g["median"],
            f"{key}-mfu": 100 * g["mfu_median"],
            f"{key}-mfu-all": 100 * g["mfu_all_params_median"],
            f"{key}-spread": 100 * g["spread"],
            f"{key}-ratio": g["vs_fsdp2"],
            f"{key}-rounds": g["rounds"],
        }
        first = next(r for r in rounds if r["ok"] and r["name"].startswith(g["name"]))
        out |= run_numbers(f"{key}-r1", first, fields)
    norm, fsdp = (
        [r["tokens_per_s_per_gpu"] for r in rounds if r["ok"] and r["name"].startswith(n)]
        for n in ("+ gradient norm", "FSDP2")
    )
    margins = sorted(100 * (a / b - 1) for a, b in zip(norm, fsdp))
    out["ch08-h2h-margin-lo"], out["ch08-h2h-margin-hi"] = margins[0], margins[-1]
    return out | (one_gpu_numbers() if one else {})


def one_gpu_numbers() -> dict:
    """The flagship's best runs at world size 1 beside the same runs on two GPUs
    (:func:`helpers.chapters.ch08_one_gpu.world_rows`): tokens/s per GPU, MFU and the ratio per
    run (``ch08-one-<k>-…``, k in the table's order), the share of one GPU's speed two GPUs kept,
    the eager run's peak on two GPUs and on one, and the two frameworks' gap on one GPU."""
    from helpers.chapters.ch08_one_gpu import world_rows

    rows = world_rows()
    ones, twos = rows[1::2], rows[0::2]
    out: dict = {}
    for k, (one, two) in enumerate(zip(ones, twos)):
        out[f"ch08-one-{k}-tps"] = int(one["tokens/s/GPU"].replace(",", ""))
        out[f"ch08-one-{k}-mfu"] = float(one["MFU %"])
        out[f"ch08-one-{k}-ratio"] = float(one["1 GPU / 2 GPUs (tokens/s per GPU)"])
    kept = [100 / out[f"ch08-one-{k}-ratio"] for k in range(len(ones))]
    out["ch08-one-kept-lo"], out["ch08-one-kept-hi"] = min(kept), max(kept)
    out["ch08-one-eager-peak-two-gib"] = twos[0]["peak GiB"]
    out["ch08-one-eager-peak-one-gib"] = ones[0]["peak GiB"]
    a, b = out["ch08-one-1-tps"], out["ch08-one-2-tps"]
    out["ch08-one-framework-gap"] = 100 * abs(a - b) / max(a, b)
    return out


def check_flagship_numbers(fl: dict) -> None:
    """What the page says of :func:`flagship_numbers`: compiling is the big step, Colossal-AI and
    FSDP2 are at parity, ZeRO-1's extra gradient bytes are hidden, one GPU is faster per GPU."""
    gains = [fl[f"ch08-flag-{k}-gain"] for k in ("buckets", "compile", "fused-adam", "mbs16")]
    assert max(gains) == fl["ch08-flag-compile-gain"] > 1.2  # compiling is the big step
    assert 1 < fl["ch08-h2h-norm-ratio"] < 1 + fl["ch08-h2h-overlap-spread"] / 100  # parity
    assert abs(fl["ch08-flag-zero1-gain"] - 1) < 0.005  # twice the gradient bytes, hidden
    assert fl["ch08-flag-zero1-comm-ms"] > fl["ch08-flag-mbs16-comm-ms"]
    assert all(fl[f"ch08-one-{k}-ratio"] > 1 for k in range(3))  # one GPU: nothing to communicate
