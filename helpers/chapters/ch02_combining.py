"""The 4- and 8-GPU record, read back (Chapter 2, "On 4 and 8 GPUs"; :mod:`helpers.record.ch02`
records it).

Reads every ``results/<hardware>/multigpu.json`` (not 'cpu'; :mod:`helpers.record.ch02_runs`):
:func:`missing_runs` names the runs no machine has launched yet, :func:`waiting` says which machine
each waits for and the command, :func:`verdict` judges a run's losses against its reference
(:func:`helpers.train.reference.loss_verdict`; the uninterrupted run for kill-and-resume) and
:func:`summary_rows` gives the chapter's table.
"""

from __future__ import annotations

from helpers.parallel.vocab import AXES
from helpers.record.ch02_runs import NAME, RUNS, Run, planned_layout, recorded_runs
from helpers.record.ch02_runs import command_for as command_for
from helpers.record.ch02_runs import missing_runs as missing_runs
from helpers.record.ch02_runs import records as records
from helpers.record.ch02_runs import reference_tolerance as reference_tolerance
from helpers.record.ch02_runs import verdict as verdict
from helpers.record.ch02_runs import waiting as waiting


def layout_text(run: Run, rec: dict | None) -> str:
    """The layout the ranks reported (dp/pp/tp/sp of the hybrid mesh, ep × moe_dp of the MoE
    plugin); the planned one (:func:`planned_layout`) when no rank reported."""
    res = [r for r in (rec or {}).get("results", []) if "layout" in r or "ep" in r]
    sizes = (
        (res[0]["layout"] if "layout" in res[0] else {k: res[0][k] for k in ("dp", "ep", "moe_dp")})
        if res
        else planned_layout(run)
    )
    if "ep" in sizes:
        return f"ep={sizes['ep']} × moe_dp={sizes['moe_dp']} (dense layers: dp={sizes['dp']})"
    return " × ".join(f"{k}={sizes[k]}" for k in AXES if sizes.get(k, 1) > 1) or "1 GPU"


def summary_rows(name: str = NAME) -> list[dict]:
    """One row per run of RUNS: layout, GPUs, tokens/s (slowest rank), MFU, largest loss gap to the
    reference (the uninterrupted run for kill-and-resume) and the verdict; blanks for runs not
    run."""
    from helpers.chapters.ch09_hybrid_layouts import mfu_of, slowest

    done, rows = recorded_runs(name), []
    for run in RUNS:
        rec = done.get(run.key, (None, None))[0]
        v = verdict(run, rec)
        speed = (
            slowest(rec)
            if rec and any("tokens_per_s" in r for r in rec.get("results", []))
            else None
        )
        rows.append(
            {
                "run": run.title,
                "layout": layout_text(run, rec),
                "GPUs": run.gpus,
                "tokens/s": f"{speed['tokens_per_s']:,}" if speed else "",
                "MFU": f"{100 * mfu_of(speed):.1f} %" if speed and "mfu" in speed else "",
                "max loss gap": "" if v["max_ref_gap"] is None else f"{v['max_ref_gap']:.4f}",
                "verdict": ("ok: " if v["valid"] else "" if v["valid"] is None else "NOT OK: ")
                + v["reason"],
            }
        )
    return rows
