"""Chapter 12's predictions: the book's models on each published training, beside its figure.

Used by ``notebooks/12_in_practice.ipynb`` and ``tests/test_ch12_predict.py``. For each run of
:data:`helpers.chapters.ch12_published.RUNS` the models of Chapters 3 and 7 predict

* memory per GPU: :func:`helpers.cost.memory_plan.peak` (the one memory model; Megatron-LM's
  optimizer bytes where Megatron-LM or Llama 3's FSDP ran, Colossal-AI's ZeRO-1 for BLOOM's
  DeepSpeed ZeRO-1), on the busiest stage, with the 2.5 GiB outside the allocator;
* step time: :func:`helpers.cost.step_time.plan_layout`, with what it lacks added by
  :mod:`helpers.cost.practice` (context parallelism, ZeRO-3) and :mod:`helpers.cost.moe` (experts);
* the figure the paper reports, counted the paper's way (Megatron-LM's eq. 3 for TFLOP/s, the
  book's 6Ψ + 12·L·h·s for MFU, tokens per GPU-second for DeepSeek-V3).

One constant is fitted: the compute efficiency ε (``Hardware.mfu``, the share of the peak a GPU
reaches while it computes), on ONE run, :data:`FIT_ON`, by bisection; every other prediction uses
that ε unchanged. A book rule the papers break is bridged and said: the step model wants layers
divisible by P, so a pipeline of L layers over P stages is timed with ⌈L/P⌉·P layers (Llama 3 gives
its first and last stage one layer fewer, §3.3.2, which is the same balance).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from helpers.chapters.ch12_published import RUNS, Run, by_key
from helpers.config.shape import ModelShape
from helpers.cost.hardware import preset
from helpers.cost.memory_plan import GIB, megatron_states, peak
from helpers.cost.moe import MoEShape, ep_step, states_per_gpu
from helpers.cost.practice import megatron_flops, shares, step_mfu, with_context, with_zero3
from helpers.cost.step_time import plan_layout
from helpers.parallel.layouts import Layout
from helpers.parallel.pp import bubble_fraction

FIT_ON = "MEG-1008.0B"  # the one run the efficiency is fitted on


def value(run: Run, name: str):
    """A published degree or, where the paper gives none, the chapter's assumption."""
    got = getattr(run, name, None)
    return run.assumed.get(name) if got is None else got


def timed_shape(run: Run) -> ModelShape:
    """The shape the step model times: ⌈L/P⌉·P layers, and s/C tokens per rank under CP."""
    m, pp = run.model, value(run, "pp")
    layers = -(-m.layers // pp) * pp
    return replace(m, layers=layers, seq_len=run.seq // run.cp)


def layout_of(run: Run) -> Layout:
    zero = {"none (DDP)": 0, "ZeRO-1": 1, "FSDP (§3.3.2)": 1}.get(run.sharding, 2)
    mb = run.micro_batch or run.assumed.get("micro-batch", 1)
    return Layout(
        value(run, "dp"), value(run, "tp"), value(run, "pp"), microbatch=mb, zero_stage=zero
    )


def batch_of(run: Run) -> int:
    return run.global_batch or run.assumed["global batch"]


def states_of(run: Run):
    """Megatron-LM's optimizer for Megatron-LM (no distributed optimizer in 2021) and for Llama 3's
    FSDP (optimizer states sharded); Colossal-AI's model states otherwise."""
    if run.source == "MEG":
        return lambda layout, stage=0: megatron_states(layout, stage, distributed=False)
    if run.source == "L3":
        return megatron_states
    return None


def memory_gib(run: Run, recompute: bool) -> float:
    shape, layout = timed_shape(run), layout_of(run)
    got = peak(shape, layout, batch_of(run), recompute, states_of=states_of(run))
    return got["total"] / GIB


def recompute_of(run: Run) -> bool:
    """Recomputation as published or assumed; where neither says, only if it is needed to fit."""
    if "recompute" in run.assumed:
        return run.assumed["recompute"]
    return memory_gib(run, False) > preset(run.cluster).memory_gib


def dense_plan(run: Run, eta: float):
    hw = preset(run.cluster, eta)
    shape, layout, rc = timed_shape(run), layout_of(run), recompute_of(run)
    plan = plan_layout(shape, layout, batch_of(run), hw, rc)
    if run.cp > 1:
        plan = with_context(
            plan, replace(shape, seq_len=run.seq), run.cp, run.seq, batch_of(run), hw
        )
    if run.sharding.startswith("FSDP") and "full" in run.sharding:  # OPT, Alpaca: ZeRO-3
        plan = with_zero3(plan, shape, hw)
    return plan, hw


def moe_prediction(run: Run, eta: float) -> dict:
    """DeepSeek-V3: compute at ε of the bf16 peak (FP8 is not in the model), the 1F1B bubble of
    one-sequence micro-batches, the expert all-to-all overlapped as DualPipe aims to."""
    shape: MoEShape = run.model
    hw = preset(run.cluster, eta)
    tokens = run.global_batch * run.seq
    per_gpu = tokens / (run.gpus / run.pp)
    ep = ep_step(
        shape, per_gpu, run.pp, hw.inter, hw.peak_flops * eta, run.assumed["routed to nodes"]
    )
    m = run.global_batch // run.dp
    busy = ep["compute_s"] + ep["exposed_s"]
    step = busy / (1 - bubble_fraction(run.pp, m))
    states = states_per_gpu(shape, run.pp, run.ep, run.dp)
    return {
        "step_s": step,
        "tokens/s/GPU": tokens / run.gpus / step,
        "mfu": tokens / run.gpus / step * shape.flops_per_token() / hw.peak_flops,
        "memory GiB": states / GIB,  # model states only: no activation model for MLA
        "shares": {
            "compute": ep["compute_s"] / step,
            "ep": ep["ep_s"] / step,
            "bubble": 1 - busy / step,
        },
    }


def predicted_figure(run: Run, eta: float) -> dict:
    """The prediction of the run's headline figure, counted as the paper counts it."""
    if isinstance(run.model, MoEShape):
        got = moe_prediction(run, eta)
        return {
            "figure": "tokens/s per GPU",
            "published": published_figure(run),
            **got,
            "predicted": got["tokens/s/GPU"],
        }
    plan, hw = dense_plan(run, eta)
    out = {
        "step_s": plan.step_s,
        "shares": shares(plan),
        "plan": plan,
        "memory GiB": memory_gib(run, plan.recompute),
        "recompute": plan.recompute,
    }
    out["tokens/s/GPU"] = batch_of(run) * run.seq / run.gpus / plan.step_s
    shape = replace(run.model, seq_len=run.seq)
    out["mfu"] = step_mfu(plan, shape, batch_of(run), hw, run.seq, run.gpus)
    if "BF16 MFU %" in run.reported:
        return {
            "figure": "BF16 MFU %",
            "published": published_figure(run),
            "predicted": 100 * out["mfu"],
            **out,
        }
    if "TFLOP/s per GPU" in run.reported:
        tflops = megatron_flops(run.model, batch_of(run)) / (plan.step_s * run.gpus) / 1e12
        return {
            "figure": "TFLOP/s per GPU",
            "published": published_figure(run),
            "predicted": tflops,
            **out,
        }
    return {"figure": "-", "published": None, "predicted": None, **out}


def published_figure(run: Run):
    r = run.reported
    if "BF16 MFU %" in r:
        return r["BF16 MFU %"]
    if "TFLOP/s per GPU" in r:
        return r["TFLOP/s per GPU"]
    if "H800 GPU hours per 1e12 tokens" in r:  # tokens per GPU-second
        return 1e12 / (r["H800 GPU hours per 1e12 tokens"] * 3600)
    return None


@lru_cache(maxsize=None)
def fitted_eta(key: str = FIT_ON, lo: float = 0.05, hi: float = 1.0) -> float:
    """ε that makes the step model reproduce run ``key``'s published figure (bisection)."""
    run = by_key(key)
    target = published_figure(run)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predicted_figure(run, mid)["predicted"] < target else (lo, mid)
    return (lo + hi) / 2


def error(pred, pub) -> float | None:
    return None if pred is None or pub is None else (pred - pub) / pub


@lru_cache(maxsize=None)
def predictions(eta: float | None = None) -> tuple:
    """(run, prediction) for every run, at the fitted ε unless given."""
    eta = fitted_eta() if eta is None else eta
    return tuple((run, predicted_figure(run, eta)) for run in RUNS)


def error_rows(eta: float | None = None) -> list[dict]:
    """The side-by-side table: figure, published, predicted, error, memory, step, shares."""
    rows = []
    for run, p in predictions(eta):
        err = error(p["predicted"], p["published"])
        pub_mem = run.reported.get("memory GB per GPU")
        sh = p["shares"]
        bub = sh.get("bubble", 0.0)
        rows.append(
            {
                "run": run.key,
                "figure": p["figure"],
                "published": "-" if p["published"] is None else round(p["published"], 1),
                "predicted": "-" if p["predicted"] is None else round(p["predicted"], 1),
                "error %": "-" if err is None else round(100 * err, 1),
                "fitted here": "yes" if run.key == FIT_ON else "",
                "memory GiB (model)": round(p["memory GiB"], 1)
                if "plan" in p
                else f"{p['memory GiB']:.1f} (states only)",
                "memory published": f"{pub_mem} GB" if pub_mem else "-",
                "step s (model)": round(p["step_s"], 2),
                "tokens/s/GPU (model)": round(p["tokens/s/GPU"]),
                "MFU % (model)": round(100 * p["mfu"], 1),
                "no-bubble": "-"
                if p["predicted"] is None
                else round(p["predicted"] / (1 - bub), 1),
                "shares": ", ".join(f"{k} {100 * v:.0f}%" for k, v in sh.items() if v >= 0.005),
            }
        )
    return rows


def with_assumption(run: Run, **assumed) -> Run:
    """The run with some assumptions changed (a sensitivity check, never a fit)."""
    return replace(run, assumed=run.assumed | assumed)


def diagnostics() -> list[dict]:
    """The rows where the model is far off, each with the one computed check that says why."""
    eps, rows = fitted_eta(), []
    for key in ("L3-8K GPUs", "L3-16K GPUs", "L3-16K GPUs, 128K context"):
        run = by_key(key)
        p = predicted_figure(run, eps)
        no_bubble = p["predicted"] / (1 - p["shares"]["bubble"])
        rows.append(
            {
                "run": key,
                "check": "plain 1F1B bubble removed (interleaved schedule, §3.3.2)",
                "published": run.reported["BF16 MFU %"],
                "model": round(p["predicted"], 1),
                "model, check applied": round(no_bubble, 1),
                "error % after": round(100 * error(no_bubble, published_figure(run)), 1),
            }
        )
    run = by_key("OPT")
    for mb in (1, 8):
        p = predicted_figure(with_assumption(run, **{"micro-batch": mb}), eps)
        rows.append(
            {
                "run": "OPT",
                "check": f"assumed micro-batch {mb} (FSDP gathers per micro-batch)",
                "published": published_figure(run),
                "model": round(p["predicted"], 1),
                "model, check applied": round(p["predicted"], 1),
                "error % after": round(100 * error(p["predicted"], published_figure(run)), 1),
            }
        )
    run = by_key("L3-16K GPUs")
    rows.append(
        {
            "run": "L3-16K GPUs",
            "check": "memory without recomputation (GiB): why the model recomputes",
            "published": "-",
            "model": round(memory_gib(run, True), 1),
            "model, check applied": round(memory_gib(run, False), 1),
            "error % after": "-",
        }
    )
    return rows


def implied_rows() -> list[dict]:
    """The ε each run would need for the model to hit its published figure (one bisection per
    run): how far the fitted constant is from each, and where no ε ≤ 1 could do it."""
    rows = []
    for run in (r for r in RUNS if published_figure(r) is not None):
        eps = fitted_eta(run.key, 0.05, 3.0)
        rows.append({"run": run.key, "ε it would need": round(eps, 3), "possible": eps <= 1})
    return rows
