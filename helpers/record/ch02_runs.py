"""Chapter 2's runs on 4 and 8 GPUs (Chapter 2, "On 4 and 8 GPUs"): what each runs, on what layout.

Each :class:`Run` is a demo that already exists: Chapter 9's benchmark (``ch09_hybrid``, the 0.54 B
Llama with the flags that ran on 2×H200) for the 3-D layouts, its Mixtral demo (``ch09_mixtral``)
for ep=2 × dp=2, and Chapter 5's entry point (``ch05_train``) for the 8-rank kill-and-resume.
:func:`planned_layout` derives each run's degrees as the plugins do. The recorder is
:mod:`helpers.record.ch02`. :func:`records` reads every GPU record back, :func:`missing_runs` names
the runs no machine has launched yet and :func:`waiting` the machine and command each waits for,
:func:`verdict` judges a recorded run (:mod:`helpers.chapters.ch02_combining` shows them).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from helpers.parallel.degrees import degree_flags
from helpers.record import results
from helpers.record.ch09 import HYBRID_COMMON
from helpers.run.launch import REPO_ROOT
from helpers.train.reference import loss_verdict
from helpers.config.loading import load_config

NAME, QUICK_NAME = "multigpu", "multigpu_quick"
# the loss gap to the reference that counts as the same training
# (helpers.train.reference.loss_verdict)
TOLERANCE = 0.05
KILL_RANK = 6  # as in the CPU test at 8 ranks: a rank that is neither 0 nor the last
QUICK_HYBRID = ["--preset", "tiny", "--seq", "256", "--steps", "6"]  # Chapter 9's quick smoke args
QUICK_MOE = ["--layers", "2", "--hidden", "256", "--seq", "256", "--steps", "4", "--ref_steps", "2"]


@dataclass(frozen=True)
class Run:
    """One recorded run: ``demo`` is ch09_hybrid, ch09_mixtral or ch05_train (kill-and-resume, whose
    ``args`` are the entry point's config)."""

    key: str
    title: str
    gpus: int
    demo: str
    args: tuple[str, ...]
    timeout_s: float = 300.0


RUNS = (  # recording order: the 8-GPU runs first (the rarer machine), the riskier extras last
    Run(
        "dp2_pp2_tp2",
        "dp=2 × pp=2 × tp=2 (the seed's 3-D example)",
        8,
        "ch09_hybrid",
        (*degree_flags(tensor=2, pipeline=2), "--mbs", "2"),
    ),
    Run(
        "kill_resume_dp4_tp2",
        "kill-and-resume at 8 ranks, dp=4 × tp=2",
        8,
        "ch05_train",
        ("--config", "helpers/configs/ch05_gpu_tp2.yaml"),
    ),
    Run(
        "tp2_pp2",
        "tp=2 × pp=2 (1F1B, mbs 4)",
        4,
        "ch09_hybrid",
        (*degree_flags(tensor=2, pipeline=2), "--mbs", "4"),
    ),
    Run(
        "tp2_dp2_zero1",
        "tp=2 × dp=2, ZeRO-1",
        4,
        "ch09_hybrid",
        (*degree_flags(tensor=2), "--zero", "1"),
    ),
    Run(
        "sp2_dp2",
        "sp=2 (Ulysses all_to_all) × dp=2",
        4,
        "ch09_hybrid",
        tuple(degree_flags(sequence=2, sequence_mode="all_to_all")),
    ),
    Run(
        "ep2_dp2", "ep=2 × dp=2, Mixtral (ZeRO-1)", 4, "ch09_mixtral", tuple(degree_flags(expert=2))
    ),
    Run(
        "dp2_pp2_tp2_zero1",
        "dp=2 × pp=2 × tp=2, ZeRO-1",
        8,
        "ch09_hybrid",
        (*degree_flags(tensor=2, pipeline=2), "--mbs", "2", "--zero", "1"),
    ),
    Run(
        "kill_resume_3d",
        "kill-and-resume at 8 ranks, dp=2 × pp=2 × tp=2",
        8,
        "ch05_train",
        ("--config", "helpers/configs/ch05_gpu_3d.yaml"),
    ),
)
KEYS = tuple(r.key for r in RUNS)


def run_named(key: str) -> Run:
    found = [r for r in RUNS if r.key == key]
    if not found:
        raise ValueError(f"unknown run {key!r}: one of {KEYS}")
    return found[0]


def demo_args(run: Run, quick: bool = False) -> list[str]:
    """The demo's full command line (Chapter 9's HYBRID_COMMON for the Llama runs, as on 2×H200)."""
    if run.demo == "ch09_hybrid":
        return [*run.args, *QUICK_HYBRID] if quick else [*HYBRID_COMMON, *run.args]
    if run.demo == "ch09_mixtral":
        return [*run.args, *QUICK_MOE] if quick else list(run.args)
    return list(run.args)  # the kill-and-resume config is already the tiny model


def not_run_reason(run: Run, gpus_here: int) -> str | None:
    """'skipped: needs 8 GPUs, this machine has 2' when the machine is too small, else None."""
    return (
        f"skipped: needs {run.gpus} GPUs, this machine has {gpus_here}"
        if gpus_here < run.gpus
        else None
    )


def attempted(run: dict) -> bool:
    """Whether a recorded run was launched (a skipped one has no results and a 'skipped: '
    error)."""
    return (
        run.get("ok")
        or bool(run.get("results"))
        or not (run.get("error") or "").startswith("skipped: ")
    )


def planned_layout(run: Run) -> dict[str, int]:
    """dp, pp, tp, sp (or dp, ep, moe_dp) from a run's flags and GPU count, as the plugins derive
    them (HybridParallelPlugin: dp = G / (tp·pp·sp), sp counted for all_to_all only;
    MoeHybridParallelPlugin: moe_dp = dp / ep; Chapter 5's config: data 'auto')."""

    def flag(f: str, d: int = 1) -> int:
        return int(run.args[run.args.index(f) + 1]) if f in run.args else d

    if run.demo == "ch05_train":
        cfg = load_config(REPO_ROOT / run.args[1]).resolve(run.gpus)
        p = cfg.parallelism
        return {"dp": cfg.data_degree, "pp": p.pipeline, "tp": p.tensor}
    if run.demo == "ch09_mixtral":
        return {"dp": run.gpus, "ep": flag("--ep", 2), "moe_dp": run.gpus // flag("--ep", 2)}
    sp = flag("--sp") if "all_to_all" in run.args else 1
    return {
        "dp": run.gpus // (flag("--tp") * flag("--pp") * sp),
        "pp": flag("--pp"),
        "tp": flag("--tp"),
        "sp": sp,
    }


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
        lines.append(f"Waiting for {gpus} GPUs: {', '.join(keys)}")
    smallest = min(r.gpus for r in missing)
    fits = [r.key for r in missing if r.gpus <= smallest]
    lines.append(f"On a {smallest}-GPU machine:\n  {command_for(fits)}")
    if any(r.gpus > smallest for r in missing):
        lines.append(
            f"On an 8-GPU machine (all of them):\n  {command_for([r.key for r in missing])}"
        )
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
