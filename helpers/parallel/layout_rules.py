"""The layout rules, written once (Chapter 2, "Which layouts a model allows", and Chapter 4, "The
rules, and who would complain otherwise").

A :class:`helpers.parallel.case.Case` is what the rules look at: the degrees, the sequence mode,
the ZeRO stage, the micro-batching, the model shape and the global batch, and the plugin that will
run them. It is built from a :class:`helpers.parallel.layouts.Layout` (always a
``HybridParallelPlugin`` layout) by :func:`layout_case`, or from a configuration file by
:func:`helpers.config.rules.config_case`.

Each :class:`Rule` has one test, :attr:`Rule.broken`, and two ways of saying so:
:attr:`Rule.reason`, the sentence :func:`helpers.parallel.layouts.violations` lists, and
:attr:`Rule.reject`, the :class:`~helpers.parallel.errors.ConfigError` that
:func:`helpers.config.loading.load_config` raises (field, value, fix; the shape rules' are in
:mod:`helpers.parallel.rule_fixes`). :data:`LAYOUT_RULES` are the rules of a layout;
:data:`helpers.config.rules.RULES` is the one table that holds them and the rules only a
configuration file can break. Sources are cited in :mod:`helpers.parallel.layouts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from helpers.models.shape import ModelShape
from helpers.parallel.case import Case
from helpers.parallel.errors import ConfigError, fail
from helpers.parallel.rule_fixes import batch_reject, heads_reject, nearest, too_few_reject
from helpers.parallel.factors import divisors
from helpers.parallel.vocab import OWN_AXIS_SP_MODES, SHARED_SP_MODES


@dataclass(frozen=True)
class Rule:
    """One rule: its name, whether a layout can break it, the test, and its two messages."""

    name: str
    layout: bool
    broken: Callable[[Case], bool]
    reject: Callable[[Case], ConfigError]
    reason: Callable[[Case], str] | None = None
    needs_model: bool = False


def layout_case(layout, model: ModelShape | None = None, global_batch: int | None = None) -> Case:
    """A :class:`helpers.parallel.layouts.Layout` (HybridParallelPlugin's) as a :class:`Case`."""
    L = layout
    return Case(L.dp, L.tp, L.pp, L.sp, L.sp_mode, L.zero_stage, L.microbatch, None, model,
                global_batch, plugin=L.plugin, sequence=L.seq_degree)  # fmt: skip


def _heads_what(c: Case) -> str:
    return f"T×S={c.tp * c.a2a}" if c.a2a > 1 else f"T={c.tp}"


def _batch_broken(c: Case) -> bool:
    B, D, b, m = c.global_batch, c.dp, c.microbatch, c.microbatches
    if B is None or D is None or (b is None and not c.from_config):
        return False  # a layout without a micro-batch size has not chosen its batch split yet
    if B % D:
        return True
    per = B // D
    return bool(
        (b is not None and per % b) or (m is not None and (per % m or (b or per // m) * m != per))
    )


MESH_RULES = [  # the mesh, the plugin and the pipeline schedule
    Rule(
        "shared sequence mode needs tensor",
        True,
        lambda c: c.sp_mode in SHARED_SP_MODES and c.tp < 2,
        lambda c: fail(
            "parallelism.sequence_mode",
            c.sp_mode,
            f"{c.sp_mode} splits the sequence over the tensor-parallel group, and tensor = 1",
            "set tensor: 2 or more, or use sequence_mode: all_to_all with sequence: 2",
        ),
        lambda c: f"{c.sp_mode} sequence parallelism reuses the tensor group: needs T > 1",
    ),
    Rule(
        "sequence degree needs its mode",
        True,
        lambda c: c.sp > 1 and c.sp_mode not in OWN_AXIS_SP_MODES,
        lambda c: fail(
            "parallelism.sequence",
            c.sp,
            "a sequence degree needs a sequence_mode",
            "add sequence_mode: all_to_all (Ulysses; or ring_attn), "
            "or split_gather/ring with tensor > 1",
        ),
        lambda c: (
            f"S={c.sp} needs a sequence mode with an own axis ({' or '.join(OWN_AXIS_SP_MODES)})"
        ),
    ),
    Rule(
        "HybridParallelPlugin's ZeRO stages",
        True,
        lambda c: c.plugin == "hybrid_parallel" and c.zero_stage not in (0, 1, 2),
        lambda c: fail(
            "parallelism.zero_stage",
            c.zero_stage,
            "HybridParallelPlugin has ZeRO stages 0, 1 and 2",
            "use zero_stage 0, 1 or 2 with tensor/pipeline/sequence parallelism",
        ),
        lambda c: f"ZeRO stage {c.zero_stage} is not 0, 1 or 2 (HybridParallelPlugin)",
    ),
    Rule(
        "ZeRO 0 or 1 with a pipeline",
        True,
        lambda c: c.plugin == "hybrid_parallel" and c.pp > 1 and c.zero_stage > 1,
        lambda c: fail(
            "parallelism.zero_stage",
            c.zero_stage,
            "HybridParallelPlugin allows only ZeRO 0 or 1 with a pipeline "
            "(gradient sharding would sync every micro-batch)",
            "use zero_stage: 1",
        ),
        lambda c: (
            f"ZeRO stage {c.zero_stage} with P={c.pp}: "
            "the plugin allows only stage 0 or 1 with a pipeline"
        ),
    ),
    # [start: rule-example]
    Rule(
        "a pipeline needs micro-batches",
        True,
        lambda c: c.pp > 1 and c.microbatch is None and c.microbatches is None,
        lambda c: fail(
            "parallelism.microbatches",
            "(not set)",
            f"pipeline = {c.pp} needs micro-batches to keep its stages busy",
            f"add microbatches: {2 * c.pp} (≥ pipeline; more shrinks the bubble)",
        ),
        lambda c: f"P={c.pp} needs micro-batches (num_microbatches or microbatch_size)",
    ),
    # [end: rule-example]
]

SHAPE_RULES = [  # the model shape and the batch
    Rule(
        "heads split over T (× S for all_to_all)",
        True,
        lambda c: c.model.heads % (c.tp * c.a2a) != 0,
        lambda c: heads_reject(c, "heads", c.model.heads),
        lambda c: f"{c.model.heads} attention heads are not divisible by {_heads_what(c)}",
        needs_model=True,
    ),
    Rule(
        "KV heads split over T (× S for all_to_all)",
        True,
        lambda c: c.model.kv % (c.tp * c.a2a) != 0 or c.model.kv // c.a2a < c.tp,
        lambda c: heads_reject(c, "kv_heads", c.model.kv),
        lambda c: f"{c.model.kv} KV heads are not divisible by {_heads_what(c)}",
        needs_model=True,
    ),
    Rule(
        "layers split evenly over P",
        True,
        lambda c: c.model.layers % c.pp != 0,
        lambda c: fail(
            "parallelism.pipeline",
            c.pp,
            f"does not divide model.layers = {c.model.layers} into equal stages "
            "(the pipeline would run at the pace of its largest stage)",
            f"try pipeline {nearest(divisors(c.model.layers), c.pp)}",
        ),
        lambda c: f"{c.model.layers} layers do not split evenly into P={c.pp} stages",
        needs_model=True,
    ),
    Rule(
        "sequence length split over the sequence ranks",
        True,
        lambda c: bool(c.sp_mode) and c.model.seq_len is not None and c.model.seq_len % c.split,
        lambda c: fail(
            "model.seq_len",
            c.model.seq_len,
            f"does not divide by {c.split} ("
            + (
                "ring_attn's zigzag split needs 2 × sequence chunks"
                if c.sp_mode == "ring_attn"
                else f"{c.sp_mode} gives each rank seq_len / {c.split} tokens"
            )
            + ")",
            f"use a multiple of {c.split}, "
            f"e.g. {c.split * max(1, round(c.model.seq_len / c.split))}",
        ),
        lambda c: f"sequence length {c.model.seq_len} is not divisible by {c.split}",
        needs_model=True,
    ),
    Rule(
        "B = D × m × b in whole micro-batches",
        True,
        _batch_broken,
        batch_reject,
        lambda c: (
            f"global batch {c.global_batch} is not divisible by "
            f"D × micro-batch = {c.dp} × {c.microbatch}"
        ),
    ),
    Rule(
        "at least as many micro-batches as stages",
        True,
        lambda c: c.pp > 1 and c.steps_of_micro is not None and c.steps_of_micro < c.pp,
        too_few_reject,
        lambda c: (
            f"m={c.steps_of_micro} micro-batches per step < P={c.pp} stages (1F1B needs m ≥ P)"
        ),
    ),
]
LAYOUT_RULES = [*MESH_RULES, *SHAPE_RULES]

# ZeRO-3 is GeminiPlugin's (Colossal-AI 0.5.0): the rules a ZeRO-3 layout breaks, whether a
# configuration file or the planner chose it (layout False: they are no HybridParallelPlugin rule)
GEMINI_RULES = [
    Rule(
        "GeminiPlugin has no pipeline",
        False,
        lambda c: c.zero_stage == 3 and c.pp > 1,
        lambda c: fail(
            "parallelism.zero_stage",
            3,
            f"ZeRO-3 (GeminiPlugin) cannot run with pipeline = {c.pp}",
            "use zero_stage: 1 with the pipeline, or pipeline: 1 with ZeRO-3",
        ),
    ),
    Rule(
        "GeminiPlugin has no sequence parallelism",
        False,
        lambda c: c.zero_stage == 3 and c.sp_mode is not None,
        lambda c: fail(
            "parallelism.zero_stage",
            3,
            f"ZeRO-3 (GeminiPlugin) has no {c.sp_mode} sequence parallelism",
            "use zero_stage: 1 or 2 (HybridParallelPlugin) with sequence parallelism",
        ),
    ),
]
