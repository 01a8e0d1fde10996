"""Chapter 9, "The tp=2 bf16 NaN": the loss of each variant per step, and the first non-finite step.

Used by ``notebooks/09_quick_demos.ipynb`` for the parts ``nan`` (sequence 1,024) and ``nan2048``
(their tables, each run's status as recorded and as the chapter shows it, and the loss curves of
:func:`loss_curves` that :func:`helpers.figures.ch09_hybrid.nan_figure` draws), and for the CPU
run of Colossal-AI's vocabulary-parallel cross-entropy in bf16 (``helpers.demos.ch09_dist_ce``:
:func:`dist_ce_rows`, :func:`first_zero_gradient`).
"""

from __future__ import annotations

from helpers.chapters.ch09_records import first_rank, run_status
from helpers.notebook.tables import html_table
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


def reader_rows(rows: list[dict]) -> list[dict]:
    """The rows of :func:`nan_rows` with each status as the chapter shows it
    (:func:`reader_status`)."""
    return [{**row, "status": reader_status(row["status"])} for row in rows]


def glue_statuses(key: str, rows: list[dict]) -> None:
    """Glue each run's status as recorded (the ``status`` of :func:`nan_rows`) as a table under
    ``key``, for the appendix; shown nowhere in the notebook."""
    from IPython.display import HTML
    from myst_nb import glue

    statuses = [{"run": row["run"], "status as recorded": row["status"]} for row in rows]
    glue(key, HTML(html_table(statuses, list(statuses[0]))), display=False)


def loss_curves(runs: list[dict]) -> list[dict]:
    """Per run of a NaN study, what :func:`helpers.figures.ch09_hybrid.nan_figure` draws: its name,
    its recorded flags (``args``, which tell its variant) and the losses it reported (none for a
    run that did not run)."""
    return [
        {"name": run["name"], "args": run.get("args"), "losses": first_rank(run).get("losses", [])}
        for run in runs
    ]
