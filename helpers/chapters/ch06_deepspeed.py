"""Chapter 6, "DeepSpeed's ZeRO, run": the notebook's glue for the demo ``ch06_deepspeed``.

:func:`zero_run` launches it on two processes (the same launch as ``tests/test_ch06_deepspeed.py``,
so ``make test`` runs it once); :func:`zero_rows` lays each run out as a table row, per rank:
the ZeRO keys of the JSON the engine read, the parameter elements materialised between steps,
ZeRO-3's partition, Adam's state, and the collectives per step; :func:`numbers` gives the counts
the page quotes.
"""

from __future__ import annotations

import json

from helpers.run.launch import REPO_ROOT, launch
from helpers.run.result_types.ch06 import DeepSpeedResult, DeepSpeedRun

DEMO, RANKS = "ch06_deepspeed", 2
CONFIG = REPO_ROOT / "helpers" / "configs" / "ch06_deepspeed.yaml"  # the demo's default
COLUMNS = [
    "run",
    "JSON zero_optimization",
    "parameters whole on ranks 0 / 1",
    "ZeRO-3 partition on ranks 0 / 1",
    "Adam state per rank",
    "collectives over the steps (calls: elements sent)",
]


def zero_run(timeout_s: float = 300, show: str = "none") -> list[DeepSpeedResult]:
    """The demo on :data:`RANKS` processes: every rank's result, rank 0 first."""
    run = launch(DEMO, RANKS, [], timeout_s=timeout_s, show=show)
    return [run.first(r) for r in range(RANKS)]


def _per_rank(ranks: list[DeepSpeedResult], name: str) -> list[DeepSpeedRun]:
    return [next(r for r in rank["runs"] if r["name"] == name) for rank in ranks]


def _collectives(run: DeepSpeedRun) -> str:
    return ", ".join(
        f"{op} {run['calls'][op]}: {run['elements'][op]:,}" for op in sorted(run["calls"])
    )


def zero_rows(ranks: list[DeepSpeedResult]) -> list[dict]:
    """One row per run of the demo (:data:`COLUMNS`), rank 0's collectives over all its steps."""
    rows = []
    for run in ranks[0]["runs"]:
        mine = _per_rank(ranks, run["name"])
        zero = json.loads(run["json"])["zero_optimization"]
        rows.append(
            {
                "run": run["name"],
                "JSON zero_optimization": json.dumps(zero),
                "parameters whole on ranks 0 / 1": " / ".join(
                    f"{r['held']['live']:,}" for r in mine
                ),
                "ZeRO-3 partition on ranks 0 / 1": " / ".join(
                    f"{r['held']['partition']:,}" for r in mine
                )
                if run["stage"] == 3
                else "—",
                "Adam state per rank": f"{run['held']['adam_state']:,}",
                "collectives over the steps (calls: elements sent)": _collectives(run),
            }
        )
    return rows


def numbers(ranks: list[DeepSpeedResult]) -> dict:
    """The counts the page quotes, keyed for ``glue_numbers`` (``ch06-ds-*``)."""
    steps = len(ranks[0]["reference"])
    by = {r["name"]: r for r in ranks[0]["runs"]}
    z1: DeepSpeedRun = by["ZeRO-1"]
    z2: DeepSpeedRun = by["ZeRO-2"]
    z3: DeepSpeedRun = by["ZeRO-3, persistence threshold 0"]
    z3p: DeepSpeedRun = by["ZeRO-3"]
    return {
        "ch06-ds-psi": z1["held"]["params"],
        "ch06-ds-partition": z3["held"]["partition"],
        "ch06-ds-adam": z1["held"]["adam_state"],
        "ch06-ds-steps": steps,
        "ch06-ds-z1-allreduce": z1["calls"]["all_reduce"] // steps,
        "ch06-ds-z2-allreduce": z2["calls"]["all_reduce"] // steps,
        "ch06-ds-z3-gathers": z3["calls"]["all_gather_into_tensor"] / steps,
        "ch06-ds-z3-scatters": z3["calls"]["reduce_scatter_tensor"] // steps,
        "ch06-ds-persistent": z3p["held"]["persistent"],
        "ch06-ds-tolerance": ranks[0]["tolerance"],
    }
