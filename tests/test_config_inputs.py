"""Chapter 4, "What the loader guarantees": bad input refused before any rank starts.

* numbers that only a rank would fail on (numpy's seed range, 8-digit checkpoint folders, the
  rotary embedding's even head dimension) are refused, at the exact bound the consumer has;
* checkpoint_dir: ~ and $VAR expanded, unknown users and unset variables, files, folders under a
  file, unwritable folders and single checkpoints refused;
* settings that cancel each other are refused (keep_last without saving) or warned about;
* YAML 1.1 surprises (PyYAML's resolver) are read as YAML 1.2 reads them or refused by name;
* valid YAML is accepted (merge keys) and invalid YAML gets the right fix (a second document);
* encodings (UTF-8, BOM'd UTF-16/32) and sizes (alias bombs, nesting, huge files) are handled,
  and a message quotes the input, never its expansion.

Every refusal is one line that starts with the field, shows the value and ends with a fix.
"""

from __future__ import annotations

import codecs
import math
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from config_edits import DEL, edited

from helpers.parallel.errors import ConfigError, ConfigWarning
from helpers.config.loading import MAX_BYTES, load_config
from helpers.config.run_rules import SEED_LIMIT
from helpers.config.schema import Train
from helpers.config.yaml_reader import MAX_VALUES

GOOD = {  # valid on 8 processes: data 2 × tensor 2 × pipeline 2
    "parallelism": {"data": 2, "tensor": 2, "pipeline": 2, "zero_stage": 1, "microbatches": 4},
    "train": {"batch_size": 16, "learning_rate": 1e-3, "precision": "bf16", "steps": 20},
    "model": {"layers": 4, "hidden": 256, "heads": 8, "kv_heads": 4, "seq_len": 256},
}
TEXT = "train:\n  batch_size: 8\n  learning_rate: 1.0e-3\n"  # valid; append "  key: value\n"


DATA_AUTO = {"data": "auto", "tensor": 1, "pipeline": 1, "microbatches": DEL, "zero_stage": 0}


def edit(**sections) -> dict:
    return edited(GOOD, **sections)


def refused(config, world=None) -> str:
    """The one-line message ``load_config`` refuses ``config`` with."""
    with pytest.raises(ConfigError) as info:
        load_config(config, world_size=world)
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 1000, msg
    return msg


def quiet(config, world=None):
    """``load_config`` that fails on any ConfigWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        return load_config(config, world_size=world)


# -- 1. numbers that only fail inside a rank --------------------------------------------------
@pytest.mark.parametrize("world", [1, 2, 8, 64])
def test_the_largest_seed_is_numpy_s_largest_on_the_last_rank(world):
    """seed_everything(seed + 1000 × rank): np.random.seed takes 0 to 2**32 - 1 on every rank."""
    top = SEED_LIMIT - 1000 * (world - 1)
    auto = edit(parallelism=DATA_AUTO, train={"batch_size": 64})
    assert load_config(edited(auto, train={"seed": top}), world_size=world).train.seed == top
    np.random.seed(top + 1000 * (world - 1))  # the last rank's seed: accepted by numpy
    msg = refused(edited(auto, train={"seed": top + 1}), world)
    assert msg.startswith(f"train.seed = {top + 1}: every rank seeds numpy"), msg
    assert f"on {world} rank" in msg and f"at most {top:,}" in msg and "e.g. seed: 42" in msg
    with pytest.raises(ValueError):  # what the rank would have hit
        np.random.seed(top + 1 + 1000 * (world - 1))


@pytest.mark.parametrize("seed", [2**32, 2**40, 10**30])
def test_a_seed_past_numpy_s_range_is_refused_without_a_world_size(seed):
    msg = refused(edit(parallelism=DATA_AUTO, train={"seed": seed}))
    assert msg.startswith(f"train.seed = {seed}:") and "checked again for the world" in msg


def test_a_seed_is_checked_again_when_data_auto_is_resolved():
    cfg = load_config(edit(parallelism={"data": "auto"}, train={"seed": SEED_LIMIT - 3000}))
    cfg.resolve(4)  # 4 ranks: the last seeds SEED_LIMIT
    with pytest.raises(ConfigError, match="train.seed = .* on 8 ranks"):
        cfg.resolve(8)


@pytest.mark.parametrize("steps", [10**8, 10**8 + 1, 10**12])
def test_a_run_that_saves_past_step_99_999_999_is_refused(steps):
    from helpers.train.checkpoint import STEP_DIR, step_dir

    assert not STEP_DIR.match(step_dir("ckpt", steps).name)  # latest() would not see it
    msg = refused(edit(train={"steps": steps, "save_interval": 1000}))
    assert msg.startswith(f"train.steps = {steps}:") and "invisible to --resume" in msg
    assert quiet(edit(train={"steps": steps, "save_interval": 0})).train.steps == steps
    assert quiet(edit(train={"steps": 10**8 - 1, "save_interval": 1000}))


@pytest.mark.parametrize("hidden, heads", [(24, 8), (20, 4), (6, 2), (1000, 8), (8, 8)])
def test_an_odd_head_dimension_is_refused_with_even_ones(hidden, heads):
    model = {"hidden": hidden, "heads": heads, "kv_heads": DEL}
    config = edit(parallelism={"tensor": 1, "pipeline": 1, "microbatches": DEL}, model=model)
    msg = refused(config)
    assert msg.startswith(f"model.hidden = {hidden}: gives each of the {heads} heads"), msg
    assert "rotate_half" in msg and f"multiple of 2 × heads = {2 * heads}" in msg
    for fix in msg.rsplit("e.g. ", 1)[1].split(" or "):  # every suggestion loads
        load_config(edited(config, model={"hidden": int(fix)}))


@pytest.mark.parametrize(
    "section, key, value, says",
    [
        ("hardware", "gpu_memory_gib", 0, "must be > 0"),
        ("hardware", "gpu_memory_gib", -80, "must be > 0"),
        ("hardware", "gpu_memory_gib", math.inf, "not a finite number"),
        ("hardware", "gpu_memory_gib", math.nan, "not a finite number"),
        ("hardware", "gpu_memory_gib", "80GB", "must be a number"),
        ("hardware", "gpu_memory_gib", True, "must be a number"),
        ("train", "steps", 1e3, "write the digits, e.g. steps: 1000"),
        ("train", "batch_size", 16.0, "write the digits, e.g. batch_size: 16"),
    ],
)
def test_other_numbers_name_field_value_and_fix(section, key, value, says):
    msg = refused(edit(**{section: {key: value}}))
    assert msg.startswith(f"{section}.{key} = ") and says in msg, msg


# -- 2. paths ---------------------------------------------------------------------------------
def test_tilde_and_variables_are_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RUNS", str(tmp_path / "runs"))
    for written, meant in [
        ("~/runs/x", tmp_path / "runs" / "x"),
        ("$RUNS/x", tmp_path / "runs" / "x"),
        ("${RUNS}/y", tmp_path / "runs" / "y"),
        ("~", tmp_path),
    ]:
        cfg = quiet(edit(train={"checkpoint_dir": written}))
        assert cfg.train.checkpoint_dir == str(meant)
        assert load_config(cfg.to_dict()) == cfg  # expanding twice changes nothing


def test_a_relative_folder_stays_relative_and_the_schema_says_against_what():
    cfg = quiet(edit(train={"checkpoint_dir": "ckpt/run1"}))
    assert cfg.train.checkpoint_dir == "ckpt/run1"
    described = Train.model_fields["checkpoint_dir"].description
    assert "working directory" in described and "repository root" in described


@pytest.mark.parametrize(
    "written, says",
    [
        ("$NO_SUCH_VARIABLE_FOR_THE_BOOK/x", "NO_SUCH_VARIABLE_FOR_THE_BOOK is not set"),
        ("${NO_SUCH_VARIABLE_FOR_THE_BOOK}/x", "NO_SUCH_VARIABLE_FOR_THE_BOOK is not set"),
        ("~no_such_user_for_the_book/x", "~no_such_user_for_the_book is not a user"),
        ("ckpt/step_00000006", "is one checkpoint"),
        ("ckpt/run\x001", "NUL"),
        ("ckpt/" + "x" * 300, "longer than"),
    ],
)
def test_folders_that_cannot_be_meant_are_refused(written, says, monkeypatch):
    monkeypatch.delenv("NO_SUCH_VARIABLE_FOR_THE_BOOK", raising=False)
    msg = refused(edit(train={"checkpoint_dir": written}))
    assert msg.startswith("train.checkpoint_dir = ") and says in msg, msg


def test_a_file_or_a_folder_under_a_file_is_refused(tmp_path):
    (tmp_path / "taken").write_text("")
    for written in (tmp_path / "taken", tmp_path / "taken" / "run1", tmp_path / "taken" / "a/b"):
        msg = refused(edit(train={"checkpoint_dir": str(written)}))
        assert msg.startswith(f"train.checkpoint_dir = '{written}'") and "file" in msg, msg
    assert quiet(edit(train={"checkpoint_dir": str(tmp_path / "new" / "run1")}))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_a_folder_that_cannot_be_written_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        for written in (locked, locked / "run1"):
            msg = refused(edit(train={"checkpoint_dir": str(written)}))
            assert "cannot be" in msg and "permissions" in msg, msg
    finally:
        locked.chmod(0o700)


# -- 3. settings that contradict each other or mean nothing ----------------------------------------
@pytest.mark.parametrize("keep", [1, 3, 100])
def test_keep_last_without_saving_is_refused(keep):
    msg = refused(edit(train={"keep_last": keep, "save_interval": 0}))
    assert msg.startswith(f"train.keep_last = {keep}: save_interval = 0 writes no checkpoint")
    assert "remove keep_last" in msg
    cfg = quiet(edit(train={"keep_last": keep, "save_interval": 5}))
    with pytest.raises(ConfigError, match="train.keep_last"):  # the --save_interval 0 override
        cfg.with_changes({"train": {"save_interval": 0}})


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"train": {"save_interval": 1000}}, "only checkpoint is the final one, at step 20"),
        ({"train": {"save_interval": 21}}, "save_interval: 20 to say so"),
        (
            {"parallelism": {"data": 1}, "train": {"batch_size": 8}},
            "parallelism.zero_stage = 1: ZeRO shards",
        ),
        (
            {"parallelism": {"data": 1, "tensor": 1, "pipeline": 1, "microbatches": DEL,
                             "zero_stage": 2}},
            "data = 1: it shards nothing",
        ),
    ],
)  # fmt: skip
def test_settings_that_mean_less_than_they_say_warn_from_the_caller(changes, says):
    with pytest.warns(ConfigWarning, match=says.replace("(", r"\(")) as caught:
        load_config(edit(**changes))
    assert all(w.filename == __file__ for w in caught)  # the caller's line, not the package's


def test_no_warning_for_what_means_what_it_says():
    quiet(GOOD)
    quiet(edit(train={"save_interval": 20, "keep_last": 2}))
    a2a = {"data": 1, "tensor": 1, "pipeline": 1, "microbatches": DEL, "sequence": 2,
           "sequence_mode": "all_to_all"}  # fmt: skip
    quiet(edit(parallelism=a2a))  # ZeRO shards over data × sequence = 2


# -- 4. YAML 1.1 surprises --------------------------------------------------------------------
@pytest.mark.parametrize(
    "line, old, new",
    [
        ("save_interval: 0100", "the octal 64", "100"),
        ("steps: 010", "the octal 8", "10"),
        ("steps: 09", "a string", "9"),
        ("seed: -012", "the octal -10", "-12"),
        ("checkpoint_dir: 0755", "the octal 493", "755"),
    ],
)
def test_a_leading_zero_is_refused_naming_both_readings(line, old, new):
    key, text = line.split(": ")
    msg = refused(TEXT + f"  {line}\n")
    assert msg.startswith(f"train.{key} = {text} (line 4): a leading zero is read as {old}")
    assert f"as {new} by YAML 1.2 readers" in msg and f"or quote it, '{text}'" in msg, msg
    if "octal" in old:
        assert yaml.safe_load(text) == int(text, 8)  # the trap is real


def test_quoted_digits_are_a_string():
    assert load_config(TEXT + "  checkpoint_dir: '0755'\n").train.checkpoint_dir == "0755"


@pytest.mark.parametrize(
    "line, note",
    [
        ("parallelism:\n  overlap_communication: yes", "read yes as true"),
        ("parallelism:\n  overlap_communication: off", "read off as false"),
        ("parallelism:\n  overlap_communication: No", "read No as false"),
        ("parallelism:\n  sequence_mode: off", "switch sequence parallelism off remove"),
        ("train:\n  steps: 1:30", "the base-60 number 90"),
        ("train:\n  save_interval: 1_000", "the number 1000"),
        ("train:\n  steps: 0b101", "the number 5"),
    ],
)
def test_yaml_1_1_words_are_strings_and_refused_by_name(line, note):
    section, rest = line.split(":\n  ")
    key, text = rest.split(": ")
    body = {"parallelism": "parallelism:\n  zero_stage: 1\n  data: 2\n"}.get(section, "")
    config = (body + f"  {key}: {text}\n" if body else line + "\n") + (
        TEXT if section == "parallelism" else TEXT.split("\n", 1)[1]
    )
    msg = refused(config)
    assert msg.startswith(f"{section}.{key} = {text!r}:"), msg
    assert "YAML 1.1 readers (PyYAML's safe_load)" in msg and note in msg, msg


@pytest.mark.parametrize(
    "text, value",
    [("1e3", 1000.0), ("1.0e3", 1000.0), ("3e-4", 3e-4), (".5", 0.5), ("1E-3", 1e-3)],
)
def test_exponents_are_numbers_as_in_yaml_1_2(text, value):
    assert isinstance(yaml.safe_load(f"x: {text}")["x"], str) or text == ".5"  # PyYAML: a string
    cfg = load_config(TEXT.replace("1.0e-3", text))
    assert cfg.train.learning_rate == pytest.approx(value)


@pytest.mark.parametrize("folder", ["1e3", "0o17", "0100", "yes", "1:30", "2024-01-05", "<<"])
def test_to_yaml_reads_back_the_same_config(folder):
    cfg = quiet(edit(train={"checkpoint_dir": f"ckpt/{folder}"}))
    assert load_config(cfg.to_yaml()) == cfg
    cfg = quiet(edited(cfg.to_dict(), train={"checkpoint_dir": folder}))
    assert load_config(cfg.to_yaml()) == cfg  # safe_dump would write 1e3 bare: a 1.2 number


def test_octal_and_hex_of_yaml_1_2_and_dates_as_strings():
    assert load_config(TEXT + "  steps: 0o17\n").train.steps == 15
    assert load_config(TEXT + "  steps: 0x1F\n").train.steps == 31
    assert load_config(TEXT + "  checkpoint_dir: 2024-01-05\n").train.checkpoint_dir == "2024-01-05"
    assert load_config(TEXT + "  checkpoint_dir: yes\n").train.checkpoint_dir == "yes"


# -- 5. valid YAML refused, or refused with a wrong fix -------------------------------------------
BASE = "x-base: &base\n  batch_size: 8\n  learning_rate: 1.0e-3\n"


@pytest.mark.parametrize(
    "text, steps, batch",
    [
        (BASE + "train:\n  <<: *base\n  steps: 7\n", 7, 8),
        (BASE + "train:\n  <<: *base\n  batch_size: 16\n", 100, 16),  # own keys win
        (BASE + "x-long: &long {steps: 500}\ntrain:\n  <<: [*base, *long]\n", 500, 8),
        (BASE + "train: {<<: *base, steps: 3}\n", 3, 8),
    ],
)
def test_merge_keys_merge(text, steps, batch):
    t = load_config(text).train
    assert (t.steps, t.batch_size, t.learning_rate) == (steps, batch, 1e-3)


def test_merge_keys_keep_the_duplicate_check_and_explain_a_bad_merge():
    msg = refused(BASE + "train:\n  <<: *base\n  steps: 7\n  steps: 8\n")
    assert msg.startswith("steps appears twice") and "delete one" in msg
    msg = refused(TEXT + "  <<: 5\n")
    assert "YAML syntax error" in msg and "merges an anchored mapping" in msg
    assert "indentation" not in msg
    msg = refused("base: &b {batch_size: 8}\n" + TEXT)
    assert msg.startswith("base = ") and "start its name with x-" in msg


@pytest.mark.parametrize(
    "text, line",
    [
        (TEXT + "---\n" + TEXT, 4),
        ("---\n" + TEXT + "---\nparallelism:\n  data: 2\n", 5),
        (TEXT + "...\n---\n", 5),
        ("a: 1\n---\nb: 2\n---\nc: 3\n", 2),
    ],
)
def test_a_second_document_is_named_as_such(text, line):
    msg = refused(text)
    assert msg.startswith(f"yaml: a second YAML document starts at line {line}"), msg
    assert "indentation" not in msg and "delete the '---'" in msg


def test_one_document_with_its_markers_loads():
    assert load_config("---\n" + TEXT + "...\n").train.batch_size == 8


@pytest.mark.parametrize(
    "text, fix",
    [
        (TEXT + "  steps: *nope\n", "define the anchor (&name) before its first use"),
        (TEXT + "  steps: !!python/object:os.system x\n", "remove the tag"),
        (TEXT + "  steps: !!bool yes\n", "write true or false"),
        ("train:\n\tbatch_size: 8\n", "YAML forbids tabs for indentation"),
        ("x-a: &a 1\nx-b: &a 2\n" + TEXT, "give each anchor (&name) its own name"),
    ],
)
def test_yaml_errors_get_the_fix_of_their_problem(text, fix):
    msg = refused(text)
    assert msg.startswith("YAML syntax error") and fix in msg, msg


# -- 6. encodings and sizes -------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_a_file_with_a_byte_order_mark_is_read(tmp_path, codec):
    bom = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}.get(codec, b"")
    path = tmp_path / "run.yaml"
    path.write_bytes(bom + (TEXT + "  checkpoint_dir: größe\n").encode(codec))
    assert load_config(path).train.checkpoint_dir == "größe"


@pytest.mark.parametrize(
    "data, says",
    [
        (TEXT.encode("utf-16-le"), "looks like UTF-16 or UTF-32 without a byte-order mark"),
        (TEXT.encode("utf-32-be"), "looks like UTF-16 or UTF-32 without a byte-order mark"),
        ((TEXT + "  checkpoint_dir: größe\n").encode("latin-1"),
         "is not UTF-8 (byte 0xf6 on line 4"),
        (b"# " + b"x" * MAX_BYTES + b"\n" + TEXT.encode(), "bytes: a config is a few hundred"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_utf8_or_too_big_is_refused(tmp_path, data, says):
    path = tmp_path / "run.yaml"
    path.write_bytes(data)
    msg = refused(path)
    assert msg.startswith(f"config file '{path}'") and says in msg, msg
    assert "UTF-8" in msg or "right file" in msg


def test_a_folder_or_an_unknown_source_is_named(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    assert "is a folder, not a file" in refused(tmp_path / "dir.yaml")
    assert refused(b"train: {}").startswith("source = (bytes): load_config reads")


def bomb(levels: int, fan: int = 10) -> str:
    """x-a: a list of ``fan`` strings; every next level a list of ``fan`` aliases of the last."""
    names = "abcdefghij"
    lines = ["x-a: &a [" + ", ".join(["lol"] * fan) + "]"]
    for i in range(1, levels):
        lines.append(f"x-{names[i]}: &{names[i]} [" + ", ".join([f"*{names[i - 1]}"] * fan) + "]")
    return "\n".join(lines) + f"\n{TEXT}  steps: *{names[levels - 1]}\n"


@pytest.mark.parametrize("levels", [4, 5, 6, 9])
def test_an_alias_bomb_is_refused_quoting_the_alias(levels):
    text = bomb(levels)
    assert len(text.encode()) < 800  # a few hundred bytes
    msg = refused(text)
    alias = "*" + "abcdefghij"[levels - 1]
    assert msg.startswith(f"train.steps = {alias} (line {levels + 4}): the alias expands"), msg
    assert "billion laughs" in msg and len(msg) < 400 and "lol" not in msg


def test_aliases_within_the_limit_load_and_a_cycle_is_refused():
    within = bomb(3).rsplit("  steps:", 1)[0]  # anchors of 1,111 values, never used
    assert load_config(within.replace("x-c: &c", "x-c:").split("\nx-c:")[0] + "\n" + TEXT)
    assert "the file to" in refused(within)
    msg = refused("x-a: &a [*a]\n" + TEXT)
    assert msg.startswith("x-a[0] = *a (line 1)") and "its own anchor" in msg
    assert MAX_VALUES == 1000


def test_deep_nesting_and_long_values_stay_short():
    msg = refused("train: " + "[" * 200 + "]" * 200 + "\n")
    assert "nested more than 20 levels" in msg and len(msg) < 300
    msg = refused(edit(train={"batch_size": list(range(5000))}))  # no YAML, no alias: a long value
    assert msg.startswith("train.batch_size = [0, 1, 2") and "characters)" in msg and len(msg) < 400


def test_the_page_says_what_the_loader_guarantees():
    page = (Path(__file__).resolve().parents[1] / "book" / "04_config.md").read_text()
    for words in ("What the loader guarantees", "YAML 1.2", "`<<: *base`", "UTF-16", "x-"):
        assert words in page, words


def test_the_notebook_s_refusals_of_whole_configs():
    from helpers.chapters.ch04_config import rejections_of

    found = rejections_of(
        {"ok": GOOD, "octal": TEXT + "  steps: 0100\n", "seed": edit(train={"seed": -1})}
    )
    assert list(found) == ["octal", "seed"] and "leading zero" in found["octal"]
