"""``make test-gpu``: the GPU-marked tests and every notebook's GPU path, recorded.

    python -m helpers.record.gpu_suite [--record] [pytest arguments ...]

Two pytest runs, as the README describes (the GPU-marked tests, then every notebook re-executed
with ``nbval --nbval-lax``). This module is also a pytest plugin (``-p helpers.record.gpu_suite``)
that appends one JSON line per finished test to a log, so a run cut short still leaves what it did.
With ``--record`` the outcome is written to ``results/<hardware>/test_gpu.json``: for each GPU
test and each notebook, pass/fail/skip, seconds and (for notebooks) the failing cells, with the
provenance of :mod:`helpers.record.results`. Chapter 1's "Where the ranks run" says what runs where.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers.record import results
from helpers.run.env import gpu_count
from helpers.run.launch import REPO_ROOT

LOG_ENV = "BOOK_GPU_SUITE_LOG"
RECORD_ENV = "BOOK_GPU_SUITE_RECORD"  # set: the record is rewritten after every test
NBVAL = [
    "--nbval-lax",
    "--nbval-sanitize-with",
    "tests/nbval_sanitize.cfg",
    "--nbval-current-env",
    "--nbval-cell-timeout",
    "600",
]
PHASES = {"tests": ["tests", "-m", "gpu"], "notebooks": ["notebooks", *NBVAL]}


# -- the pytest plugin: one line per test, written as it finishes ------------------------------
def pytest_runtest_logreport(report) -> None:
    path = os.environ.get(LOG_ENV)
    if not path or not (report.when == "call" or report.outcome != "passed"):
        return  # a test's setup and teardown count only when they fail or skip
    reason = ""
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
    elif report.failed:
        reason = str(report.longrepr).strip().splitlines()[-1][:300] if report.longrepr else ""
    line = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "seconds": round(report.duration, 2),
        "reason": reason,
    }
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
    if os.environ.get(RECORD_ENV):
        how = json.loads(os.environ[RECORD_ENV])
        _save(Path(path), how["commands"], how["copy_to"])


# -- reading the log ---------------------------------------------------------------------------
def summarize(lines: list[dict]) -> list[dict]:
    """One entry per test function (tests) or per notebook (its cells aggregated)."""
    entries: dict[str, dict] = {}
    for line in lines:
        path, _, rest = line["nodeid"].partition("::")
        key = path if path.endswith(".ipynb") else line["nodeid"]
        e = entries.setdefault(
            key,
            {
                "name": key,
                "kind": "notebook" if key.endswith(".ipynb") else "test",
                "outcome": "passed",
                "seconds": 0.0,
                "cells": 0,
                "failed": [],
            },
        )
        e["seconds"] = round(e["seconds"] + line["seconds"], 2)
        e["cells"] += line["when"] == "call"
        if line["outcome"] == "failed":
            e["outcome"] = "failed"
            e["failed"].append({"item": rest or line["when"], "reason": line["reason"]})
        elif line["outcome"] == "skipped" and e["outcome"] == "passed":
            e["outcome"], e["reason"] = "skipped", line["reason"]
    for e in entries.values():
        if e["kind"] == "test":
            del e["cells"]
        if not e["failed"]:
            del e["failed"]
    return list(entries.values())


def totals(entries: list[dict]) -> dict:
    """How many entries passed, failed, were skipped; and their seconds."""
    out = {k: sum(e["outcome"] == k for e in entries) for k in ("passed", "failed", "skipped")}
    return {**out, "seconds": round(sum(e["seconds"] for e in entries), 1)}


def _groups(jobs: int) -> list[list[str]]:
    """The notebooks dealt round-robin into ``jobs`` groups (one pytest process each)."""
    books = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "notebooks").glob("*.ipynb"))
    return [g for g in (books[i::jobs] for i in range(max(1, jobs))) if g]


def run(extra: list[str], record: bool, jobs: int = 1, copy_to: str | None = None) -> int:
    """Both phases; returns pytest's worst exit code (5, nothing collected, counts as 0).

    ``jobs`` > 1 runs the notebooks in that many pytest processes at once (a GPU box has the
    cores; each notebook still runs its cells in order, in its own kernel).
    """
    log = Path(tempfile.mkdtemp(prefix="gpu-suite-")) / "tests.jsonl"
    phases = {"tests": PHASES["tests"]}
    phases.update(
        {
            f"notebooks {i + 1}/{jobs}" if jobs > 1 else "notebooks": [*g, *NBVAL]
            for i, g in enumerate(_groups(jobs))
        }
    )
    commands = [shlex.join(["python", "-m", "pytest", *args, *extra]) for args in phases.values()]
    env = {**os.environ, LOG_ENV: str(log)}
    if record:
        env[RECORD_ENV] = json.dumps({"commands": commands, "copy_to": copy_to})
    worst, running = 0, []
    for (phase, args), command in zip(phases.items(), commands):
        print(f"==> test-gpu, {phase}: {command}", flush=True)
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            *args,
            "-p",
            "helpers.record.gpu_suite",
            "-q",
            "-rfE",
            *extra,
        ]
        if phase == "tests" or jobs == 1:
            rc = subprocess.call(cmd, cwd=REPO_ROOT, env=env)
            worst = max(worst, 0 if rc == 5 else rc)
        else:  # each group's output to a file, shown when it ends (lines of groups never mix)
            out = tempfile.TemporaryFile(mode="w+")
            running.append(
                (
                    phase,
                    out,
                    subprocess.Popen(
                        cmd, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
                    ),
                )
            )
    for phase, out, proc in running:
        rc = proc.wait()
        out.seek(0)
        print(f"==> {phase} ended (exit code {rc}):\n{out.read()[-4000:]}", flush=True)
        worst = max(worst, 0 if rc == 5 else rc)
    if record:
        print(f"==> recorded {_save(log, commands, copy_to).relative_to(REPO_ROOT)}", flush=True)
    return worst


def _save(log: Path, commands: list[str], copy_to: str | None = None) -> Path:
    """Write the record; entries of an earlier record on this hardware that this run did not
    touch are kept with their own provenance (a re-run of the notebooks that failed)."""
    lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    entries = summarize(lines)
    here = results.provenance(" && ".join(commands))
    for e in entries:
        e["provenance"] = {k: here[k] for k in ("date", "git_commit")}
    runs = results.merge_runs(results.earlier("test_gpu"), entries)
    return results.save(
        "test_gpu",
        runs,
        here["command"],
        copy_to,
        extra={"gpu_count": gpu_count(), "totals": totals(runs)},
    )


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--record", action="store_true", help="write results/<hardware>/test_gpu.json"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=int(os.environ.get("BOOK_GPU_JOBS", "1")),
        help="notebooks in this many pytest processes at once (default 1)",
    )
    parser.add_argument("--copy_to", default=None, help="also write the record under this folder")
    args, extra = parser.parse_known_args()
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    sys.exit(run(extra, args.record, args.jobs, args.copy_to))


if __name__ == "__main__":
    main()
