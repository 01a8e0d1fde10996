"""Chapter 9's figures of the sequence dimension: the recorded sequence-length sweep, and the work
of each rank at each step of ring attention.

:func:`sp_figure` draws each layout's sweep points of part ``sp`` of ``helpers.record.ch09``
(:func:`helpers.chapters.ch09_sequence_parallel.sweeps`): peak memory and tokens/s against the
sequence length, a cross at the GPU's capacity where a layout ran out of memory.
:func:`work_figure` draws the chunk pairs each rank of ``helpers/demos/ch09_ring_attention.py``
counted at each ring step (:func:`helpers.chapters.ch09_context_parallel.work_by_layout`),
contiguous blocks against zigzag, with the critical path of
:func:`helpers.parallel.cp.critical_path`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.figures.style import DPI, RANK_COLOURS
from helpers.parallel.cp import critical_path


def sp_figure(sweeps: list[dict], capacity: float | None):
    """Peak memory and tokens/s against sequence length; a cross at the GPU's capacity where the
    layout ran out of memory. ``sweeps``: per layout, its ``name`` and its sweep ``points`` (one
    per sequence length: ``seq``, ``oom``, ``peak_mib``, ``tokens_per_s``); ``capacity``: the
    GPU's, in GiB, as the recorded CUDA error states it (None: not known)."""
    fig, (mem, speed) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=DPI)
    for run, colour, shift in zip(sweeps, RANK_COLOURS, (1.0, 0.88, 1.12, 1.24)):
        ok = [p for p in run["points"] if not p["oom"]]
        mem.plot(
            [p["seq"] for p in ok],
            [p["peak_mib"] / 1024 for p in ok],
            "o-",
            color=colour,
            label=run["name"],
        )
        speed.plot(
            [p["seq"] for p in ok],
            [p["tokens_per_s"] for p in ok],
            "o-",
            color=colour,
            label=run["name"],
        )
        for p in run["points"]:
            if p["oom"]:
                mem.plot(
                    [p["seq"] * shift],
                    [capacity or p["peak_mib"] / 1024],
                    "x",
                    color=colour,
                    ms=10,
                    mew=2,
                )
    if capacity:
        mem.axhline(capacity, color="black", ls="--", lw=1)
        mem.text(2048, capacity, f"GPU capacity {capacity:.1f} GiB", va="bottom", fontsize=7)
    for ax, label in ((mem, "peak memory per GPU (GiB)"), (speed, "tokens/s (2 GPUs)")):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
        ax.set_xlabel("sequence length")
        ax.set_ylabel(label)
    speed.yaxis.set_major_formatter(lambda v, _: f"{v / 1000:.0f}k")
    mem.set_ylim(0, 1.12 * (capacity or mem.get_ylim()[1]))
    mem.set_title("× = out of memory at that length", fontsize=9)
    speed.legend(fontsize=7)
    fig.tight_layout()
    return fig


def work_figure(work: dict[str, list[list[int]]]):
    """Chunk pairs each rank computed at each ring step, counted in the run: contiguous blocks
    against zigzag, with each step's slowest rank (the step's time) summed into the critical
    path. ``work``: per layout, ``work[rank][step]``."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 2.8), dpi=DPI, sharey=True)
    for ax, (layout, rows) in zip(axes, work.items()):
        ax.imshow(rows, cmap="Blues", vmin=0, vmax=4)
        for r, row in enumerate(rows):
            for t, n in enumerate(row):
                ax.text(t, r, n, ha="center", va="center", color="white" if n > 2 else "black")
        ax.set_xticks(range(len(rows[0])))
        ax.set_yticks(range(len(rows)))
        ax.set_xlabel("ring step")
        total = [sum(row) for row in rows]
        ax.set_title(
            f"{layout}: per rank {min(total)}-{max(total)},\ncritical path {critical_path(rows)}",
            fontsize=9,
        )
    axes[0].set_ylabel("rank")
    fig.tight_layout()
    return fig
