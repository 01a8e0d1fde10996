"""The planner's view of Chapter 7's memory model: one layout of G GPUs, its busiest rank's bytes.

Used by Chapter 3 (strategy): :mod:`helpers.cost.step_time` and :mod:`helpers.cost.planner` drop
the layouts that do not fit with it, and the calculator of :mod:`helpers.notebook.widgets` shows
it. There is no second model here: :func:`peak` turns a checked
:class:`helpers.parallel.layouts.Layout` into the layout of
:func:`helpers.cost.memory_llama.predict` (``HybridParallelPlugin``, bf16 with fp32 masters,
ZeRO 0-2) and asks that model for its first and last pipeline stage, adding what the allocator
never sees:

* **Outside the allocator**: the CUDA context, NCCL's buffers and the kernels are not in
  ``max_memory_allocated``; Chapter 7 measured 1.3-2.4 GiB per H200 (device memory in use minus
  memory reserved, ``results/*/ch07_memory.json``); :data:`OUTSIDE_ALLOCATOR_GIB` is the largest,
  rounded up to 0.1 GiB. The allocator's cache (reserved minus allocated, 0.5-2.0 GiB at the peak
  in Chapter 7) is not added: a plan within a gigabyte or two of the limit is a close call.
* **Megatron-LM's distributed optimizer** (:func:`megatron_bytes_per_param`,
  :func:`megatron_states`): Megatron-LM's "Distributed Optimizer" guide
  (``docs/source/api-guide/dist_optimizer.md``) gives the bytes per parameter over d
  data-parallel ranks, 20 | 4 + 16/d (fp16 parameters and gradients), 18 | 6 + 12/d (bf16
  parameters, fp32 main gradients), 16 | 8 + 8/d (fp32): the parameters and a full main-gradient
  buffer stay on every rank, the fp32 main parameters (unless the parameters are fp32 already),
  fp32 copies of 16-bit main gradients and Adam's two moments are sharded. That is ZeRO-1's
  memory (the gradients are whole), with ZeRO-2's reduce-scatter and all-gather traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.parallel.train_layout import TrainLayout
from helpers.models.shape import ModelShape
from helpers.cost.memory_llama import BYTES, CUBLAS_WORKSPACES, layer_params, predict, rank_params
from helpers.parallel.layouts import Layout, validate

GIB = 2**30
OUTSIDE_ALLOCATOR_GIB = 2.5  # the largest "device used - reserved" recorded, 2.40 GiB, rounded up


@dataclass(frozen=True)
class PlanLayout(TrainLayout):
    """A :class:`helpers.parallel.train_layout.TrainLayout` with Colossal-AI's sequence parallelism:
    ``sp_mode`` split_gather (S = T, no axis of its own) or all_to_all over an own axis of ``sp``
    ranks (``world`` counts it, so ``dp`` is the dp × sp group ZeRO shards over)."""

    sp: int = 1
    sp_mode: str | None = None
    chunks: int = 1
    reshard_after_forward: bool = True
    shard_degree: int | None = None
    offload_activations: bool = False  # saved activations to host memory (helpers.train.offload)

    def __post_init__(self):
        super().__post_init__()
        if self.offload_activations and (self.recompute or self.pp > 1):
            raise ValueError("activation offload is modelled without recomputation and pipelines")


def megatron_bytes_per_param(
    d: int, param_dtype: str = "bf16", grad_dtype: str = "fp32", distributed: bool = True
) -> float:
    """Bytes per parameter of Megatron-LM's optimizer over ``d`` data-parallel ranks (its
    guide's table: 18 without the distributed optimizer, 6 + 12/d with it, for bf16 parameters
    with fp32 main gradients)."""
    p, g = BYTES[param_dtype], BYTES[grad_dtype]
    sharded = (4 if p != 4 else 0) + (4 if g != 4 else 0) + 8  # main params, main grads, m, v
    return p + g + sharded / (d if distributed else 1)


def megatron_states(
    layout: TrainLayout, stage: int = 0, grad_dtype: str = "fp32", distributed: bool = True
) -> dict:
    """Model states of one rank under Megatron-LM's optimizer, in the keys of
    :func:`helpers.cost.memory_llama.model_states` (``predict(..., states_of=megatron_states)``):
    the main-gradient buffer is allocated up front and whole (``buckets``); backward adds
    nothing to it, as the gradients are copied into it as soon as they are computed."""
    psi, d = rank_params(layout, stage), layout.dp if distributed else 1
    p, g = BYTES[layout.precision], BYTES[grad_dtype]
    return {
        "weights": p * psi,
        "master": (4 if p != 4 else 0) * psi / d,
        "optimizer": ((4 if g != 4 else 0) + 8) * psi / d,
        "buckets": g * psi,
        "grads": 0.0,
        "step": 0.0,
        "workspace": CUBLAS_WORKSPACES,
    }


def fsdp_states(layout: PlanLayout, stage: int = 0) -> dict:
    """Model states of one rank under ZeRO-3 as PyTorch's FSDP2 keeps them (``fully_shard`` with
    ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, torchtitan's default): the
    sharded parameters are the fp32 masters, Adam's m and v and the fp32 gradients are sharded
    over the shard group (all of D, or ``shard_degree`` ranks under HSDP); the bf16 weights exist
    only gathered. With ``reshard_after_forward`` two layers are gathered at a time (the one that
    runs and the one prefetched; Zhao et al. 2023, PyTorch FSDP, §3.3); without it every layer
    gathered in the forward stays until its backward, so at the peak the whole stage is."""
    psi, n = rank_params(layout, stage), layout.shard_degree or layout.dp
    e = BYTES[layout.precision]
    split, replicated = layer_params(layout.shape)
    layer = split / layout.tp + replicated
    gathered = 2 * e * layer if layout.reshard_after_forward else e * psi
    return {
        "weights": gathered,
        "master": 4 * psi / n,
        "optimizer": 8 * psi / n,
        "buckets": 0.0,
        "grads": 4 * psi / n,
        "step": 4 * psi / n,
        "workspace": CUBLAS_WORKSPACES,
    }


def plan_layout(
    model: ModelShape,
    layout: Layout,
    global_batch: int,
    recompute: bool | str = False,
    flash: bool = True,
    precision: str = "bf16",
    check: bool = True,
) -> PlanLayout:
    """The memory model's layout for a planner layout, after every rule of
    :func:`helpers.parallel.layouts.violations` (a ValueError names the ones it breaks;
    ``check=False`` skips them, for a published run made with another framework).

    ``recompute``: "none" (or False), "selective" (attention's s × s scores recomputed, not
    stored: the memory of flash attention, Korthikanti et al. 2022 §4.3) or "full" (or True: only
    each layer's input kept)."""
    if check:
        validate(layout, model, global_batch)
    mode = recompute_mode(recompute)
    m = global_batch // (layout.dp * layout.microbatch)
    return PlanLayout(
        name=str(layout),
        plugin="hybrid",
        precision=precision,
        zero_stage=layout.zero_stage,
        tp=layout.tp,
        pp=layout.pp,
        microbatches=m,
        micro_batch=layout.microbatch,
        seq=model.seq_len,
        recompute=mode == "full",
        attn="sdpa" if flash or mode == "selective" else "eager",
        world=layout.world_size,
        shape=model,
        sp=layout.sp,
        sp_mode=layout.sp_mode,
        chunks=layout.chunks,
        reshard_after_forward=layout.reshard_after_forward,
        shard_degree=layout.shard_degree,
    )


RECOMPUTE_MODES = ("none", "selective", "full")


def recompute_mode(recompute: bool | str) -> str:
    """The recomputation word of a bool (False: "none", True: "full") or a word."""
    if isinstance(recompute, bool):
        return "full" if recompute else "none"
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {RECOMPUTE_MODES} or a bool, not {recompute!r}")
    return recompute


def peak(
    model: ModelShape,
    layout: Layout,
    global_batch: int,
    recompute: bool | str = False,
    flash: bool = True,
    outside_gib: float = OUTSIDE_ALLOCATOR_GIB,
    states_of=None,
    check: bool = True,
    precision: str = "bf16",
) -> dict:
    """The busiest rank's predicted ``max_memory_allocated`` (``allocated``), the bytes outside
    the allocator and their sum (``total``), with the stage and the model's full prediction. The
    first stage keeps the most micro-batches in flight, the last the head and the loss; the
    stages between hold less than the first. ``precision``: "bf16" or "fp16" (mixed, with fp32
    master weights) or "fp32"."""
    train = plan_layout(model, layout, global_batch, recompute, flash, precision, check=check)
    own = layout.sp if layout.sp_mode == "all_to_all" else 1
    if states_of is None and layout.zero_stage == 3:
        states_of = fsdp_states
    kw = {} if states_of is None else {"states_of": states_of}
    stages = sorted({0, layout.pp - 1})
    worst = max(
        (predict(train, stage * layout.tp * own, **kw) for stage in stages),
        key=lambda p: p["peak"],
    )
    outside = outside_gib * GIB
    return {
        "allocated": worst["peak"],
        "outside": outside,
        "total": worst["peak"] + outside,
        "stage": worst["stage"],
        "prediction": worst,
    }


# [start: offload-time]
def offload_seconds(
    offloaded_bytes: float,
    out_bytes_per_s: float,
    in_bytes_per_s: float,
    step_s: float,
    forward_share: float = 1 / 3,
) -> dict:
    """The time activation offload adds to a step that takes ``step_s`` without it.

    The copies out (device to host, ``out_bytes_per_s``) run during the forward, the copies back
    during the backward, each on its own stream beside the compute. Assumed: each pass's copies
    overlap its compute fully and do not slow it, and the forward is ``forward_share`` of the step
    (a third: 2 of the 6 FLOPs per parameter and token). What a pass's copies take beyond its
    compute is added: max(0, B/β_out − t_f) + max(0, B/β_in − t_b)."""
    for name, value in (("out_bytes_per_s", out_bytes_per_s), ("in_bytes_per_s", in_bytes_per_s)):
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    if offloaded_bytes < 0 or step_s <= 0 or not 0 < forward_share < 1:
        raise ValueError("offloaded_bytes ≥ 0, step_s > 0 and 0 < forward_share < 1")
    forward, backward = forward_share * step_s, (1 - forward_share) * step_s
    out_s, in_s = offloaded_bytes / out_bytes_per_s, offloaded_bytes / in_bytes_per_s
    exposed = max(0.0, out_s - forward) + max(0.0, in_s - backward)
    return {"out_s": out_s, "in_s": in_s, "exposed_s": exposed, "step_s": step_s + exposed}


# [end: offload-time]
