"""helpers.run.launch: results sorted by rank, clear failures, and no rank left behind."""

import time
import uuid

import psutil
import pytest

from helpers.run.launch import LaunchError, LaunchTimeout, launch, torchrun_command


def _leftovers(tag):
    """Processes started by this test: they inherit BOOK_TEST_TAG from the launcher's env."""
    time.sleep(0.5)
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("BOOK_TEST_TAG") == tag:
                found.append(p)
        except psutil.Error:
            pass
    return found


@pytest.fixture(autouse=True)
def nothing_left_behind(monkeypatch, request):
    tag = f"{request.node.name}-{uuid.uuid4().hex}"
    monkeypatch.setenv("BOOK_TEST_TAG", tag)
    yield
    left = _leftovers(tag)
    assert not left, f"processes left behind: {[(p.pid, p.name()) for p in left]}"


def test_results_are_collected_and_sorted_by_rank(capsys):
    result = launch("selftest", nproc=3, show="all")
    assert [r["rank"] for r in result.results] == [0, 1, 2]
    assert all(r["sum"] == 3.0 for r in result.results)  # 0 + 1 + 2, all-reduced
    assert result.first(2)["backend"] in ("gloo", "nccl")
    out = capsys.readouterr().out
    assert "[rank2] rank 2 of 3 up" in out and "RESULT" not in out


def test_a_crashed_rank_raises_with_its_own_traceback():
    with pytest.raises(LaunchError) as info:
        launch("selftest", nproc=2, args=["--mode", "crash"], show="none")
    assert info.value.rank == 1
    message = str(info.value)
    assert "on rank 1" in message
    assert "rank 1 crashed on purpose" in message
    assert "Traceback" in message


def test_a_hung_rank_is_killed_at_the_timeout():
    start = time.monotonic()
    with pytest.raises(LaunchTimeout, match="ran past its 10 s timeout; all 2 ranks were killed"):
        launch("selftest", nproc=2, args=["--mode", "hang"], timeout_s=10, show="none")
    assert time.monotonic() - start < 30


def test_a_demo_without_result_lines_is_an_error():
    with pytest.raises(LaunchError, match="printed no RESULT line"):
        launch("selftest", nproc=2, args=["--mode", "silent"], show="none")


def test_command_line_is_torchrun_on_a_module():
    cmd = torchrun_command("ch01_dp", 4, ["--batch", "8"])
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert "--nproc_per_node=4" in cmd
    assert cmd[-4:] == ["-m", "helpers.demos.ch01_dp", "--batch", "8"]
    with pytest.raises(ValueError, match="nproc must be at least 1"):
        torchrun_command("ch01_dp", 0)
    with pytest.raises(ValueError, match="show must be"):
        launch("selftest", show="loud")


def test_the_root_cause_wins_over_a_partners_knock_on_error():
    from helpers.run.failure import LAUNCHER, failing_rank as _failing_rank

    lines = {
        0: [
            "Traceback (most recent call last):",
            "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:1",
        ],
        1: ["Traceback (most recent call last):", "RuntimeError: rank 1 crashed on purpose"],
        LAUNCHER: [
            "Root Cause (first observed failure):",
            "[0]:",
            "  rank      : 0 (local_rank: 0)",
        ],
    }
    assert _failing_rank(lines) == 1  # torchrun saw rank 0 exit first; rank 1 is the cause
    assert _failing_rank({0: lines[0], LAUNCHER: lines[LAUNCHER]}) == 0
    assert _failing_rank({0: ["fine"], LAUNCHER: []}) is None


def test_the_placement_rule_ranks_against_gpus(monkeypatch):
    """Chapter 1, "Where the ranks run": R <= G -> one GPU each with NCCL, R > G -> CPU and gloo."""
    from helpers.run.env import placement, placement_env, rule

    monkeypatch.delenv("BOOK_BACKEND", raising=False)
    assert [rule(r, 1) for r in (1, 2)] == ["gpu", "cpu"]
    assert [rule(r, 2) for r in (1, 2, 4)] == ["gpu", "gpu", "cpu"]
    assert rule(3, 0) == "cpu"
    assert placement_env(2, gpus=1) == {"BOOK_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": ""}
    assert placement_env(2, gpus=2) == {"BOOK_BACKEND": "nccl"}
    assert placement(2, gpus=8, force="gloo") == "cpu"
    with pytest.raises(RuntimeError, match="one GPU per local rank: 4 ranks but 2 GPUs"):
        placement(4, gpus=2, force="nccl")
    with pytest.raises(ValueError, match="nproc must be at least 1"):
        rule(0, 2)
    monkeypatch.setenv("BOOK_BACKEND", "mpi")
    with pytest.raises(ValueError, match="BOOK_BACKEND must be 'gloo' or 'nccl'"):
        placement(1, gpus=1)


def test_ranks_on_the_cpu_see_no_cuda():
    from helpers.run.env import gpu_count

    ranks = launch("selftest", nproc=gpu_count() + 1, show="none").results
    assert {(r["backend"], r["device"], r["cuda_visible"]) for r in ranks} == {
        ("gloo", "cpu", False)
    }


def test_a_timeout_during_a_kernel_build_says_so():
    """Chapter 8, "A stale kernel-build lock": the launcher's timeout names the unfinished build."""
    with pytest.raises(LaunchTimeout) as err:
        launch("selftest", nproc=2, args=["--mode", "build"], timeout_s=20, show="none")
    message = str(err.value)
    assert (
        'Rank 0 printed Colossal-AI\'s "Compiling the JIT fused_optim_cuda kernel" line' in message
    )
    assert "python -m helpers.run.kernels --clear-stale" in message


def test_long_results_of_many_ranks_arrive_whole(capsys):
    """torchrun copies each rank's lines into one pipe from a thread per rank; a write longer than
    the pipe's atomic size can be split by another thread's. Four ranks report 40 results of about
    10 kB each at once: every one arrives whole, in order, and no part of one is shown."""
    result = launch("selftest", nproc=4, args=["--mode", "flood"], show="all", share=False)
    for rank in range(4):
        got = result.rank(rank)
        assert [r["index"] for r in got] == list(range(40))
        for r in got:
            assert r["values"] == [rank * 100_000 + r["index"] * 1000 + k for k in range(1500)]
        shown = [t for t in result.lines[rank] if " result " in t]
        assert shown == [f"rank {rank} result {i}" for i in range(40)]
    out = capsys.readouterr().out
    assert "RESULT" not in out and out.count(" result ") == 160
