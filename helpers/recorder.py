"""The GPU recorders' shared loop: one torchrun per run, a time budget, a progress line per run.

Used by Chapter 8's and 9's recorders (:mod:`helpers.chapter08`, :mod:`helpers.chapter09`) and by
the flagship benchmark (:mod:`helpers.flagship`). A run that fails is kept as a record with its
error text (and any RESULT lines its ranks printed before failing), so one bad layout never costs
the rest of a recording; a run that would start after the budget is recorded as skipped.
:func:`loss_verdict` reads a recorded run's losses against its single-GPU reference.
"""

from __future__ import annotations

import json
import math
import shlex
import time

from helpers.env import RESULT_PREFIX
from helpers.launch import LaunchError, LaunchTimeout, launch, torchrun_command

MIN_LEFT_S = 30  # a run is not started with less than this left of the budget


def results_in(lines: dict[int, list[str]]) -> list[dict]:
    """RESULT lines a failed launch had printed before it failed (rank order)."""
    found = []
    for rank in sorted(r for r in lines if r >= 0):
        found += [json.loads(t[len(RESULT_PREFIX):]) for t in lines[rank] if t.startswith(RESULT_PREFIX)]
    return found


def run_one(name: str, demo: str, gpus: int, args: list[str], timeout_s: float, show: str = "none") -> dict:
    """Launch one run; a failure becomes a record with its error text instead of an exception."""
    record = {"name": name, "demo": demo, "gpus": gpus, "args": args,
              "command": shlex.join(torchrun_command(demo, gpus, args))}
    start = time.monotonic()
    try:
        result = launch(demo, gpus, args, timeout_s=timeout_s, show=show)
        record.update(ok=True, results=result.results)
    except LaunchError as e:  # the cause in fields (a long error text keeps its head and its tail)
        text = str(e)
        record.update(ok=False, error=text if len(text) <= 3000 else text[:1000] + "\n[...]\n" + text[-2000:],
                      failure="timeout" if isinstance(e, LaunchTimeout) else "exit", failed_rank=e.rank,
                      returncode=e.returncode, timeout_s=round(timeout_s, 1), results=results_in(e.lines))
    record["seconds"] = round(time.monotonic() - start, 1)
    return record


def status(run: dict) -> str:
    """'ok', 'ok (out of memory, caught)' or 'FAILED: <last line of the error>'."""
    if not run["ok"]:
        return "FAILED: " + run["error"].strip().splitlines()[-1][:200]
    return "ok" + (" (out of memory, caught)" if any(r.get("oom") for r in run["results"]) else "")


def run_part(tag: str, part: str, runs: list[tuple[str, str, int, list[str], float]], deadline: float,
             show: str = "none", not_run: str | None = None) -> list[dict]:
    """Run ``(name, demo, gpus, args, timeout_s)`` in order until ``deadline`` (time.monotonic()).

    ``not_run``: a reason that stops every run of the part before it starts (e.g. missing data)."""
    out = []
    for name, demo, gpus, args, timeout_s in runs:
        left = deadline - time.monotonic()
        reason = not_run or (f"skipped: the recording's budget was spent" if left < MIN_LEFT_S else None)
        if reason:
            out.append({"name": name, "demo": demo, "gpus": gpus, "args": args, "ok": False, "error": reason,
                        "results": [], "part": part})
            print(f"[{tag}] {part}: {name}: not run: {reason}", flush=True)
            continue
        print(f"[{tag}] {part}: {name} on {gpus} GPU(s) ...", flush=True)
        run = {**run_one(name, demo, gpus, args, min(timeout_s, left), show), "part": part}
        print(f"[{tag}] {part}: {name}: {status(run)} ({run['seconds']} s)", flush=True)
        out.append(run)
    return out


def mean_losses(results: list[dict]) -> list[float]:
    """The global loss per step: the mean over the ranks that report one (dp ranks, or the last stage)."""
    per_rank = [r["losses"] for r in results if r.get("losses")]
    steps = max((len(x) for x in per_rank), default=0)
    out = []
    for k in range(steps):
        vals = [x[k] for x in per_rank if k < len(x) and x[k] is not None]
        out.append(sum(vals) / len(vals) if vals else float("nan"))
    return out


def loss_verdict(results: list[dict], tolerance: float = 0.05) -> dict:
    """Whether a run's losses count: {'valid': bool, 'reason': str, 'max_ref_gap': float | None}.

    A run is invalid when its mean loss (over the ranks that report one) is not finite at some step,
    or departs from the single-GPU reference (same global batches, trained first on every rank) by
    more than ``tolerance`` at a step the reference covers. A fast run with a wrong loss measures
    nothing (Chapter 6's Gemini run: NaN from the third step on). Used by Chapters 6 and 8's tables and
    the flagship benchmark (:mod:`helpers.flagship`).
    """
    mean = mean_losses(results)
    ref = next((r["reference"] for r in results if r.get("reference")), [])
    diffs = [abs(a - b) for a, b in zip(mean, ref)]
    finite = [d for d in diffs if math.isfinite(d)]
    gap = {"max_ref_gap": round(max(finite), 4) if finite else None}
    bad = next((k for k, x in enumerate(mean) if not math.isfinite(x)), None)
    if bad is not None:
        return {"valid": False, "reason": f"loss not finite from step {bad + 1} on", **gap}
    if diffs and max(diffs) > tolerance:
        return {"valid": False, "reason": f"loss departs from the reference by {max(diffs):.3f}", **gap}
    return {"valid": True, "reason": f"within {tolerance} of the reference" if ref else "finite (no reference)", **gap}
