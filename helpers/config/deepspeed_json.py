"""Chapter 6, "One layout in four configuration languages": a book config as a DeepSpeed JSON.

The key names were read from DeepSpeed 0.19.8's source (:data:`helpers.config.frameworks.VERSIONS`):
the pydantic config models ``deepspeed/runtime/zero/config.py`` and ``zero/offload_config.py``,
``runtime/constants.py`` and ``runtime/tensor_parallel/config.py``. Tests check that
:func:`to_deepspeed` emits only those names, and Chapter 6's DeepSpeed runs hand what it writes to
``deepspeed.initialize`` (:mod:`helpers.train.deepspeed_run`), which validates every key.
"""

from __future__ import annotations

from helpers.config.schema import TrainConfig
from helpers.parallel.vocab import HALF_PRECISIONS, OWN_AXIS_SP_MODES

# Names checked in the sources listed in the module docstring.
DEEPSPEED_KEYS = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "bf16",
    "fp16",
    "zero_optimization",
    "tensor_parallel",
    "sequence_parallel_size",
    "activation_checkpointing",
    "steps_per_print",
}
DEEPSPEED_ZERO_KEYS = {
    "stage",
    "overlap_comm",
    "contiguous_gradients",
    "reduce_bucket_size",
    "offload_optimizer",
    "offload_param",
}


def to_deepspeed(
    cfg: TrainConfig, offload: bool = False, recompute: bool = False
) -> tuple[dict, list[str]]:
    """(DeepSpeed JSON dict, notes) for ``cfg`` (data degree resolved).

    DeepSpeed checks train_batch_size = micro × accumulation × data-parallel world size. Its data
    parallel world excludes tensor, pipeline and sequence ranks. What JSON cannot say is in the
    notes: the pipeline is a PipelineModule(num_stages=) built in code, and activation
    checkpointing is requested from the model (deepspeed.checkpointing.checkpoint).
    """
    p, t, notes = cfg.parallelism, cfg.train, []
    micro = cfg.micro_batch
    ds: dict = {
        "train_batch_size": t.batch_size,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": cfg.num_microbatches,
    }
    if t.precision in HALF_PRECISIONS:
        ds[t.precision] = {"enabled": True}
    if t.max_grad_norm:
        ds["gradient_clipping"] = t.max_grad_norm
    zero: dict = {"stage": p.zero_stage}
    if offload:
        if p.zero_stage == 0:
            raise ValueError("DeepSpeed offloads optimizer states only with ZeRO stage 1, 2 or 3")
        zero["offload_optimizer"] = {"device": "cpu"}
        if p.zero_stage == 3:
            zero["offload_param"] = {"device": "cpu"}
    if p.zero_stage:  # the book's overlap_communication, on by default as in Colossal-AI
        zero["overlap_comm"] = p.overlap_communication is not False
    ds["zero_optimization"] = zero
    if p.tensor > 1:
        ds["tensor_parallel"] = {"autotp_size": p.tensor}
        notes.append(
            f"tensor {p.tensor}: AutoTP shards Hugging Face linear layers; no Megatron-style "
            "sequence parallelism in DeepSpeed"
            + (" (split_gather dropped)" if p.sequence_mode else "")
        )
    if p.sequence_mode in OWN_AXIS_SP_MODES and p.sequence > 1:
        ds["sequence_parallel_size"] = p.sequence
        notes.append(
            f"sequence {p.sequence}: Ulysses (DistributedAttention in deepspeed/sequence/layer.py) "
            "wraps the attention in code"
            + (
                "; ring attention has no DeepSpeed equivalent, Ulysses used"
                if p.sequence_mode == "ring_attn"
                else ""
            )
        )
    if p.pipeline > 1:
        notes.append(
            f"pipeline {p.pipeline}: build the model as deepspeed.pipe.PipelineModule(layers, "
            f"num_stages={p.pipeline}); gradient_accumulation_steps is its micro-batch count"
        )
    if recompute:
        ds["activation_checkpointing"] = {"partition_activations": False}
        notes.append(
            "recomputation: wrap each layer with deepspeed.checkpointing.checkpoint in the model"
        )
    return ds, notes
