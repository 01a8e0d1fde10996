"""Chapter 3: the communication share demo, the layout demo, the recorder's table and its failure handling."""

import pytest

from helpers import chapter03
from helpers.comm import Link, collective_time
from helpers.launch import launch


def test_share_demo_two_ranks():
    """tp matches the unsplit loss; replicas agree after steps with communication; shares are in [0, 1)."""
    run = launch("ch03_share", nproc=2, args=["--cases", "tp:2,dp:4,ddp:4", "--steps", "2", "--warmup", "1"],
                 timeout_s=240, show="none")
    rows = {r["layout"]: r for r in run.rank(0)}
    assert set(rows) == {"tp", "dp", "ddp"}
    assert rows["tp"]["first_loss_diff"] < 1e-4
    for r in rows.values():
        assert r["replicas_agree"] and 0 <= r["share"] < 1
        assert r["t_step"] > 0 and r["t_compute"] > 0 and len(r["steps_on"]) == len(r["steps_off"]) == 4
        assert r["t_comm"] == pytest.approx(max(0.0, r["t_step"] - r["t_compute"]))
        assert r["share"] == pytest.approx(r["t_comm"] / (r["t_comm"] + r["t_compute"]))
    # volumes: DP sends the gradients once (all-reduce of Ψ·4 bytes, ring factor 1 at n=2), TP 4 all-reduces
    # of b·s·h per layer; the per-rank batch of dp is half the global one
    assert rows["dp"]["comm_bytes"] == rows["dp"]["params"] * 4 and rows["dp"]["per_rank_batch"] == 2
    m = rows["tp"]["model"]
    assert rows["tp"]["comm_bytes"] == 4 * m["layers"] * 2 * rows["tp"]["seq"] * m["hidden"] * 4


def test_share_cases_parse():
    assert chapter03.SHARE_CASES["cpu"]
    from helpers.demos.ch03_share import parse_cases

    assert parse_cases("tp:2, ddp:8") == [("tp", 2), ("ddp", 8)]
    with pytest.raises(ValueError, match="layout:global_batch"):
        parse_cases("pp:2")


def test_layouts_demo_cpu_dp_and_refusal():
    run = launch("ch03_layouts", nproc=2, args=["--steps", "2", "--warmup", "1"], timeout_s=240, show="none")
    r = run.first(0)
    assert r["dp"] == 2 and r["step_s"] > 0 and len(r["steps"]) == 2 and r["backend"] == "gloo"
    # tensor parallelism cannot run on the CPU: the recorder keeps the error instead of aborting
    failed = chapter03._run("ch03_layouts", ["--tp", "2"], 120, "tp on cpu")
    assert "error" in failed and "pure data parallelism" in failed["error"]


def _rows(link: Link, n: int = 2) -> list[dict]:
    sizes = [2**k for k in range(12, 31, 2)]
    return [{"collective": c, "size_bytes": s, "n": n, "seconds": collective_time(c, s, n, link),
             "busbw": 1.0} for c in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") for s in sizes]


def test_calibration_uses_every_other_allreduce_size_and_predicts_the_rest():
    """On data that follow the α-β model exactly, the calibrated link is recovered and every error is 0."""
    truth = Link("truth", 300e9, 12e-6)
    table, link = chapter03.collective_table(_rows(truth))
    assert link.bandwidth_bytes_per_s == pytest.approx(300e9) and link.latency_s == pytest.approx(12e-6)
    fitted = [r for r in table if r["role"] == "fit"]
    assert [r["size"] for r in fitted] == ["1M", "16M", "256M"]
    assert all(r["collective"] == "all_reduce" for r in fitted)
    assert len(table) - len(fitted) == 37 and all(abs(r["error %"]) < 0.1 for r in table)
    worst = chapter03.worst_error(table)
    assert worst["size_bytes"] >= 2**20


def test_calibration_reports_a_collective_that_departs():
    """If all-to-all ran at half the bandwidth, its held-out rows show +-50 % errors, the others 0."""
    truth = Link("truth", 300e9, 0.0)
    rows = _rows(truth)
    for r in rows:
        if r["collective"] == "all_to_all":
            r["seconds"] *= 2
    table, _ = chapter03.collective_table(rows)
    worst = chapter03.worst_error(table)
    assert worst["collective"] == "all_to_all" and worst["error %"] == pytest.approx(-50, abs=0.5)
