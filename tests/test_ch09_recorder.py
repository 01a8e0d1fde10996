"""Chapter 9's GPU recorder, checked on CPU: its run lists, the MFU formula, failure records."""

from __future__ import annotations

import pytest

from helpers.record import ch09, runner as recorder
from helpers.cost.mfu import H200_BF16_PEAK as PEAK_FLOPS
from helpers.record.runner import demo_parser
from helpers.train.presets import PRESETS, flops_per_token, mfu
from helpers.run.env import RESULT_PREFIX, gpu_count
from helpers.models.llama import llama_config, llama_params


@pytest.mark.parametrize("quick", [False, True])
def test_every_run_parses_with_its_demo(quick):
    for part in ch09.PARTS:
        runs = ch09.run_list(part, quick)
        assert runs and (len(runs) == 1 if quick else True)
        for name, demo, gpus, args, timeout_s in runs:
            parser = demo_parser(demo)
            parser.parse_args(args)  # argparse exits on a bad flag
            assert gpus in (1, 2) and 60 <= timeout_s <= 600


def test_the_full_recording_covers_the_issue():
    resnet = [a for _, _, _, a, _ in ch09.run_list("resnet")]
    assert sorted(a[a.index("-p") + 1] for a in resnet[1:]) == sorted(ch09.RESNET_PLUGINS)
    hybrid = " ".join(" ".join(a) for _, _, _, a, _ in ch09.run_list("hybrid"))
    for flag in (
        "--tp 2",
        "--pp 2",
        "--mbs",
        "--sp 2",
        "--sp_mode all_to_all",
        "--sp_mode split_gather",
        "--zero 1",
    ):
        assert flag in hybrid
    nan = [a for _, _, _, a, _ in ch09.run_list("nan")]
    assert any("--repeat" in a and "--tp" in a for a in nan) and any(
        "--repeat" not in a for a in nan
    )
    sp_modes = [
        a[a.index("--sp_mode") + 1] if "--sp_mode" in a else None
        for _, _, _, a, _ in ch09.run_list("sp")
    ]
    assert sp_modes == [None, "split_gather", "all_to_all", "ring_attn"]
    assert [a[a.index("--ep") + 1] for _, _, _, a, _ in ch09.run_list("moe")] == ["2", "1"]


def test_mfu_definition():
    config = llama_config(**PRESETS["tiny"], max_seq=256)
    n = (
        llama_params(config) - config.vocab_size * config.hidden_size
    )  # the input embedding does no matmul
    assert flops_per_token(config, 256) == 6 * n + 12 * 4 * 256 * 256
    assert mfu(config, 256, 1e6, 2) == pytest.approx(
        flops_per_token(config, 256) * 1e6 / (2 * PEAK_FLOPS)
    )
    big = llama_config(**PRESETS["1b"], max_seq=1024)
    assert llama_params(big) == pytest.approx(0.94e9, rel=0.01)  # the flagship's 0.95 B Llama


def test_results_of_a_failed_launch_are_kept():
    lines = {
        -1: ["torchrun says"],
        1: [RESULT_PREFIX + '{"rank": 1, "seq": 4}'],
        0: ["x", RESULT_PREFIX + '{"rank": 0, "seq": 2}', RESULT_PREFIX + '{"rank": 0, "seq": 4}'],
    }
    assert [(r["rank"], r["seq"]) for r in recorder.results_in(lines)] == [(0, 2), (0, 4), (1, 4)]


@pytest.mark.skipif(gpu_count() >= 2, reason="checks the CPU refusal")
def test_a_failing_run_is_recorded_not_raised():
    run = recorder.run_one("tp=2", "ch09_hybrid", 2, ["--tp", "2", "--preset", "tiny"], 120)
    assert run["ok"] is False and "needs one CUDA GPU" in run["error"] and run["results"] == []
    assert "helpers.demos.ch09_hybrid" in run["command"]
    assert (
        run["failure"] == "exit" and run["returncode"] not in (0, None) and run["timeout_s"] == 120
    )


def test_a_run_past_its_timeout_says_so():
    """A run killed at its timeout is recorded as such, with the results its ranks printed
    before."""
    run = recorder.run_one(
        "slow",
        "ch08_train",
        1,
        ["--framework", "fsdp2", "--steps", "100000", "--ref_steps", "0"],
        12,
    )
    assert run["ok"] is False and run["failure"] == "timeout" and run["timeout_s"] == 12
    assert len(run["error"]) <= 3000 + len("\n[...]\n")


def test_a_part_stops_before_each_run_when_told_why_or_out_of_budget():
    import time

    runs = [("a", "ch09_hybrid", 2, [], 60.0), ("b", "ch09_hybrid", 2, [], 60.0)]
    out = recorder.run_part("t", "p", runs, time.monotonic() + 1e6, not_run="no data")
    assert [(r["name"], r["ok"], r["error"], r["part"]) for r in out] == [
        ("a", False, "no data", "p"),
        ("b", False, "no data", "p"),
    ]
    out = recorder.run_part("t", "p", runs, time.monotonic() + 5)  # less than MIN_LEFT_S left
    assert all("budget" in r["error"] and r["results"] == [] for r in out)
    assert recorder.status({"ok": True, "results": [{"oom": True}]}) == "ok (out of memory, caught)"
    assert (
        recorder.status({"ok": False, "error": "x\nRuntimeError: y\n"}) == "FAILED: RuntimeError: y"
    )


def test_digits_and_cifar_checks():
    assert ch09.digits_missing() is None  # the copy in helpers/data
    assert ch09.cifar10_present() in (True, False)


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() < 2, reason="needs at least two CUDA GPUs")
def test_quick_recording_runs_on_gpus():
    recorded = ch09.record(list(ch09.PARTS), quick=True, budget_s=600, save_results=False)
    failed = [
        (r["name"], r["error"][-300:]) for runs in recorded.values() for r in runs if not r["ok"]
    ]
    assert not failed, failed


def test_out_of_memory_is_recognised():
    from helpers.train.seq_sweep import out_of_memory

    assert out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert out_of_memory(
        RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)")
    )
    assert not out_of_memory(RuntimeError("NCCL error"))
