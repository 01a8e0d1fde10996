"""What the config loader says when a rule of the model shape or the batch is broken (Chapter 4,
"The rules, and who would complain otherwise").

The messages of :data:`helpers.parallel.layout_rules.SHAPE_RULES` for a configuration file: the
field, the value, and a fix with numbers that would pass (the nearest divisors, a micro-batch count
the pipeline accepts).
"""

from __future__ import annotations

from helpers.parallel.case import Case
from helpers.parallel.errors import ConfigError, fail
from helpers.parallel.factors import divisors

# colossalai/pipeline/schedule/one_f_one_b.py:93-95 (OneForwardOneBackwardSchedule.load_batch)
ONE_F_ONE_B = (
    "Colossal-AI's 1F1B schedule asserts 'Number of microbatch should be larger than number of "
    "stages' (colossalai/pipeline/schedule/one_f_one_b.py:93) at the first step, after every "
    "rank has started"
)


def nearest(options: list[int], target: int, k: int = 2) -> str:
    """The ``k`` options closest to ``target`` (not ``target`` itself), as 'a or b'."""
    best = sorted((o for o in options if o != target), key=lambda o: (abs(o - target), o))[:k]
    return " or ".join(str(o) for o in sorted(best)) or "1"


def heads_reject(c: Case, name: str, n: int) -> ConfigError:
    m = c.model
    if n % c.tp:
        ok = [d for d in divisors(m.heads) if m.kv % d == 0]
        return fail(
            "parallelism.tensor",
            c.tp,
            f"does not divide model.{name} = {n} (each tensor rank holds whole heads)",
            f"try tensor {nearest(ok, c.tp)}",
        )
    ok = [d for d in divisors(m.heads // c.tp) if (m.kv // c.tp) % d == 0]
    return fail(  # shardformer computes n // sp // tp without checking the remainder
        "parallelism.sequence",
        c.sp,
        f"all_to_all gives each rank model.{name} / (tensor × sequence) = {n} / {c.tp * c.sp} "
        "heads, not whole",
        f"try sequence {nearest(ok, c.sp)}",
    )


def batch_reject(c: Case) -> ConfigError:
    B, D, b, m = c.global_batch, c.dp, c.microbatch, c.microbatches
    if B % D:
        return fail(
            "train.batch_size",
            B,
            f"the global batch does not split over data = {D} ranks",
            f"use a multiple of {D}, e.g. {D * max(1, B // D)}",
        )
    per = B // D
    sizes = [k for k in divisors(per) if per // k >= c.pp] or divisors(per)
    if b is not None and per % b:
        return fail(
            "train.micro_batch_size",
            b,
            f"global batch {B} = data {D} × {per} per rank, and {per} is not a multiple of {b}",
            f"use a divisor of {per}, e.g. {nearest(sizes, b, 1)}",
        )
    size = b or (per // m if per % m == 0 else None)
    counts = [d for d in divisors(per) if d >= c.pp]  # and a pipeline needs m ≥ P (1F1B)
    return fail(
        "parallelism.microbatches",
        m,
        f"each data rank gets {per} sequences (batch {B} / data {D})"
        + (f" in micro-batches of {size}" if size else ""),
        f"use microbatches {nearest(counts, m)} or change batch_size"
        if counts
        else f"raise batch_size to {D * max(m, c.pp)} or more (data × micro-batches)",
    )


def too_few_reject(c: Case) -> ConfigError:
    m, P, per = c.steps_of_micro, c.pp, c.per_rank
    many = f"m = {m} micro-batch{'es' if m != 1 else ''}"
    problem = f"{many} per step for pipeline = {P} stages; {ONE_F_ONE_B}"
    if c.microbatches is not None:  # written as a count
        ok = [d for d in divisors(per) if d >= P] if per else []
        fix = (
            f"use microbatches {ok[0]} or more (a divisor of the {per} sequences per data rank)"
            if ok
            else f"use microbatches {P} or more ({2 * P} shrinks the bubble), with a "
            "batch_size that gives each data rank a multiple of it"
        )
        return fail("parallelism.microbatches", m, problem, fix)
    ok = [b for b in divisors(per) if per // b >= P]
    fix = (
        f"use micro_batch_size {ok[-1]} or smaller, so that the {per} sequences per data rank "
        f"make at least {P} micro-batches"
        if ok
        else f"raise batch_size to at least {c.dp * P * c.microbatch} (data × pipeline × "
        "micro_batch_size)"
    )
    return fail("train.micro_batch_size", c.microbatch, problem, fix)
