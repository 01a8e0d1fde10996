"""Chapter 12's published trainings as tables: the layouts, each run's figures with their sources
and quotes, and the mechanisms the sources name where the book's models miss a figure.

Used by ``notebooks/12_in_practice.ipynb`` and ``tests/test_ch12_published.py``. The data are
:data:`helpers.chapters.ch12_published.RUNS` (``helpers/data/published_trainings.yaml``) and
``helpers/data/model_gaps.yaml``: one entry per mechanism a source states (run family, mechanism,
source, verbatim quote), read where Chapter 12 explains a prediction that misses by more than
15 %.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from helpers.chapters.ch12_published import RUNS, SOURCES, STATUSES, Run
from helpers.cost.hardware import GPU_KIND

GAPS_FILE = Path(__file__).resolve().parent.parent / "data" / "model_gaps.yaml"


@lru_cache(maxsize=1)
def gaps() -> tuple[dict, ...]:
    """The mechanisms the sources name, each {run, mechanism, source, quote[, note]}."""
    entries = yaml.safe_load(GAPS_FILE.read_text())
    for e in entries:
        missing = {"run", "mechanism", "source", "quote"} - set(e)
        if missing or not str(e["quote"]).strip():
            raise ValueError(f"{GAPS_FILE.name}: entry {e} lacks {sorted(missing) or 'a quote'}")
    return tuple(entries)


def gap(run: str, mechanism: str) -> dict:
    """The entry of ``run``'s family naming ``mechanism`` (a KeyError names what exists)."""
    for e in gaps():
        if e["run"] == run and e["mechanism"] == mechanism:
            return e
    have = sorted(e["mechanism"] for e in gaps() if e["run"] == run)
    raise KeyError(f"no {mechanism!r} for {run!r}; the file has {have}")


def degree(run: Run, name: str):
    """A degree as the sources give it, marked ``*`` where it is the chapter's assumption."""
    value = getattr(run, name)
    if value is None:
        return "?"
    fig = run.figures.get(name)
    return f"{value}*" if fig and fig["status"] == "assumed" else value


def layout_row(run: Run) -> dict:
    """One row of the sortable table: the layout as published (``*``: assumed, not published)."""
    params = run.model.params / 1e9
    published = "; ".join(f"{k} {v}" for k, v in run.reported.items()) or "-"
    return {
        "training": run.training,
        "run": run.key,
        "params B": round(params, 1),
        "GPUs": run.gpus,
        "GPU": GPU_KIND[run.cluster],
        "TP": degree(run, "tp"),
        "CP": run.cp,
        "PP": degree(run, "pp"),
        "DP": degree(run, "dp"),
        "EP": run.ep,
        "sharding": run.sharding,
        "batch (seq)": degree(run, "global_batch"),
        "seq": run.seq,
        "micro-batch": degree(run, "micro_batch"),
        "schedule": run.schedule,
        "chunks": degree(run, "chunks"),
        "recompute": degree(run, "recompute"),
        "precision": run.precision,
        "published": published,
        "source": SOURCES[run.source],
    }


def figure_rows(run: Run) -> list[dict]:
    """The run's figures as table rows: figure, value, status, source, quote (and note)."""
    return [
        {
            "figure": name,
            "value": fig["value"],
            "status": fig["status"],
            "source": fig["source"],
            "quote": fig["quote"],
            "note": fig.get("note", ""),
        }
        for name, fig in run.figures.items()
    ]


def sources_rows() -> list[dict]:
    """One row per source: what it is, its runs, and how many of their figures are published,
    derived and assumed."""
    rows = []
    for key, cite in SOURCES.items():
        runs = [r for r in RUNS if r.source == key]
        count = {
            s: sum(f["status"] == s for r in runs for f in r.figures.values()) for s in STATUSES
        }
        rows.append({"source": key, "cite": cite, "runs": ", ".join(r.key for r in runs), **count})
    return rows


HEADLINES = (
    "TFLOP/s per GPU",
    "BF16 MFU %",
    "H800 GPU hours per 1e12 tokens",
    "hours",
    "memory GB per GPU",
)


def headline_rows() -> list[dict]:
    """Each run's reported throughput (and memory) with the sentence that states it."""
    rows = []
    for run in RUNS:
        for name in (n for n in HEADLINES if n in run.figures):
            fig = run.figures[name]
            rows.append(
                {
                    "run": run.key,
                    "figure": name,
                    "value": fig["value"],
                    "source": fig["source"],
                    "quote": " ".join(str(fig["quote"]).split()),
                }
            )
    return rows


def assumed_rows() -> list[dict]:
    """Every figure no source states, with what the chapter takes and why."""
    return [
        {"run": r["run"], "figure": r["figure"], "taken": r["value"], "why": r["quote"]}
        for run in RUNS
        for r in ({"run": run.key, **row} for row in figure_rows(run))
        if r["status"] == "assumed"
    ]
