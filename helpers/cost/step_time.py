"""The step-time model of one layout: memory per GPU and seconds per optimizer step.

Used by Chapter 3 (strategy): :mod:`helpers.cost.planner` ranks every layout by it, and the
chapter's two-GPU runs check it (``helpers/record/ch03.py``); Chapter 12 runs it on published
trainings. Each term has its source:

* memory per GPU: Chapter 7's memory model through :func:`helpers.cost.memory_plan.peak` (what
  the model allocates on the busiest rank, logits and loss included, the micro-batches in flight,
  the gradients held across micro-batches) plus what the allocator never sees
  (``Hardware.overhead_gib``, the largest Chapter 7 measured);
* compute: (6Ψ + 12·L·h·s) FLOPs per token at an *assumed* share of the peak (the same for every
  layout, a stated simplification); full recomputation adds one forward pass, ×4/3 (PaLM,
  Chowdhery et al. 2022, appendix B); selective recomputation (Korthikanti et al. 2022, §4.3)
  recomputes attention's core only, 4·L·h·s FLOPs per token more;
* communication by placement (:mod:`helpers.cost.comm`, α-β links): ranks follow Colossal-AI's
  mesh (dp, pp, tp, sp), last axis fastest, ``Hardware.gpus_per_node`` consecutive ranks to a node
  (:func:`members_per_node`). A group inside one node uses ``Hardware.intra`` (NVLink); a group
  spread over nodes uses the network as :func:`helpers.cost.placement.spanning_link` says: ring
  collectives leave a node once, through as many of its cards as the group has members there;
  all-to-all and point-to-point sends get one card per rank;
* tensor parallelism: Megatron's 4 all-reduces of b·s·h per layer per micro-batch (or Megatron
  SP's all-gathers and reduce-scatters); Ulysses: 8 all-to-alls; the pipeline sends one
  activation each way per micro-batch and chunk; all on the critical path (they sit between a
  layer's matmuls);
* data parallelism, by how the group shards the model states (ZeRO paper §7; Zhao et al. 2023,
  PyTorch FSDP, §3-4): DDP and ZeRO-1 accumulate locally and all-reduce once per step during the
  last micro-batch's backward; ZeRO-2 reduce-scatters every micro-batch's gradients (it cannot
  accumulate unsharded ones) and all-gathers the updated parameters once; ZeRO-3/FSDP gathers the
  parameters before each micro-batch's forward (overlapped with it) and, resharded after the
  forward, again before its backward, and reduce-scatters in the backward (overlapped with it);
  HSDP does that inside a shard group and all-reduces the gradient shards across replicas once
  per step;
* pipeline: 1F1B runs (m + p - 1) micro-batch slots, the bubble (p-1)/(m+p-1); interleaved 1F1B
  with v chunks shrinks the idle slots to (p-1)/v and sends v times as often (Narayanan et al.
  2021, §2.2.2; :func:`helpers.parallel.pp.bubble_fraction`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from helpers.models.shape import ModelShape
from helpers.cost.comm import (
    NOMINAL_LINKS,
    Link,
    collective_time,
    ops_time,
    tp_layer_ops,
    ulysses_layer_ops,
)
from helpers.cost.placement import members_per_node, spanning_link
from helpers.cost.memory_llama import BYTES
from helpers.cost.memory_plan import GIB, OUTSIDE_ALLOCATOR_GIB, peak, recompute_mode
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
        0.40  # assumed share of the peak while computing (Chapter 8's 0.95 B Llama: 29-60 %)
    )
    intra: Link = NOMINAL_LINKS["nvlink4"]
    inter: Link = NOMINAL_LINKS["ib_ndr"]
    # CUDA context, NCCL buffers, kernels: outside max_memory_allocated (Chapter 7's records)
    overhead_gib: float = OUTSIDE_ALLOCATOR_GIB
    flash: bool = True  # flash attention: no s×s scores stored
    # network cards per node, each of ``inter``'s rate (None: one per GPU, as on HGX/DGX nodes)
    cards_per_node: int | None = None
    # "bf16"/"fp16" mixed precision or "fp32": bytes of weights, gradients, activations and of
    # what the collectives send (``peak_flops`` must then be the GPU's rate at that precision)
    precision: str = "bf16"

    def link(self, collective: str, n: int, per_node: int) -> Link:
        """The link a group of ``n`` ranks, ``per_node`` of them on each node, sees for
        ``collective`` (or "p2p"): NVLink inside a node, else
        :func:`helpers.cost.placement.spanning_link`; a point-to-point send uses one card."""
        # [start: group-link]
        if per_node >= n:
            return self.intra
        if collective == "p2p":
            return self.inter
        return spanning_link(
            self.inter, self.intra, collective, per_node, self.gpus_per_node, self.cards_per_node
        )
        # [end: group-link]


@dataclass(frozen=True)
class Plan:
    """One layout with its memory and modelled step time (seconds, per optimizer step)."""

    layout: Layout
    microbatches: int
    recompute: str  # "none", "selective" or "full"
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
            "sharding": L.sharding,
            "micro-batch": L.microbatch,
            "m": self.microbatches,
            "recompute": self.recompute,
            "memory GiB": round(self.memory_gib, 1),
            "compute s": round(self.compute_s, 3),
            "tp+sp comm s": round(self.tp_comm_s + self.sp_comm_s, 3),
            "bubble s": round(self.bubble_s, 3),
            "dp comm s": round(self.dp_comm_s, 3),
            "step s": round(self.step_s, 3),
            "tokens/s": round(tokens_per_step / self.step_s),
        }


def _mesh(L: Layout) -> dict[str, int]:
    """The planner's mesh: Colossal-AI's (dp, pp, tp, sp), dp split into (replicate, shard) for
    HSDP (the shard group innermost, as torch's ``DeviceMesh`` for HSDP puts it)."""
    shard = L.shard_degree if L.zero_stage == 3 and L.shard_degree else L.dp
    return {"rep": L.dp // shard, "dp": shard, "pp": L.pp, "tp": L.tp, "sp": L.sp}


def _fwd_share(recompute: str) -> float:
    """The forward's share of a micro-batch's compute: 1/3 (backward costs twice the forward),
    1/4 with full recomputation (the recomputed forward runs inside the backward)."""
    return 1 / 4 if recompute == "full" else 1 / 3


def _dp_exposed(L: Layout, grads: float, m: int, per_mb: float, rc: str, hw: Hardware, mesh):
    """Seconds of data-parallel communication not hidden behind compute, and the links used
    (``dp``; ``rep``, the replicas' all-reduce of HSDP)."""
    fwd, bwd = _fwd_share(rc) * per_mb, (1 - _fwd_share(rc)) * per_mb
    a2a = ("sp",) if L.sp_mode == "all_to_all" else ()
    gpn = hw.gpus_per_node
    if L.zero_stage < 3:
        group = L.dp * (L.sp if a2a else 1)  # Colossal-AI reduces gradients over dp × sp
        k = members_per_node(mesh, ("rep", "dp", *a2a), gpn)
        link = hw.link("all_reduce", group, k)
        if L.zero_stage == 2:  # reduce-scatter every micro-batch, all-gather the update once
            rs = collective_time("reduce_scatter", grads, group, link)
            exposed = m * max(0.0, rs - bwd) + collective_time("all_gather", grads, group, link)
        else:  # accumulate locally (no_sync), all-reduce during the last backward
            exposed = max(0.0, collective_time("all_reduce", grads, group, link) - bwd)
        return exposed, {"dp": link}
    shard = mesh["dp"]
    link = hw.link("all_gather", shard, members_per_node(mesh, ("dp",), gpn))
    gather = collective_time("all_gather", grads, shard, link)
    scatter = collective_time("reduce_scatter", grads, shard, link)
    if L.reshard_after_forward:  # gather for the forward, again for the backward
        exposed = m * (max(0.0, gather - fwd) + max(0.0, gather + scatter - bwd))
    else:  # gathered once, kept through the backward
        exposed = m * (max(0.0, gather - fwd) + max(0.0, scatter - bwd))
    links = {"dp": link}
    if mesh["rep"] > 1:  # HSDP: the gradient shards all-reduced across replicas once per step
        rlink = hw.link("all_reduce", mesh["rep"], members_per_node(mesh, ("rep",), gpn))
        exposed += max(0.0, collective_time("all_reduce", grads / shard, mesh["rep"], rlink) - bwd)
        links["rep"] = rlink
    return exposed, links


def plan_layout(
    model: ModelShape,
    layout: Layout,
    global_batch: int,
    hw: Hardware,
    recompute: bool | str = False,
    check: bool = True,
) -> Plan:
    """Memory and step time of one layout (see the module docstring for every term).

    ``recompute``: "none", "selective" or "full" (a bool means "none" or "full"); ``check=False``
    skips Colossal-AI's layout rules (a published run made with another framework)."""
    L, s, h = layout, model.seq_len, model.hidden
    rc = recompute_mode(recompute)
    m = global_batch // (L.dp * L.microbatch)
    a2a = L.sp if L.sp_mode == "all_to_all" else 1
    mem = peak(model, L, global_batch, rc, hw.flash, hw.overhead_gib, check=check,
               precision=hw.precision)  # fmt: skip
    e = BYTES[hw.precision]
    G, gpn, mesh = L.world_size, hw.gpus_per_node, _mesh(L)
    flops = 6 * model.params + 12 * model.layers * h * s
    flops = flops * 4 / 3 if rc == "full" else flops
    flops += 4 * model.layers * h * s if rc == "selective" else 0
    compute = flops * global_batch * s / G / (hw.peak_flops * hw.mfu)
    per_mb = compute / m
    layers = model.layers // L.pp
    tp_link = hw.link("all_reduce", L.tp, members_per_node(mesh, ("tp",), gpn))
    sp_link = hw.link("all_to_all", a2a, members_per_node(mesh, ("sp",), gpn))
    tp_mb = (
        ops_time(
            tp_layer_ops(
                L.microbatch, s // a2a, h, e, sequence_parallel=L.sp_mode == "split_gather"
            )
            * layers,
            L.tp,
            tp_link,
        )
        if L.tp > 1
        else 0.0
    )
    sp_mb = (
        ops_time(ulysses_layer_ops(L.microbatch, s, h, a2a, e) * layers, a2a, sp_link)
        if a2a > 1
        else 0.0
    )
    pp_link = hw.link("p2p", L.pp, members_per_node(mesh, ("pp",), gpn))
    act = L.microbatch * s / a2a * h * e
    v = L.chunks
    pp_mb = 2 * v * (pp_link.latency_s + act / pp_link.bandwidth_bytes_per_s) if L.pp > 1 else 0.0
    slot = per_mb + tp_mb + sp_mb + pp_mb
    idle = bubble_fraction(L.pp, m, v)  # (interleaved) 1F1B: (p - 1)/v idle slots to m busy ones
    bubble = idle / (1 - idle) * m * slot
    grads = model.params / (L.tp * L.pp) * e  # gradients (and weights) of one model shard
    dp_exposed, dp_links = _dp_exposed(L, grads, m, per_mb, rc, hw, mesh)
    step = m * slot + bubble + dp_exposed
    links = {"tp": tp_link, **dp_links, "pp": pp_link}
    tiers = {k: link.name.split(",")[0] for k, link in links.items()}
    return Plan(
        L,
        m,
        rc,
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
