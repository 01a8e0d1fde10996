"""Chapter 3's notebook glue: what a collective costs once it leaves a node, and the planner's
numbers that the chapter page quotes.

Used by ``notebooks/03_strategy.ipynb`` and ``tests/test_ch03_page.py``. Every number comes from
the book's models: the α-β links and ring volumes of :mod:`helpers.cost.comm` (Thakur,
Rabenseifner & Gropp 2005; nccl-tests ``doc/PERFORMANCE.md``), the links a group sees by its
placement (:func:`helpers.cost.placement.spanning_link`,
:meth:`helpers.cost.step_time.Hardware.link`: NCCL's rings cross the network once per node per
channel and spread the channels over the node's
cards, one per GPU on HGX/DGX H100/H200 nodes; all-to-all gets one card per rank), the planner
(:mod:`helpers.cost.planner`) and the earlier planner rebuilt by
:mod:`helpers.chapters.ch03_earlier`.
"""

from __future__ import annotations

from helpers.chapters.ch03_earlier import one_card_per_rank
from helpers.models.shape import ModelShape
from helpers.cost import comm, memory_plan
from helpers.cost.planner import SEED_7B5
from helpers.cost.step_time import Hardware, Plan, members_per_node
from helpers.notebook.tables import glue_numbers  # noqa: F401  (the notebook calls it here)

ORDINALS = (
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split()
)


def ordinal(n: int) -> str:
    """'first' … 'twelfth', then '13th', '21st', '52nd' …"""
    if 1 <= n <= len(ORDINALS):
        return ORDINALS[n - 1]
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def layout_text(layout) -> str:
    """A layout as the book writes it (:class:`helpers.parallel.layouts.Layout`'s text)."""
    return str(layout)


def _where(n: int, per_node: int) -> str:
    return "one node" if per_node >= n else f"{n // per_node} nodes × {per_node}"


def _label(link, hw: Hardware, collective: str, n: int, per_node: int) -> str:
    """NVLink, or how many network cards the group's crossings go through."""
    if per_node >= n:
        return "NVLink"
    if collective == "all_to_all":
        return "1 card per rank"
    cards = round(link.bandwidth_bytes_per_s / hw.inter.bandwidth_bytes_per_s)
    return f"{cards} card{'' if cards == 1 else 's'} per group"


def _rounder(rounded: bool):
    return (lambda x, d: round(x, d)) if rounded else (lambda x, d: x)


def link_rows(
    model: ModelShape = SEED_7B5, hw: Hardware = Hardware(), rounded: bool = True
) -> list[dict]:
    """Per step (data parallelism) or per micro-batch of one sequence (tensor and Ulysses
    parallelism): the bytes each rank sends and the time on the link the group's placement gives
    it, next to the earlier model's one card per rank. bf16, nominal links."""
    s, h, L, r = model.seq_len, model.hidden, model.layers, _rounder(rounded)
    old = one_card_per_rank(hw)
    cases = [
        ("DP gradients, per step", lambda n: [("all_reduce", 2 * model.params)], (32, 8), (8, 1)),
        ("TP, per micro-batch", lambda n: comm.tp_layer_ops(1, s, h) * L, (16, 8), (8, 1)),
        ("Ulysses, per micro-batch", lambda n: comm.ulysses_layer_ops(1, s, h, n) * L, (16, 8)),
    ]
    rows = []
    for traffic, ops_of, *across in cases:
        for n, k in [(8, 8), *across]:
            ops = ops_of(n)
            link = hw.link(ops[0][0], n, k)
            rows.append(
                {
                    "traffic": traffic,
                    "ranks": n,
                    "placement": _where(n, k),
                    "link": _label(link, hw, ops[0][0], n, k),
                    "GB/s": round(link.bandwidth_bytes_per_s / 1e9),
                    "GB each rank sends": r(comm.ops_bytes_sent(ops, n) / 1e9, 2),
                    "ms": r(comm.ops_time(ops, n, link) * 1e3, 1),
                    "ms, one card per rank": r(comm.ops_time(ops, n, old.link("", n, k)) * 1e3, 1),
                }
            )
    return rows


def egress_rows(
    model: ModelShape = SEED_7B5, G: int = 32, hw: Hardware = Hardware(), rounded: bool = True
) -> list[dict]:
    """The gradient all-reduce of data parallelism (bf16, once per step) on G GPUs, for each T
    inside the node (P = 1): how many members a data-parallel group has on a node, how many cards
    it gets, what each rank sends, what leaves a node (all its groups together) and the time."""
    gpn, old, rows, r = hw.gpus_per_node, one_card_per_rank(hw), [], _rounder(rounded)
    for tp in (t for t in (1, 2, 4, 8) if t <= gpn):
        dp = G // tp
        k = members_per_node({"dp": dp, "tp": tp}, ("dp",), gpn)
        link = hw.link("all_reduce", dp, k)
        grads = 2 * model.params / tp
        sent = comm.bytes_sent("all_reduce", grads, dp)
        rows.append(
            {
                "T": tp,
                "D": dp,
                "members per node": k,
                "cards per group": round(
                    link.bandwidth_bytes_per_s / hw.inter.bandwidth_bytes_per_s
                ),
                "GB each rank sends": r(sent / 1e9, 2),
                "GB leaving a node": r(sent * (gpn // k) / 1e9, 2),
                "ms": r(comm.collective_time("all_reduce", grads, dp, link) * 1e3, 1),
                "ms, one card per rank": r(
                    comm.collective_time("all_reduce", grads, dp, old.link("", dp, k)) * 1e3, 1
                ),
            }
        )
    return rows


def memory_rows(model: ModelShape, plans: list[Plan], global_batch: int, hw=Hardware()) -> list:
    """Where each plan's memory goes on its busiest rank (Chapter 7's model), GiB."""
    rows = []
    for p in plans:
        mem = memory_plan.peak(
            model, p.layout, global_batch, p.recompute, hw.flash, hw.overhead_gib
        )
        parts = mem["prediction"]["breakdown"]
        rows.append(
            {
                "layout": layout_text(p.layout),
                "sharding": p.layout.sharding,
                "m": p.microbatches,
                "weights": round(parts["weights"] / 2**30, 1),
                "fp32 master + Adam": round((parts["fp32 master"] + parts["Adam m, v"]) / 2**30, 1),
                "gradients": round(parts["grads, buckets"] / 2**30, 1),
                "activations": round(parts["activations"] / 2**30, 1),
                "logits, loss": round(parts["logits, loss"] / 2**30, 1),
                "outside allocator": round(mem["outside"] / 2**30, 1),
                "total GiB": round(mem["total"] / 2**30, 1),
                "fits": "yes" if mem["total"] <= hw.memory_gib * 2**30 else "no",
            }
        )
    return rows
