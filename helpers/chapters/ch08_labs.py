"""Chapter 8, "Failure labs": what the notebook prints of each lab run and the table of verdicts.

Used by ``notebooks/08_troubleshooting.ipynb``. The labs themselves run in
:mod:`helpers.train.labs`; a fixed lab (``cpu_oom_recompute``, ``stale_kernel_lock_cleared``) ends
with one ``RESULT {json}`` line, which :func:`lab_result` reads back. :func:`mismatch_under_detail`
runs the collective-mismatch lab once more with ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, to show when
torch's collective checks find a skipped all-reduce.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import textwrap

from helpers.run.env import results_of
from helpers.train.diagnose import Diagnosis
from helpers.train.labs import EXPECTED, LabRun, lab_command

EXPECTED_KINDS = {  # every lab of the chapter -> the diagnosis it must get; a fix gets none
    **EXPECTED,
    "cpu_oom_recompute": "none",
    "stale_kernel_lock_cleared": "none",
}
WIDTH = 100  # the page's column: no printed line is wider


def lab_result(run: LabRun) -> dict:
    """The JSON object of the first ``RESULT `` line of a lab's log."""
    found = results_of(run.log.splitlines())
    if not found:
        raise ValueError(f"lab {run.name!r} printed no RESULT line:\n{run.tail(10)}")
    return found[0]


def wrap(text: str, indent: str = "  ") -> str:
    """``text`` folded to the page's width, continuation lines indented (long paths broken)."""
    return textwrap.fill(
        " ".join(text.split()), WIDTH, subsequent_indent=indent, break_on_hyphens=False
    )


def verdict(d: Diagnosis) -> str:
    """A diagnosis as the notebook prints it: kind and cause, then the fix, within the width."""
    return wrap(f"{d.kind} | {d.cause}") + ("\n" + wrap(f"fix: {d.fix}") if d.fix else "")


def lab_rows(labs: dict[str, LabRun]) -> list[dict]:
    """Chapter 8's table of the labs run: one row per lab with its diagnosis and the fix that
    :func:`helpers.train.diagnose.diagnose` proposes ("—" when it proposes none)."""
    return [
        {"lab": name, "diagnosis": run.diagnosis.kind, "fix": run.diagnosis.fix or "—"}
        for name, run in labs.items()
    ]


def steps_done(log: str) -> dict[int, list[int]]:
    """The steps each rank of a ``helpers.demos.ch08_fail`` run finished (its ``rank R step S
    loss`` lines), by rank."""
    done: dict[int, list[int]] = {}
    for rank, step in re.findall(r"rank (\d+) step (\d+) loss", log):
        done.setdefault(int(rank), []).append(int(step))
    return done


def mismatch_under_detail(timeout_s: float = 90.0) -> dict:
    """The collective-mismatch lab (rank 1 skips step 1's all-reduces) run again with
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, which wraps every collective in a check that compares the
    ranks' calls (operation, dtypes, shapes, sequence number) before it runs.

    Returns ``steps`` (the steps each rank finished), ``returncode``, ``log``, ``error`` (what
    rank 0 reports: a detected mismatch, or a monitored barrier that a rank failed to reach) and,
    for a mismatch, the ``sequence_number`` and ``op`` of rank 0's collective that failed the
    check (collectives are numbered from 0 on each rank)."""
    from helpers.run.launch import QUIET_ENV, REPO_ROOT, rank_env

    cmd, extra = lab_command("collective_mismatch")
    quiet = {**QUIET_ENV, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env = rank_env(2, {**quiet, "TORCH_DISTRIBUTED_DEBUG": "DETAIL", **extra}, force="gloo")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    try:
        log, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
    own = re.search(
        r"\[rank0\]: RuntimeError: (Detected mismatch between collectives)[^\n]*?Rank 0 is "
        r"running collective: CollectiveFingerPrint\(SequenceNumber=(\d+), OpType=(\w+)",
        log,
    )
    barrier = re.search(r"Ranks? \d+ failed to pass monitoredBarrier", log)
    return {
        "steps": steps_done(log),
        "returncode": proc.returncode,
        "log": log,
        "error": own.group(1) if own else barrier.group(0) if barrier else "",
        "sequence_number": int(own.group(2)) if own else None,
        "op": own.group(3) if own else None,
    }
