"""Chapter 6: the converter's Megatron-LM arguments as the keyword arguments of Megatron-Core's own
objects.

:func:`helpers.config.megatron_args.to_megatron` writes a book config as the command line of
Megatron-LM's ``pretrain_gpt.py``. That script turns the flags into Megatron-Core objects;
:func:`core_kwargs` does the same without Megatron-Core: one dict of keyword arguments per object
(:data:`OBJECTS`), with plain values (``"bfloat16"`` for ``torch.bfloat16``, ``"silu"`` for
``torch.nn.functional.silu``) that :mod:`helpers.train.megatron_run` turns into the real ones on a
GPU. Every name is checked against the lists read from Megatron-Core 0.19.2's source
(``helpers/data/megatron_core_names.yaml``: ``megatron/core/transformer/transformer_config.py``
with its base ``megatron/core/model_parallel_config.py``,
``megatron/core/distributed/distributed_data_parallel_config.py``,
``megatron/core/optimizer/optimizer_config.py``, ``megatron/core/parallel_state.py`` and
``megatron/core/models/gpt/gpt_model.py``), so a misspelt field fails here, on the CPU, not on the
GPU. Megatron-Core itself is not imported: its wheels need Python 3.12 or later.
"""

from __future__ import annotations

from pathlib import Path

import yaml

NAMES_FILE = Path(__file__).resolve().parents[1] / "data" / "megatron_core_names.yaml"
OBJECTS = (
    "TransformerConfig",
    "initialize_model_parallel",
    "GPTModel",
    "DistributedDataParallelConfig",
    "OptimizerConfig",
)
TRAINING = "pretrain script"  # flags the training script keeps for itself (batches, iterations)
DTYPES = {"--bf16": "bfloat16", "--fp16": "float16"}

# flag -> [(object, field, type)]: a flag may set fields of several objects
FIELDS: dict[str, list[tuple[str, str, type]]] = {
    "--num-layers": [("TransformerConfig", "num_layers", int)],
    "--hidden-size": [("TransformerConfig", "hidden_size", int)],
    "--ffn-hidden-size": [("TransformerConfig", "ffn_hidden_size", int)],
    "--num-attention-heads": [("TransformerConfig", "num_attention_heads", int)],
    "--num-query-groups": [("TransformerConfig", "num_query_groups", int)],
    "--norm-epsilon": [("TransformerConfig", "layernorm_epsilon", float)],
    "--hidden-dropout": [("TransformerConfig", "hidden_dropout", float)],
    "--attention-dropout": [("TransformerConfig", "attention_dropout", float)],
    "--normalization": [("TransformerConfig", "normalization", str)],
    "--cp-comm-type": [("TransformerConfig", "cp_comm_type", str)],
    "--recompute-granularity": [("TransformerConfig", "recompute_granularity", str)],
    "--recompute-method": [("TransformerConfig", "recompute_method", str)],
    "--recompute-num-layers": [("TransformerConfig", "recompute_num_layers", int)],
    "--tensor-model-parallel-size": [
        ("TransformerConfig", "tensor_model_parallel_size", int),
        ("initialize_model_parallel", "tensor_model_parallel_size", int),
    ],
    "--pipeline-model-parallel-size": [
        ("TransformerConfig", "pipeline_model_parallel_size", int),
        ("initialize_model_parallel", "pipeline_model_parallel_size", int),
    ],
    "--context-parallel-size": [
        ("TransformerConfig", "context_parallel_size", int),
        ("initialize_model_parallel", "context_parallel_size", int),
    ],
    "--vocab-size": [("GPTModel", "vocab_size", int)],
    "--max-position-embeddings": [("GPTModel", "max_sequence_length", int)],
    "--position-embedding-type": [("GPTModel", "position_embedding_type", str)],
    "--lr": [("OptimizerConfig", "lr", float)],
    "--clip-grad": [("OptimizerConfig", "clip_grad", float)],
}
SWITCHES: dict[str, list[tuple[str, str, object]]] = {  # flags without a value
    "--sequence-parallel": [("TransformerConfig", "sequence_parallel", True)],
    "--swiglu": [
        ("TransformerConfig", "gated_linear_unit", True),
        ("TransformerConfig", "activation_func", "silu"),
    ],
    "--disable-bias-linear": [("TransformerConfig", "add_bias_linear", False)],
    "--untie-embeddings-and-output-weights": [
        ("GPTModel", "share_embeddings_and_output_weights", False)
    ],
    "--use-distributed-optimizer": [
        ("DistributedDataParallelConfig", "use_distributed_optimizer", True),
        ("OptimizerConfig", "use_distributed_optimizer", True),
    ],
    "--overlap-grad-reduce": [("DistributedDataParallelConfig", "overlap_grad_reduce", True)],
    "--optimizer-cpu-offload": [("OptimizerConfig", "optimizer_cpu_offload", True)],
    "--group-query-attention": [],  # its number of groups is --num-query-groups
}


def names() -> dict[str, set[str]]:
    """Megatron-Core 0.19.2's field and parameter names per object (TransformerConfig with its
    base ModelParallelConfig's)."""
    data = yaml.safe_load(NAMES_FILE.read_text())
    out = {k: set(v["names"]) for k, v in data.items() if isinstance(v, dict)}
    out["TransformerConfig"] |= out.pop("ModelParallelConfig")
    return out


def _value(args: list[str], i: int) -> str | None:
    nxt = args[i + 1] if i + 1 < len(args) else None
    return None if nxt is None or nxt.startswith("--") else nxt


def core_kwargs(args: list[str]) -> dict[str, dict]:
    """``{object: kwargs}`` for :data:`OBJECTS`, plus the flags the training script keeps
    (:data:`TRAINING`); raises ValueError for a name Megatron-Core 0.19.2 does not have."""
    out: dict[str, dict] = {name: {} for name in (*OBJECTS, TRAINING)}
    i = 0
    while i < len(args):
        flag, value = args[i], _value(args, i)
        i += 1 if value is None else 2
        if flag in DTYPES:
            for obj in ("TransformerConfig", "OptimizerConfig"):
                out[obj][flag[2:]] = True
            out["TransformerConfig"]["params_dtype"] = DTYPES[flag]
            if flag == "--bf16":  # pretrain_gpt.py reduces bf16 gradients in fp32
                # (megatron/training/arguments.py: accumulate_allreduce_grads_in_fp32)
                out["DistributedDataParallelConfig"]["grad_reduce_in_fp32"] = True
        elif flag in SWITCHES:
            for obj, field, setting in SWITCHES[flag]:
                out[obj][field] = setting
        elif flag in FIELDS:
            for obj, field, kind in FIELDS[flag]:
                out[obj][field] = kind(value)
        else:
            out[TRAINING][flag[2:].replace("-", "_")] = True if value is None else value
    known = names()
    for obj in OBJECTS:
        unknown = set(out[obj]) - known[obj]
        if unknown:
            raise ValueError(f"Megatron-Core 0.19.2's {obj} has no {sorted(unknown)}")
    return out
