"""Chapter 8's flagship benchmark (helpers.record.flagship) and its knobs (helpers.train.speed),
on CPU."""

import math

import pytest
import torch

from helpers.train import decoder, speed
from helpers.train.framework_run import parser
from helpers.record.flagship_runs import RUNS, run_list
from helpers.record.flagship_summary import summarize
from helpers.models.shape import ModelShape
from helpers.models.llama import build_llama, token_batch


def test_every_run_parses_and_changes_one_knob_from_a_named_baseline():
    names = [n for n, _ in RUNS]
    assert len(names) == len(set(names)) >= 8
    for name, args, timeout_s in run_list():
        ns = parser().parse_args(args)
        assert ns.seq == 2048 and ns.precision == "bf16" and ns.layers == 16 and ns.hidden == 2048
        assert ns.micro_batch in (8, 16) and ns.ref_steps >= 3 and timeout_s >= 300
    kinds = {parser().parse_args(a).framework for _, a, _ in run_list()}
    assert kinds == {"fsdp2", "colossal"}
    # the CPU list keeps only FSDP2 (Colossal-AI's ZeRO plugins need CUDA); unknown names are
    # refused
    assert all(parser().parse_args(a).framework == "fsdp2" for _, a, _ in run_list(cpu=True))
    with pytest.raises(ValueError, match="unknown run"):
        run_list(only=["FSDP3"])


def test_plugin_kwargs_and_optimizers():
    assert speed.plugin_kwargs(
        ["reduce_bucket_size_in_m=128", "enable_async_reduce=False", "x='a'", "y=word"]
    ) == {"reduce_bucket_size_in_m": 128, "enable_async_reduce": False, "x": "a", "y": "word"}
    for bad in ("no_equals", "1x=2", "=3"):
        with pytest.raises(ValueError, match="name=value"):
            speed.plugin_kwargs([bad])
    p = [torch.nn.Parameter(torch.ones(3))]
    assert isinstance(speed.make_optimizer("adamw", p, 1e-3), torch.optim.AdamW)
    assert speed.make_optimizer("adamw", p, 1e-3).defaults["weight_decay"] == 0.01
    with pytest.raises(ValueError, match="unknown optimizer"):
        speed.make_optimizer("sgd", p, 1e-3)


def test_compiled_layers_keep_parameters_and_numerics():
    """torch.compile per layer (backend 'eager' here: no C compiler needed) changes no number."""
    config = ModelShape.llama(layers=2, hidden=64, heads=4, kv_heads=4, vocab=128).config(
        max_seq=32
    )
    model = build_llama(config)
    before = list(model.parameters())
    batch = token_batch(0, 2, 16, 128)
    loss = model(**batch).loss
    assert decoder.compile_layers(model, backend="eager") == 2
    assert list(model.parameters()) == before and all(
        p is q for p, q in zip(model.parameters(), before)
    )
    assert type(model.model.layers[0]).__name__ == "OptimizedModule"
    assert torch.equal(model(**batch).loss, loss)
    wrapper = torch.nn.Module()
    wrapper.module = model  # as a plugin's wrapper holds it
    assert decoder.decoder_owner(wrapper) is model
    with pytest.raises(TypeError, match="no decoder layers"):
        decoder.decoder_owner(torch.nn.Linear(2, 2))


def test_chunked_reference_equals_the_whole_batch():
    from helpers.train.reference import train_reference_mixed
    import copy

    config = ModelShape.llama(layers=1, hidden=32, heads=2, kv_heads=2, vocab=64).config(max_seq=16)
    model = build_llama(config)
    batches = [token_batch(k, 4, 16, 64) for k in range(2)]
    whole = train_reference_mixed(copy.deepcopy(model), batches, 1e-3, torch.float32)
    chunked = train_reference_mixed(copy.deepcopy(model), batches, 1e-3, torch.float32, chunks=2)
    assert max(abs(a - b) for a, b in zip(whole, chunked)) < 1e-5


def test_summary_flags_failures_nan_and_a_loss_off_the_reference():
    rank = dict(
        framework="colossal",
        plugin="zero",
        optimizer="adamw_fused",
        compiled=True,
        micro_batch=8,
        global_batch=16,
        seq=2048,
        gpus=2,
        tokens_per_s=160_000,
        mfu=0.49,
        params=940_640_256,
        layers=16,
        hidden=2048,
        peak_mib=30_000,
        losses=[10.77, 10.69, 10.67, 10.5],
        reference=[10.78, 10.69, 10.67],
    )
    other = {**rank, "losses": [10.79, 10.69, 10.68, 10.6]}
    good = summarize("x", {"ok": True, "results": [rank, other], "seconds": 50})
    assert good["ok"] and good["loss_ok"] and good["max_ref_gap"] == pytest.approx(0.005, abs=1e-4)
    assert good["tokens_per_s_per_gpu"] == 80_000 and good["loss_last"] == pytest.approx(10.55)
    # PaLM's formula (Chowdhery et al. 2022, appendix B): N = every parameter,
    # (6N + 12·L·h·s) per token
    assert good["mfu_all_params"] == pytest.approx(
        160_000 * (6 * 940_640_256 + 12 * 16 * 2048 * 2048) / (2 * 989.5e12), abs=1e-4
    )
    nan = summarize(
        "x",
        {"ok": True, "results": [{**rank, "losses": [10.77, math.nan, math.nan, math.nan]}, other]},
    )
    assert nan["ok"] and not nan["loss_ok"]
    off = summarize(
        "x", {"ok": True, "results": [{**rank, "losses": [11.5, 10.7, 10.6, 10.5]}, other]}
    )
    assert not off["loss_ok"]
    failed = summarize("x", {"ok": False, "error": "Traceback\nRuntimeError: boom", "results": []})
    assert not failed["ok"] and "boom" in failed["error"]


def test_quick_flagship_runs_fsdp2_eager_and_compiled_on_gloo():
    """The real entry point on two CPU ranks: FSDP2 eager and with Inductor-compiled layers."""
    from helpers.run.env import gpu_count
    from helpers.record.flagship import record

    if gpu_count() >= 2:
        pytest.skip("the GPU box runs the full benchmark")
    rows = record(
        quick=True,
        only=["FSDP2, eager", "FSDP2 + torch.compile per layer"],
        budget_s=600,
        save_results=False,
    )
    assert [r["name"] for r in rows] == [
        "FSDP2, eager (tiny)",
        "FSDP2 + torch.compile per layer (tiny)",
    ]
    for row in rows:
        assert row["ok"] and row["loss_ok"] and row["max_ref_gap"] <= 1e-4, row  # fp32 on CPU
    assert [r["compiled"] for r in rows] == [False, True]
    assert rows[0]["loss_last"] == pytest.approx(rows[1]["loss_last"], abs=1e-4)


def test_recorded_flagship_table_and_figure():
    """The book's table is recomputed from the ranks' results; every recorded run's loss is
    checked."""
    from helpers.chapters.ch08_flagship import COLUMNS, recorded, setup, table_rows
    from helpers.figures.ch08_flagship import mfu_figure

    record = recorded()
    if record is None:
        pytest.skip("no flagship record on this machine")
    rows = table_rows(record)
    assert len(rows) == len(record["runs"]) and all(set(r) <= set(COLUMNS) for r in rows)
    for run, row in zip(record["runs"], rows):
        s = summarize(run["name"], run)
        if s["ok"]:
            assert (
                row["setup"] == setup(s)
                and row["MFU %"] == f"{100 * s['mfu']:.1f}"
                and row["loss ok"] == "yes"
            )
            assert s["tokens_per_s_per_gpu"] * s["gpus"] == pytest.approx(
                run["results"][0]["tokens_per_s"], abs=2
            )
    assert len(mfu_figure(record).axes[0].patches) == sum(
        summarize(r["name"], r)["ok"] for r in record["runs"]
    )
    assert (
        setup(
            {
                "plugin": "zero",
                "zero_stage": 1,
                "compiled": False,
                "optimizer": "adamw",
                "micro_batch": 16,
                "plugin_kw": {"overlap_allgather": True},
                "norm_on_device": True,
            }
        )
        == "LowLevelZero ZeRO-1 · eager · adamw · overlapped all-gather · norm on GPU · mbs 16"
    )
    assert (
        setup(
            {
                "plugin": "zero",
                "compiled": True,
                "optimizer": "adamw_fused",
                "micro_batch": 8,
                "plugin_kw": {"reduce_bucket_size_in_m": 128},
            }
        )
        == "LowLevelZero ZeRO-2 · compiled · adamw_fused · buckets 128 M · mbs 8"
    )


def test_kernel_rows_read_rank_zeros_profile():
    from helpers.chapters.ch08_flagship import columns, kernel_rows

    rank = dict(
        framework="fsdp2",
        plugin="fully_shard",
        optimizer="adamw",
        compiled=False,
        micro_batch=8,
        global_batch=16,
        seq=2048,
        gpus=2,
        tokens_per_s=100_000,
        mfu=0.3,
        params=10,
        layers=1,
        hidden=8,
        losses=[1.0],
        reference=[],
        seconds_per_step=0.3276,
        profile={"kernels": {"ms": {"matmul": 200.0, "attention": 40.0}, "top": []}},
    )
    rows = kernel_rows(
        {
            "runs": [
                {"name": "a", "ok": True, "results": [rank]},
                {"name": "b", "ok": True, "results": [{**rank, "profile": None}]},
            ]
        }
    )
    assert rows == [{"run": "a", "step": 327.6, "idle": 87.6, "matmul": 200.0, "attention": 40.0}]
    assert columns(rows) == ["run", "step", "idle", "matmul", "attention"]


def test_plugin_kwargs_of_every_run_are_the_plugins_own():
    """A misspelt keyword would cost a GPU run: check each against the plugin's signature here."""
    from inspect import signature

    import colossalai.booster.plugin as plugins

    from helpers.parallel.train_layout import plugin_spec
    from helpers.train.framework_run import layout_from

    for name, args, _ in run_list():
        ns = parser().parse_args(args)
        kw = speed.plugin_kwargs(ns.plugin_kw)
        if ns.framework == "colossal":
            cls = getattr(plugins, plugin_spec(layout_from(ns))[0])
            assert set(kw) <= set(signature(cls).parameters), (name, kw)
        else:
            assert kw == {}, name


def test_overlap_allgather_waits_move_to_layer_pre_hooks_and_compile():
    """speed.wait_gathers_per_layer: the gather a ZeRO step leaves pending is waited for before the
    layer that reads it runs, and the compiled layer no longer sees a ColoParameter."""
    from colossalai.tensor.colo_parameter import ColoParameter
    from colossalai.zero.low_level.zero_hook import ZeroOpHook, set_all_gather_handle

    class Wrapper(torch.nn.Module):  # what LowLevelZeroModel(overlap_allgather=True) leaves
        def __init__(self):
            super().__init__()
            self.module = torch.nn.ModuleDict(
                {
                    "embed": torch.nn.Embedding(8, 4),
                    "layers": torch.nn.ModuleList([torch.nn.Linear(4, 4)]),
                }
            )
            self.op_hooks = [ZeroOpHook()]
            for p in self.module.parameters():
                p.__class__ = ColoParameter

    model = Wrapper()
    with pytest.raises(ValueError):
        speed.wait_gathers_per_layer(torch.nn.Linear(2, 2))
    model.module["layers"][0] = torch.compile(model.module["layers"][0], backend="eager")
    assert speed.wait_gathers_per_layer(model) == 2  # the embedding, the compiled layer
    assert model.op_hooks == [] and all(type(p) is torch.nn.Parameter for p in model.parameters())

    waited = []

    class Handle:
        def __init__(self, name):
            self.name = name

        def wait(self):
            waited.append(self.name)

    for name, p in model.module.named_parameters():
        set_all_gather_handle(p, Handle(name))
    x = model.module["embed"](torch.tensor([1, 2]))
    assert waited == ["embed.weight"]
    model.module["layers"][0](x).sum().backward()
    assert waited[1:] == ["layers.0._orig_mod.weight", "layers.0._orig_mod.bias"]
    model.module["layers"][0](x)  # a handle is waited for once
    assert len(waited) == 3


def test_grad_norm_on_device_equals_colossalais_norm_and_skips_the_multiply_by_one(monkeypatch):
    """speed.grad_norm_on_device: the same 2-norm as LowLevelZeroOptimizer._compute_grad_norm
    (fp64, host) and calculate_global_norm_from_list, but as a GPU-side tensor; no multiply when
    the scale is 1."""
    import socket

    import torch.distributed as dist
    from colossalai.zero.low_level import low_level_optim
    from colossalai.zero.low_level.low_level_optim import LowLevelZeroOptimizer

    monkeypatch.setattr(
        low_level_optim,
        "calculate_global_norm_from_list",
        low_level_optim.calculate_global_norm_from_list,
    )  # restored after the test
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:

        class Fake:  # the attributes step() reads, as a bf16 LowLevelZeroOptimizer has them
            _clip_grad_norm, mixed_precision_mixin = 0.0, None

        opt = Fake()
        opt._compute_grad_norm = LowLevelZeroOptimizer._compute_grad_norm.__get__(opt)
        opt._unscale_and_clip_grads = LowLevelZeroOptimizer._unscale_and_clip_grads.__get__(opt)
        grads = [
            torch.randn(1000, generator=torch.Generator().manual_seed(i)).to(torch.bfloat16)
            for i in range(3)
        ]
        host = opt._compute_grad_norm(dp_pg=dist.group.WORLD, gradients=grads)
        expected = low_level_optim.calculate_global_norm_from_list([host, host])
        speed.grad_norm_on_device(opt)
        device = opt._compute_grad_norm(dp_pg=dist.group.WORLD, gradients=grads)
        assert isinstance(device, torch.Tensor) and device.dtype == torch.float32
        assert float(device) == pytest.approx(host, rel=1e-6)
        total = low_level_optim.calculate_global_norm_from_list([device, device])
        assert isinstance(total, torch.Tensor) and float(total) == pytest.approx(expected, rel=1e-6)
        assert (
            low_level_optim.calculate_global_norm_from_list([3.0, 4.0]) == 5.0
        )  # floats: Colossal-AI's own
        before = [g.clone() for g in grads]
        opt._unscale_and_clip_grads(grads, device)
        assert all(torch.equal(a, b) for a, b in zip(grads, before))
        with pytest.raises(ValueError, match="2-norm"):
            opt._compute_grad_norm(dist.group.WORLD, grads, norm_type=float("inf"))
        opt._clip_grad_norm = 1.0
        with pytest.raises(ValueError, match="clipping"):
            speed.grad_norm_on_device(opt)
        with pytest.raises(TypeError):
            speed.grad_norm_on_device(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1))
    finally:
        dist.destroy_process_group()


def _round_row(name, tps, framework="colossal", ok=True, loss_ok=True, error=""):
    return {
        "name": name,
        "ok": ok,
        "loss_ok": loss_ok,
        "framework": framework,
        "tokens_per_s_per_gpu": tps,
        "mfu": tps / 1e6,
        "mfu_all_params": tps / 9e5,
        "error": error,
    }


def test_head_to_head_medians_ratio_and_skipped_rounds():
    """compare(): medians per run over the rounds that ran, the ratio to FSDP2's; a bad loss
    invalidates."""
    from helpers.record.flagship_runs import HEAD_TO_HEAD, ROUND
    from helpers.record.flagship_summary import compare

    assert [n for n, _, _ in run_list(only=list(HEAD_TO_HEAD), rounds=2)] == [
        f"{n}{ROUND}{k}" for k in (1, 2) for n in HEAD_TO_HEAD
    ]
    rows = [
        _round_row(f"cai{ROUND}1", 100),
        _round_row(f"fsdp{ROUND}1", 90, "fsdp2"),
        _round_row(f"cai{ROUND}2", 104),
        _round_row(f"fsdp{ROUND}2", 94, "fsdp2"),
        _round_row(f"cai{ROUND}3", 0, ok=False, error="skipped: the recording's budget was spent"),
        _round_row(f"bad{ROUND}1", 200, loss_ok=False),
    ]
    out = {g["name"]: g for g in compare(rows)}
    assert (
        out["cai"]["rounds"] == 2
        and out["cai"]["median"] == 102
        and out["cai"]["vs_fsdp2"] == round(102 / 92, 4)
    )
    assert out["cai"]["spread"] == pytest.approx(4 / 102, abs=1e-4) and out["cai"]["valid"]
    assert out["fsdp"]["vs_fsdp2"] == 1.0 and not out["bad"]["valid"]


def test_recorded_head_to_head_and_tuning_steps():
    """The book's head-to-head and step tables, recomputed from the records."""
    from helpers.record.flagship_runs import HEAD_TO_HEAD
    from helpers.record.flagship_summary import compare
    from helpers.chapters.ch08_flagship import recorded
    from helpers.chapters.ch08_tuning import STEPS, h2h_rows, step_rows
    from helpers.figures.ch08_flagship import h2h_figure

    runs, h2h = recorded(), recorded("flagship_h2h")
    if runs is None or h2h is None:
        pytest.skip("no flagship records on this machine")
    groups = compare([summarize(r["name"], r) for r in h2h["runs"]])
    assert {g["name"] for g in groups} == set(HEAD_TO_HEAD) and all(g["valid"] for g in groups)
    best = max(groups, key=lambda g: g["median"])
    assert (
        best["framework"] == "colossal" and best["vs_fsdp2"] > 1
    )  # Colossal-AI ahead in the same run
    assert best["mfu_median"] >= 0.5 and best["mfu_all_params_median"] >= 0.5
    rows = h2h_rows(h2h)
    assert [r["name"] for r in rows] == [g["name"] for g in groups]
    assert len(h2h_figure(h2h).axes[0].collections) == len(groups)
    steps = {r["step"]: r for r in step_rows(runs, h2h)}
    assert set(steps) <= set(STEPS) and all(b in {n for n, _ in RUNS} for b in STEPS.values())
    compiled = steps["+ torch.compile per layer"]
    assert float(compiled["throughput ×"]) > 1.2  # the big step of the story
    assert steps["+ overlap the parameter all-gather"]["throughput ×"] == "not in one record"


def test_tune_boosted_applies_the_flags_it_is_given():
    """speed.tune_boosted: --compile compiles the layers; --norm_on_device refuses a non-ZeRO
    optimizer."""
    import argparse

    p = argparse.ArgumentParser()
    speed.add_arguments(p)
    config = ModelShape.llama(layers=2, hidden=64, heads=4, kv_heads=4, vocab=128).config(
        max_seq=32
    )
    model = build_llama(config)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    speed.tune_boosted(model, opt, p.parse_args([]), {})
    assert type(model.model.layers[0]).__name__ != "OptimizedModule"
    speed.tune_boosted(model, opt, p.parse_args(["--compile"]), {})
    assert type(model.model.layers[0]).__name__ == "OptimizedModule"
    with pytest.raises(TypeError, match="not a LowLevelZero optimizer"):
        speed.tune_boosted(build_llama(config), opt, p.parse_args(["--norm_on_device"]), {})


def test_a_run_off_its_reference_exits_non_zero_with_its_results_kept():
    """--fail_on_divergence: every rank gathers the losses and loss_verdict decides; a run that
    fails the check still printed its RESULT lines, and the launch fails with the reason. (A
    negative tolerance fails any run: the check itself is what is tested here; a run that passes
    it is test_quick_flagship_runs_fsdp2_eager_and_compiled_on_gloo, whose runs carry the check.)"""
    from helpers.run.launch import LaunchError, launch
    from helpers.record.runner import results_in

    args = [
        "--framework",
        "fsdp2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--ref_steps",
        "2",
        "--seq",
        "64",
        "--micro_batch",
        "2",
    ]
    with pytest.raises(
        LaunchError, match="the loss check failed: loss departs from the reference"
    ) as e:
        launch("ch08_train", 2, args + ["--fail_on_divergence", "-1"], timeout_s=240, show="none")
    assert len(results_in(e.value.lines)) == 2
