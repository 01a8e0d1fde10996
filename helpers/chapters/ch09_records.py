"""Chapter 9's recorded GPU runs: the record of a part, its provenance, and each run's status.

Used by ``notebooks/09_quick_demos.ipynb`` and the other ``ch09_*`` modules. The GPU tables read
what ``python -m helpers.record ch09 --record`` wrote (``results/<hardware>/ch09_<part>.json``); a
part not recorded yet is reported as such, so the notebook runs before and after the GPU box has
been used.
"""

from __future__ import annotations

from helpers.record import results
from helpers.record.results import describe
from helpers.run.result_types.records import Record


def recorded(part: str, gpus: int = 2) -> Record | None:
    """The record of one part (``ch09_<part>``) made on ``gpus`` GPUs (default 2, the chapter's; 1:
    the one-GPU record of ``--gpus 1``); failing that, that part's runs of the quick smoke recording
    (``ch09_quick``, small models, marked ``quick``); None when neither exists."""
    return results.recorded("ch09", part, gpus=gpus, quick=True)


def provenance(part: str) -> str:
    record = recorded(part)
    if record is None:
        return (
            f"ch09_{part}: not recorded yet. On a box with 2 GPUs: "
            f"python -m helpers.record ch09 --record --only {part}"
        )
    note = (
        "Only the quick smoke recording (small models, few steps) exists for this part.\n"
        if record.get("quick")
        else ""
    )
    return note + describe(record)


def first_rank(run: dict, key: str = "losses") -> dict:
    """The result line of a run that carries ``key`` (the last pipeline stage's), else the first."""
    found = [r for r in run.get("results", []) if key in r]
    return found[0] if found else (run.get("results") or [{}])[0]


def failure_line(run: dict) -> str:
    """'failed: ' and the last line of a run's stored error (cut to 120 characters)."""
    lines = [x for x in run.get("error", "").strip().splitlines() if x.strip()]
    return ("failed: " + lines[-1][:120]) if lines else "failed"


def _complete(run: dict) -> bool:
    """Every rank of the run printed a result with all its steps' losses."""
    res = [r for r in run.get("results", []) if "losses" in r]
    return (
        bool(res)
        and len(res) == run.get("gpus", len(res))
        and all(len(r["losses"]) == r.get("steps", len(r["losses"])) for r in res)
    )


def run_status(run: dict) -> str:
    """What the record says of a run, plainly: 'ok'; 'not run: <reason>' for a run the recorder
    skipped; for a run whose launch failed after every rank had reported all its steps, that it did,
    and what the stored error text holds (the launcher's message is stored cut to its last 3,000
    characters, which may hold only the end of a rank's RESULT line); otherwise 'failed: <last line
    of the error>'."""
    if run.get("ok"):
        return "ok"
    error = (run.get("error") or "").strip()
    if run.get("not_run"):
        return "not run: " + run["not_run"].removeprefix("skipped: ")
    if not run.get("results") and error.startswith("skipped: "):
        return "not run: " + error.removeprefix("skipped: ")
    if _complete(run) and run.get("failure"):  # recorded since the recorder keeps the cause
        cause = (
            f"the launch was killed at its {run['timeout_s']:g} s timeout"
            if run["failure"] == "timeout"
            else f"rank {run.get('failed_rank')} exited with code {run.get('returncode')}"
        )
        return (
            f"not ok: every rank reported all {len(first_rank(run)['losses'])} steps, then {cause}"
        )
    if _complete(run):
        last = error.splitlines()[-1] if error else ""
        result_tail = "Traceback" not in error and last.endswith("}") and '"steps":' in last
        held = (
            "the end of a rank's RESULT line, no traceback"
            if result_tail
            else "failed: " + last[:120]
        )
        steps = first_rank(run)["losses"]
        return (
            f"not ok: every rank reported all {len(steps)} steps, then the launch did not end "
            f"cleanly (stored error text: {held})"
        )
    return failure_line(run)
