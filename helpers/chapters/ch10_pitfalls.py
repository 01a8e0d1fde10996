"""Chapter 10's pitfalls: each belief, the demo that shows it failing and the fix, and its table.

Used by ``notebooks/10_pitfalls.ipynb`` and ``tests/test_quiz.py``. Every demo returns a
:class:`~helpers.chapters.ch10_shown.Shown`: the numbers that show the belief going wrong, the
numbers after the fix, and ``holds`` — True only when the demo really showed the failure *and* the
fix repaired it, so a test can assert it. The in-process demos are in
:mod:`helpers.chapters.ch10_costs`, :mod:`helpers.chapters.ch10_layout_rules` and
:mod:`helpers.chapters.ch10_data_parallel`; those that start processes or call Colossal-AI in
:mod:`helpers.chapters.ch10_runs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from helpers.chapters.ch10_costs import (
    mfu_with_recompute,
    more_parallelism,
    seed_memory,
    too_few_microbatches,
    tp_across_nodes,
)
from helpers.chapters.ch10_data_parallel import lr_not_scaled, sampler_by_world, uneven_token_mean
from helpers.chapters.ch10_layout_rules import (
    data_degree_not_integer,
    heads_not_divisible,
    sp_size_with_split_gather,
    zero2_with_pipeline,
)
from helpers.chapters.ch10_shown import Shown


@dataclass(frozen=True)
class Pitfall:
    key: str
    belief: str
    chapter: str  # the book page that explains it, e.g. "03_strategy"
    demo: Callable[[], Shown]


def _run(name: str) -> Callable[[], Shown]:
    def call() -> Shown:
        from helpers.chapters import ch10_runs

        return getattr(ch10_runs, name)()

    return call


PITFALLS = [
    Pitfall(
        "more-parallelism", "More parallelism is always faster.", "03_strategy", more_parallelism
    ),
    Pitfall(
        "seed-memory",
        "The seed's 16 B/param ÷ (T·P) is the memory each GPU needs.",
        "07_memory",
        seed_memory,
    ),
    Pitfall(
        "data-degree",
        "Any T and P work on any number of GPUs.",
        "02_combining",
        data_degree_not_integer,
    ),
    Pitfall(
        "lr-scaling",
        "Adding data-parallel GPUs needs no change to the learning rate.",
        "09_quick_demos",
        lr_not_scaled,
    ),
    Pitfall(
        "sampler-world",
        "Shard the dataloader over the world size.",
        "02_combining",
        sampler_by_world,
    ),
    Pitfall(
        "pp-loss-rank", "Every rank can log the loss.", "01_dimensions", _run("loss_on_first_stage")
    ),
    Pitfall(
        "tp-across-nodes",
        "Tensor parallelism may span nodes like any other axis.",
        "03_strategy",
        tp_across_nodes,
    ),
    Pitfall(
        "gpt2-causal",
        "GPT-2 under HybridParallelPlugin is still a causal language model.",
        "01_dimensions",
        _run("gpt2_mask_not_causal"),
    ),
    Pitfall(
        "a2a-unsupported",
        "all_to_all sequence parallelism works on any model.",
        "09_quick_demos",
        _run("all_to_all_unsupported"),
    ),
    Pitfall(
        "resume-rng",
        "Weights and optimizer are all a checkpoint needs.",
        "05_launch",
        _run("resume_without_rng"),
    ),
    Pitfall(
        "token-mean",
        "The mean of per-rank loss means is the global loss.",
        "01_dimensions",
        uneven_token_mean,
    ),
    Pitfall(
        "zero2-pp", "ZeRO-2 combines with pipeline parallelism.", "04_config", zero2_with_pipeline
    ),
    Pitfall(
        "sp-split-gather",
        "sp_size sets the sequence degree in every mode.",
        "02_combining",
        sp_size_with_split_gather,
    ),
    Pitfall(
        "heads-tp", "Any tensor degree that divides G will do.", "02_combining", heads_not_divisible
    ),
    Pitfall(
        "few-microbatches",
        "A pipeline needs only as many micro-batches as stages, or fewer.",
        "01_dimensions",
        too_few_microbatches,
    ),
    Pitfall(
        "mfu-recompute", "Recomputed FLOPs count towards MFU.", "07_memory", mfu_with_recompute
    ),
    Pitfall(
        "orphans",
        "Killing torchrun on a timeout stops the training.",
        "05_launch",
        _run("orphaned_workers"),
    ),
    Pitfall(
        "kernel-lock",
        "A Colossal-AI run that is silent at start-up can be killed and started again.",
        "08_troubleshooting",
        _run("stale_kernel_lock"),
    ),
]
BY_KEY = {p.key: p for p in PITFALLS}


def show(key: str) -> Shown:
    """Run pitfall ``key``'s demo, display belief / demonstrated / corrected, and glue it for the
    page."""
    from helpers.notebook.tables import show_table

    pitfall = BY_KEY[key]
    shown = pitfall.demo()
    rows = [
        {"": "belief", "result": pitfall.belief},
        {"": "demonstrated", "result": shown.wrong},
        {"": "corrected", "result": shown.fixed},
    ]
    show_table(rows, ["", "result"], f"ch10-{key}")
    return shown
