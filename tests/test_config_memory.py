"""Chapter 4, "What the loader guarantees": a layout that Chapter 7's memory model says cannot fit
its GPUs (``hardware.gpu_memory_gib``) is refused before any rank starts, with the ZeRO stage or
tensor degree that fits, found through the same model (helpers.config.memory_fit).

* the prediction is Chapter 7's model (memory_llama.predict, with memory_plan's bytes outside
  the allocator), not a second one: for a HybridParallelPlugin bf16 layout it equals
  memory_plan.peak;
* each refusal names the layout, the predicted peak, the GPU's memory and a fix that loads and
  fits; with no fix, it says what is left;
* where the model cannot know (no memory given, data: auto without a world size, ring attention,
  Gemini with tensor parallelism, torch AMP's activations) it says so and refuses nothing.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from helpers.parallel.errors import ConfigError, ConfigWarning
from helpers.config.loading import load_config
from helpers.config.memory_fit import predict_fit

LLAMA_7B = {"kind": "llama", "layers": 32, "hidden": 4096, "heads": 32, "vocab": 32000,
            "seq_len": 4096}  # fmt: skip
LLAMA_13B = {**LLAMA_7B, "layers": 40, "hidden": 5120, "heads": 40}


def config(parallelism, precision="bf16", gpu=80, model=LLAMA_7B, batch=8, **train) -> dict:
    raw = {
        "parallelism": parallelism,
        "train": {"batch_size": batch, "learning_rate": 1e-4, "precision": precision, **train},
        "model": model,
    }
    if gpu is not None:
        raw["hardware"] = {"gpu_memory_gib": gpu}
    return raw


def refused(raw, world=None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(raw, world_size=world)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("parallelism = data "), msg
    return msg


def applied(raw: dict, fix: str) -> dict:
    """``raw`` with a fix of the message ("zero_stage: 1, tensor: 4 (data: 2)") applied."""
    changes = {k: int(v) for k, v in re.findall(r"(\w+): (\d+)", fix)}
    return {**raw, "parallelism": {**raw["parallelism"], **changes}}


PAGE_EXAMPLE = config({"data": 8})


@pytest.mark.parametrize(
    "raw, world, peak, fix",
    [
        (PAGE_EXAMPLE, None, "127.9 GiB", "zero_stage: 1 fits"),
        (config({"data": 8}, "fp16"), None, "127.6 GiB or more (torch AMP", "zero_stage: 1 fits"),
        (config({"data": 8}, "fp32"), None, "145.6 GiB", "zero_stage: 1 fits"),
        (config({"data": "auto"}), 8, "127.9 GiB", "tensor: 4 (data: 2) fits"),
        (config({"data": 8}, gpu=40), None, "127.9 GiB", "zero_stage: 3 fits"),
        (config({"data": 4, "tensor": 2}, model=LLAMA_13B, batch=4), None, "GiB",
         "zero_stage: 1 fits"),
        (config({"data": 1}, "fp16", gpu=8, batch=1), None, "127.6 GiB or more",
         "no ZeRO stage or tensor degree fits 1 GPU of 8 GiB"),
        (config({"data": 2, "pipeline": 4, "microbatches": 4}, gpu=24), None, "52.4 GiB",
         "use more GPUs, or a smaller micro_batch_size or seq_len"),
    ],
)  # fmt: skip
def test_a_layout_that_cannot_fit_is_refused_with_a_fix_that_fits(raw, world, peak, fix):
    msg = refused(raw, world)
    gib = raw["hardware"]["gpu_memory_gib"]
    assert re.search(
        rf"puts the busiest GPU at {re.escape(peak) if peak != 'GiB' else '[0-9.]+ GiB'}", msg
    ), msg
    assert f"above hardware.gpu_memory_gib = {gib:g}; " in msg and fix in msg, msg
    for words in msg.rsplit("; ", 1)[1].split(" or "):  # every fix named loads and fits
        if "fits (" in words:
            fixed = load_config(applied(raw, words.split(" fits")[0]), world_size=world)
            assert predict_fit(fixed).fits is True


def test_the_page_quotes_the_refusal_word_for_word():
    page = (Path(__file__).resolve().parents[1] / "book" / "04_config.md").read_text()
    assert refused(PAGE_EXAMPLE) in page


@pytest.mark.parametrize(
    "raw, world",
    [
        (config({"data": 8, "zero_stage": 1}), None),
        (config({"data": 2, "tensor": 4}), None),
        (config({"data": 8}, gpu=141), None),
        (config({"data": "auto"}), None),  # no world size: checked when it comes
        ({"train": {"batch_size": 8, "learning_rate": 1e-3}, "hardware": {"gpu_memory_gib": 4}}, 8),
    ],
)  # fmt: skip
def test_a_layout_that_fits_loads_without_a_word(raw, world):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        load_config(raw, world_size=world)


def test_the_prediction_is_chapter_7_s_model():
    from helpers.cost.memory_llama import predict
    from helpers.cost.memory_plan import GIB, OUTSIDE_ALLOCATOR_GIB, peak
    from helpers.parallel.layouts import Layout

    cfg = load_config(config({"data": 2, "tensor": 2, "pipeline": 2, "microbatches": 4}, gpu=None))
    fit = predict_fit(cfg)
    shape = cfg.model.shape()
    planner = peak(shape, Layout(2, 2, 2, microbatch=cfg.micro_batch), cfg.train.batch_size)
    assert fit.peak_gib == pytest.approx(planner["total"] / GIB)  # HybridParallelPlugin, bf16
    from helpers.config.memory_fit import layout_of

    layout, floor = layout_of(cfg)
    assert not floor and layout.plugin == "hybrid" and layout.world == 8
    stages = max(predict(layout, r)["peak"] for r in (0, 6))  # first and last stage
    assert fit.peak_gib == pytest.approx(stages / GIB + OUTSIDE_ALLOCATOR_GIB)


@pytest.mark.parametrize(
    "raw, world, says",
    [
        (config({"data": 2, "sequence": 4, "sequence_mode": "ring_attn"}), None,
         "does not cover ring_attn sequence parallelism"),
        (config({"data": 1, "tensor": 8, "sequence_mode": "ring"}), None,
         "does not cover ring sequence parallelism"),
        (config({"data": 4, "tensor": 2, "zero_stage": 3}), None,
         "does not cover GeminiPlugin with tensor parallelism"),
        (config({"data": 8}, "fp16", gpu=141), None,
         "at least 127.6 GiB per GPU for GPUs of 141 GiB: cannot know whether it fits"),
    ],
)  # fmt: skip
def test_where_the_model_cannot_know_it_says_so_and_refuses_nothing(raw, world, says):
    with pytest.warns(ConfigWarning, match=re.escape(says)) as caught:
        load_config(raw, world_size=world)
    assert all(w.filename == __file__ for w in caught)
    assert str(caught[0].message).startswith("hardware.gpu_memory_gib = ")


def test_without_gpu_memory_or_world_size_the_verdict_says_what_is_missing():
    line = predict_fit(load_config(config({"data": 8}, gpu=None))).line
    assert "predicts 127.9 GiB per GPU" in line and "no hardware.gpu_memory_gib given" in line
    auto = load_config(config({"data": "auto"}, gpu=None))
    assert "the world size is unknown (data: auto)" in predict_fit(auto).line
    assert "127.9 GiB" in predict_fit(auto, 8).line
    assert (
        predict_fit(load_config(PAGE_EXAMPLE, world_size=None) if False else auto, 8).fits is None
    )


def test_the_dry_run_keeps_no_gpu_memory_and_side_by_side_shows_it():
    from helpers.config.dry_run import scaled_down, side_by_side

    full = load_config(config({"data": 8, "zero_stage": 1}))
    small = scaled_down(full, 2)
    assert small.hardware.gpu_memory_gib is None and "hardware" not in small.to_dict()
    rows = {r["field"]: r for r in side_by_side(full, small)}
    assert rows["hardware.gpu_memory_gib"] == {
        "field": "hardware.gpu_memory_gib",
        "full": 80,
        "dry run": None,
    }
