"""The one-GPU records (results/1x<GPU>/) beside the 2-GPU ones, checked on CPU.

The recorders' ``--gpus 1`` run lists parse with their demos' own parsers and fit the device call's
budget; ``results.load`` keeps returning the 2-GPU record to the chapters written for it; the
side-by-side rows work with and without a one-GPU record (fake records in a tmp results dir).
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from pathlib import Path

import pytest

from helpers.figures import ch07_memory as ch07_figures
from helpers.record import (
    ch07 as chapter07,
    ch07_layouts,
    ch07_tables,
    ch07_world,
    ch09 as chapter09,
    cli,
    flagship,
    flagship_runs,
    runner as recorder,
    results,
)

REAL = Path(__file__).resolve().parent.parent / "results" / "2xNVIDIA-H200"
PROV = {
    "hardware": "?",
    "date": "2026-12-01 10:00 UTC",
    "command": "c",
    "git_commit": "abcdef1234",
    "versions": {"torch": "t", "cuda": "c", "colossalai": "0.5.0", "transformers": "4"},
}


def _write(
    root: Path, hardware: str, name: str, runs: list, date: str = "2026-12-01 10:00 UTC"
) -> Path:
    (root / hardware).mkdir(parents=True, exist_ok=True)
    path = root / hardware / f"{name}.json"
    path.write_text(
        json.dumps({"provenance": {**PROV, "hardware": hardware, "date": date}, "runs": runs})
    )
    return path


@pytest.fixture
def tmp_results(tmp_path, monkeypatch):
    """An empty results dir holding copies of the real 2-GPU records the side-by-side tables
    read."""
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    (tmp_path / "2xNVIDIA-H200").mkdir()
    for name in ("ch07_memory", "ch09_resnet", "flagship", "flagship_h2h"):
        shutil.copy(REAL / f"{name}.json", tmp_path / "2xNVIDIA-H200" / f"{name}.json")
    return tmp_path


# --- results.load: a one-GPU record never shadows the 2-GPU one ---------------------------------


def test_load_asks_for_a_gpu_count_or_a_hardware(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    _write(tmp_path, "2xFAKE", "x", [{"name": "two"}], date="2026-11-30 09:00 UTC")
    _write(tmp_path, "1xFAKE", "x", [{"name": "one"}], date="2026-12-01 09:00 UTC")  # newer
    _write(tmp_path, "cpu", "x", [{"name": "cpu"}], date="2026-12-02 09:00 UTC")
    assert (
        results.load("x")["runs"][0]["name"] == "two"
    )  # the newer one-GPU record does not shadow it
    assert results.load("x", gpus=2)["runs"][0]["name"] == "two"
    assert results.load("x", gpus=1)["runs"][0]["name"] == "one"
    assert results.load("x", hardware="1xFAKE")["runs"][0]["name"] == "one"
    with pytest.raises(FileNotFoundError, match="on 4 GPU"):
        results.load("x", gpus=4)
    assert results.find("x", gpus=4) is None and results.find("y") is None
    _write(tmp_path, "1xFAKE", "only_one", [{"name": "one"}])
    assert results.load("only_one")["runs"][0]["name"] == "one"  # the only record there is
    _write(tmp_path, "4xFAKE", "x", [{"name": "four"}], date="2026-12-03 09:00 UTC")
    assert results.load("x")["runs"][0]["name"] == "four"  # newest multi-GPU record, as before
    assert [results.gpus_in(h) for h in ("1xNVIDIA-H200", "2xNVIDIA-H200", "cpu", "odd")] == [
        1,
        2,
        0,
        None,
    ]


def test_the_books_readers_ask_for_two_gpus(tmp_results):
    from helpers.chapters import (
        ch08_troubleshooting as chapter08_show,
        ch09_records as chapter09_show,
        ch08_flagship as flagship_show,
    )

    _write(tmp_results, "1xNVIDIA-H200", "ch07_memory", [], date="2030-01-01 00:00 UTC")
    _write(tmp_results, "1xNVIDIA-H200", "ch09_resnet", [], date="2030-01-01 00:00 UTC")
    _write(tmp_results, "1xNVIDIA-H200", "flagship", [], date="2030-01-01 00:00 UTC")
    assert chapter09_show.recorded("resnet")["provenance"]["hardware"] == "2xNVIDIA-H200"
    assert chapter09_show.recorded("resnet", gpus=1)["provenance"]["hardware"] == "1xNVIDIA-H200"
    assert flagship_show.recorded()["provenance"]["hardware"] == "2xNVIDIA-H200"
    assert flagship_show.recorded("flagship", gpus=1)["runs"] == []
    assert "2xNVIDIA-H200" in ch07_tables.show_recorded()
    assert (
        results.load("ch07_memory")["provenance"]["hardware"] == "2xNVIDIA-H200"
    )  # notebooks' plain load()
    assert chapter08_show.recorded("compare") is None  # not in the tmp dir


def test_save_copies_to_out(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(results, "hardware", lambda: "1xFAKE")
    path = results.save("n", [{"name": "a"}], "cmd", copy_to=tmp_path / "out")
    assert path == tmp_path / "results" / "1xFAKE" / "n.json"
    assert json.loads((tmp_path / "out" / "1xFAKE" / "n.json").read_text())["runs"] == [
        {"name": "a"}
    ]


# --- the recorders' shared loop ----------------------------------------------------------------


def test_runs_that_need_more_gpus_are_recorded_as_not_run(monkeypatch):
    launched = []
    monkeypatch.setattr(
        recorder,
        "run_one",
        lambda name, demo, gpus, args, timeout_s, show="none": (
            launched.append((name, timeout_s))
            or {"name": name, "ok": True, "results": [], "seconds": 1.0}
        ),
    )
    runs = [("one", "d", 1, ["-a"], 400.0), ("two", "d", 2, ["-b"], 240.0)]
    out = recorder.run_part("t", "p", runs, time.monotonic() + 60, max_gpus=1)
    assert [r["name"] for r in out] == ["one", "two"] and [n for n, _ in launched] == ["one"]
    assert launched[0][1] <= 60  # the budget caps the run's timeout
    assert (
        out[1]["not_run"] == out[1]["error"] == "needs 2 GPUs"
        and out[1]["ok"] is False
        and out[1]["args"] == ["-b"]
    )
    from helpers.chapters.ch09_records import run_status

    assert run_status(out[1]) == "not run: needs 2 GPUs"
    skipped = recorder.run_part("t", "p", runs[:1], time.monotonic() + 5)
    assert (
        skipped[0]["not_run"].startswith("skipped")
        and run_status(skipped[0]) == "not run: the recording's budget was spent"
    )


def test_world_mismatch_keeps_a_one_gpu_record_out_of_the_two_gpu_folder(monkeypatch):
    import helpers.run.env

    assert recorder.world_mismatch(None, True) is None
    assert "at least 1" in recorder.world_mismatch(0, False)
    monkeypatch.setattr(helpers.run.env, "gpu_count", lambda: 2)
    assert "CUDA_VISIBLE_DEVICES=0" in recorder.world_mismatch(1, True)
    assert recorder.world_mismatch(1, False) is None and recorder.world_mismatch(2, True) is None
    assert "only 2" in recorder.world_mismatch(4, False)
    monkeypatch.setattr(helpers.run.env, "gpu_count", lambda: 1)
    assert recorder.world_mismatch(1, True) is None
    monkeypatch.setattr(helpers.run.env, "gpu_count", lambda: 0)  # CPU: the gloo paths
    assert recorder.world_mismatch(1, True) is None


# --- the device command: parsed by each recorder's own command line, within the budget --------


def _split(command: str) -> list[tuple[str, list[str]]]:
    """(module, argv) of each recorder in the device command ($(( )) replaced by a number)."""
    line = command.split(" && ", 3)[-1].replace("$(( END - $(date +%s) ))", "190")
    out = []
    for part in line.split(" ; "):
        words = shlex.split(part)
        assert words[:3] == ["python", "-m", "helpers.record"]
        out.append((words[3], words[4:]))
    return out


def test_device_command_parses_with_each_recorder_in_budget(monkeypatch):
    command = cli.one_gpu_device_command("c0ffee")
    assert command.startswith(
        "source .gpu-kit/activate.sh && export BOOK_GIT_COMMIT=c0ffee && END=$(( $(date +%s) + "
    )
    steps = _split(command)
    assert [m for m, _ in steps] == ["ch09", "flagship", "ch07"]
    for module, argv in steps:
        assert (
            argv[0] == "--record" and argv[argv.index("--gpus") + 1] == "1" and "--budget_s" in argv
        )
        assert argv[-2:] == ["--copy_to", "$OUT"]
    # each recorder's command line takes its argv and hands the flags on to its recording
    got = {}
    monkeypatch.setattr(chapter09, "record", lambda *a, **k: got.update(ch09=(a, k)))
    spec, args = cli.parse(*steps[0])
    spec.record(args)
    (parts, quick, budget, save_results, show, gpus, copy_to), kw = got["ch09"]
    assert parts == ["resnet"] and save_results and not quick and (gpus, copy_to) == (1, "$OUT")
    _, fl = cli.parse(*steps[1])
    assert fl.gpus == 1 and fl.record and not fl.head_to_head and fl.only is None
    _, c7 = cli.parse(*steps[2])
    assert c7.gpus == 1 and c7.record and c7.budget_s == 190 and not c7.only
    # the budget arithmetic: ResNet's one run, the flagship's three, then Chapter 7 gets what is
    # left
    assert (
        chapter09.RESNET_S <= budget == chapter09.ONE_GPU_BUDGET_S and budget >= recorder.MIN_LEFT_S
    )
    overhead = 10  # per recorder: python, torch and Colossal-AI imports, the last kill, the save
    left_for_ch07 = cli.ONE_GPU_TOTAL_S - budget - fl.budget_s - 2 * overhead
    assert left_for_ch07 >= chapter07.ONE_GPU_BUDGET_S
    assert cli.ONE_GPU_TOTAL_S + 60 <= 600  # the kit's install and a margin within one device call


# --- Chapter 9's ResNet on one GPU -----------------------------------------------------------


def test_resnet_one_gpu_list_parses_and_runs_only_the_one_gpu_run(tmp_path, monkeypatch):
    from helpers.train.resnet import parser

    runs = chapter09.run_list("resnet", gpus=1)
    assert [g for _, _, g, _, _ in runs] == [1, 2, 2, 2, 2]
    for _, _, _, args, _ in runs:
        parser().parse_args(args)
    [(name, _, gpus, args, _)] = chapter09.run_list("resnet", quick=True, gpus=1)
    assert gpus == 1 and "torch_ddp" in args
    fake = {
        "accuracy": 0.95,
        "images_per_s": 7000,
        "peak_mib": 71.8,
        "epochs": 30,
        "world_size": 1,
        "plugin": "torch_ddp",
    }
    monkeypatch.setattr(
        recorder,
        "run_one",
        lambda name, demo, gpus, args, timeout_s, show="none": {
            "name": name,
            "demo": demo,
            "gpus": gpus,
            "args": args,
            "ok": True,
            "results": [fake],
            "seconds": 30.0,
        },
    )
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(results, "hardware", lambda: "1xNVIDIA-H200")
    out = chapter09.record(["resnet"], False, 60, True, gpus=1, copy_to=tmp_path / "out")
    assert [r.get("not_run") for r in out["resnet"]] == [None] + ["needs 2 GPUs"] * 4
    saved = results.load("ch09_resnet", gpus=1)
    assert "--gpus 1 --budget_s 60" in saved["provenance"]["command"]
    assert (tmp_path / "out" / "1xNVIDIA-H200" / "ch09_resnet.json").exists()


def test_resnet_side_by_side(tmp_results):
    from helpers.chapters import ch09_resnet as show

    rows = show.resnet_world_rows()
    assert len(rows) == 5 and all(
        r["1×H200 test accuracy"] == "not recorded yet on 1×H200" for r in rows
    )
    assert rows[0]["2×H200 test accuracy"] == "95.82 %" and "--gpus 1" in rows[0]["note"]
    assert "not recorded yet on 1×H200" in show.resnet_one_gpu_status()
    two = results.load("ch09_resnet", gpus=2)
    one_runs = [
        {
            **two["runs"][0],
            "results": [{**two["runs"][0]["results"][0], "accuracy": 0.9612, "images_per_s": 9000}],
        }
    ]
    one_runs += [
        recorder.not_run_record(
            r["name"], "ch09_resnet_train", 2, r["args"], "resnet", "needs 2 GPUs"
        )
        for r in two["runs"][1:]
    ]
    _write(tmp_results, "1xNVIDIA-H200", "ch09_resnet", one_runs)
    rows = show.resnet_world_rows()
    assert rows[0]["1×H200 test accuracy"] == "96.12 %" and rows[0]["1×H200 images/s"] == 9000
    assert rows[0]["2×H200 test accuracy"] == "95.82 %" and rows[0]["note"] == ""
    assert all(r["1×H200 test accuracy"] == "not run: needs 2 GPUs" for r in rows[1:])
    assert show.resnet_rows(one_runs)[1]["test accuracy"] == "not run: needs 2 GPUs"
    assert show.resnet_one_gpu_status().startswith("Recorded on 1xNVIDIA-H200")


# --- Chapter 7's memory layouts at world size 1 ----------------------------------------------


def test_world_one_layouts_parse_and_make_sense():
    from helpers.train.layout_step import parser
    from helpers.parallel.train_layout import TrainLayout
    from helpers.cost.memory_llama import predict

    names, skipped = ch07_layouts.layouts_for(1)
    assert set(skipped) == {
        "TP=2 bf16",
        "TP=2 bf16 + recompute",
        "PP=2 bf16 (1F1B, 4 micro-batches)",
        "ZeRO-1 bf16",
    }
    assert (
        skipped["TP=2 bf16"] == "needs 2 GPUs (tp·pp = 2)"
        and "ZeRO-2 bf16" in skipped["ZeRO-1 bf16"]
    )
    assert len(names) + len(skipped) == len(ch07_layouts.LAYOUTS) and len(set(names)) == len(names)
    assert ch07_layouts.layouts_for(2) == ([x.name for x in ch07_layouts.LAYOUTS], {})
    for name in names:
        layout = ch07_layouts.layout_named(name, 1)
        ns = parser().parse_args(layout.to_args())
        assert TrainLayout.from_namespace(ns) == layout and ns.world == 1 and layout.dp == 1
        p = predict(layout, 0)
        assert 0 < p["peak"] < 140 * 2**30 and p["rank"] == 0
    # one rank holds every shard: the model's ZeRO-1 and ZeRO-2 are the same layout there
    z1, z2 = (
        predict(ch07_layouts.layout_named(n, 1))["peak"] for n in ("ZeRO-1 bf16", "ZeRO-2 bf16")
    )
    assert (
        z1 == z2 > predict(ch07_layouts.layout_named("ZeRO-2 bf16", 2))["peak"]
    )  # two ranks share the states
    # the budget: the techniques come first, and the device call's least share starts at least five
    techniques = [n for n in ch07_layouts.TECHNIQUES if n in names]
    assert names[: len(techniques)] == sorted(techniques, key=names.index) and set(
        names[:7]
    ) == set(techniques)
    assert len(chapter07.within(names, chapter07.ONE_GPU_BUDGET_S)) >= 5
    with pytest.raises(ValueError, match="does not run at world size 1"):
        ch07_layouts.plan(1, only=["TP=2 bf16"])
    assert ch07_layouts.plan(1, quick=True)[0] == ["DDP fp32", "ZeRO-2 bf16"]


def _ch07_run(name: str, world: int, scale: float = 1.0) -> dict:
    from helpers.cost.memory_llama import predict

    layout = ch07_layouts.layout_named(name, world)
    ranks = [
        {
            "rank": r,
            "layout": layout.__dict__ | {"shape": layout.shape.__dict__},
            "tokens_per_s": 40000.0,
            "measured": {
                "peak": predict(layout, r)["peak"] * scale,
                "outside_allocator": 1,
                "peak_reserved": 2,
            },
        }
        for r in range(world)
    ]
    return {"name": name, "world": world, "args": layout.to_args(), "ranks": ranks, "seconds": 25.0}


def test_ch07_side_by_side_predicts_world_one(tmp_results):
    rows = {r["layout"]: r for r in ch07_world.world_rows()}
    assert len(rows) == len(ch07_layouts.LAYOUTS)
    ddp = rows["DDP fp32"]
    assert ddp["1×H200 measured GiB"] == "not recorded yet on 1×H200" and "--gpus 1" in ddp["note"]
    # DDP replicates everything, its gradient buckets too (measured on one H200): one peak at any
    # world size
    assert (
        ddp["2×H200 measured GiB"] == "14.93"
        and ddp["1×H200 predicted GiB"] == ddp["2×H200 predicted GiB"]
    )
    zero2 = rows["ZeRO-2 bf16"]
    assert float(zero2["1×H200 predicted GiB"]) > float(
        zero2["2×H200 predicted GiB"]
    )  # nothing to shard over
    assert rows["TP=2 bf16"]["1×H200 predicted GiB"] == "—"
    assert "nothing sharded at world 1" in rows["ZeRO-2 bf16"]["note"]
    assert "not recorded yet" in ch07_world.one_gpu_status()
    runs = [
        _ch07_run("DDP fp32", 1, 1.1),
        _ch07_run("ZeRO-2 bf16", 1),
        {
            "name": "Gemini bf16 (static)",
            "world": 1,
            "not_run": "skipped: the recording's budget was spent",
            "error": "skipped: the recording's budget was spent",
        },
    ]
    runs = chapter07._with_not_run(runs, ch07_layouts.layouts_for(1)[1], 1)
    _write(tmp_results, "1xNVIDIA-H200", "ch07_memory", runs)
    rows = {r["layout"]: r for r in ch07_world.world_rows()}
    ddp = rows["DDP fp32"]
    assert (
        ddp["1×H200 error %"] == f"{100 * (1 / 1.1 - 1):+.1f}"
        and ddp["1×H200 tokens/s per GPU"] == "40,000"
    )
    assert ddp["2×H200 tokens/s per GPU"] == "39,769" and ddp["note"] == ""
    assert float(ddp["1 GPU / 2 GPUs peak"]) == pytest.approx(
        float(ddp["1×H200 measured GiB"]) / 14.93, abs=0.01
    )
    assert rows["ZeRO-2 bf16"]["1×H200 error %"] == "+0.0"
    assert rows["TP=2 bf16"]["1×H200 measured GiB"] == "not run: needs 2 GPUs (tp·pp = 2)"
    assert (
        rows["Gemini bf16 (static)"]["1×H200 measured GiB"]
        == "not run: skipped: the recording's budget was spent"
    )
    assert rows["Gemini bf16 (static)"]["1×H200 predicted GiB"] not in (
        "",
        "—",
    )  # predicted for world 1 all the same
    assert rows["ZeRO-1 bf16"]["1×H200 measured GiB"].startswith(
        "not run: at world 1 the same layout as ZeRO-2 bf16"
    )
    assert rows["ZeRO-2 bf16, micro-batch 8"]["1×H200 measured GiB"] == "not in the 1×H200 record"
    one = results.load("ch07_memory", gpus=1)
    table = ch07_tables.table_rows(one["runs"])
    assert table[2]["measured MiB"] == "not run" and [r["layout"] for r in table][:2] == [
        "DDP fp32",
        "ZeRO-2 bf16",
    ]
    assert [r["layout"] for r in ch07_tables.technique_rows(one)] == ["DDP fp32", "ZeRO-2 bf16"]
    assert ch07_tables.recorded_layouts(one)["ZeRO-2 bf16"].world == 1
    ch07_figures.technique_figure(one)  # the breakdown predicted at world 1
    from helpers.cost.memory_llama import predict

    failed = ch07_tables.summary({"name": "DDP fp32", "world": 1, "error": "boom"})
    assert failed["predicted"] == predict(ch07_layouts.layout_named("DDP fp32", 1))["peak"]
    assert (
        ch07_tables.summary({"name": "TP=2 bf16", "world": 1, "not_run": "x", "error": "x"})[
            "predicted"
        ]
        is None
    )


# --- the flagship on one GPU ----------------------------------------------------------------


def test_flagship_one_gpu_list_parses_within_its_budget():
    from helpers.train.framework_run import parser
    from helpers.chapters.ch08_tuning import STEPS

    runs = flagship_runs.run_list(gpus=1)
    assert [n for n, _, _ in runs] == [n for n, _, _ in flagship_runs.WORLD1_RUNS]
    two_names = {n for n, _ in flagship_runs.RUNS}
    for (name, args, timeout_s), (_, _, beside) in zip(runs, flagship_runs.WORLD1_RUNS):
        ns = parser().parse_args(args)
        assert ns.seq == 2048 and ns.precision == "bf16" and ns.layers == 16 and ns.hidden == 2048
        assert (
            ns.fail_on_divergence == flagship_runs.LOSS_TOLERANCE
            and ns.ref_steps >= 3
            and ns.warmup >= 3
        )
        assert "overlap_allgather=True" not in (ns.plugin_kw or []) and beside in two_names | set(
            flagship_runs.HEAD_TO_HEAD
        )
    frameworks = {parser().parse_args(a).framework: parser().parse_args(a) for _, a, _ in runs}
    assert set(frameworks) == {"fsdp2", "colossal"}
    tuned = parser().parse_args(runs[1][1])
    assert (
        tuned.compile
        and tuned.norm_on_device
        and tuned.optim == "adamw_fused"
        and tuned.micro_batch == 16
    )
    assert not parser().parse_args(runs[0][1]).compile  # the eager baseline
    # every run starts within the budget, the last with time for its own estimate
    t = 0.0
    for _, args, _ in runs:
        left = flagship.ONE_GPU_BUDGET_S - t
        assert left >= max(recorder.MIN_LEFT_S, flagship_runs.estimate_s(args))
        t += flagship_runs.estimate_s(args)
    with pytest.raises(ValueError, match="at --gpus 1"):
        flagship_runs.run_list(gpus=1, only=["FSDP2, eager"])
    assert flagship_runs.run_list(gpus=1, quick=True)[0][0].endswith("(tiny)")
    assert all(
        parser().parse_args(a).framework == "fsdp2"
        for _, a, _ in flagship_runs.run_list(gpus=1, cpu=True)
    )
    assert STEPS  # unchanged tuning story


def test_flagship_side_by_side(tmp_results):
    from helpers.chapters import ch08_one_gpu as show

    rows = show.world_rows()
    assert len(rows) == 2 * len(flagship_runs.WORLD1_RUNS) and set().union(*rows) <= set(
        show.WORLD_COLUMNS
    )
    assert [r["box"] for r in rows] == ["2×H200", "1×H200"] * 3
    assert rows[0]["tokens/s/GPU"] == "57,686" and rows[0]["source"] == "run list"
    assert (
        rows[2]["source"].startswith("head-to-head, median") and "norm on GPU" in rows[2]["setup"]
    )
    assert all(
        r["tokens/s/GPU"] == "not recorded yet on 1×H200" and "--gpus 1" in r["source"]
        for r in rows[1::2]
    )
    assert "not recorded yet" in show.one_gpu_status()
    two = results.load("flagship", gpus=2)
    base = next(r for r in two["runs"] if r["name"] == "LowLevelZero ZeRO-2, eager")
    res = [{**base["results"][0], "gpus": 1, "tokens_per_s": 60000, "global_batch": 8}]
    one_runs = [
        {**base, "gpus": 1, "results": res},
        {
            "name": flagship_runs.WORLD1_RUNS[1][0],
            "ok": False,
            "error": "Traceback\nRuntimeError: boom",
            "results": [],
        },
    ]
    _write(tmp_results, "1xNVIDIA-H200", "flagship", one_runs)
    rows = show.world_rows()
    assert (
        rows[1]["tokens/s/GPU"] == "60,000"
        and rows[1]["1 GPU / 2 GPUs (tokens/s per GPU)"] == f"{60000 / 57686:.3f}"
    )
    assert rows[3]["tokens/s/GPU"] == "failed" and rows[3]["loss ok"] == "RuntimeError: boom"
    assert rows[5]["source"] == "not in the 1×H200 record"
    assert show.one_gpu_status().startswith("Recorded on 1xNVIDIA-H200")
