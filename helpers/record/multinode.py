"""Chapter 5's and Chapter 8's multi-node runs on one machine, recorded for readers whose machine
cannot make hosts (no root, no network namespaces): results/cpu/multinode.json.

    sudo python -m helpers.record multinode --record            # every run, about three minutes
    sudo python -m helpers.record multinode --record --only slurm

Each run is :func:`helpers.cluster.runs.compute` of one name in :data:`helpers.cluster.runs.RUNS`;
``--only`` keeps the earlier recording's other runs. :func:`result` runs one live, through
:func:`helpers.run.shared.once` (so a test and the notebook that show the same run make it once
per test run), where this machine can, else returns its recording with the provenance
(:func:`recorded`).
"""

from __future__ import annotations

import json
import time

from helpers.cluster.runs import compute, why_not_live, RUNS
from helpers.record import cli
from helpers.record.results import RESULTS_DIR, earlier, merge_runs, save
from helpers.run.shared import once


def record(only: list[str] | None, write: bool) -> list[dict]:
    runs = []
    for name in only or list(RUNS):
        why = why_not_live(name)
        if why:
            raise SystemExit(f"{name} cannot run on this machine: {why}")
        start = time.monotonic()
        print(f"==> {name}: {RUNS[name][2]}", flush=True)
        runs.append({"name": name, **compute(name)})
        print(f"    done in {time.monotonic() - start:.1f} s", flush=True)
    if write:
        words = ["--record"] + (["--only", *only] if only else [])
        path = save("multinode", merge_runs(earlier("multinode"), runs), cli.command(NAME, words))
        print(f"==> wrote {path}")
    return runs


NAME = "multinode"


def _names() -> tuple[str, ...]:
    return tuple(RUNS)


SPEC = cli.Recorder(
    NAME,
    "Chapters 5 and 8: torchrun, colossalai run --hostfile and SLURM across hosts made on this "
    "machine, node faults, and the two mesh orders on a slower link (needs root)",
    "multinode.json",
    lambda args: record(args.only, args.record),
    flags=("only",),
    only=_names(),
)


RECORD = RESULTS_DIR / "cpu" / "multinode.json"


def recorded(name: str) -> dict | None:
    """The recorded run ``name`` with its provenance under ``"provenance"``, or None.

    Not :func:`helpers.record.results.recorded`: this record is made on CPU hosts
    (``results/cpu/multinode.json``), a folder that ``results.find`` skips, and a reader wants one
    run of it, not the record."""
    if not RECORD.is_file():
        return None
    record = json.loads(RECORD.read_text())
    run = next((r for r in record["runs"] if r["name"] == name), None)
    # a run kept from an earlier recording carries its own provenance; the others the record's
    return None if run is None else {"provenance": record["provenance"], **run}


def result(name: str, fall_back: bool = False) -> dict:
    """Run ``name`` live (once per test run) where it can run, else its recording; the dict's
    ``"source"`` says which ("live", or "recorded" with the reason it did not run).

    ``fall_back=True`` (the notebook) also shows the recording when the live run fails, a SLURM job
    past its time limit on a loaded machine for instance, and says why; tests leave it off, so a
    live failure fails them."""
    why = why_not_live(name)
    if why is None:
        try:
            live = once(f"multinode:{name}", lambda: compute(name))
            return {"name": name, **live, "source": "live"}
        except Exception as e:
            if not fall_back or recorded(name) is None:
                raise
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:60]
            why = f"the live run failed: {first}"
    found = recorded(name)
    if found is None:
        raise RuntimeError(f"{name} cannot run here ({why}) and {RECORD} has no recording of it")
    return {**found, "source": "recorded", "why_not_live": why}
