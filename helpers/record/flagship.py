"""Chapter 8's flagship benchmark recorder: one 0.94 B Llama under PyTorch FSDP2 and Colossal-AI.

    python -m helpers.record flagship --record       # every run (~9 min on 2×H200) -> flagship.json
    python -m helpers.record flagship --record --only "FSDP2, eager" "LowLevelZero ZeRO-2, eager"
    python -m helpers.record flagship --quick        # a tiny shape (on CPU: gloo, fp32, FSDP2 only)
    python -m helpers.record flagship --record --head_to_head  # the best runs, alternated 3 rounds
    python -m helpers.record flagship --record --gpus 1 --budget_s 220   # one GPU: WORLD1_RUNS
    python -m helpers.record flagship --record --gpus 1 --levers levers  # one lever per row

The runs are :mod:`helpers.record.flagship_runs`' list, each in its own torchrun
(:func:`helpers.record.runner.run_part`); each prints one JSON line, its
:func:`helpers.record.flagship_summary.summarize` row (tokens/s per GPU, MFU, peak memory, the loss
after n steps and its distance from a single-GPU reference trained on the same first batches).
``--head_to_head`` alternates :data:`helpers.record.flagship_runs.HEAD_TO_HEAD` in three rounds
(flagship_h2h.json) and prints :func:`helpers.record.flagship_summary.compare`'s verdict; on one
GPU (``--gpus 1``, a machine that shows exactly one) the list is
:data:`helpers.record.flagship_runs.WORLD1_RUNS`. ``--levers levers|h2h|fp8`` records one part of
:mod:`helpers.record.flagship_levers` instead (one GPU).
"""

from __future__ import annotations

import json
import time

from helpers.run import env
from helpers.record import cli, flagship_levers as fl
from helpers.record.flagship_levers import NAMES as LEVER_NAMES
from helpers.record.flagship_runs import HEAD_TO_HEAD, NPROC, RUNS, WORLD1_RUNS, run_list
from helpers.record.flagship_summary import compare, summarize
from helpers.record.runner import run_part
from helpers.record.results import save, earlier, merge_runs

DEMO = "ch08_train"
ONE_GPU_COMMAND = cli.command("flagship", ["--record", "--gpus", "1"])
# the one-GPU recording's budget in the book's device call (tests check estimate_s against it)
ONE_GPU_BUDGET_S = 220


def record(
    quick: bool,
    only: list[str] | None,
    budget_s: float,
    save_results: bool,
    show: str = "none",
    head_to_head: bool = False,
    gpus: int = NPROC,
    copy_to: str | None = None,
    levers: str | None = None,
) -> list[dict]:
    """Run the list (or the head-to-head: :data:`HEAD_TO_HEAD`, 3 interleaved rounds), one JSON
    line per run.

    ``gpus``: the world size of every run (1: :data:`WORLD1_RUNS`); ``copy_to``: also copy each
    save there."""
    start, rows, runs, path = time.monotonic(), [], [], None
    words = ["--record"] if save_results else []
    words += (["--quick"] if quick else []) + (["--head_to_head"] if head_to_head else [])
    words += (["--only", *only] if only else []) + (
        ["--gpus", str(gpus), "--budget_s", f"{budget_s:g}"] if gpus != NPROC else []
    )
    words += ["--levers", levers] if levers else []
    command = cli.command("flagship", words)
    rounds, record_name = (3, "flagship_h2h") if head_to_head else (1, "flagship")
    only = only or (list(HEAD_TO_HEAD) if head_to_head else None)
    if levers:
        return record_levers(levers, quick, budget_s, save_results, show, command, copy_to, only)
    chosen = run_list(quick, only, cpu=env.gpu_count() < gpus, rounds=rounds, gpus=gpus)
    print(f"[flagship] {len(chosen)} runs on {gpus} GPU(s), budget {budget_s:g} s", flush=True)
    for name, args, timeout_s in chosen:
        [run] = run_part(
            "flagship", "runs", [(name, DEMO, gpus, args, timeout_s)], start + budget_s, show
        )
        runs.append(run)
        rows.append(summarize(name, run))
        print(json.dumps(rows[-1]), flush=True)  # one JSON line per run
        if save_results and "seconds" in run:  # after every run that ran: a cut keeps what ran
            path = save(
                record_name + ("_quick" if quick else ""),
                [{**r, "summary": s} for r, s in zip(runs, rows)],
                command,
                copy_to,
            )
    if head_to_head:
        for row in compare(rows):
            print(json.dumps(row), flush=True)
    if save_results:
        print(
            f"[flagship] wrote {path}"
            if any("seconds" in r for r in runs)
            else "[flagship] nothing ran: no record written",
            flush=True,
        )
    print(f"[flagship] done in {time.monotonic() - start:.0f} s", flush=True)
    return rows


def record_levers(
    part, quick, budget_s, save_results, show, command, copy_to, only=None
) -> list[dict]:
    """One part of :mod:`helpers.record.flagship_levers` at world size 1, saved after every run
    with the measured matmul ceiling (and, for ``h2h``, the verdict over the rounds). ``only``:
    those runs, merged into the part's earlier record (each kept run keeps its provenance)."""
    start, runs, rows = time.monotonic(), [], []
    ceiling = fl.matmul_ceiling()
    extra = {"matmul_ceiling_tflops": ceiling, "part": part}
    chosen = [c for c in fl.runs_of(part, quick) if not only or c[0] in only]
    before = earlier(fl.PARTS[part] + ("_quick" if quick else "")) if only else None
    print(f"[flagship] {part}: {len(chosen)} runs, matmul ceiling {ceiling} TFLOP/s", flush=True)
    for name, args, timeout_s in chosen:
        [run] = run_part(
            "flagship", part, [(name, DEMO, 1, args, timeout_s)], start + budget_s, show
        )
        runs.append({**run, "matmul_ceiling_tflops": ceiling})
        rows.append(fl.row(name, run, ceiling))
        print(json.dumps({k: v for k, v in rows[-1].items() if k not in fl.BULKY}), flush=True)
        if part == "h2h":
            extra["compare"] = compare(rows)
        if save_results and "seconds" in run:
            name_saved = fl.PARTS[part] + ("_quick" if quick else "")
            path = save(
                name_saved,
                merge_runs(before, [{**r, "summary": s} for r, s in zip(runs, rows)]),
                command,
                copy_to,
                extra,
            )
            print(f"[flagship] wrote {path}", flush=True)
    for g in extra.get("compare", []):
        print(json.dumps(g), flush=True)
    print(f"[flagship] done in {time.monotonic() - start:.0f} s", flush=True)
    return rows


def _flags(p) -> None:
    p.add_argument(
        "--head_to_head",
        action="store_true",
        help="the best Colossal-AI and FSDP2 runs, 3 interleaved rounds (flagship_h2h.json)",
    )
    p.add_argument(
        "--levers",
        choices=("levers", "h2h", "fp8"),
        default=None,
        help="one part of helpers.record.flagship_levers on one GPU (flagship_levers*.json)",
    )


def _check(args) -> None:
    gpus = args.gpus or NPROC
    if args.levers and (gpus != 1 or args.head_to_head):
        raise ValueError("--levers records one GPU's lists: with --gpus 1, not --head_to_head")
    if args.head_to_head and gpus != NPROC:
        raise ValueError(f"--head_to_head alternates the {NPROC}-GPU runs: not with --gpus {gpus}")
    if not args.levers:
        run_list(args.quick, args.only, gpus=gpus)  # a ValueError names the runs there are


SPEC = cli.Recorder(
    "flagship",
    "Chapter 8: the flagship benchmark, a 0.94 B Llama under FSDP2 and Colossal-AI, knob by knob",
    "flagship.json (flagship_h2h.json with --head_to_head)",
    lambda a: record(
        a.quick,
        a.only,
        a.budget_s,
        a.record,
        a.show,
        a.head_to_head,
        a.gpus or NPROC,
        a.copy_to,
        a.levers,
    ),
    flags=("quick", "only", "budget_s", "gpus", "copy_to", "show"),
    quick="the tiny shape (flagship_quick.json)",
    only=tuple(
        dict.fromkeys([n for n, _ in RUNS] + [n for n, _, _ in WORLD1_RUNS] + list(LEVER_NAMES))
    ),
    budget_s=570,
    gpus=NPROC,
    extra=_flags,
    check=_check,
    one_gpu=ONE_GPU_COMMAND,
    one_gpu_budget_s=ONE_GPU_BUDGET_S,
)
