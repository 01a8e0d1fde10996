"""Chapter 6's DeepSpeed runs (helpers/demos/ch06_deepspeed.py, helpers/train/deepspeed_run.py):
one Colossal-AI YAML -> the converter's DeepSpeed JSON -> ``deepspeed.initialize`` -> ZeRO-1, 2
and 3 training on two gloo ranks, against the single-process reference.

One launch (shared with notebook 06 under ``make test``'s BOOK_SHARED_RUNS) feeds every check:
the losses, the JSON each engine read, what each rank holds, and the collectives counted. The
in-process tests never import DeepSpeed (it would go on this process's ``sys.path``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers.chapters import ch06_deepspeed as show
from helpers.config.loading import load_config
from helpers.train import deepspeed_run as dsr

PSI = 139_584  # the tiny Llama's parameters: 2 layers of width 64, vocabulary 256, untied head


@pytest.fixture(scope="module")
def ranks() -> list[dict]:
    return show.zero_run(timeout_s=300)


def _runs(ranks, name):
    return [next(r for r in rank["runs"] if r["name"] == name) for rank in ranks]


def test_every_stage_matches_the_reference(ranks):
    cfg = load_config(show.CONFIG)
    assert [r["name"] for r in ranks[0]["runs"]] == [n for n, _, _ in dsr.RUNS]
    runs = [{"name": n, "ranks": _runs(ranks, n)} for n, _, _ in dsr.RUNS]
    gap = dsr.check(runs, ranks[0]["reference"])  # raises past the tolerance
    assert gap == pytest.approx(ranks[0]["max_gap"]) and gap <= dsr.TOLERANCE
    assert len(ranks[0]["reference"]) == cfg.train.steps
    assert ranks[0]["backend"] == "gloo" and ranks[0]["deepspeed"] == "0.19.8"


def test_each_engine_read_the_converters_json(ranks, tmp_path):
    cfg = load_config(show.CONFIG)
    for name, stage, extra in dsr.RUNS:
        path, refused = dsr.stage_config(cfg, stage, extra, tmp_path)
        run = _runs(ranks, name)[0]
        assert json.loads(run["json"]) == json.loads(path.read_text())
        assert json.loads(run["json"])["zero_optimization"]["stage"] == stage
        # the book's schema speaks for Colossal-AI: Gemini has no fp32, DeepSpeed's ZeRO-3 has
        assert run["schema"] == refused and bool(refused) == (stage == 3)
    assert "GeminiPlugin" in _runs(ranks, "ZeRO-3")[0]["schema"]


def test_zero3_partitions_the_parameters(ranks):
    default, zero = _runs(ranks, "ZeRO-3"), _runs(ranks, "ZeRO-3, persistence threshold 0")
    for runs in (default, zero):
        assert sum(r["held"]["partition"] for r in runs) == PSI  # the two halves make the model
        assert all(r["held"]["partition"] == PSI // 2 for r in runs)
    # DeepSpeed's default keeps every tensor under 100,000 elements whole: all 21 of this model
    assert all(r["held"]["persistent"] == r["held"]["tensors"] == 21 for r in default)
    assert all(r["held"]["live"] == PSI for r in default)
    assert all(r["held"]["live"] == 0 and r["held"]["persistent"] == 0 for r in zero)
    for name in ("ZeRO-1", "ZeRO-2"):  # whole weights on every rank
        assert all(
            r["held"]["live"] == PSI and r["held"]["partition"] == 0 for r in _runs(ranks, name)
        )


def test_adam_state_is_sharded_in_every_stage(ranks):
    for name, _, _ in dsr.RUNS:
        # m and v of this rank's half: 2 · Ψ/2 elements, not the 2Ψ of unsharded Adam
        assert all(r["held"]["adam_state"] == PSI for r in _runs(ranks, name))


def test_the_collectives_counted(ranks):
    steps, micro = 3, 2
    z1, z2, z3 = (
        _runs(ranks, n)[0] for n in ("ZeRO-1", "ZeRO-2", "ZeRO-3, persistence threshold 0")
    )
    # ZeRO-1: one gradient all-reduce per step, at the last micro-batch, + the norm's scalar
    assert z1["calls"]["all_reduce"] == 2 * steps
    assert z1["elements"]["all_reduce"] == steps * (PSI + 1)
    # ZeRO-2: one per micro-batch, so that each rank can drop the other half right away
    assert z2["calls"]["all_reduce"] == (micro + 1) * steps
    assert z2["elements"]["all_reduce"] == steps * (micro * PSI + 1)
    for z in (z1, z2):  # each rank's updated half of the weights, gathered once a step
        assert z["calls"]["all_gather_into_tensor"] == steps
        assert z["elements"]["all_gather_into_tensor"] == steps * PSI // 2
        assert "reduce_scatter_tensor" not in z["calls"]
    # ZeRO-3: one reduce-scatter of the whole gradient per micro-batch, parameters gathered
    # before use, no gradient all-reduce (the norm's scalar only)
    assert z3["calls"]["reduce_scatter_tensor"] == steps * micro
    assert z3["elements"]["reduce_scatter_tensor"] == steps * micro * PSI
    assert z3["calls"]["all_gather_into_tensor"] > 2 * steps * micro
    assert z3["elements"]["all_reduce"] == steps


def test_the_counter_counts_calls_and_elements():
    counter = dsr.CommCounter()
    seen = []
    fake = counter._wrap("all_gather_into_tensor", lambda out, inp, **kw: seen.append(inp.numel()))
    fake(torch.zeros(8), torch.zeros(4))  # outside the window: not counted
    with counter.window():
        fake(torch.zeros(8), torch.zeros(4))
    assert seen == [4, 4] and counter.calls == {"all_gather_into_tensor": 1}
    assert counter.elements == {"all_gather_into_tensor": 4} and not counter.on
    assert dsr._numel("reduce_scatter", (None, [torch.zeros(3), torch.zeros(5)]), {}) == 8
    assert dsr._numel("all_reduce", (), {"tensor": torch.zeros(6)}) == 6


def test_a_missing_deepspeed_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(dsr, "DS_HOME", tmp_path / "absent")
    monkeypatch.setattr(dsr.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="make venv"):
        dsr.import_deepspeed(cpu=True)


def test_the_config_is_chapter_6s_cpu_model():
    from helpers.parallel.train_layout import CPU_SHAPE

    cfg = load_config(show.CONFIG)
    m = cfg.model
    assert (m.layers, m.hidden, m.heads, m.vocab) == (
        CPU_SHAPE.layers,
        CPU_SHAPE.hidden,
        CPU_SHAPE.heads,
        CPU_SHAPE.vocab,
    )
    assert Path(show.CONFIG).is_file() and cfg.data_degree == 2 and cfg.num_microbatches == 2
