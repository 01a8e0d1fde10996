"""What Chapter 3's step model lacks for the published trainings: context parallelism, ZeRO-3,
interleaved stages and Megatron-LM's FLOP count.

Used by Chapter 12 (in practice). Each function adds to a :class:`helpers.cost.step_time.Plan`
(the one step model) the terms of a dimension it does not know, with the same α-β links and the
same compute efficiency; nothing here is fitted.

* **Megatron-LM's FLOP count** (Narayanan et al. 2021, §5.1, eq. 3): with full activation
  recomputation an iteration of B sequences of s tokens through l layers of width h and a
  vocabulary V costs F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) FLOPs: three forward passes' worth
  of work plus one recomputed forward (4 × 24). Its TFLOP/s per GPU are hardware FLOPs.
* **Context parallelism as in Llama 3** (Dubey et al. 2024, §3.3.2): each of C ranks holds s/C
  tokens of every sequence; K and V are all-gathered before attention (and their gradients
  reduce-scattered in backward), and every query still attends to the whole sequence, so the
  attention FLOPs per token keep the full s. :func:`with_context` runs the step model on a shape
  of s/C tokens and adds the attention FLOPs it leaves out and the K, V collectives.
* **ZeRO-3 / FSDP full sharding** (Rajbhandari et al. 2020, §5.3; Zhao et al. 2023, PyTorch
  FSDP, §3): the parameters are all-gathered before each micro-batch's forward and again before
  its backward; FSDP prefetches the next layer, so the gathers overlap the micro-batch's compute.
  :func:`with_zero3` adds what is not hidden to a ZeRO-2 plan (same gradient traffic).
* **Interleaved stages** (Narayanan et al. 2021, §2.2.2): v model chunks per stage shrink the
  bubble to (p-1)/v slots (:func:`helpers.parallel.pp.bubble_fraction`); :func:`with_interleaving`
  rescales the plan's bubble, at the price of v times the point-to-point sends.
"""

from __future__ import annotations

from dataclasses import replace

from helpers.config.shape import ModelShape
from helpers.cost.comm import collective_time
from helpers.cost.step_time import Hardware, Plan, _link


def megatron_flops(model: ModelShape, batch: int) -> float:
    """Narayanan et al. 2021 eq. (3): FLOPs of one iteration of ``batch`` sequences, recomputation
    included (hardware FLOPs)."""
    s, h, layers, v = model.seq_len, model.hidden, model.layers, model.vocab
    return 96 * batch * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))


def model_flops_per_token(model: ModelShape, seq: int | None = None) -> float:
    """The book's model FLOPs per token, 6Ψ + 12·L·h·s (:mod:`helpers.cost.mfu`), for the full
    sequence ``seq`` (default the shape's)."""
    s = model.seq_len if seq is None else seq
    return 6 * model.params + 12 * model.layers * model.hidden * s


def step_mfu(
    plan: Plan, model: ModelShape, global_batch: int, hw: Hardware, seq: int, gpus: int
) -> float:
    """Model FLOPs utilisation of a planned step on ``gpus`` GPUs (context ranks included):
    tokens × (6Ψ + 12·L·h·s) over G × peak × step."""
    flops = model_flops_per_token(model, seq) * global_batch * seq
    return flops / (gpus * hw.peak_flops * plan.step_s)


def _slots(plan: Plan) -> float:
    """(m + P - 1) / m: how much the micro-batch slots stretch a per-micro-batch cost (1F1B)."""
    p = plan.layout.pp
    return (plan.microbatches + p - 1) / plan.microbatches


def with_context(
    plan: Plan, model: ModelShape, cp: int, seq: int, global_batch: int, hw: Hardware
) -> Plan:
    """A plan made on a shape of ``seq / cp`` tokens per rank, with context parallelism over ``cp``
    ranks added: the attention FLOPs for the full ``seq`` and the K, V all-gathers (forward) and
    reduce-scatters (backward) per layer and micro-batch, not overlapped. The C ranks of a group
    sit next to the tensor group (Llama 3's order: TP innermost, then CP), so a group of T·C
    ranks beyond one node uses the network. ``plan.layout.dp`` counts data-parallel replicas."""
    L = plan.layout
    if cp == 1:
        return plan
    G = L.world_size * cp
    rc = 4 / 3 if plan.recompute else 1
    missing = 12 * model.layers * model.hidden * (seq - seq // cp) * rc  # FLOPs per token
    extra_compute = missing * global_batch * seq / G / (hw.peak_flops * hw.mfu)
    kv = L.microbatch * (seq // cp) * 2 * model.kv_width // L.tp * 2  # bf16 K and V, one rank
    link = _link(L.tp * cp, hw)
    per_layer = collective_time("all_gather", kv * cp, cp, link) + collective_time(
        "reduce_scatter", kv * cp, cp, link
    )
    cp_comm = plan.microbatches * (model.layers // L.pp) * per_layer
    stretch = _slots(plan)
    step = plan.step_s + (extra_compute + cp_comm) * stretch
    bubble = plan.bubble_s + (extra_compute + cp_comm) * (stretch - 1)
    tiers = plan.tiers | {"cp": link.name.split(",")[0]}
    return replace(
        plan,
        compute_s=plan.compute_s + extra_compute,
        sp_comm_s=plan.sp_comm_s + cp_comm,
        bubble_s=bubble,
        step_s=step,
        tiers=tiers,
    )


def with_zero3(plan: Plan, model: ModelShape, hw: Hardware) -> Plan:
    """A ZeRO-2 plan made into ZeRO-3 / FSDP: per micro-batch, two all-gathers of the bf16
    parameters of one tensor-parallel shard over the data-parallel group, overlapped with that
    micro-batch's compute (what exceeds it is exposed)."""
    L = plan.layout
    if L.zero_stage != 2:
        raise ValueError(f"with_zero3 extends a ZeRO-2 plan, got ZeRO-{L.zero_stage}")
    link = hw.intra if L.world_size <= hw.gpus_per_node else hw.inter
    gather = collective_time("all_gather", model.params / L.tp * 2, L.dp, link)
    per_mb = plan.compute_s / plan.microbatches
    exposed = plan.microbatches * max(0.0, 2 * gather - per_mb)
    return replace(plan, dp_comm_s=plan.dp_comm_s + exposed, step_s=plan.step_s + exposed)


def with_interleaving(plan: Plan, chunks: int) -> Plan:
    """The plan under interleaved 1F1B with ``chunks`` model chunks per stage: the bubble divided
    by v, the pipeline's sends multiplied by v."""
    if chunks == 1 or plan.layout.pp == 1:
        return plan
    bubble = plan.bubble_s / chunks
    sends = plan.pp_comm_s * (chunks - 1)
    step = plan.step_s - plan.bubble_s + bubble + sends
    return replace(plan, bubble_s=bubble, pp_comm_s=plan.pp_comm_s + sends, step_s=step)


def shares(plan: Plan) -> dict[str, float]:
    """Each part's share of the step: compute, tensor (+ sequence/context), pipeline sends,
    bubble, data-parallel exposed communication; they sum to 1 (the step is m slots of compute and
    communication, the bubble's idle slots and the exposed data-parallel tail)."""
    parts = {
        "compute": plan.compute_s,
        "tp": plan.tp_comm_s,
        "sp/cp": plan.sp_comm_s,
        "pp": plan.pp_comm_s,
        "bubble": plan.bubble_s,
        "dp": plan.dp_comm_s,
    }
    return {k: v / plan.step_s for k, v in parts.items()}
