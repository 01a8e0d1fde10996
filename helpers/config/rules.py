"""The rules every :class:`~helpers.config.schema.TrainConfig` passes (Chapter 4, "The rules, and
who would complain otherwise"): :data:`RULES`, the one table.

Every bad configuration is rejected *before* any process starts, with one
:class:`~helpers.parallel.errors.ConfigError` whose message names the field, the value and how to
fix it. The table holds every rule of a layout (:data:`helpers.parallel.layout_rules.LAYOUT_RULES`,
the same rules :func:`helpers.parallel.layouts.violations` lists) and the rules only a configuration
file can break (:data:`CONFIG_RULES`: a precision, a sequence degree written twice, an option for
the wrong plugin; :data:`helpers.config.run_rules.RUN_RULES`: numbers a rank would fail on). They
mirror the checks that Colossal-AI 0.5.0's plugins run only after ``torchrun`` has started every
rank (asserts in ``HybridParallelPlugin.__init__``, ``LowLevelZeroPlugin.__init__``,
``GeminiPlugin.__init__``, the 1F1B schedule's ``load_batch``) and the divisibility rules of the
model shapes (heads over tp, layers over pp, batch over dp). The first broken rule of the table is
reported, the most fundamental first.
"""

from __future__ import annotations

from helpers.parallel.errors import ConfigError, fail, warn
from helpers.parallel.case import Case
from helpers.parallel.layout_rules import GEMINI_RULES, MESH_RULES, SHAPE_RULES, Rule, nearest
from helpers.config.run_rules import RUN_RULES, RUN_WARNINGS
from helpers.parallel.factors import divisors
from helpers.parallel.vocab import OWN_AXIS_SP_MODES, SHARED_SP_MODES

# where a config's overlap_communication goes: the plugins that take it (their __init__ in
# colossalai/booster/plugin/), and what the others do instead
OVERLAP_ELSEWHERE = {
    "torch_ddp": "TorchDDPPlugin has no such argument: PyTorch DDP always overlaps its bucketed "
    "all-reduce with the backward pass",
    "gemini": "GeminiPlugin has no such argument (its asynchronous reduce is "
    "enable_async_reduce, Chapter 6)",
    "hybrid_parallel": "HybridParallelPlugin passes overlap_communication to its ZeRO optimizer "
    "only, and zero_stage = 0",
}


def plugin_word(cfg) -> str:
    """The plugin a config gets (:func:`helpers.config.plugin.plugin_spec` builds its kwargs)."""
    # [start: plugin-choice]
    p, t = cfg.parallelism, cfg.train
    if p.zero_stage == 3:
        return "gemini"
    if p.model_parallel == 1 and p.zero_stage in (1, 2):
        return "low_level_zero"
    if p.model_parallel == 1 and t.precision != "bf16":
        return "torch_ddp"
    return "hybrid_parallel"
    # [end: plugin-choice]


def config_case(cfg) -> Case:
    """A configuration as the :class:`~helpers.parallel.layout_rules.Case` the rules test."""
    p, t = cfg.parallelism, cfg.train
    return Case(
        cfg.data_degree,
        p.tensor,
        p.pipeline,
        1 if p.sequence_mode in SHARED_SP_MODES else p.sequence,
        p.sequence_mode,
        p.zero_stage,
        t.micro_batch_size,
        p.microbatches,
        cfg.model.shape(),
        t.batch_size,
        plugin_word(cfg),
        from_config=True,
        sequence=p.sequence,
        precision=t.precision,
        overlap_communication=p.overlap_communication,
        train=t,
    )


def _model_parallel(c: Case) -> int:
    return c.tp * c.pp * (c.sp if c.sp_mode in OWN_AXIS_SP_MODES else 1)


CONFIG_RULES = [  # what only a configuration file can get wrong
    Rule(
        "split_gather/ring degree is the tensor degree",
        False,
        lambda c: c.sp_mode in SHARED_SP_MODES and c.sequence not in (1, c.tp),
        lambda c: fail(
            "parallelism.sequence",
            c.sequence,
            f"{c.sp_mode} reuses the tensor group, so its degree is tensor = {c.tp}",
            f"remove sequence (or set it to {c.tp}), or use all_to_all",
        ),
    ),
    Rule(
        "all_to_all/ring_attn need a degree",
        False,
        lambda c: c.sp_mode in OWN_AXIS_SP_MODES and c.sequence == 1,
        lambda c: fail(
            "parallelism.sequence",
            1,
            f"sequence_mode {c.sp_mode} with sequence 1 splits nothing",
            "set sequence: 2 or more, or remove sequence_mode",
        ),
    ),
    Rule(
        "micro-batches only with a pipeline",
        False,
        lambda c: c.microbatches is not None and c.pp == 1,
        lambda c: fail(
            "parallelism.microbatches",
            c.microbatches,
            "micro-batches feed the pipeline schedule and pipeline = 1",
            "remove microbatches (for gradient accumulation set train.micro_batch_size)",
        ),
    ),
    *GEMINI_RULES,
    Rule(
        "GeminiPlugin trains in 16 bits",
        False,
        lambda c: c.zero_stage == 3 and c.precision == "fp32",
        lambda c: fail(
            "train.precision",
            "fp32",
            "ZeRO-3 (GeminiPlugin) trains in fp16 or bf16 only",
            "set precision: bf16 (or fp16), or zero_stage: 1/2",
        ),
    ),
    Rule(
        "HybridParallelPlugin's ZeRO trains in 16 bits",
        False,
        lambda c: c.zero_stage in (1, 2) and c.precision == "fp32" and _model_parallel(c) > 1,
        lambda c: fail(
            "train.precision",
            "fp32",
            "HybridParallelPlugin's ZeRO optimizer needs a 16-bit precision",
            "set precision: bf16 (or fp16), or zero_stage: 0",
        ),
    ),
    Rule(
        "overlap_communication only where a plugin takes it",
        False,
        lambda c: (
            c.overlap_communication is not None
            and not (c.plugin == "low_level_zero" or c.plugin == "hybrid_parallel" and c.zero_stage)
        ),
        lambda c: fail(
            "parallelism.overlap_communication",
            c.overlap_communication,
            OVERLAP_ELSEWHERE[c.plugin],
            "remove it, or use zero_stage: 1 or 2 (LowLevelZeroPlugin, or HybridParallelPlugin "
            "with tensor/pipeline/sequence parallelism), whose overlap_communication it sets",
        ),
    ),
    Rule(
        "hidden split into heads",
        False,
        lambda c: c.model.hidden % c.model.heads != 0,
        lambda c: fail(
            "model.hidden",
            c.model.hidden,
            f"does not split into heads = {c.model.heads}",
            f"use a multiple of {c.model.heads}, "
            f"e.g. {c.model.heads * max(1, round(c.model.hidden / c.model.heads))}",
        ),
    ),
    Rule(
        "KV heads divide heads",
        False,
        lambda c: c.model.heads % c.model.kv != 0,
        lambda c: fail(
            "model.kv_heads",
            c.model.kv,
            f"grouped-query attention needs kv_heads to divide heads = {c.model.heads}",
            f"try kv_heads {nearest(divisors(c.model.heads), c.model.kv)}",
        ),
    ),
]

RULES: list[Rule] = [*MESH_RULES, *CONFIG_RULES, *SHAPE_RULES, *RUN_RULES]


def broken_rules(cfg) -> list[Rule]:
    """Every rule of :data:`RULES` that ``cfg`` breaks, in table order."""
    case = config_case(cfg)
    return [r for r in RULES if r.broken(case)]


def check(cfg) -> None:
    """Raise the first broken rule's ConfigError (the table's order: most fundamental first);
    then warn (:func:`~helpers.parallel.errors.warn`) of each rule of :data:`RUN_WARNINGS` that
    ``cfg`` breaks."""
    # [start: config-check]
    case = config_case(cfg)
    for rule in RULES:
        if rule.broken(case):
            error = rule.reject(case)
            error.rule = rule.name
            raise error
    for rule in RUN_WARNINGS:
        if rule.broken(case):
            warn(str(rule.reject(case)))
    # [end: config-check]


def check_world(cfg, procs: int) -> None:
    """Does this layout fit ``procs`` processes (GPUs)? Raises ConfigError if not."""
    if not isinstance(procs, int) or isinstance(procs, bool) or procs < 1:
        raise fail(
            "world_size",
            procs,
            "the processes requested must be a whole number ≥ 1",
            "pass the number of GPUs (torchrun's WORLD_SIZE), e.g. world_size=8",
        )
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
                f"{procs}); try {big} {nearest(ok, getattr(p, big))}",
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
