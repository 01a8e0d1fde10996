"""The profiler's compute / communication split: Chapter 8's concept figure.

:data:`EXAMPLE` is one made-up data-parallel step on two ranks, in milliseconds: a forward pass,
a backward pass whose first gradient bucket is all-reduced while the backward still runs, and a
last bucket all-reduced after it. Rank 1 computes a little slower, so rank 0 reaches the last
all-reduce first and its communication kernel runs until rank 1 has arrived: the waiting shows as
communication on the rank that waits.

:func:`split_figure` draws each rank's kernels and the three quantities that
:func:`helpers.train.profiling.split` computes from the same events: compute (the merged compute
intervals), communication hidden under compute, and exposed communication (what no compute
kernel covers). :func:`exposed_intervals` gives the exposed parts as intervals, for the drawing.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.figures.style import DPI, RANK_COLOURS
from helpers.train.profiling import is_comm, split
from helpers.train.trace import subtract

# (kernel name, start ms, end ms) per rank; names as the profiler reports them
EXAMPLE = {
    0: [
        ("forward matmuls", 0.0, 30.0),
        ("backward matmuls, last layers", 32.0, 62.0),
        ("nccl all_reduce, bucket 1", 62.0, 82.0),
        ("backward matmuls, first layers", 62.0, 95.0),
        ("nccl all_reduce, bucket 2", 95.0, 118.0),
    ],
    1: [
        ("forward matmuls", 0.0, 33.0),
        ("backward matmuls, last layers", 35.0, 66.0),
        ("nccl all_reduce, bucket 1", 66.0, 82.0),
        ("backward matmuls, first layers", 66.0, 106.0),
        ("nccl all_reduce, bucket 2", 106.0, 118.0),
    ],
}


def exposed_intervals(events: list[tuple[str, float, float]]) -> list[tuple[float, float]]:
    """The parts of the communication intervals that no compute interval covers."""
    return subtract([(a, b) for n, a, b in events if is_comm(n)],
                    [(a, b) for n, a, b in events if not is_comm(n)])  # fmt: skip


def example_splits(events: dict[int, list] | None = None) -> dict[int, dict]:
    """:func:`helpers.train.profiling.split` of each rank of ``events`` (default
    :data:`EXAMPLE`), in ms."""
    events = EXAMPLE if events is None else events
    return {
        rank: {k.replace("_us", "_ms"): v for k, v in split(ev).items()}
        for rank, ev in events.items()
    }


def split_figure(events: dict[int, list] | None = None):
    """Per rank: its compute and communication kernels, and the exposed communication, on one
    time axis; the rank's split in its label."""
    events = EXAMPLE if events is None else events
    splits = example_splits(events)
    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=DPI)
    rows, y = [], 0
    for rank in sorted(events, reverse=True):
        ev = events[rank]
        lanes = [
            ("exposed comm.", [(a, b) for a, b in exposed_intervals(ev)], RANK_COLOURS[3], "//"),
            ("communication", [(a, b) for n, a, b in ev if is_comm(n)], RANK_COLOURS[2], None),
            ("compute", [(a, b) for n, a, b in ev if not is_comm(n)], RANK_COLOURS[0], None),
        ]
        for lane, spans, colour, hatch in lanes:
            for a, b in spans:
                ax.barh(y, b - a, left=a, height=0.7, color=colour, hatch=hatch, edgecolor="white")
            rows.append(f"rank {rank}: {lane}")
            y += 1
        s = splits[rank]
        ax.text(
            max(b for _, _, b in ev) + 2,
            y - 2,
            f"compute {s['compute_ms']:.0f} ms\ncommunication {s['comm_ms']:.0f} ms\n"
            f"exposed {s['exposed_comm_ms']:.0f} ms",
            va="center",
            fontsize=7,
        )
        y += 0.6
    ticks = [k + 0.6 * (k // 3) for k in range(len(rows))]
    ax.set_yticks(ticks, rows, fontsize=7)
    ax.set_xlabel("ms in the step")
    ax.set_xlim(0, 1.25 * max(b for ev in events.values() for _, _, b in ev))
    fig.tight_layout()
    return fig
