"""What the layout rules look at (Chapter 2, "Which layouts a model allows"): a :class:`Case`.

The degrees, the sequence mode, the ZeRO stage, the micro-batching, the model shape and the global
batch, and the plugin that will run them; built from a layout by
:func:`helpers.parallel.layout_rules.layout_case` or from a configuration file by
:func:`helpers.config.rules.config_case`, and tested by the rules of
:mod:`helpers.parallel.layout_rules` (their messages: :mod:`helpers.parallel.rule_fixes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from helpers.models.shape import ModelShape
from helpers.parallel.vocab import SHARED_SP_MODES


@dataclass(frozen=True)
class Case:
    """The numbers the rules test. ``dp`` is None while a config's ``data: auto`` is unresolved;
    ``microbatch`` is the micro-batch size b and ``microbatches`` the count m, either None when
    not chosen; ``sp`` is the own sequence axis (all_to_all, ring_attn) or, with no mode, the
    degree asked for; ``sequence`` the degree as a config writes it (= T for split_gather/ring)."""

    dp: int | None
    tp: int = 1
    pp: int = 1
    sp: int = 1
    sp_mode: str | None = None
    zero_stage: int = 0
    microbatch: int | None = None
    microbatches: int | None = None
    model: ModelShape | None = None
    global_batch: int | None = None
    plugin: str = "hybrid_parallel"  # a word of helpers.parallel.vocab.PLUGINS
    from_config: bool = False  # a config without b or m trains B / D sequences in one pass
    sequence: int = 1
    precision: str | None = None
    overlap_communication: bool | None = None
    train: Any = None  # a config's Train section (helpers.config.run_rules); None for a layout

    @property
    def world(self) -> int | None:
        """Processes the layout spans, once the data degree is known."""
        return None if self.dp is None else self.dp * self.tp * self.pp * self.sp

    @property
    def a2a(self) -> int:
        """Ulysses divides the heads by S before tensor parallelism divides them by T."""
        return self.sp if self.sp_mode == "all_to_all" else 1

    @property
    def split(self) -> int:
        """Into how many chunks the sequence is cut (2S for ring_attn's zigzag)."""
        if self.sp_mode == "ring_attn":
            return 2 * self.sp
        return self.tp if self.sp_mode in SHARED_SP_MODES else self.sp

    @property
    def per_rank(self) -> int | None:
        """Sequences per data-parallel rank and step, when the global batch splits over D."""
        B, D = self.global_batch, self.dp
        return None if B is None or D is None or B % D else B // D

    @property
    def steps_of_micro(self) -> int | None:
        """m: micro-batches per step, as given or as B / (D × b)."""
        if self.microbatches is not None:
            return self.microbatches
        per, b = self.per_rank, self.microbatch
        return None if per is None or b is None or per % b else per // b
