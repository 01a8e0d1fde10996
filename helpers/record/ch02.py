"""Chapter 2's recorder on 4 and 8 GPUs: the hybrid layouts, recorded with provenance.

Record on a box with 4 or 8 GPUs (results/<hardware>/multigpu.json; earlier runs on the same
hardware are kept, each with its own provenance)::

    python -m helpers.record ch02 --record                         # every run the machine fits
    python -m helpers.record ch02 --record --only tp2_pp2 sp2_dp2  # some runs
    python -m helpers.record ch02 --record --quick                 # small models (multigpu_quick)

On a lent machine, in one call of at most 600 s (``--copy_to``: every save is also copied to $OUT,
so what was measured comes back even if the call hits its limit; the default budget, 500 s, leaves
room for the kit's install)::

    source .gpu-kit/activate.sh && python -m helpers.record ch02 --record --copy_to "$OUT"

The runs (:mod:`helpers.record.ch02_runs`) need no new training code: the 4-GPU layouts (tp=2 ×
pp=2, tp=2 × dp=2 with ZeRO-1, Ulysses sp=2 × dp=2) and the 8-GPU dp=2 × pp=2 × tp=2 are Chapter
9's benchmark, ep=2 × dp=2 is its Mixtral demo, and the 8-rank kill-and-resume is Chapter 5's
(:func:`helpers.record.ch05.kill_and_resume`). A run needing more GPUs than the machine has is
recorded as not run with the reason; nothing is written when nothing ran.
:mod:`helpers.chapters.ch02_combining` reads the records back: which runs are missing, the
verdicts, the table (Chapter 2, "On 4 and 8 GPUs").
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import traceback
from pathlib import Path

from helpers.record import cli, results
from helpers.record.ch02_runs import (
    KEYS,
    KILL_RANK,
    NAME,
    QUICK_NAME,
    RUNS,
    Run,
    attempted,
    demo_args,
    not_run_reason,
    run_named,
    verdict,
    waiting,
)
from helpers.record.runner import run_part
from helpers.run.launch import REPO_ROOT
from helpers.record.ch05 import kill_and_resume
from helpers.run import env

FIRST_TIMEOUT_S = 480  # the first HybridAdam run of a fresh box JIT-compiles its kernels
KILL_RESUME_S = 120  # left of the budget for a kill-and-resume: 3 launches, ~25 s each on 2 GPUs
# NVLink multicast stays off on the lent multi-GPU machines (it can take a shared host's GPUs out
# of service); helpers.run.launch passes this process's environment on to every rank
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def kill_and_resume_run(run: Run, show: str = "none", kill_rank: int = KILL_RANK) -> dict:
    """Chapter 5's uninterrupted, killed (rank 6 at step 5) and resumed runs at ``run.gpus``
    ranks."""
    record = {
        "name": run.key,
        "demo": run.demo,
        "gpus": run.gpus,
        "args": list(run.args),
        "results": [],
        "kill_rank": kill_rank,
    }
    workdir = Path(tempfile.mkdtemp(prefix="multigpu-"))
    start = time.monotonic()
    try:
        kr = kill_and_resume(
            run.key,
            workdir,
            show,
            config=str(REPO_ROOT / run.args[1]),
            nproc=run.gpus,
            kill_rank=kill_rank,
        )
        full, killed, resumed = kr["runs"]
        ok = full["ok"] and resumed["ok"] and not killed["ok"] and "max_loss_diff" in kr
        record.update(
            ok=ok,
            kill_and_resume=kr,
            **(
                {}
                if ok
                else {
                    "error": next(
                        (r.get("error") for r in (full, resumed) if not r["ok"]),
                        "the killed run did not fail, or the comparison is missing",
                    )
                }
            ),
        )
    except Exception:  # noqa: BLE001 - a failing comparison is recorded, the recording goes on
        record.update(ok=False, error=traceback.format_exc()[-3000:])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    record["seconds"] = round(time.monotonic() - start, 1)
    return record


def merge(earlier: dict | None, new: list[dict]) -> list[dict]:
    """:func:`helpers.record.results.merge_runs`, where a run not run this time never replaces one
    that ran before; RUNS order."""
    out = results.merge_runs(
        earlier, new, replaces=lambda r, old: attempted(r) or not attempted(old)
    )
    return sorted(out, key=lambda r: KEYS.index(r["name"]) if r["name"] in KEYS else len(KEYS))


def record(
    keys: list[str] | None = None,
    quick: bool = False,
    budget_s: float = 500,
    save_results: bool = False,
    show: str = "none",
    gpus_here: int | None = None,
    copy_to: str | Path | None = None,
) -> list[dict]:
    """Launch the chosen runs that fit this machine, in RUNS order; save after every launched run,
    and copy the saved file to ``copy_to``/<hardware>/ (a device's $OUT: what a command killed at
    its time limit had saved still comes back). NVLink multicast is off in this process's
    environment while it records, and only then (:data:`MULTICAST_OFF`)."""
    from unittest import mock

    with mock.patch.dict(os.environ, MULTICAST_OFF):
        return _launch_runs(keys, quick, budget_s, save_results, show, gpus_here, copy_to)


def _launch_runs(keys, quick, budget_s, save_results, show, gpus_here, copy_to) -> list[dict]:
    gpus_here = env.gpu_count() if gpus_here is None else gpus_here
    chosen = [run_named(k) for k in keys] if keys else list(RUNS)
    chosen.sort(key=lambda r: KEYS.index(r.key))
    name = QUICK_NAME if quick else NAME
    words = ["--record"] + (["--quick"] if quick else [])
    command = cli.command("ch02", words + (["--only", *(r.key for r in chosen)] if keys else []))
    deadline, compiled, out, path = time.monotonic() + budget_s, quick, [], None
    earlier = results.earlier(name) if save_results else None
    for run in chosen:
        reason = not_run_reason(run, gpus_here)
        if run.demo == "ch05_train" and not reason:
            if deadline - time.monotonic() < KILL_RESUME_S:
                reason = "skipped: the recording's budget was spent"
            else:
                print(f"[multigpu] {run.key}: kill-and-resume on {run.gpus} GPUs ...", flush=True)
                entry = {**kill_and_resume_run(run, show), "part": f"{run.gpus} GPUs"}
                verdict = "ok" if entry["ok"] else "FAILED"
                print(f"[multigpu] {run.key}: {verdict} ({entry['seconds']} s)", flush=True)
        if run.demo != "ch05_train" or reason:
            timeout = run.timeout_s if compiled or run.demo != "ch09_hybrid" else FIRST_TIMEOUT_S
            entry = run_part(
                "multigpu",
                f"{run.gpus} GPUs",
                [(run.key, run.demo, run.gpus, demo_args(run, quick), timeout)],
                deadline,
                show,
                not_run=reason,
            )[0]
            compiled = compiled or (attempted(entry) and run.demo == "ch09_hybrid")
        out.append(entry)
        if save_results and attempted(entry):  # a recording cut short keeps what it measured
            path = results.save(name, merge(earlier, out), command)
            if copy_to:
                (Path(copy_to) / path.parent.name).mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, Path(copy_to) / path.parent.name / path.name)
    if save_results:
        print(
            f"[multigpu] wrote {path}"
            if path
            else f"[multigpu] nothing ran on this machine ({gpus_here} GPUs): nothing written",
            flush=True,
        )
    return out


def _record(args) -> None:
    out = record(args.only, args.quick, args.budget_s, args.record, args.show, copy_to=args.copy_to)
    for run in out:
        v = verdict(run_named(run["name"]), run)
        print(
            f"[multigpu] {run['name']}: {v['reason']} (max loss gap {v['max_ref_gap']})", flush=True
        )
    print(waiting(QUICK_NAME if args.quick else NAME), flush=True)


SPEC = cli.Recorder(
    "ch02",
    "Chapter 2 on 4 and 8 GPUs: the 3-D layouts, ep=2 × dp=2, the 8-rank kill-and-resume",
    f"{NAME}.json (earlier runs on the same hardware kept)",
    _record,
    flags=("quick", "only", "budget_s", "copy_to", "show"),
    quick=f"small models, same layouts ({QUICK_NAME}.json)",
    only=KEYS,
    budget_s=500,
)
