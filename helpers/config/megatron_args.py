"""Chapter 6, "One layout in four configuration languages": a book config as Megatron-LM
command-line arguments.

The flag names were read from Megatron-LM's source at the version in
:data:`helpers.config.frameworks.VERSIONS`: ``megatron/training/arguments.py`` and the
dataclasses it turns into flags, ``core/model_parallel_config.py``,
``core/transformer/transformer_config.py``,
``core/distributed/distributed_data_parallel_config.py`` and ``training/config/*.py``. Tests check
that :func:`to_megatron` emits only those flags; :func:`helpers.config.megatron_core.core_kwargs`
turns them into the keyword arguments of Megatron-Core's own objects, which Chapter 6's GPU run
builds (:mod:`helpers.train.megatron_run`).
"""

from __future__ import annotations

from helpers.config.schema import TrainConfig
from helpers.parallel.vocab import HALF_PRECISIONS, OWN_AXIS_SP_MODES

# Flags checked in the sources listed in the module docstring.
MEGATRON_FLAGS = {
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--sequence-parallel",
    "--context-parallel-size",
    "--cp-comm-type",
    "--use-distributed-optimizer",
    "--use-torch-fsdp2",
    "--optimizer-cpu-offload",
    "--micro-batch-size",
    "--global-batch-size",
    "--bf16",
    "--fp16",
    "--clip-grad",
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--group-query-attention",
    "--num-query-groups",
    "--seq-length",
    "--max-position-embeddings",
    "--vocab-size",
    "--lr",
    "--seed",
    "--train-iters",
    "--save-interval",
    "--save",
    "--ckpt-format",
    "--swiglu",
    "--untie-embeddings-and-output-weights",
    "--position-embedding-type",
    "--normalization",
    "--disable-bias-linear",
    "--recompute-granularity",
    "--recompute-method",
    "--recompute-num-layers",
    "--num-layers-per-virtual-pipeline-stage",
    "--overlap-grad-reduce",
    "--hidden-dropout",
    "--attention-dropout",
    "--norm-epsilon",
}


def _ffn(hidden: int) -> int:
    return (8 * hidden // 3 + 63) // 64 * 64  # as helpers.models.llama.llama_config


def to_megatron(
    cfg: TrainConfig, offload: bool = False, recompute: bool = False
) -> tuple[list[str], list[str]]:
    """(Megatron-LM arguments, notes) for ``cfg``, e.g. for ``pretrain_gpt.py`` (a Llama-style
    GPT)."""
    p, t, m, notes = cfg.parallelism, cfg.train, cfg.model, []
    args = [
        "--tensor-model-parallel-size",
        str(p.tensor),
        "--pipeline-model-parallel-size",
        str(p.pipeline),
    ]
    if p.sequence_mode == "split_gather":
        args.append("--sequence-parallel")
    elif p.sequence_mode == "ring":
        args.append("--sequence-parallel")
        notes.append(
            "ring (Colossal-AI's ring-exchange SP inside the tensor group) maps to Megatron SP"
        )
    elif p.sequence_mode in OWN_AXIS_SP_MODES:
        args += [
            "--context-parallel-size",
            str(p.sequence),
            "--cp-comm-type",
            "a2a" if p.sequence_mode == "all_to_all" else "p2p",
        ]
    if p.zero_stage in (1, 2):
        args.append("--use-distributed-optimizer")
        notes.append(
            f"ZeRO-{p.zero_stage}: the distributed optimizer shards the fp32 main weights and "
            "Adam's moments and reduce-scatters the gradients into a buffer every rank keeps "
            "whole: ZeRO-1's memory, ZeRO-2's traffic"
        )
    elif p.zero_stage == 3:
        args.append("--use-torch-fsdp2")
        notes.append("ZeRO-3: PyTorch FSDP2 (or --use-megatron-fsdp, Megatron's own)")
    if offload:
        if p.zero_stage == 0:
            raise ValueError(
                "Megatron offloads the optimizer only with the distributed optimizer (ZeRO >= 1)"
            )
        args.append("--optimizer-cpu-offload")
    if recompute:
        args += [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "1",
        ]
    args += ["--micro-batch-size", str(cfg.micro_batch), "--global-batch-size", str(t.batch_size)]
    if t.precision in HALF_PRECISIONS:
        args.append(f"--{t.precision}")
    # always: Megatron-LM clips at 1.0 unless told (--clip-grad 0: none, the book's default)
    args += ["--clip-grad", f"{t.max_grad_norm:g}"]
    args += [
        "--num-layers",
        str(m.layers),
        "--hidden-size",
        str(m.hidden),
        "--ffn-hidden-size",
        str(_ffn(m.hidden)),
        "--num-attention-heads",
        str(m.heads),
    ]
    if m.kv < m.heads:
        args += ["--group-query-attention", "--num-query-groups", str(m.kv)]
    args += [
        "--seq-length",
        str(m.seq_len),
        "--max-position-embeddings",
        str(m.seq_len),
        "--vocab-size",
        str(m.vocab),
        "--swiglu",
        "--untie-embeddings-and-output-weights",
        "--position-embedding-type",
        "rope",
        "--normalization",
        "RMSNorm",
        "--disable-bias-linear",
        # a Llama has no dropout and RMSNorm's epsilon 1e-6 (Megatron's defaults: 0.1 and 1e-5)
        "--hidden-dropout",
        "0",
        "--attention-dropout",
        "0",
        "--norm-epsilon",
        "1e-06",
        "--lr",
        f"{t.learning_rate:g}",
        "--seed",
        str(t.seed),
        "--train-iters",
        str(t.steps),
    ]
    if t.save_interval:
        args += [
            "--save-interval",
            str(t.save_interval),
            "--save",
            t.checkpoint_dir,
            "--ckpt-format",
            "torch_dist",
        ]
    if p.microbatches and p.pipeline == 1:
        notes.append(
            f"{cfg.num_microbatches} micro-batches at pp = 1: Megatron accumulates "
            "global ÷ (micro × data) of them by itself"
        )
    return args, notes


def flags_of(args: list[str]) -> list[str]:
    """The flag names in a Megatron argument list (values dropped)."""
    return [a for a in args if a.startswith("--")]
