"""Timelines: one row per rank or stage, one bar per recorded interval (a Gantt chart).

The one drawing of recorded events in the book: pipeline schedules (Chapter 1), a training step's
profiler trace per rank (Chapter 2) and the flagship step on one GPU (Chapter 8) all pass their
intervals here. An interval is ``(start_s, end_s, kind)``; ``kind`` picks the colour from
:data:`KIND_COLOURS` (unknown kinds get grey) and the legend lists the kinds that occur.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt

from helpers.figures.style import DPI, RANK_COLOURS

Interval = tuple[float, float, str]

# one colour per kind of work, the same in every timeline of the book
KIND_COLOURS = {
    "forward": RANK_COLOURS[0],
    "backward": RANK_COLOURS[1],
    "backward-input": RANK_COLOURS[1],
    "backward-weight": RANK_COLOURS[4],
    "compute": RANK_COLOURS[0],
    "communication": RANK_COLOURS[3],
    "send": RANK_COLOURS[3],
    "recv": RANK_COLOURS[6],
    "optimizer": RANK_COLOURS[2],
    "idle": "#EEEEEE",
}
OTHER = RANK_COLOURS[7]


def idle_fraction(intervals: Sequence[Interval], start: float, end: float) -> float:
    """The share of ``[start, end]`` that no interval covers (overlapping intervals count once)."""
    if end <= start:
        raise ValueError(f"empty window: start {start} >= end {end}")
    busy, cursor = 0.0, start
    for s, e, _ in sorted(intervals):
        s, e = max(s, cursor), min(e, end)
        if e > s:
            busy += e - s
            cursor = e
    return 1.0 - busy / (end - start)


def timeline(
    rows: Mapping[str, Sequence[Interval]],
    title: str = "",
    unit: str = "ms",
    ax=None,
    labels: Mapping[str, Sequence[str]] | None = None,
):
    """Draw ``rows`` (name → intervals in seconds) top to bottom; returns the figure.

    ``labels`` (optional, name → one text per interval) writes a short label inside each bar, such
    as the micro-batch number of a pipeline schedule. Times are shown in ``unit`` ("ms" or "s"),
    counted from the earliest start of all rows.
    """
    if not rows:
        raise ValueError("timeline needs at least one row")
    scale = {"ms": 1e3, "s": 1.0}[unit]
    t0 = min((s for ivs in rows.values() for s, _, _ in ivs), default=0.0)
    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(rows)), dpi=DPI)
    else:
        fig = ax.figure
    seen: dict[str, str] = {}
    for y, (name, ivs) in enumerate(rows.items()):
        texts = (labels or {}).get(name)
        for i, (s, e, kind) in enumerate(ivs):
            colour = KIND_COLOURS.get(kind, OTHER)
            seen.setdefault(kind, colour)
            left, width = (s - t0) * scale, (e - s) * scale
            ax.barh(y, width, left=left, height=0.7, color=colour, edgecolor="white", lw=0.5)
            if texts is not None and width > 0:
                ax.text(left + width / 2, y, texts[i], ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), list(rows))
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in seen.values()]
    ax.legend(handles, list(seen), ncol=min(len(seen), 5), fontsize=7, loc="upper right")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig
