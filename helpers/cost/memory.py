"""Per-rank memory model of training: model states, activations, offload and fixed overhead.

Used by Chapter 7 (memory) and the planner. Every byte count below is an *estimate* from published
formulas, not a measurement; units are bytes, and :meth:`MemoryBreakdown.gib` / ``gb`` convert.

Sources, one per part:

* **Model states** (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models", §3 and Fig. 1). Mixed-precision (bf16/fp16) Adam keeps 2 B weights + 2 B
  gradients + K = 12 B of fp32 master weights, momentum and variance = 16 B per parameter; plain
  fp32 Adam keeps 4 B weights + 4 B gradients + K = 8 B (m, v) = also 16 B. ZeRO stages over the
  data-parallel degree N_d: stage 0 (w+g+K)Ψ, stage 1 (w+g)Ψ + KΨ/N_d, stage 2 wΨ + (g+K)Ψ/N_d,
  stage 3 (w+g+K)Ψ/N_d (Fig. 1 with w = g = 2). Tensor and pipeline parallelism shard the weights
  first, so Ψ here is Ψ/(T·P) (even split assumed). With an own sequence axis (all_to_all,
  ring_attn) Colossal-AI applies ZeRO over dp × sp (``HybridParallelPlugin.mixed_dp_group``), so
  N_d = D·S then.
* **Activations** per transformer layer: Korthikanti et al. 2022, Table 2
  (:func:`helpers.cost.activations.layer_activations`, whose docstring gives the terms).
* **Pipeline** (Korthikanti §4.2.3; Narayanan et al. 2021): a stage holds L/P layers; under 1F1B
  the first stage keeps min(m, P) micro-batches in flight, so its activations are those of
  min(m, P)·L/P layers — about L layers' worth. We assume the first (busiest) stage.
* **Offload**: optimizer states (the K bytes per parameter, sharded as ZeRO shards them) are moved
  to CPU memory (ZeRO-Offload, Ren et al. 2021); they leave the GPU total and appear as
  ``cpu_optimizer``.
* **Seed rule**: the seed's ``estimate_memory`` uses 16 B/param ÷ (T·P) in GB = 1e9, reproduced by
  :func:`seed_estimate_memory`; :func:`seed_omissions` says what it leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from helpers.models.shape import ModelShape
from helpers.cost.activations import check_degree, check_positive, layer_activations
from helpers.parallel.layouts import Layout, violations
from helpers.parallel.vocab import OWN_AXIS_SP_MODES, SHARED_SP_MODES, SP_MODES

GIB = 2**30
GB = 1e9

# bytes per parameter: (weights, gradients, optimizer K) — ZeRO paper §3 for mixed precision
PRECISIONS: dict[str, tuple[int, int, int]] = {
    "fp32": (4, 4, 8),  # fp32 weights, fp32 grads, Adam m and v in fp32
    "bf16": (2, 2, 12),  # bf16 weights and grads; fp32 master weights, m, v
    "fp16": (2, 2, 12),  # as bf16 (plus a loss scale, negligible)
}


def bytes_per_param(precision: str) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) bytes per parameter for Adam in ``precision``."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {sorted(PRECISIONS)}")
    return PRECISIONS[precision]


def model_states(
    params: float,
    precision: str = "bf16",
    zero_stage: int = 0,
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
) -> tuple[float, float, float]:
    """Per-rank (weights, gradients, optimizer) bytes: ZeRO paper §3/Fig. 1 after a T·P split.

    >>> round(sum(model_states(7.5e9, "bf16", 1, dp=64)) / 1e9, 1)
    31.4
    """
    check_positive("params", params, allow_zero=True)
    for name, value in (("dp", dp), ("tp", tp), ("pp", pp)):
        check_degree(name, value)
    if zero_stage not in (0, 1, 2, 3) or isinstance(zero_stage, bool):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    w, g, k = bytes_per_param(precision)
    psi = params / (tp * pp)  # tensor × pipeline sharding first
    weights = w * psi / (dp if zero_stage >= 3 else 1)
    grads = g * psi / (dp if zero_stage >= 2 else 1)
    optim = k * psi / (dp if zero_stage >= 1 else 1)
    return weights, grads, optim


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per-rank bytes by component; ``total`` is what sits on the GPU (``cpu_optimizer`` is not
    on it)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    overhead: float = 0.0
    cpu_optimizer: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.overhead

    def gib(self, component: str = "total") -> float:
        """A component (or the total) in GiB = 2**30 bytes."""
        return getattr(self, component) / GIB

    def gb(self, component: str = "total") -> float:
        """A component (or the total) in GB = 1e9 bytes, the unit of the papers and the seed."""
        return getattr(self, component) / GB

    def table(self, unit: str = "GiB") -> str:
        """A small aligned text table of every component and the GPU total, rounded to 0.01."""
        if unit not in ("GiB", "GB"):
            raise ValueError(f"unit must be 'GiB' or 'GB', got {unit!r}")
        div = GIB if unit == "GiB" else GB
        rows = [(f.name, getattr(self, f.name)) for f in fields(self)]
        rows.insert(len(rows) - 1, ("total (GPU)", self.total))
        return "\n".join(f"{name:<14}{value / div:>10.2f} {unit}" for name, value in rows)


def predicted_optimizer_bytes(layout, precision: str = "fp32") -> tuple[float, float]:
    """(memory model's K·Ψ/N_d, bytes the padding adds = K·pad/N_d) for one rank under ZeRO-1, for
    a :class:`helpers.parallel.zero.FlatLayout` (Chapter 7's from-scratch ZeRO-1)."""
    _, _, optim = model_states(layout.numel, precision, zero_stage=1, dp=layout.world)
    _, _, k = model_states(1, precision, zero_stage=0)
    return optim, k * layout.pad / layout.world


def _refuse_impossible(layout: Layout, shape: ModelShape | None) -> None:
    """A ValueError naming every rule of :func:`helpers.parallel.layouts.violations` the layout
    breaks. ZeRO-3 without a pipeline stays allowed: the ZeRO paper's stage 3 (GeminiPlugin's
    chunks, Chapter 7), which HybridParallelPlugin does not offer."""
    if layout.zero_stage not in (0, 1, 2, 3) or isinstance(layout.zero_stage, bool):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {layout.zero_stage!r}")
    why = violations(replace(layout, zero_stage=min(layout.zero_stage, 2)), shape)
    if layout.zero_stage == 3 and layout.pp > 1:
        why.append(f"ZeRO stage 3 with P={layout.pp}: stage 3 shards no pipeline stage here")
    if why:
        raise ValueError(f"{layout} cannot run: " + "; ".join(why))


def estimate(
    params: float,
    layout: Layout | None = None,
    *,
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
    sp: int = 1,
    sp_mode: str | None = None,
    precision: str = "bf16",
    zero_stage: int | None = None,
    shape: ModelShape | None = None,
    micro_batch: int | None = None,
    seq_len: int | None = None,
    microbatches: int | None = None,
    recompute: bool = False,
    flash: bool = False,
    offload: bool = False,
    overhead_bytes: float = 0.0,
) -> MemoryBreakdown:
    """Per-rank training memory of a model with ``params`` parameters (first pipeline stage).

    Degrees come from ``layout`` (a :class:`helpers.parallel.layouts.Layout`, also giving
    ``zero_stage`` and ``micro_batch`` unless passed) or from ``dp``/``tp``/``pp``/``sp``/
    ``sp_mode``. Activations need ``shape`` (a :class:`helpers.models.shape.ModelShape` with
    layers, heads, hidden) and a sequence length (``seq_len`` or ``shape.seq_len``);
    without a shape they are 0. ``microbatches`` (m) caps the in-flight micro-batches of 1F1B at
    min(m, P); by default P. ``overhead_bytes`` is the fixed per-rank cost (CUDA context, NCCL
    buffers, allocator slack): 0 by default, to be measured on the GPU box (Chapter 7's "outside
    allocator" column: typically 0.5–2 GiB). Sources of each term: the module docstring.
    """
    if layout is not None:
        dp, tp, pp, sp, sp_mode = layout.dp, layout.tp, layout.pp, layout.sp, layout.sp_mode
        zero_stage = layout.zero_stage if zero_stage is None else zero_stage
        micro_batch = layout.microbatch if micro_batch is None else micro_batch
    zero_stage = 0 if zero_stage is None else zero_stage
    micro_batch = 1 if micro_batch is None else micro_batch
    check_degree("sp", sp)
    check_positive("overhead_bytes", overhead_bytes, allow_zero=True)
    if sp_mode is not None and sp_mode not in SP_MODES:
        raise ValueError(f"unknown sequence parallelism mode {sp_mode!r}; valid: {list(SP_MODES)}")
    if sp > 1 and sp_mode not in OWN_AXIS_SP_MODES:
        raise ValueError(
            f"sp={sp} needs a sequence mode with an own axis: {list(OWN_AXIS_SP_MODES)}"
        )
    if sp_mode in SHARED_SP_MODES and tp < 2:
        raise ValueError(
            f"{sp_mode} sequence parallelism splits over the tensor group: it needs tp > 1"
        )
    _refuse_impossible(Layout(dp, tp, pp, sp, sp_mode, micro_batch, zero_stage), shape)
    zero_group = dp * sp if sp_mode in OWN_AXIS_SP_MODES else dp  # Colossal-AI's mixed_dp_group
    weights, grads, optim = model_states(params, precision, zero_stage, zero_group, tp, pp)
    cpu = 0.0
    if offload:
        cpu, optim = optim, 0.0

    acts = 0.0
    if shape is not None:
        seq = shape.seq_len if seq_len is None else seq_len
        if seq is None or shape.hidden is None:
            raise ValueError(
                "activations need shape.hidden and a sequence length (seq_len or shape.seq_len)"
            )
        check_positive("micro_batch", micro_batch)
        check_degree("layers", shape.layers)
        heads_split = tp * (sp if sp_mode == "all_to_all" else 1)
        if shape.heads % heads_split:
            raise ValueError(
                f"{shape.heads} attention heads are not divisible by the "
                f"{heads_split}-way head split "
                f"(tp={tp}{f', sp={sp}' if heads_split != tp else ''})"
            )
        if shape.layers % pp:
            raise ValueError(f"{shape.layers} layers do not split evenly into pp={pp} stages")
        if microbatches is not None:
            check_degree("microbatches", microbatches)
        in_flight = pp if microbatches is None else min(microbatches, pp)
        per_layer = layer_activations(
            seq,
            micro_batch,
            shape.hidden,
            shape.heads,
            tp,
            sequence_parallel=sp_mode in SHARED_SP_MODES,
            recompute=recompute,
            flash=flash,
            sp=sp if sp_mode in OWN_AXIS_SP_MODES else 1,
        )
        acts = per_layer * (shape.layers // pp) * in_flight
    elif seq_len is not None:
        check_positive("seq_len", seq_len)
    return MemoryBreakdown(weights, grads, optim, acts, float(overhead_bytes), cpu)


def seed_estimate_memory(param_billions, tp, pp):
    """The seed's ``estimate_memory``, unchanged: 16 B/param × Ψ / (T·P), in GB (1e9).

    Its comment reads "fp32 master 4 + Adam states 8 + fp16 copy 4"; the ZeRO paper's
    mixed-precision split is 2 + 2 + 12 — the same 16. See :func:`seed_omissions` for what the
    number leaves out.
    """
    bytes_per_param = 16  # fp32主权重4 + Adam状态8 + fp16副本4
    per_gpu_bytes = param_billions * 1e9 * bytes_per_param / (tp * pp)
    return per_gpu_bytes / 1e9


def seed_omissions(
    param_billions: float,
    tp: int,
    pp: int,
    dp: int = 1,
    zero_stage: int = 0,
    shape: ModelShape | None = None,
    micro_batch: int = 1,
    overhead_bytes: float = 0.0,
) -> str:
    """Text comparing the seed's number with :func:`estimate`, naming what the seed leaves out.

    The seed divides all 16 B/param by T·P and stops: it ignores (1) data-parallel sharding — with
    ZeRO the optimizer states (stage ≥ 1), gradients (≥ 2) and weights (3) shrink by N_d; (2)
    activations, which grow with micro-batch × sequence and often dominate (Korthikanti Table 2);
    (3) the fixed CUDA context / NCCL buffers; (4) uneven pipeline stages (embeddings and head on
    the end stages) and the 1F1B in-flight micro-batches on the first stage.
    """
    seed = seed_estimate_memory(param_billions, tp, pp)
    est = estimate(
        param_billions * 1e9,
        dp=dp,
        tp=tp,
        pp=pp,
        zero_stage=zero_stage,
        shape=shape,
        micro_batch=micro_batch,
        overhead_bytes=overhead_bytes,
    )
    states = est.weights + est.gradients + est.optimizer
    lines = [
        f"seed estimate_memory({param_billions}, tp={tp}, pp={pp}) = {seed:.1f} GB: "
        "16 B/param / (T·P), nothing else",
        f"model states with ZeRO-{zero_stage} over N_d={dp}: {states / GB:.1f} GB "
        f"(the seed ignores data-parallel sharding)",
        f"activations{'' if shape else ' (no model shape given)'}: {est.activations / GB:.1f} GB "
        f"(the seed ignores activations)",
        f"fixed overhead: {est.overhead / GB:.1f} GB "
        "(the seed ignores CUDA context and NCCL buffers; measure it)",
        f"total per rank: {est.total / GB:.1f} GB",
    ]
    return "\n".join(lines)
