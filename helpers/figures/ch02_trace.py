"""Chapter 2's figure of one training step as a trace, on 4 ranks (D = T = 2), in both orders of
the gradient all-reduce.

:func:`trace_figure` draws the traces that ``helpers/demos/ch02_trace.py`` recorded on every rank
(:class:`helpers.train.trace.StepTrace`) with :func:`helpers.figures.timeline.timeline`: one panel
per order, per rank a row of compute, exposed communication and idle time, and under it a row of
all its communication.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.figures.style import DPI
from helpers.figures.timeline import timeline
from helpers.run.result_types.ch02 import TraceResult
from helpers.train.trace import traces_of

ORDERS = {"after": "all-reduce after the backward", "overlap": "all-reduce from hooks"}


def trace_figure(results: list[TraceResult]):
    """Two panels, one per order; per rank a row of compute / exposed communication / idle and
    under it a row of all its communication (what lies under a compute bar is overlapped)."""
    fig, axes = plt.subplots(2, 1, figsize=(9, 8), dpi=DPI)
    coords = {r["rank"]: r["coords"] for r in results}
    for ax, (order, what) in zip(axes, ORDERS.items()):
        panel = {}
        for rank, t in sorted(traces_of(results, order).items()):
            c = coords[rank]
            panel[f"rank {rank} (r_D {c['dp']}, r_T {c['tp']})"] = t.intervals()
            panel[f"rank {rank}: its communication"] = t.comm_intervals()
        timeline(panel, title=f"One step, D = 2 × T = 2: gradient {what}", ax=ax)
    fig.tight_layout()
    return fig
