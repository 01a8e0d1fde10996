"""The GPU recorders' shared loop: one torchrun per run, a time budget, a progress line per run.

:func:`run_one` launches one run and returns its record, the one shape of every recorder's runs
(Chapters 1, 3, 5, 7, 8, 9 and the flagship). A run that fails is kept as a record with its error
text (and any RESULT lines its ranks printed before failing), so one bad layout never costs the
rest of a recording; :func:`run_part` records a run that would start after the budget as skipped,
and one that needs more GPUs than the recording's ``--gpus`` as not run ("needs 2 GPUs"); a run
still going prints a line every 30 s. :func:`loss_verdict` reads a recorded run's losses against
its single-GPU reference. :func:`one_gpu_device_command` is the one-GPU device call (Chapter 9's
ResNet, the flagship, Chapter 7's layouts, each ``--gpus 1`` within one time budget).
"""

from __future__ import annotations

import contextlib
import math
import re
import shlex
import threading
import time
from typing import Callable

from helpers.run.env import results_of
from helpers.run.launch import LaunchError, LaunchTimeout, launch, torchrun_command

MIN_LEFT_S = 30  # a run is not started with less than this left of the budget
HEARTBEAT_S = 30  # a run still going prints a line this often


def results_in(lines: dict[int, list[str]]) -> list[dict]:
    """RESULT lines a failed launch had printed before it failed (rank order)."""
    return [r for rank in sorted(k for k in lines if k >= 0) for r in results_of(lines[rank])]


@contextlib.contextmanager
def heartbeat(name: str, every_s: float = HEARTBEAT_S):
    """Print "<name>: still running (N s)" every ``every_s`` seconds while the block runs (a long
    run shows life)."""
    done, start = threading.Event(), time.monotonic()

    def beat():
        while not done.wait(every_s):
            print(f"    {name}: still running ({time.monotonic() - start:.0f} s)", flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def run_one(
    name: str,
    demo: str,
    gpus: int,
    args: list[str],
    timeout_s: float,
    show: str = "none",
    beat: bool = True,
    read_lines: Callable[[bool, dict[int, list[str]]], dict] | None = None,
) -> dict:
    """Launch one run and return its record; a failure becomes a record, not an exception.

    Every recorder's runs have this shape: ``name``, ``demo``, ``gpus``, ``args``, ``command`` (the
    exact torchrun line), ``ok``, ``results`` (every rank's RESULT lines; those printed before a
    failure too), ``seconds``; a failed run adds ``error`` (a long text keeps its head and tail),
    ``failure`` ('timeout' or 'exit'), ``failed_rank``, ``returncode`` and ``timeout_s``.
    ``beat``: print a line every 30 s while the run goes on. ``read_lines(ok, lines)``: the fields
    a recorder reads from its ranks' other output lines (Chapter 5's resume notes), added to the
    record.
    """
    record = {
        "name": name,
        "demo": demo,
        "gpus": gpus,
        "args": args,
        "command": shlex.join(torchrun_command(demo, gpus, args)),
    }
    start = time.monotonic()
    try:
        with heartbeat(name) if beat else contextlib.nullcontext():
            result = launch(demo, gpus, args, timeout_s=timeout_s, show=show)
        record.update(ok=True, results=result.results)
        lines = result.lines
    except LaunchError as e:  # the cause in fields (a long error text keeps its head and its tail)
        text = str(e)
        record.update(
            ok=False,
            error=text if len(text) <= 3000 else text[:1000] + "\n[...]\n" + text[-2000:],
            failure="timeout" if isinstance(e, LaunchTimeout) else "exit",
            failed_rank=e.rank,
            returncode=e.returncode,
            timeout_s=round(timeout_s, 1),
            results=results_in(e.lines),
        )
        lines = e.lines
    record["seconds"] = round(time.monotonic() - start, 1)
    if read_lines is not None:
        record.update(read_lines(record["ok"], lines))
    return record


def exception_line(text: str) -> str:
    """The error a failed run's output ends in: the message Dynamo wraps ('got RuntimeError("…")')
    when there is one, else the last ``SomethingError: …`` line, else the last line (torch prints
    hints such as "Set TORCHDYNAMO_VERBOSE=1 …" after the exception)."""
    wrapped = re.findall(r'got (\w+Error)\("(.+?)"\)', text)
    if wrapped:
        return "{}: {}".format(*wrapped[-1])
    raised = re.findall(r"^[\w.]*(?:Error|Exception): .+$", text, re.MULTILINE)
    lines = text.strip().splitlines()
    return raised[-1] if raised else (lines[-1] if lines else "")


def status(run: dict) -> str:
    """'ok', 'ok (out of memory, caught)' or 'FAILED: <the error's exception line>'."""
    if not run["ok"]:
        return "FAILED: " + exception_line(run["error"])[:200]
    return "ok" + (" (out of memory, caught)" if any(r.get("oom") for r in run["results"]) else "")


def world_mismatch(gpus: int | None, recording: bool) -> str | None:
    """Why a recorder's ``--gpus N`` cannot run here, or None (also when ``--gpus`` was not given).

    A record is written under results/<hardware>/, and the hardware is what this machine shows
    (:func:`helpers.record.results.hardware`): a ``--gpus 1`` recording on a two-GPU box would land
    in (and overwrite) the two-GPU folder. So a recording with ``--gpus N`` wants exactly N visible
    GPUs (``CUDA_VISIBLE_DEVICES=0`` makes a one-GPU machine of a bigger one); a CPU-only machine
    runs whatever its gloo path allows."""
    from helpers.run.env import gpu_count

    if gpus is None:
        return None
    if gpus < 1:
        return f"--gpus must be at least 1, got {gpus}"
    have = gpu_count()
    if recording and have and have != gpus:
        return (
            f"--gpus {gpus} --record writes results/{gpus}x<GPU>/ only where exactly {gpus} GPU(s) "
            f"are visible; this machine shows {have} "
            f"(e.g. CUDA_VISIBLE_DEVICES={','.join(map(str, range(gpus)))})"
        )
    if have and gpus > have:
        return f"--gpus {gpus}: this machine has only {have} GPU(s)"
    return None


def not_run_record(
    name: str, demo: str, gpus: int, args: list[str], part: str | None, reason: str
) -> dict:
    """The record of a run that was not started, and why (``not_run``; ``error`` holds the same
    text). ``part``: the recording's part it belongs to (None: a recorder without parts)."""
    record = {"name": name, "demo": demo, "gpus": gpus, "args": args, "ok": False}
    record.update(error=reason, results=[], **({"part": part} if part else {}), not_run=reason)
    return record


def run_part(
    tag: str,
    part: str,
    runs: list[tuple[str, str, int, list[str], float]],
    deadline: float,
    show: str = "none",
    not_run: str | None = None,
    max_gpus: int | None = None,
) -> list[dict]:
    """Run ``(name, demo, gpus, args, timeout_s)`` in order until ``deadline`` (time.monotonic()).

    ``not_run``: a reason that stops every run of the part before it starts (e.g. missing data).
    ``max_gpus``: the GPUs this recording has (``--gpus``); a run that needs more is recorded as
    not run, "needs 2 GPUs", and costs nothing. Every run not started carries its reason in
    ``not_run``."""
    out = []
    for name, demo, gpus, args, timeout_s in runs:
        left = deadline - time.monotonic()
        reason = (
            not_run
            or (f"needs {gpus} GPUs" if max_gpus is not None and gpus > max_gpus else None)
            or ("skipped: the recording's budget was spent" if left < MIN_LEFT_S else None)
        )
        if reason:
            out.append(not_run_record(name, demo, gpus, args, part, reason))
            print(f"[{tag}] {part}: {name}: not run: {reason}", flush=True)
            continue
        print(
            f"[{tag}] {part}: {name} on {gpus} GPU(s), {left:.0f} s of the budget left ...",
            flush=True,
        )
        run = {**run_one(name, demo, gpus, args, min(timeout_s, left), show), "part": part}
        print(f"[{tag}] {part}: {name}: {status(run)} ({run['seconds']} s)", flush=True)
        out.append(run)
    return out


def mean_losses(results: list[dict]) -> list[float]:
    """The global loss per step: the mean over the ranks that report one (dp ranks, or the last
    stage)."""
    per_rank = [r["losses"] for r in results if r.get("losses")]
    steps = max((len(x) for x in per_rank), default=0)
    out = []
    for k in range(steps):
        vals = [x[k] for x in per_rank if k < len(x) and x[k] is not None]
        out.append(sum(vals) / len(vals) if vals else float("nan"))
    return out


def loss_verdict(results: list[dict], tolerance: float = 0.05) -> dict:
    """Whether a run's losses count: {'valid': bool, 'reason': str, 'max_ref_gap': float | None}.

    A run is invalid when its mean loss (over the ranks that report one) is not finite at some
    step, or departs from the single-GPU reference (same global batches, trained first on every
    rank) by more than ``tolerance`` at a step the reference covers. A fast run with a wrong loss
    measures nothing (Chapter 6's Gemini run: NaN from the third step on). Used by Chapters 6 and
    8's tables and the flagship benchmark (:mod:`helpers.record.flagship`).
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
        return {
            "valid": False,
            "reason": f"loss departs from the reference by {max(diffs):.3f}",
            **gap,
        }
    return {
        "valid": True,
        "reason": f"within {tolerance} of the reference" if ref else "finite (no reference)",
        **gap,
    }


# the one-GPU device call's recorders, all three (a call may run 600 s; the kit installs first)
ONE_GPU_TOTAL_S = 480


def one_gpu_commands(total_s: float = ONE_GPU_TOTAL_S) -> list[str]:
    """The one-GPU recorders' commands for the book's device call, in order, each with
    ``--budget_s``: those registered with a budget of their own (Chapter 9's ResNet, the flagship),
    then the one that takes what is left of ``total_s`` (Chapter 7's memory layouts: ``$END``, set
    by :func:`one_gpu_device_command`, minus the time now). The layouts run in order of importance,
    so the ones a long flagship leaves no time for come last. Each recorder registers its command
    in its :class:`helpers.record.cli.Recorder` (``one_gpu``, ``one_gpu_budget_s``)."""
    from helpers.record import cli

    specs = [s for s in map(cli.spec, cli.NAMES) if s.one_gpu]
    own = [s for s in specs if s.one_gpu_budget_s is not None]
    return [f"{s.one_gpu} --budget_s {s.one_gpu_budget_s:g}" for s in own] + [
        f"{s.one_gpu} --budget_s $(( END - $(date +%s) ))"
        for s in specs
        if s.one_gpu_budget_s is None
    ]


def one_gpu_device_command(
    commit: str = "<commit>", out: str = '"$OUT"', total_s: float = ONE_GPU_TOTAL_S
) -> str:
    """One bash line for a lent one-GPU machine: the kit, the commit for the provenance, the
    deadline ``END`` (``total_s`` from after the kit), then every recorder of
    :func:`one_gpu_commands` with ``--copy_to`` (each save also lands in $OUT). ``;`` between
    recorders: one that fails does not stop the next."""
    runs = " ; ".join(f"{c} --copy_to {out}" for c in one_gpu_commands(total_s))
    return (
        f"source .gpu-kit/activate.sh && export BOOK_GIT_COMMIT={commit} "
        f"&& END=$(( $(date +%s) + {total_s:g} )) && {runs}"
    )
