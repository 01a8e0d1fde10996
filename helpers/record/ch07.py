"""Chapter 7's GPU recorder: every layout of the memory table, one torchrun each, recorded.

Record on a box with two GPUs (results/<hardware>/ch07_memory.json), about 6 minutes::

    python -m helpers.record ch07 --record          # all layouts
    python -m helpers.record ch07 --record --quick  # three layouts, a smoke test (…_quick.json)
    python -m helpers.record ch07 --record --only "TP=2 bf16"  # re-record some, keep the rest
    python -m helpers.record ch07 --record --gpus 1 --budget_s 180   # one GPU -> results/1x<GPU>/
    python -m helpers.record ch07 --record --gpus 1 --only accumulation  # + gradient accumulation

Each layout (:data:`helpers.record.ch07_layouts.LAYOUTS`) is one torchrun of
``helpers.demos.ch07_memory`` with its own timeout (:func:`helpers.record.runner.run_one`); a
failing layout is recorded with its error and the recording goes on. ``--gpus N`` runs every
layout at world size N (:func:`helpers.record.ch07_layouts.layouts_for` says which run there; the
others are recorded as not run); ``--budget_s`` records the layouts it leaves no time for as not
run. The memory model predicts each rank at the layout's own world size, so the comparison of
measured and predicted peaks is the same at 1 GPU as at 2 (:mod:`helpers.record.ch07_tables`,
:mod:`helpers.record.ch07_world`).
"""

from __future__ import annotations

import time
from pathlib import Path

from helpers.parallel.train_layout import TrainLayout
from helpers.record import cli
from helpers.record.ch07_layouts import ALL, GROUPS, NPROC, QUICK, layout_named, plan
from helpers.record.ch07_tables import table_rows
from helpers.record.results import earlier as results_earlier, format_table, merge_runs, save
from helpers.record.runner import not_run_record, run_one

DEMO = "ch07_memory"
RECORD_COMMAND = cli.command("ch07", ["--record"])
# every layout that runs on one GPU, ~5 min
ONE_GPU_COMMAND = cli.command("ch07", ["--record", "--gpus", "1"])
# the six gradient-accumulation layouts, added to the one-GPU record (~4 min)
ACCUMULATION_COMMAND = cli.command("ch07", ["--record", "--gpus", "1", "--only", "accumulation"])
# at least this in the book's one-GPU device call (it gets what the recorders before it left)
ONE_GPU_BUDGET_S = 180
# about what one layout's torchrun takes on an H200 (the 2-GPU record: 23-43 s, HybridAdam built)
LAYOUT_S = 30
MIN_LEFT_S = 40  # a layout is not started with less than this left of the budget


def within(names: list[str], budget_s: float, layout_s: float = LAYOUT_S) -> list[str]:
    """The leading ``names`` a budget should start, at ``layout_s`` each (a layout starts while at
    least MIN_LEFT_S is left): the budget arithmetic of a recording."""
    started, t = [], 0.0
    for n in names:
        if budget_s - t < MIN_LEFT_S:
            break
        started.append(n)
        t += layout_s
    return started


def run_layout(layout: TrainLayout, timeout_s: float = 150, show: str = "rank0") -> dict:
    """One torchrun of ``layout.world`` ranks; the record keeps every rank's result or the error."""
    return run_one(layout.name, DEMO, layout.world, layout.to_args(), timeout_s, show)


def _with_not_run(runs: list[dict], skipped: dict[str, str], world: int) -> list[dict]:
    """The runs, then a not-run entry for each layout that cannot run at this world size."""
    have = {r["name"] for r in runs}
    extra = [not_run_record(n, DEMO, world, [], None, why) for n, why in skipped.items()]
    return runs + [r for r in extra if r["name"] not in have]


def record(
    gpus: int = NPROC,
    quick: bool = False,
    only: list[str] | None = None,
    budget_s: float | None = None,
    save_results: bool = False,
    copy_to: str | Path | None = None,
) -> list[dict]:
    """Run the layouts of :func:`helpers.record.ch07_layouts.plan` in order at world size ``gpus``
    until ``budget_s``; with ``save_results``, save after every layout (``--only`` keeps the
    earlier record's other layouts), each save also copied to ``copy_to``."""
    names, skipped = plan(gpus, quick, only)
    words = ["--record"] + (["--quick"] if quick else []) + (["--only", *only] if only else [])
    words += (["--gpus", str(gpus)] if gpus != NPROC else []) + (
        ["--budget_s", f"{budget_s:g}"] if budget_s is not None else []
    )
    command = cli.command("ch07", words)
    name = "ch07_memory_quick" if quick else "ch07_memory"
    earlier = results_earlier(name) if only and save_results else None  # --only re-runs some
    start = time.monotonic()
    deadline = start + budget_s if budget_s is not None else float("inf")
    records, path = [], None
    print(
        f"[ch07] {len(names)} layouts at world size {gpus}"
        + (
            f", budget {budget_s:g} s (about {len(within(names, budget_s))} of them)"
            if budget_s is not None
            else ""
        )
        + "".join(f"\n[ch07] not run: {n}: {why}" for n, why in skipped.items()),
        flush=True,
    )

    def saved() -> Path:  # a layout not run this time never replaces one recorded earlier
        runs = merge_runs(earlier, records, replaces=lambda new, old: "not_run" not in new)
        return save(name, _with_not_run(runs, skipped, gpus), command, copy_to)

    for i, layout_name in enumerate(names, 1):
        left = deadline - time.monotonic()
        layout = layout_named(layout_name, gpus)
        if left < MIN_LEFT_S:
            reason = "skipped: the recording's budget was spent"
            records.append(not_run_record(layout_name, DEMO, gpus, layout.to_args(), None, reason))
            print(f"[{i}/{len(names)}] {layout_name}: not run: {reason}", flush=True)
            continue
        print(
            f"[{i}/{len(names)}] {layout_name} on {gpus} GPU(s)"
            + (f", {left:.0f} s of the budget left" if budget_s is not None else "")
            + " ...",
            flush=True,
        )
        # the first run may JIT-compile HybridAdam's CUDA and CPU kernels (minutes on a fresh box)
        records.append(run_layout(layout, timeout_s=min(480 if i == 1 else 180, left), show="none"))
        print(
            f"[{i}/{len(names)}] {table_rows(records[-1:])[0]} ({records[-1]['seconds']} s)",
            flush=True,
        )
        if save_results:  # saved after every layout: a recording cut short keeps what it measured
            path = saved()
    if save_results and path is not None:  # once more, with the layouts the budget left out
        path = saved()
    rows = table_rows(records)
    if rows:
        print(format_table(rows, list(dict.fromkeys(k for r in rows for k in r))))
    if save_results:
        print(
            f"[ch07] wrote {path}" if path else "[ch07] nothing ran: no record written", flush=True
        )
    print(f"[ch07] done in {time.monotonic() - start:.0f} s", flush=True)
    return records


def _check(args) -> None:
    plan(args.gpus or NPROC, args.quick, args.only)  # a ValueError is a usage error


SPEC = cli.Recorder(
    "ch07",
    "Chapter 7: the memory table's layouts, measured peaks against the memory model",
    "ch07_memory.json",
    lambda a: record(a.gpus or NPROC, a.quick, a.only, a.budget_s, a.record, a.copy_to),
    flags=("quick", "only", "budget_s", "gpus", "copy_to"),
    quick=f"only {QUICK} (those that run at --gpus; ch07_memory_quick.json)",
    only=tuple(GROUPS) + tuple(x.name for x in ALL),
    gpus=NPROC,
    check=_check,
    one_gpu=ONE_GPU_COMMAND,
)
