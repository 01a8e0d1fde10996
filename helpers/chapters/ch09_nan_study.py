"""Chapter 9, "The tp=2 bf16 NaN": the loss of each variant per step, and the first non-finite step.

Used by ``notebooks/09_quick_demos.ipynb`` for the parts ``nan`` (sequence 1,024) and ``nan2048``,
and for the CPU run of Colossal-AI's vocabulary-parallel cross-entropy in bf16
(``helpers.demos.ch09_dist_ce``: :func:`dist_ce_rows`, :func:`first_zero_gradient`).
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.chapters.ch09_records import first_rank, run_status
from helpers.figures.style import DPI, RANK_COLOURS
from helpers.run.result_types.ch09 import DistCeResult


def nan_rows(runs: list[dict]) -> list[dict]:
    """One row per run of a NaN study (parts ``nan`` and ``nan2048``): its status
    (:func:`run_status`), the loss at a few steps, the first step with a non-finite loss, logit or
    gradient, the largest logit. A run that reported its steps is shown with them whatever its
    status."""
    rows = []
    for run in runs:
        r = first_rank(run)
        if "losses" not in r:
            rows.append({"run": run["name"], "status": run_status(run)})
            continue
        bad = [
            w["step"]
            for w in r.get("watch", [])
            if not (
                w["loss"] == w["loss"] and w["logits_finite"] and w["grad_norm"] == w["grad_norm"]
            )
        ]
        watch = r.get("watch", [])
        rows.append(
            {
                "run": run["name"],
                "status": run_status(run),
                "loss at steps 0/5/10/last": " / ".join(
                    f"{r['losses'][k]:.3g}"
                    for k in (0, 5, 10, -1)
                    if -len(r["losses"]) <= k < len(r["losses"])
                ),
                "first non-finite step": bad[0] if bad else "none",
                "max |logit|": f"{max(w['logit_absmax'] for w in watch):.0f}" if watch else "",
                "non-finite gradients": ", ".join(
                    next((w["nonfinite_grads"] for w in watch if w["nonfinite_grads"]), [])
                ),
            }
        )
    return rows


def dist_ce_rows(results: list[DistCeResult]) -> list[dict]:
    """One row per margin of ``helpers.demos.ch09_dist_ce`` (rank 0's RESULT lines): the loss and
    the target logit's gradient, exact (float64) and from Colossal-AI's ``cross_entropy_1d`` in
    bf16, PyTorch's bf16 gradient, and the sum of Colossal-AI's gradient over the vocabulary (0
    when exact)."""
    return [
        {
            "margin": int(r["margin"]),
            "loss exact": f"{r['loss_exact']:.2e}",
            "loss Colossal-AI": f"{r['loss_colossal']:.2e}",
            "target grad exact": f"{r['target_grad_exact'][0]:.2e}",
            "target grad Colossal-AI": f"{r['target_grad_colossal'][0]:.2e}",
            "target grad PyTorch bf16 (CPU)": f"{r['target_grad_torch_bf16'][0]:.2e}",
            "Σ grad Colossal-AI": (
                f"{r['target_grad_colossal'][0] + r['other_grad_sum_colossal'][0]:.1e}"
            ),
        }
        for r in results
    ]


def first_zero_gradient(results: list[DistCeResult]) -> dict:
    """The first margin at which Colossal-AI's bf16 gradient of the target logit is exactly 0:
    ``{"margin", "exact_grad", "exact_loss"}`` (the exact float64 gradient and loss there); raises
    when it never is (the demo is there to show that it is)."""
    lost = next((r for r in results if r["target_grad_colossal"][0] == 0.0), None)
    if lost is None:
        raise ValueError("Colossal-AI's target gradient is never exactly 0 at these margins")
    return {
        "margin": lost["margin"],
        "exact_grad": lost["target_grad_exact"][0],
        "exact_loss": lost["loss_exact"],
    }


def _variant(run: dict):
    """What a NaN-study run varies (tensor parallel, repeated batch, gathered logits), read from its
    recorded flags, so that the same variant keeps its colour in every panel; the name if no
    flags."""
    args = run.get("args")
    return (
        ("--tp" in args, "--repeat" in args, "--parallel_output" in args) if args else run["name"]
    )


def nan_figure(*studies: list[dict], titles: tuple[str, ...] = ()):
    """Loss per step of each NaN-study run on a log scale, one panel per study (the runs of part
    ``nan``, sequence 1,024, and of ``nan2048``); a variant keeps its colour and line style across
    panels, a cross marks a non-finite step, and a run that reported no losses is left out."""
    fig, axes = plt.subplots(
        1,
        len(studies),
        figsize=(7 if len(studies) == 1 else 11, 3.2),
        dpi=DPI,
        sharey=True,
        squeeze=False,
    )
    styles: dict = {}
    for ax, runs, title in zip(axes[0], studies, list(titles) + [""] * len(studies)):
        for run in runs:
            losses = first_rank(run).get("losses", [])
            if not losses:
                continue
            colour, style = styles.setdefault(
                _variant(run),
                (
                    RANK_COLOURS[len(styles) % len(RANK_COLOURS)],
                    ("-", "--", ":", "-.")[len(styles) % 4],
                ),
            )
            ax.plot(range(len(losses)), losses, style, color=colour, lw=1.5, label=run["name"])
            bad = [k for k, x in enumerate(losses) if x != x or x in (float("inf"), float("-inf"))]
            ax.plot(bad, [1.0] * len(bad), "x", color=colour, ms=10, mew=2)
        ax.axvline(11, color="black", ls=":", lw=1)
        ax.text(11.2, 1.0, "step of the reported NaN\n(0.95 B, seq 2048)", fontsize=7)
        ax.set_yscale("log")
        ax.set_xticks(range(0, 21, 2))
        ax.set_xlabel("step")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("loss (log scale)")
    fig.tight_layout()
    return fig


def reader_status(status: str) -> str:
    """A run's :func:`helpers.chapters.ch09_records.run_status` as the chapter shows it: what
    the run gives the reader (its steps, or that it did not run); the launcher's details stay in
    the appendix."""
    if status.startswith("not ok: every rank reported all"):
        steps = status.split("reported all ")[1].split(" steps")[0]
        return f"all {steps} steps reported, then the launch did not end cleanly"
    if status.startswith("not run"):
        return "not run"
    return status
