"""Chapter 12's planner runs: the published layout's rank among the planner's, and the scale
simulation of Llama 3 405B from 64 to 16,384 GPUs.

Used by ``notebooks/12_in_practice.ipynb`` and ``tests/test_ch12_planner.py``. Both call Chapter
3's planner (:func:`helpers.cost.planner.plan`) on the published problem (the model as the step
model times it, :func:`helpers.chapters.ch12_predict.timed_shape`; the GPUs; the global batch; the
paper's cluster with the fitted efficiency ε of :func:`helpers.chapters.ch12_predict.fitted_eta`).
Layouts are compared by their degrees (D, T, P, sequence mode), each at its best micro-batch,
ZeRO stage and recomputation, as Chapter 3 compares the guide's combinations.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from helpers.chapters.ch12_predict import fitted_eta, layout_of, timed_shape, value
from helpers.chapters.ch12_published import LLAMA3_405B, RUNS, Run, by_key
from helpers.cost.hardware import preset
from helpers.cost.planner import plan
from helpers.cost.practice import shares, step_mfu
from helpers.cost.step_time import plan_layout

# runs the planner can pose: dense, no context parallelism (its sequence axis is Ulysses)
PLANNED = [r.key for r in RUNS if r.cp == 1 and r.ep == 1 and r.source != "DSV3"]


def degrees(p) -> tuple:
    L = p.layout
    return (L.dp, L.tp, L.pp, L.sp, L.sp_mode)


def best_by_degrees(fits) -> list:
    """The fastest plan of each (D, T, P, S, mode), fastest first."""
    seen, out = set(), []
    for p in fits:
        if degrees(p) not in seen:
            seen.add(degrees(p))
            out.append(p)
    return out


def _limits(run: Run) -> dict:
    pp = value(run, "pp")
    return {"max_pp": max(16, pp), "max_tp": 16, "microbatches": (1, 2, 4, 8)}


@lru_cache(maxsize=None)
def rank_run(key: str) -> dict:
    """Where the published degrees rank among the planner's, and the planner's first choice."""
    run = by_key(key)
    shape, hw = timed_shape(run), preset(run.cluster, fitted_eta())
    batch = run.global_batch
    fits, count = plan(shape, run.gpus, batch, hw, **_limits(run))
    ranked = best_by_degrees(fits)
    mine = (value(run, "dp"), value(run, "tp"), value(run, "pp"), 1, None)
    at = next((i for i, p in enumerate(ranked) if degrees(p) == mine), None)
    first = ranked[0] if ranked else None
    own = ranked[at] if at is not None else None
    return {
        "run": key,
        "layouts": count,
        "fit": len(fits),
        "degree sets": len(ranked),
        "published D×T×P": f"{mine[0]}×{mine[1]}×{mine[2]}",
        "published rank": "does not fit" if at is None else at + 1,
        "published step s": round(own.step_s, 2) if own else "-",
        "planner's first": str(first.layout) if first else "-",
        "its sharding, mb, recompute": (
            f"{first.layout.sharding}, {first.layout.microbatch}, {first.recompute}"
        )
        if first
        else "-",
        "its step s": round(first.step_s, 2) if first else "-",
        "gain %": round(100 * (own.step_s / first.step_s - 1), 1) if own and first else "-",
    }


def rank_rows() -> list[dict]:
    return [rank_run(k) for k in PLANNED]


# --- scale by simulation ---------------------------------------------------------------------

SCALE_GPUS = tuple(64 * 2**k for k in range(9))  # 64 ... 16,384
# sequences of 8,192 tokens per step: Llama 3's 16M tokens (Table 4, in the data file)
SCALE_BATCH = by_key("L3-16K GPUs").global_batch


@lru_cache(maxsize=None)
def simulate(G: int, fixed: bool) -> dict | None:
    """Llama 3 405B (128-layer timing shape) on G GPUs at 2,048 × 8,192 tokens per step: the
    planner's best layout, or with ``fixed`` the published T = 8, P = 16 (D = G / 128); None when
    nothing fits (or G < 128 for the fixed layout)."""
    run = by_key("L3-16K GPUs")
    shape, hw = timed_shape(run), preset(run.cluster, fitted_eta())
    if fixed:  # what Llama 3 ran, whatever Chapter 7's eager census says of its memory
        if G < 128 or SCALE_BATCH % (G // 128):
            return None
        layout = replace(layout_of(run), dp=G // 128)
        fits = [plan_layout(shape, layout, SCALE_BATCH, hw, run.recompute, check=False)]
    else:
        fits, _ = plan(shape, G, SCALE_BATCH, hw)
    if not fits:
        return None
    p = fits[0]
    seq = LLAMA3_405B.seq_len
    mfu = step_mfu(p, replace(LLAMA3_405B, seq_len=seq), SCALE_BATCH, hw, seq, G)
    return {"plan": p, "mfu": mfu, "shares": shares(p)}


def scale_rows(fixed: bool) -> list[dict]:
    rows = []
    for G in SCALE_GPUS:
        got = simulate(G, fixed)
        if got is None:
            rows.append({"GPUs": G, "layout": "-" if fixed and G < 128 else "nothing fits"})
            continue
        p, sh = got["plan"], got["shares"]
        rows.append(
            {
                "GPUs": G,
                "layout": str(p.layout),
                "mb": p.layout.microbatch,
                "m": p.microbatches,
                "recompute": p.recompute,
                "step s": round(p.step_s, 2),
                "MFU %": round(100 * got["mfu"], 1),
                "bubble %": round(100 * sh["bubble"], 1),
                "tp+sp %": round(100 * (sh["tp"] + sh["sp/cp"]), 1),
                "dp %": round(100 * sh["dp"], 1),
                "days for 15.6T tokens": round(days(p.step_s), 1),
            }
        )
    return rows


def days(step_s: float, tokens: float = 15.6e12) -> float:
    """Days to train on ``tokens`` (Llama 3's 15.6T, §3.1) at one step of 2,048 × 8,192 tokens per
    ``step_s`` seconds, without failures or checkpoints."""
    return tokens / (SCALE_BATCH * LLAMA3_405B.seq_len) * step_s / 86400


def page_numbers(ranks: list[dict], best: list[dict], fixed: list[dict]) -> dict:
    """The planner and scale numbers Chapter 12's page quotes (``ch12-*`` keys)."""
    by = {r["run"]: r for r in ranks}
    runs = [r for r in fixed if "MFU %" in r]
    quarter = next(r for r in runs if r["bubble %"] > 25)
    return {
        "ch12-fits-from": next(r["GPUs"] for r in best if "step s" in r),
        "ch12-fixed-mfu-first": runs[0]["MFU %"],
        "ch12-fixed-gpus-first": runs[0]["GPUs"],
        "ch12-fixed-mfu-last": runs[-1]["MFU %"],
        "ch12-fixed-bubble-last": runs[-1]["bubble %"],
        "ch12-quarter-gpus": quarter["GPUs"],
        "ch12-quarter-m": quarter["m"],
        "ch12-gain-l3": by["L3-16K GPUs"]["gain %"],
        "ch12-gain-opt": by["OPT"]["gain %"],
        "ch12-gain-1t": by["MEG-1008.0B"]["gain %"],
        "ch12-rank-opt": by["OPT"]["published rank"],
    }


def fixed_bubble_rows(batch: int, gpus=SCALE_GPUS + (32768,)) -> list[dict]:
    """The published Llama 3 layout (T = 8, P = 16, D = G/128) at a global batch of ``batch``
    sequences: micro-batches per replica and the bubble's share of the step, at each size."""
    run = by_key("L3-16K GPUs")
    shape, hw = timed_shape(run), preset(run.cluster, fitted_eta())
    rows = []
    for G in (g for g in gpus if g >= 128 and batch % (g // 128) == 0):
        layout = replace(layout_of(run), dp=G // 128)
        p = plan_layout(shape, layout, batch, hw, run.recompute, check=False)
        rows.append(
            {"GPUs": G, "m": p.microbatches, "bubble %": round(100 * shares(p)["bubble"], 1)}
        )
    return rows


def plan_problem(shape, gpus: int, batch: int, cluster: str) -> list:
    """The planner's fastest plan of each set of degrees for a problem, fastest first, with the
    fitted ε on a cluster of :mod:`helpers.cost.hardware`."""
    fits, _ = plan(shape, gpus, batch, preset(cluster, fitted_eta()))
    return best_by_degrees(fits)
