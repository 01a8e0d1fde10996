"""Chapter 7's memory model: a Llama- or GPT-style decoder trained under Colossal-AI, per rank.

The one memory model of the book: Chapter 7 checks it against ``torch.cuda.max_memory_allocated``
(records under ``results/*/ch07_memory.json``), Chapter 3's planner ranks layouts with it
(:mod:`helpers.cost.memory_plan`). Where :mod:`helpers.cost.memory` gives the textbook estimate
(ZeRO §3 model states, Korthikanti Table 2 activations), this module predicts what the allocator
reports for the layouts of :mod:`helpers.parallel.train_layout`. Nothing here is fitted to a
measurement; each term is counted from the code that allocates it (transformers 4.51, Colossal-AI
0.5.0 plugins):

* **Activations** and **loss**: :mod:`helpers.cost.layer_bytes` (what autograd saves per layer,
  Llama- and GPT-style; HF's loss keeps the fp32 log-softmax, 4Nv, and its backward holds 12Nv).
* **Parameters per rank** (:func:`rank_params`): the layer matrices and column-parallel biases
  split by t, norms and row-parallel biases replicated; the token embedding (vocabulary-parallel)
  and learned positions on the first stage, the head (or, tied, its copy when pp > 1) and the
  final norm on the last.
* **Model states** per plugin (see :func:`model_states`): TorchDDP keeps a second fp32 gradient
  copy in its buckets; HybridParallel's mixed precision keeps fp32 masters beside the bf16 weights
  and, whenever there is no pipeline, torch DDP buckets in bf16 — also with tensor parallelism
  over all GPUs, where DDP wraps a data-parallel group of one; with ZeRO 1/2 it runs the
  LowLevelZero optimizer instead; LowLevelZero keeps bf16 weights, fp32 master *shards* and
  HybridAdam states of the shards; Gemini shards weights, masters and states (ZeRO-3), in the
  chunks of :mod:`helpers.cost.chunks`. An own sequence axis (``all_to_all``) shards over
  dp × sp (``HybridParallelPlugin.mixed_dp_group``), which is ``TrainLayout.dp`` there.
* **Activation offload** (a :class:`helpers.cost.memory_plan.PlanLayout` with
  ``offload_activations``): two layers' activations stay on the GPU instead of L, and
  ``offloaded`` counts the bytes copied to the host each step (:mod:`helpers.train.offload`).
* **Phases**: the peak is the largest of (1) the end of forward at the loss, (2) the start of
  backward (12Nv of loss gradients on top of all activations), (3) the end of backward (all
  gradients, the last activations gone) and (4) the optimizer step (fp32 gradient copies). 1F1B
  pipelines keep min(m, P) − stage micro-batches in flight on each stage.
"""

from __future__ import annotations

from helpers.parallel.train_layout import TrainLayout
from helpers.cost.chunks import gemini_chunks, parameter_sizes
from helpers.cost.layer_bytes import (
    head_activation_bytes,
    layer_activation_bytes,
    layer_activation_parts,
    loss_bytes,
)

__all__ = [  # the activation counts live in layer_bytes; they are read from here too
    "head_activation_bytes",
    "layer_activation_bytes",
    "layer_activation_parts",
    "loss_bytes",
    "model_states",
    "predict",
    "rank_params",
]

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# torch's cuBLAS workspace on sm90 (CublasHandlePool.cpp: 4096 KiB x 8 on Hopper), one per thread
# that runs GEMMs: the training loop and autograd's backward thread
CUBLAS_WORKSPACES = 2 * 32 * 2**20
# layers of activations on the GPU under activation offload (Chapter 7, "Offloading activations")
OFFLOAD_RESIDENT_LAYERS = 2


def layer_params(shape) -> tuple[int, int]:
    """(parameters split by tensor parallelism, replicated parameters) of one decoder layer: the
    column-parallel biases (q, k, v, fc1) split with their matrices; norms and the row-parallel
    biases (o, fc2) replicated."""
    rest = shape.layer_norms_and_biases
    if not shape.biases:
        return shape.layer_matrices, rest
    column = shape.hidden + 2 * shape.kv_width + (2 if shape.mlp == "swiglu" else 1) * shape.ffn
    return shape.layer_matrices + column, rest - column


def rank_params(layout: TrainLayout, stage: int = 0) -> float:
    """Parameters held by one rank of pipeline ``stage`` (before any ZeRO sharding)."""
    shape, t = layout.shape, layout.tp
    split, replicated = layer_params(shape)
    total = shape.layers // layout.pp * (split / t + replicated)
    vh = shape.vocab * shape.hidden / t
    if stage == 0:
        total += vh  # vocabulary-parallel token embedding
        total += shape.seq_len * shape.hidden if shape.positions == "learned" else 0
    if stage == layout.pp - 1:
        head = 0.0 if shape.tied and layout.pp == 1 else vh  # a tied head shares the embedding
        total += head + shape.hidden * (2 if shape.biases else 1)  # and the final norm
    return total


def model_states(layout: TrainLayout, stage: int = 0) -> dict:
    """Persistent bytes on the GPU at the start of a step (after warm-up), by component; ``grads``:
    gradient bytes at the end of backward; ``step``: non-persistent bytes during the optimizer step
    (the gradients still held plus the copies the step makes)."""
    psi, n, w = rank_params(layout, stage), layout.dp, BYTES[layout.precision]
    plugin, mixed = layout.plugin, layout.precision != "fp32"
    out = {
        "weights": w * psi,
        "master": 0.0,
        "optimizer": 8 * psi,
        "buckets": 0.0,
        "grads": w * psi,
        "workspace": CUBLAS_WORKSPACES,
    }
    out["step"] = out["grads"]
    if (
        plugin == "ddp"
    ):  # torch DDP, gradient_as_bucket_view=False: buckets are a second gradient copy,
        # at world size 1 too (its Reducer is built whatever the world size: one H200 measured the
        # copy, results/1xNVIDIA-H200/ch07_memory.json, "DDP fp32")
        out["buckets"] = w * psi
    elif plugin == "hybrid" and layout.zero_stage == 0:  # HybridParallelAMPOptimizer
        if mixed:
            out["master"] = 4 * psi  # p.detach().float()
            out["step"] = 4 * psi  # p.grad = working.grad.float(); working.grad = None, one by one
        # HybridParallelPlugin.configure: use_ddp = (dp > 1 and pp == 1 and zero == 0) or
        # (dp == 1 and pp == 1): without a pipeline the module is wrapped in torch DDP even over a
        # group of one rank (tp=2 on 2 GPUs), and its buckets are a gradient copy
        # (gradient_as_bucket_view=False)
        if layout.pp == 1:
            out["buckets"] = w * psi
    elif plugin in ("zero", "hybrid"):  # LowLevelZeroOptimizer (HybridZeroOptimizer with tp/pp)
        if plugin == "hybrid" and layout.pp == 1 and n == 1:  # use_ddp's (dp == 1 and pp == 1)
            out["buckets"] = w * psi
        shard = 1.0 / n
        out["master"] = 4 * psi * shard  # master_weights=True: a cloned fp32 shard, in fp32 too
        out["optimizer"] = 8 * psi * shard
        if layout.zero_stage == 2:  # reduce-scattered: only the own shard is kept
            out["grads"] = w * psi * shard
        copies = (
            4 * psi * shard if mixed else 0.0
        )  # grad.to(fp32) of the own shard, held through step
        # _compute_grad_norm runs even without clipping: grad.double() of each shard, one at a time
        norm = 8 * max(parameter_sizes(layout.shape)) / layout.tp * shard
        out["step"] = out["grads"] + copies + norm
        if layout.offload:  # masters and Adam on the CPU; the fp32 copies go there one by one
            out["master"] = out["optimizer"] = 0.0
            out["step"] = out["grads"] + norm
    elif (
        plugin == "gemini"
    ):  # chunks: bf16 and fp32 chunk shards, Adam on the shards' real elements
        chunk, count = gemini_chunks(layout.shape, n)
        padded = chunk * count  # no chunk is trimmed when it is closed
        # at the peak the lm_head's chunk is still gathered: the loss touches no parameter, so no
        # pre-op hook has released it (static placement releases chunks only at the next op)
        out["weights"] = w * padded / n + w * chunk * (1 - 1 / n)
        if (
            layout.placement == "auto"
        ):  # AutoPlacementPolicy.evict_tensors releases a chunk only when
            out["weights"] = (
                w * padded
            )  # CUDA memory runs short: on an H200 every chunk stays gathered
        out["grads"] = out["step"] = (
            0.0  # gradients are copied into the bf16 chunk (reuse_fp16_chunk)
        )
        out["master"] = 4 * padded / n
        out["optimizer"] = 8 * psi / n
        if (
            layout.offload or layout.placement == "auto"
        ):  # auto with gpu_margin_mem_ratio=0: states on CPU
            out["master"] = out["optimizer"] = 0.0
    return out


def predict(layout: TrainLayout, rank: int = 0, states_of=model_states) -> dict:
    """Predicted per-rank bytes: components, the four phases and ``peak`` (their maximum).

    ``states_of(layout, stage)`` gives the model states (default :func:`model_states`, the
    Colossal-AI plugins; :func:`helpers.cost.memory_plan.megatron_states` for Megatron-LM's
    distributed optimizer)."""
    shape, e = layout.shape, BYTES[layout.precision]
    sp_mode = getattr(layout, "sp_mode", None)  # a PlanLayout (helpers.cost.memory_plan)
    own = getattr(layout, "sp", 1) if sp_mode == "all_to_all" else 1  # an own sequence axis
    stage = (rank // (layout.tp * own)) % layout.pp  # mesh order (dp, pp, tp, sp): sp fastest
    tokens = layout.micro_batch * layout.seq / own
    states = states_of(layout, stage)
    persistent = (
        states["weights"]
        + states["master"]
        + states["optimizer"]
        + states["buckets"]
        + states["workspace"]
    )
    layers = shape.layers // layout.pp
    chunks = getattr(layout, "chunks", 1)  # a PlanLayout's interleaved model chunks
    in_flight = min(layout.microbatches, layout.pp) - stage if layout.pp > 1 else 1
    boundaries = in_flight
    if layout.pp > 1 and chunks > 1:
        # interleaved 1F1B: 2(P - stage - 1) + (v - 1)·P chunk micro-batches of warm-up, then one
        # more (colossalai/pipeline/schedule/interleaved_pp.py, run_forward_backward), each chunk
        # holding 1/v of the stage's layers; on the first stage P + (P - 1)/v micro-batches' worth
        boundaries = min(
            2 * (layout.pp - stage - 1) + (chunks - 1) * layout.pp + 1,
            layout.microbatches * chunks,
        )
        in_flight = boundaries / chunks
    per_layer = layer_activation_bytes(
        shape, tokens, layout.seq, e, tp=layout.tp, attn=layout.attn, cuda=True, sp_mode=sp_mode
    )
    kept_per_layer = e * tokens * shape.hidden if layout.recompute else per_layer
    activations = in_flight * layers * kept_per_layer
    offloaded = 0.0
    if getattr(layout, "offload_activations", False):  # a PlanLayout's (helpers.train.offload)
        # on the GPU: the last layer (kept) and the one being copied out, later the one computing
        # and the one prefetched; the host holds the other L - 1 layers' (tensors < 1 MiB left out)
        activations = min(layers, OFFLOAD_RESIDENT_LAYERS) * per_layer
        offloaded = (layers - 1) * per_layer
    if layout.pp > 1:
        activations += boundaries * e * tokens * shape.hidden  # each chunk's boundary tensor
    last = stage == layout.pp - 1
    loss = loss_bytes(layout, tokens, e) if last else {"kept": 0.0, "forward": 0.0, "backward": 0.0}
    head = head_activation_bytes(shape, tokens, e) if last else 0.0
    # with recomputation the first layer is recomputed before the embedding's gradient exists
    embedding_grad = shape.vocab * shape.hidden / layout.tp * e if stage == 0 else 0.0
    end = (
        max(states["grads"], states["grads"] - embedding_grad + per_layer)
        if layout.recompute
        else states["grads"]
    )
    # From the first micro-batch's backward on, the gradients exist and accumulate while later
    # micro-batches build their activations: under 1F1B, and just as much under plain gradient
    # accumulation (P = 1, m > 1). ``grads`` is what a stage keeps between micro-batches: the whole
    # gradient of the rank's parameters up to ZeRO-1, the own shard under ZeRO-2, none for Gemini.
    held = states["grads"] if layout.microbatches > 1 else 0.0
    phases = {
        "forward": persistent + held + activations + head + loss["forward"],
        "backward_start": persistent + held + activations + head + loss["backward"],
        "backward_end": persistent + end,
        "step": persistent + states["step"],
    }
    peak_phase = max(phases, key=phases.get)
    breakdown = {
        "weights": states["weights"],
        "fp32 master": states["master"],
        "Adam m, v": states["optimizer"],
        "grads, buckets": states["buckets"],
        "activations": 0.0,
        "logits, loss": 0.0,
        "cuBLAS workspaces": states["workspace"],
    }
    if peak_phase in ("forward", "backward_start"):
        breakdown["grads, buckets"] += held
        breakdown["activations"] = activations + head
        breakdown["logits, loss"] = loss["forward" if peak_phase == "forward" else "backward"]
    else:
        breakdown["grads, buckets"] += phases[peak_phase] - persistent
    return {
        "rank": rank,
        "stage": stage,
        "params": rank_params(layout, stage),
        "states": states,
        "persistent": persistent,
        "activations": activations,
        "offloaded": offloaded,
        "per_layer": per_layer,
        "head": head,
        "loss": loss,
        "phases": phases,
        "peak_phase": peak_phase,
        "peak": phases[peak_phase],
        "breakdown": breakdown,
    }
