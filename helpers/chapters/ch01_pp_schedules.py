"""Chapter 1's "Pipeline schedules": the glue that notebook 01 and its tests call.

One launch of ``helpers/demos/ch01_pp_schedules.py`` on P = 4 ranks runs GPipe, 1F1B,
interleaved 1F1B, ZB-H1 and Colossal-AI's ZB-V order (each checked against the unsplit model
inside the demo), then Colossal-AI's own interleaved and zbv pipelines as far as they go. Here
the recorded events become the measured bubble beside its formula (:func:`summary`,
:func:`bubble_rows`, :func:`bounds`), each schedule's ranks and events for the timelines of
:mod:`helpers.figures.ch01_pp_schedules` (:func:`per_schedule`) and the table of what Colossal-AI
did (:func:`colossal_rows`).
"""

from __future__ import annotations

from helpers.figures.ch01_pp_schedules import stage_intervals
from helpers.figures.timeline import idle_fraction
from helpers.notebook.measured import approx
from helpers.parallel.pp import bubble_text as formula
from helpers.parallel.pp_schedules import (
    SCHEDULES,
    V_SHAPED,
    build,
    idle_share,
    in_flight,
    simulate,
    with_imbalance,
)
from helpers.run.env import gpu_count
from helpers.run.launch import launch

DEMO = "ch01_pp_schedules"
STAGES = 4  # the demo's P (its m = 8 and c = 2 are its defaults)
GPU_ARGS = ["--hidden", "4096", "--micro-batch", "1024"]  # enough work per message on a GPU
# The stage clock's idle share of the least-disturbed run lies between the bubble less BELOW (no
# order beats the bubble; BELOW allows for noise) and the bubble corrected for the measured
# imbalance of the stages' work (helpers.parallel.pp_schedules.with_imbalance) plus ABOVE: costs
# are measured, not equal, and a computation slowed on the critical path makes later stages wait.
BELOW, ABOVE = 0.04, 0.08
# The wall clock adds message latency (and, with fewer cores than stages, the operating system's
# time-sharing) to the stage clock; it may fall below the stage clock by at most this much.
WALL_SLACK = 0.05
NAMES = SCHEDULES + V_SHAPED


def args(gpus: int) -> list[str]:
    """The demo's arguments: Colossal-AI's part too, and larger matrices where every stage has a
    GPU (on a CPU the defaults: h = 512, 64 samples per micro-batch, 4 blocks per chunk)."""
    return ["--colossal"] + (GPU_ARGS if gpus >= STAGES else [])


def run(gpus: int | None = None):
    """The launch notebook 01 makes; within one test run (:mod:`helpers.run.shared`) the tests
    and the notebook share it."""
    gpus = gpu_count() if gpus is None else gpus
    return launch(DEMO, STAGES, args(gpus), timeout_s=600, show="none")


def per_schedule(results: list[dict]) -> dict[str, list[dict]]:
    """Each schedule's results, one per rank in rank order, with ``events``: per run, the
    ``wall`` and ``stage`` events the rank reported on lines of their own."""
    parts: dict[tuple, dict] = {}
    for r in results:
        if "repeat" in r:
            parts.setdefault((r["schedule"], r["rank"], r["repeat"]), {})[r["clock"]] = r["events"]
    out: dict[str, list[dict]] = {}
    for r in sorted(results, key=lambda r: r["rank"]):
        if "schedule" in r and "repeat" not in r:
            runs = [parts[(r["schedule"], r["rank"], i)] for i in range(r["repeats"])]
            out.setdefault(r["schedule"], []).append({**r, "events": runs})
    return out


def measured_idle(ranks: list[dict], repeat: int, clock: str) -> float:
    """Mean over stages of the idle share of the window from the first computation to the last
    (:func:`helpers.figures.timeline.idle_fraction`)."""
    rows = stage_intervals(ranks, repeat, clock)
    start = min(s for ivs in rows.values() for s, _, _ in ivs)
    end = max(e for ivs in rows.values() for _, e, _ in ivs)
    return sum(idle_fraction(ivs, start, end) for ivs in rows.values()) / len(rows)


def summary(results: list[dict]) -> list[dict]:
    """Per schedule: its shape, the bubble by formula and by simulation (equal costs), and the
    measured idle share on both clocks in the run with the least on the stage clock."""
    out = []
    for name, ranks in per_schedule(results).items():
        p, m, c = ranks[0]["stages"], ranks[0]["micro_batches"], ranks[0]["chunks"]
        schedule = build(name, p, m, c)
        repeats = range(len(ranks[0]["events"]))
        stage = [measured_idle(ranks, i, "stage") for i in repeats]
        best = min(repeats, key=stage.__getitem__)
        value, text = formula(name, p, m, c)
        out.append(
            dict(
                name=name,
                stages=p,
                micro_batches=m,
                chunks=c,
                actions=len(ranks[0]["actions"]),
                in_flight=in_flight(schedule)[0],
                formula=value,
                formula_text=text,
                simulated=(sim := idle_share(simulate(schedule, v_shape=name in V_SHAPED))),
                bubble=float(value) if value is not None else sim,
                stage=stage[best],
                busy=[sum(e[1] - e[0] for e in r["events"][best]["stage"]) for r in ranks],
                wall=measured_idle(ranks, best, "wall"),
                best=best,
                max_grad_diff=max(r["max_grad_diff"] for r in ranks),
            )
        )
    return out


def bubble_rows(rows: list[dict]) -> list[dict]:
    """The table: formula and simulation (exact), then the two measured shares (≈)."""
    return [
        {
            "schedule": s["name"],
            "chunks per stage": s["chunks"],
            "actions per stage": s["actions"],
            "in flight on stage 0": s["in_flight"],
            "bubble by formula": s["formula_text"],
            "simulated (equal costs)": f"{s['simulated']:.3f}",
            "with measured imbalance": approx(with_imbalance(s["bubble"], s["busy"])),
            "measured, stage clock": approx(s["stage"]),
            "measured, wall clock": approx(s["wall"]),
        }
        for s in rows
    ]


def bounds(rows: list[dict]) -> list[dict]:
    """Per schedule, what notebook 01 asserts and prints: the bubble and its simulated share, the
    band the stage clock must lie in (the bubble less BELOW up to the bubble corrected for the
    stages' measured imbalance plus ABOVE), and the least the wall clock may show (the stage
    clock less WALL_SLACK)."""
    return [
        {
            "name": s["name"],
            "closed_form": s["formula"] is not None,
            "bubble": s["bubble"],
            "simulated": s["simulated"],
            "low": s["bubble"] - BELOW,
            "high": with_imbalance(s["bubble"], s["busy"]) + ABOVE,
            "stage": s["stage"],
            "wall": s["wall"],
            "wall_floor": s["stage"] - WALL_SLACK,
        }
        for s in rows
    ]


def check_lines(rows: list[dict]) -> list[str]:
    """:func:`bounds`, asserted (for the tests; the notebook asserts them in its own cell)."""
    lines = []
    for b in bounds(rows):
        if b["closed_form"]:
            assert abs(b["simulated"] - b["bubble"]) < 1e-9, b
        assert b["low"] <= b["stage"] <= b["high"], b
        assert b["wall"] >= b["wall_floor"], b
        lines.append(f"{b['name']}: stage clock {approx(b['stage'])}")
    return lines


def colossal_rows(results: list[dict]) -> list[dict]:
    """What Colossal-AI 0.5.0 did on these ranks, step by step (rank 0's report; every rank's
    outcome is the same, which this asserts)."""
    reports = [r["colossal"] for r in sorted(results, key=lambda r: r["rank"]) if "colossal" in r]
    outcomes = {tuple(rep["ok"] for rep in ranks) for ranks in reports}
    assert len(outcomes) == 1, f"ranks disagree on what Colossal-AI did: {outcomes}"
    return [
        {
            "step": rep["step"],
            "outcome": "ran" if rep["ok"] else rep["error"].split(" Please check")[0],
            "raised at (0.5.0)": rep.get("at", ""),
        }
        for rep in reports[0]
    ]
