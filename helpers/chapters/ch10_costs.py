"""Chapter 10's pitfalls of the cost arithmetic: speed, memory, communication, bubble and MFU.

Each demo computes with the book's own models (:mod:`helpers.cost.memory_plan`,
:mod:`helpers.cost.comm`, :mod:`helpers.cost.mfu`, :mod:`helpers.parallel.pp`) or reads a recorded
GPU result (``helpers.record.results``) and returns a :class:`~helpers.chapters.ch10_shown.Shown`.
"""

from __future__ import annotations

from helpers.chapters.ch10_shown import Shown
from helpers.chapters.ch08_tp_placement import placement_name, tp_placements
from helpers.models.shape import ModelShape
from helpers.cost import memory_plan
from helpers.cost.memory import GB, seed_estimate_memory
from helpers.cost.mfu import flops_per_token, mfu
from helpers.parallel.layouts import Layout, data_degree
from helpers.parallel.pp import bubble_fraction
from helpers.record import results
from helpers.record.ch07_tables import rank_results

# Qwen2-7B as its config.json gives it: 28 layers, hidden 3584, 28 query and 4 KV heads, SwiGLU
# width 18944, vocabulary 152064, biases on q, k, v (Yang et al. 2024, "Qwen2 Technical Report")
QWEN2_7B_FULL = ModelShape.llama(
    28, 3584, 28, 4, vocab=152064, ffn=18944, seq_len=4096, biases=True
)


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
        "tokens per second); split the model when it does not fit, or when what the split "
        "frees pays for its communication, and measure",
        holds=max(rate, key=rate.get) == "dp=2" and rate["pp=2, m=8"] < rate["pp=2, m=4"],
    )


def seed_memory(G: int = 64, tp: int = 4, pp: int = 2) -> Shown:
    """The seed's 16 B/param ÷ (T·P) against Chapter 7's memory model (:func:`memory_plan.peak`,
    activations, ZeRO and the bytes outside the allocator) and a recorded H200 run."""
    seed = seed_estimate_memory(7, tp, pp)
    dp = data_degree(G, tp, pp)
    batch = dp * pp  # micro-batch 1, P micro-batches per step: P in flight on stage 0
    eager = memory_plan.peak(QWEN2_7B_FULL, Layout(dp, tp, pp, microbatch=1), batch, flash=False)
    flash_z1 = memory_plan.peak(
        QWEN2_7B_FULL, Layout(dp, tp, pp, microbatch=1, zero_stage=1), batch, flash=True
    )

    def states(p: dict) -> float:
        s = p["prediction"]["states"]
        return (s["weights"] + s["master"] + s["optimizer"] + s["grads"]) / GB

    memory_runs = results.load("ch07_memory")["runs"]
    run = rank_results(next(r for r in memory_runs if r["name"] == "TP=2 bf16"))[0]
    seed_run = 16 * run["params"] / GB  # the seed's rule on that rank's Ψ/(T·P) parameters
    outside = eager["outside"] / GB
    return Shown(
        wrong=f"seed: 7 B × 16 B / (T={tp}·P={pp}) = {seed:.1f} GB per GPU. Chapter 7's model for "
        f"Qwen2-7B ({QWEN2_7B_FULL.params / 1e9:.2f} B, seq {QWEN2_7B_FULL.seq_len}, micro-batch "
        f"1, {pp} micro-batches in flight on stage 0, eager attention, no ZeRO): "
        f"{eager['total'] / GB:.1f} GB, of which activations "
        f"{eager['prediction']['activations'] / GB:.1f} GB and {outside:.1f} GB outside the "
        f"allocator. Recorded on an H200 (Chapter 7, a {2 * run['params'] / 1e9:.2f} B Llama as "
        f"tp=2, micro-batch 4 × 1024 tokens): the seed's rule gives {seed_run:.2f} GB, the "
        f"measured peak was {run['measured']['peak'] / GB:.2f} GB allocated, "
        f"{run['measured']['device_used'] / GB:.2f} GB on the device",
        fixed=f"fused attention (SDPA) drops the s×s scores and ZeRO-1 over D={dp} shards the fp32 "
        f"masters and Adam's moments: states {states(flash_z1):.1f} GB + activations "
        f"{flash_z1['prediction']['activations'] / GB:.1f} GB, {flash_z1['total'] / GB:.1f} GB "
        "in all",
        holds=eager["total"] > 2 * seed * 1e9 / GB
        and flash_z1["total"] < eager["total"]
        and run["measured"]["peak"] / GB > 2 * seed_run,
    )


def tp_across_nodes(
    b: int = 1, s: int = 4096, h: int = 8192, tp: int = 8, layers: int = 80
) -> Shown:
    """Megatron TP's 4 all-reduces per layer (Shoeybi et al. 2019, §3) of a 70B-sized model,
    inside a node over NVLink and spread over nodes (α-β model, nominal links; the placements of
    :func:`helpers.chapters.ch08_tp_placement.tp_placements`).

    Across nodes a ring leaves each node once per channel and NCCL spreads its channels over the
    node's network cards (nccl-tests ``doc/PERFORMANCE.md``; one card per GPU on HGX/DGX
    H100/H200): a group of 8 as 2 nodes × 4 GPUs runs through 4 cards, as 8 nodes × 1 GPU through
    one (:func:`helpers.cost.placement.spanning_link`). ``holds``: every placement across nodes is
    slower per all-reduce than NVLink, with a larger share of the step, and one GPU per node is
    the worst.
    """
    inside, *across = tp_placements(layers=layers, hidden=h, micro_batch=b, seq=s, tp=tp)
    spread = across[-1]  # one GPU per node

    def per_op(p: dict) -> float:
        return p["comm_s"] / p["collectives"]

    def ms(p: dict) -> str:
        return f"{p['comm_s'] * 1e3:.0f} ms ({p['share']:.0%} of the step)"

    return Shown(
        wrong=f"T={tp} on a 70B-sized model (L={layers}, h={h}, s={s}), all-reduce time per "
        f"micro-batch across nodes, InfiniBand NDR: "
        + "; ".join(f"{placement_name(p)} {ms(p)}" for p in across),
        fixed=f"inside one node over NVLink: {ms(inside)}, "
        f"{spread['comm_s'] / inside['comm_s']:.1f}× less than one GPU per node and "
        f"{across[0]['comm_s'] / inside['comm_s']:.1f}× less than "
        f"{across[0]['nodes']} nodes × {across[0]['per_node']} GPUs; put pipeline or data "
        "parallelism across nodes",
        holds=bool(across)
        and all(per_op(p) > per_op(inside) and p["share"] > inside["share"] for p in across)
        and max(across, key=lambda p: p["comm_s"]) is spread
        and spread["per_node"] == 1,
    )


def tp_seq_for(target_s: float = 0.1, per_node: int = 4, tp: int = 8) -> dict:
    """The sequence length at which TP's all-reduces per micro-batch (:func:`tp_across_nodes`'s
    model, ``per_node`` GPUs of the group on each node) take ``target_s``: the α of each
    all-reduce is fixed, the rest linear in s (the all-reduced tensors are b·s·h)."""
    [p] = tp_placements(seq=4096, tp=tp, per_node=(per_node,))
    seq = 4096 * (target_s - p["latency_s"]) / p["bandwidth_s"]
    return {"seq": seq, "latency_share": p["latency_s"] / target_s, "placement": placement_name(p)}


def tp_numbers() -> dict[str, int]:
    """Exercise 1's answer under its glue keys: the sequence length at which TP of 8 spread as
    2 nodes × 4 GPUs spends 100 ms per micro-batch in all-reduces, and the latency's share."""
    r = tp_seq_for()
    return {
        "ch10-tp-seq-100ms": int(round(r["seq"], -1)),
        "ch10-tp-seq-100ms-latency-pct": round(100 * r["latency_share"]),
    }


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
    Llama), counting 6Ψ_mm + 12·L·h·s model FLOPs per token (Ψ_mm: all but the input
    embedding)."""
    runs = {
        r["layout"]: r["results"][0]
        for r in results.load("ch03_layouts")["runs"]
        if r.get("results")
    }
    base, rec = runs["dp=2"], runs["dp=2 + recompute"]
    m = base["model"]
    psi_mm = base["params"] - m["vocab"] * m["hidden"]  # all but the input embedding
    model_f = flops_per_token(psi_mm, m["layers"], m["hidden"], m["seq"])
    hw_f = flops_per_token(psi_mm, m["layers"], m["hidden"], m["seq"], recompute=True)
    mfu_base, mfu_rec = mfu(base["tokens_per_s"], model_f, 2), mfu(rec["tokens_per_s"], model_f, 2)
    hfu_rec = mfu(rec["tokens_per_s"], hw_f, 2)
    return Shown(
        wrong=f"with recomputation, counting the recomputed forward: {hfu_rec:.1%} — "
        f"looks as good as dp=2 without it ({mfu_base:.1%})",
        fixed=f"MFU counts model FLOPs only: {mfu_rec:.1%} with recomputation vs {mfu_base:.1%} "
        "without",
        holds=mfu_rec < mfu_base and abs(hfu_rec / mfu_rec - 4 / 3) < 1e-9,
    )
