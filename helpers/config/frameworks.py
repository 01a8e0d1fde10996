"""Colossal-AI, DeepSpeed, Megatron-Core and PyTorch side by side: the feature table, and one book
config in each framework's terms.

Used by Chapter 6. One book config (:class:`helpers.config.schema.TrainConfig`) becomes

* a DeepSpeed JSON config (:func:`helpers.config.deepspeed_json.to_deepspeed`), which Chapter 6's
  DeepSpeed runs hand to ``deepspeed.initialize`` (:mod:`helpers.train.deepspeed_run`),
* Megatron-LM command-line arguments (:func:`helpers.config.megatron_args.to_megatron`), and from
  them the keyword arguments of Megatron-Core's objects
  (:func:`helpers.config.megatron_core.core_kwargs`, checked against Megatron-Core's source),
* a Colossal-AI plugin (:func:`to_colossalai`, which is :func:`helpers.config.plugin.plugin_spec`);

:func:`convert_all` makes the three and :func:`mapping_rows` lines them up setting by setting.
:data:`FEATURES` was read from each framework's source at the versions of :data:`VERSIONS`: the
installed Colossal-AI (``colossalai/booster/plugin/*.py``) and DeepSpeed (``deepspeed/runtime/
zero/config.py``, ``zero/stage_1_and_2.py``, ``runtime/tensor_parallel/config.py``,
``sequence/layer.py``, ``runtime/pipe/``), Megatron-Core's wheel (``megatron/core/``:
``transformer/transformer_config.py``, ``distributed/distributed_data_parallel_config.py``,
``optimizer/distrib_optimizer.py`` and Megatron-LM's ``docs/user-guide/features/
dist_optimizer.md``) and the installed torch (``torch.distributed.fsdp``, ``.tensor.parallel``,
``.pipelining``, ``.tensor.experimental``, ``.checkpoint``).
"""

from __future__ import annotations

from helpers.config.deepspeed_json import to_deepspeed
from helpers.config.megatron_args import to_megatron
from helpers.config.plugin import PluginSpec, plugin_spec
from helpers.config.schema import TrainConfig

VERSIONS = {
    "Colossal-AI": "0.5.0 (installed)",
    "DeepSpeed": "0.19.8 (installed in .venv/deepspeed)",
    "Megatron-Core": "0.19.2 (its wheel's source; Megatron-LM's flags at core 0.20.0)",
    "PyTorch": "2.13 (installed)",
}

# (feature, Colossal-AI, DeepSpeed, Megatron-Core, PyTorch, where the book runs it). Own words;
# where the name of a class, key or flag matters it is given exactly as in the source.
FEATURES = [
    (
        "ZeRO-1/2: optimizer states (and gradients) sharded",
        "LowLevelZeroPlugin(stage=1|2); HybridParallelPlugin(zero_stage=)",
        "zero_optimization.stage 1|2; gradients all-reduced in buckets, each rank keeps its part "
        "(use_multi_rank_bucket_allreduce, on by default)",
        "use_distributed_optimizer: fp32 main weights and Adam's moments sharded; the gradient "
        "buffer stays whole and is reduce-scattered in place",
        "ZeroRedundancyOptimizer (optimizer states); fully_shard(reshard_after_forward=False)",
        "Chapter 7: ZeRO-1 from scratch; this chapter: DeepSpeed ZeRO-1/2 on CPU; Chapter 8: "
        "LowLevelZero on GPUs",
    ),
    (
        "ZeRO-3: parameters sharded too",
        "GeminiPlugin (chunks, placement policy; fp16/bf16 only)",
        "zero_optimization.stage 3; stage3_param_persistence_threshold keeps small ones whole",
        "Megatron FSDP (use_megatron_fsdp) or --use-torch-fsdp2",
        "fully_shard (FSDP2)",
        "this chapter: DeepSpeed ZeRO-3 on CPU, Gemini on 2 GPUs; Chapter 8: FSDP2",
    ),
    (
        "Offload to CPU memory",
        "cpu_offload= (LowLevelZero, Hybrid); Gemini offload_optim_frac, offload_param_frac",
        "offload_optimizer / offload_param: device cpu or nvme",
        "OptimizerConfig.optimizer_cpu_offload",
        "fully_shard(offload_policy=CPUOffloadPolicy())",
        "Chapter 7: offload layouts' memory",
    ),
    (
        "Tensor parallelism",
        "tp_size= (shardformer policies per model family)",
        "tensor_parallel.autotp_size (AutoTP on Hugging Face linears)",
        "tensor_model_parallel_size; ColumnParallelLinear / RowParallelLinear",
        "parallelize_module with ColwiseParallel / RowwiseParallel (DTensor)",
        "Chapter 1: TP from scratch; Chapter 2: DTensor mesh; this chapter: tp = 2 on 2 GPUs",
    ),
    (
        "Megatron-style sequence parallelism",
        "sequence_parallelism_mode='split_gather' (with tp)",
        "—",
        "sequence_parallel=True (with TP)",
        "SequenceParallel() in parallelize_module",
        "Chapter 1: SP from scratch; Chapter 9: SP sweep",
    ),
    (
        "Ulysses / ring attention / context parallelism",
        "'all_to_all' (Ulysses), 'ring_attn' (needs flash-attn), sp_size=",
        "Ulysses: sequence_parallel_size, DistributedAttention (deepspeed/sequence/layer.py)",
        "context_parallel_size, cp_comm_type p2p | all_gather | a2a | a2a+p2p",
        "context_parallel (torch.distributed.tensor.experimental, ring attention)",
        "Chapter 9: ring attention and Ulysses",
    ),
    (
        "Pipeline schedules",
        "pp_style= '1f1b', 'interleaved', 'zbv' (zero bubble V)",
        "PipelineModule + TrainSchedule (1F1B-style), deepspeed/runtime/pipe/",
        "1F1B; interleaved with virtual_pipeline_model_parallel_size",
        "torch.distributed.pipelining: GPipe, 1F1B, Interleaved1F1B, ZBV zero bubble, DualPipeV",
        "Chapter 1: schedules from scratch",
    ),
    (
        "Mixture of experts",
        "MoeHybridParallelPlugin(ep_size=)",
        "deepspeed.moe.layer.MoE(ep_size=)",
        "expert_model_parallel_size (+ expert_tensor_parallel_size)",
        "— (no MoE layer; expert parallelism is built on DTensor)",
        "Chapter 9: MoE",
    ),
    (
        "Checkpoints",
        "booster.save_model / save_optimizer: sharded, safetensors, Hugging Face layout",
        "per-rank ZeRO shards; zero_to_fp32.py merges; universal checkpoint reshapes",
        "dist_checkpointing (torch_dist by default)",
        "torch.distributed.checkpoint (DCP)",
        "Chapter 5: save, kill, resume",
    ),
    (
        "Launcher",
        "torchrun, or `colossalai run` (hostfile over ssh)",
        "`deepspeed` runner (--hostfile, --include / --exclude)",
        "torchrun with pretrain_gpt.py",
        "torchrun",
        "Chapter 5: torchrun, colossalai run, SLURM",
    ),
    (
        "Configuration",
        "Python: plugin keyword arguments + Booster",
        "a JSON file read by deepspeed.initialize",
        "dataclasses (TransformerConfig, ...) or pretrain_gpt.py's flags",
        "code: fully_shard, parallelize_module calls",
        "this chapter: one YAML written in all four, DeepSpeed's JSON executed",
    ),
]
FEATURE_COLUMNS = ["feature", "Colossal-AI", "DeepSpeed", "Megatron-Core", "PyTorch", "run in"]


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
