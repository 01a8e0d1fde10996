"""Parallel layouts: how G GPUs factor into D × T × P (× S), and which factorings a model allows.

Used by Chapter 2 (combining dimensions) and its torchrun demo ``helpers/demos/ch02_mesh.py``.
The seed's section 多维并行组合 states the one equation every layout must satisfy,

    G = D × T × P                      (× S when sequence parallelism has an axis of its own)

so the data degree follows, ``D = G / (T·P·S)``, and "if it is not an integer the combination cannot
be laid out". Its Python demo enumerates the factorings with ``factor_parallelism``, reproduced
exactly below. The seed checks nothing else; Colossal-AI 0.5.0 checks more, in
``colossalai/booster/plugin/hybrid_parallel_plugin.py`` (``HybridParallelPlugin.__init__``) and the
code it calls. Each rule of :func:`violations` cites where it comes from:

* world size divisible by ``tp_size * pp_size`` (the only divisibility the plugin asserts); with an
  own ``sp`` axis ``D = G // (S·P·T)`` is floored, and ``ProcessGroupMesh`` later fails if
  ``D·P·T·S != G`` — :func:`data_degree` checks the full product up front;
* ``split_gather`` and ``ring`` sequence parallelism reuse the tensor group (S = T, not counted in
  G) and need ``tp_size > 1``; ``all_to_all`` (Ulysses) and ``ring_attn`` get their own ``sp`` axis,
  counted in G (``ring_attn`` even swaps it in front of ``tp``: mesh ``(dp, pp, sp, tp)``);
  ``sp_size`` without sequence parallelism is an error;
* pipeline parallelism needs ``num_microbatches`` or ``microbatch_size``, and ZeRO stage ≤ 1;
  its 1F1B schedule asserts micro-batches ≥ stages (``pipeline/schedule/one_f_one_b.py:93``, in
  ``load_batch``: at the first step, after every rank has started);
* Shardformer's Llama policy (``shardformer/policies/llama.py``) asserts attention heads and
  key-value heads divisible by T (KV heads not fewer than T), after dividing both by S for
  ``all_to_all``; ring attention needs sequences divisible by 2S (``shardformer/layer/utils.py``);
* book rules, stricter than the library: layers divisible by P (Colossal-AI would spread the
  remainder over middle stages, ``PipelineStageManager.distribute_layers``), and a global batch
  divisible by D × micro-batch size, so every rank sees whole micro-batches.

The rules themselves are one table, :data:`helpers.parallel.layout_rules.LAYOUT_RULES`, which
Chapter 4's config loader enforces as well (:data:`helpers.config.rules.RULES`).
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.parallel.layout_rules import LAYOUT_RULES, layout_case
from helpers.models.shape import ModelShape
from helpers.parallel.degrees import COLOSSALAI, Degrees, data_degree
from helpers.parallel.mesh import RankMesh
from helpers.parallel.vocab import OWN_AXIS_SP_MODES, SHARED_SP_MODES, SP_MODES


def factor_parallelism(
    total_gpus: int, max_tp: int = 8, max_pp: int = 4
) -> list[tuple[int, int, int]]:
    """The seed's ``factor_parallelism``, unchanged: every (dp, tp, pp) with dp = G / (tp·pp) whole.

    Loops tp = 1..max_tp, then pp = 1..max_pp, so the order is the seed's. It knows nothing about
    the model: see :func:`feasible_layouts` for the constraints it forgets.
    """
    combos = []
    for tp in range(1, max_tp + 1):
        for pp in range(1, max_pp + 1):
            if total_gpus % (tp * pp) == 0:
                dp = total_gpus // (tp * pp)
                if dp >= 1:
                    combos.append((dp, tp, pp))
    return combos


# Qwen2-7B's config (28 layers, 28 query heads, 4 KV heads, hidden 3584): a model of the seed's
# 7.5 B size
QWEN2_7B = ModelShape(layers=28, heads=28, kv_heads=4, hidden=3584, seq_len=4096)


@dataclass(frozen=True)
class Layout:
    """One way to lay out a job: degrees, sequence mode, micro-batch size and ZeRO stage.

    ``sp`` is the size of the own sequence axis (all_to_all / ring_attn); for split_gather and ring
    it stays 1 and the sequence degree :attr:`seq_degree` is T.
    """

    dp: int
    tp: int = 1
    pp: int = 1
    sp: int = 1
    sp_mode: str | None = None
    microbatch: int | None = None  # samples per micro-batch (the plugin's microbatch_size)
    zero_stage: int = 0  # 0-2: HybridParallelPlugin; 3: parameters sharded too (Gemini, FSDP)
    reshard_after_forward: bool = True  # ZeRO-3 only: gather again for the backward (FSDP's flag)
    shard_degree: int | None = None  # ZeRO-3 only, HSDP: shard over this many data ranks
    chunks: int = 1  # model chunks per pipeline rank (interleaved 1F1B: v > 1)
    # who runs it: HybridParallelPlugin (ZeRO 0-2), or "gemini" for ZeRO-3 (Colossal-AI's
    # GeminiPlugin; PyTorch's FSDP2 runs the same layouts and also the kept and HSDP forms)
    plugin: str = "hybrid_parallel"

    @property
    def sharding(self) -> str:
        """How the data-parallel group holds the model states, in the book's words."""
        if self.zero_stage < 3:
            return "DDP" if self.zero_stage == 0 else f"ZeRO-{self.zero_stage}"
        name = "FSDP" if self.reshard_after_forward else "FSDP, kept after forward"
        if self.shard_degree and self.shard_degree < self.dp:
            name = f"HSDP {self.shard_degree}×{self.dp // self.shard_degree}" + name[4:]
        return name

    @classmethod
    def for_world(
        cls, G: int, tp: int = 1, pp: int = 1, sp: int = 1, sp_mode: str | None = None, **kw
    ) -> "Layout":
        """Derive D from G with :func:`data_degree`."""
        dp = data_degree(G, tp, pp, sp, sp_mode)
        return cls(dp, tp, pp, 1 if sp_mode in SHARED_SP_MODES else sp, sp_mode, **kw)

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.sp

    @property
    def degrees(self) -> Degrees:
        """The layout's :class:`helpers.parallel.degrees.Degrees` (S = T for split_gather, ring)."""
        return Degrees(self.dp, self.tp, self.pp, self.seq_degree, self.sp_mode)

    @property
    def seq_degree(self) -> int:
        """S: the number of ranks a sequence is split over (T for split_gather and ring)."""
        return self.tp if self.sp_mode in SHARED_SP_MODES else self.sp

    def mesh(self) -> RankMesh:
        """The rank grid HybridParallelPlugin builds, ProcessGroupMesh(dp, pp, tp, sp)."""
        if self.sp_mode == "ring_attn":
            raise ValueError(
                "ring_attn lays ranks out as (dp, pp, sp, tp), not RankMesh's (dp, pp, tp, sp)"
            )
        return RankMesh(self.dp, self.pp, self.tp, self.sp)

    def plugin_kwargs(self) -> dict:
        """Keyword arguments for ``HybridParallelPlugin`` that build this layout."""
        degrees = self.degrees.colossalai()  # the degrees' names: helpers.parallel.degrees.NAMES
        kw = {k: degrees.pop(k) for k in list(degrees)[:2]} | {"zero_stage": self.zero_stage}
        kw |= degrees | ({COLOSSALAI["sequence"]: self.sp} if self.sp_mode else {})
        if self.microbatch is not None:
            kw["microbatch_size"] = self.microbatch
        if self.chunks > 1:
            kw |= {"pp_style": "interleaved", "num_model_chunks": self.chunks}
        return kw

    def __str__(self) -> str:
        text = f"D={self.dp} × T={self.tp} × P={self.pp}"
        if self.sp_mode in OWN_AXIS_SP_MODES:
            text += f" × S={self.sp} ({self.sp_mode})"
        elif self.sp_mode:
            text += f" ({self.sp_mode}, S=T={self.tp})"
        if self.chunks > 1:
            text += f", interleaved c={self.chunks}"
        return text


def violations(
    layout: Layout, model: ModelShape | None = None, global_batch: int | None = None
) -> list[str]:
    """Every reason ``layout`` cannot run (empty when it can), one per broken rule of
    :data:`helpers.parallel.layout_rules.LAYOUT_RULES`, the table that
    :func:`helpers.config.loading.load_config` enforces too; the module docstring gives the
    sources."""
    if layout.sp_mode is not None and layout.sp_mode not in SP_MODES:
        return [f"unknown sequence parallelism mode {layout.sp_mode!r}"]
    case = layout_case(layout, model, global_batch)
    reasons = [
        rule.reason(case)
        for rule in LAYOUT_RULES
        if (model is not None or not rule.needs_model) and rule.broken(case)
    ]
    return reasons + _interleaving(layout, case)


def _interleaving(layout: Layout, case) -> list[str]:
    """Colossal-AI's interleaved 1F1B (``pp_style="interleaved"``) needs a pipeline, a number of
    micro-batches that P divides (``pipeline/schedule/interleaved_pp.py``, ``load_batch``), and,
    in this book, layers that split evenly into P × c chunks."""
    v, p = layout.chunks, layout.pp
    if v == 1:
        return []
    m = case.steps_of_micro
    layers = case.model.layers if case.model is not None else None
    if p < 2 or (layers is not None and layers % (p * v)) or (m is not None and m % p):
        return [
            f"{v} chunks per stage with P={p}: interleaving needs P > 1, layers divisible by "
            f"P×c and m a multiple of P"
        ]
    return []


def validate(
    layout: Layout, model: ModelShape | None = None, global_batch: int | None = None
) -> Layout:
    """Return ``layout`` or raise a ValueError listing every violated rule."""
    why = violations(layout, model, global_batch)
    if why:
        raise ValueError(f"{layout} cannot run: " + "; ".join(why))
    return layout


@dataclass(frozen=True)
class Search:
    """What :func:`feasible_layouts` found: the layouts that run, and the others with their
    reasons."""

    feasible: list[Layout]
    rejected: list[tuple[Layout, list[str]]]


def feasible_layouts(
    G: int,
    model: ModelShape,
    global_batch: int,
    microbatch: int = 1,
    max_tp: int = 8,
    max_pp: int = 4,
    sp_modes: tuple[str | None, ...] = (None,),
    max_sp: int = 8,
    zero_stage: int = 0,
) -> Search:
    """Every layout of G GPUs in the seed's enumeration order, split into feasible and rejected.

    For each (tp, pp) of ``factor_parallelism`` order and each mode in ``sp_modes``: None (no
    sequence parallelism), a shared mode (S = T) or an own-axis mode with S = 2..max_sp where it
    divides. Layouts whose D is not whole are skipped, as the seed skips them.
    """
    feasible, rejected = [], []
    for tp in range(1, max_tp + 1):
        for pp in range(1, max_pp + 1):
            for mode in sp_modes:
                sizes = range(2, max_sp + 1) if mode in OWN_AXIS_SP_MODES else [1]
                for sp in sizes:
                    if G % (tp * pp * sp):
                        continue
                    layout = Layout(G // (tp * pp * sp), tp, pp, sp, mode, microbatch, zero_stage)
                    why = violations(layout, model, global_batch)
                    (rejected.append((layout, why)) if why else feasible.append(layout))
    return Search(feasible, rejected)
