"""The hybrid layouts on 4 and 8 GPUs, recorded with provenance (Chapter 2, "On 4 and 8 GPUs").

Record on a box with 4 or 8 GPUs (results/<hardware>/multigpu.json; earlier runs on the same
hardware are kept, each with its own provenance)::

    python -m helpers.record.ch02 --record                          # every run this machine has the GPUs for
    python -m helpers.record.ch02 --record --only tp2_pp2 sp2_dp2   # some runs
    python -m helpers.record.ch02 --record --quick                  # small models -> multigpu_quick.json

On a lent machine, in one call of at most 600 s (``--copy_to``: every save is also copied to $OUT,
so what was measured comes back even if the call hits its limit; the default budget, 500 s, leaves
room for the kit's install)::

    source .gpu-kit/activate.sh && python -m helpers.record.ch02 --record --copy_to "$OUT"

No new training code: the 4-GPU layouts (tp=2 × pp=2, tp=2 × dp=2 with ZeRO-1, Ulysses sp=2 × dp=2)
and the 8-GPU dp=2 × pp=2 × tp=2 are Chapter 9's benchmark (``helpers/demos/ch09_hybrid.py``, the
0.54 B Llama with the flags that ran on 2×H200, a single-GPU reference trained in every rank),
ep=2 × dp=2 is its Mixtral demo (``helpers/demos/ch09_mixtral.py``), and the 8-rank kill-and-resume
is Chapter 5's (:func:`helpers.record.ch05.kill_and_resume`). A run needing more GPUs than the
machine has is recorded as not run with the reason; nothing is written when nothing ran.
:mod:`helpers.chapters.ch02_combining` reads the records back: which runs are missing, the verdicts, the table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from helpers.record import results
from helpers.run.launch import REPO_ROOT
from helpers.record.ch09 import HYBRID_COMMON
from helpers.record.runner import run_part

NAME, QUICK_NAME = "multigpu", "multigpu_quick"
TOLERANCE = 0.05  # the loss gap to the reference that counts as the same training (helpers.record.runner.loss_verdict)
FIRST_TIMEOUT_S = 480  # the first HybridAdam run of a fresh box JIT-compiles its kernels
KILL_RESUME_S = (
    120  # left of the budget to start a kill-and-resume: three launches, ~25 s each on 2 GPUs
)
KILL_RANK = 6  # as in the CPU test at 8 ranks: a rank that is neither 0 nor the last
QUICK_HYBRID = [
    "--preset",
    "tiny",
    "--seq",
    "256",
    "--steps",
    "6",
]  # Chapter 9's quick smoke arguments
# NVLink multicast stays off on the lent multi-GPU machines (their KINDS.md: it can take a shared host's
# GPUs out of service); helpers.run.launch passes this process's environment on to every rank
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
QUICK_MOE = ["--layers", "2", "--hidden", "256", "--seq", "256", "--steps", "4", "--ref_steps", "2"]


@dataclass(frozen=True)
class Run:
    """One recorded run: ``demo`` is ch09_hybrid, ch09_mixtral or ch05_train (kill-and-resume, whose
    ``args`` are the entry point's config)."""

    key: str
    title: str
    gpus: int
    demo: str
    args: tuple[str, ...]
    timeout_s: float = 300.0


RUNS = (  # recording order: the 8-GPU runs first (the rarer machine), the riskier extras last
    Run(
        "dp2_pp2_tp2",
        "dp=2 × pp=2 × tp=2 (the seed's 3-D example)",
        8,
        "ch09_hybrid",
        ("--tp", "2", "--pp", "2", "--mbs", "2"),
    ),
    Run(
        "kill_resume_dp4_tp2",
        "kill-and-resume at 8 ranks, dp=4 × tp=2",
        8,
        "ch05_train",
        ("--config", "helpers/configs/ch05_gpu_tp2.yaml"),
    ),
    Run(
        "tp2_pp2",
        "tp=2 × pp=2 (1F1B, mbs 4)",
        4,
        "ch09_hybrid",
        ("--tp", "2", "--pp", "2", "--mbs", "4"),
    ),
    Run("tp2_dp2_zero1", "tp=2 × dp=2, ZeRO-1", 4, "ch09_hybrid", ("--tp", "2", "--zero", "1")),
    Run(
        "sp2_dp2",
        "sp=2 (Ulysses all_to_all) × dp=2",
        4,
        "ch09_hybrid",
        ("--sp", "2", "--sp_mode", "all_to_all"),
    ),
    Run("ep2_dp2", "ep=2 × dp=2, Mixtral (ZeRO-1)", 4, "ch09_mixtral", ("--ep", "2")),
    Run(
        "dp2_pp2_tp2_zero1",
        "dp=2 × pp=2 × tp=2, ZeRO-1",
        8,
        "ch09_hybrid",
        ("--tp", "2", "--pp", "2", "--mbs", "2", "--zero", "1"),
    ),
    Run(
        "kill_resume_3d",
        "kill-and-resume at 8 ranks, dp=2 × pp=2 × tp=2",
        8,
        "ch05_train",
        ("--config", "helpers/configs/ch05_gpu_3d.yaml"),
    ),
)
KEYS = tuple(r.key for r in RUNS)


def run_named(key: str) -> Run:
    found = [r for r in RUNS if r.key == key]
    if not found:
        raise ValueError(f"unknown run {key!r}: one of {KEYS}")
    return found[0]


def demo_args(run: Run, quick: bool = False) -> list[str]:
    """The demo's full command line (Chapter 9's HYBRID_COMMON for the Llama runs, as on 2×H200)."""
    if run.demo == "ch09_hybrid":
        return [*run.args, *QUICK_HYBRID] if quick else [*HYBRID_COMMON, *run.args]
    if run.demo == "ch09_mixtral":
        return [*run.args, *QUICK_MOE] if quick else list(run.args)
    return list(run.args)  # the kill-and-resume config is already the tiny model


def not_run_reason(run: Run, gpus_here: int) -> str | None:
    """'skipped: needs 8 GPUs, this machine has 2' when the machine is too small, else None."""
    return (
        f"skipped: needs {run.gpus} GPUs, this machine has {gpus_here}"
        if gpus_here < run.gpus
        else None
    )


def attempted(run: dict) -> bool:
    """Whether a recorded run was launched (a skipped one has no results and a 'skipped: ' error)."""
    return (
        run.get("ok")
        or bool(run.get("results"))
        or not (run.get("error") or "").startswith("skipped: ")
    )


# --- recording ---------------------------------------------------------------------------------


def kill_and_resume_run(run: Run, show: str = "none", kill_rank: int = KILL_RANK) -> dict:
    """Chapter 5's uninterrupted, killed (rank 6 at step 5) and resumed runs at ``run.gpus`` ranks."""
    from helpers.record.ch05 import kill_and_resume

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
    """:func:`helpers.record.results.merge_runs`, where a run not run this time never replaces one that ran
    before; RUNS order."""
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
    and copy the saved file to ``copy_to``/<hardware>/ (a device's $OUT: what a command killed at its
    time limit had saved still comes back)."""
    from helpers.run.env import gpu_count

    os.environ.update(MULTICAST_OFF)
    gpus_here = gpu_count() if gpus_here is None else gpus_here
    chosen = [run_named(k) for k in keys] if keys else list(RUNS)
    chosen.sort(key=lambda r: KEYS.index(r.key))
    name = QUICK_NAME if quick else NAME
    command = (
        "python -m helpers.record.ch02 --record"
        + (" --quick" if quick else "")
        + (" --only " + " ".join(r.key for r in chosen) if keys else "")
    )
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
                print(
                    f"[multigpu] {run.key}: {'ok' if entry['ok'] else 'FAILED'} ({entry['seconds']} s)",
                    flush=True,
                )
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


def planned_layout(run: Run) -> dict[str, int]:
    """dp, pp, tp, sp (or dp, ep, moe_dp) from a run's flags and GPU count, as the plugins derive them
    (HybridParallelPlugin: dp = G / (tp·pp·sp), sp counted for all_to_all only; MoeHybridParallelPlugin:
    moe_dp = dp / ep; Chapter 5's config: data 'auto')."""
    flag = lambda f, d=1: int(run.args[run.args.index(f) + 1]) if f in run.args else d  # noqa: E731
    if run.demo == "ch05_train":
        from helpers.config.schema import load_config

        cfg = load_config(REPO_ROOT / run.args[1]).resolve(run.gpus)
        p = cfg.parallelism
        return {"dp": cfg.data_degree, "pp": p.pipeline, "tp": p.tensor}
    if run.demo == "ch09_mixtral":
        return {"dp": run.gpus, "ep": flag("--ep", 2), "moe_dp": run.gpus // flag("--ep", 2)}
    sp = flag("--sp") if "all_to_all" in run.args else 1
    return {
        "dp": run.gpus // (flag("--tp") * flag("--pp") * sp),
        "pp": flag("--pp"),
        "tp": flag("--tp"),
        "sp": sp,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--record", action="store_true", help=f"write results/<hardware>/{NAME}.json"
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"small models, same layouts ({QUICK_NAME}.json)"
    )
    parser.add_argument("--only", nargs="+", choices=KEYS, default=None, help="run only these")
    parser.add_argument(
        "--budget_s", type=float, default=500, help="skip the runs that would start after this"
    )
    parser.add_argument(
        "--copy_to", default=None, help="also copy the record here after every run (e.g. $OUT)"
    )
    parser.add_argument(
        "--show", choices=("none", "rank0", "all"), default="none", help="stream the ranks' output"
    )
    args = parser.parse_args()
    from helpers.chapters.ch02_combining import verdict, waiting

    out = record(args.only, args.quick, args.budget_s, args.record, args.show, copy_to=args.copy_to)
    for run in out:
        v = verdict(run_named(run["name"]), run)
        print(
            f"[multigpu] {run['name']}: {v['reason']} (max loss gap {v['max_ref_gap']})", flush=True
        )
    print(waiting(QUICK_NAME if args.quick else NAME), flush=True)


if __name__ == "__main__":
    main()
