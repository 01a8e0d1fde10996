"""Chapter 11's computed answers on layouts, pipelines and communication: one function each.

The interview bank (``helpers/data/interview/*.yaml``) names these functions as
``parallel.<name>`` with keyword arguments, for example::

    compute: parallel.bubble
    args: {stages: 4, microbatches: 8, chunks: 2}

Each function calls the helper the book itself uses (:mod:`helpers.parallel.pp`,
:mod:`helpers.parallel.pp_schedules`, :mod:`helpers.cost.comm`, :mod:`helpers.parallel.cp` ...)
and returns the answer in base units: bytes, seconds, a fraction, a count or a ratio. The
question's ``unit`` (``GB``, ``MB``, ``ms``, ...) says how the bank shows it
(:data:`helpers.chapters.ch11_bank.UNITS`). A new question that asks the same thing with other
numbers needs no Python: only another entry with other ``args``.
"""

from __future__ import annotations

import math

from helpers.chapters.ch02_trace import expected_collectives
from helpers.chapters.ch09_context_parallel import ulysses_bytes
from helpers.cost.comm import (
    NOMINAL_LINKS,
    bytes_sent,
    collective_time,
    comm_share,
    ops_bytes_sent,
    tp_layer_ops,
    ulysses_layer_ops,
    zero_step_volume,
)
from helpers.cost import moe
from helpers.cost.mfu import H200_BF16_PEAK
from helpers.cost.step_time import Hardware
from helpers.parallel import cp, pp_schedules
from helpers.parallel.device_mesh import local_shape
from helpers.parallel.ep import expert_capacity as _expert_capacity
from helpers.parallel.layouts import data_degree as _data_degree, factor_parallelism
from helpers.parallel.mesh import RankMesh
from helpers.parallel.pp import bubble_fraction
from helpers.train.trace import StepTrace

# --- the layout: G = D·T·P (·S) and the rank grid


def data_degree(world: int, tp: int = 1, pp: int = 1, sp: int = 1, sp_mode=None) -> int:
    """D = G / (T·P), or G / (T·P·S) for a sequence mode with an axis of its own."""
    return _data_degree(world, tp, pp, sp, sp_mode)


def mesh_rank(sizes: dict, coords: dict) -> int:
    """The global rank of ``coords`` on a (dp, pp, tp) rank grid of ``sizes``."""
    return RankMesh(**sizes).rank_of(**coords)


def group_count(world: int, axis: str, tp: int = 1, pp: int = 1) -> int:
    """How many groups of one axis the rank grid of ``world`` ranks has."""
    return len(RankMesh.for_world(world, pp=pp, tp=tp).groups(axis))


def seed_layouts(world: int) -> int:
    """How many (D, T, P) the guide's ``factor_parallelism`` lists for ``world`` GPUs."""
    return len(factor_parallelism(world))


def dtensor_local_elements(shape: list, placements: list, mesh: list) -> int:
    """Elements of a weight one rank holds under DTensor ``placements`` on a mesh of ``mesh``."""
    return math.prod(local_shape(shape, placements, mesh))


def reshard_pieces(shape: list, saved: list, loaded: list) -> int:
    """Saved blocks one rank reads from when a DCP checkpoint of a weight split into ``saved``
    blocks (rows × columns) loads into ``loaded`` blocks (Chapter 5's block arithmetic)."""
    from helpers.chapters.ch05_dcp import reshard_reads  # the runs' module: imported on demand

    return reshard_reads(shape, saved, loaded)["per_rank"]


# --- pipelines


def bubble(stages: int, microbatches: int, chunks: int = 1) -> float:
    """The idle share of a 1F1B (or GPipe) step, (P−1)/(c·m + P−1)."""
    return bubble_fraction(stages, microbatches, chunks=chunks)


def batch_bubble(world: int, tp: int, pp: int, batch: int) -> float:
    """The bubble when a global batch of ``batch`` sequences runs one per micro-batch."""
    return bubble_fraction(pp, batch // _data_degree(world, tp, pp))


def schedule_bubble(schedule: str, stages: int, microbatches: int, chunks: int = 2) -> float:
    """The idle share of a named schedule (``interleaved``, ``zb-h1`` ...), F = B = W."""
    return pp_schedules.bubble_formula(schedule, stages, microbatches, chunks)


def _idle(schedule: str, stages: int, microbatches: int) -> float:
    """Idle time of the first stage over a step, in units of one forward (simulated)."""
    timeline = pp_schedules.simulate(pp_schedules.build(schedule, stages, microbatches))
    end = max(e for row in timeline for _, e, _ in row)
    return end - sum(e - s for s, e, _ in timeline[0])


def idle_ratio(slower: str, faster: str, stages: int, microbatches: int) -> float:
    """How many times more a stage idles under ``slower`` than under ``faster`` (simulated)."""
    return _idle(slower, stages, microbatches) / _idle(faster, stages, microbatches)


def in_flight_ratio(more: str, fewer: str, stages: int, microbatches: int) -> float:
    """Micro-batches in flight on the first stage at its peak, ``more`` over ``fewer``."""
    peak = {
        name: pp_schedules.in_flight(pp_schedules.build(name, stages, microbatches))[0]
        for name in (more, fewer)
    }
    return peak[more] / peak[fewer]


# --- communication


def collective_bytes(collective: str, message_bytes: float, ranks: int) -> float:
    """Bytes one rank sends in a ring collective of ``message_bytes`` over ``ranks``."""
    return bytes_sent(collective, message_bytes, ranks)


def tp_layer_bytes(b: int, s: int, h: int, tp: int) -> float:
    """Bytes one rank sends per layer (forward and backward) under Megatron TP, bf16."""
    return ops_bytes_sent(tp_layer_ops(b, s, h), tp)


def ulysses_layer_bytes(b: int, s: int, h: int, sp: int) -> float:
    """Bytes one rank sends per layer (forward and backward) under Ulysses of degree S, bf16."""
    return ops_bytes_sent(ulysses_layer_ops(b, s, h, sp), sp)


def zero_step_bytes(params: float, stage: int, ranks: int | None = None) -> float:
    """Bytes one rank sends per step under DDP (stage 0) or ZeRO-1/2/3, bf16."""
    return zero_step_volume(params, stage, n=ranks)


def collective_seconds(collective: str, message_bytes: float, ranks: int, link: str) -> float:
    """α-β time of a collective on one nominal link (``nvlink4``, ``ib_ndr``, ``pcie5``)."""
    return collective_time(collective, message_bytes, ranks, NOMINAL_LINKS[link])


def collective_seconds_on_nodes(
    collective: str, message_bytes: float, ranks: int, per_node: int
) -> float:
    """α-β time of a collective whose ranks sit ``per_node`` to a node (cards per node counted)."""
    link = Hardware().link(collective, ranks, per_node)
    return collective_time(collective, message_bytes, ranks, link)


def communication_share(comm_s: float, compute_s: float) -> float:
    """t_comm / (t_comm + t_compute)."""
    return comm_share(comm_s, compute_s)[0]


def step_collectives(layers: int, tp: int, dp: int) -> int:
    """Collectives one rank enters in one step of Chapter 2's D × T stack of MLP blocks."""
    return expected_collectives(layers=layers, tp=tp, dp=dp)


def _trace(step_ms: list, compute_ms: list, comm_ms: list) -> StepTrace:
    """A step trace from spans in ms (StepTrace counts in µs)."""

    def us(spans: list) -> list:
        return [(1e3 * start, 1e3 * end) for start, end in spans]

    return StepTrace(us([step_ms])[0], us(compute_ms), us(comm_ms))


def exposed_seconds(step_ms: list, compute_ms: list, comm_ms: list) -> float:
    """Communication time not hidden under compute in a step trace (spans in ms)."""
    return _trace(step_ms, compute_ms, comm_ms).numbers()["exposed_ms"] / 1e3


def hidden_share(step_ms: list, compute_ms: list, comm_ms: list) -> float:
    """The share of the communication that runs beside compute in a step trace."""
    return _trace(step_ms, compute_ms, comm_ms).numbers()["hidden_share"]


# --- sequences and experts


def ring_attention_bytes(b: int, s: int, h: int, ranks: int, element_bytes: int = 2) -> float:
    """Bytes one rank sends in one layer's forward under ring attention (K and V go round)."""
    return cp.ring_bytes(b, s, h, ranks, element_bytes)


def ring_over_ulysses(b: int, s: int, h: int, ranks: int, element_bytes: int = 2) -> float:
    """Ring attention's forward bytes per rank over Ulysses' at the same degree."""
    ring = cp.ring_bytes(b, s, h, ranks, element_bytes)
    return ring / ulysses_bytes(b, s, h, ranks, element_bytes)


def zigzag_gain(ranks: int) -> float:
    """Causal ring attention: critical path of the contiguous layout over the zigzag one."""
    return cp.critical_path(cp.step_work(ranks, "contiguous")) / cp.critical_path(
        cp.step_work(ranks, "zigzag")
    )


def overlap_tokens(link: str, computed_share: float = 0.5, kv_share: float = 1.0) -> float:
    """Tokens per rank a ring step needs on an H200 so its attention hides the K/V transfer."""
    bandwidth = NOMINAL_LINKS[link].bandwidth_bytes_per_s
    return cp.overlap_tokens(H200_BF16_PEAK, bandwidth, 2, kv_share, computed_share)


def expert_capacity(tokens: int, experts: int, top_k: int, capacity_factor: float) -> int:
    """Token slots per expert: ⌈φ · k · n_tok / n_exp⌉."""
    return _expert_capacity(tokens, experts, top_k, capacity_factor)


def moe_dispatch_bytes(
    tokens: int,
    top_k: int,
    hidden: int,
    experts: int,
    ep: int,
    capacity_factor: float | None = None,
    element_bytes: int = 2,
) -> float:
    """Bytes one rank sends in one dispatch all-to-all: (E-1)/E · n_exp·C·h·e with a capacity,
    (E-1)/E · k·n_tok·h·e dropless (``capacity_factor`` None)."""
    return moe.dispatch_bytes(tokens, top_k, hidden, experts, ep, capacity_factor, element_bytes)


def ep_all_to_all_seconds(size_bytes: float, ep: int, per_node: int, link: str = "ib_ndr") -> float:
    """One all-to-all of ``size_bytes`` per rank over ``ep`` ranks, ``per_node`` to a node: the
    off-node share through the rank's own card, the rest over NVLink 4 at the same time."""
    cards, nvlink = NOMINAL_LINKS[link], NOMINAL_LINKS["nvlink4"]
    return moe.ep_all_to_all_seconds(size_bytes, ep, per_node, cards, nvlink)["seconds"]
