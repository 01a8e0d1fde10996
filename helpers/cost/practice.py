"""What Chapter 3's step model lacks for the published trainings: context parallelism and
Megatron-LM's FLOP count (ZeRO-3, FSDP's forms and interleaved stages are in the step model).

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
* **Interleaved stages and ZeRO-3/FSDP** are in :func:`helpers.cost.step_time.plan_layout`
  itself (``Layout.chunks``, ``Layout.zero_stage = 3`` and its forms).
"""

from __future__ import annotations

from dataclasses import replace

from helpers.models.shape import ModelShape
from helpers.cost.comm import collective_time
from helpers.cost.placement import members_per_node
from helpers.cost.step_time import Hardware, Plan


def megatron_flops(model: ModelShape, batch: int, recompute: bool = True) -> float:
    """Narayanan et al. 2021 eq. (3): FLOPs of one iteration of ``batch`` sequences, recomputation
    included (hardware FLOPs): 96 = 4 × 24, a forward, a backward of twice its cost and the
    recomputed forward. Without recomputation the same count has 3 × 24 = 72 (the form
    Megatron-DeepSpeed's throughput log uses, a factor 3 or 4 by ``--checkpoint-activations``)."""
    s, h, layers, v = model.seq_len, model.hidden, model.layers, model.vocab
    passes = 4 if recompute else 3
    return 24 * passes * batch * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))


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
    """(m + (P - 1)/v) / m: how much the micro-batch slots stretch a per-micro-batch cost (1F1B,
    interleaved over v chunks)."""
    p, v = plan.layout.pp, plan.layout.chunks
    return (plan.microbatches + (p - 1) / v) / plan.microbatches


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
    rc = 4 / 3 if plan.recompute == "full" else 1
    missing = 12 * model.layers * model.hidden * (seq - seq // cp) * rc  # FLOPs per token
    extra_compute = missing * global_batch * seq / G / (hw.peak_flops * hw.mfu)
    kv = L.microbatch * (seq // cp) * 2 * model.kv_width // L.tp * 2  # bf16 K and V, one rank
    per_node = members_per_node({"cp": cp, "tp": L.tp}, ("cp",), hw.gpus_per_node)
    link = hw.link("all_gather", cp, per_node)
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
