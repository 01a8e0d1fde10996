"""The layout planner: enumerate every layout of G GPUs, drop what does not fit, estimate step time, rank.

Used by Chapter 3 (strategy) and its calculator (:mod:`helpers.notebook.widgets`). The seed (策略选择方法)
ranks (dp, tp, pp) by a score (tp-1) + (pp-1)/2 and prints a memory figure it never checks
(:func:`seed_recommend`, reproduced from its ``recommend``). The planner replaces the score by a
time estimate built from the book's models, each with its source:

* layouts and their validity: :mod:`helpers.parallel.layouts` (G = D×T×P×S, head/layer divisibility,
  ZeRO ≤ 1 with a pipeline, 1F1B's m ≥ P);
* memory per GPU: :func:`helpers.cost.memory.estimate` (ZeRO §3, Korthikanti Table 2, 1F1B in flight)
  plus a fixed overhead; a layout that does not fit ``Hardware.memory_gib`` is dropped;
* compute: (6Ψ + 12·L·h·s) FLOPs per token, ×4/3 with full recomputation (one more
  forward pass; PaLM, Chowdhery et al. 2022, appendix B), at an
  *assumed* MFU of the peak: the same efficiency for every layout, a stated simplification;
* communication by tier (:mod:`helpers.cost.comm`, α-β links): a group whose ranks lie in one node uses
  ``Hardware.intra`` (NVLink), otherwise ``Hardware.inter`` (the network). Ranks follow
  Colossal-AI's mesh (dp, pp, tp, sp), last axis fastest, so sp and tp groups are the innermost.
  TP: Megatron's 4 all-reduces of b·s·h per layer per micro-batch; Ulysses: 8 all-to-alls; pipeline
  sends one activation each way per micro-batch; data parallel: one all-reduce of the gradients
  per step (ZeRO §7: 2Ψ for stages 0-2), overlapped with the last micro-batch's backward; ZeRO-2
  cannot accumulate sharded gradients locally, so it reduce-scatters after every micro-batch's
  backward (overlapped with it) and all-gathers the updated parameters once per step;
* pipeline: 1F1B runs (m + p - 1) micro-batch slots, the bubble (p-1)/(m+p-1)
  (:func:`helpers.parallel.pp.bubble_fraction`).

    python -m helpers.cost.planner --bench     # every layout of a 70 B model on 1,024 GPUs
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

from helpers.cost.comm import (
    NOMINAL_LINKS,
    Link,
    collective_time,
    ops_time,
    tp_layer_ops,
    ulysses_layer_ops,
)
from helpers.parallel.layouts import Layout, ModelShape, factor_parallelism, violations
from helpers.cost.memory import GIB, estimate, seed_estimate_memory
from helpers.parallel.pp import bubble_fraction


@dataclass(frozen=True)
class Model:
    """A Llama-style decoder: the numbers the planner needs."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq_len: int

    @property
    def params(self) -> int:
        """4Lh² attention (GQA: 2h² + 2h·h_kv), 3·L·h·ffn SwiGLU, 2vh untied embeddings
        (Chapter 7's parameter count)."""
        kv = self.hidden * self.kv_heads // self.heads
        return (
            self.layers * (2 * self.hidden**2 + 2 * self.hidden * kv + 3 * self.hidden * self.ffn)
            + 2 * self.vocab * self.hidden
        )

    def shape(self) -> ModelShape:
        return ModelShape(self.layers, self.heads, self.kv_heads, self.hidden, self.seq_len)


LLAMA2_70B = Model("Llama-2-70B", 80, 8192, 64, 8, 28672, 32000, 4096)
SEED_7B5 = Model("7.5 B Llama-style", 36, 4096, 32, 32, 11008, 32000, 2048)
VALIDATION_0B5 = Model("0.54 B Llama (Chapter 3's 2-GPU runs)", 8, 2048, 16, 16, 5504, 32000, 1024)


@dataclass(frozen=True)
class Hardware:
    """GPUs and links. Defaults: H100/H200-class SXM nodes, nominal links of :data:`NOMINAL_LINKS`."""

    gpus_per_node: int = 8
    memory_gib: float = 80.0
    peak_flops: float = 989.5e12  # dense bf16, H100/H200 SXM datasheet
    mfu: float = (
        0.40  # assumed model-FLOPs utilisation (known-facts: 0.95 B Llama measured 29-40 %)
    )
    intra: Link = NOMINAL_LINKS["nvlink4"]
    inter: Link = NOMINAL_LINKS["ib_ndr"]
    # CUDA context, NCCL buffers, allocator slack (Chapter 7's "outside allocator" column: 0.5-2 GiB)
    overhead_gib: float = 2.0
    flash: bool = True  # flash attention: no s×s scores stored


@dataclass(frozen=True)
class Plan:
    """One layout with its memory and modelled step time (seconds, per optimizer step)."""

    layout: Layout
    microbatches: int
    recompute: bool
    memory_gib: float
    compute_s: float
    tp_comm_s: float
    sp_comm_s: float
    pp_comm_s: float
    bubble_s: float
    dp_comm_s: float
    step_s: float
    tiers: dict = field(default_factory=dict)

    def row(self, tokens_per_step: int) -> dict:
        L = self.layout
        return {
            "layout": str(L),
            "zero": L.zero_stage,
            "micro-batch": L.microbatch,
            "m": self.microbatches,
            "recompute": "yes" if self.recompute else "no",
            "memory GiB": round(self.memory_gib, 1),
            "compute s": round(self.compute_s, 3),
            "tp+sp comm s": round(self.tp_comm_s + self.sp_comm_s, 3),
            "bubble s": round(self.bubble_s, 3),
            "dp comm s": round(self.dp_comm_s, 3),
            "step s": round(self.step_s, 3),
            "tokens/s": round(tokens_per_step / self.step_s),
        }


def _link(span: int, hw: Hardware) -> Link:
    """The link a group of ``span`` consecutive ranks uses: NVLink if it fits in one node."""
    return hw.intra if span <= hw.gpus_per_node and hw.gpus_per_node % span == 0 else hw.inter


def plan_layout(
    model: Model, layout: Layout, global_batch: int, hw: Hardware, recompute: bool = False
) -> Plan:
    """Memory and step time of one layout (see the module docstring for every term)."""
    L, s, h = layout, model.seq_len, model.hidden
    m = global_batch // (L.dp * L.microbatch)
    a2a = L.sp if L.sp_mode == "all_to_all" else 1
    mem = estimate(
        model.params,
        L,
        shape=model.shape(),
        microbatches=m,
        recompute=recompute,
        flash=hw.flash,
        overhead_bytes=hw.overhead_gib * GIB,
    )
    G = L.world_size
    flops = (6 * model.params + 12 * model.layers * h * s) * (4 / 3 if recompute else 1)
    compute = flops * global_batch * s / G / (hw.peak_flops * hw.mfu)
    per_mb = compute / m
    layers = model.layers // L.pp
    tp_link, sp_link = _link(L.tp * L.sp, hw), _link(L.sp, hw)
    tp_mb = (
        ops_time(
            tp_layer_ops(
                L.microbatch, s // a2a, h, 2, sequence_parallel=L.sp_mode == "split_gather"
            )
            * layers,
            L.tp,
            tp_link,
        )
        if L.tp > 1
        else 0.0
    )
    sp_mb = (
        ops_time(ulysses_layer_ops(L.microbatch, s, h, a2a) * layers, a2a, sp_link)
        if a2a > 1
        else 0.0
    )
    pp_link = _link(L.pp * L.tp * L.sp, hw)
    act = L.microbatch * s / a2a * h * 2
    pp_mb = 2 * (pp_link.latency_s + act / pp_link.bandwidth_bytes_per_s) if L.pp > 1 else 0.0
    slot = per_mb + tp_mb + sp_mb + pp_mb
    bubble = bubble_fraction(L.pp, m) * (m + L.pp - 1) * slot  # (p - 1) idle slots of 1F1B
    group = L.dp * a2a  # Colossal-AI reduces gradients over dp × sp
    grads = model.params / (L.tp * L.pp) * 2  # bf16 gradients of one model shard
    dp_link = hw.intra if G <= hw.gpus_per_node else hw.inter
    window = 2 / 3 * per_mb  # a micro-batch's backward, which bucketed communication overlaps
    if (
        L.zero_stage == 2
    ):  # sharded gradients cannot accumulate locally: reduce-scatter every micro-batch
        rs = collective_time("reduce_scatter", grads, group, dp_link)
        dp_exposed = m * max(0.0, rs - window) + collective_time(
            "all_gather", grads, group, dp_link
        )
    else:  # gradients accumulate locally (no_sync) and are all-reduced once, during the last backward
        dp_exposed = max(0.0, collective_time("all_reduce", grads, group, dp_link) - window)
    step = m * slot + bubble + dp_exposed
    tiers = {
        "tp": tp_link.name.split(",")[0],
        "dp": dp_link.name.split(",")[0],
        "pp": pp_link.name.split(",")[0],
    }
    return Plan(
        L,
        m,
        recompute,
        mem.total / GIB,
        compute,
        m * tp_mb,
        m * sp_mb,
        m * pp_mb,
        bubble,
        dp_exposed,
        step,
        tiers,
    )


def _divisors(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def enumerate_layouts(
    model: Model,
    G: int,
    global_batch: int,
    max_tp: int = 16,
    max_pp: int = 16,
    max_sp: int = 8,
    microbatches=(1, 2, 4, 8),
    zero_stages=(0, 1, 2),
) -> list[tuple[Layout, bool]]:
    """Every (layout, recompute) the rules of :func:`helpers.parallel.layouts.violations` allow."""
    out = []
    shape = model.shape()
    for tp in _divisors(G, max_tp):
        for pp in _divisors(G // tp, max_pp):
            for mode in (None, "split_gather", "all_to_all"):
                for sp in _divisors(G // (tp * pp), max_sp)[1:] if mode == "all_to_all" else [1]:
                    dp = G // (tp * pp * sp)
                    for mb in microbatches:
                        for zero in zero_stages:
                            layout = Layout(dp, tp, pp, sp, mode, mb, zero)
                            if violations(layout, shape, global_batch):
                                continue
                            out += [(layout, False), (layout, True)]
    return out


def plan(
    model: Model, G: int, global_batch: int, hw: Hardware = Hardware(), **limits
) -> tuple[list[Plan], int]:
    """(plans that fit, fastest first; how many layouts were enumerated)."""
    candidates = enumerate_layouts(model, G, global_batch, **limits)
    plans = [plan_layout(model, layout, global_batch, hw, rc) for layout, rc in candidates]
    fits = [p for p in plans if p.memory_gib <= hw.memory_gib]
    fits.sort(key=lambda p: (p.step_s, p.memory_gib))
    return fits, len(candidates)


# --- the seed's recommend, and what the planner says about the same combinations --------------------


def seed_recommend(
    total_gpus: int, param_billions: float
) -> list[tuple[float, int, int, int, float]]:
    """The seed's ``recommend``: (score, dp, tp, pp, GB) sorted, score = (tp-1)·1.0 + (pp-1)·0.5."""
    scored = [
        ((tp - 1) * 1.0 + (pp - 1) * 0.5, dp, tp, pp, seed_estimate_memory(param_billions, tp, pp))
        for dp, tp, pp in factor_parallelism(total_gpus)
    ]
    scored.sort()
    return scored


def seed_report(total_gpus: int = 32, param_billions: float = 7.5, top: int = 8) -> str:
    """The seed's ``main()`` output, line for line."""
    lines = [f"{total_gpus}卡训练{param_billions}B模型的可行并行组合(按通信开销排序):"]
    for comm, dp, tp, pp, mem in seed_recommend(total_gpus, param_billions)[:top]:
        lines.append(
            f"数据并行{dp} x 张量并行{tp} x 流水线并行{pp} | 单卡显存约 {mem:.1f} GB | 通信代价 {comm:.1f}"
        )
    return "\n".join(lines)


def seed_vs_planner(
    model: Model = SEED_7B5, G: int = 32, global_batch: int = 64, hw: Hardware = Hardware()
) -> list[dict]:
    """Each of the seed's (dp, tp, pp), in the seed's order, with the planner's best way to run it."""
    fits, _ = plan(model, G, global_batch, hw, max_tp=8, max_pp=4)
    best: dict[tuple[int, int, int], Plan] = {}
    for (
        p
    ) in fits:  # fastest first: the first plan of a (dp, tp, pp) without an own sp axis is its best
        key = (p.layout.dp, p.layout.tp, p.layout.pp)
        if p.layout.sp == 1 and p.layout.sp_mode is None:
            best.setdefault(key, p)
    order = sorted(best, key=lambda k: best[k].step_s)
    rows = []
    for i, (score, dp, tp, pp, mem) in enumerate(seed_recommend(G, round(model.params / 1e9, 1))):
        p = best.get((dp, tp, pp))
        rows.append(
            {
                "seed rank": i + 1,
                "dp×tp×pp": f"{dp}×{tp}×{pp}",
                "seed score": score,
                "seed GB": round(mem, 1),
                "seed fits": "yes" if mem * 1e9 <= hw.memory_gib * GIB else "no",
                "planner": (
                    f"ZeRO-{p.layout.zero_stage}, mb {p.layout.microbatch}"
                    + (", recompute" if p.recompute else "")
                )
                if p
                else "does not fit",
                "memory GiB": round(p.memory_gib, 1) if p else "-",
                "step s": round(p.step_s, 3) if p else "-",
                "planner rank": order.index((dp, tp, pp)) + 1 if p else "-",
            }
        )
    return rows


def bench(
    G: int = 1024, model: Model = LLAMA2_70B, global_batch: int = 1024, hw: Hardware = Hardware()
) -> tuple[int, int, float]:
    """(layouts enumerated, layouts that fit, seconds) for ranking every layout of ``model`` on G GPUs."""
    t0 = time.perf_counter()
    fits, count = plan(model, G, global_batch, hw)
    return count, len(fits), time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bench", action="store_true", help="rank every layout of a 70 B model on 1,024 GPUs"
    )
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    if args.bench:
        count, fit, seconds = bench()
        print(
            f"{LLAMA2_70B.name} ({LLAMA2_70B.params / 1e9:.1f} B) on 1024 GPUs, global batch 1024 × 4096 tokens: "
            f"{count} layouts enumerated, {fit} fit in 80 GiB, ranked in {seconds:.3f} s"
        )
        fits, _ = plan(LLAMA2_70B, 1024, 1024)
        for p in fits[: args.top]:
            print(p.row(1024 * 4096))
    else:
        print(seed_report())


if __name__ == "__main__":
    main()
