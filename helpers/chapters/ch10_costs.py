"""Chapter 10's pitfalls of the cost arithmetic: speed, memory, communication, bubble and MFU.

Each demo computes with the book's own models (:mod:`helpers.cost.memory`, :mod:`helpers.cost.comm`,
:mod:`helpers.cost.mfu`, :mod:`helpers.parallel.pp`) or reads a recorded GPU result
(``helpers.record.results``) and returns a :class:`~helpers.chapters.ch10_shown.Shown`.
"""

from __future__ import annotations

from helpers.chapters.ch10_shown import Shown
from helpers.cost.comm import NOMINAL_LINKS, ops_time, tp_layer_ops
from helpers.cost.memory import GB, estimate, seed_estimate_memory
from helpers.cost.mfu import flops_per_token, mfu
from helpers.parallel.layouts import QWEN2_7B, data_degree
from helpers.parallel.pp import bubble_fraction
from helpers.record import results
from helpers.record.ch07_tables import rank_results


def more_parallelism() -> Shown:
    """Recorded step rates of the 2×H200 layouts (Chapter 3): model parallelism is slower than
    dp."""
    runs = results.load("ch03_layouts")["runs"]
    rate = {r["layout"]: r["results"][0]["tokens_per_s"] for r in runs if r.get("results")}
    rel = {k: v / rate["dp=2"] for k, v in rate.items()}
    return Shown(
        wrong=f"on the same 2 GPUs, tp=2 runs at {rel['tp=2']:.2f}× and pp=2 at "
        f"{rel['pp=2, m=4']:.2f}× (m=4) and {rel['pp=2, m=8']:.2f}× (m=8) the speed of dp=2: more "
        "model parallelism and more micro-batches were slower",
        fixed=f"dp=2 is the fastest of {len(rate)} measured layouts ({rate['dp=2'] / 1e3:.1f} k "
        "tokens per second); split the model only when it does not fit, and measure",
        holds=max(rate, key=rate.get) == "dp=2" and rate["pp=2, m=8"] < rate["pp=2, m=4"],
    )


def seed_memory(G: int = 64, tp: int = 4, pp: int = 2) -> Shown:
    """The seed's 16 B/param ÷ (T·P) against the memory model with activations and ZeRO."""
    seed = seed_estimate_memory(7, tp, pp)
    shape, dp = QWEN2_7B, data_degree(G, tp, pp)
    full = estimate(7e9, dp=dp, tp=tp, pp=pp, shape=shape, micro_batch=1, overhead_bytes=1 * GB)
    flash_z1 = estimate(
        7e9,
        dp=dp,
        tp=tp,
        pp=pp,
        shape=shape,
        micro_batch=1,
        overhead_bytes=1 * GB,
        flash=True,
        zero_stage=1,
    )

    def states(e) -> float:
        return (e.weights + e.gradients + e.optimizer) / GB

    memory_runs = results.load("ch07_memory")["runs"]
    run = rank_results(next(r for r in memory_runs if r["name"] == "TP=2 bf16"))[0]
    seed_run = 16 * run["params"] / GB  # the seed's rule on that rank's Ψ/(T·P) parameters
    return Shown(
        wrong=f"seed: 7 B × 16 B / (T={tp}·P={pp}) = {seed:.1f} GB per GPU. With activations (seq "
        f"{shape.seq_len}, micro-batch 1, {pp} micro-batches in flight on stage 0) and 1 GB of "
        f"context: {full.gb():.1f} GB, of which activations {full.gb('activations'):.1f} GB. "
        f"Recorded on an H200 (Chapter 7, a {2 * run['params'] / 1e9:.2f} B Llama as tp=2, "
        f"micro-batch 4 × 1024 tokens): the seed's rule gives {seed_run:.2f} GB, the measured "
        f"peak was {run['measured']['peak'] / GB:.2f} GB allocated, "
        f"{run['measured']['device_used'] / GB:.2f} GB on the device",
        fixed=f"flash attention drops the s×s scores and ZeRO-1 over D={dp} shards the optimizer: "
        f"states {states(flash_z1):.1f} GB + activations {flash_z1.gb('activations'):.1f} GB + 1 "
        f"GB = {flash_z1.gb():.1f} GB",
        holds=full.gb() > 2 * seed
        and flash_z1.gb() < full.gb()
        and run["measured"]["peak"] / GB > 2 * seed_run,
    )


def tp_across_nodes(
    b: int = 1, s: int = 4096, h: int = 8192, tp: int = 8, layers: int = 80
) -> Shown:
    """Megatron TP's 4 all-reduces per layer over NVLink vs over InfiniBand (nominal links, α-β
    model)."""
    ops = tp_layer_ops(b, s, h)
    nv, ib = (ops_time(ops, tp, NOMINAL_LINKS[k]) * layers for k in ("nvlink4", "ib_ndr"))
    return Shown(
        wrong=f"T={tp} on a 70B-sized model (L={layers}, h={h}, s={s}): {ib * 1e3:.0f} ms of "
        "all-reduce per step per micro-batch over InfiniBand NDR",
        fixed=f"the same inside one node over NVLink: {nv * 1e3:.0f} ms ({ib / nv:.0f}× less); "
        "put pipeline or data parallelism across nodes",
        holds=ib > 5 * nv,
    )


def too_few_microbatches(p: int = 4) -> Shown:
    return Shown(
        wrong=f"P={p} with m=1: each stage idles {bubble_fraction(p, 1):.0%} of the step (and "
        "Colossal-AI's 1F1B asserts m ≥ P)",
        fixed=f"m=16: bubble {bubble_fraction(p, 16):.1%}; interleaved with 2 chunks: "
        f"{bubble_fraction(p, 16, chunks=2):.1%}",
        holds=bubble_fraction(p, 1) > 0.5 > 0.2 > bubble_fraction(p, 16),
    )


def mfu_with_recompute() -> Shown:
    """MFU of the recorded dp=2 layouts with and without recomputation (Chapter 3's 0.54 B
    Llama)."""
    runs = {
        r["layout"]: r["results"][0]
        for r in results.load("ch03_layouts")["runs"]
        if r.get("results")
    }
    base, rec = runs["dp=2"], runs["dp=2 + recompute"]
    m = base["model"]
    model_f = flops_per_token(base["params"], m["layers"], m["hidden"], m["seq"])
    hw_f = flops_per_token(base["params"], m["layers"], m["hidden"], m["seq"], recompute=True)
    mfu_base, mfu_rec = mfu(base["tokens_per_s"], model_f, 2), mfu(rec["tokens_per_s"], model_f, 2)
    hfu_rec = mfu(rec["tokens_per_s"], hw_f, 2)
    return Shown(
        wrong=f"with recomputation, counting the recomputed forward: {hfu_rec:.1%} — "
        f"looks as good as dp=2 without it ({mfu_base:.1%})",
        fixed=f"MFU counts model FLOPs only: {mfu_rec:.1%} with recomputation vs {mfu_base:.1%} "
        "without",
        holds=mfu_rec < mfu_base and abs(hfu_rec / mfu_rec - 4 / 3) < 1e-9,
    )
