"""Chapter 4: training configuration files (helpers.config.schema, helpers.config.plugin,
helpers.config.legacy).

* YAML and dict input give the same validated TrainConfig; the bundled examples load;
* every bad config is rejected by load_config alone (no process, no torch) with one ConfigError
  whose message names the field, the value and a fix;
* the plugin mapping emits only kwargs the Colossal-AI 0.5.0 constructors accept, and
  TorchDDPPlugin is built for real from a config;
* legacy config.py files migrate (parsed, never executed), unsupported modes fail clearly;
* scaled_down shrinks degrees and the model while staying valid.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from config_edits import DEL, edited
import yaml

from helpers.config.dry_run import scaled_down, side_by_side
from helpers.parallel.errors import ConfigError
from helpers.config.legacy import migrate_legacy, migrate_to_config
from helpers.config.legacy_reader import parse_legacy
from helpers.config.loading import CONFIG_DIR, load_config
from helpers.config.plugin import check_signature, plugin_class, plugin_spec
from helpers.config.plugin_mapping import MAPPING, MAPPING_PLUGINS, mapping_rows
from helpers.config.rules import check_world
from helpers.config.schema import TrainConfig
from helpers.notebook.tables import markdown_table

ROOT = Path(__file__).resolve().parents[1]
BASE = {  # valid: 2 × 2 × 2 = 8 processes
    "parallelism": {"data": 2, "tensor": 2, "pipeline": 2, "microbatches": 4},
    "train": {"batch_size": 16, "learning_rate": 3e-4, "precision": "bf16", "save_interval": 10},
    "model": {"layers": 4, "hidden": 256, "heads": 8, "kv_heads": 4, "seq_len": 256},
}


def cfg(**sections) -> dict:
    """BASE with changes (:func:`config_edits.edited`)."""
    return edited(BASE, **sections)


# -- valid input ---------------------------------------------------------------------------------
def test_base_is_valid():
    c = load_config(BASE)
    assert (
        c.world_size() == 8
        and c.per_rank_batch == 8
        and c.micro_batch == 2
        and c.num_microbatches == 4
    )


def test_yaml_string_file_and_dict_agree(tmp_path):
    text = yaml.safe_dump(BASE)
    path = tmp_path / "run.yaml"
    path.write_text(text)
    assert load_config(text) == load_config(path) == load_config(str(path)) == load_config(BASE)


def test_seed_learning_rate_3e_4_is_a_string_in_yaml_and_still_a_float():
    assert yaml.safe_load("lr: 3e-4") == {"lr": "3e-4"}  # YAML 1.1: no dot, so not a float
    assert load_config(CONFIG_DIR / "seed_complete.yaml").train.learning_rate == pytest.approx(3e-4)


def test_the_seed_example_as_written_lacks_micro_batches():
    with pytest.raises(
        ConfigError, match=r"parallelism\.microbatches.*pipeline = 2 needs micro-batches"
    ):
        load_config("seed.yaml")
    raw = yaml.safe_load((CONFIG_DIR / "seed.yaml").read_text())
    raw["parallelism"]["microbatches"] = 8
    seed = load_config(raw, world_size=64)
    assert (seed.parallelism.data, seed.parallelism.tensor, seed.parallelism.pipeline) == (8, 4, 2)
    assert (
        seed.train.precision == "fp16"
        and seed.train.save_interval == 1000
        and seed.train.batch_size == 128
    )


@pytest.mark.parametrize(
    "name,world", [("seed_complete.yaml", 64), ("tiny_cpu.yaml", 2), ("tiny_gpu_hybrid.yaml", 8)]
)
def test_bundled_examples(name, world):
    c = load_config(name)
    assert c.world_size() == world
    assert load_config(c.to_yaml()) == c and load_config(c.to_dict()) == c


def test_data_auto_is_resolved_by_the_world_size():
    c = load_config(cfg(parallelism={"data": "auto"}))
    assert c.data_degree is None and c.world_size(16) == 16
    assert load_config(cfg(parallelism={"data": "auto"}), world_size=16).parallelism.data == 4
    with pytest.raises(ConfigError, match="data = 'auto'"):
        c.world_size()


def test_sequence_axis_counts_in_the_world_only_for_its_own_group():
    ulysses = load_config(
        cfg(
            parallelism={
                "pipeline": 1,
                "microbatches": DEL,
                "tensor": 1,
                "sequence": 2,
                "sequence_mode": "all_to_all",
            }
        )
    )
    megatron = load_config(
        cfg(parallelism={"pipeline": 1, "microbatches": DEL, "sequence_mode": "split_gather"})
    )
    assert (
        ulysses.world_size() == 4 and megatron.world_size() == 4
    )  # dp 2 × sp 2; dp 2 × tp 2 (sp shares tp)


def test_validation_needs_neither_torch_nor_colossalai():
    code = (
        "import sys; from helpers.config.loading import load_config; "
        "load_config('seed_complete.yaml', world_size=64); "
        "assert 'torch' not in sys.modules and 'colossalai' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# -- bad input: (config, world size or None, field, value as shown, fix) ---------------------------
BAD = [
    # unknown keys
    (
        "legacy key",
        cfg(parallel={"pipeline": 2}),
        None,
        "parallel",
        "{'pipeline': 2}",
        "migrate_legacy",
    ),
    (
        "typo tensor_size",
        cfg(parallelism={"tensor_size": 2}),
        None,
        "parallelism.tensor_size",
        "2",
        "did you mean 'tensor'",
    ),
    (
        "typo save_intervall",
        cfg(train={"save_intervall": 5}),
        None,
        "train.save_intervall",
        "5",
        "did you mean 'save_interval'",
    ),
    (
        "typo num_layers",
        cfg(model={"num_layers": 4}),
        None,
        "model.num_layers",
        "4",
        "did you mean 'layers'",
    ),
    (
        "axis short name dp",
        cfg(parallelism={"dp": 2}),
        None,
        "parallelism.dp",
        "2",
        "did you mean 'data'",
    ),
    ("lr", cfg(train={"lr": 1e-3}), None, "train.lr", "0.001", "did you mean 'learning_rate'"),
    (
        "optimizer section",
        cfg(optimizer={"name": "adam"}),
        None,
        "optimizer",
        "{'name': 'adam'}",
        "training script",
    ),
    # wrong types
    (
        "tensor as string",
        cfg(parallelism={"tensor": "2"}),
        None,
        "parallelism.tensor",
        "'2'",
        "tensor: 2",
    ),
    (
        "tensor as float",
        cfg(parallelism={"tensor": 2.5}),
        None,
        "parallelism.tensor",
        "2.5",
        "whole number",
    ),
    (
        "tensor as bool",
        cfg(parallelism={"tensor": True}),
        None,
        "parallelism.tensor",
        "True",
        "whole number",
    ),
    (
        "batch as list",
        cfg(train={"batch_size": [16]}),
        None,
        "train.batch_size",
        "[16]",
        "batch_size: 128",
    ),
    (
        "lr as word",
        cfg(train={"learning_rate": "fast"}),
        None,
        "train.learning_rate",
        "'fast'",
        "learning_rate: 3e-4",
    ),
    (
        "lr as bool",
        cfg(train={"learning_rate": True}),
        None,
        "train.learning_rate",
        "True",
        "learning_rate: 3e-4",
    ),
    (
        "save_interval 1e3",
        cfg(train={"save_interval": "1e3"}),
        None,
        "train.save_interval",
        "'1e3'",
        "save_interval: 1000",
    ),
    ("keep_last 0", cfg(train={"keep_last": 0}), None, "train.keep_last", "0", "keep_last: 3"),
    (
        "keep_last as word",
        cfg(train={"keep_last": "all"}),
        None,
        "train.keep_last",
        "'all'",
        "keep_last: 3",
    ),
    ("data as word", cfg(parallelism={"data": "all"}), None, "parallelism.data", "'all'", "'auto'"),
    (
        "data as quoted digits",
        cfg(parallelism={"data": "2"}),
        None,
        "parallelism.data",
        "'2'",
        "data: 2",
    ),
    (
        "section not a mapping",
        cfg(parallelism=8),
        None,
        "parallelism",
        "8",
        "indented 'key: value'",
    ),
    (
        "empty checkpoint dir",
        cfg(train={"checkpoint_dir": ""}),
        None,
        "train.checkpoint_dir",
        "''",
        "ckpt/run1",
    ),
    # negative and zero sizes
    (
        "negative tensor",
        cfg(parallelism={"tensor": -2}),
        None,
        "parallelism.tensor",
        "-2",
        "1 switches the dimension off",
    ),
    (
        "zero pipeline",
        cfg(parallelism={"pipeline": 0}),
        None,
        "parallelism.pipeline",
        "0",
        "1 switches the dimension off",
    ),
    ("zero data", cfg(parallelism={"data": 0}), None, "parallelism.data", "0", "whole number ≥ 1"),
    (
        "negative batch",
        cfg(train={"batch_size": -16}),
        None,
        "train.batch_size",
        "-16",
        "batch_size: 128",
    ),
    (
        "zero lr",
        cfg(train={"learning_rate": 0}),
        None,
        "train.learning_rate",
        "0",
        "learning_rate: 3e-4",
    ),
    (
        "negative lr",
        cfg(train={"learning_rate": -1e-3}),
        None,
        "train.learning_rate",
        "-0.001",
        "positive value",
    ),
    (
        "negative clip",
        cfg(train={"max_grad_norm": -1.0}),
        None,
        "train.max_grad_norm",
        "-1.0",
        "0 turns clipping off",
    ),
    (
        "zero stage 4",
        cfg(parallelism={"zero_stage": 4}),
        None,
        "parallelism.zero_stage",
        "4",
        "0 (off), 1, 2 and 3",
    ),
    (
        "zero stage -1",
        cfg(parallelism={"zero_stage": -1}),
        None,
        "parallelism.zero_stage",
        "-1",
        "0 (off), 1, 2 and 3",
    ),
    # choices with a suggestion
    (
        "precision fp61",
        cfg(train={"precision": "fp61"}),
        None,
        "train.precision",
        "'fp61'",
        "did you mean 'fp16'",
    ),
    (
        "precision bf61",
        cfg(train={"precision": "bf61"}),
        None,
        "train.precision",
        "'bf61'",
        "did you mean 'bf16'",
    ),
    (
        "precision FP32",
        cfg(train={"precision": "FP32"}),
        None,
        "train.precision",
        "'FP32'",
        "did you mean 'fp32'",
    ),
    (
        "precision fp8",
        cfg(train={"precision": "fp8"}),
        None,
        "train.precision",
        "'fp8'",
        "keep precision: bf16 (or fp16) and pass use_fp8=True",
    ),
    (
        "mode all2all",
        cfg(parallelism={"sequence_mode": "all2all"}),
        None,
        "parallelism.sequence_mode",
        "'all2all'",
        "did you mean 'all_to_all'",
    ),
    (
        "legacy mode name",
        cfg(parallelism={"sequence_mode": "sequence"}),
        None,
        "parallelism.sequence_mode",
        "'sequence'",
        "legacy mode names",
    ),
    ("gpt2 model", cfg(model={"kind": "gpt2"}), None, "model.kind", "'gpt2'", "causal mask"),
    # missing
    (
        "no train section",
        {k: v for k, v in BASE.items() if k != "train"},
        None,
        "train",
        "(missing)",
        "batch_size: 128",
    ),
    (
        "no learning rate",
        cfg(train={"learning_rate": DEL}),
        None,
        "train.learning_rate",
        "(missing)",
        "learning_rate: 3e-4",
    ),
    # pipeline, ZeRO and precision rules of the plugins
    (
        "pipeline without micro-batches",
        cfg(parallelism={"microbatches": DEL}),
        None,
        "parallelism.microbatches",
        "(not set)",
        "add microbatches: 4",
    ),
    (
        "micro-batches without pipeline",
        cfg(parallelism={"pipeline": 1}),
        None,
        "parallelism.microbatches",
        "4",
        "remove microbatches",
    ),
    (
        "zero 3 with pipeline",
        cfg(parallelism={"zero_stage": 3}),
        None,
        "parallelism.zero_stage",
        "3",
        "pipeline: 1",
    ),
    (
        "zero 2 with pipeline",
        cfg(parallelism={"zero_stage": 2}),
        None,
        "parallelism.zero_stage",
        "2",
        "zero_stage: 1",
    ),
    (
        "zero 3 with sequence",
        cfg(
            parallelism={
                "pipeline": 1,
                "microbatches": DEL,
                "zero_stage": 3,
                "tensor": 1,
                "sequence": 2,
                "sequence_mode": "all_to_all",
            }
        ),
        None,
        "parallelism.zero_stage",
        "3",
        "zero_stage: 1 or 2",
    ),
    (
        "zero 3 in fp32",
        cfg(
            parallelism={"pipeline": 1, "microbatches": DEL, "zero_stage": 3},
            train={"precision": "fp32"},
        ),
        None,
        "train.precision",
        "'fp32'",
        "precision: bf16",
    ),
    (
        "hybrid zero 1 in fp32",
        cfg(parallelism={"zero_stage": 1}, train={"precision": "fp32"}),
        None,
        "train.precision",
        "'fp32'",
        "zero_stage: 0",
    ),
    # model shapes
    (
        "tensor vs heads",
        cfg(parallelism={"tensor": 3}, model={"kv_heads": DEL}),
        None,
        "parallelism.tensor",
        "3",
        "try tensor 2 or 4",
    ),
    (
        "tensor vs kv heads",
        cfg(parallelism={"tensor": 4}, model={"kv_heads": 2}),
        None,
        "parallelism.tensor",
        "4",
        "model.kv_heads = 2",
    ),
    (
        "kv heads vs heads",
        cfg(model={"kv_heads": 3}),
        None,
        "model.kv_heads",
        "3",
        "try kv_heads 2 or 4",
    ),
    ("hidden vs heads", cfg(model={"hidden": 250}), None, "model.hidden", "250", "multiple of 8"),
    (
        "layers vs pipeline",
        cfg(model={"layers": 5}),
        None,
        "parallelism.pipeline",
        "2",
        "try pipeline 1 or 5",
    ),
    (
        "sequence vs heads",
        cfg(
            parallelism={
                "pipeline": 1,
                "microbatches": DEL,
                "sequence": 8,
                "sequence_mode": "all_to_all",
            }
        ),
        None,
        "parallelism.sequence",
        "8",
        "try sequence 1 or 2",
    ),
    (
        "sequence vs kv heads",
        cfg(
            parallelism={
                "pipeline": 1,
                "microbatches": DEL,
                "tensor": 1,
                "sequence": 8,
                "sequence_mode": "all_to_all",
            }
        ),
        None,
        "parallelism.sequence",
        "8",
        "model.kv_heads / (tensor × sequence) = 4 / 8",
    ),
    (
        "seq_len vs sequence",
        cfg(
            parallelism={
                "pipeline": 1,
                "microbatches": DEL,
                "tensor": 1,
                "sequence": 2,
                "sequence_mode": "all_to_all",
            },
            model={"seq_len": 255},
        ),
        None,
        "model.seq_len",
        "255",
        "multiple of 2",
    ),
    (
        "seq_len vs ring_attn zigzag",
        cfg(
            parallelism={
                "pipeline": 1,
                "microbatches": DEL,
                "tensor": 1,
                "sequence": 4,
                "sequence_mode": "ring_attn",
            },
            model={"seq_len": 252},
        ),
        None,
        "model.seq_len",
        "252",
        "multiple of 8",
    ),
    # batch arithmetic
    (
        "batch vs data",
        cfg(train={"batch_size": 15}),
        None,
        "train.batch_size",
        "15",
        "multiple of 2",
    ),
    (
        "micro-batch size vs per-rank batch",
        cfg(parallelism={"microbatches": DEL}, train={"micro_batch_size": 3}),
        None,
        "train.micro_batch_size",
        "3",
        "use a divisor of 8",
    ),
    (
        "micro-batches vs per-rank batch",
        cfg(parallelism={"microbatches": 3}),
        None,
        "parallelism.microbatches",
        "3",
        "use microbatches 2 or 4",
    ),
    # sequence parallelism
    (
        "sequence without mode",
        cfg(parallelism={"pipeline": 1, "microbatches": DEL, "sequence": 2}),
        None,
        "parallelism.sequence",
        "2",
        "add sequence_mode",
    ),
    (
        "split_gather without tensor",
        cfg(
            parallelism={
                "pipeline": 1,
                "microbatches": DEL,
                "tensor": 1,
                "sequence_mode": "split_gather",
            }
        ),
        None,
        "parallelism.sequence_mode",
        "'split_gather'",
        "set tensor: 2",
    ),
    (
        "split_gather with its own degree",
        cfg(
            parallelism={
                "pipeline": 1,
                "microbatches": DEL,
                "sequence": 4,
                "sequence_mode": "split_gather",
            }
        ),
        None,
        "parallelism.sequence",
        "4",
        "remove sequence",
    ),
    (
        "all_to_all of one",
        cfg(parallelism={"pipeline": 1, "microbatches": DEL, "sequence_mode": "all_to_all"}),
        None,
        "parallelism.sequence",
        "1",
        "set sequence: 2",
    ),
    # world size
    ("world mismatch", BASE, 4, "parallelism", "data=2", "set data: 1"),
    (
        "world mismatch, no fit",
        BASE,
        10,
        "parallelism",
        "data=2",
        "use 8 processes (10 is not a multiple of tensor=2 × pipeline=2 = 4)",
    ),
    (
        "world not divisible (the seed's 64)",
        cfg(
            parallelism={"data": "auto", "tensor": 3},
            model={"heads": 24, "kv_heads": DEL, "hidden": 768},
        ),
        64,
        "parallelism",
        "tensor=3",
        "try tensor 2 or 4",
    ),
]


@pytest.mark.parametrize(
    "config,world,field,value,fix", [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_config_names_field_value_and_fix(config, world, field, value, fix):
    with pytest.raises(ConfigError) as info:
        load_config(config, world_size=world)
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert msg.startswith(field), f"field {field!r} not first in: {msg}"
    assert value in msg, f"value {value!r} not in: {msg}"
    assert fix in msg, f"fix {fix!r} not in: {msg}"


def test_the_issue_s_example_message_word_for_word():
    bad = cfg(
        parallelism={"data": "auto", "tensor": 3},
        model={"heads": 24, "kv_heads": DEL, "hidden": 768},
    )
    with pytest.raises(ConfigError) as info:
        load_config(bad, world_size=64)
    assert str(info.value) == (
        "parallelism: 64 GPUs cannot be split as tensor=3 × pipeline=2 (6 does not divide 64); "
        "try tensor 2 or 4"
    )


YAML_BAD = [
    (
        "duplicate key",
        "parallelism:\n  tensor: 2\n  tensor: 4\ntrain:\n  batch_size: 8\n  learning_rate: 1e-3\n",
        "tensor appears twice",
        "delete one",
    ),
    (
        "bad indentation",
        "parallelism:\n  data: 2\n tensor: 2\n",
        "YAML syntax error at line",
        "indentation",
    ),
    (
        "a list, not a mapping",
        "- data: 2\n- tensor: 2\n",
        "must be a mapping",
        "start the file with 'parallelism:'",
    ),
    ("missing file", "no_such_config.yaml", "'no_such_config.yaml' not found", "bundled examples"),
    (
        "the seed's line, flattened",
        "parallelism:  data: 8  tensor: 4  pipeline: 2train:  batch_size: 128",
        "YAML syntax error",
        "':' after every key",
    ),
]


@pytest.mark.parametrize("text,what,fix", [b[1:] for b in YAML_BAD], ids=[b[0] for b in YAML_BAD])
def test_bad_yaml(text, what, fix):
    with pytest.raises(ConfigError) as info:
        load_config(text)
    assert what in str(info.value) and fix in str(info.value), str(info.value)


def test_at_least_forty_bad_configs():
    assert len(BAD) + len(YAML_BAD) >= 40


def test_check_world_directly():
    c = load_config(BASE)
    check_world(c, 8)
    with pytest.raises(ConfigError, match="needs 8 processes, but 16 were requested; set data: 4"):
        check_world(c, 16)


# -- plugin mapping ------------------------------------------------------------------------------
SPECS = {  # config → expected plugin
    "tiny_cpu": (load_config("tiny_cpu.yaml"), "TorchDDPPlugin"),
    "ddp fp16": (
        load_config(
            cfg(
                parallelism={"tensor": 1, "pipeline": 1, "microbatches": DEL},
                train={"precision": "fp16"},
            )
        ),
        "TorchDDPPlugin",
    ),
    "ddp bf16": (
        load_config(cfg(parallelism={"tensor": 1, "pipeline": 1, "microbatches": DEL})),
        "HybridParallelPlugin",
    ),
    "zero 1": (
        load_config(
            cfg(
                parallelism={"tensor": 1, "pipeline": 1, "microbatches": DEL, "zero_stage": 1},
                train={"precision": "fp32"},
            )
        ),
        "LowLevelZeroPlugin",
    ),
    "zero 2 clip": (
        load_config(
            cfg(
                parallelism={"tensor": 1, "pipeline": 1, "microbatches": DEL, "zero_stage": 2},
                train={"max_grad_norm": 1.0},
            )
        ),
        "LowLevelZeroPlugin",
    ),
    "zero 3": (
        load_config(
            cfg(parallelism={"tensor": 1, "pipeline": 1, "microbatches": DEL, "zero_stage": 3})
        ),
        "GeminiPlugin",
    ),
    "zero 3 tp": (
        load_config(cfg(parallelism={"pipeline": 1, "microbatches": DEL, "zero_stage": 3})),
        "GeminiPlugin",
    ),
    "tp pp": (load_config(BASE), "HybridParallelPlugin"),
    "tp pp micro size": (
        load_config(cfg(parallelism={"microbatches": DEL}, train={"micro_batch_size": 2})),
        "HybridParallelPlugin",
    ),
    "tp split_gather": (
        load_config(
            cfg(
                parallelism={
                    "pipeline": 1,
                    "microbatches": DEL,
                    "sequence_mode": "split_gather",
                    "zero_stage": 2,
                }
            )
        ),
        "HybridParallelPlugin",
    ),
    "ulysses": (
        load_config(
            cfg(
                parallelism={
                    "pipeline": 1,
                    "microbatches": DEL,
                    "tensor": 1,
                    "sequence": 2,
                    "sequence_mode": "all_to_all",
                }
            )
        ),
        "HybridParallelPlugin",
    ),
    "ring_attn": (
        load_config(
            cfg(
                parallelism={
                    "pipeline": 1,
                    "microbatches": DEL,
                    "tensor": 1,
                    "sequence": 2,
                    "sequence_mode": "ring_attn",
                }
            )
        ),
        "HybridParallelPlugin",
    ),
    "seed": (load_config("seed_complete.yaml"), "HybridParallelPlugin"),
    "tiny_gpu_hybrid": (load_config("tiny_gpu_hybrid.yaml"), "HybridParallelPlugin"),
}


@pytest.mark.parametrize("name", SPECS)
def test_plugin_kwargs_bind_to_the_constructor(name):
    config, plugin = SPECS[name]
    spec = plugin_spec(config)
    assert spec.plugin == plugin
    check_signature(spec)  # raises TypeError on a kwarg the constructor does not take
    params = inspect.signature(plugin_class(spec.plugin)).parameters
    assert set(spec.kwargs) <= set(params)


def test_plugin_details():
    hybrid = plugin_spec(load_config(BASE))
    assert hybrid.kwargs == {
        "tp_size": 2,
        "pp_size": 2,
        "precision": "bf16",
        "zero_stage": 0,
        "num_microbatches": 4,
    }
    ulysses = plugin_spec(SPECS["ulysses"][0]).kwargs
    assert ulysses["sp_size"] == 2 and ulysses["sequence_parallelism_mode"] == "all_to_all"
    assert (
        "sp_size" not in plugin_spec(SPECS["tp split_gather"][0]).kwargs
    )  # split_gather reuses the tp group
    assert plugin_spec(SPECS["tp pp micro size"][0]).kwargs["microbatch_size"] == 2
    assert plugin_spec(SPECS["ddp fp16"][0]).booster_kwargs == {"mixed_precision": "fp16"}
    assert plugin_spec(SPECS["zero 2 clip"][0]).kwargs == {
        "stage": 2,
        "precision": "bf16",
        "max_norm": 1.0,
    }
    assert plugin_spec(SPECS["zero 3 tp"][0]).kwargs == {"precision": "bf16", "tp_size": 2}
    assert "flash-attn" in plugin_spec(SPECS["ring_attn"][0]).notes[0]


def test_booster_bf16_is_broken_in_colossalai_050_hence_the_hybrid_plugin():
    from colossalai.booster.mixed_precision import mixed_precision_factory

    with pytest.raises(TypeError, match="abstract"):
        mixed_precision_factory("bf16")


def test_torch_ddp_plugin_is_built_for_real(tmp_path):
    import torch
    import torch.distributed as dist
    from colossalai.booster import Booster

    from helpers.config.plugin import build_plugin

    dist.init_process_group(
        "gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1
    )
    try:
        plugin, booster, _ = build_plugin(
            load_config("tiny_cpu.yaml").with_changes({"parallelism": {"data": 1}})
        )
        assert type(plugin).__name__ == "TorchDDPPlugin" and isinstance(booster, Booster)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt, *_ = booster.boost(model, opt)
        loss = model(torch.ones(3, 4)).sum()
        booster.backward(loss, opt)
        opt.step()
        del model, opt, booster, plugin
    finally:
        dist.destroy_process_group()


def test_mapping_table_names_only_real_kwargs():
    for row in MAPPING:
        for plugin, cell in zip(MAPPING_PLUGINS, row[1:]):
            names = re.findall(r"(\w+)=", cell)  # 'tp_size=' names a kwarg; ' = ' is prose
            if plugin == "TorchDDPPlugin":
                continue  # its '=' cell is Booster(mixed_precision=)
            params = inspect.signature(plugin_class(plugin)).parameters
            assert all(n in params for n in names), (plugin, cell)
    assert (
        "mixed_precision"
        in inspect.signature(
            __import__("colossalai.booster", fromlist=["Booster"]).Booster
        ).parameters
    )
    rows = mapping_rows()
    assert rows[0]["config"] == "parallelism.data" and len(rows) == len(MAPPING)
    assert markdown_table(rows, ["config", *MAPPING_PLUGINS]).count("\n") == len(rows) + 1


# -- legacy migration ----------------------------------------------------------------------------
def test_legacy_sequence_config_from_the_seed():
    config, notes = migrate_to_config(
        CONFIG_DIR / "legacy_sequence.py", extra={"train": {"learning_rate": 1e-4}}
    )
    p = config.parallelism
    assert (p.tensor, p.pipeline, p.sequence, p.sequence_mode, p.microbatches) == (
        1,
        1,
        2,
        "all_to_all",
        None,
    )
    assert (
        config.train.precision == "fp16"
        and config.train.batch_size == 32
        and config.train.steps == 10
    )
    assert (config.model.layers, config.model.hidden, config.model.heads, config.model.seq_len) == (
        4,
        128,
        4,
        128,
    )
    text = "\n".join(notes)
    assert "gradient_handler" in text and "legacy engine" in text
    assert "NUM_MICRO_BATCHES = 4 dropped" in text and "AMP_TYPE.NAIVE" in text
    assert config.world_size(8) == 8 and plugin_spec(config).kwargs["sp_size"] == 2


def test_legacy_1d_with_pipeline():
    config, notes = migrate_to_config(CONFIG_DIR / "legacy_hybrid_1d.py", world_size=8)
    p = config.parallelism
    assert (p.data, p.tensor, p.pipeline, p.microbatches) == (2, 2, 2, 4)
    assert (
        config.train.batch_size == 16
        and config.train.max_grad_norm == 1.0
        and config.model.seq_len == 1024
    )
    assert any("per data rank" in n for n in notes) and any(
        "NUM_EPOCHS dropped" in n for n in notes
    )


def test_legacy_short_form_from_the_issue():
    new, _ = migrate_legacy(
        'parallel = dict(pipeline=2, tensor=dict(size=2, mode="1d"))\nNUM_MICRO_BATCHES = 4'
    )
    assert new["parallelism"] == {"data": "auto", "pipeline": 2, "tensor": 2, "microbatches": 4}


def test_legacy_is_parsed_never_executed(tmp_path):
    marker = tmp_path / "ran"
    text = (
        f"import os\nos.system('touch {marker}')\nopen({str(marker)!r}, 'w')\n"
        "X = __import__('os')\nLR = 1e-3\n"
    )
    names, skipped = parse_legacy(text)
    assert not marker.exists()
    assert names["LR"] == 1e-3 and len(skipped) == 2 and "never executed" in skipped[0]


def test_legacy_arithmetic_and_names_are_evaluated():
    names, _ = parse_legacy(
        "IMG = 224\nPATCH = 16\nSEQ_LENGTH = (IMG // PATCH) ** 2 + 1\nP = dict(a=-1, b=[1, 2])"
    )
    assert names["SEQ_LENGTH"] == 197 and names["P"] == {"a": -1, "b": [1, 2]}


LEGACY_BAD = [
    (
        "2d",
        'parallel = dict(tensor=dict(size=4, mode="2d"))',
        "parallel.tensor.mode = '2d'",
        "use mode '1d'",
    ),
    (
        "2.5d",
        'parallel = dict(tensor=dict(size=8, mode="2.5d", depth=2))',
        "parallel.tensor.mode = '2.5d'",
        "parallelism.tensor: 8",
    ),
    (
        "3d",
        "parallel = dict(tensor=dict(mode='3d', size=8))",
        "parallel.tensor.mode = '3d'",
        "colossalai.legacy",
    ),
    (
        "mode typo",
        'parallel = dict(tensor=dict(size=2, mode="sequnce"))',
        "parallel.tensor.mode = 'sequnce'",
        "only '1d' and 'sequence' map",
    ),
    (
        "per-rank batch",
        "BATCH_SIZE = 4\nparallel = dict(pipeline=2)",
        "BATCH_SIZE = 4",
        "pass world_size",
    ),
    (
        "call",
        "parallel = dict(pipeline=get_pp())",
        "parallel.pipeline = get_pp() (line 1)",
        "write the number",
    ),
    ("bad degree", "parallel = dict(pipeline=0)", "parallel.pipeline = 0", "pipeline=2"),
    (
        "unknown parallel key",
        "parallel = dict(expert=4)",
        "parallel.expert = 4",
        "expected pipeline and tensor",
    ),
    ("syntax", "parallel = dict(pipeline=2", "legacy config line 1", "fix the file"),
]


@pytest.mark.parametrize(
    "text,what,fix", [b[1:] for b in LEGACY_BAD], ids=[b[0] for b in LEGACY_BAD]
)
def test_legacy_bad(text, what, fix):
    with pytest.raises(ConfigError) as info:
        migrate_legacy(text)
    assert what in str(info.value) and fix in str(info.value), str(info.value)


def test_legacy_without_learning_rate_says_how_to_add_it():
    with pytest.raises(
        ConfigError, match=r"train\.learning_rate.*extra=\{'train': \{'learning_rate'"
    ):
        migrate_to_config(CONFIG_DIR / "legacy_sequence.py")


# -- validate small, then scale -------------------------------------------------------------------
def test_scaled_down_seed():
    full = load_config("seed_complete.yaml")
    small = {n: scaled_down(full, n) for n in (1, 2, 4, 8, 64)}
    degrees = {
        n: (c.parallelism.data, c.parallelism.tensor, c.parallelism.pipeline)
        for n, c in small.items()
    }
    assert degrees == {1: (1, 1, 1), 2: (1, 2, 1), 4: (1, 2, 2), 8: (2, 2, 2), 64: (8, 4, 2)}
    for n, c in small.items():
        assert c.world_size() <= n and c.train.steps == 1 and c.train.save_interval == 1
        assert c.model.kind == "llama" and c.model.hidden <= 128 and c.train.precision == "fp16"
        check_signature(plugin_spec(c))
    assert small[4].parallelism.microbatches == 4 and small[4].train.batch_size == 8


def test_scaled_down_keeps_sequence_mode_and_gqa():
    full = load_config(
        cfg(
            parallelism={
                "data": 4,
                "pipeline": 1,
                "microbatches": DEL,
                "tensor": 2,
                "sequence": 4,
                "sequence_mode": "all_to_all",
            },
            model={"heads": 16, "kv_heads": 8, "hidden": 512},
        )
    )
    small = scaled_down(full, 4)
    p, m = small.parallelism, small.model
    assert (p.data, p.tensor, p.sequence, p.sequence_mode) == (1, 2, 2, "all_to_all")
    assert (
        m.kv_heads is not None and m.kv_heads < m.heads and m.heads % 4 == 0 and m.seq_len % 2 == 0
    )
    assert (
        scaled_down(full, 2).parallelism.sequence_mode is None
    )  # no room for sp: the mode goes with it
    sg = load_config(
        cfg(
            parallelism={
                "pipeline": 1,
                "microbatches": DEL,
                "tensor": 4,
                "sequence_mode": "split_gather",
            }
        )
    )
    assert scaled_down(sg, 2).parallelism.sequence_mode == "split_gather"


def test_scaled_down_auto_data_and_bad_budget():
    full = load_config(cfg(parallelism={"data": "auto"}))
    assert scaled_down(full, 16).world_size() == 16
    with pytest.raises(ValueError, match="at least 1"):
        scaled_down(full, 0)


def test_side_by_side():
    full = load_config("seed_complete.yaml")
    rows = {r["field"]: r for r in side_by_side(full, scaled_down(full, 2))}
    assert rows["parallelism.tensor"]["full"] == 4 and rows["parallelism.tensor"]["dry run"] == 2
    assert rows["world size"]["full"] == 64 and rows["world size"]["dry run"] == 2
    assert "train.learning_rate" not in rows  # unchanged fields are left out


def test_trainconfig_is_frozen_and_with_changes_validates():
    c = load_config(BASE)
    with pytest.raises(Exception):
        c.train.batch_size = 3
    assert c.with_changes({"train": {"batch_size": 32}}).per_rank_batch == 16
    with pytest.raises(ConfigError, match="train.batch_size = 31"):
        c.with_changes({"train": {"batch_size": 31}})
    assert isinstance(TrainConfig.model_validate(BASE), TrainConfig)


# -- the chapter page agrees with the code ---------------------------------------------------------
PAGE = ROOT / "book" / "04_config.md"


def test_page_field_table_lists_exactly_the_schema():
    rows = re.findall(r"^\|\s*(`\w+`)?\s*\|\s*`(\w+)`\s*\|", PAGE.read_text(), re.MULTILINE)
    listed, section = [], None
    for sec, name in rows:
        section = sec.strip("`") or section
        listed.append(f"{section}.{name}")
    schema = [
        f"{s}.{f}"
        for s, info in TrainConfig.model_fields.items()
        for f in info.annotation.model_fields
    ]
    assert listed == schema


def test_page_exercise_answers():
    from helpers.config.legacy import migrate_to_config

    combos = []
    for t in range(1, 9):
        for p in range(1, 9):
            raw = {
                "parallelism": {
                    "data": "auto",
                    "tensor": t,
                    "pipeline": p,
                    **({"microbatches": p} if p > 1 else {}),
                },
                "train": {"batch_size": 64 * p, "learning_rate": 1e-3},
                "model": {"heads": 40, "kv_heads": 8, "layers": 60, "hidden": 40 * 64},
            }
            try:
                c = load_config(raw, world_size=32)
            except ConfigError:
                continue
            combos.append((c.parallelism.data, t, p))
    assert len(combos) == 12 and (1, 8, 4) in combos and (2, 4, 4) in combos  # exercise 1
    with pytest.raises(ConfigError, match="e.g. 496"):  # exercise 2
        load_config(
            {
                "parallelism": {"data": 16, "pipeline": 2, "microbatches": 8},
                "train": {"batch_size": 500, "learning_rate": 1e-3},
            }
        )
    legacy = (
        'parallel = dict(pipeline=4, tensor=dict(size=2, mode="1d"))\n'
        "BATCH_SIZE = 4\nNUM_MICRO_BATCHES = 8\n"
        "LEARNING_RATE = 1e-4\nNUM_LAYERS = 32\nNUM_HEADS = 32\nHIDDEN_SIZE = 4096"
    )
    with pytest.raises(
        ConfigError, match=r"microbatches = 8.*use microbatches 4 or change"
    ):  # exercise 4
        migrate_to_config(legacy, world_size=64)
    p = scaled_down(load_config("seed_complete.yaml"), 4).parallelism  # exercise 5
    assert (p.data, p.tensor, p.pipeline) == (1, 2, 2)
