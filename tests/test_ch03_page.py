"""Chapter 3's page: every number it quotes is recomputed here from the book's helpers."""

from dataclasses import replace
from pathlib import Path

import pytest

from helpers.cost import comm, planner
from helpers.parallel.pp import bubble_fraction

PAGE = (Path(__file__).resolve().parents[1] / "book" / "03_strategy.md").read_text()


def test_page_is_complete():
    assert "This chapter is an outline" not in PAGE
    for key in (
        "ch03_volumes",
        "ch03_busbw",
        "ch03_nccl_table",
        "ch03_share_table",
        "ch03_seed_vs_planner",
        "ch03_plan_70b",
        "ch03_validation",
    ):
        assert f"```{{glue}} {key}\n:doc: ../notebooks/03_strategy.ipynb" in PAGE
    assert (
        "## Summary" in PAGE
        and "## Exercises" in PAGE
        and "Answers to the numeric exercises" in PAGE
    )


def test_page_quotes_the_seed_output():
    for line in planner.seed_report(32, 7.5).splitlines():
        assert line in PAGE


def test_exercise_1_all_reduce():
    link_nv, link_ib = comm.NOMINAL_LINKS["nvlink4"], comm.NOMINAL_LINKS["ib_ndr"]
    assert comm.bytes_sent("all_reduce", 2 * 2**30, 8) / 2**30 == 3.5
    assert (
        f"{comm.collective_time('all_reduce', 2 * 2**30, 8, link_nv) * 1e3:.2f} ms on NVLink"
        in PAGE
    )
    assert f"{comm.collective_time('all_reduce', 2 * 2**30, 8, link_ib) * 1e3:.1f} ms on" in PAGE


def test_exercise_2_share():
    share, advice = comm.comm_share(4e-3, 8e-3)
    assert round(share, 2) == 0.33 and advice is None


def test_exercise_3_crossover():
    h, L = 4096, 32
    tokens = 3 * h
    tp = comm.ops_bytes_sent(comm.tp_layer_ops(1, tokens, h) * L, 2)
    dp = comm.bytes_sent("all_reduce", 12 * L * h * h * 2, 2)
    assert tp == pytest.approx(dp) and "12,288 tokens" in PAGE


def test_exercise_4_and_5():
    first = planner.seed_report(16, 7.5).splitlines()[1]
    assert first in PAGE and "120.0 GB" in first
    assert (
        f"{100 * bubble_fraction(4, 8):.1f}" == "27.3"
        and f"{100 * bubble_fraction(4, 32):.1f}" == "8.6"
    )


def test_exercise_6_calculator():
    fits, count = planner.plan(
        planner.LLAMA2_70B, 1024, 1024, replace(planner.Hardware(), memory_gib=40.0)
    )
    best = fits[0]
    assert (len(fits), count) == (123, 858) and "123 of 858 layouts" in PAGE
    L = best.layout
    assert (L.dp, L.tp, L.pp, L.sp, L.sp_mode, L.zero_stage, L.microbatch, best.microbatches) == (
        8,
        1,
        16,
        8,
        "all_to_all",
        1,
        1,
        128,
    )
    second = fits[1].layout
    assert (second.dp, second.tp, second.pp, second.sp, second.sp_mode, second.zero_stage) == (
        8,
        2,
        16,
        4,
        "all_to_all",
        1,
    )
    assert "just ahead of D = 8 × T = 2 × P = 16 with Ulysses S = 4 and ZeRO-1" in PAGE


def test_planner_facts_quoted():
    count, fit, _ = planner.bench()
    assert f"{count} layouts" in PAGE and f"keeps the {fit} that fit" in PAGE
    dp32 = comm.bytes_sent("all_reduce", planner.SEED_7B5.params * 2, 32) / 1e9
    assert f"{dp32:.0f} GB per rank per step" in PAGE


def _recorded(name):
    from helpers.record.results import load

    try:
        return load(name)
    except FileNotFoundError:
        pytest.skip(f"no recorded {name}")


def test_collective_claims_match_the_record():
    from helpers.record import ch03_calibration

    rows = ch03_calibration.measured_collectives(_recorded("ch03_collectives")["runs"])
    table, link = ch03_calibration.collective_table(rows)
    held = [r for r in table if r["size_bytes"] >= 2**20 and r["role"] == "held out"]
    assert (
        len(held) == 22
        and all(abs(r["error %"]) <= 25 for r in held)
        and "All 22 held-out rows" in PAGE
    )
    worst = ch03_calibration.worst_error(table)
    assert (worst["collective"], worst["size"], worst["error %"]) == ("all_reduce", "1M", -23.7)
    assert "**The worst is the all-reduce at 1 MiB,\n−23.7 %**" in PAGE
    big = ch03_calibration.worst_error(table, 16 * 2**20)
    assert (big["collective"], big["size"], big["error %"]) == ("reduce_scatter", "64M", -19.6)
    assert (
        f"α = {link.latency_s * 1e6:.0f} µs and β = {link.bandwidth_bytes_per_s / 1e9:.0f} GB/s"
        in PAGE
    )
    naive, _ = ch03_calibration.collective_table(rows, "alpha_beta")
    w = ch03_calibration.worst_error(naive)
    assert (w["collective"], w["size"], round(w["error %"])) == ("all_to_all", "1M", -33)


def test_share_claims_match_the_record():
    res = {
        (r["layout"], r["global_batch"]): r for r in _recorded("ch03_share")["runs"][0]["results"]
    }
    shares = {k: round(r["share"], 2) for k, r in res.items()}
    assert max(shares.values()) == 0.22 and min(shares.values()) == 0.0
    for tp, dp in ((("tp", 2), ("dp", 2)), (("tp", 8), ("dp", 8)), (("tp", 32), ("dp", 32))):
        assert shares[dp] < shares[tp] and f"{shares[tp]:.2f} → {shares[dp]:.2f}" in PAGE
    assert shares[("ddp", 32)] == 0.13 and shares[("dp", 32)] == 0.04
    assert (
        round(res[("tp", 32)]["tokens_per_s"] / 1e3) == 467
        and round(res[("dp", 32)]["tokens_per_s"] / 1e3) == 694
    )
    assert round(res[("dp", 32)]["t_comm"] * 1e3, 2) == 0.89 and "0.89 ms" in PAGE


def test_validation_claims_match_the_record():
    from helpers.record import ch03_calibration, ch03_validation

    coll = ch03_calibration.measured_collectives(_recorded("ch03_collectives")["runs"])
    _, link = ch03_calibration.collective_table(coll)
    hw = replace(planner.Hardware(), memory_gib=141.0, flash=False, intra=link, overhead_gib=0.0)
    rows = ch03_validation.validation_rows(_recorded("ch03_layouts")["runs"], hw)
    errors = {
        r["layout"]: 100 * (r["planner GiB"] - r["measured GiB"]) / r["measured GiB"] for r in rows
    }
    worst = max(errors, key=lambda k: abs(errors[k]))
    assert worst == "sp=2 all_to_all" and f"+{errors[worst]:.1f} %" == "+6.8 %" and "+6.8 %" in PAGE
    assert all(abs(x) < 7 for x in errors.values()) and "within 7 % on all eight" in PAGE
    assert sum(abs(x) <= 2 for x in errors.values()) == 4 and "four are within 2 %" in PAGE
    sg = errors["tp=2 + split_gather SP"]
    assert f"{-sg:.1f}" == "1.9" and "within 1.9 % of the `split_gather` peak" in PAGE
    assert len(rows) == 8 and all("measured rank" in r for r in rows)
    top5 = sorted(rows, key=lambda r: r["measured rank"])[:5]
    assert all(r["planner rank"] == r["measured rank"] for r in top5)
    assert (
        round(ch03_validation.rank_agreement(rows), 2) == 0.93
        and "Spearman's rank correlation over\nall eight is 0.93" in PAGE
    )
    slowest = max(rows, key=lambda r: r["measured ms"])
    assert slowest["layout"] == "pp=2, m=8"
    below = [1 - r["planner ms"] / r["measured ms"] for r in rows if r["layout"] != "pp=2, m=8"]
    assert 0.33 < min(below) and max(below) < 0.42


def test_seed_vs_planner_claims():
    rows = planner.seed_vs_planner()
    by_combo = {r["dp×tp×pp"]: r for r in rows}
    first = by_combo["32×1×1"]
    assert round(first["memory GiB"]) == 48 and "about 48 GiB" in PAGE
    assert first["planner rank"] == 10 and "is tenth of twelve" in PAGE
    ranked = sorted((r for r in rows if r["planner rank"] != "-"), key=lambda r: r["planner rank"])
    assert (ranked[0]["dp×tp×pp"], ranked[0]["seed rank"]) == (
        "16×2×1",
        3,
    ) and "is the guide's third" in PAGE
    assert (ranked[1]["dp×tp×pp"], ranked[1]["seed rank"]) == (
        "8×4×1",
        7,
    ) and "is\nthe guide's seventh" in PAGE
    assert by_combo["16×1×2"]["planner rank"] == 12 and by_combo["8×1×4"]["planner rank"] == 11
    assert round(100 * bubble_fraction(2, 4)) == 20 and round(100 * bubble_fraction(4, 8)) == 27


def test_the_70b_pick_is_derived_from_the_memory_model():
    from helpers.cost import memory_plan
    from helpers.parallel.layouts import Layout

    fits, _ = planner.plan(planner.LLAMA2_70B, 1024, 1024)
    best = fits[0]
    L = best.layout
    assert (L.dp, L.tp, L.pp, L.sp_mode, L.zero_stage, L.microbatch) == (128, 8, 1, None, 1, 1)
    assert "D = 128 × T = 8 × P = 1 with ZeRO-1 and one sequence per micro-batch" in PAGE
    mem = memory_plan.peak(planner.LLAMA2_70B, L, 1024, best.recompute)
    parts = mem["prediction"]["breakdown"]
    gib = {k: f"{v / 2**30:.1f}" for k, v in parts.items()}
    assert f"at {mem['total'] / 2**30:.1f} of\n80 GiB" in PAGE
    assert f"{gib['weights']} GiB of bf16 weights, {gib['activations']} GiB of activations" in PAGE
    assert mem["prediction"]["peak_phase"] == "forward" and "at the end of forward" in PAGE
    sg = Layout(128, 8, 1, sp_mode="split_gather", microbatch=1, zero_stage=1)
    total = memory_plan.peak(planner.LLAMA2_70B, sg, 1024)["total"] / 2**30
    assert total > 80 and f"`split_gather` need {total:.1f} GiB" in PAGE
    first_sg = next(i for i, p in enumerate(fits) if p.layout.sp_mode == "split_gather")
    assert first_sg + 1 == 37 and "ranks 37th" in PAGE
    assert "2.5 GiB outside the allocator" in PAGE
