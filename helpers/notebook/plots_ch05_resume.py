"""Chapter 5's figures of a run killed and resumed from its last checkpoint, on CPU and on GPUs.

Drawn from the losses the launches logged (the CPU demo of the chapter, and
:mod:`helpers.record.ch05` on GPUs).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from helpers.figures.style import DPI, RANK_COLOURS


def resume_figure(
    uninterrupted: list[float],
    before_kill: dict[int, float],
    resumed: list[float],
    resume_step: int,
    kill_step: int,
):
    """Chapter 5: the loss of an uninterrupted run, of a run killed at ``kill_step`` (what it
    logged) and of its resumption from the checkpoint of ``resume_step``; steps count from 1."""
    steps = np.arange(1, len(uninterrupted) + 1)
    fig, ax = plt.subplots(figsize=(7, 3), dpi=DPI)
    ax.plot(steps, uninterrupted, color="black", lw=4, alpha=0.25, label="uninterrupted run")
    killed = sorted(before_kill)
    ax.plot(
        killed,
        [before_kill[s] for s in killed],
        "o-",
        color=RANK_COLOURS[0],
        ms=4,
        lw=1.2,
        label=f"run killed at step {kill_step}",
    )
    again = steps[resume_step:]
    ax.plot(
        again,
        resumed[resume_step:],
        "s--",
        color=RANK_COLOURS[1],
        ms=4,
        lw=1.2,
        label=f"resumed from step_{resume_step:08d}",
    )
    ax.axvline(kill_step, color=RANK_COLOURS[3], lw=1, ls=":")
    ax.text(
        kill_step - 0.05,
        0.04,
        "SIGKILL",
        transform=ax.get_xaxis_transform(),
        color=RANK_COLOURS[3],
        fontsize=8,
        ha="right",
    )
    ax.axvline(resume_step + 0.5, color="grey", lw=1, ls=":")
    ax.text(
        resume_step + 0.45,
        0.04,
        "last checkpoint",
        transform=ax.get_xaxis_transform(),
        color="grey",
        fontsize=8,
        ha="right",
    )
    ax.set_xticks(steps)
    ax.set_xlabel("step"), ax.set_ylabel("loss (mean over ranks)")
    ax.set_title(
        "Killed, resumed from the last checkpoint: the same losses bit for bit", fontsize=10
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def gpu_resume_figure(record: dict):
    """Chapter 5 on GPUs (:mod:`helpers.record.ch05`): left, each layout's uninterrupted run and
    its resume after a kill; right, a tensor-parallel checkpoint resumed under data parallelism."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3), dpi=DPI, sharey=False)
    for kr, c in zip(record["kill_and_resume"], RANK_COLOURS):
        full, _, resumed = kr["runs"]
        if full.get("losses"):
            steps = np.arange(1, len(full["losses"]) + 1)
            left.plot(
                steps,
                full["losses"],
                color=c,
                lw=4,
                alpha=0.3,
                label=f"{kr['layout']} uninterrupted",
            )
        if resumed.get("losses"):
            steps = np.arange(1, len(resumed["losses"]) + 1)
            left.plot(
                steps[3:],
                resumed["losses"][3:],
                "s--",
                color=c,
                ms=3,
                lw=1,
                label=f"{kr['layout']} resumed",
            )
    left.set_title("killed at step 5, resumed from step 3", fontsize=9)
    names = {
        0: "source, uninterrupted",
        1: "target from scratch",
        2: "target resumed from the source's step 3",
    }
    rs = record["reshard"]
    for i, run in enumerate(rs["runs"]):
        if run.get("losses"):
            steps = np.arange(1, len(run["losses"]) + 1)
            style = (
                dict(lw=4, alpha=0.3)
                if i == 0
                else dict(ls="--" if i == 2 else ":", marker="s" if i == 2 else None, ms=3, lw=1.2)
            )
            shown = slice(3, None) if i == 2 else slice(None)
            right.plot(
                steps[shown],
                run["losses"][shown],
                color=RANK_COLOURS[i],
                label=f"{run['name']} ({names[i]})",
                **style,
            )
    right.set_title(f"saved as {rs['source']}, resumed as {rs['target']}", fontsize=9)
    for ax in (left, right):
        ax.set_xlabel("step"), ax.set_ylabel("loss")
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig
