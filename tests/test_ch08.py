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


def test_tp_placements_count_the_network_cards_of_a_node():
    """A TP group of 8 spread as 2 nodes × 4 GPUs runs through 4 cards (200 GB/s nominal), as
    8 nodes × 1 GPU through one (50 GB/s): the one-card-per-rank figure (755 ms, 58 %) is the
    8 × 1 placement's. Latency is α per all-reduce, 4 per layer per micro-batch."""
    from helpers.chapters.ch08_tp_placement import tp_placements
    from helpers.cost.comm import NOMINAL_LINKS, ops_time, tp_layer_ops

    inside, four, one = tp_placements()
    assert [(p["nodes"], p["per_node"], p["cards"]) for p in (inside, four, one)] == [
        (1, 8, 0),
        (2, 4, 4),
        (8, 1, 1),
    ]
    gbs = [p["link"].bandwidth_bytes_per_s / 1e9 for p in (inside, four, one)]
    assert gbs == [450, 200, 50]
    ops = tp_layer_ops(1, 4096, 8192) * 80
    assert inside["comm_s"] == pytest.approx(ops_time(ops, 8, NOMINAL_LINKS["nvlink4"]))
    assert one["comm_s"] == pytest.approx(ops_time(ops, 8, NOMINAL_LINKS["ib_ndr"]))
    assert round(one["comm_s"] * 1e3) == 755 and round(100 * one["share"]) == 58
    assert inside["share"] < four["share"] < one["share"]
    for p in (inside, four, one):
        assert p["collectives"] == 4 * 80
        assert p["latency_s"] == pytest.approx(320 * p["link"].latency_s)
        assert p["latency_s"] + p["bandwidth_s"] == pytest.approx(p["comm_s"])
    assert [p["per_node"] for p in tp_placements(tp=2)] == [2, 1]
    with pytest.raises(ValueError):
        tp_placements(per_node=(3,))
