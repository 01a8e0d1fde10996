"""Chapter 5's figures of a run resumed from its checkpoint: killed and resumed, on CPU and on GPUs,
and resumed under another layout.

:func:`resume_figure` and :func:`gpu_resume_figure` draw the losses the launches logged (the CPU
demo of the chapter, and :mod:`helpers.record.ch05` on GPUs) beside the uninterrupted run's;
:func:`chunk_figure` the blocks of one weight that the ranks of ``helpers/demos/ch05_dcp.py``
saved under one layout and read under another (Chapter 5, "Changing the layout on resume").
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from helpers.figures.style import DPI, RANK_COLOURS
from helpers.run.result_types.ch05 import DcpLoadResult, DcpSaveResult


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


def chunk_figure(save: list[DcpSaveResult], load: list[DcpLoadResult], names: dict[str, str]):
    """The blocks of one weight (``WEIGHT`` of the DCP demo) that each rank wrote under FSDP2 × TP
    (``save``) and that each rank reads under FSDP2 and under TP (``load``; dashed: the saved
    blocks' edges), each layout titled by ``names``. DCP reads every overlap of a wanted block with
    a saved one."""
    from matplotlib.patches import Rectangle

    saved = save[0]["saved_chunks"]
    panels = [("saved: " + names["dp2xtp2"], [(c["rank"], c) for c in saved])]
    for layout in load[0]["layouts"]:
        blocks = [(r["rank"], r["layouts"][layout]["chunk"]) for r in load]
        panels.append(("loaded: " + names[layout], blocks))
    rows, cols = (sum(c["sizes"][i] for c in saved if c["offsets"][1 - i] == 0) for i in (0, 1))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 2.6), dpi=DPI)
    for ax, (title, blocks) in zip(axes, panels):
        for rank, c in blocks:
            (r0, c0), (h, w) = c["offsets"], c["sizes"]
            face = dict(facecolor=RANK_COLOURS[rank], edgecolor="white", lw=2, alpha=0.85)
            ax.add_patch(Rectangle((c0, r0), w, h, **face))
            k = 2 if title.startswith("saved") else 4  # off centre: clear of the dashed edges
            ax.text(c0 + w / k, r0 + h / k, f"rank {rank}", ha="center", va="center", fontsize=9)
        if not title.startswith("saved"):  # the saved blocks' edges: each rank reads 2 pieces
            for c in saved:
                (r0, c0), (h, w) = c["offsets"], c["sizes"]
                ax.add_patch(Rectangle((c0, r0), w, h, fill=False, ls="--", lw=1, ec="black"))
        ax.set_xlim(0, cols)
        ax.set_ylim(rows, 0)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(f"columns (of {cols})", fontsize=8)
        ax.set_ylabel(f"rows (of {rows})", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(save[0]["weight"], fontsize=9)
    fig.tight_layout()
    return fig
