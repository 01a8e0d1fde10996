"""The GPU recorders' shared loop: one torchrun per run, a time budget, a progress line per run.

:func:`run_one` launches one run and returns its record, the one shape of every recorder's runs
(Chapters 1, 3, 5, 7, 8, 9 and the flagship). A run that fails is kept as a record with its error
text (and any RESULT lines its ranks printed before failing), so one bad layout never costs the
rest of a recording; :func:`run_part` records a run that would start after the budget as skipped,
and one that needs more GPUs than the recording's ``--gpus`` as not run ("needs 2 GPUs"); a run
still going prints a line every 30 s (whether a run's losses count:
:func:`helpers.train.reference.loss_verdict`). :func:`demo_parser` is a replayed demo's command
line, checked without importing the demo.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import re
import shlex
import threading
import time
from typing import Callable

from helpers.run import env
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
    if gpus is None:
        return None
    if gpus < 1:
        return f"--gpus must be at least 1, got {gpus}"
    have = env.gpu_count()  # looked up at call time (a test stands in for the GPUs)
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


# the library module whose ``parser()`` is a demo's command line, for the demos whose run lists
# the recorders replay: a recorder or test checks its flags without importing the demo
PARSERS = {
    "ch05_train": "helpers.train.run_config",
    "ch07_memory": "helpers.train.layout_step",
    "ch08_train": "helpers.train.framework_run",
    "ch09_hybrid": "helpers.train.benchmark",
    "ch09_mixtral": "helpers.train.moe_plugin",
    "ch09_resnet_train": "helpers.train.resnet",
    "ch09_sp_sweep": "helpers.train.seq_sweep",
}


def demo_parser(demo: str) -> argparse.ArgumentParser:
    """The command line of ``helpers.demos.<demo>`` (one of :data:`PARSERS`)."""
    return importlib.import_module(PARSERS[demo]).parser()
