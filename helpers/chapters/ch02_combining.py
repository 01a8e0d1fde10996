"""The 4- and 8-GPU record, read back (Chapter 2, "On 4 and 8 GPUs"; :mod:`helpers.record.ch02`
records it).

Reads every ``results/<hardware>/multigpu.json`` (not 'cpu'): :func:`missing_runs` names the runs no
machine has launched yet, :func:`waiting` says which machine each waits for and the command,
:func:`verdict` judges a run's losses against its reference
(:func:`helpers.record.runner.loss_verdict`; the uninterrupted run for kill-and-resume) and
:func:`summary_rows` gives the chapter's table.
"""

from __future__ import annotations

import json
import math

from helpers.parallel.vocab import AXES
from helpers.record import results
from helpers.record.ch02_runs import (
    KEYS,
    KILL_RANK,
    NAME,
    RUNS,
    TOLERANCE,
    Run,
    attempted,
    planned_layout,
    run_named,
)
from helpers.record.runner import loss_verdict


def records(name: str = NAME) -> list[dict]:
    """Every GPU record ``name`` under results/ (one per hardware folder; not 'cpu')."""
    paths = sorted(p for p in results.RESULTS_DIR.glob(f"*/{name}.json") if p.parent.name != "cpu")
    return [json.loads(p.read_text()) for p in paths]


def recorded_runs(name: str = NAME) -> dict[str, tuple[dict, dict]]:
    """key -> (run, provenance) of the latest launched run of each key in any record."""
    found: dict[str, tuple[dict, dict]] = {}
    for rec in records(name):
        for run in rec["runs"]:
            prov = run.get("provenance", rec["provenance"])
            if attempted(run) and (
                run["name"] not in found or prov["date"] > found[run["name"]][1]["date"]
            ):
                found[run["name"]] = (run, prov)
    return found


def missing_runs(name: str = NAME, include_failed: bool = False) -> list[str]:
    """The keys of the runs that no record under results/ has launched yet, in RUNS order; with
    ``include_failed``, also those whose latest launch failed or gave a wrong loss
    (:func:`verdict`)."""
    done = recorded_runs(name)
    return [
        k
        for k in KEYS
        if k not in done or (include_failed and not verdict(run_named(k), done[k][0])["valid"])
    ]


def command_for(keys: list[str]) -> str:
    """The recorder's command for these runs (every run: no --only)."""
    return "python -m helpers.record ch02 --record" + (
        "" if set(keys) >= set(KEYS) else " --only " + " ".join(keys)
    )


def waiting(name: str = NAME) -> str:
    """Which runs wait for which machine, and the command for each machine; computed from the
    records."""
    missing = [run_named(k) for k in missing_runs(name)]
    failed = [
        k for k in missing_runs(name, include_failed=True) if k not in {r.key for r in missing}
    ]
    lines = [f"Launched but not ok (see the verdicts): {', '.join(failed)}"] if failed else []
    if not missing:
        return "\n".join(lines + ["Every 4- and 8-GPU run is recorded."])
    for gpus in sorted({r.gpus for r in missing}):
        keys = [r.key for r in missing if r.gpus == gpus]
        lines.append(f"Waiting for a machine with {gpus} GPUs: {', '.join(keys)}")
    smallest = min(r.gpus for r in missing)
    fits = [r.key for r in missing if r.gpus <= smallest]
    lines.append(f"On a {smallest}-GPU machine: {command_for(fits)}")
    if any(r.gpus > smallest for r in missing):
        lines.append(f"On an 8-GPU machine (all of them): {command_for([r.key for r in missing])}")
    return "\n".join(lines)


def reference_tolerance(run: Run, reference: list[float]) -> float:
    """TOLERANCE, plus one bf16 step at the loss for Ulysses: its loss comes back as a bf16 number
    (multiples of 1/16 between 8 and 16; Chapter 9 measured a 0.064 gap on 2 GPUs for that
    reason)."""
    if "all_to_all" not in run.args or not reference:
        return TOLERANCE
    return TOLERANCE + 2.0 ** (math.floor(math.log2(max(reference))) - 7)


def verdict(run: Run, rec: dict | None) -> dict:
    """{'valid': True/False/None, 'reason', 'max_ref_gap'} of one recorded run (None: not run
    yet)."""
    if rec is None or not attempted(rec):
        reason = (rec or {}).get("error", "").removeprefix("skipped: ") or f"needs {run.gpus} GPUs"
        return {"valid": None, "reason": f"not run yet: {reason}", "max_ref_gap": None}
    if run.demo == "ch05_train":
        kr = rec.get("kill_and_resume", {})
        gap = kr.get("max_loss_diff")
        if not rec["ok"] or gap is None:
            return {
                "valid": False,
                "reason": "failed: " + _last_line(rec.get("error")),
                "max_ref_gap": gap,
            }
        killed = kr["runs"][1].get("failed_rank")
        good = gap <= TOLERANCE and killed == rec.get("kill_rank", KILL_RANK)
        return {
            "valid": good,
            "max_ref_gap": round(gap, 4),
            "reason": f"rank {killed} killed at step 5; resumed from step 3 "
            + (
                f"within {TOLERANCE} of the uninterrupted run"
                if gap <= TOLERANCE
                else f"departs from the uninterrupted run by {gap:.3f}"
            ),
        }
    found = loss_verdict(rec.get("results", []), reference_tolerance(run, _reference(rec)))
    if not rec.get("ok"):
        return {**found, "valid": False, "reason": "failed: " + _last_line(rec.get("error"))}
    if not any(r.get("losses") for r in rec.get("results", [])):
        return {**found, "valid": False, "reason": "no rank reported a loss"}
    return found


def _reference(rec: dict) -> list[float]:
    return next((r["reference"] for r in rec.get("results", []) if r.get("reference")), [])


def _last_line(text: str | None) -> str:
    lines = [x for x in (text or "").strip().splitlines() if x.strip()]
    return lines[-1][:120] if lines else "no error text"


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


def provenance_lines(name: str = NAME) -> list[str]:
    """Where and when each hardware's record was made (helpers.record.results.describe)."""
    return [results.describe(rec) for rec in records(name)]
