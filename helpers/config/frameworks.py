"""Colossal-AI, DeepSpeed and Megatron-LM side by side: the feature table, and one book config in
all three.

Used by Chapter 6. One book config (:class:`helpers.config.schema.TrainConfig`) becomes

* a DeepSpeed JSON config (:func:`helpers.config.deepspeed_json.to_deepspeed`),
* Megatron-LM command-line arguments (:func:`helpers.config.megatron_args.to_megatron`),
* a Colossal-AI plugin (:func:`to_colossalai`, which is :func:`helpers.config.plugin.plugin_spec`);

:func:`convert_all` makes all three and :func:`mapping_rows` lines them up setting by setting.
The advice on which to choose is :mod:`helpers.config.framework_choice`.

Neither DeepSpeed nor Megatron-LM is installed in the book's environment. The key names were read
from their sources at the versions in :data:`VERSIONS` (DeepSpeed's pydantic config models
``deepspeed/runtime/zero/config.py``, ``zero/offload_config.py``, ``runtime/constants.py``,
``runtime/tensor_parallel/config.py``; Megatron-LM's ``megatron/training/arguments.py`` and the
dataclasses it turns into flags: ``core/model_parallel_config.py``,
``core/transformer/transformer_config.py``,
``core/distributed/distributed_data_parallel_config.py``, ``training/config/*.py``). Tests check
that the converters only emit those names, and that the Colossal-AI kwargs bind to the installed
constructors; nothing here runs DeepSpeed or Megatron.
"""

from __future__ import annotations

from helpers.config.deepspeed_json import to_deepspeed
from helpers.config.megatron_args import to_megatron
from helpers.config.plugin import PluginSpec, plugin_spec
from helpers.config.schema import TrainConfig

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


def to_colossalai(cfg: TrainConfig) -> PluginSpec:
    """The Colossal-AI plugin (Chapter 4's :func:`helpers.config.plugin.plugin_spec`)."""
    return plugin_spec(cfg)


def convert_all(
    cfg: TrainConfig, procs: int | None = None, offload: bool = False, recompute: bool = False
) -> dict:
    """The same layout for all three frameworks: {'deepspeed': (json, notes), 'megatron': (args,
    notes), 'colossalai': PluginSpec}; ``procs`` resolves ``data: auto``."""
    if cfg.data_degree is None:
        if procs is None:
            raise ValueError("data: auto needs procs to know the data-parallel degree")
        cfg = cfg.resolve(procs)
    return {
        "deepspeed": to_deepspeed(cfg, offload, recompute),
        "megatron": to_megatron(cfg, offload, recompute),
        "colossalai": to_colossalai(cfg),
    }


def _flag(args: list[str], name: str) -> str:
    """The value after Megatron flag ``name``; 'on' for a flag without one, '—' if absent."""
    if name not in args:
        return "—"
    i = args.index(name) + 1
    return args[i] if i < len(args) and not args[i].startswith("--") else "on"


def mapping_rows(cfg: TrainConfig, procs: int | None = None) -> list[dict]:
    """One row per parallel setting: the book's field, DeepSpeed's key, Megatron's flag,
    Colossal-AI's kwarg."""
    if cfg.data_degree is None:
        cfg = cfg.resolve(procs) if procs else cfg
    out = convert_all(cfg, procs)
    ds, _ = out["deepspeed"]
    mg, _ = out["megatron"]
    spec = out["colossalai"]
    kw = spec.kwargs
    p, t = cfg.parallelism, cfg.train
    if "--sequence-parallel" in mg:
        megatron_sp = "--sequence-parallel"
    elif "--context-parallel-size" in mg:
        megatron_sp = f"--context-parallel-size {_flag(mg, '--context-parallel-size')}"
    else:
        megatron_sp = "—"
    if "stage" in kw:
        zero = f"(stage={kw['stage']})"
    elif "zero_stage" in kw:
        zero = f"(zero_stage={kw['zero_stage']})"
    else:
        zero = ""
    autotp = ds.get("tensor_parallel", {}).get("autotp_size", "—")
    precision = kw.get("precision", spec.booster_kwargs.get("mixed_precision", "fp32"))
    return [
        {
            "book": f"tensor = {p.tensor}",
            "DeepSpeed": f"tensor_parallel.autotp_size = {autotp}",
            "Megatron-LM": "--tensor-model-parallel-size "
            + _flag(mg, "--tensor-model-parallel-size"),
            "Colossal-AI": f"tp_size = {kw.get('tp_size', '—')}",
        },
        {
            "book": f"pipeline = {p.pipeline}",
            "DeepSpeed": "PipelineModule(num_stages=…) in code" if p.pipeline > 1 else "—",
            "Megatron-LM": "--pipeline-model-parallel-size "
            + _flag(mg, "--pipeline-model-parallel-size"),
            "Colossal-AI": f"pp_size = {kw.get('pp_size', '—')}",
        },
        {
            "book": f"sequence_mode = {p.sequence_mode}",
            "DeepSpeed": f"sequence_parallel_size = {ds.get('sequence_parallel_size', '—')}",
            "Megatron-LM": megatron_sp,
            "Colossal-AI": "sequence_parallelism_mode = "
            f"{kw.get('sequence_parallelism_mode', '—')}",
        },
        {
            "book": f"zero_stage = {p.zero_stage}",
            "DeepSpeed": f"zero_optimization.stage = {ds['zero_optimization']['stage']}",
            "Megatron-LM": next(
                (f for f in ("--use-distributed-optimizer", "--use-torch-fsdp2") if f in mg), "—"
            ),
            "Colossal-AI": spec.plugin + zero,
        },
        {
            "book": f"batch {t.batch_size}, micro {cfg.micro_batch}",
            "DeepSpeed": f"train_batch_size {ds['train_batch_size']}, "
            f"micro {ds['train_micro_batch_size_per_gpu']}, "
            f"accumulation {ds['gradient_accumulation_steps']}",
            "Megatron-LM": f"--global-batch-size {_flag(mg, '--global-batch-size')} "
            f"--micro-batch-size {_flag(mg, '--micro-batch-size')}",
            "Colossal-AI": f"num_microbatches = {kw['num_microbatches']}"
            if "num_microbatches" in kw
            else "loader batch = micro",
        },
        {
            "book": f"precision = {t.precision}",
            "DeepSpeed": f"{t.precision}.enabled" if t.precision != "fp32" else "—",
            "Megatron-LM": f"--{t.precision}" if t.precision != "fp32" else "—",
            "Colossal-AI": f"precision = {precision}",
        },
    ]
