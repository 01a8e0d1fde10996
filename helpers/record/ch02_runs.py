"""Chapter 2's runs on 4 and 8 GPUs (Chapter 2, "On 4 and 8 GPUs"): what each runs, on what layout.

Each :class:`Run` is a demo that already exists: Chapter 9's benchmark (``ch09_hybrid``, the 0.54 B
Llama with the flags that ran on 2×H200) for the 3-D layouts, its Mixtral demo (``ch09_mixtral``)
for ep=2 × dp=2, and Chapter 5's entry point (``ch05_train``) for the 8-rank kill-and-resume.
:func:`planned_layout` derives each run's degrees as the plugins do. The recorder is
:mod:`helpers.record.ch02`; :mod:`helpers.chapters.ch02_combining` reads its records back.
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.record.ch09 import HYBRID_COMMON
from helpers.run.launch import REPO_ROOT

NAME, QUICK_NAME = "multigpu", "multigpu_quick"
# the loss gap to the reference that counts as the same training (runner.loss_verdict)
TOLERANCE = 0.05
KILL_RANK = 6  # as in the CPU test at 8 ranks: a rank that is neither 0 nor the last
QUICK_HYBRID = ["--preset", "tiny", "--seq", "256", "--steps", "6"]  # Chapter 9's quick smoke args
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
    """Whether a recorded run was launched (a skipped one has no results and a 'skipped: '
    error)."""
    return (
        run.get("ok")
        or bool(run.get("results"))
        or not (run.get("error") or "").startswith("skipped: ")
    )


def planned_layout(run: Run) -> dict[str, int]:
    """dp, pp, tp, sp (or dp, ep, moe_dp) from a run's flags and GPU count, as the plugins derive
    them (HybridParallelPlugin: dp = G / (tp·pp·sp), sp counted for all_to_all only;
    MoeHybridParallelPlugin: moe_dp = dp / ep; Chapter 5's config: data 'auto')."""

    def flag(f: str, d: int = 1) -> int:
        return int(run.args[run.args.index(f) + 1]) if f in run.args else d

    if run.demo == "ch05_train":
        from helpers.config.loading import load_config

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
