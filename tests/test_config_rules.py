"""Chapter 4's one rule table (helpers.config.rules.RULES) against Chapter 2's layout rules
(helpers.parallel.layouts.violations), and a set of bad configs written as an adversary would.

* every rule a layout can break is also rejected by load_config, before any process starts;
* over a grid of layouts, a layout has violations exactly when its config is rejected;
* the pipeline with fewer micro-batches than stages is refused by all three routes (Colossal-AI's
  1F1B asserts it only at the first step, colossalai/pipeline/schedule/one_f_one_b.py:93);
* inf and NaN are refused with their own message; fp8 and overlap_communication get hints that
  say what to do;
* each adversarial config fails at load with the field first, the value and a fix.
"""

from __future__ import annotations

import itertools
import math

import pytest
from config_edits import DEL, edited

from helpers.parallel.errors import ConfigError
from helpers.parallel.layout_rules import LAYOUT_RULES, layout_case
from helpers.config.loading import load_config
from helpers.config.plugin import check_signature, plugin_spec
from helpers.config.rules import RULES
from helpers.models.shape import ModelShape
from helpers.parallel.layouts import Layout, violations
from helpers.parallel.vocab import OWN_AXIS_SP_MODES

GOOD = {  # valid: data 2 × tensor 2 × pipeline 2 = 8 processes, ZeRO-1, bf16
    "parallelism": {"data": 2, "tensor": 2, "pipeline": 2, "zero_stage": 1, "microbatches": 4},
    "train": {"batch_size": 16, "learning_rate": 1e-3, "precision": "bf16"},
    "model": {"layers": 4, "hidden": 256, "heads": 8, "kv_heads": 4, "seq_len": 256},
}


def edit(**sections) -> dict:
    """GOOD with changes (:func:`config_edits.edited`)."""
    return edited(GOOD, **sections)


def rejection(config, world=None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(config, world_size=world)
    return info.value


def test_good_is_valid_and_the_table_holds_every_layout_rule_once():
    load_config(GOOD, world_size=8)
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    assert [r for r in RULES if r.layout] == LAYOUT_RULES  # violations reads the same objects


# one config per rule of LAYOUT_RULES, and the rule of the table that rejects it
NO_PIPE = {"pipeline": 1, "microbatches": DEL}
BREAKS = {
    "shared sequence mode needs tensor": (
        edit(parallelism={**NO_PIPE, "tensor": 1, "sequence_mode": "split_gather"}),
        "shared sequence mode needs tensor",
    ),
    "sequence degree needs its mode": (
        edit(parallelism={**NO_PIPE, "sequence": 2}),
        "sequence degree needs its mode",
    ),
    # zero_stage ≥ 4 is refused by the schema, and a config with 3 gets GeminiPlugin, not
    # HybridParallelPlugin: with a pipeline, Gemini's own rule rejects it
    "HybridParallelPlugin's ZeRO stages": (
        edit(parallelism={"zero_stage": 3}),
        "GeminiPlugin has no pipeline",
    ),
    "ZeRO 0 or 1 with a pipeline": (
        edit(parallelism={"zero_stage": 2}),
        "ZeRO 0 or 1 with a pipeline",
    ),
    "a pipeline needs micro-batches": (
        edit(parallelism={"microbatches": DEL}),
        "a pipeline needs micro-batches",
    ),
    "heads split over T (× S for all_to_all)": (
        edit(parallelism={"tensor": 3}, model={"kv_heads": DEL}),
        "heads split over T (× S for all_to_all)",
    ),
    "KV heads split over T (× S for all_to_all)": (
        edit(parallelism={"tensor": 4}, model={"kv_heads": 2}),
        "KV heads split over T (× S for all_to_all)",
    ),
    "layers split evenly over P": (
        edit(model={"layers": 5}),
        "layers split evenly over P",
    ),
    "sequence length split over the sequence ranks": (
        edit(
            parallelism={**NO_PIPE, "tensor": 1, "sequence": 4, "sequence_mode": "ring_attn"},
            model={"seq_len": 252},
        ),
        "sequence length split over the sequence ranks",
    ),
    "B = D × m × b in whole micro-batches": (
        edit(parallelism={"microbatches": DEL}, train={"micro_batch_size": 3}),
        "B = D × m × b in whole micro-batches",
    ),
    "at least as many micro-batches as stages": (
        edit(parallelism={"microbatches": 1}),
        "at least as many micro-batches as stages",
    ),
}


def layout_of(raw: dict) -> tuple[Layout, ModelShape, int]:
    """The HybridParallelPlugin layout, model shape and global batch a raw config describes."""
    p, t = raw["parallelism"], raw["train"]
    mode, mbs = p.get("sequence_mode"), t.get("micro_batch_size")
    if mbs is None and p.get("microbatches"):
        mbs = t["batch_size"] // p["data"] // p["microbatches"] or None
    m = raw["model"]
    shape = ModelShape.llama(m["layers"], m["hidden"], m["heads"], m.get("kv_heads"), 512,
                             seq_len=m["seq_len"])  # fmt: skip
    own = p.get("sequence", 1) if mode in OWN_AXIS_SP_MODES or mode is None else 1
    layout = Layout(p["data"], p.get("tensor", 1), p.get("pipeline", 1), own, mode, mbs,
                    p.get("zero_stage", 0))  # fmt: skip
    return layout, shape, t["batch_size"]


def test_every_layout_rule_is_broken_by_one_example():
    assert sorted(BREAKS) == sorted(r.name for r in LAYOUT_RULES)


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_every_layout_rule_rejects_at_load_time(name):
    config, rejected_by = BREAKS[name]
    rule = next(r for r in LAYOUT_RULES if r.name == name)
    assert rejection(config).rule == rejected_by
    layout, shape, batch = layout_of(config)  # and violations names the same rule
    reasons = violations(layout, shape, batch)
    assert reasons, (name, layout)
    if rejected_by == name:
        assert rule.reason(layout_case(layout, shape, batch)) in reasons


GRID = list(
    itertools.product(
        (1, 2),  # dp
        (1, 2, 3, 4),  # tp
        (1, 2, 4),  # pp
        (None, "split_gather", "all_to_all", "ring_attn"),
        (1, 2),  # sp (own axis, or a degree without a mode)
        (0, 1, 2),  # ZeRO
        (None, 1, 2, 4),  # micro-batch size
        (8, 16),  # global batch
    )
)


def test_a_layout_breaks_a_rule_exactly_when_its_config_is_rejected():
    model = {"layers": 4, "hidden": 256, "heads": 8, "kv_heads": 4, "seq_len": 254}
    shape = ModelShape.llama(4, 256, 8, 4, 512, seq_len=254)
    checked = 0
    for dp, tp, pp, mode, sp, zero, mbs, batch in GRID:
        if mode == "split_gather" and sp > 1 or mode in OWN_AXIS_SP_MODES and sp == 1:
            continue  # a config writes these as sequence = T, or not at all
        raw = {
            "parallelism": {"data": dp, "tensor": tp, "pipeline": pp, "sequence": sp,
                            "sequence_mode": mode, "zero_stage": zero},
            "train": {"batch_size": batch, "learning_rate": 1e-3, "precision": "bf16",
                      "micro_batch_size": mbs},
            "model": model,
        }  # fmt: skip
        broken = violations(Layout(dp, tp, pp, sp, mode, mbs, zero), shape, batch)
        try:
            load_config(raw)
            rejected = None
        except ConfigError as e:
            rejected = str(e)
        assert bool(broken) == bool(rejected), (raw, broken, rejected)
        checked += 1
    assert checked > 1000


# -- fewer micro-batches than stages, by three routes ---------------------------------------------
@pytest.mark.parametrize(
    "changes, field, value",
    [
        ({"parallelism": {"pipeline": 4, "microbatches": 2}}, "parallelism.microbatches", "2"),
        (
            {"parallelism": {"pipeline": 4, "microbatches": DEL}, "train": {"micro_batch_size": 4}},
            "train.micro_batch_size",
            "4",
        ),
        ({"parallelism": {"pipeline": 2, "microbatches": 1}}, "parallelism.microbatches", "1"),
        (  # data: auto, no world size yet: the count alone is enough to refuse it
            {"parallelism": {"data": "auto", "pipeline": 2, "microbatches": 1}},
            "parallelism.microbatches",
            "1",
        ),
    ],
    ids=[
        "microbatches 2, pipeline 4",
        "micro_batch_size → 2",
        "microbatches 1, pipeline 2",
        "auto",
    ],
)
def test_fewer_micro_batches_than_stages(changes, field, value):
    e = rejection(edit(**changes))
    msg = str(e)
    assert msg.startswith(f"{field} = {value}:"), msg
    assert "one_f_one_b.py:93" in msg and "stages" in msg, msg
    fix = msg.rsplit("; ", 1)[1]
    assert fix.startswith("use "), msg


def test_the_suggested_fix_passes():
    e = rejection(edit(parallelism={"pipeline": 4, "microbatches": 2}))
    assert "use microbatches 4 or more" in str(e)
    load_config(edit(parallelism={"pipeline": 4, "microbatches": 4}))
    e = rejection(edit(parallelism={"pipeline": 4, "microbatches": DEL},
                       train={"micro_batch_size": 4}))  # fmt: skip
    assert "use micro_batch_size 2 or smaller" in str(e)
    load_config(edit(parallelism={"pipeline": 4, "microbatches": DEL},
                     train={"micro_batch_size": 2}))  # fmt: skip


# -- numbers that are not finite ------------------------------------------------------------------
@pytest.mark.parametrize(
    "key, value",
    [
        ("learning_rate", math.inf),
        ("learning_rate", -math.inf),
        ("learning_rate", math.nan),
        ("learning_rate", "inf"),
        ("learning_rate", "nan"),
        ("learning_rate", "1e999"),
        ("max_grad_norm", math.inf),
        ("max_grad_norm", math.nan),
    ],
)
def test_non_finite_numbers(key, value):
    msg = str(rejection(edit(train={key: value})))
    assert msg.startswith(f"train.{key} = "), msg
    assert "not a finite number" in msg and "must be >" not in msg, msg


def test_yaml_inf_and_nan():
    text = "train:\n  batch_size: 8\n  learning_rate: {}\n"
    for word in (".inf", ".nan", ".NaN", "-.Inf"):
        assert "not a finite number" in str(rejection(text.format(word))), word


# -- hints that say what to do --------------------------------------------------------------------
def test_fp8_says_what_fp8_needs():
    msg = str(rejection(edit(train={"precision": "fp8"})))
    assert "fp32" not in msg.split("valid:")[0], msg  # no "did you mean 'fp32'?"
    for words in ("use_fp8=True", "fp8_communication=True", "precision: bf16", "8.9"):
        assert words in msg, msg
    msg = str(rejection(edit(parallelism={"use_fp8": True})))
    assert msg.startswith("parallelism.use_fp8 = True: unknown key") and "use_fp8=True" in msg


def test_overlap_communication_is_a_real_key_where_the_plugin_takes_it():
    zero2 = load_config(
        edit(parallelism={**NO_PIPE, "tensor": 1, "data": 8, "zero_stage": 2,
                          "overlap_communication": False})
    )  # fmt: skip
    hybrid = load_config(edit(parallelism={"overlap_communication": False}))
    for cfg, plugin in ((zero2, "LowLevelZeroPlugin"), (hybrid, "HybridParallelPlugin")):
        spec = plugin_spec(cfg)
        assert spec.plugin == plugin and spec.kwargs["overlap_communication"] is False
        check_signature(spec)  # a keyword of the 0.5.0 constructor
    assert "overlap_communication" not in plugin_spec(load_config(GOOD)).kwargs


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"parallelism": {"zero_stage": 0, "overlap_communication": True}}, "ZeRO optimizer only"),
        (
            {"parallelism": {**NO_PIPE, "tensor": 1, "zero_stage": 0,
                             "overlap_communication": True}, "train": {"precision": "fp32"}},
            "DDP always overlaps",
        ),
        (
            {"parallelism": {**NO_PIPE, "tensor": 1, "zero_stage": 3,
                             "overlap_communication": True}},
            "enable_async_reduce",
        ),
        ({"train": {"overlap_communication": True}}, "it is a parallelism key"),
        ({"parallelism": {"overlap_comm": True}}, "DeepSpeed's overlap_comm"),
    ],
)  # fmt: skip
def test_overlap_communication_elsewhere_says_where_it_goes(changes, says):
    msg = str(rejection(edit(**changes)))
    assert says in msg and "remove it" not in msg.split(";")[0], msg


# -- an adversary's configs: (id, config, world size, field first, words of the fix) -------------
ADVERSARY = [
    ("empty file", "", None, "config", "start the file with 'parallelism:'"),
    ("a number", "42", None, "config", "must be a mapping"),
    ("a string", "tensor parallel please", None, "config", "must be a mapping"),
    ("no sections", {}, None, "train", "batch_size: 128"),
    ("train is null", edit(train=None), None, "train", "indented 'key: value'"),
    ("train is a list", edit(train=[16, 1e-3]), None, "train", "indented 'key: value'"),
    ("empty train", {**GOOD, "train": {}}, None, "train.batch_size", "(missing)"),
    ("top-level typo", {**GOOD, "Parallelism": GOOD["parallelism"]}, None, "Parallelism",
     "did you mean 'parallelism'"),
    ("plugin section", {**GOOD, "plugin": "gemini"}, None, "plugin", "valid keys"),
    ("batch 0", edit(train={"batch_size": 0}), None, "train.batch_size", "≥ 1"),
    ("batch -8", edit(train={"batch_size": -8}), None, "train.batch_size", "positive value"),
    ("batch 1.5", edit(train={"batch_size": 1.5}), None, "train.batch_size", "whole number"),
    ("batch '16'", edit(train={"batch_size": "16"}), None, "train.batch_size", "write the digits"),
    ("batch true", edit(train={"batch_size": True}), None, "train.batch_size", "whole number"),
    ("batch null", edit(train={"batch_size": None}), None, "train.batch_size", "batch_size: 128"),
    ("batch huge, odd", edit(train={"batch_size": 10**18 + 1}), None, "train.batch_size",
     "multiple of 2"),
    ("lr 0", edit(train={"learning_rate": 0.0}), None, "train.learning_rate", "positive value"),
    ("lr string", edit(train={"learning_rate": "3e-4x"}), None, "train.learning_rate",
     "learning_rate: 3e-4"),
    ("lr inf", edit(train={"learning_rate": math.inf}), None, "train.learning_rate", "finite"),
    ("lr nan", edit(train={"learning_rate": math.nan}), None, "train.learning_rate", "finite"),
    ("clip nan", edit(train={"max_grad_norm": math.nan}), None, "train.max_grad_norm", "finite"),
    ("steps 0", edit(train={"steps": 0}), None, "train.steps", "≥ 1"),
    ("seed -1", edit(train={"seed": -1}), None, "train.seed", "≥ 0"),
    ("save_interval -5", edit(train={"save_interval": -5}), None, "train.save_interval", "≥ 0"),
    ("checkpoint_dir 5", edit(train={"checkpoint_dir": 5}), None, "train.checkpoint_dir",
     "a string"),
    ("tensor 0", edit(parallelism={"tensor": 0}), None, "parallelism.tensor", "1 switches"),
    ("tensor null", edit(parallelism={"tensor": None}), None, "parallelism.tensor",
     "whole number"),
    ("tensor 'auto'", edit(parallelism={"tensor": "auto"}), None, "parallelism.tensor",
     "whole number"),
    ("tensor huge", edit(parallelism={"tensor": 2**40}), None, "parallelism.tensor",
     "try tensor"),
    ("data 2.0", edit(parallelism={"data": 2.0}), None, "parallelism.data", "whole number ≥ 1"),
    ("data inf", edit(parallelism={"data": math.inf}), None, "parallelism.data",
     "whole number ≥ 1"),
    ("data -1", edit(parallelism={"data": -1}), None, "parallelism.data", "whole number ≥ 1"),
    ("microbatches 0", edit(parallelism={"microbatches": 0}), None, "parallelism.microbatches",
     "1 switches"),
    ("pipeline 4, microbatches 2", edit(parallelism={"pipeline": 4, "microbatches": 2}), None,
     "parallelism.microbatches", "use microbatches 4 or more"),
    ("microbatches 1, pipeline 2", edit(parallelism={"microbatches": 1}), None,
     "parallelism.microbatches", "use microbatches 2 or more"),
    ("zero '1'", edit(parallelism={"zero_stage": "1"}), None, "parallelism.zero_stage",
     "write the digits"),
    ("zero 1.0", edit(parallelism={"zero_stage": 1.0}), None, "parallelism.zero_stage",
     "whole number"),
    ("zero true", edit(parallelism={"zero_stage": True}), None, "parallelism.zero_stage",
     "whole number"),
    ("zero 5", edit(parallelism={"zero_stage": 5}), None, "parallelism.zero_stage", "0 (off)"),
    ("precision null", edit(train={"precision": None}), None, "train.precision", "valid:"),
    ("precision 16", edit(train={"precision": 16}), None, "train.precision", "valid:"),
    ("precision fp8", edit(train={"precision": "fp8"}), None, "train.precision", "use_fp8=True"),
    ("precision 'bf16 '", edit(train={"precision": "bf16 "}), None, "train.precision",
     "did you mean 'bf16'"),
    ("mode ulysses", edit(parallelism={"sequence_mode": "ulysses"}), None,
     "parallelism.sequence_mode", "all_to_all"),
    ("mode megatron", edit(parallelism={"sequence_mode": "megatron"}), None,
     "parallelism.sequence_mode", "split_gather"),
    ("sequence 0", edit(parallelism={"sequence": 0}), None, "parallelism.sequence", "1 switches"),
    ("heads 0", edit(model={"heads": 0}), None, "model.heads", "≥ 1"),
    ("hidden 0", edit(model={"hidden": 0}), None, "model.hidden", "≥ 1"),
    ("vocab -1", edit(model={"vocab": -1}), None, "model.vocab", "≥ 1"),
    ("kv heads above heads", edit(model={"kv_heads": 16}), None, "model.kv_heads",
     "try kv_heads"),
    ("seq_len 0", edit(model={"seq_len": 0}), None, "model.seq_len", "≥ 1"),
    ("model a string", edit(model="llama-7b"), None, "model", "indented 'key: value'"),
    ("model kind gpt2", edit(model={"kind": "gpt2"}), None, "model.kind", "valid:"),
    ("tensor above heads", edit(parallelism={"tensor": 16}), None, "parallelism.tensor",
     "try tensor"),
    ("zero 3 + tensor + pipeline", edit(parallelism={"zero_stage": 3}), None,
     "parallelism.zero_stage", "pipeline: 1"),
    ("zero 1 fp32 hybrid", edit(train={"precision": "fp32"}), None, "train.precision",
     "bf16"),
    ("overlap in data-only DDP", edit(parallelism={**NO_PIPE, "tensor": 1, "zero_stage": 0,
     "overlap_communication": True}, train={"precision": "fp32"}), None,
     "parallelism.overlap_communication", "zero_stage: 1 or 2"),
    ("overlap 'yes'", edit(parallelism={"overlap_communication": "yes"}), None,
     "parallelism.overlap_communication", "a boolean"),
    ("world does not divide", edit(parallelism={"data": "auto", "tensor": 2, "pipeline": 2}), 6,
     "parallelism", "try"),
    ("world mismatch", GOOD, 16, "parallelism", "set data: 4"),
    ("world 0", GOOD, 0, "world_size", "whole number ≥ 1"),
    ("world -8", GOOD, -8, "world_size", "whole number ≥ 1"),
    ("world 8.0", GOOD, 8.0, "world_size", "whole number ≥ 1"),
    ("key twice", "parallelism:\n  data: 2\n  data: 4\ntrain:\n  batch_size: 8\n"
     "  learning_rate: 1e-3\n", None, "data appears twice", "delete one"),
    ("tabs", "parallelism:\n\tdata: 2\n", None, "YAML syntax error", "indentation"),
]  # fmt: skip


@pytest.mark.parametrize(
    "config, world, field, fix", [a[1:] for a in ADVERSARY], ids=[a[0] for a in ADVERSARY]
)
def test_an_adversary_s_configs_fail_at_load_with_a_clear_message(config, world, field, fix):
    msg = str(rejection(config, world))
    assert "\n" not in msg, msg
    assert msg.startswith(field), f"{field!r} not first in: {msg}"
    assert fix in msg, f"{fix!r} not in: {msg}"
    assert "see the chapter's table of fields" not in msg, msg  # a generic message is no fix


def test_at_least_sixty_adversarial_configs():
    assert len(ADVERSARY) >= 60


def test_the_page_quotes_the_message_word_for_word():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "book" / "04_config.md").read_text()
    msg = str(rejection(edit(parallelism={"pipeline": 4, "microbatches": 2})))
    assert msg in page


def test_the_dry_run_rule_is_one_rule_in_code_page_and_notebook():
    import json
    from pathlib import Path

    from helpers.config.dry_run import _smaller, scaled_down

    assert [_smaller(d) for d in (8, 6, 9, 3, 2)] == [4, 3, 3, 1, 1]  # not "halves": 6 → 3, 9 → 3
    six = load_config(edit(parallelism={"data": 1, "tensor": 6, "pipeline": 1, "microbatches": DEL},
                           model={"heads": 12, "kv_heads": 6, "hidden": 768}))  # fmt: skip
    assert scaled_down(six, 4).parallelism.tensor == 3
    root = Path(__file__).resolve().parents[1]
    page = " ".join((root / "book" / "04_config.md").read_text().split())
    nb = json.loads((root / "notebooks" / "04_config.ipynb").read_text())
    cells = " ".join(" ".join("".join(c["source"]).split()) for c in nb["cells"])
    for text in (page, cells):
        assert "largest proper divisor" in text and "halves" not in text
