"""Chapter 12's predictions: the book's models on each published training, beside its figure.

Used by ``notebooks/12_in_practice.ipynb`` and ``tests/test_ch12_predict.py``. For each run of
:data:`helpers.chapters.ch12_published.RUNS` the models of Chapters 3 and 7 predict

* memory per GPU: :func:`helpers.cost.memory_plan.peak` (the one memory model; Megatron-LM's
  optimizer bytes for Megatron-LM's DDP, FSDP's where a run shards parameters (Llama 3, OPT,
  Alpaca), Colossal-AI's ZeRO-1 for BLOOM's DeepSpeed ZeRO-1), on the busiest stage, with the
  2.5 GiB outside the allocator. Its activations are Chapter 7's census of Hugging Face's eager
  Llama layers: an upper bound for the fused layers these runs used;
* step time: :func:`helpers.cost.step_time.plan_layout` with each run's published sharding,
  schedule (interleaved chunks), micro-batch and recomputation, with context parallelism added by
  :mod:`helpers.cost.practice` and experts by :mod:`helpers.cost.moe`;
* the figure the paper reports, counted the paper's way (Megatron-LM's eq. 3 for TFLOP/s, the
  book's 6Ψ + 12·L·h·s for MFU, tokens per GPU-second for DeepSeek-V3).

One constant is fitted: the compute efficiency ε (``Hardware.mfu``, the share of the peak a GPU
reaches while it computes), on ONE source, :data:`FIT_ON`: the geometric mean of the ε its ten
rows each need (:func:`implied_eta`, a bisection per row); every other training is predicted
with that ε unchanged. A book rule the papers break is bridged and said: the step model wants layers
divisible by P, so a pipeline of L layers over P stages is timed with ⌈L/P⌉·P layers (Llama 3 gives
its first and last stage one layer fewer, §3.3.2, which is the same balance).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from helpers.chapters.ch12_published import RUNS, Run, by_key
from helpers.models.shape import ModelShape
from helpers.cost.hardware import preset
from helpers.cost.memory_plan import GIB, megatron_states, peak
from helpers.cost.moe import MoEShape, ep_step, states_per_gpu
from helpers.cost.practice import megatron_flops, shares, step_mfu, with_context
from helpers.cost.step_time import plan_layout
from helpers.parallel.layouts import Layout
from helpers.parallel.pp import bubble_fraction

FIT_ON = "Megatron-LM Table 1"  # the one source the one constant is fitted on


def value(run: Run, name: str):
    """A layout figure of the run (published, derived or, where no source states it, assumed:
    :func:`helpers.chapters.ch12_published.figure_rows` says which)."""
    return getattr(run, name)


def timed_shape(run: Run) -> ModelShape:
    """The shape the step model times: ⌈L/P⌉·P layers, and s/S tokens per rank under context
    parallelism of degree S."""
    m, pp = run.model, run.pp
    layers = -(-m.layers // pp) * pp
    return replace(m, layers=layers, seq_len=run.seq // run.cp)


def layout_of(run: Run) -> Layout:
    """The run's layout in the planner's terms: degrees, micro-batch, ZeRO stage (3 with FSDP's
    reshard-after-forward flag as the run set it) and interleaved chunks."""
    return Layout(
        run.dp,
        run.tp,
        run.pp,
        microbatch=run.micro_batch,
        zero_stage=run.zero_stage,
        reshard_after_forward=run.reshard_after_forward,
        chunks=run.chunks,
        plugin="gemini" if run.zero_stage == 3 else "hybrid_parallel",
    )


def batch_of(run: Run) -> int:
    return run.global_batch


def states_of(run: Run):
    """Megatron-LM's optimizer for Megatron-LM (no distributed optimizer in 2021); FSDP's states
    where the run shards parameters (the memory model's default for ZeRO-3); Colossal-AI's model
    states otherwise."""
    if run.source == "MEG":
        return lambda layout, stage=0: megatron_states(layout, stage, distributed=False)
    return None


def memory_gib(run: Run, recompute: str | None = None) -> float:
    """Predicted GiB per GPU on the busiest stage, with the run's recomputation unless given."""
    shape, layout = timed_shape(run), layout_of(run)
    rc = run.recompute if recompute is None else recompute
    got = peak(shape, layout, batch_of(run), rc, states_of=states_of(run), check=False)
    return got["total"] / GIB


def dense_plan(run: Run, eta: float):
    hw = preset(run.cluster, eta)
    shape, layout = timed_shape(run), layout_of(run)
    plan = plan_layout(shape, layout, batch_of(run), hw, run.recompute, check=False)
    if run.cp > 1:
        plan = with_context(
            plan, replace(shape, seq_len=run.seq), run.cp, run.seq, batch_of(run), hw
        )
    return plan, hw


def moe_prediction(run: Run, eta: float) -> dict:
    """DeepSeek-V3: compute at ε of the bf16 peak (FP8 is not in the model), the 1F1B bubble of
    one-sequence micro-batches, the expert all-to-all overlapped as DualPipe aims to."""
    shape: MoEShape = run.model
    hw = preset(run.cluster, eta)
    tokens = run.global_batch * run.seq
    per_gpu = tokens / (run.gpus / run.pp)
    nodes = run.figures["nodes per token"]["value"]
    ep = ep_step(shape, per_gpu, run.pp, hw.inter, hw.peak_flops * eta, nodes)
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
        "memory GiB": memory_gib(run),
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
        flops = megatron_flops(shape, batch_of(run), run.recompute == "full")
        tflops = flops / (plan.step_s * run.gpus) / 1e12
        return {
            "figure": "TFLOP/s per GPU",
            "published": published_figure(run),
            "predicted": tflops,
            **out,
        }
    if "hours" in run.reported:
        examples = _count(run.figures["examples"]["value"])  # "52K" as the README writes it
        tokens = examples * run.figures["epochs"]["value"] * run.seq  # at most seq per example
        return {
            "figure": "hours",
            "published": published_figure(run),
            "predicted": tokens / (out["tokens/s/GPU"] * run.gpus) / 3600,
            **out,
        }
    return {"figure": "-", "published": None, "predicted": None, **out}


def _count(text) -> float:
    """A count as a source writes it: 52000, "52K" or "1.5M"."""
    if isinstance(text, (int, float)):
        return float(text)
    scale = {"K": 1e3, "M": 1e6, "B": 1e9}.get(str(text)[-1:].upper(), 1.0)
    return float(str(text).rstrip("KkMmBb")) * scale


def published_figure(run: Run):
    r = run.reported
    if "BF16 MFU %" in r:
        return r["BF16 MFU %"]
    if "TFLOP/s per GPU" in r:
        return r["TFLOP/s per GPU"]
    if "H800 GPU hours per 1e12 tokens" in r:  # tokens per GPU-second
        return 1e12 / (r["H800 GPU hours per 1e12 tokens"] * 3600)
    if "hours" in r:
        return r["hours"]
    return None


@lru_cache(maxsize=None)
def implied_eta(key: str, lo: float = 0.05, hi: float = 3.0) -> float:
    """ε that makes the step model reproduce run ``key``'s published figure (bisection; the
    figure rises with ε, except hours, which fall)."""
    run = by_key(key)
    target, falls = published_figure(run), "hours" in run.reported
    for _ in range(60):
        mid = (lo + hi) / 2
        below = predicted_figure(run, mid)["predicted"] < target
        lo, hi = (mid, hi) if below != falls else (lo, mid)
    return (lo + hi) / 2


def in_fit(run: Run) -> bool:
    return run.training == FIT_ON


@lru_cache(maxsize=None)
def fitted_eta(key: str | None = None) -> float:
    """The one constant. Without ``key``: the geometric mean of the ε that the ten rows of
    Megatron-LM's Table 1 each need (one table, one cluster, one framework; every other training
    is predicted out of sample). With ``key``: the ε that one run needs."""
    if key is not None:
        return implied_eta(key)
    needs = [implied_eta(r.key) for r in RUNS if in_fit(r)]
    return math.exp(sum(math.log(e) for e in needs) / len(needs))


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
                "in the fit": "yes" if in_fit(run) else "",
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


def errors_by_run(eta: float | None = None) -> dict[str, float]:
    """run -> its error in per cent (:func:`error_rows`), for the runs with a published figure."""
    return {r["run"]: r["error %"] for r in error_rows(eta) if r["error %"] != "-"}
