"""Colossal-AI, DeepSpeed and Megatron-LM side by side: a feature table and config converters.

Used by Chapter 6. One book config (:class:`helpers.config.schema.TrainConfig`) becomes

* a DeepSpeed JSON config (:func:`to_deepspeed`),
* Megatron-LM command-line arguments (:func:`to_megatron`),
* a Colossal-AI plugin (:func:`to_colossalai`, which is :func:`helpers.config.plugin.plugin_spec`).

Neither DeepSpeed nor Megatron-LM is installed in the book's environment. The key names below were
read from their sources at the versions in :data:`VERSIONS` (DeepSpeed's pydantic config models
``deepspeed/runtime/zero/config.py``, ``zero/offload_config.py``, ``runtime/constants.py``,
``runtime/tensor_parallel/config.py``; Megatron-LM's ``megatron/training/arguments.py`` and the
dataclasses it turns into flags: ``core/model_parallel_config.py``,
``core/transformer/transformer_config.py``, ``core/distributed/distributed_data_parallel_config.py``,
``training/config/*.py``). Tests check that the converters only emit those names, and that the
Colossal-AI kwargs bind to the installed constructors; nothing here runs DeepSpeed or Megatron.
"""

from __future__ import annotations

from helpers.config.schema import TrainConfig
from helpers.config.plugin import PluginSpec, plugin_spec

VERSIONS = {
    "Colossal-AI": "0.5.0 (installed: colossalai/booster/plugin/*.py)",
    "DeepSpeed": "0.19.6 (github deepspeedai/DeepSpeed, commit edaa722, 2026-08-22)",
    "Megatron-LM": "core 0.20.0 (github NVIDIA/Megatron-LM, commit d98e8a6, 2026-08-22)",
}

# Rows: (feature, Colossal-AI 0.5.0, DeepSpeed 0.19.6, Megatron-LM core 0.20.0). Own words; where
# the name of a class, key or flag matters it is given exactly as in the source.
FEATURES = [
    (
        "ZeRO stages",
        "1, 2: LowLevelZeroPlugin(stage=); 3: GeminiPlugin (chunks); zero_stage= in "
        "HybridParallelPlugin (0-2)",
        "0-3: zero_optimization.stage",
        "optimizer + gradient sharding: "
        "--use-distributed-optimizer; full sharding: --use-megatron-fsdp or --use-torch-fsdp2",
    ),
    (
        "Offload",
        "cpu_offload= (LowLevelZero, Hybrid); Gemini placement_policy, offload_optim_frac, "
        "offload_param_frac",
        "offload_optimizer / offload_param: device cpu or nvme",
        "--optimizer-cpu-offload",
    ),
    (
        "Tensor parallelism",
        "tp_size= (shardformer policies per model family)",
        "tensor_parallel.autotp_size (AutoTP from the model's TP plan)",
        "--tensor-model-parallel-size (its own ColumnParallelLinear / RowParallelLinear)",
    ),
    (
        "Megatron-style SP",
        "sequence_parallelism_mode='split_gather' (with tp)",
        "—",
        "--sequence-parallel (with TP)",
    ),
    (
        "Ulysses / ring attention",
        "'all_to_all' (Ulysses), 'ring_attn' (needs flash-attn), sp_size=",
        "Ulysses: sequence_parallel_size, deepspeed/sequence/layer.py",
        "context parallelism: "
        "--context-parallel-size, --cp-comm-type p2p | all_gather | a2a | a2a+p2p",
    ),
    (
        "Pipeline schedules",
        "pp_style= '1f1b', 'interleaved', 'zbv' (zero bubble V)",
        "PipelineModule + TrainSchedule (1F1B-style) in deepspeed/runtime/pipe/",
        "1F1B; interleaved via "
        "--num-layers-per-virtual-pipeline-stage; combined_1f1b for MoE overlap",
    ),
    (
        "MoE / expert parallelism",
        "MoeHybridParallelPlugin(ep_size=)",
        "deepspeed.moe.layer.MoE(ep_size=)",
        "--expert-model-parallel-size (+ --expert-tensor-parallel-size)",
    ),
    (
        "Checkpoint formats",
        "booster.save_model/save_optimizer: one file or sharded, safetensors, "
        "Hugging Face layout for model weights",
        "per-rank ZeRO shards; zero_to_fp32.py merges; universal "
        "checkpoint (ds_to_universal.py) reshapes",
        "--ckpt-format torch | torch_dist (default) | torch_dcp | fsdp_dtensor",
    ),
    (
        "Launcher",
        "torchrun, or `colossalai run` (fabric over ssh, hostfile)",
        "`deepspeed` runner (--hostfile, --include / --exclude, --num_gpus)",
        "torchrun with pretrain_*.py scripts",
    ),
    (
        "Config style",
        "Python: plugin constructor kwargs + Booster",
        "JSON (--deepspeed_config) read by deepspeed.initialize",
        "command-line flags (dataclass fields, dashes for underscores)",
    ),
]
FEATURE_COLUMNS = ["feature", "Colossal-AI", "DeepSpeed", "Megatron-LM"]

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
}


def _ffn(hidden: int) -> int:
    return (8 * hidden // 3 + 63) // 64 * 64  # as helpers.models.llama.llama_config


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
    if t.precision in ("bf16", "fp16"):
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
    if p.zero_stage:
        zero["overlap_comm"] = True
    ds["zero_optimization"] = zero
    if p.tensor > 1:
        ds["tensor_parallel"] = {"autotp_size": p.tensor}
        notes.append(
            f"tensor {p.tensor}: AutoTP shards Hugging Face linear layers; no Megatron-style "
            "sequence parallelism in DeepSpeed"
            + (" (split_gather dropped)" if p.sequence_mode else "")
        )
    if p.sequence_mode in ("all_to_all", "ring_attn") and p.sequence > 1:
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


def to_megatron(
    cfg: TrainConfig, offload: bool = False, recompute: bool = False
) -> tuple[list[str], list[str]]:
    """(Megatron-LM arguments, notes) for ``cfg``, e.g. for ``pretrain_gpt.py`` (Llama-style GPT)."""
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
    elif p.sequence_mode in ("all_to_all", "ring_attn"):
        args += [
            "--context-parallel-size",
            str(p.sequence),
            "--cp-comm-type",
            "a2a" if p.sequence_mode == "all_to_all" else "p2p",
        ]
    if p.zero_stage in (1, 2):
        args.append("--use-distributed-optimizer")
        notes.append(
            f"ZeRO-{p.zero_stage}: the distributed optimizer shards optimizer states and "
            "reduce-scatters gradients (between Colossal-AI's stages 1 and 2)"
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
    if t.precision in ("bf16", "fp16"):
        args.append(f"--{t.precision}")
    if t.max_grad_norm:
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


def to_colossalai(cfg: TrainConfig) -> PluginSpec:
    """The Colossal-AI plugin (Chapter 4's :func:`helpers.config.plugin.plugin_spec`)."""
    return plugin_spec(cfg)


def flags_of(args: list[str]) -> list[str]:
    """The flag names in a Megatron argument list (values dropped)."""
    return [a for a in args if a.startswith("--")]


def convert_all(
    cfg: TrainConfig, procs: int | None = None, offload: bool = False, recompute: bool = False
) -> dict:
    """The same layout for all three frameworks: {'deepspeed': (json, notes), 'megatron': (args, notes),
    'colossalai': PluginSpec}; ``procs`` resolves ``data: auto``."""
    if cfg.data_degree is None:
        if procs is None:
            raise ValueError("data: auto needs procs to know the data-parallel degree")
        cfg = cfg.resolve(procs)
    return {
        "deepspeed": to_deepspeed(cfg, offload, recompute),
        "megatron": to_megatron(cfg, offload, recompute),
        "colossalai": to_colossalai(cfg),
    }


def mapping_rows(cfg: TrainConfig, procs: int | None = None) -> list[dict]:
    """One row per parallel setting: the book's field, DeepSpeed's key, Megatron's flag, Colossal-AI's kwarg."""
    if cfg.data_degree is None:
        cfg = cfg.resolve(procs) if procs else cfg
    out = convert_all(cfg, procs)
    ds, _ = out["deepspeed"]
    mg, _ = out["megatron"]
    spec = out["colossalai"]
    flag = lambda name: (
        mg[mg.index(name) + 1]
        if name in mg
        and mg.index(name) + 1 < len(mg)  # noqa: E731
        and not mg[mg.index(name) + 1].startswith("--")
        else ("on" if name in mg else "—")
    )
    p, t = cfg.parallelism, cfg.train
    return [
        {
            "book": f"tensor = {p.tensor}",
            "DeepSpeed": f"tensor_parallel.autotp_size = {ds.get('tensor_parallel', {}).get('autotp_size', '—')}",
            "Megatron-LM": f"--tensor-model-parallel-size {flag('--tensor-model-parallel-size')}",
            "Colossal-AI": f"tp_size = {spec.kwargs.get('tp_size', '—')}",
        },
        {
            "book": f"pipeline = {p.pipeline}",
            "DeepSpeed": "PipelineModule(num_stages=…) in code" if p.pipeline > 1 else "—",
            "Megatron-LM": f"--pipeline-model-parallel-size {flag('--pipeline-model-parallel-size')}",
            "Colossal-AI": f"pp_size = {spec.kwargs.get('pp_size', '—')}",
        },
        {
            "book": f"sequence_mode = {p.sequence_mode}",
            "DeepSpeed": f"sequence_parallel_size = {ds.get('sequence_parallel_size', '—')}",
            "Megatron-LM": "--sequence-parallel"
            if "--sequence-parallel" in mg
            else (
                f"--context-parallel-size {flag('--context-parallel-size')}"
                if "--context-parallel-size" in mg
                else "—"
            ),
            "Colossal-AI": f"sequence_parallelism_mode = {spec.kwargs.get('sequence_parallelism_mode', '—')}",
        },
        {
            "book": f"zero_stage = {p.zero_stage}",
            "DeepSpeed": f"zero_optimization.stage = {ds['zero_optimization']['stage']}",
            "Megatron-LM": next(
                (f for f in ("--use-distributed-optimizer", "--use-torch-fsdp2") if f in mg), "—"
            ),
            "Colossal-AI": spec.plugin
            + (
                f"(stage={spec.kwargs['stage']})"
                if "stage" in spec.kwargs
                else f"(zero_stage={spec.kwargs['zero_stage']})"
                if "zero_stage" in spec.kwargs
                else ""
            ),
        },
        {
            "book": f"batch {t.batch_size}, micro {cfg.micro_batch}",
            "DeepSpeed": f"train_batch_size {ds['train_batch_size']}, micro {ds['train_micro_batch_size_per_gpu']}, "
            f"accumulation {ds['gradient_accumulation_steps']}",
            "Megatron-LM": f"--global-batch-size {flag('--global-batch-size')} --micro-batch-size {flag('--micro-batch-size')}",
            "Colossal-AI": f"num_microbatches = {spec.kwargs['num_microbatches']}"
            if "num_microbatches" in spec.kwargs
            else "loader batch = micro",
        },
        {
            "book": f"precision = {t.precision}",
            "DeepSpeed": f"{t.precision}.enabled" if t.precision != "fp32" else "—",
            "Megatron-LM": f"--{t.precision}" if t.precision != "fp32" else "—",
            "Colossal-AI": f"precision = {spec.kwargs.get('precision', spec.booster_kwargs.get('mixed_precision', 'fp32'))}",
        },
    ]


# -- When to choose which (the seed's advice, with the book's measurements as evidence) -----------
def _measured(points: list[dict], word: str) -> dict | None:
    return next(
        (p for p in points if word in p["name"] and not p.get("failed") and not p.get("oom")), None
    )


def _cite(p: dict | None) -> str:
    if p is None:
        return "not recorded: python -m helpers.record.ch08 --record --parts compare"
    text = f"{p['name']}: {p['tokens_per_s'] / 1000:.1f}k tokens/s, MFU {100 * p['mfu']:.1f} %"
    return text if p["valid"] else text + f" — INVALID ({p['reason']}), not counted"


def _gemini_fix(gemini: dict[bool, dict]) -> str:
    """What Chapter 6's part ``gemini`` (the same model under Gemini, asynchronous gradient reduce on
    and off) adds to the evidence, or '' when it is not recorded."""
    on, off = gemini.get(True), gemini.get(False)
    if not (on and off) or any(p.get("failed") or p.get("oom") for p in (on, off)):
        return ""
    if not off["valid"]:
        return f"; with enable_async_reduce=False (part gemini) still INVALID ({off['reason']})"
    default = "valid too" if on["valid"] else f"{on['reason']} again"
    return (
        f"; with enable_async_reduce=False (part gemini, same model): {off['tokens_per_s'] / 1000:.1f}k tokens/s, "
        f"MFU {100 * off['mfu']:.1f} %, loss within 0.05 of the reference (with the default: {default})"
    )


def decision_rows(
    points: list[dict] | None = None, gemini: dict[bool, dict] | None = None
) -> list[dict]:
    """The seed's "when to choose which", each row with its evidence read from Chapter 6's recorded
    comparison (``ch08_compare``: 0.94 B Llama, batch 8 × 2048, bf16, 2 GPUs) and its Gemini re-run
    with and without the asynchronous gradient reduce (``ch08_gemini``, keyed by
    ``enable_async_reduce``). Default: the records found by :mod:`helpers.chapters.ch08_troubleshooting`; with
    ``points`` given and ``gemini`` not, no Gemini re-run is cited."""
    if points is None:
        from helpers.chapters.ch08_troubleshooting import gemini_points, points as recorded_points

        points, gemini = recorded_points("compare"), gemini_points() if gemini is None else gemini
    fsdp, zero = _measured(points, "FSDP2"), _measured(points, "LowLevelZero")
    tp, gemini_run = _measured(points, "tp=2"), _measured(points, "Gemini")
    fix = _gemini_fix(gemini or {})
    ratio = (
        f"; ZeRO-2 {zero['tokens_per_s'] / fsdp['tokens_per_s']:.2f}× FSDP2's throughput in the same run"
        if fsdp and zero and fsdp["valid"] and zero["valid"]
        else ""
    )
    return [
        {
            "situation": "the model fits one GPU once its model states are sharded over data parallelism",
            "choose": "ZeRO-1/2 (DeepSpeed ZeRO, Colossal-AI LowLevelZero, Megatron's distributed optimizer) "
            "or PyTorch FSDP2",
            "evidence": f"{_cite(zero)}; {_cite(fsdp)}{ratio}",
        },
        {
            "situation": "the model states do not fit even sharded over data parallelism, or must go to CPU memory",
            "choose": "ZeRO-3 with placement / offload: Colossal-AI Gemini, DeepSpeed ZeRO-3 offload"
            + (
                " (Gemini with enable_async_reduce=False: see the evidence)"
                if fix and gemini[False]["valid"] and not gemini[True]["valid"]
                else ""
            ),
            "evidence": f"{_cite(gemini_run)}{fix}; memory per layout in Chapter 7",
        },
        {
            "situation": "one layer's weights or activations do not fit one GPU (tens to hundreds of billions)",
            "choose": "tensor (+ sequence) parallelism inside a node: Megatron-LM, or Colossal-AI HybridParallel",
            "evidence": _cite(tp)
            + (
                f"; {tp['tokens_per_s'] / zero['tokens_per_s']:.2f}× ZeRO-2's throughput, "
                f"peak {tp['peak_gib']:.1f} against {zero['peak_gib']:.1f} GiB: TP is for layers "
                "that do not fit, not for speed"
                if tp and zero and tp["valid"] and zero["valid"]
                else ""
            ),
        },
        {
            "situation": "one configuration for TP, PP, SP and ZeRO together, Hugging Face models as they are",
            "choose": "Colossal-AI (plugins + shardformer policies)",
            "evidence": "Chapter 4's config → plugin mapping and this chapter's converters (tests)",
        },
        {
            "situation": "pure data parallelism, no new framework wanted",
            "choose": "PyTorch FSDP2 (fully_shard)",
            "evidence": _cite(fsdp),
        },
    ]
