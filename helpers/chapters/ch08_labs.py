"""Chapter 8, "Failure labs": what the notebook prints of each lab run and the table of verdicts.

Used by ``notebooks/08_troubleshooting.ipynb``. The labs themselves run in
:mod:`helpers.train.labs`; a fixed lab (``cpu_oom_recompute``, ``stale_kernel_lock_cleared``) ends
with one ``RESULT {json}`` line, which :func:`lab_result` reads back.
"""

from __future__ import annotations

from helpers.run.env import results_of
from helpers.train.labs import EXPECTED, LabRun

EXPECTED_KINDS = {  # every lab of the chapter -> the diagnosis it must get; a fix gets none
    **EXPECTED,
    "cpu_oom_recompute": "none",
    "stale_kernel_lock_cleared": "none",
}


def lab_result(run: LabRun) -> dict:
    """The JSON object of the first ``RESULT `` line of a lab's log."""
    found = results_of(run.log.splitlines())
    if not found:
        raise ValueError(f"lab {run.name!r} printed no RESULT line:\n{run.tail(10)}")
    return found[0]


def _say(*parts) -> str:
    """The parts joined as ``print(*parts)`` writes them."""
    return " ".join(map(str, parts))


def kernel_lock_lines(result: dict, diagnosis: str) -> list[str]:
    """Chapter 8, "A stale kernel-build lock": the three runs of ``stale_kernel_lock_cleared`` as
    three lines. Run 1 holds torch's build lock and is SIGKILLed, run 2 waits silently on the lock
    it left until the lab's timeout, :func:`helpers.run.build_lock.clear_stale` removes it, and run
    3 finishes. ``result``: the lab's :func:`lab_result`; ``diagnosis``: the kind the log got."""
    r = result
    return [
        _say(
            "run 1 held the lock:",
            r["held_by_run1"],
            "| kept while it lived:",
            r["kept_while_held"],
            "| run 1 exit code:",
            r["run1_exit"],
            "| lock left behind:",
            r["lock_left"],
        ),
        _say(
            "run 2 silent until the timeout:",
            r["run2_silent"],
            "| stale locks found:",
            r["stale_found"],
            "| removed:",
            r["removed"],
        ),
        _say(
            "run 3 exit code:",
            r["run3_exit"],
            "| finished:",
            r["run3_finished"],
            "| lock after:",
            r["lock_after"],
            "| diagnosis:",
            diagnosis,
        ),
    ]


def lab_rows(labs: dict[str, LabRun]) -> list[dict]:
    """Chapter 8's table of the labs run: one row per lab with its diagnosis and the fix that
    :func:`helpers.train.diagnose.diagnose` proposes ("—" when it proposes none)."""
    return [
        {"lab": name, "diagnosis": run.diagnosis.kind, "fix": run.diagnosis.fix or "—"}
        for name, run in labs.items()
    ]
