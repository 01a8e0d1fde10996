"""Chapter 5's and Chapter 8's multi-node runs on one machine, recorded for readers whose machine
cannot make hosts (no root, no network namespaces): results/cpu/multinode.json.

    sudo python -m helpers.record multinode --record            # every run, about three minutes
    sudo python -m helpers.record multinode --record --only slurm

Each run is :func:`helpers.chapters.ch05_multinode.compute` of one name in
:data:`helpers.chapters.ch05_multinode.RUNS`; ``--only`` keeps the earlier recording's other runs.
"""

from __future__ import annotations

import time

from helpers.record import cli
from helpers.record.results import earlier, merge_runs, save


def record(only: list[str] | None, write: bool) -> list[dict]:
    from helpers.chapters.ch05_multinode import RUNS, compute, why_not_live

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
    from helpers.chapters.ch05_multinode import RUNS

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
