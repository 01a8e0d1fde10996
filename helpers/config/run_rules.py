"""The rules of a run's numbers and of settings that contradict each other (Chapter 4, "What the
loader guarantees"): part of the one table, :data:`helpers.config.rules.RULES`.

:data:`RUN_RULES` refuse what the schema's bounds let through and a rank would only fail on, read
from the code that consumes each field:

* ``train.seed``: every rank calls ``np.random.seed(seed + 1000 × rank)``
  (:func:`helpers.train.loop.seed_everything`), and numpy's legacy seeding accepts 0 to 2³² − 1
  only (``ValueError: Seed must be between 0 and 2**32 - 1``), on every rank at once;
* ``train.steps``: checkpoints are folders ``step_`` + 8 digits and
  :func:`helpers.train.checkpoint.latest` and ``prune`` match exactly 8, so step 100,000,000 would
  be saved where no resume looks;
* ``model.hidden`` / ``model.heads``: transformers' Llama rotates pairs of dimensions
  (``LlamaRotaryEmbedding`` computes d/2 frequencies and ``rotate_half`` splits q and k in two),
  so an odd head dimension stops every rank at its first forward pass with a shape mismatch;
* ``train.keep_last`` with ``save_interval: 0``: nothing is saved, so nothing is kept.

:data:`RUN_WARNINGS` run, but mean less than they say; :func:`helpers.config.rules.check` issues
them as :class:`~helpers.parallel.errors.ConfigWarning`: a save interval longer than the run (one
checkpoint, at the end), ZeRO over a data-parallel group of one rank (it shards nothing).
"""

from __future__ import annotations

from helpers.parallel.errors import fail
from helpers.parallel.case import Case
from helpers.parallel.layout_rules import Rule
from helpers.parallel.vocab import OWN_AXIS_SP_MODES

SEED_LIMIT = 2**32 - 1  # numpy's np.random.seed (RandomState, legacy seeding)
RANK_STRIDE = 1000  # helpers.train.loop: seed_everything(seed + 1000 * rank)
STEP_DIGITS = 8  # helpers.train.checkpoint.STEP_DIR: step_(\d{8})


def _ranks(c: Case) -> int:
    """The ranks the run will have, or the fewest it can have while data is 'auto'."""
    return c.world or c.tp * c.pp * c.sp


def _max_seed(c: Case) -> int:
    return SEED_LIMIT - RANK_STRIDE * (_ranks(c) - 1)


def _seed_reject(c: Case):
    n, most = _ranks(c), _max_seed(c)
    ranks = f"on {n} ranks" if c.world else f"on {n} ranks or more (checked again for the world)"
    return fail(
        "train.seed",
        c.train.seed,
        f"every rank seeds numpy with seed + {RANK_STRIDE} × rank "
        f"(helpers.train.loop.seed_everything) and np.random.seed accepts 0 to 2**32 − 1, so "
        f"{ranks} the seed is at most {most:,}",
        f"use a seed from 0 to {max(most, 0):,}, e.g. seed: 42",
    )


def _head_dim_reject(c: Case):
    m = c.model
    even = [k * 2 * m.heads for k in (m.hidden // (2 * m.heads), m.hidden // (2 * m.heads) + 1)]
    return fail(
        "model.hidden",
        m.hidden,
        f"gives each of the {m.heads} heads {m.hidden // m.heads} dimensions, an odd number, "
        "and transformers' Llama rotates pairs of them (LlamaRotaryEmbedding, rotate_half): "
        "every rank would stop at its first forward pass with a shape mismatch",
        f"use a multiple of 2 × heads = {2 * m.heads}, e.g. "
        + " or ".join(str(h) for h in even if h > 0),
    )


RUN_RULES = [
    Rule(
        "the seed fits numpy's range on every rank",
        False,
        lambda c: c.train is not None and c.train.seed > _max_seed(c),
        _seed_reject,
    ),
    Rule(
        "checkpoint steps have 8 digits",
        False,
        lambda c: (
            c.train is not None and c.train.save_interval > 0 and c.train.steps >= 10**STEP_DIGITS
        ),
        lambda c: fail(
            "train.steps",
            c.train.steps,
            f"checkpoints are folders step_ and {STEP_DIGITS} digits, and "
            f"helpers.train.checkpoint.latest and prune match exactly {STEP_DIGITS}, so a "
            f"checkpoint of step {10**STEP_DIGITS:,} or later would be invisible to --resume",
            f"run at most {10**STEP_DIGITS - 1} steps at a time (--resume goes on from there)",
        ),
    ),
    Rule(
        "an even head dimension for rotary positions",
        False,
        lambda c: (
            c.train is not None
            and c.model.hidden % c.model.heads == 0
            and c.model.hidden // c.model.heads % 2 == 1
        ),
        _head_dim_reject,
    ),
    Rule(
        "keep_last only when saving",
        False,
        lambda c: c.train is not None and bool(c.train.keep_last) and not c.train.save_interval,
        lambda c: fail(
            "train.keep_last",
            c.train.keep_last,
            "save_interval = 0 writes no checkpoint, so there is nothing to keep",
            f"set save_interval (e.g. save_interval: {max(1, c.train.steps // 10)}) or remove "
            "keep_last",
        ),
    ),
]


def _shard_group(c: Case) -> int | None:
    """The ranks ZeRO shards over: data (× the own sequence axis of all_to_all/ring_attn)."""
    return None if c.dp is None else c.dp * (c.sp if c.sp_mode in OWN_AXIS_SP_MODES else 1)


RUN_WARNINGS = [
    Rule(
        "a save interval longer than the run",
        False,
        lambda c: c.train is not None and c.train.save_interval > c.train.steps,
        lambda c: fail(
            "train.save_interval",
            c.train.save_interval,
            f"longer than the run (steps = {c.train.steps}), so the only checkpoint is the "
            f"final one, at step {c.train.steps}",
            f"set steps (the run's length) or save_interval: {c.train.steps} to say so",
        ),
    ),
    Rule(
        "ZeRO over one data-parallel rank",
        False,
        lambda c: c.train is not None and c.zero_stage > 0 and _shard_group(c) == 1,
        lambda c: fail(
            "parallelism.zero_stage",
            c.zero_stage,
            "ZeRO shards the optimizer states over the data-parallel ranks and data = 1: it "
            "shards nothing, every rank keeps all of its states",
            "use zero_stage: 0, or data: 2 or more for ZeRO to save memory",
        ),
    ),
]
