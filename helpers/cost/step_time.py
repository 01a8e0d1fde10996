"""The step-time model of one layout: memory per GPU and seconds per optimizer step.

Used by Chapter 3 (strategy): :mod:`helpers.cost.planner` ranks every layout by it, and the
chapter's two-GPU runs check it (``helpers/record/ch03.py``). Each term has its source:

* memory per GPU: Chapter 7's memory model through :func:`helpers.cost.memory_plan.peak` (what
  ``HybridParallelPlugin`` and the model allocate on the busiest rank, logits and loss included,
  1F1B in flight) plus what the allocator never sees (``Hardware.overhead_gib``, the largest
  Chapter 7 measured);
* compute: (6Ψ + 12·L·h·s) FLOPs per token, ×4/3 with full recomputation (one more
  forward pass; PaLM, Chowdhery et al. 2022, appendix B), at an
  *assumed* MFU of the peak: the same efficiency for every layout, a stated simplification;
* communication by tier (:mod:`helpers.cost.comm`, α-β links): a group whose ranks lie in one
  node uses ``Hardware.intra`` (NVLink), otherwise ``Hardware.inter`` (the network). Ranks follow
  Colossal-AI's mesh (dp, pp, tp, sp), last axis fastest, so sp and tp groups are the innermost.
  TP: Megatron's 4 all-reduces of b·s·h per layer per micro-batch; Ulysses: 8 all-to-alls; pipeline
  sends one activation each way per micro-batch; data parallel: one all-reduce of the gradients
  per step (ZeRO §7: 2Ψ for stages 0-2), overlapped with the last micro-batch's backward; ZeRO-2
  cannot accumulate sharded gradients locally, so it reduce-scatters after every micro-batch's
  backward (overlapped with it) and all-gathers the updated parameters once per step;
* pipeline: 1F1B runs (m + p - 1) micro-batch slots, the bubble (p-1)/(m+p-1)
  (:func:`helpers.parallel.pp.bubble_fraction`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from helpers.config.shape import ModelShape
from helpers.cost.comm import (
    NOMINAL_LINKS,
    Link,
    collective_time,
    ops_time,
    tp_layer_ops,
    ulysses_layer_ops,
)
from helpers.cost.memory_plan import GIB, OUTSIDE_ALLOCATOR_GIB, peak
from helpers.parallel.layouts import Layout
from helpers.parallel.pp import bubble_fraction


@dataclass(frozen=True)
class Hardware:
    """GPUs and links. Defaults: H100/H200-class SXM nodes, nominal links of
    :data:`helpers.cost.comm.NOMINAL_LINKS`."""

    gpus_per_node: int = 8
    memory_gib: float = 80.0
    peak_flops: float = 989.5e12  # dense bf16, H100/H200 SXM datasheet
    mfu: float = (
        0.40  # assumed model-FLOPs utilisation (known-facts: 0.95 B Llama measured 29-40 %)
    )
    intra: Link = NOMINAL_LINKS["nvlink4"]
    inter: Link = NOMINAL_LINKS["ib_ndr"]
    # CUDA context, NCCL buffers, kernels: outside max_memory_allocated (Chapter 7's records)
    overhead_gib: float = OUTSIDE_ALLOCATOR_GIB
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
    model: ModelShape, layout: Layout, global_batch: int, hw: Hardware, recompute: bool = False
) -> Plan:
    """Memory and step time of one layout (see the module docstring for every term)."""
    L, s, h = layout, model.seq_len, model.hidden
    m = global_batch // (L.dp * L.microbatch)
    a2a = L.sp if L.sp_mode == "all_to_all" else 1
    mem = peak(model, L, global_batch, recompute, hw.flash, hw.overhead_gib)
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
    else:  # gradients accumulate locally (no_sync), all-reduced once during the last backward
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
        mem["total"] / GIB,
        compute,
        m * tp_mb,
        m * sp_mb,
        m * pp_mb,
        bubble,
        dp_exposed,
        step,
        tiers,
    )
