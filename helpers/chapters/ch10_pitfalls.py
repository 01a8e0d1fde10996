"""Chapter 10's pitfalls: each belief, a computation or run that shows it failing, and the fix.

Used by ``notebooks/10_pitfalls.ipynb`` and ``tests/test_pitfalls.py``. Every demo returns a
:class:`Shown`: the numbers that show the belief going wrong, the numbers after the fix, and
``holds`` — True only when the demo really showed the failure *and* the fix repaired it, so a
test can assert it. The demos here are in-process computations with the book's own helpers
(layouts, memory, comm, pipeline, mfu) or read a recorded GPU result (``helpers.record.results``);
those that start processes or call Colossal-AI live in :mod:`helpers.chapters.ch10_runs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils.data import DistributedSampler

from helpers.record import results
from helpers.cost.comm import NOMINAL_LINKS, ops_time, tp_layer_ops
from helpers.parallel.layouts import QWEN2_7B, Layout, data_degree, violations
from helpers.cost.memory import GB, estimate, seed_estimate_memory
from helpers.parallel.mesh import RankMesh
from helpers.cost.mfu import flops_per_token, mfu
from helpers.parallel.pp import bubble_fraction


@dataclass(frozen=True)
class Shown:
    """What a pitfall demo found: the failure, the corrected result, and whether both showed."""

    wrong: str
    fixed: str
    holds: bool


@dataclass(frozen=True)
class Pitfall:
    key: str
    belief: str
    chapter: str  # the book page that explains it, e.g. "03_strategy"
    demo: Callable[[], Shown]


def _refused(call: Callable[[], object]) -> str | None:
    """The ValueError text ``call`` raises, or None when it does not raise."""
    try:
        call()
    except ValueError as err:
        return str(err)
    return None


def more_parallelism() -> Shown:
    """Recorded step rates of the 2×H200 layouts (Chapter 3): model parallelism is slower than dp."""
    runs = results.load("ch03_layouts")["runs"]
    rate = {r["layout"]: r["results"][0]["tokens_per_s"] for r in runs if r.get("results")}
    rel = {k: v / rate["dp=2"] for k, v in rate.items()}
    return Shown(
        wrong=f"on the same 2 GPUs, tp=2 runs at {rel['tp=2']:.2f}× and pp=2 at {rel['pp=2, m=4']:.2f}× "
        f"(m=4) and {rel['pp=2, m=8']:.2f}× (m=8) the speed of dp=2: more model parallelism and more "
        f"micro-batches were slower",
        fixed=f"dp=2 is the fastest of {len(rate)} measured layouts ({rate['dp=2'] / 1e3:.1f} k tokens per second); "
        f"split the model only when it does not fit, and measure",
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
    states = lambda e: (e.weights + e.gradients + e.optimizer) / GB  # noqa: E731
    run = next(r for r in results.load("ch07_memory")["runs"] if r["name"] == "TP=2 bf16")["ranks"][
        0
    ]
    seed_run = 16 * run["params"] / GB  # the seed's rule on that rank's Ψ/(T·P) parameters
    return Shown(
        wrong=f"seed: 7 B × 16 B / (T={tp}·P={pp}) = {seed:.1f} GB per GPU. With activations (seq "
        f"{shape.seq_len}, micro-batch 1, {pp} micro-batches in flight on stage 0) and 1 GB of context: "
        f"{full.gb():.1f} GB, of which activations {full.gb('activations'):.1f} GB. Recorded on an H200 "
        f"(Chapter 7, a {2 * run['params'] / 1e9:.2f} B Llama as tp=2, micro-batch 4 × 1024 tokens): "
        f"the seed's rule gives {seed_run:.2f} GB, the measured peak was {run['measured']['peak'] / GB:.2f} GB "
        f"allocated, {run['measured']['device_used'] / GB:.2f} GB on the device",
        fixed=f"flash attention drops the s×s scores and ZeRO-1 over D={dp} shards the optimizer: "
        f"states {states(flash_z1):.1f} GB + activations {flash_z1.gb('activations'):.1f} GB + 1 GB "
        f"= {flash_z1.gb():.1f} GB",
        holds=full.gb() > 2 * seed
        and flash_z1.gb() < full.gb()
        and run["measured"]["peak"] / GB > 2 * seed_run,
    )


def data_degree_not_integer(G: int = 48, tp: int = 8, pp: int = 4) -> Shown:
    err = _refused(lambda: data_degree(G, tp, pp))
    return Shown(
        wrong=f"data_degree({G}, tp={tp}, pp={pp}): {err}",
        fixed=f"data_degree({G}, tp=4, pp=4) = {data_degree(G, 4, 4)}",
        holds=err is not None and data_degree(G, 4, 4) == 3,
    )


def _sgd_epoch(batch: int, lr: float, n: int = 1024, features: int = 16, seed: int = 0) -> float:
    """Mean-squared error after one epoch of minibatch SGD on a fixed linear-regression problem."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g, dtype=torch.float64)
    w_true = torch.randn(features, generator=g, dtype=torch.float64)
    y = x @ w_true + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    w = torch.zeros(features, dtype=torch.float64)
    for start in range(0, n, batch):
        xb, yb = x[start : start + batch], y[start : start + batch]
        w -= (
            lr * 2 * xb.T @ (xb @ w - yb) / batch
        )  # the mean gradient, as DDP's averaged all-reduce
    return float(((x @ w - y) ** 2).mean())


def lr_not_scaled(dp: int = 8, batch: int = 8, lr: float = 0.01) -> Shown:
    """Goyal et al. 2017, "Accurate, Large Minibatch SGD": global batch ×k → learning rate ×k."""
    one, same, scaled = (
        _sgd_epoch(batch, lr),
        _sgd_epoch(dp * batch, lr),
        _sgd_epoch(dp * batch, dp * lr),
    )
    return Shown(
        wrong=f"one epoch, 1 GPU (batch {batch}, lr {lr}): loss {one:.3f}; D={dp} (global batch {dp * batch}), "
        f"same lr: {dp}× fewer steps, loss {same:.3f}",
        fixed=f"lr × D = {dp * lr:g}: loss {scaled:.3f} (linear scaling rule; warm up for large D)",
        holds=same > 2 * one and abs(scaled - one) < 0.5 * one,
    )


def sampler_by_world(world: int = 4, tp: int = 2, samples: int = 8) -> Shown:
    """DistributedSampler over the world gives tensor-parallel peers different samples."""
    mesh = RankMesh.for_world(world, tp=tp)
    by_world = {
        r: list(DistributedSampler(range(samples), num_replicas=world, rank=r, shuffle=False))
        for r in range(world)
    }
    by_dp = {
        r: list(
            DistributedSampler(
                range(samples), num_replicas=mesh.dp, rank=mesh.coords(r)["dp"], shuffle=False
            )
        )
        for r in range(world)
    }
    group = mesh.group_of(0, "tp")
    return Shown(
        wrong=f"dp={mesh.dp}, tp={tp}: num_replicas=world gives tensor group {group} the samples "
        f"{[by_world[r] for r in group]}: the two halves of one layer see different inputs",
        fixed=f"num_replicas=dp, rank=dp_rank: {[by_dp[r] for r in group]} (the same samples in the group)",
        holds=len({tuple(by_world[r]) for r in group}) > 1
        and len({tuple(by_dp[r]) for r in group}) == 1,
    )


def tp_across_nodes(
    b: int = 1, s: int = 4096, h: int = 8192, tp: int = 8, layers: int = 80
) -> Shown:
    """Megatron TP's 4 all-reduces per layer over NVLink vs over InfiniBand (nominal links, α-β model)."""
    ops = tp_layer_ops(b, s, h)
    nv, ib = (ops_time(ops, tp, NOMINAL_LINKS[k]) * layers for k in ("nvlink4", "ib_ndr"))
    return Shown(
        wrong=f"T={tp} on a 70B-sized model (L={layers}, h={h}, s={s}): {ib * 1e3:.0f} ms of all-reduce per "
        f"step per micro-batch over InfiniBand NDR",
        fixed=f"the same inside one node over NVLink: {nv * 1e3:.0f} ms ({ib / nv:.0f}× less); put pipeline or "
        f"data parallelism across nodes",
        holds=ib > 5 * nv,
    )


def uneven_token_mean(counts: tuple[int, int] = (12, 36), seed: int = 0) -> Shown:
    """Averaging per-rank token means is not the global token mean when ranks hold different counts."""
    g = torch.Generator().manual_seed(seed)
    per_rank = [
        torch.rand(c, generator=g, dtype=torch.float64) * (1 + r) for r, c in enumerate(counts)
    ]
    mean_of_means = sum(t.mean() for t in per_rank) / len(per_rank)
    global_mean = torch.cat(per_rank).mean()
    fixed = sum(t.sum() for t in per_rank) / sum(counts)  # all-reduce the sums and the counts
    return Shown(
        wrong=f"token counts {list(counts)}: mean of the per-rank means {float(mean_of_means):.4f}, "
        f"true token mean {float(global_mean):.4f}",
        fixed=f"all-reduce (sum of losses, number of tokens), then divide: {float(fixed):.4f}",
        holds=bool(abs(mean_of_means - global_mean) > 0.05 and abs(fixed - global_mean) < 1e-12),
    )


def zero2_with_pipeline() -> Shown:
    bad, good = (
        Layout(dp=2, pp=2, microbatch=1, zero_stage=2),
        Layout(dp=2, pp=2, microbatch=1, zero_stage=1),
    )
    return Shown(
        wrong=f"{bad}, ZeRO-2: {violations(bad)}",
        fixed=f"{good}, ZeRO-1: {violations(good) or 'valid'}",
        holds=bool(violations(bad)) and not violations(good),
    )


def sp_size_with_split_gather() -> Shown:
    err = _refused(lambda: data_degree(8, tp=2, pp=1, sp=4, sp_mode="split_gather"))
    return Shown(
        wrong=f"data_degree(8, tp=2, sp=4, split_gather): {err}",
        fixed=f"leave sp at 1 (S = T = 2): D = {data_degree(8, 2, 1, 1, 'split_gather')}; or all_to_all "
        f"with sp=4: D = {data_degree(8, 2, 1, 4, 'all_to_all')}",
        holds=err is not None,
    )


def heads_not_divisible(G: int = 64) -> Shown:
    bad, good = Layout.for_world(G, tp=8), Layout.for_world(G, tp=4)
    return Shown(
        wrong=f"Qwen2-7B ({QWEN2_7B.heads} heads, {QWEN2_7B.kv} KV heads) with {bad}: "
        f"{violations(bad, QWEN2_7B)}",
        fixed=f"{good}: {violations(good, QWEN2_7B) or 'valid'}",
        holds=bool(violations(bad, QWEN2_7B)) and not violations(good, QWEN2_7B),
    )


def too_few_microbatches(p: int = 4) -> Shown:
    return Shown(
        wrong=f"P={p} with m=1: each stage idles {bubble_fraction(p, 1):.0%} of the step (and Colossal-AI's "
        f"1F1B asserts m ≥ P)",
        fixed=f"m=16: bubble {bubble_fraction(p, 16):.1%}; interleaved with 2 chunks: "
        f"{bubble_fraction(p, 16, chunks=2):.1%}",
        holds=bubble_fraction(p, 1) > 0.5 > 0.2 > bubble_fraction(p, 16),
    )


def mfu_with_recompute() -> Shown:
    """MFU of the recorded dp=2 layouts with and without recomputation (Chapter 3's 0.54 B Llama)."""
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
        fixed=f"MFU counts model FLOPs only: {mfu_rec:.1%} with recomputation vs {mfu_base:.1%} without",
        holds=mfu_rec < mfu_base and abs(hfu_rec / mfu_rec - 4 / 3) < 1e-9,
    )


def _run(name: str) -> Callable[[], Shown]:
    def call() -> Shown:
        from helpers.chapters import ch10_runs as pitfalls_runs

        return getattr(pitfalls_runs, name)()

    return call


PITFALLS = [
    Pitfall(
        "more-parallelism", "More parallelism is always faster.", "03_strategy", more_parallelism
    ),
    Pitfall(
        "seed-memory",
        "The seed's 16 B/param ÷ (T·P) is the memory each GPU needs.",
        "07_memory",
        seed_memory,
    ),
    Pitfall(
        "data-degree",
        "Any T and P work on any number of GPUs.",
        "02_combining",
        data_degree_not_integer,
    ),
    Pitfall(
        "lr-scaling",
        "Adding data-parallel GPUs needs no change to the learning rate.",
        "09_quick_demos",
        lr_not_scaled,
    ),
    Pitfall(
        "sampler-world",
        "Shard the dataloader over the world size.",
        "02_combining",
        sampler_by_world,
    ),
    Pitfall(
        "pp-loss-rank", "Every rank can log the loss.", "01_dimensions", _run("loss_on_first_stage")
    ),
    Pitfall(
        "tp-across-nodes",
        "Tensor parallelism may span nodes like any other axis.",
        "03_strategy",
        tp_across_nodes,
    ),
    Pitfall(
        "gpt2-causal",
        "GPT-2 under HybridParallelPlugin is still a causal language model.",
        "01_dimensions",
        _run("gpt2_mask_not_causal"),
    ),
    Pitfall(
        "a2a-unsupported",
        "all_to_all sequence parallelism works on any model.",
        "09_quick_demos",
        _run("all_to_all_unsupported"),
    ),
    Pitfall(
        "resume-rng",
        "Weights and optimizer are all a checkpoint needs.",
        "05_launch",
        _run("resume_without_rng"),
    ),
    Pitfall(
        "token-mean",
        "The mean of per-rank loss means is the global loss.",
        "01_dimensions",
        uneven_token_mean,
    ),
    Pitfall(
        "zero2-pp", "ZeRO-2 combines with pipeline parallelism.", "04_config", zero2_with_pipeline
    ),
    Pitfall(
        "sp-split-gather",
        "sp_size sets the sequence degree in every mode.",
        "02_combining",
        sp_size_with_split_gather,
    ),
    Pitfall(
        "heads-tp", "Any tensor degree that divides G will do.", "02_combining", heads_not_divisible
    ),
    Pitfall(
        "few-microbatches",
        "A pipeline needs only as many micro-batches as stages, or fewer.",
        "01_dimensions",
        too_few_microbatches,
    ),
    Pitfall(
        "mfu-recompute", "Recomputed FLOPs count towards MFU.", "07_memory", mfu_with_recompute
    ),
    Pitfall(
        "orphans",
        "Killing torchrun on a timeout stops the training.",
        "05_launch",
        _run("orphaned_workers"),
    ),
    Pitfall(
        "kernel-lock",
        "A Colossal-AI run that is silent at start-up can be killed and started again.",
        "08_troubleshooting",
        _run("stale_kernel_lock"),
    ),
]
BY_KEY = {p.key: p for p in PITFALLS}


def show(key: str) -> Shown:
    """Run pitfall ``key``'s demo, display belief / demonstrated / corrected, and glue it for the page."""
    from helpers.config.plugin import show_table

    pitfall = BY_KEY[key]
    shown = pitfall.demo()
    rows = [
        {"": "belief", "result": pitfall.belief},
        {"": "demonstrated", "result": shown.wrong},
        {"": "corrected", "result": shown.fixed},
    ]
    show_table(rows, ["", "result"], f"ch10-{key}")
    return shown
