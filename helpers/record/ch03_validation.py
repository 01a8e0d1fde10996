"""Chapter 3's planner against the GPU: each recorded layout's step time beside the planner's.

Reads a ch03_layouts record (one 0.54 B Llama under each layout of
:data:`helpers.record.ch03.PLAN_LAYOUTS` on two GPUs): :func:`validation_rows` puts the measured
step time and peak memory next to :func:`helpers.cost.step_time.plan_layout`'s, with both rankings,
and :func:`rank_agreement` says how well the planner orders them (Spearman); Chapter 3, "Does the
planner's order hold on real GPUs?".
"""

from __future__ import annotations

from helpers.models.shape import ModelShape
from helpers.cost.step_time import Hardware, plan_layout
from helpers.parallel.layouts import Layout


def layout_of_run(r: dict) -> tuple[Layout, bool]:
    """The planner's Layout (and recompute flag) of one ch03_layouts result."""
    batch = r["model"]["batch"]
    m = r["microbatches"] if r["pp"] > 1 else 1  # without a pipeline the per-rank batch is one pass
    sp = r["sp"] if r["sp_mode"] == "all_to_all" else 1
    return Layout(
        r["dp"], r["tp"], r["pp"], sp, r["sp_mode"], batch // (r["dp"] * m), r["zero"]
    ), r["recompute"]


def model_of_run(r: dict) -> ModelShape:
    d = r["model"]
    ffn = (8 * d["hidden"] // 3 + 63) // 64 * 64  # helpers.models.llama.llama_config's SwiGLU width
    return ModelShape.llama(
        d["layers"],
        d["hidden"],
        d["heads"],
        d["heads"],
        d["vocab"],
        ffn,
        seq_len=d["seq"],
        name="measured Llama",
    )


def validation_rows(runs: list[dict], hw: Hardware) -> list[dict]:
    """Measured step time of each recorded layout next to the planner's estimate and both ranks."""
    rows = []
    for run in runs:
        # a run of an earlier recorder has no "ok" (and no "results" when it failed)
        if not run.get("ok", "results" in run):
            rows.append(
                {
                    "layout": run["layout"],
                    "measured ms": "failed",
                    "error": run.get("error", "")[-200:],
                }
            )
            continue
        r = run["results"][0]
        layout, recompute = layout_of_run(r)
        p = plan_layout(model_of_run(r), layout, r["model"]["batch"], hw, recompute)
        rows.append(
            {
                "layout": run["layout"],
                "measured ms": round(r["step_s"] * 1e3, 1),
                "planner ms": round(p.step_s * 1e3, 1),
                "measured GiB": r["peak_gib"],
                "planner GiB": round(p.memory_gib, 1),
            }
        )
    ok = [r for r in rows if r["measured ms"] != "failed"]
    for key, rank in (("measured ms", "measured rank"), ("planner ms", "planner rank")):
        for i, r in enumerate(sorted(ok, key=lambda r: r[key])):
            r[rank] = i + 1
    return rows


def rank_agreement(rows: list[dict]) -> float:
    """Spearman's rank correlation between the planner's and the measured order (1 = same order)."""
    ok = [r for r in rows if "planner rank" in r]
    n = len(ok)
    if n < 2:
        return float("nan")
    d2 = sum((r["planner rank"] - r["measured rank"]) ** 2 for r in ok)
    return 1 - 6 * d2 / (n * (n * n - 1))
