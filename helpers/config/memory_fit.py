"""Does a config fit its GPUs? Chapter 7's memory model asked before any rank starts (Chapter 4,
"What the loader guarantees").

There is no second model here: :func:`layout_of` writes the config as the layout of
:func:`helpers.cost.memory_llama.predict` (the plugin the config gets, its precision, ZeRO stage,
degrees, micro-batches and the model shape), :func:`predict_fit` asks that model for the first
and the last pipeline stage, as :func:`helpers.cost.memory_plan.peak` does, and adds what the
allocator never sees (:data:`helpers.cost.memory_plan.OUTSIDE_ALLOCATOR_GIB`). With
``hardware.gpu_memory_gib`` set and the world size known, :func:`check_fits` refuses a layout
whose busiest GPU is predicted above it, and names the ZeRO stage or tensor degree that fits,
found by trying them through the same model (:func:`fitting_changes`).

Where the model cannot know, it says so (:attr:`Fit.line`) and refuses nothing: no GPU memory
given, ``data: auto`` without a world size, ``ring``/``ring_attn`` sequence parallelism or
GeminiPlugin with tensor parallelism (Chapter 7 measured neither). ``TorchDDPPlugin`` in fp16 is
torch AMP, which keeps fp32 weights, gradients, DDP buckets and Adam states (the model's fp32 DDP
states) but activations partly in fp16: its prediction is the activation-free floor (the end of
backward and the optimizer step), a lower bound.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from helpers.parallel.errors import ConfigError, ConfigWarning, warn
from helpers.config.rules import plugin_word
from helpers.cost.memory_llama import predict
from helpers.parallel.factors import divisors
from helpers.parallel.vocab import CLASS_NAMES

GIB = 2**30
MODEL = "Chapter 7's memory model (helpers.cost.memory_llama.predict)"
_PLUGINS = {"torch_ddp": "ddp", "low_level_zero": "zero", "gemini": "gemini"}  # else "hybrid"


@dataclass(frozen=True)
class Fit:
    """A config's predicted peak per GPU (GiB, outside the allocator included), the GPU's memory,
    and why there is no verdict (``unknown``) when there is none."""

    peak_gib: float | None = None
    limit_gib: float | None = None
    floor: bool = False  # the peak is a lower bound (torch AMP)
    unknown: str = ""

    @property
    def fits(self) -> bool | None:
        """True or False, or None when the model cannot know."""
        if self.peak_gib is None or self.limit_gib is None:
            return None
        if self.floor and self.peak_gib <= self.limit_gib:
            return None  # the floor fits; the activations might not
        return self.peak_gib <= self.limit_gib

    @property
    def line(self) -> str:
        """The verdict in one sentence."""
        peak = (
            f"{'at least ' if self.floor else ''}{self.peak_gib:.1f} GiB per GPU"
            if self.peak_gib is not None
            else ""
        )
        if self.peak_gib is None:
            return f"cannot know whether it fits: {self.unknown}"
        if self.limit_gib is None:
            return f"{MODEL} predicts {peak}; cannot know whether it fits: {self.unknown}"
        verdict = {True: "fits", False: "does not fit", None: "cannot know whether it fits"}
        return (
            f"{MODEL} predicts {peak} for GPUs of {self.limit_gib:g} GiB: {verdict[self.fits]}"
            + (" (torch AMP's activations are not counted)" if self.fits is None else "")
        )


def layout_of(cfg, procs: int | None = None):
    """(the memory model's layout of ``cfg``, whether its peak is a floor), or (None, why not)."""
    from helpers.cost.memory_plan import PlanLayout  # torch (the rank mesh): a config loads without

    p, t = cfg.parallelism, cfg.train
    if cfg.data_degree is None and procs is None:
        return None, "the world size is unknown (data: auto): pass world_size"
    cfg = cfg if cfg.data_degree is not None else cfg.resolve(procs)
    word = plugin_word(cfg)
    if p.sequence_mode in ("ring", "ring_attn"):
        return None, f"{MODEL} does not cover {p.sequence_mode} sequence parallelism"
    if word == "gemini" and p.tensor > 1:
        return None, f"{MODEL} does not cover GeminiPlugin with tensor parallelism"
    plugin, precision = _PLUGINS.get(word, "hybrid"), t.precision
    floor = word == "torch_ddp" and precision == "fp16"  # torch AMP: fp32 states
    own = p.sequence if p.sequence_mode == "all_to_all" else 1
    layout = PlanLayout(
        name=f"{word} {precision}",
        plugin=plugin,
        precision="fp32" if plugin == "ddp" else precision,
        zero_stage=p.zero_stage,
        tp=p.tensor,
        pp=p.pipeline,
        microbatches=cfg.num_microbatches,
        micro_batch=cfg.micro_batch,
        seq=cfg.model.seq_len,
        world=cfg.world_size(),
        shape=cfg.model.shape(),
        sp=own,
        sp_mode=p.sequence_mode,
    )
    return layout, floor


def predict_fit(cfg, procs: int | None = None) -> Fit:
    """The busiest GPU's predicted bytes for ``cfg`` (see the module notes)."""
    from helpers.cost.memory_plan import OUTSIDE_ALLOCATOR_GIB  # torch (the rank mesh), as above

    limit = cfg.hardware.gpu_memory_gib
    layout, floor = layout_of(cfg, procs)
    if layout is None:
        return Fit(None, limit, unknown=floor)
    own = layout.sp if layout.sp_mode == "all_to_all" else 1
    ranks = [p * layout.tp * own for p in sorted({0, layout.pp - 1})]
    worst = max((predict(layout, r) for r in ranks), key=lambda x: x["peak"])
    peak = max(worst["phases"][k] for k in ("backward_end", "step")) if floor else worst["peak"]
    unknown = "" if limit else "no hardware.gpu_memory_gib given"
    return Fit(peak / GIB + OUTSIDE_ALLOCATOR_GIB, limit, floor, unknown)


def _first(cfg, candidates, limit_gib: float) -> tuple[str, float] | None:
    """The first (zero stage, tensor degree) of ``candidates`` that the rules allow and that fits
    ``limit_gib``: (the change as YAML, its peak in GiB), or None."""
    p, world = cfg.parallelism, cfg.world_size()
    for zero, tensor in candidates:
        data = world // (tensor * (p.model_parallel // p.tensor))
        change = {"zero_stage": zero, "tensor": tensor, "data": data}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConfigWarning)
            try:
                other = cfg.with_changes(
                    {"parallelism": change, "hardware": {"gpu_memory_gib": None}}
                )
            except ConfigError:
                continue  # a layout the rules refuse is no fix
        fit = predict_fit(other)
        if fit.peak_gib is not None and not fit.floor and fit.peak_gib <= limit_gib:
            words = [f"zero_stage: {zero}"] * (zero != p.zero_stage)
            words += [f"tensor: {tensor} (data: {data})"] * (tensor != p.tensor)
            return ", ".join(words), fit.peak_gib
    return None


def fitting_changes(cfg, limit_gib: float) -> list[tuple[str, float]]:
    """The first higher ZeRO stage and the smallest larger tensor degree that fit ``limit_gib``
    by the same model and pass the rules, or, when neither alone does, the first pair of both:
    [(the change as YAML, its peak in GiB)]."""
    p = cfg.parallelism
    stages = range(p.zero_stage + 1, 4)
    others = cfg.world_size() // (p.model_parallel // p.tensor)
    tensors = [d for d in divisors(others) if d > p.tensor]
    found = [
        f
        for f in (
            _first(cfg, [(z, p.tensor) for z in stages], limit_gib),
            _first(cfg, [(p.zero_stage, d) for d in tensors], limit_gib),
        )
        if f
    ]
    both = _first(cfg, [(z, d) for d in tensors for z in stages], limit_gib)
    return found or ([both] if both else [])


def check_fits(cfg) -> None:
    """Refuse ``cfg`` when its busiest GPU is predicted above ``hardware.gpu_memory_gib``; warn
    when the model cannot know (see the module notes)."""
    limit = cfg.hardware.gpu_memory_gib
    if limit is None or cfg.data_degree is None:
        return  # nothing to compare with, or checked again once resolve(procs) knows the world
    fit = predict_fit(cfg)
    if fit.fits is not False:
        if fit.fits is None:
            warn(f"hardware.gpu_memory_gib = {limit:g}: {fit.line}")
        return
    p, t = cfg.parallelism, cfg.train
    layout = (
        f"data {cfg.data_degree} × tensor {p.tensor} × pipeline {p.pipeline}"
        + (f" × sequence {p.sequence}" if p.sequence > 1 else "")
        + f", zero_stage {p.zero_stage}, {t.precision}"
    )
    plugin = CLASS_NAMES[plugin_word(cfg)]
    amp = (
        " or more (torch AMP keeps fp32 weights, gradients, DDP buckets and Adam states; "
        "activations not counted)"
        if fit.floor
        else ""
    )
    fixes, n = fitting_changes(cfg, limit), cfg.world_size()
    fix = (
        " or ".join(f"{words} fits ({gib:.1f} GiB)" for words, gib in fixes)
        if fixes
        else f"no ZeRO stage or tensor degree fits {n} GPU{'s' * (n > 1)} of {limit:g} GiB by "
        "this model: use more GPUs, or a smaller micro_batch_size or seq_len"
    )
    raise ConfigError(
        f"parallelism = {layout} ({plugin}): {MODEL} puts the busiest GPU at "
        f"{fit.peak_gib:.1f} GiB{amp}, above hardware.gpu_memory_gib = {limit:g}; {fix}",
        "parallelism",
        layout,
    )
