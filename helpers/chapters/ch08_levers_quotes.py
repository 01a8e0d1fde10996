"""The phrases Chapter 8's page quotes from the one-H200 records, recomputed from them.

Used by ``tests/test_one_gpu_pages.py`` (every phrase must be on the page) and when the page's
section "One H200, one lever per row" is written: no number on it is typed by hand. The records and
their rows come from :mod:`helpers.chapters.ch08_levers`.
"""

from __future__ import annotations

from helpers.chapters.ch08_levers import (
    by_name,
    fp8_kernels,
    ceiling,
    first_round,
    h2h_groups,
    loss_gap,
    rows,
)
from helpers.cost.mfu import H200_BF16_PEAK
from helpers.record.flagship_levers import BASE_NAME
from helpers.record.runner import exception_line
from helpers.train.fp8 import step_speedup


KINDS = ("matmul", "attention", "cross-entropy", "copy/cast", "elementwise/other", "optimizer")
# (row, row) pairs recorded in the same device call, compared directly
SAME_CALL = (
    ("cuDNN + Liger CE + fused projections + micro-batch 48", "cuDNN + Liger CE + micro-batch 48"),
    ("FSDP2: cuDNN + Liger CE + micro-batch 48", "cuDNN + Liger CE + micro-batch 48"),
    (
        "FSDP2: cuDNN + Liger CE + fused projections + micro-batch 48",
        "FSDP2: cuDNN + Liger CE + micro-batch 48",
    ),
)


def _base_shape(record: dict) -> tuple[int, int, int]:
    """(parameters, layers, vocab × hidden: one embedding's parameters) of the base run."""
    run = record["runs"][0]
    r0 = next(r for r in run["results"] if "params" in r)
    return (
        r0["params"],
        r0["layers"],
        int(run["args"][run["args"].index("--vocab") + 1]) * r0["hidden"],
    )


def base_matmul_params(record: dict) -> int:
    """The flagship's parameters that do matmuls (all but the input embedding), from its record."""
    params, _, embedding = _base_shape(record)
    return params - embedding


def lever_quotes(record: dict) -> dict[str, str]:
    """The phrases the page quotes from the lever record, recomputed (tests check the page)."""
    runs = by_name(record)
    base = runs[BASE_NAME]
    out = {"ceiling": f"{base['matmul_ceiling_tflops']} TFLOP/s"}
    seen = sorted({s["matmul_ceiling_tflops"] for s in runs.values() if s["ok"]}, reverse=True)
    out["ceilings"] = " and ".join(f"{c}" for c in seen) + " TFLOP/s"

    def ms(s, k):
        return f"{(s.get('kernels') or {}).get('ms', {}).get(k, 0.0):.1f} ms"

    def idle(s):
        return f"{1000 * s['seconds_per_step'] - sum(s['kernels']['ms'].values()):.1f} ms"

    out["base"] = (
        f"{base['tokens_per_s_per_gpu']:,} tokens/s, {100 * base['mfu']:.1f} % MFU and "
        f"{100 * base['ceiling_fraction']:.1f} % of the measured ceiling"
    )
    out["base matmul"] = f"{ms(base, 'matmul')} of its {1000 * base['seconds_per_step']:.1f} ms"
    for name, s in runs.items():
        if name == BASE_NAME or not s["ok"]:
            continue
        out[name] = f"×{s['tokens_per_s_per_gpu'] / base['tokens_per_s_per_gpu']:.3f}"
        out[name + " mfu"] = f"{100 * s['mfu']:.1f} %"
        out[name + " peak"] = f"{s['peak_gib']} GiB"
        out[name + " idle"] = idle(s)
        for k in KINDS:
            out[f"{name} {k}"] = ms(s, k)
        out[name + " triton"] = ms(s, "triton (compiled)")
        out[name + " seconds"] = f"{s['seconds']} s"
    out["ceiling share"] = f"{100 * base['matmul_ceiling_tflops'] * 1e12 / H200_BF16_PEAK:.0f} %"
    # the matmuls' own rate: 6·N FLOPs per token (N without the input embedding) over their time
    n = base_matmul_params(record)
    rate = 6 * n * base["global_batch"] * base["seq"] / (base["kernels"]["ms"]["matmul"] / 1000)
    out["base matmul rate"] = f"{100 * rate / (base['matmul_ceiling_tflops'] * 1e12):.0f} %"
    best = max((s for s in runs.values() if s["ok"] and s.get("kernels")), key=lambda s: s["mfu"])
    step = 1000 * best["seconds_per_step"]
    kms = best["kernels"]["ms"]
    flops = 6 * n * best["global_batch"] * best["seq"]
    ceil, speed = best["matmul_ceiling_tflops"] * 1e12, best["tokens_per_s_per_gpu"]
    out.update(
        {
            "best": best["name"],
            "best mfu": f"{100 * best['mfu']:.1f} %",
            "best tokens": f"{best['tokens_per_s_per_gpu']:,} tokens/s",
            "best step": f"{step:.1f} ms",
            "best matmul rate": f"{100 * flops / (kms['matmul'] / 1000) / ceil:.0f} %",
            "best matmul share": f"{100 * kms['matmul'] / step:.0f} %",
            "best rest": f"{step - kms['matmul']:.1f} ms",
            "best gap to 60": f"{60 - 100 * best['mfu']:.1f} points",
            "best needed tokens": f"{round(speed * 0.6 / best['mfu']):,} tokens/s",
        }
    )
    for k in ("attention", "triton (compiled)", "optimizer", "copy/cast"):
        out[f"best {k}"] = f"{kms.get(k, 0.0):.1f} ms"
    out["best idle"] = idle(best)
    share = base["kernels"]["ms"]["matmul"] / (1000 * base["seconds_per_step"])
    out["base matmul share"] = f"{100 * share:.0f} %"
    out["base amdahl"] = f"{step_speedup(share, 2.0):.2f}×"
    out["base peak"] = f"{base['peak_gib']} GiB"
    out["base idle"] = idle(base)
    for k in KINDS:
        out[f"base {k}"] = ms(base, k)
    out["base triton"] = ms(base, "triton (compiled)")
    out["base seconds"] = f"{base['seconds']} s"
    out.update(recompute_quotes(record, runs, base))
    for a, b in SAME_CALL:  # rows measured in one device call: the same GPU and clocks
        if runs.get(a, {}).get("ok") and runs.get(b, {}).get("ok"):
            ratio = runs[a]["tokens_per_s_per_gpu"] / runs[b]["tokens_per_s_per_gpu"]
            out[f"{a} over {b}"] = f"×{ratio:.3f}"
    for name, s in runs.items():
        if not s["ok"] and s.get("error"):
            out[name + " error"] = s["error"].strip().splitlines()[0]
    return out


def recompute_quotes(record: dict, runs: dict, base: dict) -> dict[str, str]:
    """For each row that recomputes layers: the matmul work the recomputed forwards add (2 FLOPs
    per layer parameter and token for each of k of L layers, over the 6·N the MFU count credits),
    its matmul time per token against the base's, its matmul rate counting that work, and the
    peak its micro-batch would have without recompute, extrapolated linearly from the base's and
    the plain "micro-batch 24" row's peaks."""
    out = {}
    bigger = runs.get("micro-batch 24", {})
    n = base_matmul_params(record)
    _, layers, head = _base_shape(record)  # the LM head is as large as the input embedding
    per_token = base["kernels"]["ms"]["matmul"] / base["global_batch"]
    for name, s in runs.items():
        k = s.get("recompute_layers") or 0
        if not (k and s["ok"] and s.get("kernels")):
            continue
        extra = 2 * k / layers * (n - head) / (6 * n)
        ms = s["kernels"]["ms"]["matmul"]
        flops = 6 * n * (1 + extra) * s["global_batch"] * s["seq"]
        rate = flops / (ms / 1000) / (s["matmul_ceiling_tflops"] * 1e12)
        out[name + " recompute work"] = f"{100 * extra:.1f} %"
        out[name + " matmul per token"] = f"×{ms / s['global_batch'] / per_token:.3f}"
        out[name + " matmul rate"] = f"{100 * rate:.0f} %"
        if bigger.get("ok"):
            slope = (bigger["peak_gib"] - base["peak_gib"]) / (
                bigger["global_batch"] - base["global_batch"]
            )
            plain = base["peak_gib"] + slope * (s["global_batch"] - base["global_batch"])
            out[name + " peak without"] = f"{plain:.1f} GiB"
    return out


def h2h_quotes(record: dict) -> dict[str, str]:
    """The phrases the page quotes from the head-to-head: medians, spreads, the ratio, and the
    first Colossal-AI round's trace and memory snapshot."""
    groups = {g["framework"]: g for g in h2h_groups(record) if g["median"]}
    c, f = groups["colossal"], groups["fsdp2"]
    ceil = ceiling(record) * 1e12
    out = {
        "colossal median": f"{c['median']:,.0f} tokens/s",
        "colossal mfu": f"{100 * c['mfu_median']:.1f} %",
        "colossal all-params mfu": f"{100 * c['mfu_all_params_median']:.1f} %",
        "fsdp2 median": f"{f['median']:,.0f} tokens/s",
        "fsdp2 mfu": f"{100 * f['mfu_median']:.1f} %",
        "colossal spread": f"{100 * c['spread']:.2f} %",
        "fsdp2 spread": f"{100 * f['spread']:.2f} %",
        "ratio": f"{c['vs_fsdp2']:.4f}",
        "rounds": f"{min(c['rounds'], f['rounds'])} rounds",
        "ceiling fraction": f"{100 * c['mfu_median'] * H200_BF16_PEAK / ceil:.1f} %",
        "ceiling": f"{ceiling(record)} TFLOP/s",
    }
    first = first_round(record, "colossal")
    out["peak"] = f"{first['peak_gib']} GiB"
    trace = first.get("trace")
    if trace:
        out["busy"] = f"{100 * trace['busy']:.1f} %"
        out["span"] = f"{trace['span_ms']:.1f} ms"
    snap = first.get("memory_snapshot")
    if snap:
        out["snapshot peak"] = f"{snap['peak_gib']:.1f} GiB"
        for k, v in snap["static_gib"].items():
            out[f"static {k}"] = f"{v:.1f} GiB"
    return out


def fp8_quotes(record: dict) -> dict[str, str]:
    """The phrases the page quotes from the FP8 record."""
    runs = rows(record)
    bf16 = next(s for s in runs if s["ok"] and s.get("fp8") == "none")
    fp8 = next((s for s in runs if s["ok"] and s.get("fp8") == "torch"), None)
    out = {
        "bf16": f"{bf16['tokens_per_s_per_gpu']:,} tokens/s",
        "bf16 peak": f"{bf16['peak_gib']} GiB",
    }
    if fp8:
        gap, n = loss_gap(fp8, bf16)
        bk, fk = bf16["kernels"]["ms"], fp8["kernels"]["ms"]
        out.update(
            {
                "fp8": f"{fp8['tokens_per_s_per_gpu']:,} tokens/s",
                "fp8 ratio": f"×{fp8['tokens_per_s_per_gpu'] / bf16['tokens_per_s_per_gpu']:.3f}",
                "fp8 peak": f"{fp8['peak_gib']} GiB",
                "loss gap": f"{gap:.4f}",
                "steps": f"{n} steps",
                "bf16 matmul": f"{bf16['kernels']['ms']['matmul']:.1f} ms",
                "fp8 matmul": f"{fp8['kernels']['ms'].get('matmul', 0.0):.1f} ms",
                "matmul speedup": f"{bk['matmul'] / fk['matmul']:.2f}×",
                "bf16 copy/cast": f"{bf16['kernels']['ms']['copy/cast']:.1f} ms",
                "fp8 copy/cast": f"{fp8['kernels']['ms']['copy/cast']:.1f} ms",
                "bf16 elementwise": f"{bf16['kernels']['ms']['elementwise/other']:.1f} ms",
                "fp8 elementwise": f"{fp8['kernels']['ms']['elementwise/other']:.1f} ms",
                "fp8 kernels": f"{len(fp8_kernels(fp8, top=1000))}",
                "fp8 last": f"{fp8['losses'][-1]}",
                "bf16 last": f"{bf16['losses'][-1]}",
            }
        )
    failed = [r for r in record["runs"] if not r["ok"]]
    if failed:
        out["colossal error"] = exception_line(failed[0].get("error") or "")
    return out


def trace_quotes(s: dict) -> dict[str, str]:
    """The phrases the page quotes from one row's trace and memory snapshot."""
    trace, snap = s["trace"], s["memory_snapshot"]
    out = {
        "busy": f"{100 * trace['busy']:.1f} %",
        "span": f"{trace['span_ms']:.1f} ms",
        "snapshot peak": f"{snap['peak_gib']:.1f} GiB",
    }
    out.update({f"static {k}": f"{v:.1f} GiB" for k, v in snap["static_gib"].items()})
    return out


def model_quotes(args: list[str]) -> dict[str, str]:
    """Chapter 7's memory model for a recorded run (:func:`ch08_levers.model_phases`), as quoted."""
    from helpers.chapters.ch08_levers import model_phases

    return {f"model {k}": f"{v:.1f} GiB" for k, v in model_phases(args).items()}
