"""Chapter 6: the framework converters emit only names read from each framework's source, agree
with each other on the layout, and the Colossal-AI side binds to the installed constructors."""

import json
from pathlib import Path

import pytest

from helpers.config import frameworks as fw
from helpers.config.deepspeed_json import DEEPSPEED_KEYS, DEEPSPEED_ZERO_KEYS
from helpers.config.loading import load_config
from helpers.config.megatron_args import MEGATRON_FLAGS, flags_of
from helpers.config.plugin import check_signature

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = {  # name: (config dict, processes)
    "seed_complete": ("helpers/configs/seed_complete.yaml", 64),
    "tiny_gpu_hybrid": ("helpers/configs/tiny_gpu_hybrid.yaml", 8),
    "pp2": ("helpers/configs/ch05_gpu_pp2.yaml", 2),
    "dp16": ("helpers/configs/dp16_fp32.yaml", 16),
    "tp2_sp_zero2": (
        {
            "parallelism": {
                "data": 2,
                "tensor": 2,
                "sequence_mode": "split_gather",
                "zero_stage": 2,
            },
            "train": {"batch_size": 8, "learning_rate": 1e-3, "precision": "bf16"},
        },
        4,
    ),
    "ulysses": (
        {
            "parallelism": {
                "data": 1,
                "sequence": 2,
                "sequence_mode": "all_to_all",
                "zero_stage": 1,
            },
            "train": {
                "batch_size": 8,
                "learning_rate": 1e-3,
                "precision": "bf16",
                "max_grad_norm": 1.0,
            },
        },
        2,
    ),
    "zero3": (
        {
            "parallelism": {"data": 4, "zero_stage": 3},
            "train": {"batch_size": 8, "learning_rate": 1e-3, "precision": "bf16"},
        },
        4,
    ),
}


def _cfg(name):
    source, procs = LAYOUTS[name]
    source = ROOT / source if isinstance(source, str) else source
    return load_config(source), procs


@pytest.mark.parametrize("name", LAYOUTS)
def test_only_checked_names(name):
    cfg, procs = _cfg(name)
    out = fw.convert_all(cfg, procs, offload=cfg.parallelism.zero_stage > 0, recompute=True)
    ds, _ = out["deepspeed"]
    assert set(ds) <= DEEPSPEED_KEYS
    assert set(ds["zero_optimization"]) <= DEEPSPEED_ZERO_KEYS
    json.dumps(ds)  # a JSON file, as DeepSpeed reads it
    args, _ = out["megatron"]
    assert set(flags_of(args)) <= MEGATRON_FLAGS
    check_signature(out["colossalai"])


@pytest.mark.parametrize("name", LAYOUTS)
def test_same_layout_everywhere(name):
    cfg, procs = _cfg(name)
    cfg = cfg.resolve(procs) if cfg.data_degree is None else cfg
    p, t = cfg.parallelism, cfg.train
    ds, _ = fw.to_deepspeed(cfg)
    args, _ = fw.to_megatron(cfg)
    value = lambda flag: args[args.index(flag) + 1]  # noqa: E731
    # batch arithmetic: DeepSpeed's rule train = micro × accumulation × data
    assert (
        ds["train_batch_size"]
        == ds["train_micro_batch_size_per_gpu"]
        * ds["gradient_accumulation_steps"]
        * cfg.data_degree
        == t.batch_size
    )
    assert int(value("--global-batch-size")) == t.batch_size
    assert int(value("--micro-batch-size")) == cfg.micro_batch
    assert int(value("--tensor-model-parallel-size")) == p.tensor
    assert int(value("--pipeline-model-parallel-size")) == p.pipeline
    assert ds["zero_optimization"]["stage"] == p.zero_stage
    assert ("--use-distributed-optimizer" in args) == (p.zero_stage in (1, 2))
    assert ("--sequence-parallel" in args) == (p.sequence_mode in ("split_gather", "ring"))
    if p.sequence_mode == "all_to_all":
        assert ds["sequence_parallel_size"] == int(value("--context-parallel-size")) == p.sequence
        assert value("--cp-comm-type") == "a2a"
    spec = fw.to_colossalai(cfg)
    if p.tensor > 1:
        assert spec.kwargs["tp_size"] == ds["tensor_parallel"]["autotp_size"] == p.tensor
    if t.precision != "fp32":
        assert ds[t.precision] == {"enabled": True} and f"--{t.precision}" in args


def test_offload_needs_zero():
    cfg, procs = _cfg("dp16")
    with pytest.raises(ValueError, match="ZeRO"):
        fw.to_deepspeed(cfg, offload=True)
    with pytest.raises(ValueError, match="ZeRO"):
        fw.to_megatron(cfg, offload=True)
    cfg, _ = _cfg("zero3")
    ds, _ = fw.to_deepspeed(cfg, offload=True)
    assert ds["zero_optimization"]["offload_param"] == {"device": "cpu"}
    assert "--use-torch-fsdp2" in fw.to_megatron(cfg)[0]
    assert fw.to_colossalai(cfg).plugin == "GeminiPlugin"


def test_feature_table_complete():
    features = " ".join(row[0] for row in fw.FEATURES)
    for needed in (
        "ZeRO-1/2",
        "ZeRO-3",
        "Offload",
        "Tensor parallelism",
        "sequence parallelism",
        "Ulysses",
        "Pipeline schedules",
        "Mixture of experts",
        "Checkpoints",
        "Launcher",
        "Configuration",
    ):
        assert needed in features
    assert all(len(row) == len(fw.FEATURE_COLUMNS) and all(row) for row in fw.FEATURES)
    assert set(fw.VERSIONS) == {"Colossal-AI", "DeepSpeed", "Megatron-Core", "PyTorch"}


def test_the_distributed_optimizer_is_described_as_its_source_says():
    """Megatron's distributed optimizer shards the fp32 main weights and Adam's moments; the
    gradient buffer stays whole (Megatron-LM's docs/user-guide/features/dist_optimizer.md)."""
    row = next(r for r in fw.FEATURES if r[0].startswith("ZeRO-1/2"))
    megatron = row[3]
    assert "main weights" in megatron and "stays whole" in megatron
    assert "gradient sharding" not in " ".join(" ".join(r) for r in fw.FEATURES)


def test_colossal_feature_names_exist():
    """The Colossal-AI cells name constructor arguments that exist in 0.5.0."""
    import inspect

    from helpers.config.plugin import plugin_class

    hybrid = inspect.signature(plugin_class("HybridParallelPlugin")).parameters
    for name in (
        "tp_size",
        "sp_size",
        "zero_stage",
        "cpu_offload",
        "pp_style",
        "sequence_parallelism_mode",
    ):
        assert name in hybrid
    gemini = inspect.signature(plugin_class("GeminiPlugin")).parameters
    for name in ("placement_policy", "offload_optim_frac", "offload_param_frac"):
        assert name in gemini
    assert "cpu_offload" in inspect.signature(plugin_class("LowLevelZeroPlugin")).parameters


def test_mapping_rows():
    cfg, procs = _cfg("tiny_gpu_hybrid")
    rows = fw.mapping_rows(cfg, procs)
    assert (
        rows[0]["Megatron-LM"] == "--tensor-model-parallel-size 2"
        and rows[0]["Colossal-AI"] == "tp_size = 2"
    )
    assert rows[3]["Megatron-LM"] == "--use-distributed-optimizer"


def test_every_maintenance_fact_says_where_it_was_read():
    from datetime import date

    from helpers.chapters.ch06_frameworks import maintenance, maintenance_rows

    data = maintenance()
    assert date.fromisoformat(data["checked"])
    assert set(data["frameworks"]) == {"Colossal-AI", "DeepSpeed", "Megatron-Core", "PyTorch"}
    for facts in data["frameworks"].values():
        assert all(f["value"] and f["source"] and f["quote"] for f in facts.values())
    cai = data["frameworks"]["Colossal-AI"]
    assert cai["release"]["value"].startswith("0.5.0") and "2025" in cai["release"]["value"]
    assert "<= 2.5.1" in cai["pins"]["value"] and "4.51.3" in cai["pins"]["value"]
    assert maintenance_rows(data)[-1]["value"] == data["checked"]
