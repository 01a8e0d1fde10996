"""Chapter 3: the communication share demo, the layout demo, the recorder's table and its
failure handling."""

import pytest

from helpers.cost import calibration as ch03_calibration
from helpers.record import ch03, ch03_validation
from helpers.cost.comm import Link, collective_time
from helpers.figures.ch03_comm import busbw_figure
from helpers.run.launch import launch


def test_share_demo_two_ranks():
    """tp matches the unsplit loss; replicas agree after steps with communication; shares are
    in [0, 1). The launch is notebook 03's (Chapter 3, "What share of a step is communication"):
    within one test run the two share one run."""
    run = launch(
        "ch03_share",
        2,
        ["--cases", "tp:2,dp:2,dp:8,ddp:8", "--steps", "3"],
        timeout_s=240,
        show="none",
    )
    rows = {(r["layout"], r["global_batch"]): r for r in run.rank(0)}
    assert set(rows) == {("tp", 2), ("dp", 2), ("dp", 8), ("ddp", 8)}
    assert rows["tp", 2]["first_loss_diff"] < 1e-4
    for r in rows.values():
        assert r["replicas_agree"] and 0 <= r["share"] < 1
        assert r["t_step"] > 0 and r["t_compute"] > 0
        assert len(r["steps_on"]) == len(r["steps_off"]) > 0
        assert r["t_comm"] == pytest.approx(max(0.0, r["t_step"] - r["t_compute"]))
        assert r["share"] == pytest.approx(r["t_comm"] / (r["t_comm"] + r["t_compute"]))
    # volumes: DP sends the gradients once (all-reduce of Ψ·4 bytes, ring factor 1 at n=2),
    # TP 4 all-reduces of b·s·h per layer; the per-rank batch of dp is half the global one
    for batch in (2, 8):
        dp = rows["dp", batch]
        assert dp["comm_bytes"] == dp["params"] * 4 and dp["per_rank_batch"] == batch // 2
    m = rows["tp", 2]["model"]
    assert (
        rows["tp", 2]["comm_bytes"] == 4 * m["layers"] * 2 * rows["tp", 2]["seq"] * m["hidden"] * 4
    )


def test_share_cases_parse():
    assert ch03.SHARE_CASES["cpu"]
    from helpers.train.share_cases import parse_cases

    assert parse_cases("tp:2, ddp:8") == [("tp", 2), ("ddp", 8)]
    with pytest.raises(ValueError, match="layout:global_batch"):
        parse_cases("pp:2")


def test_layouts_demo_cpu_dp_and_refusal():
    run = launch(
        "ch03_layouts", nproc=2, args=["--steps", "2", "--warmup", "1"], timeout_s=240, show="none"
    )
    r = run.first(0)
    assert r["dp"] == 2 and r["step_s"] > 0 and len(r["steps"]) == 2 and r["backend"] == "gloo"
    # tensor parallelism cannot run on the CPU: the recorder keeps the error instead of aborting
    failed = ch03._run("ch03_layouts", ["--tp", "2"], 120, "tp on cpu")
    assert "error" in failed and "pure data parallelism" in failed["error"]


def _rows(link: Link, n: int = 2) -> list[dict]:
    sizes = [2**k for k in range(12, 31, 2)]
    return [
        {
            "collective": c,
            "size_bytes": s,
            "n": n,
            "seconds": collective_time(c, s, n, link),
            "busbw": 1.0,
        }
        for c in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
        for s in sizes
    ]


def test_calibration_uses_every_other_allreduce_size_and_predicts_the_rest():
    """On data that follow the α-β model exactly, the calibrated link is recovered and every
    error is 0."""
    truth = Link("truth", 300e9, 12e-6)
    table, link = ch03_calibration.collective_table(_rows(truth), "alpha_beta")
    assert link.bandwidth_bytes_per_s == pytest.approx(300e9) and link.latency_s == pytest.approx(
        12e-6
    )
    fitted = [r for r in table if r["role"] == "fit"]
    assert [r["size"] for r in fitted] == ["1M", "16M", "256M"]
    assert all(r["collective"] == "all_reduce" for r in fitted)
    assert len(table) - len(fitted) == 37 and all(abs(r["error %"]) < 0.1 for r in table)
    worst = ch03_calibration.worst_error(table)
    assert worst["size_bytes"] >= 2**20


def test_calibration_reports_a_collective_that_departs():
    """If all-to-all ran at half the bandwidth, its held-out rows show +-50 % errors, the
    others 0."""
    truth = Link("truth", 300e9, 0.0)
    rows = _rows(truth)
    for r in rows:
        if r["collective"] == "all_to_all":
            r["seconds"] *= 2
    table, _ = ch03_calibration.collective_table(rows, "alpha_beta")
    worst = ch03_calibration.worst_error(table)
    assert worst["collective"] == "all_to_all" and worst["error %"] == pytest.approx(-50, abs=0.5)


def test_host_floor_model():
    """Calls issued back to back cost at least the host's issue time, different per collective:
    with a 30 µs floor for all-to-all only, α-β misses its small messages and the host-floor
    model does not."""
    truth = Link("truth", 300e9, 5e-6)
    rows = _rows(truth)
    for r in rows:
        if r["collective"] == "all_to_all":
            r["seconds"] = max(r["seconds"], 30e-6)
    floors = ch03_calibration.host_floors(rows)
    assert floors["all_to_all"] == 30e-6 and floors["all_reduce"] == pytest.approx(
        5e-6 + 4096 / 300e9
    )
    table, link = ch03_calibration.collective_table(rows)  # host_floor is the default
    assert link.bandwidth_bytes_per_s == pytest.approx(300e9) and link.latency_s == pytest.approx(
        5e-6
    )
    fit = [r["size"] for r in table if r["role"] == "fit"]
    assert fit == [
        "4M",
        "64M",
        "1G",
    ]  # every other all-reduce size whose time is above twice its floor
    assert {r["role"] for r in table if r["size_bytes"] < 2**20} == {"floor"}
    assert abs(ch03_calibration.worst_error(table)["error %"]) < 0.1
    naive, _ = ch03_calibration.collective_table(rows, "alpha_beta")
    assert ch03_calibration.worst_error(naive)["collective"] == "all_to_all"
    with pytest.raises(ValueError, match="model must be one of"):
        ch03_calibration.calibrate(rows, "magic")


def _layout_run(name, step_s, **kw):
    r = {
        "tp": 1,
        "pp": 1,
        "sp": 1,
        "sp_mode": None,
        "zero": 0,
        "dp": 2,
        "microbatches": 1,
        "recompute": False,
        "step_s": step_s,
        "peak_gib": 10.0,
        "model": {
            "layers": 8,
            "hidden": 2048,
            "heads": 16,
            "vocab": 32000,
            "seq": 1024,
            "batch": 16,
        },
    } | kw
    return {"layout": name, "results": [r]}


def test_validation_rows_map_runs_to_planner_layouts():
    from helpers.cost.planner import VALIDATION_0B5
    from helpers.cost.step_time import Hardware

    runs = [
        _layout_run("dp=2", 0.10),
        _layout_run("tp=2", 0.12, tp=2, dp=1),
        _layout_run("pp=2, m=4", 0.15, pp=2, dp=1, microbatches=4),
        _layout_run("sp=2 all_to_all", 0.13, sp=2, sp_mode="all_to_all", dp=1),
        {"layout": "broken", "error": "boom"},
    ]
    layout, _ = ch03_validation.layout_of_run(runs[2]["results"][0])
    assert (layout.pp, layout.microbatch, layout.dp) == (2, 4, 1)
    layout, _ = ch03_validation.layout_of_run(runs[3]["results"][0])
    assert (layout.sp, layout.sp_mode, layout.microbatch) == (2, "all_to_all", 16)
    assert ch03_validation.model_of_run(runs[0]["results"][0]).params == VALIDATION_0B5.params
    rows = ch03_validation.validation_rows(runs, Hardware(memory_gib=141.0, flash=False))
    assert rows[-1]["measured ms"] == "failed"
    assert sorted(r["measured rank"] for r in rows[:-1]) == [1, 2, 3, 4]
    assert [r["measured rank"] for r in rows[:-1]] == [1, 2, 4, 3]
    rho = ch03_validation.rank_agreement(rows)
    assert -1 <= rho <= 1
    same = [dict(r, **{"planner rank": r["measured rank"]}) for r in rows[:-1]]
    assert ch03_validation.rank_agreement(same) == 1.0


def test_busbw_figure_draws():
    truth = Link("truth", 300e9, 12e-6)
    table, _ = ch03_calibration.collective_table(_rows(truth))
    fig = busbw_figure(table)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 4
