"""Chapter 8's one-H200 numbers, computed for the notebook to print, check and glue onto the page.

:func:`lever_numbers` reads the lever record (one lever per row, ``flagship_levers``), and
:func:`check_lever_numbers` checks what the page says of it; :func:`lever_h2h_numbers` reads
the five alternated rounds of the best levers under Colossal-AI and FSDP2, :func:`trace_numbers`
the traced flagship step and its memory snapshot beside Chapter 7's model, :func:`fp8_numbers`
the FP8 record. :func:`reference_rate_rows` lists the bf16 matmul
rate measured at each recording, for the appendix. Rows come from
:mod:`helpers.chapters.ch08_levers`; keys are ``ch08-…``, values unrounded, percentages in per
cent. The model FLOPs are the book's MFU count (:mod:`helpers.cost.mfu`): 6·Ψ_mm per token for
the matmuls, 12·L·h·s for the attention scores.
"""

from __future__ import annotations

from helpers.chapters.ch08_levers import by_name, ceiling, h2h_groups, loss_gap, rows
from helpers.cost.mfu import H200_BF16_PEAK
from helpers.record.flagship_levers import BASE_NAME
from helpers.run.result_types.records import FlagshipRecord
from helpers.train.fp8 import step_speedup

LEVERS = {  # the lever record's rows: the short names the keys use, the fields the chapter quotes
    BASE_NAME: (
        "base",
        ("tps", "mfu", "of-ref", "peak", "step", "idle", "seconds")
        + ("matmul", "attention", "ce", "triton", "optimizer"),
    ),
    "SDPA backend: cuDNN": ("cudnn", ("attention",)),
    "fused linear CE: Liger-Kernel": ("liger", ("peak", "idle", "ce")),
    "fused linear CE: the book's chunked": ("chunked", ("peak",)),
    "micro-batch 24": ("mbs24", ("peak",)),
    "cuDNN + Liger CE + micro-batch 24": ("best24", ("mfu", "peak", "idle")),
    "compile: the whole decoder as one graph": ("whole", ("idle", "seconds", "triton")),
    "compile: max-autotune-no-cudagraphs": ("autotune", ("seconds",)),
    "cuDNN + Liger CE + micro-batch 48": (
        "best48",
        ("tps", "mfu", "peak", "step", "idle", "attention", "triton", "optimizer", "copy"),
    ),
    "fused projections: q/k/v and gate/up": ("fuse", ("matmul", "triton")),
    "cuDNN + Liger CE + fused projections + micro-batch 48": ("fuse48", ()),
    "FSDP2: cuDNN + Liger CE + micro-batch 48": ("fsdp48", ("mfu",)),
    "FSDP2: cuDNN + Liger CE + fused projections + micro-batch 48": ("fsdp-fuse48", ()),
    "SDPA backend: flash": ("flash", ("attention",)),
    "CUDA graphs: whole decoder, reduce-overhead": ("graphs", ("idle",)),
    "SDPA backend: memory-efficient": ("efficient", ("attention",)),
    "optimizer: foreach AdamW": ("foreach", ("optimizer",)),
    "optimizer: Colossal-AI HybridAdam": ("hybridadam", ("optimizer",)),
    "micro-batch 32, 4 of 16 layers recomputed": ("recompute32", ("mfu", "peak")),
}
KINDS = {
    "matmul": "matmul",
    "attention": "attention",
    "triton (compiled)": "triton",
    "copy/cast": "copy",
    "cross-entropy": "ce",
    "elementwise/other": "elementwise",
    "optimizer": "optimizer",
}
UNITS = {
    "peak": "peak-gib",
    "step": "step-ms",
    "idle": "idle-ms",
    **{k: f"{k}-ms" for k in KINDS.values()},
}
SAME_RECORDING = (  # (row, row it is compared with): measured minutes apart on one machine
    ("fuse48", "best48"),
    ("fsdp48", "best48"),
    ("fsdp-fuse48", "fsdp48"),
)


def _shape(record: FlagshipRecord) -> dict:
    """The base run's Ψ_mm (parameters without the input embedding), layers, hidden size and the
    LM head's parameters (as many as the input embedding's)."""
    run = record["runs"][0]
    r0 = next(r for r in run["results"] if "params" in r)
    head = int(run["args"][run["args"].index("--vocab") + 1]) * r0["hidden"]
    return {"mm": r0["params"] - head, "layers": r0["layers"], "hidden": r0["hidden"], "head": head}


def _idle(s: dict) -> float:
    return 1000 * s["seconds_per_step"] - sum(s["kernels"]["ms"].values())


def lever_numbers(record: FlagshipRecord) -> dict:
    """Every row (``ch08-lever-<row>-…``): its gain over the base and the fields of
    :data:`LEVERS` (MFU, share of the measured reference rate, peak, step, idle time, run time,
    ms per step by kind of kernel); the rows recorded together compared directly; the base's and
    the best row's matmul rate, the best row's attention rate as the MFU count charges it, and
    what the best row leaves."""
    runs = by_name(record)
    base = runs[BASE_NAME]
    shape = _shape(record)
    out: dict = {}
    for name, s in runs.items():
        if not (s["ok"] and s.get("kernels")) or name not in LEVERS:
            continue
        slug, fields = LEVERS[name]
        ms = s["kernels"]["ms"]
        values = {
            "tps": s["tokens_per_s_per_gpu"],
            "mfu": 100 * s["mfu"],
            "of-ref": 100 * s["ceiling_fraction"],
            "peak": s["peak_gib"],
            "step": 1000 * s["seconds_per_step"],
            "idle": _idle(s),
            "seconds": s["seconds"],
            **{short: ms.get(c, 0.0) for c, short in KINDS.items()},
        }
        out[f"ch08-lever-{slug}-gain"] = s["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"]
        out |= {f"ch08-lever-{slug}-{UNITS.get(f, f)}": values[f] for f in fields}
    by_key = {LEVERS[n][0]: s for n, s in runs.items() if n in LEVERS and s["ok"]}
    for a, b in SAME_RECORDING:
        tps = by_key[a]["tokens_per_s_per_gpu"] / by_key[b]["tokens_per_s_per_gpu"]
        out[f"ch08-lever-{a}-over-{b}"] = tps
    ref = base["matmul_ceiling_tflops"] * 1e12
    out["ch08-lever-base-ref"] = base["matmul_ceiling_tflops"]
    out["ch08-lever-ref-of-peak"] = 100 * ref / H200_BF16_PEAK
    out["ch08-lever-base-matmul-rate"] = 100 * _matmul_rate(base, shape) / ref
    out["ch08-lever-base-matmul-share"] = 100 * _matmul_share(base)
    out["ch08-lever-fp8-bound"] = step_speedup(_matmul_share(base), 2.0)
    out |= _best_numbers(runs, shape)
    return out | _recompute_numbers(by_key["recompute32"], base, by_key["mbs24"], shape)


def check_lever_numbers(ln: dict) -> None:
    """What the page says of :func:`lever_numbers`: the base keeps the GPU busy, each lever's
    price, and the attention rate as the MFU count charges it."""
    assert ln["ch08-lever-base-idle-ms"] < 1  # the base keeps the GPU busy
    assert (
        ln["ch08-lever-liger-gain"] < 1 < ln["ch08-lever-best24-gain"]
    )  # Liger pays with a larger step
    assert ln["ch08-lever-fuse-matmul-ms"] < ln["ch08-lever-base-matmul-ms"]  # cheaper products...
    assert ln["ch08-lever-fuse-gain"] < 1  # ...and a slower step
    # recomputing buys memory with time
    assert ln["ch08-lever-recompute32-gain"] < ln["ch08-lever-mbs24-gain"]
    # The count charges attention the whole s x s matrix; a causal kernel computes about half of it:
    # over-counting inflates the counted rate (near the reference), it does not cap it.
    assert ln["ch08-best-attention-rate"] > ln["ch08-best-matmul-rate"] / 2
    assert ln["ch08-best-attention-half-rate"] == ln["ch08-best-attention-rate"] / 2


def _matmul_rate(s: dict, shape: dict, extra: float = 0.0) -> float:
    """The matmuls' FLOP/s: 6·Ψ_mm·(1 + extra) per token over their profiled time."""
    tokens = s["global_batch"] * s["seq"]
    return 6 * shape["mm"] * (1 + extra) * tokens / (s["kernels"]["ms"]["matmul"] / 1000)


def _matmul_share(s: dict) -> float:
    return s["kernels"]["ms"]["matmul"] / (1000 * s["seconds_per_step"])


def _best_numbers(runs: dict, shape: dict) -> dict:
    """The row with the highest MFU (``ch08-best-…``): the speed 60 % MFU needs, its step's parts,
    its matmuls' rate, and its attention kernels' rate counted as the MFU count charges them
    (12·L·h·s FLOPs per token: the whole s × s score matrix), against the reference rate."""
    best = max((s for s in runs.values() if s["ok"] and s.get("kernels")), key=lambda s: s["mfu"])
    ms, step = best["kernels"]["ms"], 1000 * best["seconds_per_step"]
    ref = best["matmul_ceiling_tflops"] * 1e12
    tokens = best["global_batch"] * best["seq"]
    counted = 12 * shape["layers"] * shape["hidden"] * best["seq"] * tokens
    attention_rate = counted / (ms["attention"] / 1000) / ref
    return {
        "ch08-best-name": best["name"],
        "ch08-best-needed-tps": best["tokens_per_s_per_gpu"] * 0.6 / best["mfu"],
        "ch08-best-gap-points": 60 - 100 * best["mfu"],
        "ch08-best-matmul-share": 100 * ms["matmul"] / step,
        "ch08-best-matmul-rate": 100 * _matmul_rate(best, shape) / ref,
        "ch08-best-rest-ms": step - ms["matmul"],
        "ch08-best-attention-rate": 100 * attention_rate,
        "ch08-best-attention-half-rate": 50 * attention_rate,
    }


def _recompute_numbers(s: dict, base: dict, bigger: dict, shape: dict) -> dict:
    """The row that recomputes k of L layers: the matmul work its recomputed forwards add (2 of
    the 6 FLOPs per parameter and token, for the layers' parameters), its matmul time per token
    against the base's, its matmul rate counting that work, and the peak its micro-batch would
    reach without recomputation, extrapolated linearly from the base's and the micro-batch-24
    row's peaks."""
    k = s["recompute_layers"]
    extra = 2 * k / shape["layers"] * (shape["mm"] - shape["head"]) / (6 * shape["mm"])
    per_token = s["kernels"]["ms"]["matmul"] / s["global_batch"]
    slope = (bigger["peak_gib"] - base["peak_gib"]) / (
        bigger["global_batch"] - base["global_batch"]
    )
    return {
        "ch08-lever-recompute32-layers": k,
        "ch08-lever-recompute32-work": 100 * extra,
        "ch08-lever-recompute32-matmul-per-token": per_token
        / (base["kernels"]["ms"]["matmul"] / base["global_batch"]),
        "ch08-lever-recompute32-matmul-rate": 100
        * _matmul_rate(s, shape, extra)
        / (s["matmul_ceiling_tflops"] * 1e12),
        "ch08-lever-recompute32-peak-without-gib": base["peak_gib"]
        + slope * (s["global_batch"] - base["global_batch"]),
    }


def lever_h2h_numbers(record: FlagshipRecord) -> dict:
    """The best levers under both frameworks over alternated rounds: medians, MFU, spread, the
    ratio, and the Colossal-AI median's share of the reference rate measured in that recording."""
    groups = {g["framework"]: g for g in h2h_groups(record) if g["median"]}
    out: dict = {"ch08-lh2h-ref": ceiling(record)}
    for fw, g in groups.items():
        out |= {
            f"ch08-lh2h-{fw}-median": g["median"],
            f"ch08-lh2h-{fw}-mfu": 100 * g["mfu_median"],
            f"ch08-lh2h-{fw}-mfu-all": 100 * g["mfu_all_params_median"],
            f"ch08-lh2h-{fw}-spread": 100 * g["spread"],
            f"ch08-lh2h-{fw}-rounds": g["rounds"],
        }
    c = groups["colossal"]
    out["ch08-lh2h-ratio"] = c["vs_fsdp2"]
    out["ch08-lh2h-of-ref"] = 100 * c["mfu_median"] * H200_BF16_PEAK / (ceiling(record) * 1e12)
    return out


def trace_numbers(s: dict, model: dict[str, float]) -> dict:
    """One traced row: the step's span on the GPU and how busy it was; its memory snapshot's peak
    and persistent categories; Chapter 7's model per phase (``model``,
    :func:`helpers.chapters.ch08_levers.model_phases`)."""
    trace, snap = s["trace"], s["memory_snapshot"]
    return {
        "ch08-trace-span-ms": trace["span_ms"],
        "ch08-trace-busy": 100 * trace["busy"],
        "ch08-snap-peak-gib": snap["peak_gib"],
        **{f"ch08-snap-{k}-gib": v for k, v in snap["static_gib"].items()},
        **{f"ch08-model-{k}-gib": v for k, v in model.items()},
    }


def fp8_numbers(record: FlagshipRecord, fp8_kernel_count: int) -> dict:
    """bf16 against FP8 through ``torch._scaled_mm`` on the same batches: speed, peak, the
    largest loss gap and over how many steps, and the kernels that grew or shrank."""
    runs = rows(record)
    bf16 = next(s for s in runs if s["ok"] and s.get("fp8") == "none")
    fp8 = next(s for s in runs if s["ok"] and s.get("fp8") == "torch")
    gap, steps = loss_gap(fp8, bf16)
    out = {
        "ch08-fp8-ratio": fp8["tokens_per_s_per_gpu"] / bf16["tokens_per_s_per_gpu"],
        "ch08-fp8-loss-gap": gap,
        "ch08-fp8-steps": steps,
        "ch08-fp8-kernels": fp8_kernel_count,
    }
    for name, s in (("bf16", bf16), ("fp8", fp8)):
        ms = s["kernels"]["ms"]
        out |= {
            f"ch08-fp8-{name}-tps": s["tokens_per_s_per_gpu"],
            f"ch08-fp8-{name}-peak-gib": s["peak_gib"],
            **{f"ch08-fp8-{name}-{short}-ms": ms.get(c, 0.0) for c, short in KINDS.items()},
        }
    out["ch08-fp8-matmul-speedup"] = out["ch08-fp8-bf16-matmul-ms"] / out["ch08-fp8-fp8-matmul-ms"]
    return out


def reference_rate_rows(record: FlagshipRecord) -> list[dict]:
    """For the appendix: the bf16 matmul rate measured in each recording that made rows of the
    lever record, with the rows it made."""
    from helpers.chapters.ch08_levers import run_ceiling

    groups: dict[tuple, list[str]] = {}
    for run in record["runs"]:
        date = (run.get("provenance") or record["provenance"])["date"]
        groups.setdefault((date, run_ceiling(run, record)), []).append(run["name"])
    return [
        {"recorded": date, "reference TFLOP/s": rate, "rows": "; ".join(names)}
        for (date, rate), names in groups.items()
    ]
