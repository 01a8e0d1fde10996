"""Chapter 7's measured-memory model: a Llama trained under one Colossal-AI plugin, per rank.

Where :mod:`helpers.cost.memory` gives the textbook estimate (ZeRO §3 model states, Korthikanti
Table 2 activations), this module predicts what ``torch.cuda.max_memory_allocated`` reports for
the layouts of :mod:`helpers.config.layout`. Nothing here is fitted to measurements; each term is
counted from the code that allocates it (transformers 4.51 Llama, Colossal-AI 0.5.0 plugins):

* **Activations** of one decoder layer, counted tensor by tensor from what autograd saves
  (checked exactly on the CPU with ``saved_tensors_hooks``,
  :func:`helpers.cost.census.count_saved_bytes`): with N = b·s tokens, e bytes per element of the
  compute dtype, h hidden, f SwiGLU width, a heads, each RMSNorm keeps its input in fp32 (4Nh),
  1/rms (4N), the normalised value and the weighted output (2·eNh); attention keeps q, k, v, the
  sdpa output and its log-sum-exp (3eNh + eNh + 4Na; with grouped-query attention k and v are
  still h wide, as transformers' ``repeat_kv`` copies them before the kernel), the o_proj input
  (eNh); the MLP keeps gate, silu(gate), up and their product (4eNf). Eager attention drops the
  sdpa output and log-sum-exp and keeps the softmax in fp32 and its 16-bit copy (4 + 2)·b·a·s²
  instead (Korthikanti's s² term). Tensor parallelism divides the attention and MLP parts by t,
  not the norms. Full recomputation (non-reentrant checkpoint per layer) keeps only each layer's
  input (eNh).
* **Loss**: HF's loss upcasts the e-byte logits to fp32 and keeps the fp32 log-softmax (4Nv); its
  backward holds that, the nll gradient and the log-softmax gradient at once: 12Nv, often the
  peak.
* **Model states** per plugin (see :func:`model_states`): TorchDDP keeps a second fp32 gradient
  copy in its buckets; HybridParallel's mixed precision keeps fp32 masters beside the bf16 weights
  and, whenever there is no pipeline, torch DDP buckets in bf16 — also with tensor parallelism
  over all GPUs, where DDP wraps a data-parallel group of one; LowLevelZero keeps bf16 weights,
  fp32 master *shards* and HybridAdam states of the shards; Gemini shards weights, masters and
  states (ZeRO-3), in the chunks of :mod:`helpers.cost.chunks`.
* **Phases**: the peak is the largest of (1) the end of forward at the loss, (2) the start of
  backward (12Nv of loss gradients on top of all activations), (3) the end of backward (all
  gradients, the last activations gone) and (4) the optimizer step (fp32 gradient copies). 1F1B
  pipelines keep min(m, P) − stage micro-batches in flight on each stage.
"""

from __future__ import annotations

from helpers.config.layout import TrainLayout
from helpers.config.shape import ModelShape
from helpers.cost.chunks import gemini_chunks, parameter_sizes

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# torch's cuBLAS workspace on sm90 (CublasHandlePool.cpp: 4096 KiB x 8 on Hopper), one per thread
# that runs GEMMs: the training loop and autograd's backward thread
CUBLAS_WORKSPACES = 2 * 32 * 2**20


def layer_params(shape: ModelShape) -> tuple[int, int]:
    """(parameters split by tensor parallelism, replicated norm parameters) of one decoder layer."""
    return shape.layer_matrices, 2 * shape.hidden


def rank_params(layout: TrainLayout, stage: int = 0) -> float:
    """Parameters held by one rank of pipeline ``stage`` (before any ZeRO sharding)."""
    shape, t = layout.shape, layout.tp
    split, norms = layer_params(shape)
    layers = shape.layers // layout.pp
    total = layers * (split / t + norms)
    if stage == 0:
        total += shape.vocab * shape.hidden / t  # embedding
    if stage == layout.pp - 1:
        total += shape.vocab * shape.hidden / t + shape.hidden  # lm_head, final norm
    return total


def layer_activation_parts(
    shape: ModelShape,
    tokens: int,
    seq: int,
    e: int,
    tp: int = 1,
    attn: str = "sdpa",
    cuda: bool = False,
) -> dict:
    """Bytes autograd saves for one HF Llama decoder layer, per rank, by part (module docstring).

    ``cuda``: on a GPU, fp32 ``sdpa`` runs the memory-efficient kernel, whose output is laid out
    (b, s, a, d) in memory, so HF's ``transpose(1, 2).contiguous()`` copies nothing and the o_proj
    input *is* the kernel output; bf16 runs flash attention, whose output is ``empty_like(q)``, laid
    out (b, a, s, d), so the copy happens (as on the CPU)."""
    n, h, f, a = tokens, shape.hidden, shape.ffn, shape.heads
    if attn == "sdpa":
        shared = cuda and e == 4
        # output and log-sum-exp of the fused kernel
        core = (0 if shared else e * n * h) + 4 * n * a
    else:
        copy = e if e != 4 else 0  # softmax(dtype=fp32).to(e-byte dtype): no copy in fp32
        core = (4 + copy) * (tokens // seq) * a * seq * seq  # the fp32 softmax and its e-byte copy
    return {
        "2 RMSNorms": 2 * ((4 + 2 * e) * n * h + 4 * n),  # fp32 input, 1/rms, normalised, weighted
        # repeat_kv expands GQA k, v first
        "q, k, v, o_proj input": (3 * e * n * h + e * n * h) / tp,
        "attention core": core / tp,
        "SwiGLU MLP": 4 * e * n * f / tp,  # gate, silu(gate), up, their product
    }


def layer_activation_bytes(
    shape: ModelShape,
    tokens: int,
    seq: int,
    e: int,
    tp: int = 1,
    attn: str = "sdpa",
    cuda: bool = False,
) -> float:
    """Bytes autograd saves for one HF Llama decoder layer, per rank: the sum of its parts."""
    return sum(layer_activation_parts(shape, tokens, seq, e, tp, attn, cuda).values())


def head_activation_bytes(shape: ModelShape, tokens: int, e: int) -> float:
    """The final RMSNorm's saved tensors (the lm_head input among them)."""
    return (4 + 2 * e) * tokens * shape.hidden + 4 * tokens


def loss_bytes(layout: TrainLayout, tokens: int, e: int) -> dict:
    """Logits and cross-entropy memory: what forward keeps, and the transient peaks of forward and
    backward. HF's loss (no tp/pp): fp32 upcast + fp32 log-softmax. Colossal-AI's pipeline forward
    (pp > 1): cross entropy on e-byte logits after a contiguous copy. Its tp forward: the
    vocab-parallel cross entropy keeps the e-byte softmax of the local vocabulary shard."""
    nv = tokens * layout.shape.vocab / layout.tp
    if layout.pp > 1:
        return {"kept": e * nv, "forward": 3 * e * nv, "backward": 3 * e * nv}
    if layout.tp > 1:
        # logits, their contiguous copy, the max-shifted copy, the fp32 softmax and its e-byte copy
        return {"kept": e * nv, "forward": 4 * e * nv + 4 * nv, "backward": 2 * e * nv}
    upcast = 4 * nv if e != 4 else 0
    return {"kept": 4 * nv, "forward": e * nv + upcast + 4 * nv, "backward": 12 * nv}


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
    elif plugin == "hybrid":  # HybridParallelAMPOptimizer (MixedPrecisionOptimizer), ZeRO 0 here
        if mixed:
            out["master"] = 4 * psi  # p.detach().float()
            out["step"] = 4 * psi  # p.grad = working.grad.float(); working.grad = None, one by one
        # HybridParallelPlugin.configure: use_ddp = (dp > 1 and pp == 1 and zero == 0) or
        # (dp == 1 and pp == 1): without a pipeline the module is wrapped in torch DDP even over a
        # group of one rank (tp=2 on 2 GPUs), and its buckets are a gradient copy
        # (gradient_as_bucket_view=False)
        if layout.pp == 1:
            out["buckets"] = w * psi
    elif plugin == "zero":  # LowLevelZeroOptimizer
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


def predict(layout: TrainLayout, rank: int = 0) -> dict:
    """Predicted per-rank bytes: components, the four phases and ``peak`` (their maximum)."""
    shape, e = layout.shape, BYTES[layout.precision]
    stage = (rank // layout.tp) % layout.pp  # mesh order (dp, pp, tp): tp fastest
    tokens = layout.micro_batch * layout.seq
    states = model_states(layout, stage)
    persistent = (
        states["weights"]
        + states["master"]
        + states["optimizer"]
        + states["buckets"]
        + states["workspace"]
    )
    layers = shape.layers // layout.pp
    in_flight = min(layout.microbatches, layout.pp) - stage if layout.pp > 1 else 1
    per_layer = layer_activation_bytes(
        shape, tokens, layout.seq, e, layout.tp, layout.attn, cuda=True
    )
    kept_per_layer = e * tokens * shape.hidden if layout.recompute else per_layer
    activations = in_flight * layers * kept_per_layer
    if layout.pp > 1:
        activations += in_flight * e * tokens * shape.hidden  # the stage's boundary tensor
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
    # 1F1B: from the first micro-batch's backward on, all gradients exist (they accumulate) while
    # later micro-batches' activations are held
    held = states["grads"] if layout.pp > 1 and layout.microbatches > 1 else 0.0
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
        "per_layer": per_layer,
        "head": head,
        "loss": loss,
        "phases": phases,
        "peak_phase": peak_phase,
        "peak": phases[peak_phase],
        "breakdown": breakdown,
    }
