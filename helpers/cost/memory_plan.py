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

from helpers.config.layout import TrainLayout
from helpers.config.shape import ModelShape
from helpers.cost.memory_llama import BYTES, CUBLAS_WORKSPACES, predict, rank_params
from helpers.parallel.layouts import Layout, validate

GIB = 2**30
OUTSIDE_ALLOCATOR_GIB = 2.5  # the largest "device used - reserved" recorded, 2.40 GiB, rounded up


@dataclass(frozen=True)
class PlanLayout(TrainLayout):
    """A :class:`helpers.config.layout.TrainLayout` with Colossal-AI's sequence parallelism:
    ``sp_mode`` split_gather (S = T, no axis of its own) or all_to_all over an own axis of ``sp``
    ranks (``world`` counts it, so ``dp`` is the dp × sp group ZeRO shards over)."""

    sp: int = 1
    sp_mode: str | None = None


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


def plan_layout(
    model: ModelShape,
    layout: Layout,
    global_batch: int,
    recompute: bool = False,
    flash: bool = True,
    precision: str = "bf16",
) -> PlanLayout:
    """The memory model's layout for a planner layout, after every rule of
    :func:`helpers.parallel.layouts.violations` (a ValueError names the ones it breaks)."""
    validate(layout, model, global_batch)
    m = global_batch // (layout.dp * layout.microbatch)
    return PlanLayout(
        name=str(layout),
        plugin="hybrid",
        precision=precision,
        zero_stage=layout.zero_stage,
        tp=layout.tp,
        pp=layout.pp,
        microbatches=m if layout.pp > 1 else 1,
        micro_batch=layout.microbatch,
        seq=model.seq_len,
        recompute=recompute,
        attn="sdpa" if flash else "eager",
        world=layout.world_size,
        shape=model,
        sp=layout.sp,
        sp_mode=layout.sp_mode,
    )


def peak(
    model: ModelShape,
    layout: Layout,
    global_batch: int,
    recompute: bool = False,
    flash: bool = True,
    outside_gib: float = OUTSIDE_ALLOCATOR_GIB,
    states_of=None,
) -> dict:
    """The busiest rank's predicted ``max_memory_allocated`` (``allocated``), the bytes outside
    the allocator and their sum (``total``), with the stage and the model's full prediction. The
    first stage keeps the most micro-batches in flight, the last the head and the loss; the
    stages between hold less than the first."""
    train = plan_layout(model, layout, global_batch, recompute, flash)
    own = layout.sp if layout.sp_mode == "all_to_all" else 1
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
