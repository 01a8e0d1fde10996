"""Chapter 7's memory model for Colossal-AI layouts: exact activation count, layouts, demo,
recorded table."""

import inspect

import pytest
import torch

from helpers.record.ch07_layouts import LAYOUTS, QUICK, layout_named
from helpers.record.ch07_tables import summary
from helpers.run.cli import add_layout
from helpers.run.launch import launch
from helpers.parallel.train_layout import CH07_SHAPE, CPU_SHAPE, TrainLayout, plugin_spec
from helpers.models.shape import ModelShape
from helpers.cost.census import count_saved_bytes
from helpers.cost.memory_llama import (
    head_activation_bytes,
    layer_activation_bytes,
    predict,
    rank_params,
)
from helpers.models.llama import build_llama, llama_params

E = {torch.float32: 4, torch.bfloat16: 2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_activation_formula_is_exact_for_hf_llama(dtype, attn, kv_heads):
    """Every byte autograd saves in a real HF Llama forward, against the per-layer formula."""
    shape = ModelShape.llama(layers=2, hidden=128, heads=4, kv_heads=kv_heads, vocab=512)
    b, s = 3, 40  # b·s ≠ h, so no tensor shape is ambiguous
    model = build_llama(shape.config(attn=attn), dtype=dtype)
    ids = torch.randint(0, shape.vocab, (b, s), generator=torch.Generator().manual_seed(0))
    counted = count_saved_bytes(model, {"input_ids": ids, "labels": ids})["total"]
    n, e = b * s, E[dtype]
    head_dim = shape.hidden // shape.heads
    formula = (
        shape.layers * layer_activation_bytes(shape, n, s, e, attn=attn)
        + head_activation_bytes(shape, n, e)
        + 4 * n * shape.vocab  # fp32 log-softmax
        + 2 * s * head_dim * e  # RoPE cos and sin, shared by all layers
        + 8 * n
        + 8 * n
        + 4
    )  # input ids, shifted labels, the loss
    assert counted == formula


def test_parameter_count_matches_the_model():
    shape = CH07_SHAPE
    assert rank_params(TrainLayout(shape=shape)) == llama_params(shape.config())
    two = TrainLayout("pp", "hybrid", "bf16", pp=2, microbatches=2)
    assert rank_params(two, 0) + rank_params(two, 1) == llama_params(shape.config())


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: x.name)
def test_every_layout_binds_to_the_colossalai_constructor(layout):
    import colossalai.booster.plugin as plugins

    name, kwargs = plugin_spec(layout)
    inspect.signature(getattr(plugins, name)).bind(**kwargs)  # TypeError on a wrong keyword


def test_layout_list_covers_the_issue():
    assert len(LAYOUTS) >= 14 and len({x.name for x in LAYOUTS}) == len(LAYOUTS)
    kinds = {
        (x.plugin, x.zero_stage, x.tp, x.pp, x.recompute, x.offload, x.precision) for x in LAYOUTS
    }
    assert ("ddp", 0, 1, 1, False, False, "fp32") in kinds and (
        "zero",
        2,
        1,
        1,
        False,
        True,
        "bf16",
    ) in kinds
    assert {x.plugin for x in LAYOUTS} == {"ddp", "hybrid", "zero", "gemini"}
    assert any(x.tp == 2 for x in LAYOUTS) and any(x.pp == 2 for x in LAYOUTS)
    assert all(layout_named(n) for n in QUICK)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: x.name)
def test_layout_round_trips_through_the_command_line(layout):
    import argparse

    parser = argparse.ArgumentParser()
    add_layout(parser, TrainLayout)
    assert TrainLayout.from_namespace(parser.parse_args(layout.to_args())) == layout
    assert TrainLayout.from_dict(layout.__dict__ | {"shape": layout.shape.__dict__}) == layout


def test_bad_layouts_are_refused():
    with pytest.raises(ValueError, match="stage 1 or 2"):
        TrainLayout("x", "zero", "bf16")
    with pytest.raises(ValueError, match="tensor/pipeline"):
        TrainLayout("x", "zero", "bf16", zero_stage=1, tp=2)
    with pytest.raises(ValueError, match="micro-batches"):
        TrainLayout("x", "hybrid", "bf16", pp=2, microbatches=1)


def test_model_orders_layouts_as_zero_says():
    """More sharding never predicts more; offload and recomputation never predict more."""
    peak = {x.name: predict(x)["peak"] for x in LAYOUTS}
    assert peak["ZeRO-2 bf16"] <= peak["ZeRO-1 bf16"] <= peak["DDP bf16 (Hybrid tp=1)"]
    assert peak["ZeRO-2 bf16 + CPU offload"] < peak["ZeRO-2 bf16"]
    assert peak["ZeRO-1 bf16 + recompute"] < peak["ZeRO-1 bf16"]
    assert peak["DDP fp32 + recompute"] < peak["DDP fp32"]
    assert peak["ZeRO-2 bf16, eager attention"] > peak["ZeRO-2 bf16"]
    pp = layout_named("PP=2 bf16 (1F1B, 4 micro-batches)")
    assert (
        predict(pp, rank=0)["activations"] > predict(pp, rank=1)["activations"]
    )  # 2 micro-batches in flight


def test_demo_cpu_path_on_two_gloo_ranks():
    """The TorchDDPPlugin fp32 path of the GPU demo runs on gloo; memory is predicted only."""
    result = launch(
        "ch07_memory",
        2,
        layout_named("DDP fp32").to_args() + ["--steps", "2"],
        timeout_s=240,
        show="none",
    )
    assert len(result.results) == 2
    r = result.first(0)
    assert r["backend"] == "gloo" and r["measured"] is None and r["phases"] is None
    layout = TrainLayout.from_dict(r["layout"])
    assert layout.shape == CPU_SHAPE and r["params"] == llama_params(CPU_SHAPE.config())
    # the optimizer really holds m and v (8 bytes per parameter) and fp32 weights, as the model says
    states = predict(layout)["states"]
    assert (
        abs(r["census"]["optimizer_states"]["cpu"] - states["optimizer"]) <= 64 * 8
    )  # + step counters
    assert r["census"]["model_params"]["cpu"] == states["weights"]
    assert r["prediction"]["peak"] == predict(layout)["peak"]
    assert r["loss_last"] < r["loss_first"] + 0.5 and r["tokens_per_s"] > 0


def _recorded():
    from helpers.record.results import load

    try:
        return load("ch07_memory", gpus=2)
    except FileNotFoundError:
        return None


@pytest.mark.skipif(
    _recorded() is None,
    reason="no recorded GPU result yet (python -m helpers.record ch07 --record)",
)
def test_recorded_peaks_are_predicted_within_ten_percent():
    """Recompute every prediction from the recorded layout: every layout measured,
    |error| ≤ 10 %, at least 12."""
    rows = [summary(r) for r in _recorded()["runs"]]
    measured = [r for r in rows if r.get("measured")]
    good = [r for r in measured if abs(r["error_pct"]) <= 10]
    assert len(measured) == len(rows) and len(good) == len(measured) >= 12, [
        (r["layout"], round(r["error_pct"], 1)) for r in rows
    ]


def test_summary_takes_the_rank_that_uses_most_and_keeps_failures():
    from helpers.record.ch07_tables import table_rows

    layout = layout_named("PP=2 bf16 (1F1B, 4 micro-batches)")
    ranks = [
        {
            "rank": r,
            "layout": layout.__dict__ | {"shape": layout.shape.__dict__},
            "tokens_per_s": 100.0,
            "measured": {
                "peak": predict(layout, r)["peak"] * (1.05 if r == 0 else 0.5),
                "outside_allocator": 1,
                "peak_reserved": 2,
            },
        }
        for r in (0, 1)
    ]
    row = summary({"name": layout.name, "ranks": ranks})
    assert row["rank"] == 0 and abs(row["error_pct"] - 100 * (1 / 1.05 - 1)) < 1e-9
    failed = table_rows(
        [{"name": "x", "error": "Traceback ...\nRuntimeError: CUDA out of memory"}]
    )[0]
    assert failed["measured MiB"] == "failed" and "out of memory" in failed["error %"]


def _fake_record(scale=1.05):
    """A record shaped like the recorder's, measured = scale × predicted (for the figure code)."""
    runs = []
    for i, layout in enumerate(LAYOUTS):
        ranks = []
        for r in range(2):
            p = predict(layout, r)
            keys = (
                ["forward_backward", "step"] if layout.pp > 1 else ["forward", "backward", "step"]
            )
            phases = {
                "start": {"peak": p["persistent"], "allocated": p["persistent"]},
                **{k: {"peak": p["peak"] * scale, "allocated": p["persistent"]} for k in keys},
            }
            ranks.append(
                {
                    "rank": r,
                    "layout": layout.__dict__ | {"shape": layout.shape.__dict__},
                    "tokens_per_s": 1e4 + i,
                    "phases": phases,
                    "measured": {
                        "peak": p["peak"] * scale,
                        "outside_allocator": 5 * 2**29,
                        "peak_reserved": p["peak"] * 1.1,
                    },
                }
            )
        runs.append({"name": layout.name, "ranks": ranks})
    runs.append({"name": "broken", "error": "RuntimeError: boom"})
    return {"provenance": {}, "runs": runs}


def test_figures_and_tables_from_a_record():
    import matplotlib

    matplotlib.use("Agg")
    from helpers.figures.ch07_memory import accuracy_figure, technique_figure
    from helpers.record.ch07_layouts import TECHNIQUES
    from helpers.record.ch07_tables import technique_rows, worst_error

    record = _fake_record()
    assert len(accuracy_figure(record).axes[0].collections) == len(LAYOUTS) + 1  # points + the band
    assert len(technique_figure(record).axes[1].patches) == len(TECHNIQUES)
    rows = technique_rows(record)
    assert rows[0]["memory vs DDP fp32"] == "1.00" and len(rows) == len(TECHNIQUES)
    assert abs(worst_error(record)["error_pct"] - 100 * (1 / 1.05 - 1)) < 1e-6
    from helpers.record.ch07_tables import phase_rows

    rows = phase_rows(record, [x.name for x in LAYOUTS])
    assert (
        len(rows) == len(LAYOUTS)
        and "forward_backward GiB" in rows[-1]
        and "backward GiB" in rows[0]
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("recompute", [False, True])
def test_backward_start_peak_is_activations_plus_twelve_nv(dtype, recompute):
    """Tracked on the CPU: the peak of forward + backward is the weights, the saved activations and
    12·N·v bytes of loss gradients (log-softmax output, nll gradient, log-softmax gradient), with no
    parameter gradient yet; with recomputation only each layer's input stays saved."""
    from helpers.cost.census import tracked_peak

    shape = ModelShape.llama(layers=2, hidden=128, heads=4, kv_heads=4, vocab=4096)
    b, s, e = 3, 40, E[dtype]
    model = build_llama(shape.config(), dtype=dtype)
    if recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    ids = torch.randint(0, shape.vocab, (b, s), generator=torch.Generator().manual_seed(0))
    peak = tracked_peak(model, {"input_ids": ids, "labels": ids})
    n = b * s
    per_layer = e * n * shape.hidden if recompute else layer_activation_bytes(shape, n, s, e)
    small = 2 * s * (shape.hidden // shape.heads) * e + 8 * n + 8 * n  # RoPE cos/sin, ids, labels
    expected = (
        shape.layers * per_layer + head_activation_bytes(shape, n, e) + 12 * n * shape.vocab + small
    )
    assert peak["grad"] == 0
    assert abs(peak["total"] - peak["param"] - peak.get("buffer", 0) - expected) <= 0.001 * expected


def test_gemini_chunk_search_matches_colossalai():
    """The model's chunk size is the one Colossal-AI's own search picks (a world of one, gloo)."""
    import os

    import torch.distributed as dist
    from colossalai.zero.gemini.chunk.search_utils import search_chunk_configuration

    from helpers.cost.chunks import gemini_chunks, parameter_sizes

    shape = CH07_SHAPE
    with torch.device("meta"):
        model = build_llama(shape.config())
    assert [p.numel() for p in model.parameters()] == parameter_sizes(shape)
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        config, _, _ = search_chunk_configuration(
            model, search_range_m=32, search_interval=1024, min_chunk_size_m=32
        )
    finally:
        dist.destroy_process_group()
    assert gemini_chunks(shape, 1)[0] == config[1]["chunk_size"]


def test_gemini_census_is_json_even_with_numpy_chunk_sizes():
    """The bug that lost the Gemini runs of the first GPU record: numpy integers in the RESULT
    payload."""
    import json
    from types import SimpleNamespace

    import numpy as np

    from helpers.cost.census import optimizer_census

    model = torch.nn.Linear(4, 4)
    chunk = SimpleNamespace(
        chunk_size=np.int64(64), utilized_size=np.int64(20), keep_gathered=np.bool_(False)
    )
    model.chunk_manager = SimpleNamespace(
        chunk_groups={"fp16_2": [chunk]}, total_mem={"cuda": np.int64(128), "cpu": 0}
    )
    census = optimizer_census(torch.optim.AdamW(model.parameters()), model)
    assert json.loads(json.dumps(census))["chunks"] == {
        "sizes": [64],
        "used": [20],
        "keep_gathered": [False],
        "total_mem": {"cuda": 128, "cpu": 0},
    }


def test_hybrid_wraps_ddp_without_a_pipeline():
    """HybridParallelPlugin wraps torch DDP when pp == 1, even over a dp group of one
    (tp=2 on 2 GPUs)."""
    from helpers.cost.memory_llama import model_states

    tp, pp = layout_named("TP=2 bf16"), layout_named("PP=2 bf16 (1F1B, 4 micro-batches)")
    assert model_states(tp)["buckets"] == 2 * rank_params(tp) and model_states(pp)["buckets"] == 0


@pytest.mark.gpu
@pytest.mark.skipif(
    __import__("helpers.run.env", fromlist=["gpu_count"]).gpu_count() < 2, reason="needs 2 GPUs"
)
@pytest.mark.parametrize("name", ["ZeRO-2 bf16", "TP=2 bf16"])
def test_gpu_peak_is_predicted_within_ten_percent(name):
    from helpers.record.ch07 import run_layout

    row = summary(run_layout(layout_named(name), timeout_s=480, show="none"))
    assert abs(row["error_pct"]) <= 10, row


def test_a_partial_re_recording_keeps_each_runs_provenance():
    from helpers.record.results import carried_over, merge_runs

    earlier = {
        "provenance": {"git_commit": "a" * 40, "date": "day 1"},
        "runs": [{"name": "x"}, {"name": "y"}],
    }
    runs = merge_runs(earlier, [{"name": "y", "new": True}])
    assert [r["name"] for r in runs] == ["x", "y"] and runs[0]["provenance"]["date"] == "day 1"
    assert "provenance" not in runs[1] and runs[1]["new"]
    assert carried_over({"runs": runs}) == [
        "1 of the 2 runs were recorded earlier: on day 1 at commit aaaaaaaaaa"
    ]
    assert merge_runs(None, runs[1:]) == runs[1:]
