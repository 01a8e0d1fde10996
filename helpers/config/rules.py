"""The cross-field rules every :class:`~helpers.config.schema.TrainConfig` passes (Chapter 4,
"The rules, and who would complain otherwise").

Every bad configuration is rejected *before* any process starts, with one
:class:`~helpers.config.errors.ConfigError` whose message names the field, the value and how to fix
it. The rules mirror the checks that Colossal-AI 0.5.0's plugins run only after ``torchrun`` has
started every rank (asserts in ``HybridParallelPlugin.__init__``, ``LowLevelZeroPlugin.__init__``,
``GeminiPlugin.__init__``) and the divisibility rules of the model shapes (heads over tp, layers
over pp, batch over dp). The most fundamental rule is checked first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helpers.config.errors import ConfigError, fail
from helpers.parallel.factors import divisors
from helpers.parallel.vocab import OWN_AXIS_SP_MODES, SHARED_SP_MODES

if TYPE_CHECKING:
    from helpers.config.schema import Model, Parallelism, Train, TrainConfig


def _nearest(options: list[int], target: int, k: int = 2) -> str:
    best = sorted((o for o in options if o != target), key=lambda o: (abs(o - target), o))[:k]
    return " or ".join(str(o) for o in sorted(best)) or "1"


def check(cfg: TrainConfig) -> None:
    """Cross-field rules; raises the first ConfigError found (most fundamental first)."""
    p, t, m = cfg.parallelism, cfg.train, cfg.model
    mode = p.sequence_mode
    if p.sequence > 1 and mode is None:
        raise fail(
            "parallelism.sequence",
            p.sequence,
            "a sequence degree needs a sequence_mode",
            "add sequence_mode: all_to_all (Ulysses; or ring_attn), "
            "or split_gather/ring with tensor > 1",
        )
    if mode in SHARED_SP_MODES and p.tensor == 1:
        raise fail(
            "parallelism.sequence_mode",
            mode,
            f"{mode} splits the sequence over the tensor-parallel group, and tensor = 1",
            "set tensor: 2 or more, or use sequence_mode: all_to_all with sequence: 2",
        )
    if mode in SHARED_SP_MODES and p.sequence not in (1, p.tensor):
        raise fail(
            "parallelism.sequence",
            p.sequence,
            f"{mode} reuses the tensor group, so its degree is tensor = {p.tensor}",
            f"remove sequence (or set it to {p.tensor}), or use all_to_all",
        )
    if mode in OWN_AXIS_SP_MODES and p.sequence == 1:
        raise fail(
            "parallelism.sequence",
            1,
            f"sequence_mode {mode} with sequence 1 splits nothing",
            "set sequence: 2 or more, or remove sequence_mode",
        )
    if p.pipeline > 1 and p.microbatches is None and t.micro_batch_size is None:
        raise fail(
            "parallelism.microbatches",
            "(not set)",
            f"pipeline = {p.pipeline} needs micro-batches to keep its stages busy",
            f"add microbatches: {2 * p.pipeline} (≥ pipeline; more shrinks the bubble)",
        )
    if p.microbatches is not None and p.pipeline == 1:
        raise fail(
            "parallelism.microbatches",
            p.microbatches,
            "micro-batches feed the pipeline schedule and pipeline = 1",
            "remove microbatches (for gradient accumulation set train.micro_batch_size)",
        )
    if p.zero_stage == 3 and p.pipeline > 1:
        raise fail(
            "parallelism.zero_stage",
            3,
            f"ZeRO-3 (GeminiPlugin) cannot run with pipeline = {p.pipeline}",
            "use zero_stage: 1 with the pipeline, or pipeline: 1 with ZeRO-3",
        )
    if p.zero_stage == 2 and p.pipeline > 1:
        raise fail(
            "parallelism.zero_stage",
            2,
            "HybridParallelPlugin allows only ZeRO 0 or 1 with a pipeline "
            "(gradient sharding would sync every micro-batch)",
            "use zero_stage: 1",
        )
    if p.zero_stage == 3 and mode is not None:
        raise fail(
            "parallelism.zero_stage",
            3,
            f"ZeRO-3 (GeminiPlugin) has no {mode} sequence parallelism",
            "use zero_stage: 1 or 2 (HybridParallelPlugin) with sequence parallelism",
        )
    if p.zero_stage == 3 and t.precision == "fp32":
        raise fail(
            "train.precision",
            "fp32",
            "ZeRO-3 (GeminiPlugin) trains in fp16 or bf16 only",
            "set precision: bf16 (or fp16), or zero_stage: 1/2",
        )
    if p.zero_stage in (1, 2) and t.precision == "fp32" and p.model_parallel > 1:
        raise fail(
            "train.precision",
            "fp32",
            "HybridParallelPlugin's ZeRO optimizer needs a 16-bit precision",
            "set precision: bf16 (or fp16), or zero_stage: 0",
        )
    _check_model(p, m)
    if cfg.data_degree is not None:
        _check_batch(p, t, cfg.data_degree)


def _check_model(p: Parallelism, m: Model) -> None:
    if m.hidden % m.heads:
        raise fail(
            "model.hidden",
            m.hidden,
            f"does not split into heads = {m.heads}",
            f"use a multiple of {m.heads}, e.g. {m.heads * max(1, round(m.hidden / m.heads))}",
        )
    if m.kv_heads is not None and m.heads % m.kv_heads:
        raise fail(
            "model.kv_heads",
            m.kv_heads,
            f"grouped-query attention needs kv_heads to divide heads = {m.heads}",
            f"try kv_heads {_nearest(divisors(m.heads), m.kv_heads)}",
        )
    for name, n in (("heads", m.heads), ("kv_heads", m.kv)):
        if n % p.tensor:
            ok = [d for d in divisors(m.heads) if m.kv % d == 0]
            raise fail(
                "parallelism.tensor",
                p.tensor,
                f"does not divide model.{name} = {n} (each tensor rank holds whole heads)",
                f"try tensor {_nearest(ok, p.tensor)}",
            )
    for name, n in (("heads", m.heads), ("kv_heads", m.kv)):
        # shardformer computes n // sp // tp without checking the remainder
        if p.sequence_mode == "all_to_all" and n % (p.tensor * p.sequence):
            ok = [d for d in divisors(m.heads // p.tensor) if (m.kv // p.tensor) % d == 0]
            raise fail(
                "parallelism.sequence",
                p.sequence,
                f"all_to_all gives each rank model.{name} / (tensor × "
                f"sequence) = {n} / {p.tensor * p.sequence} heads, not whole",
                f"try sequence {_nearest(ok, p.sequence)}",
            )
    if m.layers % p.pipeline:
        raise fail(
            "parallelism.pipeline",
            p.pipeline,
            f"does not divide model.layers = {m.layers} into equal stages "
            "(the pipeline would run at the pace of its largest stage)",
            f"try pipeline {_nearest(divisors(m.layers), p.pipeline)}",
        )
    split = {"all_to_all": p.sequence, "ring_attn": 2 * p.sequence}.get(p.sequence_mode or "", 1)
    if p.sequence_mode in SHARED_SP_MODES:
        split = p.tensor
    if m.seq_len % split:
        why = (
            "ring_attn's zigzag split needs 2 × sequence chunks"
            if p.sequence_mode == "ring_attn"
            else f"{p.sequence_mode} gives each rank seq_len / {split} tokens"
        )
        raise fail(
            "model.seq_len",
            m.seq_len,
            f"does not divide by {split} ({why})",
            f"use a multiple of {split}, e.g. {split * max(1, round(m.seq_len / split))}",
        )


def _check_batch(p: Parallelism, t: Train, data: int) -> None:
    if t.batch_size % data:
        raise fail(
            "train.batch_size",
            t.batch_size,
            f"the global batch does not split over data = {data} ranks",
            f"use a multiple of {data}, e.g. {data * max(1, t.batch_size // data)}",
        )
    per_rank = t.batch_size // data
    if t.micro_batch_size is not None and per_rank % t.micro_batch_size:
        raise fail(
            "train.micro_batch_size",
            t.micro_batch_size,
            f"global batch {t.batch_size} = data {data} × "
            f"{per_rank} per rank, and {per_rank} is not a multiple of {t.micro_batch_size}",
            f"use a divisor of {per_rank}, "
            f"e.g. {_nearest(divisors(per_rank), t.micro_batch_size, 1)}",
        )
    if p.microbatches is not None:
        mbs = t.micro_batch_size or (
            per_rank // p.microbatches if per_rank % p.microbatches == 0 else None
        )
        if mbs is None or per_rank != mbs * p.microbatches:
            raise fail(
                "parallelism.microbatches",
                p.microbatches,
                f"each data rank gets {per_rank} sequences "
                f"(batch {t.batch_size} / data {data})"
                + (f" in micro-batches of {mbs}" if mbs else ""),
                f"use microbatches {_nearest(divisors(per_rank), p.microbatches)} "
                "or change batch_size",
            )


def check_world(cfg: TrainConfig, procs: int) -> None:
    """Does this layout fit ``procs`` processes (GPUs)? Raises ConfigError if not."""
    p = cfg.parallelism
    mp = p.model_parallel
    degrees = (("tensor", p.tensor), ("pipeline", p.pipeline), ("sequence", p.sp_in_world))
    parts = " × ".join(f"{k}={v}" for k, v in degrees if v > 1) or "1"
    if cfg.data_degree is None:
        if procs % mp:
            big = "tensor" if p.tensor >= p.pipeline else "pipeline"
            other = mp // getattr(p, big)
            ok = [
                d
                for d in divisors(procs // other if procs % other == 0 else 1)
                if big != "tensor" or cfg.model.heads % d == 0
            ]
            raise ConfigError(
                f"parallelism: {procs} GPUs cannot be split as {parts} ({mp} does not divide "
                f"{procs}); try {big} {_nearest(ok, getattr(p, big))}",
                f"parallelism.{big}",
                getattr(p, big),
            )
        return
    need = cfg.data_degree * mp
    if need != procs:
        fix = (
            f"set data: {procs // mp} or data: auto"
            if procs % mp == 0
            else f"use {need} processes ({procs} is not a multiple of {parts} = {mp})"
        )
        raise ConfigError(
            f"parallelism: data={cfg.data_degree} × {parts} needs {need} processes, "
            f"but {procs} were requested; {fix}",
            "parallelism.data",
            cfg.data_degree,
        )
