"""Chapter 1's timelines of the pipeline schedules, measured on P = 4 ranks.

:func:`schedules_figure` draws one Gantt chart per schedule on the stage clock, each bar marked
with its micro-batch, and :func:`wall_figure` one schedule on the wall clock with every send and
receive, both with :func:`helpers.figures.timeline.timeline` from the events each rank of
``helpers/demos/ch01_pp_schedules.py`` reported (per schedule, as
:func:`helpers.chapters.ch01_pp_schedules.per_schedule` groups them), in the run that
:func:`helpers.chapters.ch01_pp_schedules.summary` picked. :func:`stage_intervals` reads one run's
intervals on one clock, for these figures and for the measured idle shares.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.figures.timeline import KIND_COLOURS, timeline
from helpers.parallel.pp_schedules import KIND_NAMES

COMPUTE = set(KIND_NAMES.values())


def stage_intervals(ranks: list[dict], repeat: int, clock: str, kinds=COMPUTE) -> dict[str, list]:
    """Per stage, the (start, end, kind) of run ``repeat`` on ``clock`` whose kind is in
    ``kinds``."""
    return {
        f"stage {r['rank']}": [tuple(e[:3]) for e in r["events"][repeat][clock] if e[2] in kinds]
        for r in ranks
    }


def _mark(label: str) -> str:
    """ "F3" -> "3"; "B3.1" (chunk 1) -> "3'": the micro-batch, primed on a stage's second chunk."""
    mb, _, chunk = label.lstrip("FBW").partition(".")
    return mb + "'" * int(chunk or 0)


def schedules_figure(runs: dict[str, list[dict]], rows: list[dict]):
    """One Gantt chart per schedule of ``rows`` on the stage clock (its run ``best``), on a shared
    time axis; each bar carries its micro-batch (primed on the second chunk). ``runs``: each
    schedule's ranks with their events."""
    fig, axes = plt.subplots(len(rows), 1, figsize=(9, 1.8 * len(rows)), sharex=True, dpi=110)
    for ax, s in zip(axes, rows):
        ranks = runs[s["name"]]
        labels = {
            f"stage {r['rank']}": [
                _mark(e[3]) for e in r["events"][s["best"]]["stage"] if e[2] in COMPUTE
            ]
            for r in ranks
        }
        title = f"{s['name']}: idle {100 * s['stage']:.0f} % (bubble {100 * s['bubble']:.0f} %)"
        timeline(stage_intervals(ranks, s["best"], "stage"), title=title, ax=ax, labels=labels)
        ax.get_legend().remove()
        ax.set_xlabel("")
    axes[-1].set_xlabel("stage clock (ms)")
    kinds = ["forward", "backward", "backward-input", "backward-weight"]
    handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLOURS[k]) for k in kinds]
    fig.legend(handles, kinds, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def wall_figure(runs: dict[str, list[dict]], rows: list[dict], name: str = "1f1b"):
    """The same run of ``name`` on the wall clock, with every send and receive."""
    s = next(r for r in rows if r["name"] == name)
    data = stage_intervals(runs[name], s["best"], "wall", COMPUTE | {"send", "recv"})
    title = f"{name} on the wall clock: idle {100 * s['wall']:.0f} % (receives are waits)"
    return timeline(data, title=title)
