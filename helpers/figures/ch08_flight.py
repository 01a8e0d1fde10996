"""Chapter 8's figure of the two Flight Recorder labs: what each rank had issued when it hung.

Used by ``notebooks/08_troubleshooting.ipynb``. :func:`hang_figure` draws, for the skip lab, each
rank's recorded collectives labelled with the training step that issued them
(:func:`helpers.chapters.ch08_flight.issued_by`, read from the dumps) and, for the pipeline lab,
each stage's actions as its rank reported them (:class:`helpers.run.result_types.ch08.FlightResult`
of :mod:`helpers.demos.ch08_flight`); the collective or action a rank waits in is hatched.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.figures.style import DPI, RANK_COLOURS
from helpers.run.result_types.ch08 import FlightResult
from helpers.train import flight_labs as fl


def _box(ax, x: float, y: float, colour, pending: bool, text: str) -> None:
    from matplotlib.patches import Rectangle

    hatch = "//" if pending else None
    ax.add_patch(Rectangle((x, y), 0.9, 0.8, fc=colour, ec="black", hatch=hatch, alpha=0.85))
    ax.text(x + 0.45, y + 0.4, text, ha="center", va="center", fontsize=7)


def hang_figure(issued: dict[int, list[str]], stages: list[FlightResult]):
    """Left: each rank's recorded collectives in the skip lab (``issued``: rank -> the step that
    issued each, or the collective's name), numbered as the recorder numbers them and coloured by
    that step; the last, pending, hatched. Right: each pipeline stage's actions (``stages``: the
    pipeline lab's ranks), done and (hatched) the one it was stuck in."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 2.8), dpi=DPI, width_ratios=[3, 2])
    for y, (rank, labels) in enumerate(issued.items()):
        for i, label in enumerate(labels):
            colour = RANK_COLOURS[int(label[-1]) if label.startswith("step") else 7]
            _box(a, i + 1, y, colour, i == len(labels) - 1, label.replace("step ", "s"))
    a.set(xlim=(0.8, 14.2), ylim=(2, -0.2), yticks=[0.4, 1.4], yticklabels=["rank 0", "rank 1"])
    a.set_xlabel("collective number (the recorder's collective_seq_id)", fontsize=8)
    a.set_title(
        f"rank {fl.SKIP_RANK} skips step {fl.SKIP_STEP}: each box is the step that issued it",
        fontsize=9,
    )
    kinds = {"F": RANK_COLOURS[2], "B": RANK_COLOURS[0], "a": RANK_COLOURS[7]}
    for stage, r in enumerate(sorted(stages, key=lambda r: r["rank"])):
        for i, act in enumerate((r["actions"] + ["all_reduce"])[: len(r["done"]) + 1]):
            label = "AR" if act == "all_reduce" else act
            _box(b, i, stage, kinds[act[0]], i == len(r["done"]), label)
    n = len(stages)
    b.set(xlim=(-0.2, 6.2), ylim=(n, -0.2), yticks=[s + 0.4 for s in range(n)])
    b.set_yticklabels([f"stage {s}" for s in range(n)])
    b.set_xlabel("actions in order (hatched: where the stage waits)", fontsize=8)
    m = sum(x.startswith("F") for x in stages[-1]["actions"])
    b.set_title(f"naive 1F1B, m = {m} < P = {n}", fontsize=9)
    for ax in (a, b):
        ax.tick_params(labelsize=8)
    fig.tight_layout()
    return fig
