"""Chapter 8: every failure lab fails as intended and diagnose() names its cause; the memory-cap lab
is fixed by recomputation; diagnose() also reads the GPU (NCCL, CUDA) forms of the messages."""

import functools

import pytest

from helpers.train.diagnose import diagnose
from helpers.train.labs import EXPECTED, run_lab


@functools.lru_cache(maxsize=None)
def lab(name):  # each lab runs once per test session
    return run_lab(name)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_lab_diagnosed(name):
    run = lab(name)
    assert run.returncode not in (0, None), run.log[
        -2000:
    ]  # it failed, and by itself (not our timeout)
    assert run.diagnosis.kind == EXPECTED[name], f"{run.diagnosis}\n{run.log[-2000:]}"
    assert run.diagnosis.fix


def test_crash_names_the_rank():
    run = lab("rank_crash")
    assert "rank 1 (SIGKILL)" in run.diagnosis.cause


def test_recompute_fixes_cpu_oom():
    import json

    run = lab("cpu_oom_recompute")
    assert run.returncode == 0, run.log[-2000:]
    assert run.diagnosis.kind == "none"
    result = json.loads(next(ln for ln in run.log.splitlines() if ln.startswith("RESULT "))[7:])
    # the cap limits new address space; resident growth is information only (pages mapped
    # before the cap can become resident too: 47 MiB in one run, 215 MiB in another, both under
    # the same cap)
    assert result["recompute"] and result["predicted_activation_mib"] < result["budget_mib"]


GPU_LOGS = {
    "out_of_memory": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 139.81 GiB of which 1.2 GiB is free.",
    "collective_mismatch": "[rank0]:[E ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1024, "
    "Timeout(ms)=5000) ran for 5001 milliseconds before timing out.",
    "init_hang": "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
    "rank_crash": "  rank      : 3 (local_rank: 3)\n  exitcode  : -6 (pid: 99)\n"
    "  traceback : Signal 6 (SIGABRT) received by PID 99",
    "none": "step 1 loss 2.3\nRESULT {}",
}


@pytest.mark.parametrize("kind", GPU_LOGS)
def test_diagnose_messages(kind):
    d = diagnose(GPU_LOGS[kind])
    assert d.kind == kind
    if kind == "rank_crash":
        assert "rank 3 (SIGABRT)" in d.cause


def test_page_numbers():
    """The numbers Chapter 8's page quotes, recomputed from the models that produce them."""
    from pathlib import Path

    from helpers.record.ch08 import oom_cap_gib
    from helpers.chapters.ch08_troubleshooting import tp_placement_rows
    from helpers.config.shape import ModelShape
    from helpers.cost.memory_llama import head_activation_bytes, layer_activation_bytes

    page = (Path(__file__).resolve().parent.parent / "book/08_troubleshooting.md").read_text()
    nvlink, ib = tp_placement_rows()
    assert (
        f"about {nvlink['comm share'][:-1]} %" in page
        and f"about {ib['comm share'][:-1]} %" in page
    )
    shape, tokens = (
        ModelShape.llama(layers=16, hidden=64, heads=2, kv_heads=2, vocab=256),
        16 * 256,
    )  # ch08_fail oom
    full = shape.layers * layer_activation_bytes(shape, tokens, 256, 4) + head_activation_bytes(
        shape, tokens, 4
    )
    recompute = shape.layers * 4 * tokens * shape.hidden + head_activation_bytes(shape, tokens, 4)
    assert (
        f"{round(full / 2**20)} MiB of activations" in page
        and f"{round(recompute / 2**20)} MiB with" in page
    )
    cap, peaks = oom_cap_gib()
    assert f"at {cap} GiB" in page
    for value in peaks.values():
        assert f"{value:.1f} GiB" in page
